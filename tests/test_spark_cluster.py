"""The connector on a real Spark standalone cluster: one master, two single-core workers.

The cluster (:class:`spark_daemons.StandaloneCluster`) runs from the venv's
pyspark on loopback; its workers' work, block manager and temporary folders
are their own, so executors get from the driver only what Spark ships them.
The driver is this process: a classic SparkSession with the cluster as its
master, the data source registered with ``register(spark)`` once the two
executors are up. Every query's tasks run on the executors (a Python UDF
column reports the executor's folder), and the Broker side is a hub endpoint
in this process that every executor reaches over loopback.

Marked ``cluster``: ``make test`` leaves them out (they need JVMs of their
own); ``make test-cluster`` runs them, in CI after ``make test``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import spark_fixtures
from spark_daemons import StandaloneCluster, python_env
from spark_fixtures import PeerWatch, drain_until, replay_logs, running
from zeek_recordings import recording

import broker_spark as broker
from broker_spark.data.json_codec import dumps_value
from broker_spark.spark import register, stop_receiver
from broker_spark.spark.read.local_executors import MARKER_NAME
from broker_spark.spark.read.parallelism import session_parallelism

hub = spark_fixtures.hub  # a fixture, shared by the Spark test modules

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

TRIGGER = "200 milliseconds"


@pytest.fixture(scope="module")
def cluster() -> Iterator[StandaloneCluster]:
    with StandaloneCluster(workers=2, cores=1) as running_cluster:
        yield running_cluster


@pytest.fixture(scope="module")
def spark(cluster: StandaloneCluster) -> Iterator[Any]:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is not None:
        pytest.skip("a SparkSession already runs in this process (run with -m cluster alone)")
    for key in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        os.environ[key] = python_env()[key]
    builder = SparkSession.builder.appName("broker-spark-cluster-tests")
    for key, value in {
        **cluster.session_config(),
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.streaming.stopTimeout": "10s",
    }.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    try:
        session.sparkContext.setLogLevel("ERROR")
        cluster.wait_for_executors(session, cluster.workers)
        register(session)  # after the executors came: the parallelism is theirs
        yield session
    finally:
        session.stop()


def _executor_udf() -> Any:
    """A column with the block manager folder of the JVM its task runs in."""
    from pyspark.sql import functions as F

    def folder() -> str | None:
        return os.environ.get("SPARK_LOCAL_DIRS")

    return F.udf(folder, "string").asNondeterministic()()


def _worker_of(folder: str, cluster: StandaloneCluster) -> int:
    """Which worker a task's folder belongs to (fails for the driver's or anyone else's)."""
    for i, worker in enumerate(cluster.worker_dirs):
        if folder.startswith(worker + os.sep):
            return i
    raise AssertionError(f"a task ran outside the workers' folders: {folder}")


def _conn(hub: broker.Endpoint) -> dict[str, str]:
    return {"peer": f"127.0.0.1:{hub.hub_port}", "ssl.disable": "true"}


def test_the_session_parallelism_is_the_executors_cores(
    spark: Any, cluster: StandaloneCluster
) -> None:
    assert session_parallelism(spark) == cluster.total_cores == 2


def test_a_stream_read_and_written_back_runs_on_both_executors(
    spark: Any, cluster: StandaloneCluster, hub: broker.Endpoint, tmp_path: Any
) -> None:
    """Topic ``in/`` read as a stream (received by the ``spoolPath``'s receiver process) and
    every row published to ``copy/``, each with the executor that read it and its partition;
    ``partitionData=auto`` (the default) keeps the partitions inline, as no task runs in the
    driver's JVM."""
    from pyspark.sql import functions as F

    count = 400
    sub = hub.make_subscriber("copy/", qsize=count)
    watch = PeerWatch(hub)
    spool = tmp_path / "spool"
    source = (
        spark.readStream.format("broker")
        .options(**_conn(hub))
        .option("topics", "in/")
        .option("spoolPath", str(spool))
        .option("minPartitions", "4")
        .load()
    )
    rows = source.select(
        F.concat(F.lit("copy/"), "topic").alias("topic"),
        F.col("data").alias("payload"),
        "offset",
        _executor_udf().alias("executor"),
        F.spark_partition_id().alias("part"),
    )
    query = (
        rows.writeStream.format("broker")
        .options(**_conn(hub))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime=TRIGGER)
        .start()
    )
    received: list[tuple[str, Any]] = []

    def arrived() -> int:
        received.extend(sub.poll())
        return len(received)

    try:
        with running(query):
            watch.wait_subscribed("in/")
            hub.publish_batch(*[("in/x", i) for i in range(count)])
            drain_until(query, arrived, count, timeout=120)
            batches = [p.numInputRows for p in query.recentProgress if p.numInputRows]
    finally:
        watch.close()
        # the spoolPath's receiver (on the driver's machine) outlives the query: stop it
        assert stop_receiver(str(spool)) is not None
    assert {topic for topic, _ in received} == {"copy/in/x"}
    values = sorted((value for _, value in received), key=lambda v: v[1])  # by offset
    assert [(payload, offset) for payload, offset, _, _ in values] == [
        (dumps_value(i), i) for i in range(count)
    ]
    # every batch of at least minPartitions rows came in four partitions, read on both workers
    assert all(n >= 4 for n in batches), batches
    assert {part for _, _, _, part in values} == {0, 1, 2, 3}
    assert {_worker_of(folder, cluster) for _, _, folder, _ in values} == {0, 1}
    # no task ran in the driver's JVM, so none told the reader to switch to its spool
    assert spool.is_dir() and not (spool / MARKER_NAME).exists()


