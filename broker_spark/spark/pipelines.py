"""Zeek's logs as a streaming table per log in Spark Declarative Pipelines, in one call.

Databricks recommends its pipelines (Lakeflow, open source's Spark Declarative
Pipelines: ``pyspark.pipelines``) for ingestion, and a pipeline wants a table per
dataset, each defined by a flow of its own. :func:`write_zeek_tables`, one
``foreachBatch`` writing every log, cannot be that. So a pipeline's source file
calls :func:`zeek_tables`, which defines, for each log, a streaming table
(``@dp.table``) whose flow reads that log alone (``format=zeek-logs``,
``logs=<path>``: its typed, nested columns, the record's position and ``day``), and
a quarantine table of what no table takes. Each log's flow names its log to the
relays, which then send it that log's records only (``docs/relay.md``), so N
tables cost about one read of the relays, not N.

Spark finds ``format("broker")`` by itself where ``broker-spark[spark]`` is
installed (the pipeline's environment: its Python and Spark's workers); a
pipeline's source file may not change the session, so nothing here registers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from broker_spark.columnar.log_converter import UNDECODABLE_PATH
from broker_spark.spark.tables.columns import kept_undecodable_reason
from broker_spark.spark.tables.stage import DAY, safe_name
from broker_spark.spark.zeek_schema import generic_log_schema
from broker_spark.zeek.log_schema import standard_paths, standard_schema

__all__ = ["zeek_tables"]

#: Why a quarantine row is there.
NO_TABLE = "no table of this pipeline takes this log"
NOT_DECODED = "the record does not decode as its log's columns say"


def zeek_tables(
    spark: Any,
    *,
    relay: str | None = None,
    logs: Sequence[str] | None = None,
    options: Mapping[str, str] | None = None,
    table: str = "zeek_{path}",
    quarantine: str | None = "zeek_quarantine",
    zeek_version: str = "9.1",
    columns: str = "nested",
    comment: str = "Zeek's {path} log, from broker-spark",
) -> dict[str, str]:
    """Define a streaming table per Zeek log, and the quarantine, in the pipeline whose
    source file calls this; returns each log's table name (and ``quarantine``'s).

    ``relay`` is the relay nodes (``host:port,...``); ``options`` any other options of
    ``format("broker")`` (another source: ``peer``, ``listen``, ``zeromq.logs``; the
    ``ssl.*`` files; ``startingOffsets``...). ``logs`` are the log paths to make
    tables of (None: Zeek's standard logs of ``zeek_version``); ``table`` names each
    (``{path}`` replaced: ``zeek_conn``, ``main.zeek.{path}``). ``quarantine`` (None:
    none) takes the records no table here takes, as Zeek's JSON lines: a log without
    a table (a site's own, when ``logs`` is None), a record that does not decode.
    Each table has the log's typed columns (``columns``: nested or flat), the record's
    ``topic``, ``sender``, ``received_at``, ``offset``, ``record`` and ``relay``, and
    ``day`` (the day of ``ts``, to partition or cluster by where the platform does).
    """
    from pyspark import pipelines as dp

    given = dict(options or {})
    if relay is not None:
        given["relay"] = relay
    if "{path}" not in table:
        raise ValueError(f"table {table!r} must name the log: put {{path}} in it")
    paths = list(logs) if logs is not None else standard_paths(zeek_version)
    defined: dict[str, str] = {}
    for path in paths:
        name = table.format(path=safe_name(path))
        query = _log_flow(spark, given, path, zeek_version, columns)
        dp.table(query, name=name, comment=comment.format(path=path))
        defined[path] = name
    if quarantine is not None:
        everything = logs is None
        flow = _quarantine_flow(spark, given, paths, everything, zeek_version)
        dp.table(flow, name=quarantine, comment="Zeek records no table of this pipeline takes")
        defined[""] = quarantine
    return defined


def _reader(spark: Any, options: Mapping[str, str], zeek_version: str) -> Any:
    reader = spark.readStream.format("broker")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.option("format", "zeek-logs").option("zeekVersion", zeek_version)


def _log_flow(
    spark: Any, options: Mapping[str, str], path: str, zeek_version: str, columns: str
) -> Any:
    """The flow of log ``path``'s table: that log alone, typed, with its day."""

    def flow() -> Any:
        from pyspark.sql import functions as F

        reader = _reader(spark, options, zeek_version).option("logs", path)
        df = reader.option("columns", columns).load()
        # every row of the table is of its log: _path says nothing (write_zeek_tables' tables
        # have no _path either)
        return df.drop("_path").withColumn(DAY, F.to_date(F.col(when)))

    # the day of the record's time (a log without ts: its arrival). A flow may not look at
    # its DataFrame's columns, so Zeek's description says: every standard log has a ts
    schema = standard_schema(path, zeek_version)
    when = "ts" if schema is None or "ts" in schema.names else "received_at"

    flow.__name__ = f"zeek_{safe_name(path)}"
    return flow


def _quarantine_flow(
    spark: Any,
    options: Mapping[str, str],
    paths: Sequence[str],
    everything: bool,
    zeek_version: str,
) -> Any:
    """The quarantine's flow: the records of logs without a table (when the tables are
    the standard logs: the others), and those that do not decode."""

    def flow() -> Any:
        from pyspark.sql import functions as F

        relay = "relay" in options
        # ``_path`` and ``log`` whatever ``logs`` names: a reader of one log would otherwise
        # offer that log's typed columns
        reader = _reader(spark, options, zeek_version).schema(generic_log_schema(relay))
        if not everything:  # the relays send the tables' logs only
            reader = reader.option("logs", ",".join(paths))
        df = reader.load()
        other = ~F.col("_path").isin(list(paths))
        kept = F.col("_path") == UNDECODABLE_PATH
        taken = df.where(other | F.col("log").isNull())
        return taken.select(
            F.col("_path").alias("log"),
            F.col("log").alias("line"),
            "offset",
            "record",
            F.col("relay") if relay else F.lit(None).cast("string").alias("relay"),
            "received_at",
            F.when(kept, kept_undecodable_reason(F.col("log")))
            .when(other, F.lit(NO_TABLE))
            .otherwise(F.lit(NOT_DECODED))
            .alias("reason"),
            F.to_date(F.col("received_at")).alias(DAY),
        )

    flow.__name__ = "zeek_quarantine"
    return flow
