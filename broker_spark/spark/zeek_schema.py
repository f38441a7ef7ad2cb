"""Zeek log schemas as Spark schemas: typed columns, nested by Zeek's dotted names.

Zeek flattens a log's records into dotted column names (``id.orig_h``), and a
dot in a Spark column name needs backticks everywhere. So by default
(``columns=nested``) each dotted prefix gets its struct back: ``id`` is a
struct of ``orig_h``, ``orig_p``, ``resp_h``, ``resp_p``, placed where its
first member was; ``columns=flat`` keeps Zeek's names.

Zeek types map onto Spark types as the issue's table says: bool BOOLEAN; int
and count LONG (a count above 2**63-1 does not fit); double and interval
DOUBLE (seconds); time TIMESTAMP; string, enum, addr, subnet, file and func
STRING; port INT (its number); set and vector ARRAY of the element's type.

:func:`zeek_log_schema` gives the schema of a log for ``from_json`` and for
archives; :func:`parse_zeek_json` and :func:`read_zeek_json` read Zeek's own
JSON lines into exactly the columns a stream of the same log has, so archived
and live logs union directly. Reading a time from JSON needs that help: Spark
reads no JSON number as a TIMESTAMP, so times are read as DOUBLE seconds and
converted the way the stream reader converts them (to the microsecond,
halves away from zero).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from broker_spark.columnar.log_columns import (
    COLUMN_LAYOUTS,
    GENERIC_LOG_FIELDS,
    LOG_METADATA,
    MESSAGE,
    OPTIONAL_METADATA,
    RECORDS,
    RELAY_METADATA,
    ColumnNode,
    LogColumns,
    metadata_names,
    nest_columns,
)
from broker_spark.reader.options import BrokerOptionError
from broker_spark.zeek.log_schema import LogSchema, standard_schema
from broker_spark.zeek.types import TypeTag, ZeekType

__all__ = [
    "COLUMN_LAYOUTS",
    "ColumnNode",
    "GENERIC_LOG_FIELDS",
    "LOG_METADATA",
    "LogColumns",
    "MESSAGE",
    "RECORDS",
    "OPTIONAL_METADATA",
    "RELAY_METADATA",
    "generic_log_schema",
    "log_columns",
    "log_schema_for",
    "metadata_names",
    "nest_columns",
    "parse_zeek_json",
    "read_zeek_json",
    "spark_type",
    "zeek_log_schema",
]

_METADATA_TYPES: dict[str, DataType] = {
    "_path": StringType(),
    "topic": StringType(),
    "sender": StringType(),
    "received_at": TimestampType(),
    "offset": LongType(),
    "record": LongType(),
    "relay": StringType(),
    "log_schema_id": StringType(),
    "log_schema": StringType(),
    "records": LongType(),
    "log": StringType(),
    "message": BinaryType(),
}

_ATOMIC: dict[TypeTag, DataType] = {
    TypeTag.BOOL: BooleanType(),
    TypeTag.INT: LongType(),
    TypeTag.COUNT: LongType(),
    TypeTag.DOUBLE: DoubleType(),
    TypeTag.TIME: TimestampType(),
    TypeTag.INTERVAL: DoubleType(),
    TypeTag.PORT: IntegerType(),
}


def spark_type(zeek_type: ZeekType) -> DataType:
    """The Spark type a column of ``zeek_type`` has."""
    if zeek_type.tag in (TypeTag.TABLE, TypeTag.VECTOR):
        return ArrayType(spark_type(zeek_type.element), containsNull=True)
    return _ATOMIC.get(zeek_type.tag, StringType())


def _json_type(zeek_type: ZeekType, timestamps: str) -> DataType:
    """The Spark type that reads a column from Zeek's JSON (a time as it is written)."""
    if zeek_type.tag in (TypeTag.TABLE, TypeTag.VECTOR):
        return ArrayType(_json_type(zeek_type.element, timestamps), containsNull=True)
    if zeek_type.tag is TypeTag.TIME:
        return {"epoch": DoubleType(), "iso8601": StringType()}.get(timestamps, LongType())
    if zeek_type.tag is TypeTag.COUNT:
        return LongType()
    return spark_type(zeek_type)


