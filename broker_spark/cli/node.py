"""``broker-spark node``: run an endpoint from flags and/or a TOML file until interrupted.

On start it prints, on stdout, one line per fact a script may need, and
nothing else: ``node <id>``, ``listening on HOST:PORT``, ``websocket
listening on HOST:PORT``, ``relay listening on HOST:PORT`` (``--spool``) and
finally ``ready`` (ports are the bound ones, so port 0 works). Peer events and errors go to the log (stderr). SIGINT or
SIGTERM shuts the endpoint down cleanly (goodbyes to peers, stores closed)
and exits 0.

Flags override the file, setting by setting: ``--peer`` given once replaces
the file's whole list of peers, ``--cert`` replaces only the certificate.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from typing import Any

from broker_spark.cli.args import (
    add_tls_arguments,
    check_tls,
    host_port,
    positive_float,
    secret_text,
    tls_flags,
)
from broker_spark.cli.errors import CliError, UsageError
from broker_spark.cli.exposure import check_exposure
from broker_spark.cli.node_check import check, metrics_tls, say, where
from broker_spark.cli.node_config import NodeSettings, StoreSpec, load_node_config
from broker_spark.cli.node_sources import (
    CURVE_FLAGS,
    NodeSources,
    add_source_arguments,
    curve_keys,
)
from broker_spark.source_opener import SourceError, SourceOpener

__all__ = ["register", "run", "serve"]

log = logging.getLogger("broker_spark.cli")

#: Where the WebSocket server's and the metrics' bearer tokens come from without a flag.
WEBSOCKET_TOKEN_ENV = "BROKER_SPARK_WEBSOCKET_TOKEN"
METRICS_TOKEN_ENV = "BROKER_SPARK_METRICS_TOKEN"


def _master_spec(text: str) -> StoreSpec:
    name, _, rest = text.partition(":")
    backend, _, path = rest.partition(":")
    backend = backend.lower() or "memory"
    if not name or backend not in ("memory", "sqlite"):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME, NAME:memory or NAME:sqlite:PATH")
    if backend == "sqlite" and not path:
        raise argparse.ArgumentTypeError(f"{text!r}: the sqlite backend needs a path")
    return StoreSpec(name, backend, path or None)


def _size(text: str) -> int:
    from broker_spark.cli.relay_node import size_value

    try:
        return size_value(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _size_or_none(text: str) -> int:
    """A size, or ``none``/``0`` for no limit (0)."""
    if text.strip().lower() in ("none", "0"):
        return 0
    return _size(text)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "node",
        help="run an endpoint (listen, peer, serve WebSocket clients, host stores)",
        description="Run a Broker endpoint until interrupted. Settings come from --config "
        "(TOML, see conf/) and from flags, which override the file.",
        epilog="examples:\n"
        "  broker-spark node --listen 127.0.0.1:9999 --no-tls\n"
        "  broker-spark node --config conf/zeek-facing.toml\n"
        "  broker-spark node --listen :0 --peer 10.0.0.1:9999 --master counters:sqlite:c.db",
    )
    p.add_argument("--config", metavar="FILE", help="TOML configuration (see conf/)")
    p.add_argument(
        "--check",
        action="store_true",
        help="check the configuration (files, certificates, keys, tokens, the spool's folder) "
        "and exit: 0 when it would start, else what is wrong; binds nothing",
    )
    p.add_argument(
        "--listen",
        type=host_port,
        metavar="HOST:PORT",
        help="accept peers here (default 127.0.0.1:9999; port 0 picks a free one)",
    )
    p.add_argument("--no-listen", action="store_true", help="do not accept peers")
    p.add_argument(
        "--peer",
        type=host_port,
        action="append",
        metavar="HOST:PORT",
        help="peer with this node (repeatable; replaces the file's peers)",
    )
    p.add_argument(
        "--retry", type=positive_float, metavar="SECONDS", help="redial lost peers (default 10)"
    )
    p.add_argument(
        "--websocket", type=host_port, metavar="HOST:PORT", help="serve Zeek's WebSocket API here"
    )
    p.add_argument(
        "--websocket-token",
        metavar="TOKEN|@FILE",
        help="WebSocket clients must send this bearer token (Authorization: Bearer, or as "
        f"their URL's password); default ${WEBSOCKET_TOKEN_ENV}",
    )
    p.add_argument(
        "--forward", action="append", metavar="TOPIC", help="route TOPIC here (repeatable)"
    )
    p.add_argument(
        "--master",
        type=_master_spec,
        action="append",
        metavar="NAME[:sqlite:PATH]",
        help="master a data store (memory, or SQLite at PATH; repeatable)",
    )
    p.add_argument("--clone", action="append", metavar="NAME", help="clone a data store")
    p.add_argument(
        "--log-dir",
        metavar="DIR",
        help="write the Zeek logs that arrive into DIR, one JSON file per log, as Zeek's logger",
    )
    p.add_argument(
        "--log-rotate",
        type=positive_float,
        metavar="SECONDS",
        help="rotate the files of --log-dir this often, from local midnight (default 3600; 0: never)",
    )
    p.add_argument(
        "--log-topic",
        action="append",
        metavar="TOPIC",
        help="where the logs arrive (repeatable; default zeek/logs/)",
    )
    spool = p.add_argument_group(
        "relay",
        "Keep what arrives on some topics in a durable spool and serve it to Spark readers "
        '(.option("relay", HOST:PORT)), which replay from their checkpoint: see docs/relay.md.',
    )
    spool.add_argument("--spool", metavar="DIR", help="append what arrives to the spool in DIR")
    spool.add_argument(
        "--subscribe",
        action="append",
        metavar="PREFIX",
        help="topics the spool keeps (repeatable; e.g. zeek/logs/)",
    )
    spool.add_argument(
        "--relay",
        type=host_port,
        metavar="HOST:PORT",
        help="serve the spool to readers here (default 127.0.0.1:9998; TLS as peerings)",
    )
    spool.add_argument("--no-relay", action="store_true", help="keep the spool, serve nobody")
    spool.add_argument(
        "--reader",
        type=_reader_grant,
        action="append",
        metavar="NAME=PREFIX[,PREFIX...]",
        help="limit the relay reader whose certificate is named NAME ('*': any other) to "
        "these topic prefixes (repeatable; needs mutual TLS; empty after '=': nothing)",
    )
    spool.add_argument(
        "--spool-retention",
        type=_size_or_none,
        metavar="SIZE",
        help="drop the oldest records while the spool's files take more than this on disk, "
        "compressed ones at their compressed size (default none: by age, with --spool-min-free)",
    )
    spool.add_argument(
        "--spool-segment",
        type=_size,
        metavar="SIZE",
        help="the size of one spool file; retention drops whole files (default 64m)",
    )
    spool.add_argument(
        "--spool-max-age",
        type=positive_float,
        metavar="SECONDS",
        help="drop records older than this (default 86400: a day)",
    )
    spool.add_argument(
        "--spool-min-free",
        type=_size_or_none,
        metavar="SIZE",
        help="take nothing while the spool's disk has less free (default 1g, or 5%% of the "
        "file system if less; none: no guard); Zeek keeps what it sends meanwhile",
    )
    spool.add_argument(
        "--spool-fsync",
        choices=("never", "interval", "always"),
        help="when appends reach the disk: never (the kernel decides), interval (each "
        "second; the default) or always (each append); docs/relay.md says what a power "
        "cut loses with each",
    )
    spool.add_argument(
        "--spool-compression",
        choices=("zstd", "lz4", "none"),
        help="how files the spool has filled are compressed: zstd (the default: a real "
        "Zeek's ZeroMQ batches take about a thirteenth, its Broker Batches a tenth), lz4 or none; what arrives last is kept "
        "as written",
    )
    spool.add_argument(
        "--relay-compression",
        choices=("auto", "always", "never"),
        help="compress the records the relay sends a reader (zstd; the reader "
        "decompresses): auto (the default) for readers on other machines, not over "
        "loopback; always (a tunnel that arrives on loopback); never",
    )
    spool.add_argument(
        "--metrics",
        type=host_port,
        metavar="HOST:PORT",
        help="serve Prometheus metrics of the spool and its sources here (/metrics)",
    )
    spool.add_argument(
        "--metrics-tls",
        action="store_true",
        help="serve the metrics over HTTPS with the node's certificate and key (--cert, --key)",
    )
    spool.add_argument("--metrics-cert", metavar="FILE", help="or with this certificate (PEM)")
    spool.add_argument("--metrics-key", metavar="FILE", help="and this key (PEM)")
    spool.add_argument(
        "--metrics-token",
        metavar="TOKEN|@FILE",
        help="scrapers must send this bearer token (Prometheus' authorization: "
        f"credentials_file); default ${METRICS_TOKEN_ENV}",
    )
    add_source_arguments(p)
    p.add_argument("--ttl", type=int, help="hops a message may travel (default 16)")
    p.add_argument(
        "--no-forwarding", action="store_true", help="never forward messages between peers"
    )
    add_tls_arguments(p)
    p.add_argument(
        "--allow-anonymous",
        action="store_true",
        help="let listeners off loopback take clients without mutual TLS or CURVE "
        "(a warning at start; docs/security.md)",
    )
    p.add_argument(
        "--connections-per-address",
        type=int,
        metavar="N",
        help="connections one address may hold at once on each listener: the peering, "
        "the WebSocket API and the relay (default 64: a Spark executor host runs a task "
        "per core, each with its own connection); the metrics take a quarter of their 32 "
        "unless this is given",
    )
    p.set_defaults(run=run)


def settings_from(args: argparse.Namespace) -> NodeSettings:
    """The file's settings (or the defaults), overridden by each flag given."""
    s = load_node_config(args.config) if args.config else NodeSettings()
    if args.listen is not None:
        s.listen = args.listen
    if args.no_listen:
        s.listen = None
    for flag, name in (
        ("peer", "peers"),
        ("retry", "retry"),
        ("websocket", "websocket"),
        ("forward", "forward"),
        ("master", "masters"),
        ("clone", "clones"),
        ("log_dir", "log_dir"),
        ("log_rotate", "log_rotate"),
        ("log_topic", "log_topics"),
        ("spool", "spool_dir"),
        ("subscribe", "spool_topics"),
        ("relay", "relay"),
        ("spool_retention", "spool_retention_bytes"),
        ("spool_max_age", "spool_retention_seconds"),
        ("spool_segment", "spool_segment_bytes"),
        ("spool_min_free", "spool_min_free_bytes"),
        ("spool_fsync", "spool_fsync"),
        ("spool_compression", "spool_compression"),
        ("relay_compression", "relay_compression"),
        ("zeromq_logs", "zeromq_logs"),
        ("zeromq_proxy", "zeromq_proxy"),
        ("websocket_peer", "websocket_peers"),
        ("metrics", "metrics"),
        ("metrics_cert", "metrics_certificate"),
        ("metrics_key", "metrics_key"),
        ("connections_per_address", "connections_per_address"),
    ):
        value = getattr(args, flag)
        if value is not None:
            setattr(s, name, value)
    flags = {CURVE_FLAGS[f]: getattr(args, f) for f in CURVE_FLAGS if getattr(args, f)}
    if flags:  # flags replace the file's keys as a whole: a pair must come from one place
        s.curve = flags
    s.tls = s.tls.replace(**tls_flags(args))
    for flag, name, env in (
        ("websocket_token", "websocket_token", WEBSOCKET_TOKEN_ENV),
        ("metrics_token", "metrics_token", METRICS_TOKEN_ENV),
    ):
        value = getattr(args, flag)
        if value is not None:
            setattr(s, name, secret_text(value, "--" + flag.replace("_", "-")))
        elif not getattr(s, name) and os.environ.get(env):
            setattr(s, name, os.environ[env])
    if s.spool_retention_bytes == 0:
        s.spool_retention_bytes = None  # --spool-retention none
    if args.metrics_tls:
        s.metrics_tls = True
    if args.allow_anonymous:
        s.allow_anonymous = True
    if args.reader:  # flags replace the file's table as a whole
        s.spool_readers = dict(args.reader)
    if args.no_relay:
        s.relay = None
    if args.no_tls:
        s.tls = s.tls.replace(disable_ssl=True)
    if args.ttl is not None:
        s.options["ttl"] = args.ttl
    if args.no_forwarding:
        s.options["disable_forwarding"] = True
    return s


