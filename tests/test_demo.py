"""``broker-spark demo``: its parts alone, then a short run on the shared SparkSession.

The short run is the real demo (node, generator, streaming query, writes to
the topic and the store, the store read back), for a few seconds at a low
rate, on the session the Spark tests share (one JVM per test run).
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
import re
import signal
import threading
import time
from typing import Any

import pyarrow as pa
import pytest
import spark_fixtures
from spark_fixtures import wait_for

from broker_spark import demo
from broker_spark.columnar.record_batches import RecordConverter
from broker_spark.config import TLSSettings
from broker_spark.data import Count, Port
from broker_spark.data.binary import encode
from broker_spark.demo.events import (
    EVENT_DDL,
    EVENT_NAME,
    EVENT_TOPIC,
    SERVICES,
    ConnectionEvents,
    EventPublisher,
)
from broker_spark.demo.options import Wiring
from broker_spark.demo.table import SummaryRow, WindowTotals, human_bytes
from broker_spark.spark.java import JavaMissingError
from broker_spark.zeek import Event

spark = spark_fixtures.spark  # a fixture, shared by the Spark test modules

pytestmark = pytest.mark.timeout(180)

_T0 = dt.datetime(2026, 1, 2, 3, 4, 0, tzinfo=dt.timezone.utc)


# --- the events ---------------------------------------------------------------------------------


def test_events_are_zeek_events_that_fit_the_typed_schema() -> None:
    events = ConnectionEvents(seed=1, clock=lambda: _T0).batch(200)
    assert {Event(e).name() for e in events} == {EVENT_NAME}
    assert {Event(e).args()[5] for e in events} == {s.name for s in SERVICES}
    # The Arrow form of EVENT_DDL, as Spark hands it to the reader.
    schema = pa.schema(
        [
            ("offset", pa.int64()),
            ("event", pa.string()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("uid", pa.string()),
            ("orig_h", pa.string()),
            ("resp_h", pa.string()),
            ("resp_p", pa.string()),
            ("service", pa.string()),
            ("orig_bytes", pa.int64()),
            ("resp_bytes", pa.int64()),
        ]
    )
    assert [f.name for f in schema] == [c.split()[0] for c in EVENT_DDL.split(",")]
    converter = RecordConverter(schema, "zeek", "FAILFAST")
    batch = converter.convert(
        [(EVENT_TOPIC, encode(e), "sender", 0, i) for i, e in enumerate(events)]
    )
    assert converter.misfits == 0
    first = batch.to_pylist()[0]
    args = Event(events[0]).args()
    assert first["ts"] == _T0
    assert first["uid"] == args[1] and len(first["uid"]) == 18 and first["uid"][0] == "C"
    assert ipaddress.ip_address(first["orig_h"]) == args[2]
    assert first["resp_p"] == str(args[4])
    assert (first["orig_bytes"], first["resp_bytes"]) == (int(args[6]), int(args[7]))
    assert isinstance(args[4], Port) and isinstance(args[6], Count)


def test_events_are_deterministic_for_a_seed() -> None:
    def make(seed: int) -> list[Any]:
        return ConnectionEvents(seed, clock=lambda: _T0).batch(20)

    assert make(3) == make(3)
    assert make(3) != make(4)


def test_publisher_keeps_its_rate_and_stops() -> None:
    batches: list[int] = []
    lock = threading.Lock()

    def publish_batch(*pairs: tuple[str, Any]) -> None:
        assert all(topic == "/t" for topic, _ in pairs)
        with lock:
            batches.append(len(pairs))

    publisher = EventPublisher(publish_batch, rate=2000, topic="/t", tick=0.01).start()
    wait_for(lambda: publisher.published >= 300, 10, "300 events")
    publisher.stop()
    publisher.stop()  # idempotent
    assert publisher.error is None
    assert sum(batches) == publisher.published
    # Paced by the clock: never ahead of rate x elapsed (one tick's rounding aside).
    assert publisher.published <= 2000 * publisher.elapsed + 1
    assert len(batches) >= 2
    frozen = publisher.published
    assert sum(batches) == frozen  # nothing after stop()
    with pytest.raises(ValueError):
        EventPublisher(publish_batch, rate=0)


def test_publisher_reports_a_failing_publish() -> None:
    def broken(*pairs: Any) -> None:
        raise RuntimeError("peer gone")

    publisher = EventPublisher(broken, rate=1000, tick=0.01).start()
    wait_for(lambda: publisher.error is not None, 10, "the error")
    publisher.stop()
    assert "peer gone" in str(publisher.error)


# --- the table ----------------------------------------------------------------------------------


def _row(second: int, service: str, conns: int, nbytes: int) -> SummaryRow:
    start = _T0 + dt.timedelta(seconds=second)
    return SummaryRow(start, start + dt.timedelta(seconds=10), service, conns, nbytes)


def test_window_totals_keep_the_latest_and_count_what_was_added() -> None:
    totals = WindowTotals()
    added, windows = totals.update([_row(0, "dns", 5, 500), _row(0, "http", 2, 20_000)])
    assert (added, windows) == (7, [_T0])
    added, windows = totals.update([_row(0, "dns", 9, 900), _row(10, "dns", 1, 60)])
    assert added == 4 + 1
    assert windows == [_T0, _T0 + dt.timedelta(seconds=10)]
    assert (totals.windows, totals.services, totals.connections) == (2, ["dns", "http"], 12)
    assert totals.updates == 4
    lines = totals.render(3, added, windows)
    assert lines[0].split() == ["batch", "+conns", "window", "dns", "http", "all"]
    assert lines[1].split() == ["3", "5", "03:04:00-03:04:10", "9/900", "2/20k", "11/21k"]
    assert lines[2].split() == ["03:04:10-03:04:20", "1/60", "-", "1/60"]
    # The header is not repeated while the columns stay the same.
    assert len(totals.render(4, 0, [_T0])) == 1


def test_window_totals_fold_rare_services_into_other() -> None:
    totals = WindowTotals()
    rows = [_row(0, f"s{i}", 10 + i, 1) for i in range(8)]
    totals.update(rows)
    header, line = totals.render(0, 0, [_T0])
    assert header.split()[3:] == ["s2", "s3", "s4", "s5", "s6", "s7", "other", "all"]
    assert line.split()[-2:] == ["21/2", f"{sum(10 + i for i in range(8))}/8"]


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0"), (999, "999"), (1000, "1.0k"), (12_345, "12k"), (3_400_000, "3.4M"), (2e12, "2.0T")],
)
def test_human_bytes(n: int, text: str) -> None:
    assert human_bytes(int(n)) == text


# --- the sink -----------------------------------------------------------------------------------


class _Batch:
    """A stand-in for a micro-batch's DataFrame whose collect() waits to be released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def collect(self) -> list[Any]:
        self.entered.set()
        assert self.release.wait(10)
        return []


