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
from dataclasses import dataclass
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

from broker_spark.spark.options import BrokerOptionError
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
    "generic_log_schema",
    "log_schema_for",
    "metadata_names",
    "nest_columns",
    "parse_zeek_json",
    "read_zeek_json",
    "spark_type",
    "zeek_log_schema",
]

COLUMN_LAYOUTS = ("nested", "flat")

#: The columns a log row carries besides the log's own, in this order (and, read from relays,
#: ``relay``: the id of the relay whose spool the row's offset is in). ``offset`` is the
#: message's (a Batch holds hundreds of records), ``record`` the record's index among the
#: records of its log in that message: ``(offset, record)`` (and ``relay``) say where a
#: record is, whatever reads it and however often.
LOG_METADATA = ("_path", "topic", "sender", "received_at", "offset", "record")
RELAY_METADATA = "relay"
#: Metadata a schema may ask for by name, beside :data:`LOG_METADATA`: ``relay``, and the
#: log's columns in force for the record (``log_schema_id``, a short id on every row;
#: ``log_schema``, the columns as JSON on the first row of each id in a partition): what
#: turns a stream of ``_path``/``log`` rows into a typed table per log whose columns
#: follow Zeek (:mod:`~broker_spark.spark.zeek_tables`). And ``records`` (``_path``/``log``
#: rows only): asking for it makes each row hold a run of records of one log in one
#: message, ``log`` their JSON lines joined by newlines (as in Zeek's own JSON log files),
#: ``record`` the first's index and ``records`` how many (:data:`RECORDS`). And ``message``
#: (beside ``records``): a row per log of a message, holding the message's Broker bytes
#: instead of JSON lines (:data:`MESSAGE`).
OPTIONAL_METADATA = (RELAY_METADATA, "log_schema_id", "log_schema", "records", "message")
#: The role of the column that makes ``_path``/``log`` rows hold runs of records.
RECORDS = "records"
#: The role of the (binary) column that makes ``_path``/``log``/``records`` rows hold a
#: message's records of one log as the message's own bytes, ``log`` null: what the tables
#: writer decodes straight into typed columns (:mod:`~broker_spark.spark.log_messages`).
MESSAGE = "message"

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

#: The columns of a stream of several logs (or one whose schema is not known at start).
GENERIC_LOG_FIELDS = ("_path", "log", "topic", "sender", "received_at", "offset", "record")

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


@dataclass(frozen=True)
class ColumnNode:
    """A top-level output column: a log column (``leaf``) or a struct of dotted members."""

    name: str
    leaf: str | None  # the Zeek column name, for a plain column
    children: tuple[ColumnNode, ...] = ()


def nest_columns(names: Sequence[str], layout: str) -> list[ColumnNode]:
    """Zeek's column names as top-level nodes: flat, or nested by dotted prefixes."""
    if layout == "flat":
        return [ColumnNode(n, n) for n in names]
    return _group(list(names), "")


def _group(names: list[str], prefix: str) -> list[ColumnNode]:
    out: list[ColumnNode] = []
    members: dict[str, list[str]] = {}
    plain = {n[len(prefix) :] for n in names if "." not in n[len(prefix) :]}
    for full in names:
        rest = full[len(prefix) :]
        head, dot, _ = rest.partition(".")
        if not dot or head in plain or not head:  # no prefix, or it collides with a column
            out.append(ColumnNode(rest, full))
            continue
        if head not in members:
            members[head] = []
            out.append(ColumnNode(head, None))
        members[head].append(full)
    return [
        node
        if node.leaf is not None
        else ColumnNode(node.name, None, tuple(_group(members[node.name], f"{prefix}{node.name}.")))
        for node in out
    ]


def metadata_names(
    log_names: Sequence[str], optional: Sequence[str] = OPTIONAL_METADATA
) -> dict[str, str]:
    """The name each metadata column takes beside these top-level log columns: its own,
    or with ``_`` before it when the log has a column of that name (MQTT's ``topic``);
    ``optional`` are the optional ones to name too."""
    taken = set(log_names)
    out = {}
    for meta in (*LOG_METADATA, *optional):
        name = meta
        while name in taken:
            name = "_" + name
        taken.add(name)
        out[meta] = name
    return out


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


@dataclass(frozen=True)
class LogColumns:
    """How a query's columns are filled: metadata by role, log columns by Zeek name.

    ``leaves`` are the Zeek column names the output holds (``id.orig_h``), found
    from flat names or from struct members; ``roles`` maps metadata roles
    (``topic``...) to output column names; ``generic`` is a ``_path``/``log`` output.
    """

    roles: dict[str, str]
    leaves: tuple[str, ...]
    generic: bool

    @classmethod
    def of(cls, schema: StructType, known: Sequence[str] = ()) -> LogColumns:
        """Work out an output schema's roles; ``known`` are the Zeek column names of the
        log, whose top-level names push a metadata column's name to ``_topic`` and so on
        (:func:`metadata_names`), as in the schema the source offers."""
        top = {n.partition(".")[0] for n in known} | set(known)
        by_name = {name: role for role, name in metadata_names(sorted(top)).items()}
        by_name.setdefault("log", "log")
        if not any(by_name.get(f.name) == "log" for f in schema.fields):
            # typed columns: ``records`` counts the lines of a log column and ``message``
            # holds them, so here they are columns of the log's own (Zeek's reporter
            # log has a ``message``; a site's log may have a ``records``)
            by_name = {
                name: role for name, role in by_name.items() if role not in (RECORDS, MESSAGE)
            }
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
        return cls(roles, tuple(leaves), generic)


def _leaves(f: StructField, prefix: str) -> list[str]:
    if isinstance(f.dataType, StructType):
        out = []
        for child in f.dataType.fields:
            out.extend(_leaves(child, f"{prefix}{f.name}."))
        return out
    return [prefix + f.name]


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
