"""A relay node's figures in Prometheus' text format: what operators already scrape.

Zeek clusters are watched with Prometheus (Zeek's own telemetry framework
exposes its metrics that way), so a collector next to them should be too.
``broker-spark node --metrics HOST:PORT`` serves ``/metrics`` with what
``broker-spark status --relay`` shows, read at each scrape from the same
status (nothing is sampled in between, nothing drifts): per source what was
appended, kept as undecodable and refused; the spool's bytes, offsets, oldest
record, retention, free disk and whether it is paused or failed; its readers and
how far behind each is (in messages and in seconds); the peers; each listening
port's connections and refusals. Each is documented in docs/relay.md
("Metrics"), and a test fails when one is added without it; conf/grafana and
conf/prometheus hold a dashboard and alert rules made of them.

With a token (``--metrics-token``) a scrape must send ``Authorization: Bearer
TOKEN`` (Prometheus' ``authorization: {credentials_file: ...}``); others get 401.
With a TLS context (``--metrics-tls``: the node's certificate, or
``--metrics-cert``/``--metrics-key``: its own) ``/metrics`` is served over
HTTPS only; the handshake runs in the connection's own thread, so a client
that stalls in it holds nobody else up. The token and the context may be
replaced while serving (SIGHUP): the next connection uses them.
"""

from __future__ import annotations

import logging
import socket
import ssl
import sys
import threading
from collections.abc import Callable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from broker_spark.addresses import format_host_port
from broker_spark.admission import (
    LISTEN_BACKLOG,
    UNAUTHORIZED,
    Admission,
    Slot,
    authorization_matches,
)

__all__ = ["MetricsServer", "StatusCollector"]

log = logging.getLogger(__name__)


class StatusCollector(Collector):
    """Metrics made from ``status()`` (a relay's status dict) at each scrape."""

    def __init__(self, status: Callable[[], dict[str, Any]]) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        try:
            status = self._status()
        except Exception as exc:  # a scrape during shutdown: nothing rather than a 500
            log.debug("no status for the metrics: %s", exc)
            return
        messages = CounterMetricFamily(
            "broker_spark_source_messages",
            "Messages appended to the spool, by source",
            labels=["source"],
        )
        refused = CounterMetricFamily(
            "broker_spark_source_refused",
            "What a source turned away, by reason",
            labels=["source", "reason"],
        )
        undecodable = CounterMetricFamily(
            "broker_spark_source_undecodable",
            "Messages of a source that did not decode, kept in the spool as undecodable records",
            labels=["source"],
        )
        for source in status.get("sources") or []:
            kind = str(source.get("kind"))
            messages.add_metric([kind], float(source.get("arrived") or 0))
            undecodable.add_metric([kind], float(source.get("undecodable") or 0))
            for reason, n in (source.get("refused") or {}).items():
                refused.add_metric([kind, str(reason)], float(n))
        yield messages
        yield undecodable
        yield refused
        start, end = int(status.get("start") or 0), int(status.get("end") or 0)
        for name, text, value in (
            ("broker_spark_spool_bytes", "Bytes the spool holds", status.get("bytes")),
            ("broker_spark_spool_start_offset", "The spool's first offset held", start),
            ("broker_spark_spool_end_offset", "The spool's next offset", end),
            (
                "broker_spark_spool_oldest_age_seconds",
                "Age of the oldest record held (absent when empty)",
                status.get("oldest_age_s"),
            ),
            (
                "broker_spark_spool_failed",
                "1 when appending to the spool stopped for good (an error other than a full disk)",
                1 if status.get("error") else 0,
            ),
            (
                "broker_spark_spool_paused",
                "1 while the spool takes nothing for want of disk space (Zeek keeps what it sends)",
                1 if status.get("paused") else 0,
            ),
            (
                "broker_spark_spool_disk_free_bytes",
                "Bytes free on the spool's file system",
                status.get("disk_free_bytes"),
            ),
            (
                "broker_spark_spool_disk_min_free_bytes",
                "Free bytes under which the spool takes nothing more",
                status.get("disk_min_free_bytes"),
            ),
            (
                "broker_spark_spool_retention_seconds",
                "The age beyond which records are dropped (absent: no age limit)",
                status.get("retention_seconds"),
            ),
            (
                "broker_spark_spool_retention_bytes",
                "The size beyond which the oldest records are dropped (absent: no size limit)",
                status.get("retention_bytes"),
            ),
            ("broker_spark_peers", "The node's Broker peers", len(status.get("peers") or [])),
        ):
            if value is not None:
                yield GaugeMetricFamily(name, text, value=float(value))
        readers = [r for r in status.get("readers") or [] if r.get("role") != "status"]
        yield GaugeMetricFamily(
            "broker_spark_relay_readers", "Readers connected to the relay", value=len(readers)
        )
        lag = GaugeMetricFamily(
            "broker_spark_relay_reader_lag",
            "Messages between the spool's end and what a reader committed",
            labels=["reader"],
        )
        lag_seconds = GaugeMetricFamily(
            "broker_spark_relay_reader_lag_seconds",
            "Age of the oldest record a reader has not committed (0: it committed everything)",
            labels=["reader"],
        )
        for r in readers:
            committed = r.get("committed")
            name = str(r.get("name") or r.get("address"))
            if isinstance(committed, int):
                lag.add_metric([name], float(end - committed))
            if r.get("lag_seconds") is not None:
                lag_seconds.add_metric([name], float(r["lag_seconds"]))
        yield lag
        yield lag_seconds
        connections = GaugeMetricFamily(
            "broker_spark_listener_connections",
            "Connections a listening port serves now",
            labels=["listener"],
        )
        turned_away = CounterMetricFamily(
            "broker_spark_listener_refused",
            "Clients a listening port turned away, by reason",
            labels=["listener", "reason"],
        )
        for listener in status.get("listeners") or []:
            name = str(listener.get("listener"))
            connections.add_metric([name], float(listener.get("connections") or 0))
            for reason, n in (listener.get("refused") or {}).items():
                turned_away.add_metric([name, str(reason)], float(n))
        yield connections
        yield turned_away


