"""A relay node's figures in Prometheus' text format: what operators already scrape.

Zeek clusters are watched with Prometheus (Zeek's own telemetry framework
exposes its metrics that way), so a collector next to them should be too.
``broker-spark node --metrics HOST:PORT`` serves ``/metrics`` with what
``broker-spark status --relay`` shows, read at each scrape from the same
status (nothing is sampled in between, nothing drifts):

* ``broker_spark_source_messages_total{source}``: messages appended from each
  kind of source (``broker``, ``websocket``, ``zeromq-proxy``, ``zeromq-logs``);
* ``broker_spark_source_refused_total{source,reason}``: what each turned away
  (undecodable batches, refused connections, ...);
* ``broker_spark_spool_bytes``, ``broker_spark_spool_oldest_age_seconds``,
  ``broker_spark_spool_start_offset``, ``broker_spark_spool_end_offset`` and
  ``broker_spark_spool_failed`` (1 when appending stopped, a full disk);
* ``broker_spark_relay_readers`` and, per reader,
  ``broker_spark_relay_reader_lag{reader}``: messages between the spool's end
  and what the reader committed;
* ``broker_spark_peers``: the node's Broker peers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

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
        for source in status.get("sources") or []:
            kind = str(source.get("kind"))
            messages.add_metric([kind], float(source.get("arrived") or 0))
            for reason, n in (source.get("refused") or {}).items():
                refused.add_metric([kind, str(reason)], float(n))
        yield messages
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
                "1 when appending to the spool stopped (a full disk)",
                1 if status.get("error") else 0,
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
        for r in readers:
            committed = r.get("committed")
            if isinstance(committed, int):
                lag.add_metric([str(r.get("name") or r.get("address"))], float(end - committed))
        yield lag


class MetricsServer:
    """``/metrics`` on ``host:port`` (port 0: a free one) from its own thread, until closed."""

    def __init__(self, status: Callable[[], dict[str, Any]], host: str, port: int) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(StatusCollector(status))
        self._server, self._thread = start_http_server(port, host or "0.0.0.0", self.registry)
        self.port: int = self._server.server_port

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)
