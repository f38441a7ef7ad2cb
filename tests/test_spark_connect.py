"""The connector through Spark Connect, as Databricks' serverless and shared clusters run it.

A ``SparkConnectServer`` (``local[2]``) runs in a JVM of its own
(:class:`spark_daemons.ConnectServer`); this process is a pure Connect client:
no JVM, no SparkContext, so anything of ours that reached for ``_jvm`` or
``sparkContext`` on the client would fail here. The source is registered the
way a Connect user does it, with ``register(spark)`` from the client (Spark
pickles the class to the server).

Marked ``connect``: ``make test`` leaves them out (they need a JVM of their
own and a process without a classic session); ``make test-cluster`` runs them,
and ``.ci/spark-versions`` on PySpark 4.0 and 4.1.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import spark_fixtures
from spark_daemons import ConnectServer, free_port
from spark_fixtures import PeerWatch, drain_until, replay_logs, running, wait_for
from zeek_recordings import recording

import broker_spark as broker
from broker_spark.data.json_codec import dumps_value
from broker_spark.spark import register
from broker_spark.spark.read.parallelism import (
    MIN_RECORDS_PER_SPLIT,
    local_parallelism,
    session_parallelism,
)

hub = spark_fixtures.hub  # a fixture, shared by the Spark test modules

pytestmark = [pytest.mark.connect, pytest.mark.timeout(300)]


UI_PORT = free_port()


@pytest.fixture(scope="module")
def server() -> Iterator[ConnectServer]:
    ui = {"spark.ui.enabled": "true", "spark.ui.port": str(UI_PORT)}  # its Connect tab
    with ConnectServer("local[2]", ui) as running_server:
        yield running_server


@pytest.fixture(scope="module")
def spark(server: ConnectServer) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(server.url).getOrCreate()
    try:
        register(session)
        yield session
    finally:
        session.stop()


def _offset(reported: Any) -> int:
    """A progress report's offset: JSON text, or (Spark 4.0, 4.1) the dict's ``repr``."""
    match = re.search(r"offset\W+(\d+)", str(reported or ""))
    return int(match.group(1)) if match else 0


def _conn(hub: broker.Endpoint) -> dict[str, str]:
    return {"peer": f"127.0.0.1:{hub.hub_port}", "ssl.disable": "true"}


def test_the_client_runs_no_jvm(spark: Any) -> None:
    from pyspark import SparkContext

    assert type(spark).__module__.startswith("pyspark.sql.connect")
    register(spark)  # again: idempotent, and nothing on the client needs a JVM for it
    assert SparkContext._gateway is None and SparkContext._active_spark_context is None
    assert session_parallelism(spark) == 2  # local[2], learned from the server by a query


def test_a_stream_read_split_for_the_registered_parallelism(
    spark: Any, hub: broker.Endpoint
) -> None:
    """The server's parallelism (here ``spark.sql.leafNodeDefaultParallelism``, 3) travels
    with the class ``register`` hands Spark to the reader in the server's Python process;
    where Spark keeps the source it found itself (4.0), the driver's cores split it."""
    from pyspark.sql import functions as F

    count = 8 * MIN_RECORDS_PER_SPLIT
    spark.conf.set("spark.sql.leafNodeDefaultParallelism", "3")
    try:
        assert session_parallelism(spark) == 3
        waves = 3 if register(spark) else local_parallelism()
        watch = PeerWatch(hub)
        query = (
            spark.readStream.format("broker")
            .options(**_conn(hub))
            .option("topics", "connect/")
            .load()
            .select("offset", "data", F.spark_partition_id().alias("part"))
            .writeStream.format("memory")
            .queryName("connect_read")
            .trigger(processingTime="3 seconds")
            .start()
        )
        with running(query):
            watch.wait_subscribed("connect/")
            hub.publish_batch(*[("connect/n", i) for i in range(count)])
            drain_until(
                query,
                lambda: spark.sql("SELECT count(*) FROM connect_read").first()[0],
                count,
                timeout=120,
            )
            # the progress of the last batch comes after its rows are visible
            wait_for(
                lambda: sum(p.numInputRows for p in query.recentProgress) >= count,
                30,
                "the progress reports",
            )
            progress = [p for p in query.recentProgress if p.numInputRows]
        watch.close()
    finally:
        spark.conf.unset("spark.sql.leafNodeDefaultParallelism")
        register(spark)
    rows = spark.sql("SELECT offset, data FROM connect_read ORDER BY offset").collect()
    assert [(r.offset, r.data) for r in rows] == [(i, dumps_value(i)) for i in range(count)]
    split = []
    for p in progress:  # (through Connect a progress's numbers are attributes only)
        start, end = (_offset(getattr(p.sources[0], k)) for k in ("startOffset", "endOffset"))
        parts = spark.sql(
            f"SELECT count(DISTINCT part) FROM connect_read WHERE offset >= {start} AND offset < {end}"
        ).first()[0]
        split.append((end - start, parts))
    big = [parts for n, parts in split if n >= waves * MIN_RECORDS_PER_SPLIT]
    assert big and all(parts % waves == 0 for parts in big), (waves, split)


