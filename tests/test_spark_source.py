"""``spark.readStream.format("broker")`` with a real local SparkSession.

An endpoint in the test process (the hub) listens; each query's endpoint
peers with it, subscribes, and the hub publishes. ``format("broker")`` is
found through the ``pyspark_broker`` module, with no register call.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Any

import pytest
import spark_fixtures
from chispa import assert_df_equality
from spark_fixtures import PeerWatch, drain_until, running, wait_for

import broker_spark as broker
from broker_spark import zeek
from broker_spark.data.json_codec import dumps_value
from broker_spark.reader.receiver_attach import stop_receiver
from broker_spark.spark.compat import HAS_ADMISSION_CONTROL
from broker_spark.spark.read.local_executors import MARKER_NAME
from broker_spark.spool.private import PREFIX as PRIVATE_PREFIX

hub = spark_fixtures.hub  # a fixture, shared by the Spark test modules
spark = spark_fixtures.spark  # a fixture, shared by the Spark test modules

TRIGGER = "100 milliseconds"

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]

TOPIC = "zeek/events/"


def _source(spark: Any, hub: broker.Endpoint, **options: str) -> Any:
    reader = spark.readStream.format("broker")
    for key, value in {
        "topics": TOPIC,
        "peer": f"127.0.0.1:{hub.hub_port}",
        "ssl.disable": "true",
        **options,
    }.items():
        reader = reader.option(key, value)
    return reader


def _event(i: int) -> zeek.Event:
    return zeek.Event("ping", broker.Count(i), f"host-{i}")


def _publish(hub: broker.Endpoint, first: int, count: int) -> None:
    hub.publish_batch(*[(TOPIC + "ping", _event(i)) for i in range(first, first + count)])


def _count(spark: Any, table: str) -> int:
    return spark.sql(f"SELECT count(*) FROM {table}").first()[0]


@pytest.mark.slow  # long (5 s and more): make test-slow, and every PySpark (versions)
@pytest.mark.versions
def test_default_zeek_and_typed_schemas(spark: Any, hub: broker.Endpoint) -> None:
    watch = PeerWatch(hub)
    typed = "topic STRING, offset LONG, n BIGINT, host STRING"
    queries = [
        _source(spark, hub).load(),
        _source(spark, hub, format="zeek").load(),
        _source(spark, hub, format="zeek").schema(typed).load(),
    ]
    assert queries[0].columns == ["topic", "data", "sender", "received_at", "offset"]
    assert queries[1].columns[-2:] == ["event", "args"]
    names = ["plain", "zeekfmt", "typed"]
    started = []
    try:
        for df, name in zip(queries, names, strict=True):
            started.append(
                df.writeStream.format("memory")
                .queryName(name)
                .trigger(processingTime=TRIGGER)
                .start()
            )
        watch.wait_added(3)
        watch.wait_subscribed(TOPIC, peers=3)
        _publish(hub, 0, 20)
        hub.publish(TOPIC + "odd", zeek.Event("ping", "not a count", "h"))  # does not fit n
        hub.publish(TOPIC + "odd", broker.Count(7))  # not an event at all
        for query, name in zip(started, names, strict=True):
            drain_until(query, lambda name=name: _count(spark, name), 22)
    finally:
        for query in started:
            query.stop()
        watch.close()

    plain = spark.sql("SELECT topic, data, offset FROM plain WHERE offset < 20")
    expected = spark.createDataFrame(
        [(TOPIC + "ping", dumps_value(_event(i).as_data()), i) for i in range(20)],
        "topic STRING, data STRING, offset LONG",
    )
    assert_df_equality(plain, expected, ignore_row_order=True, ignore_nullable=True)
    senders = spark.sql("SELECT DISTINCT sender FROM plain").collect()
    assert [row.sender for row in senders] == [hub.node_id()]

    events = spark.sql("SELECT event, args FROM zeekfmt WHERE offset = 3").first()
    assert events.event == "ping"
    assert events.args == (
        '[{"@data-type":"count","data":3},{"@data-type":"string","data":"host-3"}]'
    )
    assert spark.sql("SELECT event FROM zeekfmt WHERE offset = 21").first().event is None

    rows = {r.offset: r for r in spark.sql("SELECT * FROM typed").collect()}
    assert (rows[5].n, rows[5].host, rows[5].topic) == (5, "host-5", TOPIC + "ping")
    assert (rows[20].n, rows[20].host) == (None, "h")  # the misfit is null, the rest stays
    assert (rows[21].n, rows[21].host) == (None, None)


@pytest.mark.slow  # 10 s of triggers: make test-slow, and every PySpark (versions)
@pytest.mark.versions
def test_max_records_per_trigger_makes_several_batches(spark: Any, hub: broker.Endpoint) -> None:
    watch = PeerWatch(hub)
    query = (
        _source(spark, hub, maxRecordsPerTrigger="15")
        .load()
        .writeStream.format("memory")
        .queryName("limited")
        .trigger(processingTime=TRIGGER)
        .start()
    )
    with running(query):
        watch.wait_subscribed(TOPIC)
        # Spark before 4.2 asks for the first batch's end before the reader knows its
        # start, and that batch takes all the spool holds (docs/spark.md, footnote 2): publish
        # once that question is answered (its trigger reported), so every batch is limited.
        wait_for(lambda: bool(query.recentProgress), 60, "the query's first trigger")
        _publish(hub, 0, 50)
        drain_until(query, lambda: _count(spark, "limited"), 50)
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    watch.close()
    assert sum(sizes) == 50
    assert max(sizes) <= 15
    assert len(sizes) >= 4


def _offsets_by_batch(target: dict[int, list[int]]) -> Any:
    def record(df: Any, batch_id: int) -> None:
        target.setdefault(batch_id, [])
        target[batch_id].append(sorted(r.offset for r in df.select("offset").collect()))

    return record


@pytest.mark.slow  # long (5 s and more): make test-slow, and every PySpark (versions)
@pytest.mark.versions
def test_restart_resumes_without_loss_or_duplicates(
    spark: Any, hub: broker.Endpoint, tmp_path: Any
) -> None:
    spool, checkpoint = str(tmp_path / "spool"), str(tmp_path / "checkpoint")
    runs: dict[int, list[list[int]]] = {}
    watch = PeerWatch(hub)

    def start() -> Any:
        return (
            _source(spark, hub, spoolPath=spool, maxRecordsPerTrigger="12")
            .load()
            .writeStream.foreachBatch(_offsets_by_batch(runs))
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=TRIGGER)
            .start()
        )

    def seen() -> set[int]:
        return {o for calls in runs.values() for o in calls[-1]}

    with running(start()) as first:
        watch.wait_added(1)
        watch.wait_subscribed(TOPIC)
        _publish(hub, 0, 30)
        drain_until(first, lambda: len(seen()), 30)
    _publish(hub, 30, 10)  # no query runs: the spoolPath's receiver keeps them
    # Forget the last batch's commit: the restarted query must plan it again, same offsets.
    commits = os.path.join(checkpoint, "commits")
    last = max(int(name) for name in os.listdir(commits) if name.isdigit())
    for name in (str(last), f".{last}.crc"):
        if os.path.exists(os.path.join(commits, name)):
            os.remove(os.path.join(commits, name))
    with running(start()) as second:
        _publish(hub, 40, 20)
        drain_until(second, lambda: len(seen()), 60)
    watch.wait_added(1)
    assert (watch.added, watch.removed) == (1, 0)  # one peering all along: the receiver's
    # partitionData=auto: a task saw that it runs in the reader's JVM (local mode), so
    # later batches were read from the spool by the tasks themselves
    with open(os.path.join(spool, MARKER_NAME), encoding="utf-8") as f:
        assert f.read()
    assert len(runs[last]) == 2 and runs[last][0] == runs[last][1]  # re-read identically
    offsets = [o for calls in runs.values() for o in calls[-1]]
    assert sorted(offsets) == list(range(60))  # nothing lost, nothing doubled
    # The limit holds across the restart (Spark 4.0 and 4.1 leave it to the reader).
    assert max(len(calls[-1]) for calls in runs.values()) <= 12

    # availableNow over the same spool: everything it holds, then the query ends by itself.
    got: dict[int, list[list[int]]] = {}
    query = (
        _source(spark, hub, spoolPath=spool, startingOffsets="earliest", maxRecordsPerTrigger="25")
        .load()
        .writeStream.foreachBatch(_offsets_by_batch(got))
        .option("checkpointLocation", str(tmp_path / "available-now"))
        .trigger(availableNow=True)
        .start()
    )
    with running(query):
        assert query.awaitTermination(60)
    assert sorted(o for calls in got.values() for o in calls[-1]) == list(range(60))
    if HAS_ADMISSION_CONTROL:
        assert len(got) >= 3  # the read limit applies to availableNow too
    else:  # Spark 4.0 and 4.1 ask a Python source for its end once: one batch
        assert len(got) == 1
    assert stop_receiver(spool)
    watch.close()


@pytest.mark.slow  # 7 s: make test-slow, and every PySpark (versions)
@pytest.mark.versions
def test_fail_on_data_loss_both_ways(spark: Any, hub: broker.Endpoint, tmp_path: Any) -> None:
    checkpoint = str(tmp_path / "checkpoint")
    watch = PeerWatch(hub)
    offsets: list[int] = []

    def start(**options: str) -> Any:
        return (
            _source(spark, hub, **options)
            .load()
            .writeStream.foreachBatch(
                lambda df, _id: offsets.extend(r.offset for r in df.select("offset").collect())
            )
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=TRIGGER)
            .start()
        )

    # No spoolPath: the spool does not survive the query, so a restart finds offsets gone.
    with running(start()) as first:
        watch.wait_subscribed(TOPIC)
        _publish(hub, 0, 10)
        drain_until(first, lambda: len(offsets), 10)
    with running(start()) as strict:
        with pytest.raises(Exception, match="lost") as failure:
            strict.awaitTermination(60)
        assert "failOnDataLoss=false" in str(failure.value)
    with running(start(failOnDataLoss="false")) as lenient:
        watch.wait_added(2)
        watch.wait_subscribed(TOPIC)
        _publish(hub, 10, 5)
        drain_until(lenient, lambda: len(offsets), 15)
    assert offsets == list(range(15))  # new offsets continue after the checkpoint
    watch.close()


@pytest.mark.slow  # 7 s: make test-slow, and every PySpark (versions); the converter's
@pytest.mark.versions  # FAILFAST is tested in make test (test_spark_schema, test_log_messages)
def test_failfast_fails_the_query_and_its_endpoint_leaves(spark: Any, hub: broker.Endpoint) -> None:
    watch = PeerWatch(hub)
    query = (
        _source(spark, hub, format="zeek", mode="FAILFAST")
        .schema("n BIGINT, host STRING")
        .load()
        .writeStream.format("noop")
        .trigger(processingTime=TRIGGER)
        .start()
    )
    with running(query):
        watch.wait_added(1)
        watch.wait_subscribed(TOPIC)
        _publish(hub, 0, 3)
        hub.publish(TOPIC + "odd", zeek.Event("ping", "not a count", "h"))
        with pytest.raises(Exception, match=r"record at offset 3"):
            query.awaitTermination(60)

    def left() -> bool:
        watch._drain()
        return watch.removed >= 1 and not hub.peers()

    spark_fixtures.wait_for(left, 30, "the failed query's endpoint to leave the hub")
    watch.close()


def _private_spools() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith(PRIVATE_PREFIX)}


def test_a_private_spool_goes_when_its_query_stops(spark: Any, hub: broker.Endpoint) -> None:
    """Without spoolPath the received events sit in a private directory; Spark ends the
    query's driver-side process with SIGTERM when the query stops, and it goes too."""
    before = _private_spools()
    watch = PeerWatch(hub)
    query = (
        _source(spark, hub)
        .load()
        .writeStream.format("noop")
        .trigger(processingTime=TRIGGER)
        .start()
    )
    with running(query):
        watch.wait_added(1)
        watch.wait_subscribed(TOPIC)
        _publish(hub, 0, 10)
        mine = wait_for(lambda: _private_spools() - before, 30, "the query's private spool")
    wait_for(lambda: not (mine & _private_spools()), 30, "the private spool to be removed")
    watch.close()


