"""Broker data stores as Spark tables: read a master's contents, write into it, stream its changes."""

from __future__ import annotations

from typing import Any

import pytest
import spark_fixtures
from spark_fixtures import PeerWatch, drain_until, running

import broker_spark as broker
from broker_spark.data.json_codec import dumps_value
from broker_spark.spark import deferred_rows, register
from broker_spark.spark.tables.stores import STORE_DDL

hub = spark_fixtures.hub  # a fixture, shared by the Spark test modules
spark = spark_fixtures.spark  # a fixture, shared by the Spark test modules

TRIGGER = "100 milliseconds"

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def _options(hub: broker.Endpoint) -> dict[str, str]:
    return {"store": "inventory", "peer": f"127.0.0.1:{hub.hub_port}", "ssl.disable": "true"}


def test_read_and_write_a_store(spark: Any, hub: broker.Endpoint) -> None:
    master = hub.attach_master("inventory")
    master.put("router", ("10.0.0.1", broker.Count(3)))
    master.put(broker.Count(7), 1.5)
    # An explicit registration (as on a cluster without the pyspark_broker module) works too.
    register(spark)  # idempotent: auto-discovery may have registered it already
    register(spark)
    rows = spark.read.format("broker").options(**_options(hub)).load()
    assert rows.columns == ["key", "value", "op", "expiry", "ts", "offset"]
    got = {(r.key, r.value, r.op) for r in rows.collect()}
    assert got == {
        (dumps_value("router"), dumps_value(("10.0.0.1", broker.Count(3))), "snapshot"),
        (dumps_value(broker.Count(7)), dumps_value(1.5), "snapshot"),
    }

    # Append: plain strings, Zeek JSON text and typed columns become keys and values.
    new = spark.createDataFrame(
        [("switch", dumps_value({"ports": broker.Count(48)}), None), ("ap", "wifi", 60.0)],
        "key STRING, value STRING, expiry DOUBLE",
    )
    new.write.format("broker").options(**_options(hub)).mode("append").save()
    assert master.get("switch") == {"ports": broker.Count(48)}
    assert master.get("ap") == "wifi"
    assert master.get("router") is not None

    # Overwrite: the store holds exactly the rows written.
    typed = spark.createDataFrame([(1, [1, 2]), (2, [3])], "key BIGINT, value ARRAY<BIGINT>")
    typed.write.format("broker").options(**_options(hub)).mode("overwrite").save()
    assert master.await_idle(10)
    assert master.keys() == {1, 2}
    assert master.get(2) == (3,)


@pytest.mark.slow  # 5 s of a streaming query: make test-slow, and every PySpark (versions)
@pytest.mark.versions
@pytest.mark.parametrize("deferred", [False, True], ids=["rows", "deferred"])
def test_stream_a_store_s_changes(spark: Any, hub: broker.Endpoint, deferred: bool) -> None:
    """The changes as rows, or (``deferred``) as partitions that the task consuming them
    reads (``deferredRows``, what the tables writer does with Zeek's logs): the same rows."""
    master = hub.attach_master("inventory")
    master.put("before", 1)
    watch = PeerWatch(hub)
    stream = spark.readStream.format("broker").options(**_options(hub))
    if deferred:
        schema = spark.createDataFrame([], STORE_DDL).schema
        changes = deferred_rows(stream.option("deferredRows", schema.json()).load(), schema)
    else:
        changes = stream.load()
    query = (
        changes.writeStream.format("memory")
        .queryName("changes")
        .trigger(processingTime=TRIGGER)
        .start()
    )

    def count() -> int:
        return spark.sql("SELECT count(*) FROM changes").first()[0]

    with running(query):
        watch.wait_subscribed("inventory/")  # the query's clone asks for the master
        # Changes made before the clone has its snapshot are only in the snapshot:
        # probe until one shows up as an event, then make the changes under test.
        probe = 0
        while not count():
            master.put("probe", probe)
            probe += 1
            query.processAllAvailable()
        seen = count()
        master.put("k", "v1")
        master.put("k", "v2", 300.0)
        master.erase("before")
        drain_until(query, count, seen + 3)
    watch.close()
    rows = [
        (r.op, r.key, r.value, r.expiry)
        for r in spark.sql("SELECT * FROM changes ORDER BY offset").collect()
        if r.key != dumps_value("probe")
    ]
    assert rows[-3:] == [
        ("insert", dumps_value("k"), dumps_value("v1"), None),
        ("update", dumps_value("k"), dumps_value("v2"), 300.0),
        ("erase", dumps_value("before"), None, None),
    ]


def test_a_stream_writes_into_a_store(spark: Any, hub: broker.Endpoint, tmp_path: Any) -> None:
    master = hub.attach_master("inventory")
    query = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 10)
        .load()
        .selectExpr("CAST(value AS STRING) AS key", "value * 2 AS value")
        .writeStream.format("broker")
        .options(**_options(hub))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime=TRIGGER)
        .start()
    )
    with running(query):
        spark_fixtures.wait_for(
            lambda: query.exception() is not None or len(master.keys()) >= 30,
            60,
            "30 keys written by the stream",
        )
        assert query.exception() is None
    assert master.await_idle(10)
    keys = master.keys()
    assert {"0", "1", "29"} <= keys
    assert all(master.get(k) == int(k) * 2 for k in keys)