def run(args: argparse.Namespace) -> int:
    from broker_spark.cli.signals import stop_on_signals

    settings = settings_from(args)
    if settings.zeromq_logs and not settings.log_dir and not settings.spool_dir:
        raise CliError(
            "--zeromq-logs needs --spool DIR (keep the logs for Spark readers) and/or "
            "--log-dir DIR (write them into files)"
        )
    if settings.metrics is not None and not settings.spool_dir:
        raise UsageError("--metrics shows a spool and its sources: give --spool DIR too")
    if args.log_level is None and settings.log_level:
        logging.getLogger("broker_spark").setLevel(settings.log_level.upper())
    if args.check:
        return check(settings)
    reload = threading.Event()
    with stop_on_signals(reload=reload) as stop:
        serve(settings, stop, reload, lambda: settings_from(args))
    return 0


def serve(
    settings: NodeSettings,
    stop: threading.Event,
    reload: threading.Event | None = None,
    load: Any = None,
) -> None:
    """Start the endpoint as configured, announce it, run until ``stop`` is set, shut down;
    whenever ``reload`` is set (SIGHUP), read the settings again with ``load()`` and take
    the certificates, keys, limits and tokens that may change (:mod:`node_reload`)."""
    from broker_spark.endpoint import Endpoint

    config = settings.configuration()
    check_tls(config)
    for warning in check_exposure(settings, curve_keys(settings.curve)):
        log.warning("%s", warning)
    relay = _relay_node(settings)
    endpoint = Endpoint(config)
    sources = NodeSources(settings, endpoint, relay.counts if relay is not None else None)
    logger = None
    sink = None
    metrics = None
    planned = False
    try:
        errors = endpoint.make_status_subscriber()
        say(f"node {endpoint.node_id()}")
        if relay is not None:  # subscribed before any peering, as the log sink
            relay.subscribe(endpoint)
        zeromq_logs = sources.open_zeromq_logs()
        if zeromq_logs is not None:
            say(f"zeromq logs on {zeromq_logs.endpoint}")
        for_files = zeromq_logs
        if zeromq_logs is not None and relay is not None:
            if settings.log_dir:  # both keep every batch: one socket, two consumers
                from broker_spark.spool.tee import Tee

                tee = Tee(zeromq_logs)
                relay.take_from(tee)
                for_files = tee.second
            else:
                relay.take_from(zeromq_logs)
        if settings.log_dir:  # subscribed before any peering: peers learn it in the handshake
            sink = _log_sink(endpoint, settings, for_files)
        if settings.forward:
            endpoint.forward(settings.forward)
        _attach_stores(endpoint, settings)
        if settings.listen is not None:
            try:
                port = SourceOpener(endpoint, errors).listen(*settings.listen)
            except SourceError as exc:
                raise CliError(str(exc)) from None
            say(f"listening on {where((settings.listen[0], port))}")
            if relay is not None:
                relay.watch(endpoint.listen_admission(port))
        if settings.websocket is not None:
            port = endpoint.web_socket_listen(
                *settings.websocket, token=settings.websocket_token or None
            )
            if not port:
                raise CliError(
                    f"cannot serve the WebSocket API on {where(settings.websocket)} "
                    "(address in use or not available?)"
                )
            say(f"websocket listening on {where((settings.websocket[0], port))}")
            if relay is not None:
                relay.watch(web_socket_admission(endpoint, port))
        errors.reset()
        # from here on, statuses and errors go to the log (and refusals into the counts)
        logger = _StatusLogger(endpoint, relay.counts if relay is not None else None)
        for peer in settings.peers:
            log.info("peering with %s (redialling every %g s)", where(peer), settings.retry)
            endpoint.peer_nosync(peer[0], peer[1], settings.retry)
        sources.start(list(settings.spool_topics or settings.forward), settings.retry)
        if relay is not None:
            port = relay.start(_relay_tls(config))
            if port is not None and settings.relay is not None:
                say(f"relay listening on {where((settings.relay[0], port))}")
            if settings.metrics is not None:
                metrics = _metrics(relay, settings, metrics_tls(settings))
                relay.watch(metrics.admission)
                scheme = "https" if metrics.tls else "http"
                say(
                    f"metrics listening on {where((settings.metrics[0], metrics.port))}"
                    + (f" ({scheme})" if metrics.tls else "")
                )
        reloader = None
        if load is not None:
            from broker_spark.cli.node_reload import Reloader

            reloader = Reloader(
                load,
                settings,
                endpoint=endpoint,
                relay=relay,
                metrics=metrics,
                receiver=zeromq_logs,
                websocket_servers=lambda: _websocket_servers(endpoint),
            )
        say("ready")
        while not stop.wait(0.5):
            if reload is not None and reload.is_set():
                reload.clear()
                if reloader is not None:
                    reloader.reload()
        log.info("shutting down: taking nothing more, keeping what was read")
        planned = True
    finally:
        if planned:
            _planned_stop(endpoint, sources, relay)
        if metrics is not None:
            metrics.close()
        if logger is not None:
            logger.stop()
        sources.stop()
        if sink is not None:
            sink.stop()
        if relay is not None:
            relay.stop(READER_GRACE if planned else 0.0)
        endpoint.shutdown()


