"""A spool node for the data source: a spool, the sources that feed it, and its pumps.

:class:`ReaderRuntime` opens the endpoint (or ZeroMQ logger socket) the options
describe and appends what arrives to a spool through a
:class:`~broker_spark.spool.service.SpoolService`, the same spool node a relay
(``broker-spark node --spool``) runs. Two owners run it: the stream reader, in the
long-lived Python process Spark keeps on the driver for one run of a query
(started from the reader's first offset call, never at import, in a constructor
or on an executor: REFERENCE.md section 3), and the receiver process of a
``spoolPath`` (:mod:`.receiver`), which serves it to the query's readers. Starting
follows one order, so that nothing received is missed and nothing is appended
before the spool agrees with Spark's checkpoint:

1. open the spool (``spoolPath``, or a private temporary directory that is
   removed at :meth:`ReaderRuntime.close`, on SIGTERM and at exit: see
   :mod:`~broker_spark.spool.private`);
2. reconcile it with the highest offset Spark has handed us, if any (see
   :meth:`ReaderRuntime.reconcile`);
3. open the endpoint, subscribing before any peering so peers learn our
   filter in the handshake, then listen/peer/connect;
4. start the pumps.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence

from broker_spark.endpoint import Endpoint
from broker_spark.errors import EC, BrokerError
from broker_spark.reader.connect import EndpointSettings, open_endpoint, open_log_receiver
from broker_spark.reader.options import ReaderOptions, SpoolOptions
from broker_spark.spool.private import make_private_spool, release_private_spool
from broker_spark.spool.schema_history import LogSchemaHistory
from broker_spark.spool.service import SpoolService
from broker_spark.spool.spool import DEFAULT_INDEX_INTERVAL, Spool

__all__ = [
    "BrokerDataLossError",
    "ReaderRuntime",
    "lost_before_checkpoint",
    "open_configured_spool",
]

log = logging.getLogger(__name__)

#: Seconds between redials of a peer (or WebSocket API) the reader lost.
RECONNECT_INTERVAL = 5.0


class BrokerDataLossError(BrokerError):
    """Offsets a batch needs are not in the spool and ``failOnDataLoss`` is true."""

    code = EC.StaleData


def open_configured_spool(path: str, cfg: SpoolOptions, index_interval: int) -> Spool:
    """The spool at ``path`` as the ``spool.*`` options say: the in-process reader's and the
    receiver process's (raises :class:`SpoolLockedError` when another process owns it)."""
    return Spool(
        path,
        segment_bytes=cfg.segment_bytes,
        retention_bytes=cfg.retention_bytes,
        retention_ms=cfg.retention_ms,
        fsync=cfg.fsync,
        index_interval=index_interval,
    )


def lost_before_checkpoint(options: ReaderOptions, checkpoint: int, end: int, where: str) -> bool:
    """Whether a spool ending at ``end`` lost offsets a checkpoint at ``checkpoint`` planned
    (the spool did not survive a restart, or was replaced): with ``failOnDataLoss`` that
    fails the query; without, it is logged and True says to go on at the checkpoint."""
    if checkpoint <= end:
        return False
    text = (
        f"the checkpoint is at offset {checkpoint} but {where} ends at offset {end}: "
        f"offsets {end} to {checkpoint - 1} are lost"
    )
    if options.fail_on_data_loss:
        raise BrokerDataLossError(f"{text} (set failOnDataLoss=false to continue anyway)")
    log.warning("%s; failOnDataLoss=false: continuing from offset %d", text, checkpoint)
    return True