def test_batch_and_stream_writes(spark: Any, hub: broker.Endpoint, tmp_path: Any) -> None:
    sub = hub.make_subscriber("connect-out/", qsize=1000)
    df = spark.createDataFrame([(f"h{i}", i) for i in range(50)], "host STRING, n BIGINT")
    df.write.format("broker").options(**_conn(hub)).option("topic", "connect-out/batch").mode(
        "append"
    ).save()
    got = sub.get(50, 10.0)
    assert sorted(got) == sorted(("connect-out/batch", (f"h{i}", i)) for i in range(50))

    query = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 10)
        .load()
        .selectExpr("'connect-out/stream' AS topic", "value")
        .writeStream.format("broker")
        .options(**_conn(hub))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    seen: list[tuple[str, Any]] = []

    def arrived() -> int:
        seen.extend(sub.poll())
        return len(seen)

    with running(query):  # (a rate source always has more: no processAllAvailable)
        wait_for(lambda: query.exception() is not None or arrived() >= 30, 120, "30 rows")
        assert query.exception() is None
    values = sorted(value[0] for _, value in seen)
    assert values[:30] == list(range(30))


def test_a_store_written_and_read(spark: Any, hub: broker.Endpoint) -> None:
    master = hub.attach_master("connect-inventory")
    master.put("before", 1)
    options = {**_conn(hub), "store": "connect-inventory"}
    rows = spark.createDataFrame([(f"host{i}", i) for i in range(20)], "key STRING, value BIGINT")
    rows.write.format("broker").options(**options).mode("append").save()
    assert master.await_idle(10)
    assert master.keys() == {"before", *(f"host{i}" for i in range(20))}
    assert master.get("host7") == 7
    table = spark.read.format("broker").options(**options).load()
    got = {r.key: r.value for r in table.collect()}
    assert len(got) == 21 and got[dumps_value("host7")] == dumps_value(7)


def test_zeek_logs(spark: Any, hub: broker.Endpoint) -> None:
    rec = recording("zeek-logs-dns-edns-ecs")
    expected = len(rec.writes["dns"])
    before = set(hub._core.peer_filters())
    stream = (
        spark.readStream.format("broker")
        .options(**_conn(hub))
        .option("format", "zeek-logs")
        .option("logs", "dns")
        .option("schemaWait", "0")
        .load()
    )
    query = (
        stream.select("uid", "query", "_path")
        .writeStream.format("memory")
        .queryName("connect_dns")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    with running(query):
        replay_logs(spark, hub, rec.data, {"connect_dns": expected}, before)
    rows = spark.sql("SELECT * FROM connect_dns").collect()
    zeeks_own = [json.loads(line) for line in rec.local_lines("dns")]
    assert sorted((r["uid"], r["query"]) for r in rows) == sorted(
        (line["uid"], line.get("query")) for line in zeeks_own
    )


def test_secret_option_values_stay_out_of_the_servers_ui(spark: Any, tmp_path: Any) -> None:
    """The server's Connect tab shows every statement with its options; register() made
    the session redact the values of secret ones (the key stays, to say what it was)."""
    import urllib.request

    from broker_spark.cli import main

    secret = "S3CRET-passphrase-in-the-ui-81"
    certs = tmp_path / "certs"
    assert main(["certs", "--out", str(certs), "--nodes", "reader"]) == 0
    query = (
        spark.readStream.format("broker")
        .option("topics", "zeek/ui-check/")
        .option("listen", "127.0.0.1:0")
        .option("ssl.certificate", str(certs / "reader.pem"))
        .option("ssl.key", str(certs / "reader.key"))
        .option("ssl.cafile", str(certs / "ca.pem"))
        .option("ssl.passphrase", secret)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        base = f"http://127.0.0.1:{UI_PORT}"
        pages = [urllib.request.urlopen(f"{base}/connect/", timeout=30).read().decode()]
        for link in set(re.findall(r'href="([^"]*/connect/session/[^"]*)"', pages[0])):
            url = link.replace("&amp;", "&")
            url = url if url.startswith("http") else base + url
            pages.append(urllib.request.urlopen(url, timeout=30).read().decode())
    finally:
        query.stop()
    shown = "".join(pages)
    assert "ssl.passphrase" in shown and "ssl.certificate" in shown  # the statement is there
    assert secret not in shown


def test_zeek_tables(spark: Any, tmp_path: Path) -> None:
    """``write_zeek_tables`` from a Connect client: the writer is pickled to the server, its
    ``foreachBatch`` runs there against a Connect session of its own, the stage job's tasks
    read their deferred partitions from the relay; each log's table holds Zeek's records."""
    from test_spark_relay import tables_written_once

    rec = recording("zeek-logs-dns-edns-ecs")
    with tables_written_once(spark, tmp_path, rec) as db:
        assert spark.table(f"{db}.dns").count() == len(rec.local_lines("dns"))
