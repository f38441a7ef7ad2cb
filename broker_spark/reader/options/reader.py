"""The options of the ``broker`` data source's readers: parsed once, checked together, named
in errors (the writers' are :mod:`~broker_spark.reader.options.writer`, the ones both share
:mod:`~broker_spark.reader.options.connection`; the package re-exports them all).

Spark hands a data source its options as strings in a case-insensitive dict
with lower-cased keys (measured with pyspark 4.3); tests and direct callers
may pass a plain dict spelled as in the docs (``maxRecordsPerTrigger``) or
Python values (``True``, ``100``). All of that is accepted. A missing,
unknown, malformed or contradictory option raises :class:`BrokerOptionError`
naming the option and its value, so a query fails at start with a message
that says what to fix (secrets such as ``ssl.passphrase`` are never echoed).

Choices where the issue left room:

* ``partitionData`` = ``inline`` (a partition carries its records' bytes,
  which works when executors cannot see the driver's disk), ``spool`` (a
  partition names a range of a ``spoolPath`` that every executor can read,
  so nothing but offsets crosses the network) or ``auto`` (the default:
  inline until a task shows it runs in the driver's JVM, as in local mode,
  then the spool, private or not: see :mod:`~broker_spark.spark.read.local_executors`).
* ``maxRecordsPerPartition`` bounds a partition (default 100000);
  ``minPartitions`` (as Spark's Kafka source) splits a batch of at least
  that many records into at least that many partitions
  (:mod:`~broker_spark.spark.read.parallelism`).
* ``spool.segmentBytes``/``spool.retentionBytes`` take sizes with binary
  suffixes (``64m``, ``1g``); ``spool.retentionBytes``/``spool.retentionMs``
  take ``-1`` or ``none`` for "no limit". ``spool.fsync`` syncs each batch.
* A store is reached through a clone, which needs a native peering: ``store``
  needs ``peer``; the WebSocket API carries data messages only.
* ``path`` and ``checkpointLocation`` are options Spark itself adds; they are
  ignored. Any other unknown option is an error (a typo should not be silent).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker_spark.addresses import is_loopback, zeromq_bind_host
from broker_spark.reader.options.connection import ConnectionOptions, parse_connection
from broker_spark.reader.options.text import (
    FORMATS,
    MODES,
    READER_OPTIONS,
    SHARED_OPTIONS,
    ZEEK_LOG_TOPIC,
    RawOptions,
    seconds_option,
    split_option,
)
from broker_spark.reader.options.values import (
    DEFAULT_WEBSOCKET_PATH,
    BrokerOptionError,
    HostPort,
    WebSocketTarget,
    parse_host_port,
)
from broker_spark.zeek.log_schema import STANDARD_SCHEMA_FILES, release_of

__all__ = [
    "DEFAULT_MAX_RECORDS_PER_PARTITION",
    "DEFAULT_RETENTION_BYTES",
    "DEFAULT_RETENTION_MS",
    "DEFAULT_SEGMENT_BYTES",
    "DEFAULT_WEBSOCKET_PATH",
    "BrokerOptionError",
    "ConnectionOptions",
    "HostPort",
    "ReaderOptions",
    "SpoolOptions",
    "WebSocketTarget",
    "parse_host_port",
    "parse_reader_options",
]

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
DEFAULT_RETENTION_BYTES = 1024 * 1024 * 1024
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000
DEFAULT_MAX_RECORDS_PER_PARTITION = 100_000

COLUMN_LAYOUTS = ("nested", "flat")
#: Seconds ``load()`` waits for a peered Zeek's LogCreate of the one log it reads.
DEFAULT_SCHEMA_WAIT = 2.0
DEFAULT_RECEIVER_IDLE_TIMEOUT = 3600.0
STARTING_OFFSETS = ("earliest", "latest")
PARTITION_DATA = ("auto", "inline", "spool")


@dataclass(frozen=True)
class SpoolOptions:
    """Where and how long the stream reader keeps what it received."""

    path: str | None = None  # None: a private temporary directory (nothing survives a restart)
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    retention_bytes: int | None = DEFAULT_RETENTION_BYTES
    retention_ms: int | None = DEFAULT_RETENTION_MS
    fsync: bool = False


@dataclass(frozen=True)
class ReaderOptions:
    """Options of ``spark.readStream.format("broker")`` (and of ``spark.read`` for stores)."""

    connection: ConnectionOptions = field(default_factory=ConnectionOptions)
    topics: tuple[str, ...] = ()
    store: str | None = None
    starting_offsets: str = "latest"
    max_records_per_trigger: int | None = None
    max_records_per_partition: int = DEFAULT_MAX_RECORDS_PER_PARTITION
    min_partitions: int | None = None  # None: the cluster's parallelism decides
    fail_on_data_loss: bool = True
    spool: SpoolOptions = field(default_factory=SpoolOptions)
    format: str = "default"
    mode: str = "PERMISSIVE"
    partition_data: str = "auto"
    logs: tuple[str, ...] = ()  # format=zeek-logs: the log paths to keep (empty: all)
    columns: str = "nested"  # format=zeek-logs: nested structs for dotted names, or flat
    schema_wait: float = DEFAULT_SCHEMA_WAIT
    #: format=zeek-logs: the Zeek release whose standard logs' columns are used when no
    #: LogCreate, ZeroMQ header or spool has told them ("9.1", "9.0" or "8.0")
    zeek_version: str = "9.1"
    relays: tuple[HostPort, ...] = ()  # read relays' spools (broker-spark node --spool) instead
    #: with ``relay``, format=zeek-logs: tasks ask the relay to decode their ranges
    relay_decode: bool = True
    #: the rows' schema (Spark's JSON) when a partition is one row read by its consumer
    #: (:mod:`~broker_spark.spark.read.deferred`); None: the rows themselves
    deferred_rows: str | None = None
    receiver: bool = True  # with spoolPath: a receiver process owns the endpoint and spool
    receiver_idle_timeout: float = DEFAULT_RECEIVER_IDLE_TIMEOUT
    #: ``listen`` or ``zeromq.logs`` reachable from other hosts may take unauthenticated
    #: clients (a default Zeek's anonymous TLS); otherwise they need mutual TLS or CURVE
    allow_anonymous: bool = False
    #: the options as given (canonical names, texts): what a receiver process is started with
    given: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)

    @property
    def served_topics(self) -> tuple[str, ...] | None:
        """The topics a relay serves this reader (None: every record it holds): its
        ``topics``, unless it reads Zeek's logs with the default ones. Logs reach a relay
        on ``zeek/logs/`` and, in a Broker cluster, on each logger's node topic
        (``zeek/cluster/node/<logger>/``); the reader keeps the log messages of whatever
        the relay holds."""
        if self.format == "zeek-logs" and not any(name == "topics" for name, _ in self.given):
            return None
        return self.topics or None

    @property
    def served_logs(self) -> tuple[str, ...] | None:
        """The Zeek logs a relay serves this reader (None: every record it holds): a log
        reader's ``logs``, so that a query reading one log fetches that log only."""
        if self.format == "zeek-logs" and self.logs:
            return self.logs
        return None


