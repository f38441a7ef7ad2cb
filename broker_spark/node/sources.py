"""A node's sources beside Broker peering: Zeek's ZeroMQ backend and Zeek's WebSocket API.

A Zeek site on the ZeroMQ backend (zeekctl's default since Zeek 8.1) sends its
logs to its loggers' PULL sockets and its events through an XPUB/XSUB proxy; a
site may also offer Zeek's WebSocket API. ``broker-spark node`` takes from each:

* ``--zeromq-logs ENDPOINT``: a PULL socket bound there, as one of the
  cluster's loggers (each node PUSHes to all its loggers, round robin). Its
  batches go to the spool (``--spool``, as the spool's log records), to log
  files (``--log-dir``), or both: then one :class:`~broker_spark.spool.tee.Tee`
  hands each batch to both;
* ``--zeromq-proxy HOST``: the node joins the cluster through its proxy, so
  the events of ``--subscribe`` (and ``--forward``) topics arrive at its
  endpoint like a peer's; it joins again whenever it is not joined;
* ``--websocket-peer URL``: a bridge to Zeek's WebSocket API subscribing the
  spool's topics, redialled every ``--retry`` seconds.

CURVE keys (Zeek 8.2 and later) come from ``--curve-*`` flags, the ``[zeromq]``
section, or Zeek's ``ZEEK_CLUSTER_BACKEND_ZEROMQ_CURVE_*`` variables, never a mix
(as Zeek requires). A secret key given as ``@FILE`` is read from that file, so
it need not stand on a command line that every local user can read.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from broker_spark.addresses import without_credentials
from broker_spark.exits import CliError
from broker_spark.node.settings import secret_text
from broker_spark.source_opener import (
    SourceError,
    SourceMisconfigured,
    SourceOpener,
    SourceUnreachable,
    open_zeromq_logs,
)
from broker_spark.zeromq.curve import CurveConfigError, CurveKeys
from broker_spark.zeromq.proxy_address import ProxyAddressError, parse_zeromq_proxy

__all__ = ["JOIN_RETRY", "NodeSources", "curve_keys"]

log = logging.getLogger("broker_spark.node")

#: Seconds between attempts to join a ZeroMQ proxy that is not (or no longer) joined.
JOIN_RETRY = 5.0


def _key_value(field: str, value: str) -> str:
    """A CURVE key as given; a secret key may be ``@FILE``, the contents of FILE. Z85 keys
    may start with ``@`` themselves: a public key is never read from a file, nor a secret
    key of a key's length (40) that names no file."""
    if "secret" not in field:
        return value
    if value.startswith("@") and len(value) == 40 and not os.path.exists(value[1:]):
        return value
    return secret_text(value, "--" + field.replace("_", "-"))


def curve_keys(given: dict[str, str]) -> Any:
    """The CURVE keys in force: ``given`` (flags and the file, by CurveKeys field; secret
    keys may be ``@FILE``) or Zeek's environment variables; CliError when they are wrong."""
    values = {name: _key_value(name, value) for name, value in given.items() if value}
    try:
        return CurveKeys.resolve(CurveKeys(**values) if values else None)
    except (CurveConfigError, TypeError) as exc:
        raise CliError(f"CURVE: {exc}") from None


