"""The options of the ``broker`` data source: parsed once, checked together, named in errors.

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
  then the spool, private or not: see :mod:`~broker_spark.spark.local_executors`).
* ``maxRecordsPerPartition`` bounds a partition (default 100000);
  ``minPartitions`` (as Spark's Kafka source) splits a batch of at least
  that many records into at least that many partitions
  (:mod:`~broker_spark.spark.parallelism`).
* ``spool.segmentBytes``/``spool.retentionBytes`` take sizes with binary
  suffixes (``64m``, ``1g``); ``spool.retentionBytes``/``spool.retentionMs``
  take ``-1`` or ``none`` for "no limit". ``spool.fsync`` syncs each batch.
* Writers need ``peer`` or ``websocket``: a task publishes through a peering
  it dials. ``listen`` is refused on writers (several tasks would compete for
  one port on one machine, and a task cannot wait for someone to peer with it).
* A store is reached through a clone, which needs a native peering: ``store``
  needs ``peer``; the WebSocket API carries data messages only.
* ``path`` and ``checkpointLocation`` are options Spark itself adds; they are
  ignored. Any other unknown option is an error (a typo should not be silent).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker_spark.config import TLSSettings
from broker_spark.spark.option_values import (
    DEFAULT_WEBSOCKET_PATH,
    BrokerOptionError,
    HostPort,
    WebSocketTarget,
    is_secret_option,
    parse_host_port,
    parse_websocket,
    split_top_level,
)
from broker_spark.spark.zeromq_options import (
    ZEROMQ_CURVE,
    ZeroMQOptions,
    parse_zeromq,
    parse_zeromq_proxy,
)

if TYPE_CHECKING:
    from broker_spark.config import Configuration
    from broker_spark.zeek.script_types import EventSignature

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
    "WriterOptions",
    "ZeroMQOptions",
    "default_log_path",
    "parse_zeromq_proxy",
    "parse_host_port",
    "parse_reader_options",
    "parse_writer_options",
]

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
DEFAULT_RETENTION_BYTES = 1024 * 1024 * 1024
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000
DEFAULT_MAX_RECORDS_PER_PARTITION = 100_000

FORMATS = ("default", "zeek", "zeek-logs")
COLUMN_LAYOUTS = ("nested", "flat")
#: Where Zeek publishes its logs (``Broker::default_log_topic_prefix``).
ZEEK_LOG_TOPIC = "zeek/logs/"
#: Seconds ``load()`` waits for a peered Zeek's LogCreate of the one log it reads.
DEFAULT_SCHEMA_WAIT = 2.0
DEFAULT_RECEIVER_IDLE_TIMEOUT = 3600.0
MODES = ("PERMISSIVE", "FAILFAST")
STARTING_OFFSETS = ("earliest", "latest")
PARTITION_DATA = ("auto", "inline", "spool")

_SSL_FILES = ("ssl.certificate", "ssl.key", "ssl.cafile", "ssl.capath", "ssl.passphrase")
_ZEROMQ = (
    "zeromq.logs",
    "zeromq.proxy",
    "zeromq.connectXsubEndpoint",
    "zeromq.connectXpubEndpoint",
    *ZEROMQ_CURVE,
)
_SHARED = ("listen", "peer", "websocket", "ssl.disable", *_SSL_FILES, *_ZEROMQ)
_READER = (
    "allowAnonymous",
    "topics",
    "store",
    "startingOffsets",
    "maxRecordsPerTrigger",
    "maxRecordsPerPartition",
    "minPartitions",
    "failOnDataLoss",
    "spoolPath",
    "spool.segmentBytes",
    "spool.retentionBytes",
    "spool.retentionMs",
    "spool.fsync",
    "format",
    "mode",
    "partitionData",
    "logs",
    "columns",
    "schemaWait",
    "zeekVersion",
    "relay",
    "receiver",
    "receiver.idleTimeout",
)
_WRITER = (
    "topic",
    "store",
    "format",
    "badRecordsTopic",
    "log",
    "zeekTypes",
    "signature",
    "networkTimestamp",
    "mode",
)
_SPARK_ADDED = ("path", "checkpointLocation")

_INTEGER = re.compile(r"[+-]?[0-9]+\Z")
_SIZE = re.compile(r"([0-9]+)\s*([kmgt]?)(i?b)?\Z", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


@dataclass(frozen=True)
class ConnectionOptions:
    """How an endpoint reaches the Broker world: accept peers, dial peers, a WebSocket API,
    or Zeek's ZeroMQ cluster backend."""

    listen: HostPort | None = None
    peers: tuple[HostPort, ...] = ()
    websocket: WebSocketTarget | None = None
    ssl: TLSSettings = field(default_factory=TLSSettings)
    zeromq: ZeroMQOptions = field(default_factory=ZeroMQOptions)

    def configuration(self) -> Configuration:
        """A fresh endpoint configuration with these TLS settings."""
        return self.ssl.configuration()


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
    receiver: bool = True  # with spoolPath: a receiver process owns the endpoint and spool
    receiver_idle_timeout: float = DEFAULT_RECEIVER_IDLE_TIMEOUT
    #: ``listen`` or ``zeromq.logs`` reachable from other hosts may take unauthenticated
    #: clients (a default Zeek's anonymous TLS); otherwise they need mutual TLS or CURVE
    allow_anonymous: bool = False
    #: the options as given (canonical names, texts): what a receiver process is started with
    given: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)