def test_sink_closes_between_batches_and_still_consumes_them() -> None:
    from broker_spark.demo.spark import SummarySink

    sink = SummarySink({"peer": "127.0.0.1:1"}, "/demo/summary", "demo-summary")
    batch = _Batch()
    call = threading.Thread(target=sink, args=(batch, 0))
    call.start()
    assert batch.entered.wait(10)
    assert sink.close(0.05) is False  # a batch is in progress: not closed yet
    batch.release.set()
    call.join(10)
    assert sink.close(1.0) is True
    late = _Batch()
    late.release.set()
    sink(late, 1)  # closed: a later batch is still collected (Spark insists), not written
    assert late.entered.is_set()
    assert sink.written == 0 and not sink.totals.latest


# --- options and failures -----------------------------------------------------------------------


def test_flags_and_defaults() -> None:
    parser = demo.add_arguments(argparse.ArgumentParser())
    options = demo.DemoOptions.from_args(parser.parse_args([]))
    assert (options.seconds, options.rate, options.quiet, options.master) == (
        60.0,
        2000.0,
        False,
        "local[2]",
    )
    # A parser with only the first three flags works too (the CLI may define just those).
    bare = demo.DemoOptions.from_args(argparse.Namespace(seconds=5.0, rate=10, quiet=True))
    assert (bare.seconds, bare.rate, bare.quiet, bare.listen, bare.peer) == (
        5.0,
        10,
        True,
        "127.0.0.1:0",
        None,
    )
    full = parser.parse_args(
        ["--seconds", "3", "--peer", "zeek:9999", "--listen", "0.0.0.0:9998", "--plain"]
    )
    options = demo.DemoOptions.from_args(full)
    assert (options.peer, options.listen, options.tls.disable_ssl) == (
        "zeek:9999",
        "0.0.0.0:9998",
        True,
    )
    # The TLS spellings of the other subcommands work too.
    aliases = parser.parse_args(["--cert", "c.pem", "--key", "k.pem", "--ca", "ca.pem", "--no-tls"])
    options = demo.DemoOptions.from_args(aliases)
    tls = options.tls
    assert (tls.certificate, tls.key, tls.cafile, tls.disable_ssl) == (
        "c.pem",
        "k.pem",
        "ca.pem",
        True,
    )


def test_log4j_config_keeps_the_projects_and_quiets_more(tmp_path: Any) -> None:
    from broker_spark.demo.spark import log4j_config

    path = log4j_config(tmp_path)
    assert path.parent == tmp_path
    text = path.read_text()
    assert "rootLogger.level = warn" in text
    assert "logger.demo_scheduler.name = org.apache.spark.scheduler" in text
    keys = [line.split("=")[0].strip() for line in text.splitlines() if "=" in line]
    assert len(keys) == len(set(keys))  # no key given twice