def test_a_store_written_and_read_from_the_executors(
    spark: Any, cluster: StandaloneCluster, hub: broker.Endpoint
) -> None:
    master = hub.attach_master("cluster-inventory")
    master.put("before", 1)
    options = {**_conn(hub), "store": "cluster-inventory"}
    rows = spark.createDataFrame(
        [(f"host{i}", i) for i in range(40)], "key STRING, n BIGINT"
    ).repartition(4)
    written = rows.select("key", "n", _executor_udf().alias("executor")).selectExpr(
        "key", "named_struct('n', n, 'executor', executor) AS value"
    )
    written.write.format("broker").options(**options).mode("append").save()
    assert master.await_idle(10)
    keys = master.keys()
    assert keys == {"before", *(f"host{i}" for i in range(40))}
    writers = {_worker_of(master.get(f"host{i}")[1], cluster) for i in range(40)}
    assert writers == {0, 1}  # each executor's tasks put through a clone of their own
    table = spark.read.format("broker").options(**options).load()
    got = {r.key: r.value for r in table.collect()}
    assert got[dumps_value("before")] == dumps_value(1)
    assert len(got) == 41


def test_zeek_logs_read_on_the_executors(
    spark: Any, cluster: StandaloneCluster, hub: broker.Endpoint
) -> None:
    rec = recording("zeek-logs-dns-edns-ecs")
    expected = len(rec.writes["dns"])
    stream = (
        spark.readStream.format("broker")
        .options(**_conn(hub))
        .option("format", "zeek-logs")
        .option("logs", "dns")
        .option("schemaWait", "0")
        .load()
    )
    query = (
        stream.select("uid", "query", "_path", _executor_udf().alias("executor"))
        .writeStream.format("memory")
        .queryName("cluster_dns")
        .trigger(processingTime=TRIGGER)
        .start()
    )
    before = set(hub._core.peer_filters())
    with running(query):
        replay_logs(spark, hub, rec.data, {"cluster_dns": expected}, before)
    rows = spark.sql("SELECT * FROM cluster_dns").collect()
    assert len(rows) == expected and {r["_path"] for r in rows} == {"dns"}
    zeeks_own = [json.loads(line) for line in rec.local_lines("dns")]
    assert sorted((r["uid"], r["query"]) for r in rows) == sorted(
        (line["uid"], line.get("query")) for line in zeeks_own
    )
    for row in rows:
        _worker_of(row["executor"], cluster)  # read on an executor, not in the driver's JVM


def test_zeek_tables_written_on_the_executors(spark: Any, tmp_path: Path) -> None:
    """``write_zeek_tables`` on the cluster: its stream is read deferred, so the stage job's
    tasks, on the executors, unpickle their partitions, fetch them from the relay themselves
    and write the Parquet files, which the driver commits; each log's table holds Zeek's own
    records, each once."""
    from test_spark_relay import tables_written_once

    rec = recording("zeek-logs-dns-edns-ecs")
    with tables_written_once(spark, tmp_path, rec) as db:
        zeeks_own = [json.loads(line) for line in rec.local_lines("dns")]
        dns = spark.table(f"{db}.dns").select("uid", "query").collect()
        assert sorted((r["uid"], r["query"]) for r in dns) == sorted(
            (line["uid"], line.get("query")) for line in zeeks_own
        )
