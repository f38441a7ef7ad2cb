"""``df.write``/``df.writeStream.format("broker")`` with a real local SparkSession.

Each write's tasks peer with the hub (an endpoint in the test process) and
publish; a subscriber on the hub checks what arrived. ``write`` returns only
after the hub acknowledged a task's messages, so a finished batch job means
everything is already in the subscriber's queue.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import spark_fixtures
from spark_fixtures import PeerWatch, drain_until, running

import broker_spark as broker
from broker_spark import zeek
from broker_spark.data.json_codec import dumps_value

hub = spark_fixtures.hub  # a fixture, shared by the Spark test modules
spark = spark_fixtures.spark  # a fixture, shared by the Spark test modules

TRIGGER = "100 milliseconds"

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def _writer(df: Any, hub: broker.Endpoint, **options: str) -> Any:
    writer = df.write.format("broker").mode("append")
    for key, value in {
        "peer": f"127.0.0.1:{hub.hub_port}",
        "ssl.disable": "true",
        **options,
    }.items():
        writer = writer.option(key, value)
    return writer


def _received(sub: Any, count: int) -> list[tuple[str, Any]]:
    got = sub.get(count, 10.0)
    assert len(got) == count, f"{len(got)} of {count} messages arrived"
    assert sub.poll() == []
    return got


def test_batch_write_typed_columns_as_vectors(spark: Any, hub: broker.Endpoint) -> None:
    sub = hub.make_subscriber("out/", qsize=1000)
    ts = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.timezone.utc)
    df = spark.createDataFrame(
        [(f"out/{i % 2}", i, f"h{i}", 0.5 * i, ts, [i, i + 1]) for i in range(100)],
        "topic STRING, n BIGINT, host STRING, x DOUBLE, ts TIMESTAMP, xs ARRAY<INT>",
    ).repartition(3)
    _writer(df, hub).save()
    got = _received(sub, 100)
    by_n = {value[0]: (topic, value) for topic, value in got}
    topic, value = by_n[7]
    assert topic == "out/1"
    assert value == (7, "h7", 3.5, ts, (7, 8))


def test_batch_write_json_data_and_zeek_events(spark: Any, hub: broker.Endpoint) -> None:
    sub = hub.make_subscriber("out/", qsize=1000)
    event = zeek.Event("conn_seen", "uid1", broker.Count(3))
    data = spark.createDataFrame(
        [(dumps_value(event.as_data()),), (dumps_value({"k": 1.5}),)], "data STRING"
    )
    _writer(data, hub, topic="out/json").save()
    events = spark.createDataFrame(
        [("conn_seen", "uid1", 3), ("conn_seen", "uid2", None)],
        "event STRING, uid STRING, n BIGINT",
    )
    _writer(events, hub, topic="out/events", format="zeek").save()
    got = _received(sub, 4)
    json_values = [v for t, v in got if t == "out/json"]
    assert {"k": 1.5} in json_values
    json_values.remove({"k": 1.5})
    assert zeek.Event(json_values[0]).name() == "conn_seen"
    assert zeek.Event(json_values[0]).args() == ["uid1", broker.Count(3)]
    sent = sorted((zeek.Event(v).args() for t, v in got if t == "out/events"), key=str)
    assert sent == [["uid1", 3], ["uid2", None]]


def test_malformed_data_fails_with_its_position(spark: Any, hub: broker.Endpoint) -> None:
    rows = [(dumps_value(i),) for i in range(5)] + [('{"@data-type":"count","data":-1}',)]
    df = spark.createDataFrame(rows, "data STRING").coalesce(1)
    with pytest.raises(Exception, match=r"row 5: .*count") as failure:
        _writer(df, hub, topic="out/bad").save()
    assert "badRecordsTopic" in str(failure.value)

    sub = hub.make_subscriber(["out/good", "out/rejects"], qsize=100)
    _writer(df, hub, topic="out/good", badRecordsTopic="out/rejects").save()
    got = _received(sub, 6)
    rejected = [v for t, v in got if t == "out/rejects"]
    assert len(rejected) == 1
    topic, text, reason = rejected[0]
    assert (topic, text) == ("out/good", rows[5][0])
    assert "count" in reason


def test_stream_round_trip_through_broker(spark: Any, hub: broker.Endpoint, tmp_path: Any) -> None:
    """Read a topic as a stream and publish every row, unchanged, to another topic."""
    sub = hub.make_subscriber("copy/", qsize=1000)
    watch = PeerWatch(hub)
    source = (
        spark.readStream.format("broker")
        .option("topics", "in/")
        .option("peer", f"127.0.0.1:{hub.hub_port}")
        .option("ssl.disable", "true")
        .load()
    )
    query = (
        source.selectExpr("concat('copy/', topic) AS topic", "data")
        .writeStream.format("broker")
        .option("peer", f"127.0.0.1:{hub.hub_port}")
        .option("ssl.disable", "true")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime=TRIGGER)
        .start()
    )
    received: list[tuple[str, Any]] = []

    def count() -> int:
        received.extend(sub.poll())
        return len(received)

    with running(query):
        watch.wait_subscribed("in/")
        hub.publish_batch(*[("in/x", (i, f"v{i}")) for i in range(30)])
        drain_until(query, count, 30)
    watch.close()
    assert sorted(received) == [("copy/in/x", (i, f"v{i}")) for i in range(30)]
