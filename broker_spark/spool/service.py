"""A spool and what fills it: its sources, a pump for each, the Zeek log schemas.

Both owners of a spool (the receiver process of a ``spoolPath``, a
``broker-spark node --spool`` relay) run one of these next to their endpoint:
:meth:`SpoolService.subscribe` before the endpoint peers (so peers learn the
filter in the handshake and nothing sent right after peering is missed), and
:meth:`SpoolService.take_from` for a source beside it (Zeek's ZeroMQ logger
socket), then :meth:`SpoolService.start` once it does. Each source has a pump
of its own; they append to the one spool in turn. Whoever serves the spool
asks :meth:`state` (offsets and a failure) and :meth:`status` (what a person
wants to see: per source, what arrived and what was refused), and is told of
every append through :meth:`watch`.

A spool's id (``relay-id``, made when the spool is first owned) names the
spool for its whole life: a reader that finds another id behind the same
address knows its offsets mean nothing there.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from broker_spark.spool.disk_guard import DiskGuard
from broker_spark.spool.pump import SpoolPump, SpoolSource
from broker_spark.spool.schema_history import LogSchemaHistory
from broker_spark.spool.sources import SourceCounts
from broker_spark.spool.spool import Spool, SpoolError
from broker_spark.zeek.undecodable import UNDECODABLE_TOPIC

__all__ = ["RELAY_ID_FILE", "SpoolService", "learn_sizes", "spool_id", "spool_summary"]

log = logging.getLogger(__name__)

RELAY_ID_FILE = "relay-id"

#: Messages the subscription holds before it pushes back on the peers (as the reader's).
QUEUE_SIZE = 8192


def spool_id(path: str, *, create: bool) -> str | None:
    """The spool's id: read from ``relay-id``, or made there when ``create`` (the owner)."""
    name = os.path.join(path, RELAY_ID_FILE)
    try:
        with open(name, encoding="ascii") as f:
            text = f.read().strip()
        if text:
            return text
    except (OSError, UnicodeDecodeError):
        pass
    if not create:
        return None
    text = str(uuid.uuid4())
    partial = f"{name}.{os.getpid()}"
    with open(partial, "w", encoding="ascii") as f:
        f.write(text)
    os.replace(partial, name)
    return text


#: Messages at a spool's end that its owner reads on opening it, to learn how many log
#: records a message holds (Zeek's Batches: up to 400).
SIZE_SAMPLE = 256


def learn_sizes(history: LogSchemaHistory, spool: Spool, sample: int = SIZE_SAMPLE) -> None:
    """Teach ``history`` the records per message of the last ``sample`` messages in
    ``spool``. Readers plan partitions by records; an owner that opens a spool filled
    before it started (a relay restarted over a backlog) would otherwise plan by messages,
    one partition for thousands of Batches, until new messages arrive."""
    end = spool.end_offset()
    first = max(spool.start_offset(), end - sample)
    if first >= end:
        return
    try:
        history.learn_sizes(spool.read(first, end))
    except (SpoolError, OSError) as exc:  # retention raced us, or a damaged tail
        log.warning("spool %s: could not read its last messages (%s)", spool.path, exc)


def spool_summary(spool: Spool, now_ns: int | None = None) -> dict[str, Any]:
    """Offsets, bytes and the oldest record's age of a spool (an owner's or a view)."""
    start, end = spool.start_offset(), spool.end_offset()
    oldest_age = None
    if start < end:
        with contextlib.suppress(Exception):  # retention raced us: no age this time
            first = spool.read(start, start + 1)[0]
            now = time.time_ns() if now_ns is None else now_ns
            oldest_age = max(0.0, (now - first.received_at_ns) / 1e9)
    return {
        "path": spool.path,
        "start": start,
        "end": end,
        "bytes": spool.total_bytes,
        "oldest_age_s": oldest_age,
    }


