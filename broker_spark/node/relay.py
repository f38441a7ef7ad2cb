"""A node's spool and relay (``broker-spark node --spool DIR --subscribe PREFIX...``).

The node appends what it receives to a durable spool (the stream reader's own
format: dense offsets, segments, retention): every message on the subscribed
topics from its peers, a WebSocket API or a ZeroMQ proxy, and, as a Zeek
cluster's logger, every log batch of ``--zeromq-logs``. It serves the spool
with the spool protocol over TCP (TLS with the node's TLS settings, as its
peerings): a Spark reader with ``.option("relay", ...)`` replays from its
checkpoint and follows live, so a query that is down (a deploy, a failure, a
driver that crashed) misses nothing the relay kept. See ``docs/relay.md``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from broker_spark.exits import CliError, UsageError
from broker_spark.spool.relay_server import DEFAULT_DECODERS, RelayServer
from broker_spark.spool.schema_history import LogSchemaHistory
from broker_spark.spool.service import SpoolService
from broker_spark.spool.spool import Spool, SpoolLockedError

__all__ = ["RelayNode", "SpoolSettings"]

log = logging.getLogger("broker_spark.node")


@dataclass
class SpoolSettings:
    """The ``[spool]`` part of a node's settings."""

    directory: str
    topics: list[str]
    relay: tuple[str, int] | None
    retention_bytes: int | None
    retention_seconds: float | None
    #: readers limited to topic prefixes by their certificate's name (see RelayServer)
    readers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: the size of one spool file (retention drops whole files); None: the spool's default
    segment_bytes: int | None = None
    #: free bytes under which nothing more is taken (None: the guard's default; 0: off)
    min_free_bytes: int | None = None
    #: when appends reach the disk: never, interval, always
    fsync: str = "interval"
    #: how sealed spool files are compressed: zstd, lz4, none
    compression: str = "zstd"
    #: when records sent to readers are compressed: auto (readers elsewhere), always, never
    wire_compression: str = "auto"
    #: connections one address may hold on the relay (None: the server's default, 64)
    per_address: int | None = None
    #: tasks of Zeek log readers whose rows the relay decodes at once (0: none)
    decoders: int = DEFAULT_DECODERS


class RelayNode:
    """The spool, its subscription, its pump and its server, next to a node's endpoint."""

    def __init__(self, settings: SpoolSettings) -> None:
        if not settings.topics:
            raise UsageError("--spool needs topics to keep: --subscribe PREFIX (repeatable)")
        self.settings = settings
        retention_ms = (
            int(settings.retention_seconds * 1000) if settings.retention_seconds else None
        )
        try:
            segment = {"segment_bytes": settings.segment_bytes} if settings.segment_bytes else {}
            spool = Spool(
                settings.directory,
                retention_bytes=settings.retention_bytes,
                retention_ms=retention_ms,
                fsync=settings.fsync,
                compression=settings.compression,
                **segment,
            )
        except SpoolLockedError:
            raise CliError(
                f"spool {settings.directory} is owned by another process "
                "(a relay or a query's receiver)"
            ) from None
        except OSError as exc:
            raise CliError(f"cannot open spool {settings.directory}: {exc}") from None
        self.service = SpoolService(
            spool,
            settings.topics,
            history=LogSchemaHistory(settings.directory),
            min_free_bytes=settings.min_free_bytes,
        )
        self.server: Any = None

    def watch(self, admission: Any) -> None:
        """Show this listener's connections and refusals (an ``Admission``) in the status."""
        self.service.watch_listener(admission)

    @property
    def counts(self) -> Any:
        """What arrived from each source and what was refused (the service's)."""
        return self.service.counts

    def subscribe(self, endpoint: Any) -> None:
        """Before the endpoint peers: peers learn the subscription in the handshake."""
        self.service.subscribe(endpoint)

    def take_from(self, source: Any) -> None:
        """Keep Zeek's log batches of a ZeroMQ logger socket too (before :meth:`start`)."""
        self.service.take_from(source, "zeromq-logs")

    def status(self) -> dict[str, Any]:
        """What ``status --relay`` shows: the spool, its sources, peers and readers."""
        out = self.service.status()
        readers = self.server.readers() if self.server is not None else []
        for reader in readers:
            reader["lag_seconds"] = self._lag_seconds(reader.get("committed"), out["end"])
        out["readers"] = readers
        return out

    def _lag_seconds(self, committed: Any, end: int) -> float | None:
        """How long ago the first record a reader has not committed arrived (0 when it has
        committed everything; None when it committed nothing or retention dropped it)."""
        if not isinstance(committed, int):
            return None
        if committed >= end:
            return 0.0
        try:
            first = self.service.spool.read(committed, committed + 1)[0]
        except Exception:  # dropped by retention meanwhile, or never held
            return None
        return max(0.0, time.time() - first.received_at_ns / 1e9)

    def start(self, tls: Any) -> int | None:
        """Start appending, and serve readers (TLS with ``tls``); the relay's bound port."""
        self.service.start()
        spool = self.service.spool
        log.info(
            "spooling %s into %s (offsets %d to %d held)",
            ", ".join(self.settings.topics),
            spool.path,
            spool.start_offset(),
            spool.end_offset(),
        )
        if self.settings.relay is None:
            return None
        self.server = RelayServer(
            self.service,
            name="broker-spark-relay",
            grants=self.settings.readers,
            wire_compression=self.settings.wire_compression,
            decoders=self.settings.decoders,
            **({"per_address": self.settings.per_address} if self.settings.per_address else {}),
        )
        host, port = self.settings.relay
        try:
            bound = self.server.serve_tcp(host, port, tls)
        except OSError as exc:
            raise CliError(f"cannot serve the relay on {host}:{port}: {exc}") from None
        self.watch(self.server.admission)
        return bound

    def finish(self, timeout: float) -> bool:
        """A planned stop, after the node's sources stopped taking: append what they hold
        and sync the spool (see SpoolService.finish); True when nothing was left."""
        return self.service.finish(timeout)

    def stop(self, grace: float = 0.0) -> None:
        """Stop serving (readers get up to ``grace`` seconds to finish their current fetch)
        and close the spool."""
        if self.server is not None:
            self.server.close(grace)
        self.service.close()
        self.service.spool.close()