def parse_reader_options(options: Mapping[str, Any], *, streaming: bool = True) -> ReaderOptions:
    """Check and convert the options of a stream read (or, ``streaming=False``, a batch read)."""
    raw = RawOptions(options, (*SHARED_OPTIONS, *READER_OPTIONS), "writing")
    conn = parse_connection(raw)
    topics = tuple(split_option(raw, "topics"))
    store = raw.nonempty("store")
    fmt = raw.choice("format", FORMATS, "default")
    logs = tuple(split_option(raw, "logs"))
    if fmt != "zeek-logs":
        for name in ("logs", "columns", "schemaWait", "zeekVersion"):
            if raw.get(name) is not None:
                raise BrokerOptionError(name, raw.get(name), "applies to format=zeek-logs only")
    elif not topics and not store:
        topics = (ZEEK_LOG_TOPIC,)
    if topics and store:
        raise BrokerOptionError(
            "store", store, f"contradicts topics={raw.get('topics')!r}: read one or the other"
        )
    if not topics and not store:
        raise BrokerOptionError("topics", None, "is required (or store, to read a data store)")
    if store and fmt != "default":
        raise BrokerOptionError("format", fmt, "applies to topics, not to store")
    if not streaming and topics:
        raise BrokerOptionError(
            "topics", raw.get("topics"), "can only be read as a stream (spark.readStream)"
        )
    if store and not conn.peers:
        raise BrokerOptionError(
            "peer", None, "is required with store: a clone attaches to the master through a peering"
        )
    zeromq = conn.zeromq
    if zeromq.logs is not None:
        if fmt != "zeek-logs":
            raise BrokerOptionError("zeromq.logs", zeromq.logs, "applies to format=zeek-logs only")
        if conn.listen or conn.peers or conn.websocket or zeromq.proxy:
            raise BrokerOptionError(
                "zeromq.logs",
                zeromq.logs,
                "reads Zeek's logs on its own: leave out listen, peer, websocket and zeromq.proxy",
            )
    relay_text = raw.nonempty("relay")
    relays = _relays(relay_text) if relay_text else ()
    if relays:
        for name in ("listen", "peer", "websocket", "store", "zeromq.logs", "zeromq.proxy"):
            if raw.get(name) is not None:
                raise BrokerOptionError(
                    name, raw.get(name), f"contradicts relay={relay_text!r}: the relay peers"
                )
    elif not (conn.listen or conn.peers or conn.websocket or zeromq.logs or zeromq.xsub):
        raise BrokerOptionError(
            "listen/peer/websocket/relay",
            None,
            "one of them is required to reach Broker peers (or, for a Zeek cluster on the "
            "ZeroMQ backend, zeromq.proxy, and zeromq.logs for its logs)",
        )
    allow_anonymous = raw.boolean("allowAnonymous", False)
    if not allow_anonymous:
        _refuse_open_listeners(conn)
    idle_timeout = seconds_option(raw, "receiver.idleTimeout", DEFAULT_RECEIVER_IDLE_TIMEOUT)
    if idle_timeout <= 0:
        raise BrokerOptionError(
            "receiver.idleTimeout", raw.get("receiver.idleTimeout"), "must be positive"
        )
    partition_data = raw.choice("partitionData", PARTITION_DATA, "auto")
    spool_path = raw.nonempty("spoolPath")
    if partition_data == "spool" and relays:
        raise BrokerOptionError(
            "partitionData", "spool", "contradicts relay: tasks fetch from the relay (auto)"
        )
    if partition_data == "spool" and spool_path is None:
        raise BrokerOptionError(
            "partitionData", "spool", "needs spoolPath on storage every executor can read"
        )
    segment_bytes = raw.limit("spool.segmentBytes", DEFAULT_SEGMENT_BYTES, sizes=True)
    if segment_bytes is None:
        raise BrokerOptionError(
            "spool.segmentBytes", raw.get("spool.segmentBytes"), "a segment needs a size"
        )
    per_partition = raw.positive_int("maxRecordsPerPartition")
    spool = SpoolOptions(
        path=spool_path,
        segment_bytes=segment_bytes,
        retention_bytes=raw.limit("spool.retentionBytes", DEFAULT_RETENTION_BYTES, sizes=True),
        retention_ms=raw.limit("spool.retentionMs", DEFAULT_RETENTION_MS, sizes=False),
        fsync=raw.boolean("spool.fsync", False),
    )
    return ReaderOptions(
        connection=conn,
        topics=topics,
        store=store,
        starting_offsets=raw.choice("startingOffsets", STARTING_OFFSETS, "latest"),
        max_records_per_trigger=raw.positive_int("maxRecordsPerTrigger"),
        max_records_per_partition=per_partition or DEFAULT_MAX_RECORDS_PER_PARTITION,
        min_partitions=raw.positive_int("minPartitions"),
        fail_on_data_loss=raw.boolean("failOnDataLoss", True),
        spool=spool,
        format=fmt,
        mode=raw.choice("mode", MODES, "PERMISSIVE"),
        partition_data=partition_data,
        logs=logs,
        columns=raw.choice("columns", COLUMN_LAYOUTS, "nested"),
        schema_wait=seconds_option(raw, "schemaWait", DEFAULT_SCHEMA_WAIT),
        zeek_version=_zeek_version(raw),
        relays=relays,
        relay_decode=raw.boolean("relayDecode", True),
        deferred_rows=raw.nonempty("deferredRows"),
        receiver=raw.boolean("receiver", True),
        receiver_idle_timeout=idle_timeout,
        allow_anonymous=allow_anonymous,
        given=tuple(sorted(raw.values.items())),
    )