SESSION_STOP = """
import os, sys, tempfile, time
from pyspark.sql import SparkSession
spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.driver.host", "127.0.0.1")
    .getOrCreate()
)
query = (
    spark.readStream.format("broker")
    .option("topics", "zeek/")
    .option("peer", sys.argv[1])
    .option("ssl.disable", "true")
    .load()
    .writeStream.format("noop")
    .start()
)
deadline = time.monotonic() + 60
while not [n for n in os.listdir(tempfile.gettempdir()) if n.startswith("broker-spark-spool-")]:
    assert time.monotonic() < deadline, "no private spool"
    time.sleep(0.1)
print("spooling", flush=True)
spark.stop()  # the query still running
"""


@pytest.mark.slow  # a driver process of its own (13 s): make test-slow
def test_a_private_spool_goes_when_the_session_stops(hub: broker.Endpoint, tmp_path: Any) -> None:
    """``spark.stop()`` with a query running, in a driver process of its own."""
    env = {
        **os.environ,
        "TMPDIR": str(tmp_path),
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": spark_fixtures.ROOT,
    }
    done = subprocess.run(
        [sys.executable, "-c", SESSION_STOP, f"127.0.0.1:{hub.hub_port}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "spooling"
    wait_for(
        lambda: not [n for n in os.listdir(tmp_path) if n.startswith(PRIVATE_PREFIX)],
        30,
        "the private spool to be removed",
    )


def test_loading_the_source_imports_no_pandas() -> None:
    """Every query's driver-side process imports the source and decodes nothing: the column
    renderers' fixed texts are made on first use, since pyarrow's first ``pa.array`` imports
    pandas (140 ms of CPU at every query's start, measured)."""
    code = "import sys, broker_spark.spark.source; print('pandas' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False"