@dataclass(frozen=True)
class WriterOptions:
    """Options of ``df.write``/``df.writeStream.format("broker")``."""

    connection: ConnectionOptions = field(default_factory=ConnectionOptions)
    topic: str | None = None
    store: str | None = None
    format: str = "default"
    bad_records_topic: str | None = None
    log: str | None = None  # a Zeek log stream id (Spark::LOG): rows are published as its records
    log_path: str | None = None  # that log's path (option path; default from the stream id)
    zeek_types: tuple[tuple[str, str], ...] = ()  # column -> Zeek type (Zeek's spelling)
    signature: EventSignature | None = None  # rows are this event, its arguments by column name
    network_timestamp: str | None = None  # column whose time is the event's network timestamp
    mode: str = "FAILFAST"  # a bad row fails the task, or (PERMISSIVE) is counted and routed

    @property
    def permissive(self) -> bool:
        return self.mode == "PERMISSIVE"


# --- reading the raw mapping ------------------------------------------------------------


class _Raw:
    """The given options by canonical name; remembers which were used for the unknown check."""

    def __init__(self, options: Mapping[str, Any], allowed: tuple[str, ...], other: str) -> None:
        canonical = {name.lower(): name for name in (*_SHARED, *_READER, *_WRITER)}
        allowed_lower = {name.lower() for name in allowed}
        ignored = {name.lower() for name in _SPARK_ADDED}
        self.values: dict[str, str] = {}
        for key, value in options.items():
            lower = str(key).lower()
            if lower in ignored:
                continue
            if lower not in allowed_lower:
                if lower in canonical:
                    raise BrokerOptionError(canonical[lower], value, f"applies to {other} only")
                close = difflib.get_close_matches(lower, sorted(allowed_lower), n=1)
                hint = f" (did you mean {canonical[close[0]]}?)" if close else ""
                raise BrokerOptionError(str(key), value, f"unknown option{hint}")
            name = canonical[lower]
            text = _text(value)
            if name in self.values and self.values[name] != text:
                earlier = "***" if is_secret_option(name) else repr(self.values[name])
                raise BrokerOptionError(name, value, f"given twice, also as {earlier}")
            self.values[name] = text

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def nonempty(self, name: str) -> str | None:
        value = self.values.get(name)
        if value is None:
            return None
        if not value.strip():
            raise BrokerOptionError(name, value, "must not be empty")
        return value.strip()

    def boolean(self, name: str, default: bool) -> bool:
        value = self.values.get(name)
        if value is None:
            return default
        lowered = value.strip().lower()
        if lowered not in ("true", "false"):
            raise BrokerOptionError(name, value, "expected true or false")
        return lowered == "true"

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        value = self.values.get(name)
        if value is None:
            return default
        for choice in choices:
            if value.strip().lower() == choice.lower():
                return choice
        raise BrokerOptionError(name, value, f"expected one of {', '.join(choices)}")

    def positive_int(self, name: str) -> int | None:
        value = self.values.get(name)
        if value is None:
            return None
        if not _INTEGER.match(value.strip()) or int(value) < 1:
            raise BrokerOptionError(name, value, "expected a positive integer")
        return int(value)

    def limit(self, name: str, default: int | None, sizes: bool) -> int | None:
        """A positive count (with size suffixes when ``sizes``), or ``-1``/``none`` for no limit."""
        value = self.values.get(name)
        if value is None:
            return default
        text = value.strip()
        if text.lower() in ("-1", "none"):
            return None
        match = _SIZE.match(text) if sizes else None
        if match and (match.group(2) or not match.group(3) or match.group(3).lower() == "b"):
            number = int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
        elif _INTEGER.match(text):
            number = int(text)
        else:
            expected = "a size such as 1048576, 512k, 64m or 1g" if sizes else "an integer"
            raise BrokerOptionError(name, value, f"expected {expected}, or -1 for no limit")
        if number < 1:
            raise BrokerOptionError(name, value, "must be positive, or -1 for no limit")
        return number


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _split(raw: _Raw, name: str) -> list[str]:
    value = raw.get(name)
    if value is None:
        return []
    items = list(dict.fromkeys(part.strip() for part in value.split(",") if part.strip()))
    if not items:
        raise BrokerOptionError(name, value, "names nothing")
    return items


