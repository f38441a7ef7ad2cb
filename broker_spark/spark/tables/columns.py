"""The columns of Zeek's log tables: what the stream must hold, what each row keeps,
and whether a log's columns fit its table.

:mod:`~broker_spark.spark.tables.log_tables` writes a table per log; these are the column
rules both of its paths (Arrow's tasks and Spark's writer) share: the stream's input
columns (a row per record, or per run of a message's records), the position and
provenance a table row keeps beside the log's own columns, when a log's columns clash
with its table (a type changed: the rows go to the quarantine, with their reason), and
a run split back into a row a record for Spark's paths.
"""

from __future__ import annotations

from typing import Any

from broker_spark.spark.tables.message_decode import line_runs_partition
from broker_spark.spark.tables.stage import DAY
from broker_spark.spark.zeek_schema import (
    MESSAGE,
    RECORDS,
    RELAY_METADATA,
    generic_log_schema,
    metadata_names,
)

__all__ = [
    "KEPT_METADATA",
    "KEPT_UNDECODABLE",
    "kept_undecodable_reason",
    "POSITION",
    "clash_of",
    "each_record",
    "merged",
    "quarantine_rows",
    "table_input_schema",
    "table_types",
    "with_metadata",
]

#: The position and provenance columns every table row keeps, beside the log's own.
POSITION = ("offset", "record", "relay")
KEPT_METADATA = ("topic", "sender", "received_at", *POSITION)
#: The quarantine's reason for a message a relay kept undecodable: the relay's reason follows.
KEPT_UNDECODABLE = "kept undecodable by the relay: "


def table_input_schema(runs: bool = False, messages: bool = False) -> Any:
    """What the stream must hold: ``_path``, ``log`` and the metadata, with the columns in
    force for each record (``log_schema_id``, ``log_schema``) and ``relay``; ``runs``: and
    ``records``, so that a row holds a run of a message's records of one log
    (:mod:`~broker_spark.columnar.log_line_runs`); ``messages`` (with ``runs``): and
    ``message``, so that a row holds a message's records of one log as the message's
    bytes (:mod:`~broker_spark.columnar.log_messages`: what :func:`write_zeek_tables` reads)."""
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

    fields = list(generic_log_schema(relay=True).fields)
    fields += [StructField(name, StringType(), True) for name in ("log_schema_id", "log_schema")]
    if runs or messages:
        fields.append(StructField(RECORDS, LongType(), True))
    if messages:
        fields.append(StructField(MESSAGE, BinaryType(), True))
    return StructType(fields)


def each_record(df: Any, known: dict[str, str] | None = None, zeek_version: str = "9.1") -> Any:
    """A stream's rows one record each: messages' bytes (a ``message`` column) rendered as
    runs of Zeek's JSON lines (``known``: the columns, as JSON, of schema ids learned in
    earlier batches; ``zeek_version``: whose standard columns name a log nothing
    described), and runs of records (a ``records`` column) split into their lines, each
    with its own ``record`` index (a row with no line stays one row)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    if MESSAGE in df.columns:
        lines = StructType([f for f in df.schema.fields if f.name != MESSAGE])
        df = df.mapInArrow(line_runs_partition(dict(known or {}), zeek_version), lines)
    if RECORDS not in df.columns:
        return df
    others = [c for c in df.columns if c not in ("log", "record", RECORDS)]
    split = df.select(
        *others,
        F.col("record").alias("_first"),
        F.posexplode_outer(F.split(F.col("log"), "\n")).alias("_i", "log"),
    )
    record = (F.col("_first") + F.coalesce(F.col("_i"), F.lit(0))).alias("record")
    return split.select(*[record if c == "record" else c for c in df.columns if c != RECORDS])


def table_types(spark: Any, name: str) -> dict[str, Any]:
    """The table's columns by name; none for a table not made yet."""
    try:
        exists = spark.catalog.tableExists(name)
    except Exception as exc:  # a Delta path table whose folder holds no table yet
        if "DELTA_MISSING_DELTA_TABLE" not in str(exc):
            raise
        exists = False
    if not exists:
        return {}
    return {f.name: f.dataType for f in spark.table(name).schema.fields}


def clash_of(present: dict[str, Any], log_columns: Any) -> str:
    """Why the log's columns cannot go into a table of ``present`` columns ("" if they can)."""
    for f in log_columns.fields:
        old = present.get(f.name)
        if old is not None and not fits(old, f.dataType):
            return (
                f"column {f.name} is {f.dataType.simpleString()} in the log and "
                f"{old.simpleString()} in the table"
            )
    return ""


def fits(table: Any, log_type: Any) -> bool:
    """Whether values of ``log_type`` go into a column of ``table`` type: the same, or a struct
    that gained fields (Zeek records grow)."""
    from pyspark.sql.types import StructType

    if isinstance(table, StructType) and isinstance(log_type, StructType):
        mine = {f.name: f.dataType for f in table.fields}
        return all(f.name not in mine or fits(mine[f.name], f.dataType) for f in log_type.fields)
    return table == log_type


def with_metadata(columns: Any) -> Any:
    """A log's columns followed by the metadata each row keeps, named as beside them."""
    from pyspark.sql.types import StructField, StructType

    types = {f.name: f.dataType for f in table_input_schema().fields}
    named = metadata_names(columns.names, optional=(RELAY_METADATA,))
    kept = [StructField(named[m], types[m], True) for m in KEPT_METADATA]
    return StructType([*columns.fields, *kept])


def merged(present: dict[str, Any], schema: Any) -> dict[str, Any]:
    out = dict(present)
    for f in schema.fields:
        out.setdefault(f.name, f.dataType)
    return out


def kept_undecodable_reason(line: Any) -> Any:
    """The quarantine's reason (a Column) for a message a relay kept undecodable whose
    JSON object is ``line``: :data:`KEPT_UNDECODABLE` and the relay's own reason."""
    from pyspark.sql import functions as F

    relays = F.coalesce(F.get_json_object(line, "$.reason"), F.lit("?"))
    return F.concat(F.lit(KEPT_UNDECODABLE), relays)


def quarantine_rows(rows: Any, reason: Any) -> Any:
    """The quarantine table's rows for ``rows``: the log, the raw line, the position, why
    (``reason``: words, or a Column of the stream's rows)."""
    from pyspark.sql import functions as F

    why = F.lit(reason) if isinstance(reason, str) else reason
    return rows.select(
        F.col("_path").alias("log"),
        F.col("log").alias("line"),
        *POSITION,
        "received_at",
        why.alias("reason"),
        F.to_date(F.col("received_at")).alias(DAY),
    )