#: Seconds a planned stop gives the sources to hand over and the spool to take what they
#: hold, and readers to finish their current fetch: within STOP_BOUND in all.
DRAIN_TIMEOUT = 20.0
READER_GRACE = 5.0
#: What a planned stop takes at most, as docs/relay.md states it (the rest: closing).
STOP_BOUND = DRAIN_TIMEOUT + READER_GRACE + 5.0


def _planned_stop(endpoint: Any, sources: Any, relay: Any) -> None:
    """SIGTERM or SIGINT: every source stops taking from the network (the ZeroMQ PULL
    unbinds, so Zeek's PUSH routes to the other loggers; peerings, WebSocket bridges and the
    proxy end), what was read is appended and the spool synced; then readers get their
    grace (:func:`serve` goes on). Logs what was read and kept."""
    started = time.monotonic()
    sources.stop_joining()
    try:
        endpoint.stop_taking()
    except Exception as exc:  # never in the way of keeping what was read
        log.warning("stopping the endpoint's peerings: %s", exc)
    if relay is None:
        return
    receiver = sources.receiver
    kept = relay.finish(DRAIN_TIMEOUT)
    read = receiver.received if receiver is not None else None
    log.info(
        "stopped taking in %.2f s: %s; spool ends at offset %d%s",
        time.monotonic() - started,
        "everything read is appended and synced"
        if kept
        else f"could not append everything read within {DRAIN_TIMEOUT:g} s",
        relay.service.spool.end_offset(),
        f" ({read} ZeroMQ log messages read since start)" if read is not None else "",
    )


