"""What the stream reader runs on the driver: its spool, its endpoint and the pump between them.

Everything here lives in the long-lived Python process Spark keeps on the
driver for one run of a query, and is started from the reader's first offset
call, never at import, in a constructor or on an executor (REFERENCE.md
section 3). Starting follows one order, so that nothing received is missed
and nothing is appended before the spool agrees with Spark's checkpoint:

1. open the spool (``spoolPath``, or a private temporary directory that is
   removed at :meth:`ReaderRuntime.close`, on SIGTERM and at exit: see
   :mod:`~broker_spark.spool.private`);
2. reconcile it with the highest offset Spark has handed us, if any (see
   :meth:`ReaderRuntime.reconcile`);
3. open the endpoint, subscribing before any peering so peers learn our
   filter in the handshake, then listen/peer/connect;
4. start the pump.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence

from broker_spark.endpoint import Endpoint
from broker_spark.errors import EC, BrokerError
from broker_spark.spark.options import ReaderOptions, SpoolOptions
from broker_spark.spark.runtime.connect import EndpointSettings, open_endpoint, open_log_receiver
from broker_spark.spool.private import make_private_spool, release_private_spool
from broker_spark.spool.pump import SpoolPump, SpoolSource
from broker_spark.spool.schema_history import LogSchemaHistory
from broker_spark.spool.service import learn_sizes
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
    """The spool, endpoint and pump of one stream reader in its driver-side process.

    ``after_connect`` runs once the endpoint is connected (the store reader
    attaches its clone there); with ``logs`` a :class:`LogSchemaHistory` (kept
    beside a ``spoolPath``) learns the Zeek log schemas the pump appends;
    ``index_interval`` is the spool's (records between index entries).
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
    ) -> None:
        self.options = options
        self.topics = tuple(topics)
        self._after_connect = after_connect
        self._settings = settings or EndpointSettings()
        self.history = LogSchemaHistory(options.spool.path) if logs else None
        self._index_interval = index_interval
        self._tmpdir: str | None = None
        self.spool_path = options.spool.path or ""
        self.spool: Spool | None = None
        self.endpoint: Endpoint | None = None
        self.subscription: SpoolSource | None = None
        self.pump: SpoolPump | None = None
        self.attachments: list[object] = []

    # --- starting --------------------------------------------------------------------

    def open_spool(self) -> Spool:
        """Step 1: the spool (created if needed)."""
        if self.spool is None:
            if not self.spool_path:
                self._tmpdir = make_private_spool()
                self.spool_path = self._tmpdir
            self.spool = self._new_spool()
            if self.history is not None:
                learn_sizes(self.history, self.spool)
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
        """Steps 3 and 4: endpoint, subscription, peerings, pump (idempotent)."""
        if self.endpoint is not None or self.subscription is not None:
            return
        spool = self.open_spool()

        def subscribe(endpoint: Endpoint) -> None:
            self.subscription = endpoint.make_raw_subscriber(
                self.topics, qsize=self._settings.subscriber_queue_size
            )

        if self.options.connection.zeromq.logs is not None:  # Zeek's logger on ZeroMQ
            self.subscription = open_log_receiver(self.options.connection)
        else:
            self.endpoint = open_endpoint(
                self.options.connection,
                settings=self._settings,
                before_connect=subscribe,
                retry=RECONNECT_INTERVAL,
                websocket_topics=self.topics,
            )
        try:
            if self._after_connect is not None and self.endpoint is not None:
                self.attachments.append(self._after_connect(self.endpoint))
            assert self.subscription is not None
            observe = self.history.observe if self.history is not None else None
            self.pump = SpoolPump(self.subscription, spool, observe=observe)
            self.pump.start()
        except BaseException:
            self.close()
            raise

    def latest_start(self) -> int:
        """Where ``startingOffsets=latest`` starts: the spool's end before the endpoint
        subscribes (call it before :meth:`connect`)."""
        return self.open_spool().end_offset()

    # --- running ---------------------------------------------------------------------

    def check(self) -> Spool:
        """The spool, after making sure the pump is healthy (its failure fails the query)."""
        assert self.spool is not None
        pump = self.pump
        if pump is not None and pump.error is not None:
            raise BrokerError(f"receiving into spool {self.spool_path} failed: {pump.error}")
        return self.spool

    def committed(self, offset: int) -> None:
        """Spark committed up to ``offset`` (retention, not commits, frees the spool)."""

    # --- stopping --------------------------------------------------------------------

    def close(self) -> None:
        """Stop the pump, shut the endpoint down, close the spool, remove a temporary spool."""
        if self.pump is not None:
            self.pump.stop()
            self.pump = None
        if self.subscription is not None:
            self.subscription.close()
            self.subscription = None
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
