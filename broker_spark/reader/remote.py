"""The stream reader's driver side when someone else owns the spool: a receiver, or a relay.

Both offer what :class:`~broker_spark.reader.in_process.ReaderRuntime` offers
the stream readers (``open_spool``, ``reconcile``, ``latest_start``,
``connect``, ``check``, ``committed``, ``close``; ``spool`` with
``start_offset``/``end_offset``/``read_packed``; ``history`` for Zeek logs),
so the readers do not care who receives:

* :class:`ReceiverRuntime`: a ``spoolPath`` whose receiver process
  (:mod:`.receiver`) receives; the reader reads the spool from the disk
  through a read-only view and asks the receiver for its bounds;
* :class:`RelayRuntime`: one relay of ``relay=host:port,...``; the spool is the
  relay's, its bounds and Zeek log schemas come over the spool protocol, and a
  range is fetched from the relay by whoever reads it (the tasks themselves, or
  the driver side for inline partitions: the tasks' fetch is
  :mod:`~broker_spark.reader.relay_fetch`). :class:`RelaySet` holds one per relay
  of the option: the reader keeps a position in each.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from broker_spark.config import TLSSettings
from broker_spark.errors import BrokerError
from broker_spark.reader.in_process import (
    RECONNECT_INTERVAL,
    BrokerDataLossError,
    ReaderRuntime,
    lost_before_checkpoint,
)
from broker_spark.reader.options import HostPort, ReaderOptions
from broker_spark.reader.receiver_attach import ReceiverLink
from broker_spark.spool.relay_client import RelayError, SpoolClient, SpoolClientError
from broker_spark.spool.schema_history import LogSchemaHistory
from broker_spark.spool.segment import DataLossError
from broker_spark.spool.served_records import hello_fields, served
from broker_spark.spool.spool import Spool
from broker_spark.tls import make_contexts

__all__ = [
    "FETCH_TIMEOUT",
    "Runtime",
    "ReceiverRuntime",
    "RelayRuntime",
    "reader_runtime",
    "tls_context",
]

log = logging.getLogger(__name__)

#: Seconds a range may take to come from a relay.
FETCH_TIMEOUT = 300.0


def tls_context(ssl: TLSSettings) -> Any:
    """The client TLS context for a relay, from the same options as peering (None: plain)."""
    contexts = make_contexts(ssl)
    return contexts.client if contexts is not None else None


def reader_runtime(
    options: ReaderOptions, *, logs: bool, index_interval: int
) -> Runtime | RelaySet:
    """Who receives for a stream reader: relays, the receiver process of its ``spoolPath``,
    or (a private spool, or ``receiver=false``) the reader's own process."""
    if options.relays:
        return RelaySet(options, logs=logs)
    if options.spool.path and options.receiver:
        return ReceiverRuntime(
            options, logs=logs, index_interval=index_interval, retry=RECONNECT_INTERVAL
        )
    return ReaderRuntime(options, options.topics, logs=logs, index_interval=index_interval)


# --- a receiver's spool -------------------------------------------------------------------------