def _log_sink(endpoint: Any, settings: NodeSettings, source: Any) -> Any:
    """``--log-dir``: the logs of the endpoint's log topics, or of ``source`` (ZeroMQ)."""
    from broker_spark.cli.log_dir import LogDirectory, LogSink

    directory = LogDirectory(settings.log_dir or "", settings.log_rotate)
    sink = LogSink(endpoint, directory, settings.log_topics, source)
    log.info(
        "writing Zeek logs from %s into %s (%s)",
        settings.zeromq_logs if source is not None else " ".join(settings.log_topics),
        settings.log_dir,
        f"rotated every {settings.log_rotate:g} s" if settings.log_rotate else "no rotation",
    )
    return sink


def web_socket_admission(endpoint: Any, port: int) -> Any:
    """The :class:`~broker_spark.admission.Admission` of the endpoint's WebSocket server."""
    from broker_spark.websocket.manager import manager_for

    return manager_for(endpoint).servers[port].admission


def _metrics(relay: Any, settings: NodeSettings, tls: Any) -> Any:
    from broker_spark.spool.metrics import MetricsServer

    address = settings.metrics
    assert address is not None
    try:
        return MetricsServer(
            relay.status,
            *address,
            token=settings.metrics_token or None,
            tls=tls,
            per_address=settings.connections_per_address,
        )
    except OSError as exc:
        raise CliError(f"cannot serve the metrics on {where(address)}: {exc}") from None


