"""Node configuration files (TOML) for ``broker-spark node --config FILE``.

The layout, every key optional (``conf/*.toml`` are commented examples). Each key's
comment (and the indented comment lines under it) is its meaning in
docs/reference/config.md, which is generated from this docstring and checked against the
keys the reader below takes (``make reference``, tests/test_reference.py)::

    [endpoint]                    # the node's Broker endpoint
    listen = "127.0.0.1:9999"     # where peers connect; false: do not listen
    peers = ["10.0.0.2:9999"]     # nodes to peer with, redialled every `retry` s
    retry = 10.0                  # seconds between redials of a lost peer
    forward = ["/zeek/"]          # topics to route here without a local subscriber
    allow_anonymous = false       # true: listeners off loopback may take unauthenticated
                                  # clients (docs/security.md); a warning at start
    connections_per_address = 64  # connections one address may hold at once on each
                                  # listener (peering, WebSocket, relay; default 64, a
                                  # Spark executor host's tasks; metrics: 8 unless set)

    [websocket]                   # Zeek's WebSocket JSON API
    listen = "127.0.0.1:9997"     # serve it here (wss unless TLS is off)
    peers = ["ws://zeek:27759/v1/messages/json"]  # WebSocket APIs to subscribe at
    token = "@ws.token"           # clients must send it (Authorization: Bearer); @FILE
                                  # reads it from FILE

    [tls]                         # TLS of every listener and dial (as the --cert... flags)
    disable = false               # true: plain TCP (Broker's disable_ssl)
    certificate = "certs/a.pem"   # this node's certificate; with any of these four,
                                  # mutual TLS against the CA
    key = "certs/a.key"           # its private key (PEM)
    cafile = "certs/ca.pem"       # the CA that verifies peers
    capath = ""                   # or a directory of CA certificates
    passphrase = ""               # the key's passphrase, or "@FILE": read from FILE

    [options]                     # Broker's options (BrokerOptions), by their field names
    ttl = 16                      # hops a message may travel

    [[master]]                    # a data store mastered here (repeatable)
    name = "counters"             # the store's name
    backend = "sqlite"            # "memory" (the default) or "sqlite"
    path = "counters.sqlite"      # the SQLite file (sqlite only)

    [[clone]]                     # a clone of a store mastered elsewhere (repeatable)
    name = "hosts"                # the store's name

    [log]                         # the node's own log (stderr)
    level = "info"                # debug, info, warning or error

    [spool]                       # keep what arrives for Spark readers to replay (a relay)
    dir = "spool"                 # the spool's folder
    topics = ["zeek/logs/"]       # what it keeps (topic prefixes)
    relay = "127.0.0.1:9998"      # where readers connect (TLS as [tls]); false: nobody
    retention_seconds = 86400     # drop records beyond this age (default: a day)
    retention_bytes = 0           # or beyond this size on disk, compressed files at their
                                  # compressed size (0, the default: no size limit)
    min_free_bytes = 1073741824   # take nothing while the disk has less free (default
                                  # 1 GiB, or 5% of the file system if less; 0: off)
    fsync = "interval"            # when appends reach the disk: never, interval (each
                                  # second, the default) or always (each append)
    compression = "zstd"          # how filled files are compressed: zstd (the default),
                                  # lz4 or none; the file being written stays as written
    relay_compression = "auto"    # records sent to readers compressed: auto (readers on
                                  # other machines, the default), always, never
    relay_decoders = 2            # tasks of Zeek log readers whose rows the relay decodes
                                  # at once (0: none; the others decode what they fetch)
    segment_bytes = 67108864      # a file's size: retention drops whole files (as Kafka)

    [spool.readers]               # limit readers (by their certificate's name) to topics
    "dns-team" = ["zeek/logs/DNS::LOG"]   # this certificate reads the DNS log only
    "*" = []                      # any other certificate: nothing (leave out: everything)

    [logs]                        # write Zeek's logs received here into files, as its logger
    dir = "zeek-logs"             # one PATH.log per log (conn.log, dns.log, ...)
    rotate = 3600                 # seconds between rotations (0: never)
    topics = ["zeek/logs/"]       # where the logs arrive
    zeromq = "tcp://0.0.0.0:5557" # the same as [zeromq] logs

    [zeromq]                      # a Zeek cluster on the ZeroMQ backend
    logs = "tcp://0.0.0.0:5557"   # be one of its loggers: a PULL socket bound here
    proxy = "zeek-proxy"          # take events through its XPUB/XSUB proxy (HOST, or
                                  # "tcp://HOST:5555,tcp://HOST:5556")
    curve_server_publickey = ""   # CURVE (Z85, as Zeek's option of the same name): the
                                  # proxy's public key, to join it
    curve_server_secretkey = ""   # the PULL socket's secret key ("@FILE": read from FILE)
    curve_client_publickey = ""   # the cluster's client public key: the one client the
                                  # PULL lets in, and ours toward the proxy
    curve_client_secretkey = ""   # its secret key, to join the proxy ("@FILE"); without
                                  # any curve_* key, Zeek's ZEEK_CLUSTER_BACKEND_ZEROMQ_CURVE_*
                                  # variables apply (never both)

    [metrics]                     # Prometheus metrics of the spool and its sources
    listen = "127.0.0.1:9101"     # serve /metrics here
    token = "@metrics.token"      # scrapers must send it (Prometheus' credentials_file)
    tls = false                   # true: HTTPS with the node's [tls] certificate and key
    certificate = ""              # or HTTPS with a certificate and key of their own
    key = ""

Relative paths (certificates, SQLite files) are relative to the directory of
the file, so a configuration works from any working directory. Unknown
sections and keys are errors that name the key and the file (a typo must not
be silently ignored), as are values of the wrong type.
"""

