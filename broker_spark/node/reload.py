"""SIGHUP: a running node takes new certificates, keys, CAs, reader limits, tokens and
CURVE keys without a restart (a restart of a relay is a window Zeek's batches wait in).

The configuration is read again as at start (the file, then the same flags), and
everything new is made and checked before anything is replaced: the TLS
contexts (certificate, key and CA load), the CURVE keys, the tokens' files.
If one of them fails, the node keeps every setting it had and logs why. If all
load, connections made from then on use them, on every port that has them: the
Broker listener and dials, the relay, the metrics, the WebSocket API's token,
the ZeroMQ log socket's CURVE keys. Connections already up keep what they were
admitted with until they reconnect (as a TLS session must). What cannot change
without a restart (addresses, the spool, turning TLS or CURVE on or off) is
named in the log and left as it was.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from typing import Any

from broker_spark.config import TLSSettings
from broker_spark.node.settings import check_tls
from broker_spark.node.sources import curve_keys
from broker_spark.tls import make_contexts

__all__ = ["Reloader", "RESTART_ONLY"]

log = logging.getLogger("broker_spark.node")

#: Settings a reload leaves as they were (a restart takes them), by the flag that sets them.
RESTART_ONLY = {
    "listen": "--listen",
    "relay": "--relay",
    "spool_dir": "--spool",
    "spool_topics": "--subscribe",
    "websocket": "--websocket",
    "zeromq_logs": "--zeromq-logs",
    "zeromq_proxy": "--zeromq-proxy",
    "metrics": "--metrics",
    "log_dir": "--log-dir",
}


class Reloader:
    """Reads the node's settings again with ``load()`` and hands what may change to the
    parts that run: ``endpoint``, ``relay`` (a RelayNode), ``metrics`` (a MetricsServer),
    ``receiver`` (the ZeroMQ log socket), ``websocket_servers`` (WebSocket API servers)."""

    def __init__(
        self,
        load: Callable[[], Any],
        current: Any,
        *,
        endpoint: Any,
        relay: Any = None,
        metrics: Any = None,
        receiver: Any = None,
        websocket_servers: Callable[[], list[Any]] | None = None,
    ) -> None:
        self._load = load
        self.current = current
        self._endpoint = endpoint
        self._relay = relay
        self._metrics = metrics
        self._receiver = receiver
        self._websocket_servers = websocket_servers or (lambda: [])
        self.reloads = 0
        self.failures = 0

    def reload(self) -> bool:
        """Read, check, then replace; False (and the old settings kept) when anything failed."""
        try:
            new = self._load()
            made = self._make(new)
        except Exception as exc:  # any of it: the node runs on as it was
            self.failures += 1
            log.error("reload (SIGHUP) failed, keeping the settings in force: %s", exc)
            return False
        for name, flag in RESTART_ONLY.items():
            if getattr(new, name, None) != getattr(self.current, name, None):
                log.warning("reload (SIGHUP): %s changed; that takes a restart", flag)
        self._apply(new, made)
        self.current = new
        self.reloads += 1
        log.info(
            "reloaded (SIGHUP): certificate, key, CA, reader limits, tokens and CURVE keys; "
            "new connections use them, those up keep theirs until they reconnect"
        )
        return True

    def _make(self, new: Any) -> dict[str, Any]:
        """Everything the new settings need, loaded and checked (raises on the first fault)."""
        config = new.configuration()
        check_tls(config)
        old_tls = TLSSettings.of(self.current.configuration())
        new_tls = TLSSettings.of(config)
        if new_tls.disable_ssl != old_tls.disable_ssl:
            raise ValueError("TLS cannot be turned on or off without a restart")
        contexts = make_contexts(new_tls)
        if new.spool_readers and (new_tls.disable_ssl or not new_tls.authenticated):
            raise ValueError("reader limits need mutual TLS (--cert, --key and --ca)")
        made: dict[str, Any] = {"contexts": contexts}
        if self._receiver is not None and self._receiver.curve:
            keys = curve_keys(new.curve)
            if keys is None or not keys.any:
                raise ValueError("CURVE cannot be turned off without a restart")
            keys.require_server()
            made["curve"] = keys
        if self._metrics is not None:
            made["metrics_tls"] = metrics_context(new, contexts)
            if (made["metrics_tls"] is not None) != self._metrics.tls:
                raise ValueError("the metrics' TLS cannot be turned on or off without a restart")
        return made

    def _apply(self, new: Any, made: dict[str, Any]) -> None:
        contexts = made["contexts"]
        self._endpoint.replace_tls(contexts)
        if self._relay is not None and self._relay.server is not None:
            self._relay.server.reload(
                contexts.server if contexts is not None else None, new.spool_readers
            )
        if self._metrics is not None:
            self._metrics.reload(new.metrics_token or None, made["metrics_tls"])
        for server in self._websocket_servers():
            server.set_token(new.websocket_token or None)
        if "curve" in made:
            self._receiver.reload_curve(made["curve"])


def metrics_context(settings: Any, contexts: Any) -> Any:
    """The metrics' server TLS context: its own certificate and key (``--metrics-cert``,
    ``--metrics-key``), the node's (``--metrics-tls``), or None (plain HTTP)."""
    cert, key = settings.metrics_certificate, settings.metrics_key
    if cert or key:
        if not (cert and key):
            raise ValueError("--metrics-cert and --metrics-key go together")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(cert, key)
        return ctx
    if not settings.metrics_tls:
        return None
    if contexts is None or not contexts.authenticated:
        raise ValueError(
            "--metrics-tls serves the node's certificate: give --cert, --key and --ca "
            "(or --metrics-cert and --metrics-key)"
        )
    tls = TLSSettings.of(settings.configuration())
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(tls.certificate, tls.key, password=tls.passphrase or None)
    return ctx
