"""Every error of the ``broker`` source fails at start (or at its row) with a message naming the cause."""

from __future__ import annotations

from typing import Any

import pytest
import spark_fixtures
from spark_fixtures import free_port, running

spark = spark_fixtures.spark  # a fixture, shared by the Spark test modules

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def _stream(spark: Any, schema: str | None = None, **options: str) -> Any:
    reader = spark.readStream.format("broker")
    if schema is not None:
        reader = reader.schema(schema)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"peer": "127.0.0.1:9"}, r"option topics: is required"),
        (
            {"topics": "a", "store": "s", "peer": "127.0.0.1:9"},
            r"option store='s': contradicts topics",
        ),
        ({"topics": "a", "peer": "localhost"}, r"option peer='localhost': expected host:port"),
        ({"topics": "a", "peer": "h:99999"}, r"option peer='h:99999': port 99999 is out of range"),
        ({"topics": "a"}, r"option listen/peer/websocket/relay: one of them is required"),
        ({"topics": "a", "peer": "h:1", "startingOffsets": "now"}, r"option startingOffsets"),
        ({"topics": "a", "peer": "h:1", "maxRecordsPertrigger": "0"}, r"maxRecordsPerTrigger"),
        ({"topics": "a", "peer": "h:1", "topicz": "b"}, r"unknown option \(did you mean topics"),
    ],
)
def test_bad_reader_options_fail_at_load(spark: Any, options: dict, message: str) -> None:
    with pytest.raises(Exception, match=message):
        _stream(spark, **options)


def _fails_at_start(df: Any, message: str) -> None:
    query = df.writeStream.format("noop").trigger(processingTime="100 milliseconds").start()
    with running(query), pytest.raises(Exception, match=message):
        query.awaitTermination(60)


@pytest.mark.slow  # 4 s of a query failing at start: make test-slow (make test stays under 5 minutes)
def test_unreachable_peer_fails_the_query_at_start(spark: Any) -> None:
    port = free_port()
    df = _stream(spark, topics="a", peer=f"127.0.0.1:{port}", **{"ssl.disable": "true"})
    _fails_at_start(df, rf"option peer='127.0.0.1:{port}': cannot peer")


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("topic STRING, offset STRING", r"column offset must be LONG"),
        ("topic STRING, amount DECIMAL(10, 2)", r"column amount"),
    ],
)
def test_unmappable_schema_fails_the_query_at_start(spark: Any, schema: str, message: str) -> None:
    df = _stream(spark, schema, topics="a", peer="127.0.0.1:9", **{"ssl.disable": "true"})
    _fails_at_start(df, message)


def _write(df: Any, mode: str = "append", **options: str) -> None:
    writer = df.write.format("broker").mode(mode)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


@pytest.mark.slow  # long (5 s and more): make test-slow, and every PySpark (versions)
@pytest.mark.versions
def test_writer_errors(spark: Any) -> None:
    rows = spark.createDataFrame([(1, "x")], "n BIGINT, s STRING")
    with pytest.raises(Exception, match=r"option topic: is required"):
        _write(rows, peer="127.0.0.1:9")
    with pytest.raises(Exception, match=r"option peer/websocket: one of them is required"):
        _write(rows, topic="t")
    with pytest.raises(Exception, match=r"option listen='127.0.0.1:9': writers publish"):
        _write(rows, topic="t", listen="127.0.0.1:9", peer="127.0.0.1:9")
    with pytest.raises(Exception, match=r"option websocket='http://x': expected a ws://"):
        _write(rows, topic="t", websocket="http://x")
    with pytest.raises(
        Exception, match=r"option mode='overwrite': published messages cannot be replaced"
    ):
        _write(rows, "overwrite", topic="t", peer="127.0.0.1:9")
    money = spark.createDataFrame([(1,)], "n BIGINT").selectExpr("CAST(n AS DECIMAL(5, 1)) AS d")
    with pytest.raises(Exception, match=r"column d"):
        _write(money, topic="t", peer="127.0.0.1:9")
    port = free_port()
    with pytest.raises(Exception, match=rf"option peer='127.0.0.1:{port}': cannot peer"):
        _write(rows, topic="t", peer=f"127.0.0.1:{port}", **{"ssl.disable": "true"})


def test_a_pyspark_without_the_data_source_api_is_named() -> None:
    """PySpark 3.5 has no ``pyspark.sql.datasource``. A fault injected in a fresh
    interpreter (the module blocked in ``sys.modules``) stands in for it."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "sys.modules['pyspark.sql.datasource'] = None\n"
        "try:\n"
        "    import pyspark_broker\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.startswith("PySparkMissingError the broker data source needs PySpark 4.0")
    assert "Databricks Runtime 17.3 LTS" in done.stdout
    assert "PySpark 4." in done.stdout.split("but", 1)[1]  # names the installed version