class NodeSources:
    """The ZeroMQ logger socket, the proxy's joiner and the WebSocket bridges of one node."""

    def __init__(self, settings: Any, endpoint: Any, counts: Any = None) -> None:
        self.settings = settings
        self.endpoint = endpoint
        self.counts = counts  # the relay's SourceCounts, when there is a relay
        self.curve = curve_keys(settings.curve)
        self.opener = SourceOpener(endpoint)
        self.receiver: Any = None
        self._stop = threading.Event()
        self._joiner: threading.Thread | None = None
        self._proxy: tuple[str, str] | None = None
        if settings.zeromq_proxy:
            try:
                self._proxy = parse_zeromq_proxy(settings.zeromq_proxy, "--zeromq-proxy")
            except ProxyAddressError as exc:
                raise CliError(str(exc)) from None

    # --- the logger's PULL socket ---------------------------------------------------------

    def open_zeromq_logs(self) -> Any:
        """The PULL socket of ``--zeromq-logs`` (None without it), its counters shown under
        the ``zeromq-logs`` source."""
        bind = self.settings.zeromq_logs
        if not bind:
            return None
        try:
            receiver = open_zeromq_logs(bind, self.curve)
        except SourceError as exc:
            raise CliError(str(exc)) from None
        self.receiver = receiver
        if self.counts is not None:
            self.counts.register(
                "zeromq-logs",
                f"zeromq logs {receiver.endpoint}",
                lambda: {
                    "endpoint": receiver.endpoint,
                    "curve": receiver.curve,
                    "batches_received": receiver.received,
                    "queued": receiver.queued,
                    "refused": {"connection": receiver.refused},
                },
            )
        return receiver

    # --- events through the cluster's proxy and Zeek's WebSocket API -------------------------

    def start(self, topics: list[str], retry: float) -> None:
        """Join the proxy (retrying, from a thread) and bridge to each WebSocket API."""
        for url in self.settings.websocket_peers:
            shown = without_credentials(url)
            log.info("subscribing at the WebSocket API %s (redialling every %g s)", shown, retry)
            try:
                self.opener.websocket(url, topics, retry=retry or JOIN_RETRY)
            except SourceMisconfigured as exc:
                raise CliError(f"--websocket-peer {shown}: {exc.why}") from None
            except SourceUnreachable:  # the bridge redials by itself (its error is logged)
                log.info("WebSocket API %s not reached yet: redialling", shown)
        if self.settings.websocket_peers and self.counts is not None:
            self.counts.register(
                "websocket",
                "websocket " + " ".join(map(without_credentials, self.settings.websocket_peers)),
                lambda: {"connected": self._connected("websocket")},
            )
        if self._proxy is None:
            return
        if self.curve is not None and self.curve.any:
            try:  # checked here too, so a wrong key stops the node at its start
                self.curve.require_client()
            except CurveConfigError as exc:
                raise CliError(f"--zeromq-proxy with CURVE: {exc}") from None
        if self.counts is not None:
            self.counts.register(
                "zeromq-proxy",
                f"zeromq proxy {self._proxy[0]} {self._proxy[1]}",
                lambda: {
                    "connected": self._connected("zeromq"),
                    "refused": {"malformed": self._proxy_rejected()},
                },
            )
        self._joiner = threading.Thread(
            target=self._join, name="broker-spark-zeromq-join", daemon=True
        )
        self._joiner.start()

    def _links(self, kind: str) -> list[Any]:
        try:
            return [x for x in self.endpoint.links() if x.kind == kind and not x.closed]
        except Exception:  # shut down
            return []

    def _connected(self, kind: str) -> int:
        return len(self._links(kind))

    def _proxy_rejected(self) -> int:
        return sum(int(getattr(x, "rejected", 0)) for x in self._links("zeromq"))

    def _join(self) -> None:
        assert self._proxy is not None
        xsub, xpub = self._proxy
        while not self._stop.is_set():
            if not self._links("zeromq"):
                try:
                    self.opener.zeromq_proxy(xsub, xpub, curve=self.curve, timeout=10.0)
                except SourceMisconfigured as exc:  # say so once and stop
                    log.error("%s", exc)
                    return
                except SourceUnreachable:
                    pass  # the endpoint reported why; tried again in JOIN_RETRY s
                except Exception as exc:  # the endpoint shut down under us
                    if not self._stop.is_set():
                        log.error("joining the ZeroMQ proxy failed: %s", exc)
                    return
                else:
                    log.info("joined the Zeek cluster through its proxy at %s and %s", xsub, xpub)
            self._stop.wait(JOIN_RETRY)

    def stop_joining(self) -> None:
        """Join the proxy no more (a planned stop; the endpoint leaves it)."""
        self._stop.set()
        if self._joiner is not None:
            self._joiner.join(15.0)

    def stop(self) -> None:
        self.stop_joining()
        if self.receiver is not None:
            self.receiver.close()
