"""How a micro-batch is split: the cluster's parallelism, ``minPartitions``, and how the
parallelism that ``register(spark)`` captures reaches the reader.

The split is plain arithmetic (examples and Hypothesis properties); the
registered class travels as Spark moves it, through PySpark's cloudpickle, to
a reader built where Spark builds it. The tests with the shared local
SparkSession read the parallelism of a real session and write from another
thread.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import spark_fixtures
from hypothesis import given, settings
from hypothesis import strategies as st

import broker_spark as broker
from broker_spark.reader.options import BrokerOptionError, parse_reader_options
from broker_spark.spark.read.offered_columns import DEFAULT_DDL
from broker_spark.spark.read.parallelism import (
    MIN_RECORDS_PER_SPLIT,
    is_connect_session,
    local_parallelism,
    session_parallelism,
    split_batch,
)
from broker_spark.spark.read.rows import LogRows, MessageRows
from broker_spark.spark.read.spool_positions import SpoolPositions
from broker_spark.spark.read.stream import StreamReader
from broker_spark.spark.registration import SECRET_OPTION_VALUES, register, registered_source
from broker_spark.spark.source import BrokerDataSource
from broker_spark.spark.zeek_schema import generic_log_schema

hub = spark_fixtures.hub  # a fixture, shared by the Spark test modules
spark = spark_fixtures.spark  # a fixture, shared by the Spark test modules

pytestmark = pytest.mark.timeout(120)

OPTIONS = {"topics": "zeek/", "peer": "127.0.0.1:9", "ssl.disable": "true"}


# --- the split ----------------------------------------------------------------------------


def test_a_batch_fills_whole_waves_of_the_clusters_cores() -> None:
    big = 64 * MIN_RECORDS_PER_SPLIT
    # 200 cores, a batch of 64 ranges' worth: 64 ranges (each keeps its 4096 records)
    assert len(split_batch(0, big, 100_000, parallelism=200)) == 64
    # a 4-core driver would have made 4; the cluster's figure makes what it has room for
    assert len(split_batch(0, big, 100_000, parallelism=4)) == 4
    # 3 partitions of at most cap on 2 cores: rounded up to 4 (whole waves)
    assert len(split_batch(0, 250_000, 100_000, parallelism=2)) == 4
    # a small batch stays whole: its ranges would be smaller than MIN_RECORDS_PER_SPLIT
    assert split_batch(10, 1010, 100_000, parallelism=200) == [(10, 1010)]


def test_min_partitions_is_a_floor_as_in_kafkas_source() -> None:
    # as many partitions as asked for once the batch has that many records, however small
    assert split_batch(0, 10, 100_000, parallelism=2, min_partitions=4) == [
        (0, 3),
        (3, 6),
        (6, 8),
        (8, 10),
    ]
    assert split_batch(0, 3, 100_000, parallelism=2, min_partitions=4) == [(0, 1), (1, 2), (2, 3)]
    # never fewer than the parallelism gives, nor ranges above maxRecordsPerPartition
    assert (
        len(split_batch(0, 64 * MIN_RECORDS_PER_SPLIT, 10**6, parallelism=8, min_partitions=2)) == 8
    )
    assert len(split_batch(0, 1000, 100, parallelism=1, min_partitions=2)) == 10


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(0, 2_000_000),
    cap=st.integers(1, 200_000),
    parallelism=st.integers(1, 512),
    minimum=st.none() | st.integers(1, 300),
    least=st.integers(1, 10_000),
)
def test_split_properties(
    n: int, cap: int, parallelism: int, minimum: int | None, least: int
) -> None:
    parts = split_batch(7, 7 + n, cap, parallelism=parallelism, least=least, min_partitions=minimum)
    assert parts == split_batch(
        7, 7 + n, cap, parallelism=parallelism, least=least, min_partitions=minimum
    )
    if n == 0:
        assert parts == []
        return
    assert parts[0][0] == 7 and parts[-1][1] == 7 + n
    assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))
    sizes = [hi - lo for lo, hi in parts]
    assert max(sizes) <= cap and min(sizes) >= 1
    if minimum is not None:
        assert len(parts) >= min(minimum, n)
    needed = -(-n // cap)
    whole_waves = -(-needed // parallelism) * parallelism
    if n // least >= whole_waves and (minimum is None or minimum <= whole_waves):
        assert len(parts) == whole_waves  # room for whole waves of tasks: they are filled


def test_min_partitions_option() -> None:
    assert parse_reader_options(OPTIONS).min_partitions is None
    assert parse_reader_options({**OPTIONS, "minpartitions": "12"}).min_partitions == 12
    for bad in ("0", "-2", "many", "1.5"):
        with pytest.raises(BrokerOptionError, match="minPartitions"):
            parse_reader_options({**OPTIONS, "minPartitions": bad})


# --- from register() to the reader --------------------------------------------------------


def _as_spark_ships(cls: type) -> type:
    """``cls`` after the trip Spark gives a registered source (PySpark's cloudpickle)."""
    from pyspark import cloudpickle

    return cloudpickle.loads(cloudpickle.dumps(cls))


def test_the_registered_class_carries_the_parallelism_to_the_reader() -> None:
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    shipped = _as_spark_ships(registered_source(7))
    assert shipped is not BrokerDataSource and issubclass(shipped, BrokerDataSource)
    assert shipped.name() == "broker" and shipped.session_parallelism == 7
    source = shipped(options=dict(OPTIONS))  # Spark builds it so, in another process
    assert source.schema() == DEFAULT_DDL
    schema = StructType(
        [StructField(n, StringType()) for n in ("topic", "data", "sender")]
        + [StructField("received_at", TimestampType()), StructField("offset", LongType())]
    )
    reader = _as_spark_ships(type(source))(options=dict(OPTIONS)).streamReader(schema)
    assert isinstance(reader, StreamReader) and reader.parallelism == 7
    assert isinstance(reader.rows, MessageRows)
    positions = SpoolPositions(reader.options, reader.rows, reader.parallelism)
    assert len(positions.split(0, 1_000_000)) == 14  # 10 partitions of 100,000: two waves of 7
    logs = shipped(options={**OPTIONS, "format": "zeek-logs", "schemaWait": "0"})
    zeek = logs.streamReader(generic_log_schema())
    assert isinstance(zeek.rows, LogRows) and zeek.parallelism == 7
    # found by Spark's own lookup (pyspark_broker), nobody registered it: the driver's cores
    plain = BrokerDataSource(options=dict(OPTIONS)).streamReader(schema)
    assert plain.parallelism == local_parallelism()


@pytest.mark.spark
def test_register_reads_the_sessions_parallelism(spark: Any) -> None:
    assert not is_connect_session(spark)
    assert session_parallelism(spark) == spark.sparkContext.defaultParallelism == 2
    spark.conf.set("spark.sql.leafNodeDefaultParallelism", "5")  # what spark.range follows
    try:
        assert session_parallelism(spark) == 5
        assert spark.sql("SELECT * FROM range(100)").rdd.getNumPartitions() == 5
    finally:
        spark.conf.unset("spark.sql.leafNodeDefaultParallelism")


def test_register_redacts_secret_option_values_and_keeps_the_users_pattern(spark: Any) -> None:
    """The pattern as Spark (Java's regex, Utils.redact) applies it to a Connect statement."""
    key = "spark.sql.redaction.string.regex"
    before = spark.conf.get(key, None)
    try:
        spark.conf.set(key, "(?i)my-own-[0-9]+")
        register(spark)
        register(spark)  # idempotent: the pattern is added once
        pattern = spark.conf.get(key)
        assert pattern.count(SECRET_OPTION_VALUES) == 1 and "my-own-" in pattern
        jvm = spark._jvm
        statement = (
            'options {\n  key: "ssl.passphrase"\n  value: "pa\\"ss-1"\n}\n'
            'options {\n  key: "zeromq.curveServerSecretKey"\n  value: "Z85-key"\n}\n'
            'options {\n  key: "topics"\n  value: "zeek/logs/"\n}\n'
            'options {\n  key: "note"\n  value: "my-own-42"\n}\n'
        )
        regex = spark._jsparkSession.sessionState().conf().stringRedactionPattern()
        shown = str(jvm.org.apache.spark.util.Utils.redact(regex, statement))
        for secret in ('pa\\"ss-1', "Z85-key", "my-own-42"):
            assert secret not in shown
        assert 'key: "ssl.passphrase"' in shown and 'value: "zeek/logs/"' in shown
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


# --- a write from another thread ------------------------------------------------------------


def _write_from_a_thread(df: Any, hub: broker.Endpoint, before: Any = None) -> Any:
    """Write ``df`` from a new thread (calling ``before`` there first); what it raised, if any."""
    failure: list[BaseException] = []

    def work() -> None:
        try:
            if before is not None:
                before()
            (
                df.write.format("broker")
                .mode("append")
                .option("peer", f"127.0.0.1:{hub.hub_port}")
                .option("ssl.disable", "true")
                .save()
            )
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(120)
    assert not thread.is_alive()
    return failure[0] if failure else None


@pytest.mark.spark
@pytest.mark.slow  # 8 s of two threads' writes: make test-slow, and every PySpark (versions)
@pytest.mark.versions
def test_a_write_from_another_thread_works_once_register_ran_there(
    spark: Any, hub: broker.Endpoint
) -> None:
    sub = hub.make_subscriber("thread/", qsize=100)
    # Built here: spark.createDataFrame in the thread would make the session active there.
    df = spark.createDataFrame([("thread/out", i) for i in range(3)], "topic STRING, n BIGINT")
    # A pinned thread's JVM side has no active session, where Spark looks the source up
    # for a write: Spark's own error, before any code of ours runs.
    failure = _write_from_a_thread(df, hub)
    assert failure is not None and "DATA_SOURCE_NOT_FOUND" in str(failure)
    assert sub.poll() == []
    assert _write_from_a_thread(df, hub, lambda: register(spark)) is None
    assert sorted(sub.get(3, 10.0)) == [("thread/out", (i,)) for i in range(3)]