class ReceiverRuntime:
    """The reader's side of the receiver of ``options.spool.path``."""

    def __init__(
        self, options: ReaderOptions, *, logs: bool, index_interval: int, retry: float
    ) -> None:
        self.options = options
        self.link = ReceiverLink(options, logs=logs, index_interval=index_interval, retry=retry)
        self.spool_path = self.link.path
        self.index_interval = index_interval
        self.spool: Spool | None = None
        self.history = LogSchemaHistory(self.spool_path, readonly=True) if logs else None
        self._latest: int | None = None

    def open_spool(self) -> Spool:
        if self.spool is None:
            self.link.open()
            state = self.link.state()
            self.spool = Spool(self.spool_path, readonly=True, index_interval=self.index_interval)
            started = self.link.end_at_start
            self._latest = started if started is not None else int(state["end"])
            if self.history is not None:
                self.history.refresh()
        return self.spool

    def reconcile(self, checkpoint: int) -> None:
        """A checkpoint beyond the spool's end: the spool did not survive (another folder,
        removed by hand). Fail, or (``failOnDataLoss=false``) have the receiver go on there."""
        self.open_spool()
        end = int(self.link.state()["end"])
        if lost_before_checkpoint(self.options, checkpoint, end, f"spool {self.spool_path}"):
            self.link.restart_at(checkpoint)
            self._refresh()

    def latest_start(self) -> int:
        self.open_spool()
        assert self._latest is not None
        return self._latest

    def connect(self) -> None:
        """Nothing: the receiver is connected."""

    def check(self) -> Spool:
        spool = self.open_spool()
        state = self.link.state()
        if state.get("error"):
            raise BrokerError(f"receiving into spool {self.spool_path} failed: {state['error']}")
        if self.history is not None:
            self.history.assume_records_per_message(state.get("records_per_message") or 1.0)
        if (state["start"], state["end"]) != (spool.start_offset(), spool.end_offset()):
            self._refresh()
        return spool

    def _refresh(self) -> None:
        assert self.spool is not None
        self.spool.refresh()
        if self.history is not None:
            self.history.refresh()

    def committed(self, offset: int) -> None:
        self.link.commit(offset)

    def close(self) -> None:
        self.link.close()
        if self.spool is not None:
            self.spool.close()
            self.spool = None


# --- a relay's spool ----------------------------------------------------------------------------


class RelayView:
    """A relay's spool as the reader sees it: bounds from the last look, ranges fetched."""

    def __init__(self, runtime: RelayRuntime) -> None:
        self._runtime = runtime
        self.start = 0
        self.end = 0

    def start_offset(self) -> int:
        return self.start

    def end_offset(self) -> int:
        return self.end

    def read_packed(self, start: int, end: int) -> bytes:
        return self._runtime.fetch(start, end)[0]

    def read_counted(self, start: int, end: int) -> tuple[bytes, int]:
        """:meth:`read_packed` and how many records it holds (fewer than the offsets when
        the relay holds other topics too)."""
        return self._runtime.fetch(start, end)


