"""Typed writes through a real local SparkSession: events of a signature, typed store values.

Each write's tasks peer with the hub and publish; what the hub receives is
compared with what a real Zeek sent for the same values (the recordings of
``typed_recordings``). Byte-exactness of every recorded event is checked
without Spark in ``test_typed_events``; here the point is the whole path:
Spark's own DataFrames, its Arrow batches, the tasks, the options.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
import spark_fixtures
from typed_recordings import as_columns, holdout_events, zmq_events

import broker_spark as broker
from broker_spark.data.binary import encode
from broker_spark.data.types import Count, Port

hub = spark_fixtures.hub
spark = spark_fixtures.spark

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def _writer(df: Any, hub: broker.Endpoint, **options: str) -> Any:
    writer = df.write.format("broker").mode("append")
    options = {"peer": f"127.0.0.1:{hub.hub_port}", "ssl.disable": "true", **options}
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer


def test_recorded_events_written_from_spark_reach_a_peer_as_zeek_sent_them(
    spark: Any, hub: broker.Endpoint
) -> None:
    wanted = {"Holdout::ev_multi", "Holdout::ev_table_count_record"}  # with metadata
    events = [e for e in holdout_events() if e.signature.name in wanted]
    events += [e for e in zmq_events() if e.signature.name == "ZTest::ev_set"]
    sub = hub.make_subscriber(["zeek/event/holdout", "zeek.test"], qsize=100)
    for event in events:
        with_time = event.network_time is not None
        schema, row, _batch = as_columns(event, with_time=with_time)
        df = spark.createDataFrame([row], schema)
        extra = {"networkTimestamp": "ts"} if with_time else {}
        _writer(df, hub, signature=str(event.signature), **extra).save()
        topic, value = sub.get(10.0)
        assert (topic, encode(value)) == (event.topic, event.payload), event.signature.name


def test_values_that_do_not_fit_follow_mode_and_bad_records_topic(
    spark: Any, hub: broker.Endpoint
) -> None:
    sub = hub.make_subscriber(["typed/", "bad/"], qsize=100)
    df = spark.createDataFrame(
        [(1, "10.0.0.1"), (-2, "10.0.0.2"), (3, "nowhere"), (4, "10.0.0.4")],
        "n BIGINT, host STRING",
    ).coalesce(1)
    sig = "seen(n: count, host: addr)"
    with pytest.raises(Exception, match=r"row 1: argument n \(count\): -2 is negative"):
        _writer(df, hub, topic="typed/x", signature=sig).save()
    sub.poll()  # what the failed task published before the bad row (nothing: checked per batch)
    _writer(df, hub, topic="typed/x", signature=sig, badRecordsTopic="bad/x").save()
    got = sub.get(4, 10.0)
    good = sorted(broker.zeek.Event(v).args()[0] for t, v in got if t == "typed/x")
    assert good == [Count(1), Count(4)]
    bad = sorted(v[2] for t, v in got if t == "bad/x")
    assert len(bad) == 2
    assert "'nowhere' is not an addr" in bad[0] and "-2 is negative" in bad[1]
    _writer(df, hub, topic="typed/x", signature=sig, mode="PERMISSIVE").save()
    assert len(sub.get(2, 10.0)) == 2
    assert sub.get(0.3) is None  # the bad rows went nowhere


def test_a_store_write_with_typed_keys_and_values(spark: Any, hub: broker.Endpoint) -> None:
    store = hub.attach_master("typed_inventory")
    df = spark.createDataFrame(
        [("10.0.0.1", ["22/tcp", "80/tcp"]), ("10.0.0.2", ["53/udp"])],
        "key STRING, value ARRAY<STRING>",
    )
    options = {"store": "typed_inventory", "zeekTypes": "key:addr,value:set[port]"}
    _writer(df, hub, **options).save()
    assert store.get(ipaddress.ip_address("10.0.0.1")) == {Port(22, 1), Port(80, 1)}
    assert store.get(ipaddress.ip_address("10.0.0.2")) == {Port(53, 2)}
    assert store.get("10.0.0.1") is None  # the key is an address, not a string
