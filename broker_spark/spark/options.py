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
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from broker_spark.errors import EC, BrokerError

if TYPE_CHECKING:
    from broker_spark.config import Configuration

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
    "SslOptions",
    "WebSocketTarget",
    "WriterOptions",
    "default_log_path",
    "parse_host_port",
    "parse_reader_options",
    "parse_writer_options",
]

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
DEFAULT_RETENTION_BYTES = 1024 * 1024 * 1024
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000
DEFAULT_MAX_RECORDS_PER_PARTITION = 100_000
DEFAULT_WEBSOCKET_PATH = "/v1/messages/json"

FORMATS = ("default", "zeek", "zeek-logs")
COLUMN_LAYOUTS = ("nested", "flat")
#: Where Zeek publishes its logs (``Broker::default_log_topic_prefix``).
ZEEK_LOG_TOPIC = "zeek/logs/"
#: Seconds ``load()`` waits for a peered Zeek's LogCreate of the one log it reads.
DEFAULT_SCHEMA_WAIT = 2.0
MODES = ("PERMISSIVE", "FAILFAST")
STARTING_OFFSETS = ("earliest", "latest")
PARTITION_DATA = ("auto", "inline", "spool")

_SSL_FILES = ("ssl.certificate", "ssl.key", "ssl.cafile", "ssl.capath", "ssl.passphrase")
_SHARED = ("listen", "peer", "websocket", "ssl.disable", *_SSL_FILES)
_READER = (
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
)
_WRITER = ("topic", "store", "format", "badRecordsTopic", "log", "zeekTypes")
_SPARK_ADDED = ("path", "checkpointLocation")
_SECRET = frozenset({"ssl.passphrase"})

