"""Typed events between a real Zeek cluster and broker-spark, both ways, on every route.

The cluster of docs/how-to/zeek-cluster-zeromq.md (``zeromq_site``): its manager publishes one
``Live::typed`` event (a count, addr, port, time, interval, set, table, vector, record
and enum) to each topic under ``site/`` somebody subscribes to, and prints every
``Live::typed`` event that reaches it on ``site/to-zeek/`` as JSON (scripts/
live-cluster.zeek). A Zeek converts what it receives with its handler's declared
types and drops the event otherwise (an error in its reporter), so the manager
printing the event is the proof that each value arrived as its Zeek type.

Routes, Zeek to Spark: the cluster's XPUB/XSUB proxy into relay node 1
(``--zeromq-proxy``) read by Spark through the relay; the proxy straight into Spark
(``zeromq.proxy``); Zeek's WebSocket API into ``node --websocket-peer`` (spooled, read
through its relay) and into a Python endpoint (``web_socket_peer``). Spark to Zeek:
the writer through the proxy and through the WebSocket API, and Python through the
WebSocket API.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import spark_fixtures
from cluster import Site
from ports import free_port
from spark_fixtures import wait_for
from test_cli_support import Command

import broker_spark as broker
from broker_spark.data.types import Count, Enum, Port

spark = spark_fixtures.spark

pytestmark = [pytest.mark.live, pytest.mark.spark, pytest.mark.timeout(600)]

#: The event as Zeek script declares it, with its types (what Spark's writer takes).
SIGNATURE = (
    "module Live; export { type Color: enum { RED, GREEN, BLUE }; "
    "type Info: record { n: count; s: string &optional; }; } "
    "Live::typed(c: count, a: addr, p: port, t: time, i: interval, s: set[string], "
    "tb: table[string] of count, v: vector of string, r: Live::Info, e: Live::Color)"
)

#: Spark's columns for the event's arguments, by position (after topic and event).
TYPED_DDL = (
    "topic string, event string, c bigint, a string, p string, t timestamp, "
    "i interval day to second, s array<string>, tb map<string,bigint>, v array<string>, "
    "r struct<n:bigint,s:string>, e string"
)

T = dt.datetime(2023, 11, 14, 22, 13, 20, 250000, tzinfo=dt.timezone.utc)  # 1700000000.25

#: What the manager publishes (live-cluster.zeek), as Spark reads it with TYPED_DDL; its
#: time ``t`` is checked apart (see ``zeek_time``).
FROM_ZEEK = {
    "event": "Live::typed",
    "c": 42,
    "a": "192.0.2.1",
    "p": "443/tcp",
    "i": dt.timedelta(seconds=1.5),
    "s": ["a", "b"],
    "tb": {"x": 1},
    "v": ["v1", "v2"],
    "r": {"n": 7, "s": None},
    "e": "Live::BLUE",
}

#: How far a time Zeek sends may be from the one its script had. Zeek's times are
#: doubles: on Broker's binary encoding it sends the nanoseconds its double makes
#: (1700000000.25 s becomes 1700000000249999872 ns), which Spark's microseconds cut to
#: ...249999; its WebSocket API writes milliseconds, cut (...249).
BINARY, WEBSOCKET = dt.timedelta(microseconds=1), dt.timedelta(milliseconds=1)


def zeek_time(got: dt.datetime, within: dt.timedelta) -> bool:
    return abs(got - T) <= within


def spark_row(row: Any, within: dt.timedelta = BINARY) -> dict[str, Any]:
    """A typed row as FROM_ZEEK has it, once its time is checked to be Zeek's."""
    got = row.asDict(recursive=True)
    assert got["t"] is not None, row
    assert zeek_time(got["t"].replace(tzinfo=dt.timezone.utc), within), row  # session: UTC
    got["s"] = sorted(got["s"])
    return {k: got[k] for k in FROM_ZEEK}