class ReaderRuntime:
    """A spool node: the spool, endpoint and pumps of one stream reader (or receiver).

    ``after_connect`` runs once the endpoint is connected (the store reader
    attaches its clone there); with ``logs`` a :class:`LogSchemaHistory` (kept
    beside a ``spoolPath``) learns the Zeek log schemas the pump appends;
    ``index_interval`` is the spool's (records between index entries); ``retry``
    the redial interval after a peering or bridge drops.
    """

    def __init__(
        self,
        options: ReaderOptions,
        topics: Sequence[str],
        *,
        after_connect: Callable[[Endpoint], object] | None = None,
        settings: EndpointSettings | None = None,
        logs: bool = False,
        index_interval: int = DEFAULT_INDEX_INTERVAL,
        retry: float = RECONNECT_INTERVAL,
        spool_path: str | None = None,
    ) -> None:
        self.options = options
        self.topics = tuple(topics)
        self._after_connect = after_connect
        self._settings = settings or EndpointSettings()
        #: the spool's folder: ``spool_path``, else ``spoolPath`` (empty: a private one)
        self.spool_path = spool_path or options.spool.path or ""
        self.history = LogSchemaHistory(self.spool_path or None) if logs else None
        self._index_interval = index_interval
        self._retry = retry
        self._tmpdir: str | None = None
        self.spool: Spool | None = None
        self.endpoint: Endpoint | None = None
        #: The spool node (sources, pumps, what arrived): once :meth:`connect` made it.
        self.service: SpoolService | None = None
        self.attachments: list[object] = []

    # --- starting --------------------------------------------------------------------

    def open_spool(self) -> Spool:
        """Step 1: the spool (created if needed)."""
        if self.spool is None:
            if not self.spool_path:
                self._tmpdir = make_private_spool()
                self.spool_path = self._tmpdir
            self.spool = self._new_spool()
        return self.spool

    def _new_spool(self) -> Spool:
        return open_configured_spool(self.spool_path, self.options.spool, self._index_interval)

    def reconcile(self, checkpoint: int) -> None:
        """Step 2: make the spool reach ``checkpoint``, the highest offset Spark has planned.

        A spool that ends before the checkpoint did not survive a restart
        (no ``spoolPath``, or a different one): the offsets in between are
        gone. With ``failOnDataLoss`` that fails the query; without, the spool
        is emptied and restarted at the checkpoint, so new messages get
        offsets Spark has not used yet (what it held lies below the
        checkpoint, which Spark has already planned).
        """
        spool = self.open_spool()
        where = (
            "a temporary spool (set spoolPath to resume after a restart)"
            if self._tmpdir
            else f"spool {self.spool_path}"
        )
        if lost_before_checkpoint(self.options, checkpoint, spool.end_offset(), where):
            spool.restart_at(checkpoint)

    def connect(self) -> None:
        """Steps 3 and 4: endpoint, subscription, peerings, pumps (idempotent)."""
        if self.service is not None:
            return
        spool = self.open_spool()
        service = self.service = SpoolService(
            spool,
            self.topics,
            history=self.history,
            queue_size=self._settings.subscriber_queue_size,
        )
        try:
            if self.options.connection.zeromq.logs is not None:  # Zeek's logger on ZeroMQ
                service.take_from(open_log_receiver(self.options.connection))
            else:
                self.endpoint = open_endpoint(
                    self.options.connection,
                    settings=self._settings,
                    before_connect=service.subscribe,
                    retry=self._retry,
                    websocket_topics=self.topics,
                )
            if self._after_connect is not None and self.endpoint is not None:
                self.attachments.append(self._after_connect(self.endpoint))
            service.start()
        except BaseException:
            self.close()
            raise

    def latest_start(self) -> int:
        """Where ``startingOffsets=latest`` starts: the spool's end before the endpoint
        subscribes (call it before :meth:`connect`)."""
        return self.open_spool().end_offset()

    # --- running ---------------------------------------------------------------------

    def check(self) -> Spool:
        """The spool, after making sure the pumps are healthy (a failure fails the query)."""
        assert self.spool is not None
        error = self.service.error if self.service is not None else None
        if error is not None:
            raise BrokerError(f"receiving into spool {self.spool_path} failed: {error}")
        return self.spool

    def committed(self, offset: int) -> None:
        """Spark committed up to ``offset`` (retention, not commits, frees the spool)."""

    # --- stopping --------------------------------------------------------------------

    def close(self) -> None:
        """Stop the pumps, shut the endpoint down, close the spool, remove a temporary spool."""
        if self.service is not None:
            self.service.close()
            self.service = None
        for attached in self.attachments:
            reset = getattr(attached, "reset", None)
            if callable(reset):
                with contextlib.suppress(Exception):
                    reset()
        self.attachments.clear()
        if self.endpoint is not None:
            self.endpoint.shutdown()
            self.endpoint = None
        if self.spool is not None:
            self.spool.close()
            self.spool = None
        if self._tmpdir is not None:
            release_private_spool(self._tmpdir)
            self._tmpdir = None