class RelayRuntime:
    """The reader's side of one relay: its id, bounds and schemas, and fetches.

    ``reachable`` says whether the last look at the relay worked; a relay that
    stops answering keeps its last known bounds (nothing new is planned from it)
    and is said so in the log once, and again when it is back.
    """

    def __init__(self, options: ReaderOptions, relay: HostPort, *, logs: bool) -> None:
        self.options = options
        self.relay = relay
        self.where = f"relay {relay}"
        self.spool_path = ""
        self.spool = RelayView(self)
        self.history = LogSchemaHistory() if logs else None
        self.relay_id: str | None = None
        self.reachable = False
        self.problem: str | None = None  # why it is not reachable
        self._client: SpoolClient | None = None
        self._latest: int | None = None
        self._lock = threading.Lock()  # the client is shared with the frames thread
        self._opened = False

    def _connected(self) -> SpoolClient:
        if self._client is None:
            client = SpoolClient.tcp(
                self.relay.host, self.relay.port, tls_context(self.options.connection.ssl)
            )
            try:
                # the topics it reads: a relay that limits this reader's certificate to
                # others refuses at once (forbidden), rather than serving it nothing
                options = self.options
                asked = hello_fields(options.served_topics, options.served_logs)
                welcome = client.hello("follow", "reader", **asked)
            except BaseException:
                client.close()
                raise
            relay_id = welcome.get("relay")
            if self.relay_id is not None and relay_id != self.relay_id:
                client.close()
                self._changed(relay_id)
            self.relay_id = relay_id
            self._client = client
        return self._client

    def _changed(self, relay_id: Any) -> None:
        text = (
            f"{self.where} now serves another spool (id {relay_id}, was {self.relay_id}): "
            "the offsets of this query mean nothing there"
        )
        if self.options.fail_on_data_loss:
            raise BrokerDataLossError(f"{text} (set failOnDataLoss=false to read it anyway)")
        log.warning("%s; failOnDataLoss=false: reading it anyway", text)

    def _bounds(self) -> None:
        with self._lock:
            try:
                reply = self._connected().request("bounds")
            except (SpoolClientError, RelayError):
                self._drop()
                reply = self._connected().request("bounds")  # once more, on a new connection
        self.spool.start, self.spool.end = int(reply["start"]), int(reply["end"])
        if self.history is not None:
            self.history.assume_records_per_message(reply.get("records_per_message") or 1.0)
            try:
                self.history.merge(reply.get("schemas") or [])
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("%s sent a Zeek log schema that does not parse: %s", self.where, exc)

    def _drop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def open_spool(self) -> RelayView:
        if not self._opened:
            self._bounds()
            self._latest = self.spool.end
            self._opened = True
            self._reached()
        return self.spool

    def reconcile(self, checkpoint: int) -> None:
        self.open_spool()  # the relay's offsets are what they are: nothing to restart
        lost_before_checkpoint(self.options, checkpoint, self.spool.end, self.where)

    def latest_start(self) -> int:
        self.open_spool()
        assert self._latest is not None
        return self._latest

    def connect(self) -> None:
        """Nothing: the relay does the peering."""

    def check(self) -> RelayView:
        """The relay's bounds now; an unreachable relay keeps its last known ones."""
        try:
            if not self._opened:
                self.open_spool()
            else:
                self._bounds()
                self._reached()
        except SpoolClientError as exc:  # the relay restarts: plan nothing new meanwhile
            self._unreachable(str(exc))
        return self.spool

    def _reached(self) -> None:
        if not self.reachable and self.problem is not None:
            log.warning("%s is back: reading it from offset %d on", self.where, self.spool.start)
        self.reachable, self.problem = True, None

    def _unreachable(self, why: str) -> None:
        if self.reachable or self.problem is None:
            known = f"; keeping its last known end {self.spool.end}" if self._opened else ""
            log.warning("%s cannot be reached: %s%s", self.where, why, known)
        self.reachable, self.problem = False, why

    def fetch(self, start: int, end: int) -> tuple[bytes, int]:
        with self._lock:
            try:
                client = self._connected()
                data, count = client.fetch_counted(start, end, FETCH_TIMEOUT)
                options = self.options
                return served(
                    client.welcome, options.served_topics, options.served_logs, data, count
                )
            except RelayError as exc:
                if exc.relay_code == "data_loss":
                    earliest = int(exc.fields.get("earliest", end))
                    raise DataLossError(start, end, earliest) from None
                raise
            except SpoolClientError:
                self._drop()
                raise

    def committed(self, offset: int) -> None:
        with self._lock:
            if self._client is not None:
                try:
                    self._client.send(self._client.session.request("commit", offset=offset))
                except SpoolClientError:
                    self._drop()

    def close(self) -> None:
        with self._lock:
            self._drop()


class RelaySet:
    """The reader's side of ``relay=h1:p1,h2:p2,...``: one :class:`RelayRuntime` each.

    A relay that cannot be reached never stops the others: the reader plans
    from those it reaches, and takes the others up where they were once they
    answer. Only when none answers at the start does the query fail, naming
    each and why.
    """

    def __init__(self, options: ReaderOptions, *, logs: bool) -> None:
        self.options = options
        self.members = [RelayRuntime(options, r, logs=logs) for r in options.relays]
        self.spool_path = ""

    def open(self) -> None:
        """Reach every relay once; fail only when none answers."""
        problems = []
        for member in self.members:
            member.check()
            if not member.reachable:
                problems.append(f"{member.where}: {member.problem}")
        if len(problems) == len(self.members):
            raise SpoolClientError("no relay can be reached: " + "; ".join(problems))

    def check(self) -> None:
        for member in self.members:
            member.check()

    def by_id(self) -> dict[str, RelayRuntime]:
        """The relays whose id is known (reached at least once in this run), by id."""
        return {m.relay_id: m for m in self.members if m.relay_id is not None}

    def unreachable(self) -> list[str]:
        return [str(m.relay) for m in self.members if not m.reachable]

    def close(self) -> None:
        for member in self.members:
            member.close()


#: Whoever receives for a stream reader.
Runtime = ReaderRuntime | ReceiverRuntime | RelayRuntime