def _websocket_servers(endpoint: Any) -> list[Any]:
    from broker_spark.websocket.manager import manager_for

    return list(manager_for(endpoint).servers.values())


def _relay_node(settings: NodeSettings) -> Any:
    """The spool and relay of ``--spool`` (None without it)."""
    if not settings.spool_dir:
        if settings.spool_topics:
            raise UsageError("--subscribe is for the spool: give --spool DIR too")
        return None
    from broker_spark.cli.relay_node import RelayNode, SpoolSettings

    if settings.spool_readers and (settings.tls.disable_ssl or not settings.tls.authenticated):
        raise UsageError(
            "--reader limits readers by the name in their certificate: it needs mutual TLS "
            "(--cert, --key and --ca)"
        )
    return RelayNode(
        SpoolSettings(
            settings.spool_dir,
            list(settings.spool_topics),
            settings.relay,
            settings.spool_retention_bytes,
            settings.spool_retention_seconds,
            dict(settings.spool_readers),
            settings.spool_segment_bytes,
            settings.spool_min_free_bytes,
            settings.spool_fsync,
            settings.spool_compression,
            settings.relay_compression,
            settings.connections_per_address,
        )
    )


def _reader_grant(text: str) -> tuple[str, tuple[str, ...]]:
    """``NAME=PREFIX[,PREFIX...]``: a certificate name and the topic prefixes it may read."""
    name, sep, prefixes = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=PREFIX[,PREFIX...]")
    return name.strip(), tuple(p.strip() for p in prefixes.split(",") if p.strip())