# --- the shared options -----------------------------------------------------------------


def _ssl(raw: _Raw) -> TLSSettings:
    disable = raw.boolean("ssl.disable", False)
    files = {name: raw.nonempty(name) or "" for name in _SSL_FILES}
    given = [name for name in _SSL_FILES if files[name]]
    if disable and given:
        raise BrokerOptionError(
            "ssl.disable", "true", f"contradicts {given[0]} (certificates need TLS)"
        )
    if given:
        if files["ssl.key"] and not files["ssl.certificate"]:
            raise BrokerOptionError("ssl.key", files["ssl.key"], "needs ssl.certificate")
        if files["ssl.passphrase"] and not files["ssl.key"]:
            raise BrokerOptionError("ssl.passphrase", files["ssl.passphrase"], "needs ssl.key")
        if not files["ssl.certificate"]:
            first = given[0]
            raise BrokerOptionError(
                first, files[first], "mutual TLS needs ssl.certificate and ssl.key as well"
            )
        if not files["ssl.key"]:
            raise BrokerOptionError(
                "ssl.certificate", files["ssl.certificate"], "needs ssl.key (the private key)"
            )
        if not files["ssl.cafile"] and not files["ssl.capath"]:
            raise BrokerOptionError(
                "ssl.certificate",
                files["ssl.certificate"],
                "needs ssl.cafile or ssl.capath to verify peers (mutual TLS)",
            )
    return TLSSettings(
        disable,
        files["ssl.certificate"],
        files["ssl.key"],
        files["ssl.cafile"],
        files["ssl.capath"],
        files["ssl.passphrase"],
    )


def _connection(raw: _Raw) -> ConnectionOptions:
    listen_text = raw.nonempty("listen")
    listen = parse_host_port(listen_text, "listen", listen=True) if listen_text else None
    peers = tuple(dict.fromkeys(parse_host_port(p, "peer") for p in _split(raw, "peer")))
    websocket_text = raw.nonempty("websocket")
    websocket = parse_websocket(websocket_text) if websocket_text else None
    ssl = _ssl(raw)
    if websocket is not None and websocket.secure and ssl.disable_ssl:
        raise BrokerOptionError(
            "ssl.disable", "true", f"contradicts websocket={websocket_text!r} (use ws://)"
        )
    return ConnectionOptions(listen, peers, websocket, ssl, parse_zeromq(raw))