def test_missing_java_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    def no_java() -> str:
        raise JavaMissingError("Spark needs Java 17 or later, but no java on PATH")

    monkeypatch.setattr("broker_spark.spark.java.require_java", no_java)
    assert demo.main(argparse.Namespace(seconds=1.0, rate=10, quiet=True)) == 1
    err = capsys.readouterr().err
    assert err == "broker-spark demo: Spark needs Java 17 or later, but no java on PATH\n"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"listen": "nowhere"}, "--listen='nowhere': expected host:port"),
        ({"peer": "zeek:0"}, "--peer='zeek:0': port 0 is out of range"),
        ({"tls": TLSSettings(disable_ssl=True, cafile="ca.pem")}, "--plain contradicts"),
        ({"tls": TLSSettings(cafile="/no/such/ca.pem")}, "--cafile /no/such/ca.pem: no such file"),
        ({"seconds": 0.0}, "must be positive"),
        ({"tls": TLSSettings(certificate=__file__)}, "--certificate="),
        ({"listen": "0.0.0.0:9999"}, "--listen 0.0.0.0:9999 is reachable from other hosts"),
        ({"listen": ":0", "tls": TLSSettings(disable_ssl=True)}, "pass --allow-anonymous"),
    ],
)
def test_bad_flags_fail_before_anything_starts(flags: dict[str, Any], message: str) -> None:
    options = demo.DemoOptions(**flags)
    with pytest.raises(demo.DemoError, match=re.escape(message)):
        demo.run(options, spark=object())


def test_a_listen_off_loopback_is_taken_with_mutual_tls_or_the_opt_out() -> None:
    opted = Wiring.from_options(demo.DemoOptions(listen=":0", allow_anonymous=True))
    assert opted.listen_host == "0.0.0.0"
    parsed = demo.DemoOptions.from_args(
        demo.add_arguments(argparse.ArgumentParser()).parse_args(["--allow-anonymous"])
    )
    assert parsed.allow_anonymous


# --- a short run --------------------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.slow  # the demo's whole job, 20 s and more: make test-slow (CI runs it)
@pytest.mark.versions  # and on every PySpark of .ci/spark-versions
def test_a_short_demo_run(spark: Any) -> None:
    lines: list[str] = []
    options = demo.DemoOptions(
        seconds=5.0, rate=500.0, tls=TLSSettings(disable_ssl=True), trigger_seconds=1.0
    )
    result = demo.run(options, spark=spark, out=lines.append)
    text = "\n".join(lines)
    assert result.ok, f"{result.problems}\n{text}"
    # The publisher keeps its rate for as long as it ran (at least the 5 s asked for, more
    # when a loaded machine stops it late): never a burst, never short of what was due.
    assert result.published is not None and result.publish_seconds >= 5.0
    assert abs(result.published - 500.0 * result.publish_seconds) <= 500.0 * 0.25
    assert result.rows_read == result.published  # every record reached Spark
    assert result.window_connections == result.rows_read  # and was counted in a window
    assert result.windows >= 1 and result.services == len(SERVICES)
    assert result.windows <= result.window_totals <= result.windows * result.services
    assert result.summaries_written >= result.window_totals
    assert result.summaries_received == result.summaries_written
    assert result.summaries_match  # the last message per window is Spark's last value
    assert result.summary_keys == result.store_entries == result.window_totals
    assert result.store_matches
    assert "+conns" in text and "summary" in text
    assert f"conn records published {result.published:,} " in " ".join(text.split())
    assert not spark.streams.active  # the query is stopped


@pytest.mark.spark
@pytest.mark.slow  # long (5 s and more): make test-slow, and every PySpark (versions)
@pytest.mark.versions
def test_sigint_stops_the_demo_politely(spark: Any) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")
    lines: list[str] = []

    def out(line: str) -> None:
        lines.append(line)
        if line.startswith("publishing"):
            os.kill(os.getpid(), signal.SIGINT)

    previous = signal.getsignal(signal.SIGINT)
    started = time.monotonic()
    result = demo.run(
        demo.DemoOptions(seconds=60.0, rate=100.0, tls=TLSSettings(disable_ssl=True)),
        spark=spark,
        out=out,
    )
    assert result.interrupted
    assert time.monotonic() - started < 50  # did not publish for the minute
    assert result.published is not None and result.publish_seconds < 5
    assert "not checked (interrupted)" in "\n".join(lines)
    assert not spark.streams.active
    assert signal.getsignal(signal.SIGINT) is previous  # handlers restored