def received(site: Site, c: int) -> dict[str, Any]:
    """The event with count ``c`` as the manager printed it on receipt (its JSON), once
    its time is checked to be the one sent (Zeek holds it as a double)."""
    manager = site.cluster.running["manager"]
    line = manager.wait_line(rf'^received .*"c":{c},', 90).string
    got = json.loads(line.split(" ", 1)[1])
    assert abs(got.pop("t") - T.timestamp()) < 1e-6, line
    got["s"] = sorted(got["s"])
    return got


def sent_to_zeek(c: int) -> dict[str, Any]:
    """An event with count ``c`` as Zeek prints it (``to_json``; an interval as Zeek
    describes it) once it took every value as its declared type."""
    return {
        "c": c,
        "a": "198.51.100.7",
        "p": {"port": 8080, "proto": "tcp"},
        "i": "2.0 secs 500.0 msecs",
        "s": ["x", "y"],
        "tb": {"k": 3},
        "v": ["w"],
        "r": {"n": 9, "s": "nine"},
        "e": "Live::GREEN",
    }


def spark_rows_to_zeek(spark: Any, c: int) -> Any:
    """One row of Spark columns for Live::typed, with count ``c``."""
    return spark.sql(
        f"""select cast({c} as bigint) as c, '198.51.100.7' as a, '8080/tcp' as p,
        timestamp'2023-11-14 22:13:20.25 UTC' as t, interval '2.5' second as i,
        array('x', 'y') as s, map('k', cast(3 as bigint)) as tb, array('w') as v,
        named_struct('n', cast(9 as bigint), 's', 'nine') as r, 'Live::GREEN' as e"""
    )


def read_relay(spark: Any, site: Site, relay: str, topic: str) -> list[Any]:
    """Everything a relay holds on ``topic``, as typed rows."""
    df = (
        spark.readStream.format("broker")
        .option("relay", relay)
        .option("topics", topic)
        .option("format", "zeek")
        .option("startingOffsets", "earliest")
        .options(**site.reader_tls())
        .schema(TYPED_DDL)
        .load()
    )
    name = f"live_relay_{free_port()}"
    query = df.writeStream.format("memory").queryName(name).trigger(availableNow=True).start()
    try:
        query.awaitTermination(120)
        assert query.exception() is None
        return spark.sql(f"select * from {name}").collect()
    finally:
        query.stop()


def test_zeek_events_reach_spark_typed_through_the_proxy_and_the_relay(
    spark: Any, zeromq_site: Site
) -> None:
    site = zeromq_site
    # relay node 1 joined the proxy with --subscribe site/events/: the manager published
    wait_for(
        lambda: "published site/events/typed" in site.cluster.running["manager"].stdout(),
        60,
        "the manager's event for relay node 1",
    )
    rows = read_relay(spark, site, site.relays[0].relay, "site/events/")
    assert [spark_row(r) for r in rows] == [FROM_ZEEK]
    assert rows[0].topic == "site/events/typed"

    # and straight from the proxy into a Spark query (zeromq.proxy)
    df = (
        spark.readStream.format("broker")
        .option("zeromq.proxy", site.cluster.proxy)
        .options(**site.curve_options())
        .option("topics", "site/spark/")
        .option("format", "zeek")
        .schema(TYPED_DDL)
        .load()
    )
    query = df.writeStream.format("memory").queryName("live_proxy_events").start()
    try:
        wait_for(lambda: spark.sql("select * from live_proxy_events").count() >= 1, 120, "")
        assert query.exception() is None
    finally:
        query.stop()
    rows = spark.sql("select * from live_proxy_events").collect()
    assert [spark_row(r) for r in rows] == [FROM_ZEEK]


def test_spark_writes_typed_events_that_zeek_takes_through_the_proxy(
    spark: Any, zeromq_site: Site
) -> None:
    site = zeromq_site
    (
        spark_rows_to_zeek(spark, 1)
        .write.format("broker")
        .option("zeromq.proxy", site.cluster.proxy)
        .options(**site.curve_options())
        .option("topic", "site/to-zeek/spark")
        .option("signature", SIGNATURE)
        .mode("append")
        .save()
    )
    assert received(site, 1) == sent_to_zeek(1)