# --- readers and writers ----------------------------------------------------------------


def parse_reader_options(options: Mapping[str, Any], *, streaming: bool = True) -> ReaderOptions:
    """Check and convert the options of a stream read (or, ``streaming=False``, a batch read)."""
    raw = _Raw(options, (*_SHARED, *_READER), "writing")
    conn = _connection(raw)
    topics = tuple(_split(raw, "topics"))
    store = raw.nonempty("store")
    fmt = raw.choice("format", FORMATS, "default")
    logs = tuple(_split(raw, "logs"))
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
    idle_timeout = _seconds(raw, "receiver.idleTimeout", DEFAULT_RECEIVER_IDLE_TIMEOUT)
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
        schema_wait=_seconds(raw, "schemaWait", DEFAULT_SCHEMA_WAIT),
        zeek_version=_zeek_version(raw),
        relays=relays,
        receiver=raw.boolean("receiver", True),
        receiver_idle_timeout=idle_timeout,
        allow_anonymous=allow_anonymous,
        given=tuple(sorted(raw.values.items())),
    )


def _refuse_open_listeners(conn: ConnectionOptions) -> None:
    """A ``listen`` or ``zeromq.logs`` other hosts reach needs its clients authenticated
    (mutual TLS; CURVE for ZeroMQ), or ``allowAnonymous=true`` (``docs/security.md``)."""
    from broker_spark.addresses import is_loopback, zeromq_bind_host

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


def _zeek_version(raw: _Raw) -> str:
    """``zeekVersion``: a release whose standard schemas are built in (``8.0.10`` reads as 8.0)."""
    from broker_spark.zeek.schema import STANDARD_SCHEMA_FILES, release_of

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


_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?)\s*(ms|s|min|m|h|)\Z")
_DURATION_UNITS = {"ms": 0.001, "": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def _seconds(raw: _Raw, name: str, default: float) -> float:
    """A duration in seconds (``2``, ``2s``, ``500ms``; 0 for none)."""
    value = raw.get(name)
    if value is None:
        return default
    match = _DURATION.match(value.strip().lower())
    if not match:
        raise BrokerOptionError(name, value, "expected a duration, such as 2, 2s, 500ms, 5m or 1h")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


_STREAM_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)+\Z")


def default_log_path(stream: str) -> str:
    """The path a log stream writes by default: the module, lower-cased (``Spark::LOG`` gives
    ``spark``; another id than ``LOG`` is appended: ``Spark::DNS_LOG`` gives ``spark_dns``)."""
    module, _, ident = stream.rpartition("::")
    path = module.replace("::", "_").lower()
    if ident != "LOG":
        path += "_" + ident.lower().removesuffix("_log")
    return path


