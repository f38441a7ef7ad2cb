"""A real Zeek on the Broker backend, while Zeek still has it: logs into a relay, events both ways.

Zeek 9 deprecates the Broker backend, but sites run it until 10.1. A standalone Zeek,
set up as docs/how-to/zeek-broker.md section 2 (a) says (``<!-- live: broker-peer -->``), peers into
a relay node (``node --listen ... --spool ... --relay``) over Broker's default TLS
(anonymous ECDH on both sides) and reads a trace; ``write_zeek_tables`` over the relay
must give exactly the records Zeek wrote into its own JSON logs. A Zeek sends no log
write while it has no peer, so the trace goes into its stdin only once it printed its
peer (tests/live/pcaps.py).

And events, typed, both ways with ``import broker_spark as broker``: a Zeek that
listens as docs/how-to/zeek-broker.md section 2 (b) says (``<!-- live: broker-listen -->``) sends
``Live::typed`` to a Python endpoint that peers with it, and prints the one the
endpoint sends back (scripts/live-types.zeek).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import spark_fixtures
from doc_snippets import replace_all, snippet
from pcaps import TRACES, feed_when_ready, read
from ports import free_port
from tables_check import assert_relays_write_zeeks_tables
from test_cli_support import Command
from zeek_procs import PROCESS_LOGS, SCRIPTS, ZeekProcess, read_json_logs

import broker_spark as broker
from broker_spark.data.types import Count, Enum, Port

spark = spark_fixtures.spark

pytestmark = [pytest.mark.live, pytest.mark.spark, pytest.mark.timeout(600)]

T = dt.datetime(2023, 11, 14, 22, 13, 20, 250000, tzinfo=dt.timezone.utc)


def zeek_script(folder: Path, name: str, port: int) -> Path:
    """docs/how-to/zeek-broker.md's snippet ``name``, pointed at loopback and ``port``, as a script file."""
    text = snippet("how-to/zeek-broker.md", name)
    address = "spark-driver.example.net" if name == "broker-peer" else "0.0.0.0"
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{name}.zeek"
    out.write_text(replace_all(text, {address: "127.0.0.1", "9999/tcp": f"{port}/tcp"}))
    return out


def test_a_zeek_on_the_broker_backend_logs_into_a_relay_and_its_tables_are_zeeks(
    spark: Any, zeek: Path, tmp_path: Path
) -> None:
    listen, relay = free_port(), f"127.0.0.1:{free_port()}"
    node = Command(
        "node", "--listen", f"127.0.0.1:{listen}", "--spool", str(tmp_path / "spool"),
        "--subscribe", "zeek/logs/", "--relay", relay, tmp=tmp_path / "node",
    )  # fmt: skip
    db = "live_broker"
    try:
        node.expect("^ready$", 60)
        folder = tmp_path / "zeek"
        script = zeek_script(folder, "broker-peer", listen)
        proc = ZeekProcess(
            zeek, "standalone",
            ["-D", "-C", "-r", "-", "LogAscii::use_json=T", str(script),
             str(SCRIPTS / "live-broker.zeek")],
            folder, stdin=subprocess.PIPE,
        )  # fmt: skip
        try:
            assert proc.proc.stdin is not None
            trace = read(TRACES / "wikipedia.pcap")
            feed_when_ready(proc.proc.stdin, trace, lambda: "peer_added" in proc.stdout())
            proc.finished(120)
        finally:
            proc.stop()
        logs = {p: lines for p, lines in read_json_logs(folder).items() if p not in PROCESS_LOGS}
        assert {"conn", "dns", "http"} <= set(logs), sorted(logs)

        assert_relays_write_zeeks_tables(spark, db, relay, logs, tmp_path, PROCESS_LOGS)
    finally:
        node.close()
        spark.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")


def test_events_cross_both_ways_between_zeek_and_broker_spark_as_broker(
    zeek: Path, tmp_path: Path
) -> None:
    port = free_port()
    folder = tmp_path / "zeek"
    script = zeek_script(folder, "broker-listen", port)
    proc = ZeekProcess(zeek, "events", [str(script), str(SCRIPTS / "live-broker.zeek")], folder)
    try:
        proc.wait_line("^live zeek up", 120)
        with broker.Endpoint() as ep:  # Broker's default: anonymous TLS, as Zeek's
            sub = ep.make_subscriber("site/from-zeek/")
            assert ep.peer("127.0.0.1", port, retry=1.0)
            got = sub.get(60.0)
            assert got is not None, f"no event from Zeek: {proc.stdout()} {proc.stderr()}"
            topic, data = got
            event = broker.zeek.Event(data)
            assert (topic, event.name()) == ("site/from-zeek/typed", "Live::typed")
            c, a, p, t, i, s, tb, v, r, e = event.args()
            assert (c, a, p) == (Count(42), ipaddress.IPv4Address("192.0.2.1"), Port(443, Port.TCP))
            # Zeek's time is a double: 1700000000.25 s travels as the nanoseconds it makes
            assert abs(t - T) <= dt.timedelta(microseconds=1)
            assert i == dt.timedelta(seconds=1.5)
            assert (s, tb, v) == ({"a", "b"}, {"x": Count(1)}, ("v1", "v2"))
            assert (r, e) == ((Count(7), None), Enum("Live::BLUE"))

            ep.publish(
                "site/to-zeek/python",
                broker.zeek.Event(
                    "Live::typed", Count(5), ipaddress.IPv6Address("2001:db8::1"),
                    Port(53, Port.UDP), T, dt.timedelta(milliseconds=250), {"q"},
                    {"k": Count(8)}, ("w", "x"), (Count(1), "one"), Enum("Live::RED"),
                ),
            )  # fmt: skip
            line = proc.wait_line(r'^received .*"c":5,', 60).string
        printed = json.loads(line.split(" ", 1)[1])
        assert abs(printed.pop("t") - T.timestamp()) < 1e-6
        assert printed == {
            "c": 5, "a": "2001:db8::1", "p": {"port": 53, "proto": "udp"},
            "i": "250.0 msecs", "s": ["q"], "tb": {"k": 8}, "v": ["w", "x"],
            "r": {"n": 1, "s": "one"}, "e": "Live::RED",
        }  # fmt: skip
        assert "error" not in proc.stderr().lower(), proc.stderr()
    finally:
        proc.stop()