#: Seconds a metrics client may stay silent (or take to send its request) before it is
#: dropped; a scrape takes milliseconds.
CLIENT_TIMEOUT = 10.0
#: Connections served at once; beyond, new ones are closed at once (a scraper needs one), and
#: by default a quarter of them from one address.
MAX_CLIENTS = 32


class _Handler(WSGIRequestHandler):
    """prometheus_client's handler, quiet, with a deadline: an idle or slow client holds its
    thread for ``CLIENT_TIMEOUT`` seconds at most."""

    timeout = CLIENT_TIMEOUT

    def parse_request(self) -> bool:
        """A request arrived (after TLS, if any): the connection is no longer one of the
        unidentified share of the slots."""
        parsed = super().parse_request()
        slot = self.server.slots.get(self.client_address)  # type: ignore[attr-defined]
        if parsed and slot is not None:
            slot.identify()
        return parsed

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """Log nothing per request (a scrape every few seconds)."""


class _Server(ThreadingMixIn, WSGIServer):
    """A thread per connection, at most ``MAX_CLIENTS`` at once (start_http_server's server
    has neither a deadline nor a bound, so idle sockets could pile up threads)."""

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG  # socketserver's listen() backlog (5 by default)
    admission: Admission  # set by MetricsServer before serving
    settings: _Settings
    #: each connection's place in the slots, by its client address (host, port)
    slots: dict[Any, Slot]

    def process_request(self, request: Any, client_address: Any) -> None:
        slot = self.admission.take(str(client_address[0]))
        if slot is None:  # refused (counted, logged once a minute per address), others served
            self.shutdown_request(request)
            return
        self.slots[client_address] = slot
        super().process_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that timed out, hung up or sent garbage: that connection ends, quietly
        (socketserver would print a traceback for each)."""
        self.admission.refuse("error")
        log.debug("metrics client %s: %s", client_address, sys.exc_info()[1])

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            tls = self.settings.tls
            if tls is not None:
                request.settimeout(CLIENT_TIMEOUT)
                try:
                    request = tls.wrap_socket(request, server_side=True)
                except (OSError, ssl.SSLError) as exc:  # no TLS, a bad handshake: that one ends
                    self.admission.refuse("tls")
                    log.debug("metrics client %s: TLS handshake failed: %s", client_address, exc)
                    self.shutdown_request(request)
                    return
            super().process_request_thread(request, client_address)
        finally:
            slot = self.slots.pop(client_address, None)
            if slot is not None:
                slot.leave()


class _Settings:
    """What a reload may replace while the server runs: the token and the TLS context."""

    def __init__(self, token: str | None, tls: ssl.SSLContext | None) -> None:
        self.token = token or None
        self.tls = tls


def _guarded(
    app: Callable[..., Any], settings: _Settings, admission: Admission
) -> Callable[..., Any]:
    """``app`` behind the bearer token, when there is one: a request without it gets 401
    and nothing else."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        token = settings.token
        if token is None or authorization_matches(environ.get("HTTP_AUTHORIZATION"), token):
            return app(environ, start_response)
        admission.refuse(UNAUTHORIZED)
        log.warning("metrics client %s: no valid token; refused", environ.get("REMOTE_ADDR"))
        start_response(
            "401 Unauthorized",
            [("Content-Type", "text/plain"), ("WWW-Authenticate", 'Bearer realm="broker-spark"')],
        )
        return [b"this server needs a bearer token\n"]

    return guarded


class MetricsServer:
    """``/metrics`` on ``host:port`` (port 0: a free one) from its own thread, until closed;
    with ``token`` (a secret, never shown) only for scrapers that send it."""

    def __init__(
        self,
        status: Callable[[], dict[str, Any]],
        host: str,
        port: int,
        *,
        token: str | None = None,
        max_clients: int | None = None,
        tls: ssl.SSLContext | None = None,
        per_address: int | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(StatusCollector(status))
        host = host or "0.0.0.0"
        limit = max_clients or MAX_CLIENTS
        self.admission = Admission("metrics", limit, per_address=per_address or max(1, limit // 4))
        self.settings = _Settings(token, tls)
        app = _guarded(make_wsgi_app(self.registry), self.settings, self.admission)
        server_class = type(
            "_MetricsServer",
            (_Server,),
            {"admission": self.admission, "settings": self.settings, "slots": {}},
        )
        server_class.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._server = make_server(host, port, app, server_class, handler_class=_Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="broker-spark-metrics", daemon=True
        )
        self._thread.start()
        self.port: int = self._server.server_port
        self.admission.address = format_host_port(host, self.port)

    @property
    def tls(self) -> bool:
        """Whether ``/metrics`` is served over HTTPS."""
        return self.settings.tls is not None

    def reload(self, token: str | None, tls: ssl.SSLContext | None) -> None:
        """Use this token and TLS context from the next connection on (SIGHUP)."""
        self.settings.token = token or None
        self.settings.tls = tls

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)