class SpoolService:
    """Appends what an endpoint receives on ``topics`` to ``spool``, and says how it goes.

    ``history`` (a :class:`LogSchemaHistory` beside the spool) learns the Zeek
    log schemas that arrive.
    """

    def __init__(
        self,
        spool: Spool,
        topics: Sequence[str],
        *,
        history: LogSchemaHistory | None = None,
        queue_size: int = QUEUE_SIZE,
        min_free_bytes: int | None = None,
    ) -> None:
        self.spool = spool
        #: holds every pump while the spool's file system is short of space (disk_guard)
        self.guard = DiskGuard(spool.path, min_free_bytes)
        self.topics = tuple(topics)
        self.history = history
        if history is not None:
            learn_sizes(history, spool)
        self.id = spool_id(spool.path, create=True)
        self._queue_size = queue_size
        self._endpoint: Any = None
        #: What arrived from each kind of source, and what was refused.
        self.counts = SourceCounts(self._links)
        self._listeners: list[Any] = []
        self._sources: list[tuple[str | None, SpoolSource]] = []
        self.pumps: list[SpoolPump] = []
        self._watchers: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._append_lock = threading.Lock()

    # --- starting and stopping ---------------------------------------------------------

    def subscribe(self, endpoint: Any) -> None:
        """Subscribe ``endpoint`` to the topics: before it peers with anyone. What arrives
        there (from peers, a WebSocket bridge, a ZeroMQ proxy) is counted by its sender."""
        self._endpoint = endpoint
        subscription = endpoint.make_raw_subscriber(self.topics, qsize=self._queue_size)
        self._sources.append((None, subscription))

    def take_from(self, source: SpoolSource, kind: str = "zeromq-logs") -> None:
        """Append what another source gives too (Zeek's ZeroMQ logger socket), counted as
        ``kind``."""
        self._sources.append((kind, source))

    def start(self) -> None:
        """Start a pump per source (after :meth:`subscribe` or :meth:`take_from`)."""
        assert self._sources, "subscribe first"
        shared = self._append_lock if len(self._sources) > 1 else None
        for kind, source in self._sources:
            pump = SpoolPump(
                source,
                self.spool,
                observe=lambda first, items, kind=kind: self._observed(first, items, kind),
                lock=shared,
                name=f"broker-spark-spool-pump-{kind or 'endpoint'}",
                guard=self.guard,
            )
            self.pumps.append(pump)
            pump.start()

    def finish(self, timeout: float = 30.0) -> bool:
        """A planned stop: every source stops taking, what each holds is appended and the
        spool synced (the owner closes its endpoint's peerings first); True when nothing
        was left behind within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        done = True
        for pump in self.pumps:
            done = pump.finish(max(0.5, deadline - time.monotonic())) and done
        return done

    @property
    def appended(self) -> int:
        """Messages the pumps appended since start."""
        return sum(p.appended for p in self.pumps)

    def close(self) -> None:
        """Stop the pumps and drop the sources (the endpoint is its owner's to shut)."""
        for pump in self.pumps:
            pump.stop()
        for _kind, source in self._sources:
            source.close()
        self._sources.clear()

    # --- what happens ------------------------------------------------------------------

    def watch(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from the pump's thread) after every append; returns the way to
        stop watching."""
        with self._lock:
            self._watchers.append(callback)

        def unwatch() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._watchers.remove(callback)

        return unwatch

    def _links(self) -> list[Any]:
        return self._endpoint.links() if self._endpoint is not None else []

    def _observed(self, first: int, items: list, kind: str | None) -> None:
        self.counts.arrived(items, kind)
        bad = sum(1 for item in items if item[0] == UNDECODABLE_TOPIC)
        if bad:
            self.counts.undecodable(kind or "broker", bad)
        if self.history is not None:
            self.history.observe(first, items)
        with self._lock:
            watchers = list(self._watchers)
        for callback in watchers:
            try:
                callback()
            except Exception:  # a watcher's trouble is never the pump's
                log.exception("a spool watcher failed")

    @property
    def error(self) -> BaseException | None:
        """Why a pump stopped (a full disk), if one did."""
        return next((p.error for p in self.pumps if p.error is not None), None)

    def state(self) -> dict[str, Any]:
        """The spool's bounds and, if appending failed (a full disk), why."""
        error = self.error
        return {
            **self.bounds(),
            "error": f"{type(error).__name__}: {error}" if error is not None else None,
            "paused": self.guard.blocked(),
        }

    def bounds(self) -> dict[str, Any]:
        """The spool's first and next offset, and how many Zeek log records a message holds
        on average (readers plan partitions by records)."""
        ratio = self.history.records_per_message() if self.history is not None else 1.0
        return {
            "start": self.spool.start_offset(),
            "end": self.spool.end_offset(),
            "records_per_message": ratio,
        }

    def status(self) -> dict[str, Any]:
        """What ``broker-spark status`` shows: the spool, the peers, the failure if any."""
        out = spool_summary(self.spool)
        out["id"] = self.id
        out["topics"] = list(self.topics)
        state = self.state()
        out["error"] = state["error"]
        out["paused"] = state["paused"]
        out["disk_free_bytes"] = self.guard.free
        out["disk_min_free_bytes"] = self.guard.limit
        out["fsync"] = self.spool.fsync_policy
        out["compression"] = self.spool.compression
        out["retention_bytes"] = self.spool.retention_bytes
        out["retention_seconds"] = (
            self.spool.retention_ms / 1000 if self.spool.retention_ms is not None else None
        )
        out["peers"] = _peers(self._endpoint)
        out["sources"] = self.counts.snapshot()
        out["listeners"] = [a.snapshot() for a in list(self._listeners)]
        return out

    def watch_listener(self, admission: Any) -> None:
        """Show a listening port's connections and refusals (an
        :class:`~broker_spark.admission.Admission`) in :meth:`status`."""
        self._listeners.append(admission)

    def restart_at(self, offset: int) -> None:
        """Drop what the spool holds and continue at ``offset``, beyond its end (a query's
        checkpoint that is ahead of a spool that did not survive)."""
        end = self.spool.end_offset()
        if offset < end:
            raise ValueError(f"offset {offset} is before the spool's end ({end})")
        self.spool.restart_at(offset)
        log.warning(
            "spool %s restarted at offset %d (it ended at %d)", self.spool.path, offset, end
        )

    def schemas(self) -> list[dict[str, Any]]:
        """The Zeek log schemas learned, one entry per change (as the history file)."""
        return self.history.entries() if self.history is not None else []


def _peers(endpoint: Any) -> list[dict[str, Any]]:
    if endpoint is None:
        return []
    try:
        peers = endpoint.peers()
    except Exception:
        return []
    out = []
    for p in peers:
        net = p.peer.network
        out.append(
            {
                "id": str(p.peer.node) if p.peer.node else None,
                "address": f"{net.address}:{net.port}" if net.is_set() else None,
                "status": p.status.name,
            }
        )
    return out
