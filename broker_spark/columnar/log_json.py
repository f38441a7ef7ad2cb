"""Zeek's JSON log lines as a log's typed Arrow columns, parsed where the lines are.

The tables writer (:mod:`~broker_spark.spark.zeek_tables`) gets a stream of
Zeek JSON lines and writes each log's typed rows to Parquet. Parsing them in
the JVM (``from_json``) and writing through Spark's row writer cost about 25 us
of CPU a row; Arrow's JSON reader and Parquet writer do the same in a Python
task in a few. This module gives exactly what
:func:`~broker_spark.spark.zeek_schema.parse_zeek_json` gives (the same columns,
types and values; times rounded the same way), as Arrow arrays:

* a time (Zeek's epoch seconds, as the stream renders them) becomes
  microseconds in UTC, halves rounded away from zero (null outside what Spark's
  timestamps hold, as in the stream);
* ``count`` is a signed 64-bit integer, ``port`` a 32-bit one, ``interval`` a
  double, sets and vectors lists; every other type (addr, subnet, enum, ...)
  its JSON text;
* dotted column names nest into structs (``columns="nested"``) or stay flat.

Lines Arrow's reader refuses (a value of another JSON type than its column's,
a count past 2^63) raise :class:`pyarrow.ArrowInvalid`: the caller writes those
through Spark instead, which reads them as it always did.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from broker_spark.columnar.log_columns import COLUMN_LAYOUTS, ColumnNode, nest_columns
from broker_spark.zeek.arrow_columns import micros_of_seconds, numbers
from broker_spark.zeek.log_schema import LogSchema
from broker_spark.zeek.types import TypeTag, ZeekType

__all__ = ["arrow_type", "parse_lines"]

_TIMESTAMP = pa.timestamp("us", tz="UTC")

_ATOMIC: dict[TypeTag, pa.DataType] = {
    TypeTag.BOOL: pa.bool_(),
    TypeTag.INT: pa.int64(),
    TypeTag.COUNT: pa.int64(),
    TypeTag.DOUBLE: pa.float64(),
    TypeTag.TIME: _TIMESTAMP,
    TypeTag.INTERVAL: pa.float64(),
    TypeTag.PORT: pa.int32(),
}


def arrow_type(zeek_type: ZeekType) -> pa.DataType:
    """The Arrow type of a column of ``zeek_type``: Spark's type of it
    (:func:`~broker_spark.spark.zeek_schema.spark_type`) as Arrow spells it."""
    if zeek_type.tag in (TypeTag.TABLE, TypeTag.VECTOR):
        return pa.list_(arrow_type(zeek_type.element))
    return _ATOMIC.get(zeek_type.tag, pa.string())


def _json_type(zeek_type: ZeekType) -> pa.DataType:
    """The type Arrow's JSON reader reads a column as (a time: its epoch seconds)."""
    if zeek_type.tag in (TypeTag.TABLE, TypeTag.VECTOR):
        return pa.list_(_json_type(zeek_type.element))
    if zeek_type.tag is TypeTag.TIME:
        return pa.float64()
    return arrow_type(zeek_type)


def _micros(seconds: pa.Array) -> pa.Array:
    """Epoch seconds as UTC microseconds, as the stream converts them
    (:func:`~broker_spark.zeek.arrow_columns.micros_of_seconds`: halves away from zero;
    a time outside what Spark's timestamps hold is null, as in the stream)."""
    values = seconds.fill_null(0.0).to_numpy(zero_copy_only=False)
    micros, fits = micros_of_seconds(values)
    present = fits & ~seconds.is_null().to_numpy(zero_copy_only=False)
    return numbers(micros, _TIMESTAMP, present)


def _typed(values: pa.Array, zeek_type: ZeekType) -> pa.Array:
    if zeek_type.tag is TypeTag.TIME:
        return _micros(values)
    if zeek_type.tag in (TypeTag.TABLE, TypeTag.VECTOR) and zeek_type.subtag is TypeTag.TIME:
        inner = _micros(values.values)
        return pa.ListArray.from_arrays(values.offsets, inner, mask=values.is_null())
    return values


def _ndjson(lines: pa.Array) -> pa.Buffer:
    """The lines as one newline-delimited buffer (no copy of each line in Python)."""
    joined = pc.binary_join_element_wise(lines, pa.scalar("\n"), "")
    if joined.type != pa.string():
        joined = joined.cast(pa.string())
    _validity, offsets, data = joined.buffers()
    ends = np.frombuffer(offsets, dtype=np.int32)[joined.offset : joined.offset + len(joined) + 1]
    return data[int(ends[0]) : int(ends[-1])]


def parse_lines(
    lines: pa.Array, schema: LogSchema, columns: str = "nested", records: int | None = None
) -> tuple[list[str], list[pa.Array]]:
    """The log's top-level column names and arrays for ``lines`` (Zeek JSON, no nulls).
    ``records``: how many records the lines hold, when a value holds several lines
    (runs of records: :mod:`~broker_spark.columnar.log_line_runs`); None: one each.

    Raises ``pyarrow.ArrowInvalid`` for lines Arrow's reader does not take as the
    schema says, and ``ValueError`` for a null line or a row count that does not
    match (neither is ever written half)."""
    if columns not in COLUMN_LAYOUTS:
        raise ValueError(f"columns must be nested or flat, not {columns!r}")
    if lines.null_count:
        raise ValueError("a null line")
    n = len(lines) if records is None else records
    types = {f.name: f.zeek_type for f in schema.fields}
    explicit = pa.schema([(f.name, _json_type(f.zeek_type)) for f in schema.fields])
    if len(lines):
        data = _ndjson(lines)
        table = pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(1 << 20, data.size + 1)),
            parse_options=pj.ParseOptions(
                explicit_schema=explicit, unexpected_field_behavior="ignore"
            ),
        )
        if table.num_rows != n:
            raise ValueError(f"{table.num_rows} rows parsed from {n} lines")
        parsed = {name: table.column(name).combine_chunks() for name in schema.names}
    else:
        parsed = {name: pa.array([], explicit.field(name).type) for name in schema.names}
    values = {name: _typed(parsed[name], types[name]) for name in schema.names}
    out_names: list[str] = []
    out: list[pa.Array] = []
    for node in nest_columns(schema.names, columns):
        out_names.append(node.name)
        out.append(_build(node, values))
    return out_names, out


def _build(node: ColumnNode, values: dict[str, pa.Array]) -> pa.Array:
    if node.leaf is not None:
        return values[node.leaf]
    children = node.children
    arrays = [_build(child, values) for child in children]
    return pa.StructArray.from_arrays(arrays, names=[child.name for child in children])