def _struct(nodes: Sequence[ColumnNode], types: dict[str, ZeekType]) -> list[StructField]:
    fields = []
    for node in nodes:
        if node.leaf is not None:
            fields.append(StructField(node.name, spark_type(types[node.leaf]), True))
        else:
            fields.append(StructField(node.name, StructType(_struct(node.children, types)), True))
    return fields


def zeek_log_schema(
    log: str | LogSchema, columns: str = "nested", metadata: bool = True, relay: bool = False
) -> StructType:
    """The Spark schema of a Zeek log (``"conn"``, ``"Conn::LOG"`` or a LogSchema): its
    typed columns, nested or flat, followed by ``_path, topic, sender, received_at,
    offset`` unless ``metadata=False`` (and ``relay`` with ``relay=True``: a stream read
    from relays)."""
    schema = log_schema_for(log)
    if columns not in COLUMN_LAYOUTS:
        raise ValueError(f"columns must be nested or flat, not {columns!r}")
    types = {f.name: f.zeek_type for f in schema.fields}
    nodes = nest_columns(schema.names, columns)
    fields = _struct(nodes, types)
    if metadata:
        names = metadata_names([n.name for n in nodes], (RELAY_METADATA,) if relay else ())
        fields += [StructField(names[m], _METADATA_TYPES[m], True) for m in names]
    return StructType(fields)


def generic_log_schema(relay: bool = False) -> StructType:
    """The columns of a stream of several logs: ``_path``, ``log`` (Zeek's JSON line), metadata
    (and ``relay`` with ``relay=True``)."""
    names = (*GENERIC_LOG_FIELDS, RELAY_METADATA) if relay else GENERIC_LOG_FIELDS
    return StructType([StructField(n, _METADATA_TYPES[n], True) for n in names])


def log_schema_for(log: str | LogSchema) -> LogSchema:
    if isinstance(log, LogSchema):
        return log
    schema = standard_schema(log)
    if schema is None:
        raise ValueError(
            f"{log!r} is not one of Zeek's standard logs; pass its LogSchema "
            "(from a LogCreate: broker_spark.zeek.LogCreate(data).schema())"
        )
    return schema


# --- what a reader's output columns ask for ------------------------------------------------


def _leaves(f: StructField, prefix: str) -> list[str]:
    if isinstance(f.dataType, StructType):
        out = []
        for child in f.dataType.fields:
            out.extend(_leaves(child, f"{prefix}{f.name}."))
        return out
    return [prefix + f.name]


def log_columns(schema: StructType, known: Sequence[str] = ()) -> LogColumns:
    """How an output schema's columns are filled (its metadata roles, the Zeek columns it
    holds); ``known`` are the Zeek column names of the log, whose top-level names push a
    metadata column's name to ``_topic`` and so on (:func:`metadata_names`), as in the
    schema the source offers. A column of a role but not its type, typed columns beside
    ``log``, or ``message`` without ``records`` raise :class:`BrokerOptionError`."""
    top = {n.partition(".")[0] for n in known} | set(known)
    by_name = {name: role for role, name in metadata_names(sorted(top)).items()}
    by_name.setdefault("log", "log")
    if not any(by_name.get(f.name) == "log" for f in schema.fields):
        # typed columns: ``records`` counts the lines of a log column and ``message``
        # holds them, so here they are columns of the log's own (Zeek's reporter
        # log has a ``message``; a site's log may have a ``records``)
        by_name = {name: role for name, role in by_name.items() if role not in (RECORDS, MESSAGE)}
    roles: dict[str, str] = {}
    leaves: list[str] = []
    for f in schema.fields:
        role = by_name.get(f.name)
        if role is not None and role not in roles:
            want = _METADATA_TYPES[role]
            if type(f.dataType) is not type(want):
                raise BrokerOptionError(
                    "schema", f.name, f"column {f.name} must be {want.simpleString()}"
                )
            roles[role] = f.name
            continue
        leaves.extend(_leaves(f, ""))
    generic = "log" in roles
    if generic and leaves:
        raise BrokerOptionError(
            "schema",
            ", ".join(leaves[:3]),
            "a schema with a log column holds no typed log columns",
        )
    if MESSAGE in roles and RECORDS not in roles:
        raise BrokerOptionError(
            "schema",
            roles[MESSAGE],
            f"a {roles[MESSAGE]} column (a message's records) needs a records column",
        )
    return LogColumns(roles, tuple(leaves), generic)