from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker_spark.addresses import HostPort, parse_host_port
from broker_spark.config import TLS_FILES, BrokerOptions, TLSSettings
from broker_spark.exits import UsageError
from broker_spark.tls import TLSConfigError, make_contexts

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "LOG_LEVELS",
    "ConfigError",
    "NodeSettings",
    "StoreSpec",
    "check_tls",
    "load_node_config",
    "secret_text",
    "size_value",
]

LOG_LEVELS = ("debug", "info", "warning", "error")
BACKENDS = ("memory", "sqlite")

#: Default address to accept peers on (Broker's customary port, loopback only).
DEFAULT_LISTEN: HostPort = ("127.0.0.1", 9999)

#: How long a relay keeps records by default: a day of a site's logs (docs/relay.md says
#: the disk that takes at a given rate).
DEFAULT_RETENTION_SECONDS = 24 * 3600.0
#: When a relay's appends reach the disk by default (see spool.Spool): each second.
DEFAULT_FSYNC = "interval"
FSYNC_POLICIES = ("never", "interval", "always")
#: How a relay's sealed spool files are compressed (spool.compressed_segment.COMPRESSIONS;
#: not imported, so reading a configuration loads no codec).
COMPRESSIONS = ("zstd", "lz4", "none")
#: When a relay compresses what it sends readers (relay_server.WIRE_COMPRESSION).
RELAY_COMPRESSIONS = ("auto", "always", "never")

#: Default address of a spool's relay (readers replay from it).
DEFAULT_RELAY: HostPort = ("127.0.0.1", 9998)


class ConfigError(UsageError):
    """A configuration file that cannot be used; the message names the file."""


@dataclass
class StoreSpec:
    """A store to master (``backend``, ``path``) or to clone."""

    name: str
    backend: str = "memory"
    path: str | None = None