def _refuse_open_listeners(conn: ConnectionOptions) -> None:
    """A ``listen`` or ``zeromq.logs`` other hosts reach needs its clients authenticated
    (mutual TLS; CURVE for ZeroMQ), or ``allowAnonymous=true`` (``docs/security.md``)."""
    mutual = conn.ssl.authenticated and not conn.ssl.disable_ssl
    if conn.listen is not None and not mutual and not is_loopback(conn.listen.host):
        raise BrokerOptionError(
            "listen",
            str(conn.listen),
            "is reachable from other hosts and peers would not be authenticated: give "
            "ssl.certificate, ssl.key and ssl.cafile (mutual TLS, as in Zeek's "
            "Broker::ssl_*), listen on 127.0.0.1, or set allowAnonymous=true to accept "
            "any peer (a default Zeek peers with anonymous TLS)",
        )
    logs = conn.zeromq.logs
    host = zeromq_bind_host(logs) if logs else None
    if host is not None and not is_loopback(host):
        keys = conn.zeromq.curve_keys()
        if keys is None or not keys.server_enabled:
            raise BrokerOptionError(
                "zeromq.logs",
                logs,
                "is reachable from other hosts and senders would not be authenticated: give "
                "the CURVE keys (zeromq.curveServerSecretKey and zeromq.curveClientPublicKey, "
                "or Zeek's ZEEK_CLUSTER_BACKEND_ZEROMQ_CURVE_* variables), bind 127.0.0.1, or "
                "set allowAnonymous=true to accept any sender",
            )


def _zeek_version(raw: RawOptions) -> str:
    """``zeekVersion``: a release whose standard schemas are built in (``8.0.10`` reads as 8.0)."""
    text = raw.get("zeekVersion")
    if text is None:
        return "9.1"
    release = release_of(text.strip())
    if release not in STANDARD_SCHEMA_FILES:
        raise BrokerOptionError(
            "zeekVersion",
            text,
            f"no schemas of that release are built in; there are {', '.join(sorted(STANDARD_SCHEMA_FILES))}",
        )
    return release


def _relays(text: str) -> tuple[HostPort, ...]:
    """``relay``: one ``host:port`` or several, comma-separated (one stream over them all)."""
    relays: list[HostPort] = []
    for part in text.split(","):
        if not part.strip():
            raise BrokerOptionError("relay", text, "names an empty relay (a stray comma?)")
        relay = parse_host_port(part.strip(), "relay")
        if relay in relays:
            raise BrokerOptionError("relay", text, f"names {part.strip()} twice")
        relays.append(relay)
    return tuple(relays)