# --- Zeek's JSON logs into the same columns --------------------------------------------------


def parse_zeek_json(
    column: Any,
    log: str | LogSchema,
    columns: str = "nested",
    timestamps: str = "epoch",
) -> Any:
    """A Spark Column: Zeek JSON log lines (a string column) as a struct of the log's typed
    columns, the same as a stream of that log holds. ``timestamps`` says how the lines
    spell times (Zeek's ``LogAscii::json_timestamps``: epoch, iso8601 or millis)."""
    from pyspark.sql import functions as F

    schema = log_schema_for(log)
    if isinstance(column, str):
        column = F.col(column)
    json_schema = StructType(
        [StructField(f.name, _json_type(f.zeek_type, timestamps), True) for f in schema.fields]
    )
    parsed = F.from_json(column, json_schema)
    types = {f.name: f.zeek_type for f in schema.fields}

    def value(name: str) -> Any:
        raw = parsed.getField(name)
        zeek_type = types[name]
        if zeek_type.tag is TypeTag.TIME:
            return _time_column(raw, timestamps)
        if zeek_type.tag in (TypeTag.TABLE, TypeTag.VECTOR) and zeek_type.subtag is TypeTag.TIME:
            return F.transform(raw, lambda x: _time_column(x, timestamps))
        return raw

    def build(nodes: Sequence[ColumnNode]) -> list[Any]:
        out = []
        for node in nodes:
            if node.leaf is not None:
                out.append(value(node.leaf).alias(node.name))
            else:  # nullable, as the stream's structs (F.struct alone never is)
                member = F.when(parsed.isNotNull(), F.struct(*build(node.children)))
                out.append(member.alias(node.name))
        return out

    if columns not in COLUMN_LAYOUTS:
        raise ValueError(f"columns must be nested or flat, not {columns!r}")
    return F.struct(*build(nest_columns(schema.names, columns)))


def _time_column(raw: Any, timestamps: str) -> Any:
    from pyspark.sql import functions as F

    if timestamps == "iso8601":
        return F.to_timestamp(raw)
    if timestamps in ("millis", "millis-unsigned"):
        return F.timestamp_millis(raw)
    # seconds to microseconds, halves away from zero: what the stream reader does
    micros = raw * F.lit(1e6)
    rounded = (micros + F.when(micros < 0, F.lit(-0.5)).otherwise(F.lit(0.5))).cast("long")
    return F.timestamp_micros(rounded)


def read_zeek_json(
    spark: Any,
    paths: str | Sequence[str],
    log: str | LogSchema,
    columns: str = "nested",
    timestamps: str = "epoch",
) -> Any:
    """Zeek's JSON log files (``conn.log``, rotated archives, gzipped or not) as a DataFrame
    with a live stream's log columns and ``_path``, ready to union with a stream of that log
    (``unionByName(..., allowMissingColumns=True)`` adds the stream's metadata as nulls)."""
    from pyspark.sql import functions as F

    schema = log_schema_for(log)
    lines = spark.read.text(list(paths) if not isinstance(paths, str) else paths)
    lines = lines.where(~F.col("value").startswith("#"))  # a TSV-style header, if any
    parsed = lines.select(parse_zeek_json(F.col("value"), schema, columns, timestamps).alias("r"))
    names = metadata_names([n.name for n in nest_columns(schema.names, columns)])
    return parsed.select("r.*", F.lit(schema.path).alias(names["_path"]))