@dataclass
class NodeSettings:
    """Everything ``node`` needs, from a file, from flags, or both (flags win)."""

    listen: HostPort | None = DEFAULT_LISTEN
    peers: list[HostPort] = field(default_factory=list)
    retry: float = 10.0
    forward: list[str] = field(default_factory=list)
    websocket: HostPort | None = None
    tls: TLSSettings = field(default_factory=TLSSettings)
    options: dict[str, Any] = field(default_factory=dict)
    masters: list[StoreSpec] = field(default_factory=list)
    clones: list[str] = field(default_factory=list)
    log_level: str | None = None
    log_dir: str | None = None  # write received Zeek logs into this directory
    log_rotate: float = 3600.0
    log_topics: list[str] = field(default_factory=lambda: ["zeek/logs/"])
    spool_dir: str | None = None  # keep what arrives on spool_topics here, for readers
    spool_topics: list[str] = field(default_factory=list)
    relay: HostPort | None = DEFAULT_RELAY  # where the spool is served (with spool_dir)
    spool_retention_bytes: int | None = None  # None: no size limit (the disk guard instead)
    spool_retention_seconds: float | None = DEFAULT_RETENTION_SECONDS
    spool_segment_bytes: int | None = None  # None: the spool's default (64 MiB)
    spool_min_free_bytes: int | None = None  # None: the guard's default; 0: no guard
    spool_fsync: str = DEFAULT_FSYNC  # never, interval, always
    spool_compression: str = "zstd"  # how sealed spool files are compressed: zstd, lz4, none
    relay_compression: str = "auto"  # records sent to readers compressed: auto, always, never
    relay_decoders: int = 2  # log readers' tasks whose rows the relay decodes at once (0: none)
    zeromq_logs: str | None = None  # take the logs on a ZeroMQ PULL bound here (Zeek 8.1+)
    zeromq_proxy: str | None = None  # take events through a ZeroMQ cluster's proxy (HOST)
    curve: dict[str, str] = field(default_factory=dict, repr=False)  # CURVE keys (secret)
    websocket_peers: list[str] = field(default_factory=list)  # WebSocket APIs to subscribe at
    metrics: HostPort | None = None  # serve Prometheus metrics here
    metrics_tls: bool = False  # serve them over HTTPS with the node's certificate
    metrics_certificate: str = ""  # or with a certificate and key of their own
    metrics_key: str = ""
    websocket_token: str = field(default="", repr=False)  # WebSocket clients' bearer token
    metrics_token: str = field(default="", repr=False)  # scrapers' bearer token
    allow_anonymous: bool = False  # listeners off loopback may take unauthenticated clients
    #: connections one address may hold on each listener (None: each listener's default)
    connections_per_address: int | None = None
    #: relay readers limited to topic prefixes, by their certificate's common name ("*":
    #: every other certificate); empty: every reader reads everything
    spool_readers: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def configuration(self) -> Any:
        """The endpoint's Configuration; ConfigError for an impossible option value."""
        per_address = self.connections_per_address
        extra = {"connections_per_address": per_address} if per_address is not None else {}
        try:
            options = BrokerOptions(**{**self.options, **extra}, disable_ssl=self.tls.disable_ssl)
            options.validate()
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"[options]: {exc}") from None
        return self.tls.configuration(options)


def _option_names() -> list[str]:
    return sorted(n for n in vars(BrokerOptions()) if n != "disable_ssl")


def secret_text(text: str, what: str = "--passphrase") -> str:
    """A secret as given: the text itself, or ``@FILE`` for the contents of FILE (stripped),
    which keeps it off the command line and out of the process list."""
    if not text.startswith("@"):
        return text
    try:
        return Path(text[1:]).expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{what}: cannot read {text[1:]}: {exc.strerror or exc}") from None


def check_tls(config: Any) -> None:
    """Load the certificates now, so a wrong path or passphrase is a usage error up front."""
    if config.options.disable_ssl or not config.authenticated:
        return
    try:
        make_contexts(TLSSettings.of(config, disable_ssl=False))
    except TLSConfigError as exc:
        raise UsageError(f"TLS: {exc}") from None


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def size_value(text: str) -> int:
    """A size in bytes: ``1073741824``, ``512m``, ``1g``."""
    raw = text.strip().lower().removesuffix("b").removesuffix("i")
    unit = raw[-1:] if raw[-1:] in _UNITS and not raw[-1:].isdigit() else ""
    number = raw[: len(raw) - len(unit)] if unit else raw
    if not number.isdigit() or int(number) <= 0:
        raise ValueError(f"{text!r} is not a size (such as 1073741824, 512m or 1g)")
    return int(number) * _UNITS[unit]


