"""A relay node assembled from its settings and run until told to stop.

:func:`serve` is what ``broker-spark node`` runs and what
:class:`~broker_spark.node.running.Node` runs in a thread: it opens the spool and
relay (:mod:`.relay`), the endpoint, the sources beside peering (:mod:`.sources`),
the log directory (:mod:`.log_dir`), the listeners, the metrics and the reloader
(:mod:`.reload`), in the order that lets peers learn every subscription in the
handshake; then it waits, and on a planned stop takes nothing more, keeps what
was read and gives readers their grace (:data:`STOP_BOUND` in all). What a
script needs to know is announced line by line; everything else goes to the log.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from broker_spark.config import Backend, TLSSettings
from broker_spark.endpoint import Endpoint
from broker_spark.exits import CliError, UsageError
from broker_spark.node.check import metrics_tls, where
from broker_spark.node.exposure import check_exposure
from broker_spark.node.log_dir import LogDirectory, LogSink
from broker_spark.node.relay import RelayNode, SpoolSettings
from broker_spark.node.reload import Reloader
from broker_spark.node.settings import NodeSettings, check_tls
from broker_spark.node.sources import NodeSources, curve_keys
from broker_spark.node.status_log import StatusLogger
from broker_spark.source_opener import SourceError, SourceOpener
from broker_spark.spool.metrics import MetricsServer
from broker_spark.spool.tee import Tee
from broker_spark.tls import make_contexts
from broker_spark.websocket.manager import manager_for

__all__ = [
    "DRAIN_TIMEOUT",
    "READER_GRACE",
    "STOP_BOUND",
    "relay_node",
    "relay_tls",
    "serve",
    "web_socket_admission",
]

log = logging.getLogger("broker_spark.node")


def serve(
    settings: NodeSettings,
    stop: threading.Event,
    reload: threading.Event | None = None,
    load: Callable[[], NodeSettings] | None = None,
    announce: Callable[[str], None] = log.info,
) -> None:
    """Start the endpoint as configured, announce it, run until ``stop`` is set, shut down;
    whenever ``reload`` is set (SIGHUP), read the settings again with ``load()`` and take
    the certificates, keys, limits and tokens that may change (:mod:`.reload`).

    ``announce`` gets the facts a script may need, one line each (``node <id>``,
    ``listening on HOST:PORT``, ..., finally ``ready``): the command prints them on
    stdout, :class:`~broker_spark.node.running.Node` keeps them."""
    config = settings.configuration()
    check_tls(config)
    for warning in check_exposure(settings, curve_keys(settings.curve)):
        log.warning("%s", warning)
    relay = relay_node(settings)
    endpoint = Endpoint(config)
    sources = NodeSources(settings, endpoint, relay.counts if relay is not None else None)
    logger = None
    sink = None
    metrics = None
    planned = False
    try:
        errors = endpoint.make_status_subscriber()
        announce(f"node {endpoint.node_id()}")
        if relay is not None:  # subscribed before any peering, as the log sink
            relay.subscribe(endpoint)
        zeromq_logs = sources.open_zeromq_logs()
        if zeromq_logs is not None:
            announce(f"zeromq logs on {zeromq_logs.endpoint}")
        for_files = zeromq_logs
        if zeromq_logs is not None and relay is not None:
            if settings.log_dir:  # both keep every batch: one socket, two consumers
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
            announce(f"listening on {where((settings.listen[0], port))}")
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
            announce(f"websocket listening on {where((settings.websocket[0], port))}")
            if relay is not None:
                relay.watch(web_socket_admission(endpoint, port))
        errors.reset()
        # from here on, statuses and errors go to the log (and refusals into the counts)
        logger = StatusLogger(endpoint, relay.counts if relay is not None else None)
        for peer in settings.peers:
            log.info("peering with %s (redialling every %g s)", where(peer), settings.retry)
            endpoint.peer_nosync(peer[0], peer[1], settings.retry)
        sources.start(list(settings.spool_topics or settings.forward), settings.retry)
        if relay is not None:
            port = relay.start(relay_tls(config))
            if port is not None and settings.relay is not None:
                announce(f"relay listening on {where((settings.relay[0], port))}")
            if settings.metrics is not None:
                metrics = _metrics(relay, settings, metrics_tls(settings))
                relay.watch(metrics.admission)
                scheme = "https" if metrics.tls else "http"
                announce(
                    f"metrics listening on {where((settings.metrics[0], metrics.port))}"
                    + (f" ({scheme})" if metrics.tls else "")
                )
        reloader = None
        if load is not None:
            reloader = Reloader(
                load,
                settings,
                endpoint=endpoint,
                relay=relay,
                metrics=metrics,
                receiver=zeromq_logs,
                websocket_servers=lambda: _websocket_servers(endpoint),
            )
        announce("ready")
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
    return manager_for(endpoint).servers[port].admission


def _metrics(relay: Any, settings: NodeSettings, tls: Any) -> Any:
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
    return list(manager_for(endpoint).servers.values())


def relay_node(settings: NodeSettings) -> Any:
    """The spool and relay of ``--spool`` (None without it)."""
    if not settings.spool_dir:
        if settings.spool_topics:
            raise UsageError("--subscribe is for the spool: give --spool DIR too")
        return None
    if settings.spool_readers and (settings.tls.disable_ssl or not settings.tls.authenticated):
        raise UsageError(
            "--reader limits readers by the name in their certificate: it needs mutual TLS "
            "(--cert, --key and --ca)"
        )
    if settings.relay_decoders < 0:
        raise UsageError("--relay-decoders must be 0 (the tasks decode) or more")
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
            settings.relay_decoders,
        )
    )


def relay_tls(config: Any) -> Any:
    """The relay's server TLS context: the node's own TLS settings (None: plain TCP)."""
    contexts = make_contexts(TLSSettings.of(config))
    return contexts.server if contexts is not None else None


def _attach_stores(endpoint: Any, settings: NodeSettings) -> None:
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
