"""Where a spool's messages come from, and what each source brought and refused.

A relay node keeps whatever reaches it: Broker peers (a Zeek on the Broker
backend), Zeek's WebSocket API, a Zeek cluster's ZeroMQ proxy (events) and its
logger's PULL socket (logs). An operator watching the collector wants to know,
per source, what arrived and what was turned away, as ``broker-spark status
--relay`` and the Prometheus metrics show it.

Messages that came through the node's endpoint (peers, the WebSocket bridge,
the ZeroMQ proxy) are told apart by their sender: each link stamps its own id
on what it receives, so :class:`SourceCounts` asks the endpoint which kind of
link a new sender is (once per sender); a sender that is no neighbour (a
publisher several Broker hops away) counts as ``broker``.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from operator import itemgetter
from typing import Any

__all__ = ["KINDS", "SourceCounts"]

#: The kinds of source a spool's messages come from, in the order a status lists them.
KINDS = ("broker", "websocket", "zeromq-proxy", "zeromq-logs")

#: Senders whose kind is remembered at most (beyond: forgotten and looked up again).
_SENDERS_KEPT = 4096

#: A spool record's sender (its third field).
_SENDER = itemgetter(2)


class SourceCounts:
    """Per kind of source: messages appended, and refusals by reason. Thread-safe.

    ``links`` (an endpoint's ``links()``) names the kind of each neighbour; the
    pumps call :meth:`arrived` with what they appended, the owner calls
    :meth:`refused` with what it turned away, and :meth:`register` adds live
    facts of a source (a ZeroMQ socket's counters, a bridge's state) that a
    status reads when it is asked.
    """

    def __init__(self, links: Callable[[], Iterable[Any]] | None = None) -> None:
        self._links = links
        self._lock = threading.Lock()
        self._arrived: Counter[str] = Counter()
        self._undecodable: Counter[str] = Counter()
        self._refused: Counter[tuple[str, str]] = Counter()
        self._kinds: dict[str, str] = {}
        self._live: list[tuple[str, str, Callable[[], dict[str, Any]]]] = []

    def register(self, kind: str, name: str, facts: Callable[[], dict[str, Any]]) -> None:
        """A source of ``kind`` called ``name`` whose ``facts()`` a status shows (what it
        counts under ``refused``, by reason, is added to this source's own refusals)."""
        with self._lock:
            self._live.append((kind, name, facts))

    def arrived(self, items: Sequence[Sequence[Any]], kind: str | None = None) -> None:
        """``items`` (spool records) were appended; ``kind`` when the source is known, else
        by their senders."""
        if kind is not None:
            with self._lock:
                self._arrived[kind] += len(items)
            return
        senders = Counter(map(_SENDER, items))  # counted in C: no generator frame a record
        kinds = self._kinds
        if any(s not in kinds for s in senders):
            self._learn(senders)
        with self._lock:
            for sender, n in senders.items():
                self._arrived[kinds.get(sender, "broker")] += n

    def _learn(self, senders: Iterable[str]) -> None:
        known: dict[str, str] = {}
        if self._links is not None:
            try:
                known = {str(uuid.UUID(bytes=x.peer_id)): x.kind for x in self._links()}
            except Exception:  # the endpoint is shutting down: count as Broker for now
                known = {}
        if len(self._kinds) > _SENDERS_KEPT:
            self._kinds.clear()
        for sender in senders:
            kind = known.get(sender)
            if kind is not None or sender not in self._kinds:
                self._kinds[sender] = kind or "broker"

    def undecodable(self, kind: str, n: int) -> None:
        """``n`` of what a source of ``kind`` brought did not decode, and were kept as
        undecodable records (counted in :meth:`arrived` too)."""
        with self._lock:
            self._undecodable[kind] += n

    def refused(self, kind: str, reason: str, n: int = 1) -> None:
        """``n`` things from a source of ``kind`` were turned away for ``reason``."""
        with self._lock:
            self._refused[(kind, reason)] += n

    def snapshot(self) -> list[dict[str, Any]]:
        """One entry per source: ``kind``, ``name``, ``arrived``, ``refused`` (by reason)
        and its live facts; kinds that brought nothing and are not registered are left out."""
        with self._lock:
            arrived = dict(self._arrived)
            undecodable = dict(self._undecodable)
            refused = dict(self._refused)
            live = list(self._live)
        out: dict[str, dict[str, Any]] = {}
        for kind in KINDS:
            reasons = {r: n for (k, r), n in refused.items() if k == kind}
            if arrived.get(kind) or reasons:
                out[kind] = {
                    "kind": kind,
                    "name": kind,
                    "arrived": arrived.get(kind, 0),
                    "undecodable": undecodable.get(kind, 0),
                    "refused": reasons,
                }
        for kind, name, facts in live:
            entry = out.setdefault(
                kind,
                {
                    "kind": kind,
                    "name": name,
                    "arrived": arrived.get(kind, 0),
                    "undecodable": undecodable.get(kind, 0),
                    "refused": {},
                },
            )
            entry["name"] = name
            try:
                more = dict(facts())
            except Exception as exc:  # a source that is gone says so, the others still show
                more = {"error": f"{type(exc).__name__}: {exc}"}
            for reason, n in (more.pop("refused", None) or {}).items():
                entry["refused"][reason] = entry["refused"].get(reason, 0) + n
            entry.update(more)
        return [out[k] for k in KINDS if k in out]