# --- Zeek's WebSocket API (the manager's listener) ----------------------------------------


def websocket_url(site: Site) -> str:
    return f"ws://127.0.0.1:{site.cluster.websocket}/v1/messages/json"


def test_a_python_websocket_client_subscribes_and_publishes_typed_events(
    zeromq_site: Site,
) -> None:
    site = zeromq_site
    config = broker.Configuration(broker.BrokerOptions(disable_ssl=True))
    with broker.Endpoint(config) as ep:
        sub = ep.make_subscriber("site/ws-client/")
        assert ep.web_socket_peer(websocket_url(site), ["site/ws-client/"])
        got = sub.get(60.0)
        assert got is not None, "no event through Zeek's WebSocket API"
        topic, data = got
        event = broker.zeek.Event(data)
        assert topic == "site/ws-client/typed" and event.name() == "Live::typed"
        c, a, p, t, i, s, tb, v, r, e = event.args()
        assert (c, a, p) == (Count(42), ipaddress.IPv4Address("192.0.2.1"), Port(443, Port.TCP))
        assert zeek_time(t, WEBSOCKET) and i == dt.timedelta(seconds=1.5)
        assert (s, tb, v, r, e) == (
            {"a", "b"},
            {"x": Count(1)},
            ("v1", "v2"),
            (Count(7), None),
            Enum("Live::BLUE"),
        )

        ep.publish(
            "site/to-zeek/python",
            broker.zeek.Event(
                "Live::typed", Count(3), ipaddress.IPv4Address("198.51.100.7"),
                Port(8080, Port.TCP), T, dt.timedelta(seconds=2.5), {"x", "y"},
                {"k": Count(3)}, ("w",), (Count(9), "nine"), Enum("Live::GREEN"),
            ),
        )  # fmt: skip
        assert received(site, 3) == sent_to_zeek(3)


def test_spark_writes_typed_events_through_zeeks_websocket_api(
    spark: Any, zeromq_site: Site
) -> None:
    site = zeromq_site
    (
        spark_rows_to_zeek(spark, 2)
        .write.format("broker")
        .option("websocket", websocket_url(site))
        .option("topic", "site/to-zeek/spark-ws")
        .option("signature", SIGNATURE)
        .mode("append")
        .save()
    )
    assert received(site, 2) == sent_to_zeek(2)


@pytest.fixture
def websocket_node(zeromq_site: Site, tmp_path: Path) -> Iterator[str]:
    """``node --websocket-peer`` of docs/how-to/zeek-cluster-zeromq.md: Zeek's WebSocket API into a spool,
    served as a relay (its address is yielded)."""
    relay = f"127.0.0.1:{free_port()}"
    cmd = Command(
        "node", "--no-listen", "--websocket-peer", websocket_url(zeromq_site),
        "--subscribe", "site/ws-node/", "--spool", str(tmp_path / "spool"), "--relay", relay,
        "--cert", str(zeromq_site.certs / "relay1.pem"),
        "--key", str(zeromq_site.certs / "relay1.key"),
        "--ca", str(zeromq_site.certs / "ca.pem"),
        tmp=tmp_path / "logs",
    )  # fmt: skip
    try:
        cmd.expect("^ready$", 60)
        yield relay
        assert cmd.signal() == 0, cmd.stderr()
    finally:
        cmd.close()


def test_a_node_spools_the_events_of_zeeks_websocket_api(
    spark: Any, zeromq_site: Site, websocket_node: str
) -> None:
    site = zeromq_site
    manager = site.cluster.running["manager"]
    wait_for(lambda: "published site/ws-node/typed" in manager.stdout(), 60, "the event")
    rows: list[Any] = []

    def spooled() -> bool:
        rows[:] = read_relay(spark, site, websocket_node, "site/ws-node/")
        return bool(rows)

    wait_for(spooled, 60, "the event in the node's spool")
    assert [spark_row(r, WEBSOCKET) for r in rows] == [FROM_ZEEK]