def _relay_tls(config: Any) -> Any:
    """The relay's server TLS context: the node's own TLS settings (None: plain TCP)."""
    from broker_spark.config import TLSSettings
    from broker_spark.tls import make_contexts

    contexts = make_contexts(TLSSettings.of(config))
    return contexts.server if contexts is not None else None


def _attach_stores(endpoint: Any, settings: NodeSettings) -> None:
    from broker_spark.config import Backend

    for spec in settings.masters:
        if spec.backend == "sqlite":
            endpoint.attach_master(spec.name, Backend.SQLite, {"path": spec.path})
        else:
            endpoint.attach_master(spec.name, Backend.Memory)
        log.info(
            "master of store %s (%s%s)",
            spec.name,
            spec.backend,
            f" at {spec.path}" if spec.path else "",
        )
    for name in settings.clones:
        endpoint.attach_clone(name)
        log.info("clone of store %s", name)


#: Errors that mean a peer's connection or message was turned away (what a relay counts).
_REFUSALS = {
    "peer_invalid": "connection",
    "peer_incompatible": "connection",
    "peer_disconnect_during_handshake": "connection",
    "invalid_message": "undecodable",
    "deserialization_failed": "undecodable",
}


class _StatusLogger:
    """Logs the endpoint's statuses (INFO) and errors (WARNING) from a thread of its own;
    with ``counts`` (a relay's), counts each refused connection or message of a peer."""

    def __init__(self, endpoint: Any, counts: Any = None) -> None:
        self._counts = counts
        self._sub = endpoint.make_status_subscriber(receive_statuses=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="broker-spark-status", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from broker_spark.errors import BrokerError
        from broker_spark.status import Error

        while not self._stop.is_set():
            try:
                items = self._sub.get(64, 0.2)
            except BrokerError:
                return  # the endpoint shut down
            for item in items:
                log_status(item)
                if self._counts is not None and isinstance(item, Error):
                    reason = _REFUSALS.get(item.code().snake_name)
                    if reason is not None:
                        self._counts.refused("broker", reason)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2.0)


def log_status(item: Any) -> None:
    """One status or error as one log line."""
    from broker_spark.status import Error

    if isinstance(item, Error):
        log.warning("%s: %s", item.code().snake_name, item.message())
        return
    words = "".join(" " + c.lower() if c.isupper() else c for c in item.code().name).strip()
    ctx = item.context()
    where = f" at {ctx.network}" if ctx.network.is_set() else ""
    detail = f" ({item.message()})" if item.message() else ""
    log.info("%s: %s%s%s", words, ctx.node or "?", where, detail)