_KIND_NAMES = {
    str: "a string",
    bool: "true or false",
    int: "a number",
    float: "a number",
    list: "a list",
    dict: "a table",
}


class _Reader:
    """Checks one parsed file, section by section, with messages that name the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.base = path.parent

    def fail(self, message: str) -> ConfigError:
        return ConfigError(f"{self.path}: {message}")

    def keys(self, where: str, table: Any, known: list[str]) -> dict[str, Any]:
        if not isinstance(table, dict):
            raise self.fail(f"{where} must be a table")
        for key in table:
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise self.fail(f"unknown key {key!r} in {where}{hint}")
        return table

    def typed(self, where: str, key: str, value: Any, kind: type | tuple[type, ...]) -> Any:
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # TOML booleans are ints to Python: a bool only passes where a bool is asked for.
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(dict.fromkeys(_KIND_NAMES.get(k, k.__name__) for k in kinds))
            raise self.fail(f"{where} {key} must be {names}, got {value!r}")
        return value

    def address(self, where: str, key: str, value: Any) -> HostPort:
        self.typed(where, key, value, str)
        try:
            return parse_host_port(value)
        except ValueError as exc:
            raise self.fail(f"{where} {key}: {exc}") from None

    def path_value(self, where: str, key: str, value: Any) -> str:
        self.typed(where, key, value, str)
        if not value:
            return ""
        p = Path(value).expanduser()
        return str(p if p.is_absolute() else self.base / p)

    def strings(self, where: str, key: str, value: Any) -> list[str]:
        self.typed(where, key, value, list)
        return [self.typed(where, f"{key}[{i}]", v, str) for i, v in enumerate(value)]


def load_node_config(path: str | Path) -> NodeSettings:
    """Read and check a node configuration file; ConfigError naming the file on any problem."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    r = _Reader(path)
    r.keys(
        "the file",
        doc,
        [
            "endpoint",
            "websocket",
            "tls",
            "options",
            "master",
            "clone",
            "log",
            "logs",
            "spool",
            "zeromq",
            "metrics",
        ],
    )
    s = NodeSettings()
    ep = r.keys(
        "[endpoint]",
        doc.get("endpoint", {}),
        ["listen", "peers", "retry", "forward", "allow_anonymous", "connections_per_address"],
    )
    if "connections_per_address" in ep:
        per_address = r.typed(
            "[endpoint]", "connections_per_address", ep["connections_per_address"], int
        )
        if per_address < 1:
            raise r.fail("[endpoint] connections_per_address must be 1 or more")
        s.connections_per_address = per_address
    s.allow_anonymous = r.typed(
        "[endpoint]", "allow_anonymous", ep.get("allow_anonymous", False), bool
    )
    if "listen" in ep:
        listen = ep["listen"]
        s.listen = None if listen is False else r.address("[endpoint]", "listen", listen)
    peers = r.strings("[endpoint]", "peers", ep.get("peers", []))
    s.peers = [r.address("[endpoint]", "peers", p) for p in peers]
    retry = r.typed("[endpoint]", "retry", ep.get("retry", s.retry), (int, float))
    if retry < 0:
        raise r.fail("[endpoint] retry must be zero or more")
    s.retry = float(retry)
    s.forward = r.strings("[endpoint]", "forward", ep.get("forward", []))
    ws = r.keys("[websocket]", doc.get("websocket", {}), ["listen", "peers", "token"])
    s.websocket_token = _secret(r, "[websocket]", "token", ws.get("token", ""))
    if "listen" in ws:
        s.websocket = r.address("[websocket]", "listen", ws["listen"])
    s.websocket_peers = r.strings("[websocket]", "peers", ws.get("peers", []))
    tls = r.keys(
        "[tls]",
        doc.get("tls", {}),
        ["disable", "certificate", "key", "cafile", "capath", "passphrase"],
    )
    s.tls = TLSSettings(
        disable_ssl=r.typed("[tls]", "disable", tls.get("disable", False), bool),
        passphrase=_secret(r, "[tls]", "passphrase", tls.get("passphrase", "")),
        **{name: r.path_value("[tls]", name, tls.get(name, "")) for name in TLS_FILES},
    )
    s.options = dict(r.keys("[options]", doc.get("options", {}), _option_names()))
    s.masters = [_store(r, "[[master]]", t, master=True) for t in _tables(r, doc, "master")]
    s.clones = [_store(r, "[[clone]]", t, master=False).name for t in _tables(r, doc, "clone")]
    log = r.keys("[log]", doc.get("log", {}), ["level"])
    if "level" in log:
        level = r.typed("[log]", "level", log["level"], str).lower()
        if level not in LOG_LEVELS:
            raise r.fail(f"[log] level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
        s.log_level = level
    logs = r.keys("[logs]", doc.get("logs", {}), ["dir", "rotate", "topics", "zeromq"])
    if "dir" in logs:
        s.log_dir = r.path_value("[logs]", "dir", logs["dir"])
    rotate = r.typed("[logs]", "rotate", logs.get("rotate", s.log_rotate), (int, float))
    if rotate < 0:
        raise r.fail("[logs] rotate must be zero (never) or more seconds")
    s.log_rotate = float(rotate)
    if "topics" in logs:
        s.log_topics = r.strings("[logs]", "topics", logs["topics"])
    _spool_section(r, doc, s)
    if "zeromq" in logs:
        s.zeromq_logs = r.typed("[logs]", "zeromq", logs["zeromq"], str)
    _zeromq_section(r, doc, s)
    metrics = r.keys(
        "[metrics]", doc.get("metrics", {}), ["listen", "token", "tls", "certificate", "key"]
    )
    s.metrics_tls = r.typed("[metrics]", "tls", metrics.get("tls", False), bool)
    for name in ("certificate", "key"):
        if name in metrics:
            setattr(s, f"metrics_{name}", r.path_value("[metrics]", name, metrics[name]))
    s.metrics_token = _secret(r, "[metrics]", "token", metrics.get("token", ""))
    if "listen" in metrics:
        s.metrics = r.address("[metrics]", "listen", metrics["listen"])
    try:
        s.configuration()  # option values checked now, with the file's name
    except ConfigError as exc:
        raise r.fail(str(exc)) from None
    return s


def _spool_section(r: _Reader, doc: dict[str, Any], s: NodeSettings) -> None:
    known = [
        "dir", "topics", "relay", "retention_bytes", "retention_seconds", "segment_bytes",
        "readers", "min_free_bytes", "fsync", "compression", "relay_compression",
        "relay_decoders",
    ]  # fmt: skip
    spool = r.keys("[spool]", doc.get("spool", {}), known)
    if "dir" in spool:
        s.spool_dir = r.path_value("[spool]", "dir", spool["dir"])
    if "topics" in spool:
        s.spool_topics = r.strings("[spool]", "topics", spool["topics"])
    if "relay" in spool:
        relay = spool["relay"]
        s.relay = None if relay is False else r.address("[spool]", "relay", relay)
    readers = spool.get("readers", {})
    if not isinstance(readers, dict):
        raise r.fail("[spool] readers must be a table: certificate name = [topic prefixes]")
    s.spool_readers = {
        str(name): tuple(r.strings("[spool.readers]", str(name), topics))
        for name, topics in readers.items()
    }
    for key in ("retention_bytes", "retention_seconds", "segment_bytes"):
        if key in spool:
            value = r.typed("[spool]", key, spool[key], (int, float))
            if key == "retention_bytes" and value == 0:
                s.spool_retention_bytes = None  # no size limit
                continue
            if value <= 0:
                raise r.fail(f"[spool] {key} must be positive")
            setattr(s, f"spool_{key}", float(value) if key == "retention_seconds" else int(value))
    if "min_free_bytes" in spool:
        value = r.typed("[spool]", "min_free_bytes", spool["min_free_bytes"], int)
        if value < 0:
            raise r.fail("[spool] min_free_bytes must be zero (no guard) or more")
        s.spool_min_free_bytes = value
    if "relay_decoders" in spool:
        value = r.typed("[spool]", "relay_decoders", spool["relay_decoders"], int)
        if value < 0:
            raise r.fail("[spool] relay_decoders must be zero (the tasks decode) or more")
        s.relay_decoders = value
    for key, attr, choices in (
        ("fsync", "spool_fsync", FSYNC_POLICIES),
        ("compression", "spool_compression", COMPRESSIONS),
        ("relay_compression", "relay_compression", RELAY_COMPRESSIONS),
    ):
        if key in spool:
            value = r.typed("[spool]", key, spool[key], str)
            if value not in choices:
                raise r.fail(f"[spool] {key} must be one of {', '.join(choices)}, got {value!r}")
            setattr(s, attr, value)


#: The CURVE keys of ``[zeromq]``, named as Zeek's ``Cluster::Backend::ZeroMQ`` options.
CURVE_KEYS = (
    "curve_server_publickey",
    "curve_server_secretkey",
    "curve_client_publickey",
    "curve_client_secretkey",
)


def _zeromq_section(r: _Reader, doc: dict[str, Any], s: NodeSettings) -> None:
    zeromq = r.keys("[zeromq]", doc.get("zeromq", {}), ["logs", "proxy", *CURVE_KEYS])
    if "logs" in zeromq:
        s.zeromq_logs = r.typed("[zeromq]", "logs", zeromq["logs"], str)
    if "proxy" in zeromq:
        s.zeromq_proxy = r.typed("[zeromq]", "proxy", zeromq["proxy"], str)
    for key in CURVE_KEYS:
        value = r.typed("[zeromq]", key, zeromq.get(key, ""), str)
        if value:
            s.curve[key.removeprefix("curve_")] = value


def _secret(r: _Reader, section: str, key: str, value: Any) -> str:
    """A secret (``[tls] passphrase``, a token): the text, or ``@FILE`` (relative to the
    configuration file) for the contents of FILE, so the secret need not sit in the
    configuration. Errors name the file, never the text."""
    if not isinstance(value, str):  # said without the value: it is a secret
        raise r.fail(f"{section} {key} must be a string (the secret, or @FILE)")
    text = value
    if not text.startswith("@"):
        return text
    path = r.path_value(section, key, text[1:])
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise r.fail(f"{section} {key}: cannot read {path}: {exc}") from None


def _tables(r: _Reader, doc: dict[str, Any], name: str) -> list[Any]:
    value = doc.get(name, [])
    if not isinstance(value, list):
        raise r.fail(f"{name} must be an array of tables: write [[{name}]]")
    return value


def _store(r: _Reader, where: str, table: Any, master: bool) -> StoreSpec:
    known = ["name", "backend", "path"] if master else ["name"]
    t = r.keys(where, table, known)
    if "name" not in t:
        raise r.fail(f"{where} needs a name")
    name = r.typed(where, "name", t["name"], str)
    if not name:
        raise r.fail(f"{where} name must not be empty")
    spec = StoreSpec(name)
    if master:
        spec.backend = r.typed(where, "backend", t.get("backend", "memory"), str).lower()
        if spec.backend not in BACKENDS:
            raise r.fail(f"{where} backend must be memory or sqlite, got {spec.backend!r}")
        if "path" in t:
            spec.path = r.path_value(where, "path", t["path"])
        if spec.backend == "sqlite" and not spec.path:
            raise r.fail(f"{where} {name}: the sqlite backend needs a path")
    return spec