def parse_writer_options(options: Mapping[str, Any]) -> WriterOptions:
    """Check and convert the options of a batch or streaming write."""
    log_path = None
    for key, value in options.items():  # Spark's own "path" names the log's path here
        if str(key).lower() == "path" and value is not None and str(value).strip():
            log_path = str(value).strip()
    raw = _Raw(options, (*_SHARED, *_WRITER), "reading")
    conn = _connection(raw)
    topic = raw.nonempty("topic")
    store = raw.nonempty("store")
    fmt = raw.choice("format", FORMATS, "default")
    bad_records = raw.nonempty("badRecordsTopic")
    log_stream = raw.nonempty("log")
    zeek_types = _zeek_types(raw, logs=log_stream is not None)
    signature = _signature(raw)
    network_timestamp = raw.nonempty("networkTimestamp")
    mode = _writer_mode(raw, bad_records)
    if fmt == "zeek-logs":
        raise BrokerOptionError(
            "format", fmt, "is for reading; to write log records use option log"
        )
    if log_stream is not None:
        if not _STREAM_ID.match(log_stream):
            raise BrokerOptionError(
                "log", log_stream, "expected a Zeek log stream id such as Spark::LOG"
            )
        if store:
            raise BrokerOptionError("log", log_stream, f"contradicts store={store!r}")
        if fmt != "default":
            raise BrokerOptionError("format", fmt, "does not apply to log records (option log)")
        if log_path is None:
            log_path = default_log_path(log_stream)
        if topic is None:
            topic = ZEEK_LOG_TOPIC + log_stream
    if signature is not None:
        for other in ("log", "store", "zeekTypes"):
            if raw.get(other) is not None:
                raise BrokerOptionError(
                    "signature", raw.get("signature"), f"contradicts {other}={raw.get(other)!r}"
                )
    elif network_timestamp is not None:
        raise BrokerOptionError(
            "networkTimestamp", network_timestamp, "applies with option signature only"
        )
    if conn.listen is not None:
        raise BrokerOptionError(
            "listen", raw.get("listen"), "writers publish through peer or websocket, not listen"
        )
    if store and topic:
        raise BrokerOptionError(
            "store", store, f"contradicts topic={topic!r}: write one or the other"
        )
    if store and fmt != "default":
        raise BrokerOptionError("format", fmt, "applies to topics, not to store")
    if store and not conn.peers:
        raise BrokerOptionError(
            "peer", None, "is required with store: a clone attaches to the master through a peering"
        )
    if conn.zeromq.logs is not None:
        raise BrokerOptionError("zeromq.logs", conn.zeromq.logs, "is for reading Zeek's logs")
    if not (conn.peers or conn.websocket or conn.zeromq.xpub):
        raise BrokerOptionError(
            "peer/websocket",
            None,
            "one of them is required to publish (or zeromq.proxy, for a Zeek cluster on "
            "the ZeroMQ backend)",
        )
    return WriterOptions(
        connection=conn,
        topic=topic,
        store=store,
        format=fmt,
        bad_records_topic=bad_records,
        log=log_stream,
        log_path=log_path if log_stream is not None else None,
        zeek_types=zeek_types,
        signature=signature,
        network_timestamp=network_timestamp,
        mode=mode,
    )


def _writer_mode(raw: _Raw, bad_records: str | None) -> str:
    """FAILFAST unless bad rows have somewhere to go (``badRecordsTopic``), as before modes."""
    default = "PERMISSIVE" if bad_records is not None else "FAILFAST"
    mode = raw.choice("mode", MODES, default)
    if mode == "FAILFAST" and bad_records is not None:
        raise BrokerOptionError(
            "mode", raw.get("mode"), f"FAILFAST contradicts badRecordsTopic={bad_records!r}"
        )
    return mode


def _signature(raw: _Raw) -> EventSignature | None:
    from broker_spark.zeek.script_types import SignatureError, parse_signature

    text = raw.nonempty("signature")
    if text is None:
        return None
    try:
        return parse_signature(text)
    except SignatureError as exc:
        raise BrokerOptionError("signature", text, str(exc)) from None


def _zeek_types(raw: _Raw, *, logs: bool) -> tuple[tuple[str, str], ...]:
    """``column:type,...`` in Zeek's spelling (``count``, ``addr``, ``set[addr, port]``,
    ``record { a: count; }``); a log's columns take log column types only."""
    from broker_spark.zeek.script_types import SignatureError, parse_type
    from broker_spark.zeek.types import ZeekType

    value = raw.get("zeekTypes")
    if value is None:
        return ()
    out = []
    for item in split_top_level(value):
        if not item.strip():
            continue
        name, sep, spec = item.partition(":")
        if not sep or not name.strip():
            raise BrokerOptionError("zeekTypes", value, f"{item.strip()!r} is not column:type")
        try:
            ZeekType.parse(spec) if logs else parse_type(spec)
        except (ValueError, SignatureError) as exc:
            raise BrokerOptionError("zeekTypes", value, str(exc)) from None
        out.append((name.strip(), spec.strip()))
    return tuple(out)