_HOSTNAME = re.compile(
    r"(?=.{1,253}\Z)[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})(\.[A-Za-z0-9_-]{1,63})*\.?\Z"
)
_INTEGER = re.compile(r"[+-]?[0-9]+\Z")
_SIZE = re.compile(r"([0-9]+)\s*([kmgt]?)(i?b)?\Z", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class BrokerOptionError(BrokerError, ValueError):
    """An option of the ``broker`` data source is missing, malformed or contradicts another."""

    code = EC.InvalidData

    def __init__(self, option: str, value: Any, reason: str) -> None:
        shown = "***" if option in _SECRET and value is not None else repr(value)
        where = f"option {option}" if value is None else f"option {option}={shown}"
        super().__init__(f"{where}: {reason}")
        self.option = option
        self.value = None if option in _SECRET else value


# --- values ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HostPort:
    """A ``host:port`` address; the host is empty for "all interfaces" (listen only)."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_host_port(text: str, option: str, *, listen: bool = False) -> HostPort:
    """Parse ``host:port``, ``[ipv6]:port`` (and, for ``listen``, ``:port``)."""
    value = text.strip()
    if value.startswith("["):
        close = value.find("]")
        if close < 0 or not value[close + 1 :].startswith(":"):
            raise BrokerOptionError(option, text, "expected [ipv6-address]:port")
        host, port_text = value[1:close], value[close + 2 :]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise BrokerOptionError(option, text, f"{host!r} is not an IPv6 address") from None
    else:
        if value.count(":") > 1:
            raise BrokerOptionError(
                option, text, "an IPv6 address needs brackets, as in [::1]:9999"
            )
        host, sep, port_text = value.rpartition(":")
        if not sep:
            raise BrokerOptionError(option, text, "expected host:port")
        if host and not _HOSTNAME.match(host):
            raise BrokerOptionError(option, text, f"{host!r} is not a host name or address")
    if not host and not listen:
        raise BrokerOptionError(option, text, "the host is missing (expected host:port)")
    if not port_text.isdigit() or not port_text.isascii():
        raise BrokerOptionError(option, text, f"port {port_text!r} is not a number")
    port = int(port_text)
    if port > 65535 or (port == 0 and not listen):
        raise BrokerOptionError(option, text, f"port {port} is out of range (1 to 65535)")
    return HostPort(host, port)


@dataclass(frozen=True)
class WebSocketTarget:
    """A remote Broker/Zeek WebSocket API: ``ws://`` (plain) or ``wss://`` (TLS)."""

    url: str
    secure: bool
    host: str
    port: int
    path: str


def _parse_websocket(text: str) -> WebSocketTarget:
    option = "websocket"
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError as exc:
        raise BrokerOptionError(option, text, f"not a URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("ws", "wss"):
        raise BrokerOptionError(option, text, "expected a ws:// or wss:// URL")
    host = parts.hostname or ""
    if not host:
        raise BrokerOptionError(option, text, "the URL names no host")
    if parts.username is not None or parts.query or parts.fragment:
        raise BrokerOptionError(option, text, "user names, queries and fragments are not supported")
    secure = scheme == "wss"
    if port is None:
        port = 443 if secure else 80
    elif port == 0:
        raise BrokerOptionError(option, text, "port 0 is out of range (1 to 65535)")
    path = parts.path if parts.path not in ("", "/") else DEFAULT_WEBSOCKET_PATH
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return WebSocketTarget(f"{scheme}://{netloc}{path}", secure, host, port, path)


@dataclass(frozen=True)
class SslOptions:
    """TLS for native peerings, as Broker's ``openssl_*`` settings (any file set: mutual TLS)."""

    disable: bool = False
    certificate: str = ""
    key: str = ""
    cafile: str = ""
    capath: str = ""
    passphrase: str = field(default="", repr=False)

    @property
    def authenticated(self) -> bool:
        return any((self.certificate, self.key, self.cafile, self.capath, self.passphrase))

    def apply(self, config: Configuration) -> Configuration:
        """Copy these settings into an endpoint :class:`Configuration` (returned for chaining)."""
        config.options.disable_ssl = self.disable
        config.openssl_certificate = self.certificate
        config.openssl_key = self.key
        config.openssl_cafile = self.cafile
        config.openssl_capath = self.capath
        config.openssl_passphrase = self.passphrase
        return config


@dataclass(frozen=True)
class ConnectionOptions:
    """How an endpoint reaches the Broker world: accept peers, dial peers, or a WebSocket API."""

    listen: HostPort | None = None
    peers: tuple[HostPort, ...] = ()
    websocket: WebSocketTarget | None = None
    ssl: SslOptions = field(default_factory=SslOptions)

    def configuration(self) -> Configuration:
        """A fresh endpoint configuration with these TLS settings."""
        from broker_spark.config import Configuration

        return self.ssl.apply(Configuration())


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
    zeek_types: tuple[tuple[str, str], ...] = ()  # column -> Zeek type, for log columns


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
                raise BrokerOptionError(name, value, f"given twice, also as {self.values[name]!r}")
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


def _ssl(raw: _Raw) -> SslOptions:
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
    return SslOptions(
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
    websocket = _parse_websocket(websocket_text) if websocket_text else None
    ssl = _ssl(raw)
    if websocket is not None and websocket.secure and ssl.disable:
        raise BrokerOptionError(
            "ssl.disable", "true", f"contradicts websocket={websocket_text!r} (use ws://)"
        )
    return ConnectionOptions(listen, peers, websocket, ssl)


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
        for name in ("logs", "columns", "schemaWait"):
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
    if not (conn.listen or conn.peers or conn.websocket):
        raise BrokerOptionError(
            "listen/peer/websocket", None, "one of them is required to reach Broker peers"
        )
    partition_data = raw.choice("partitionData", PARTITION_DATA, "auto")
    spool_path = raw.nonempty("spoolPath")
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
    )


_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?)\s*(ms|s|)\Z")


def _seconds(raw: _Raw, name: str, default: float) -> float:
    """A duration in seconds (``2``, ``2s``, ``500ms``; 0 for none)."""
    value = raw.get(name)
    if value is None:
        return default
    match = _DURATION.match(value.strip().lower())
    if not match:
        raise BrokerOptionError(name, value, "expected seconds, such as 2, 2s or 500ms")
    number = float(match.group(1))
    return number / 1000 if match.group(2) == "ms" else number


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
    zeek_types = _zeek_types(raw)
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
    elif zeek_types:
        raise BrokerOptionError("zeekTypes", raw.get("zeekTypes"), "applies with option log only")
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
    if not (conn.peers or conn.websocket):
        raise BrokerOptionError("peer/websocket", None, "one of them is required to publish")
    return WriterOptions(
        connection=conn,
        topic=topic,
        store=store,
        format=fmt,
        bad_records_topic=bad_records,
        log=log_stream,
        log_path=log_path if log_stream is not None else None,
        zeek_types=zeek_types,
    )


def _zeek_types(raw: _Raw) -> tuple[tuple[str, str], ...]:
    """``column:type,...`` (Zeek's spelling of the type: ``count``, ``addr``, ``set[string]``)."""
    from broker_spark.zeek.types import ZeekType

    value = raw.get("zeekTypes")
    if value is None:
        return ()
    out = []
    for item in value.split(","):
        if not item.strip():
            continue
        name, sep, spec = item.partition(":")
        if not sep or not name.strip():
            raise BrokerOptionError("zeekTypes", value, f"{item.strip()!r} is not column:type")
        try:
            ZeekType.parse(spec)
        except ValueError as exc:
            raise BrokerOptionError("zeekTypes", value, str(exc)) from None
        out.append((name.strip(), spec.strip()))
    return tuple(out)
