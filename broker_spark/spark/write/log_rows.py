"""Rows to Zeek log messages: what ``df.write...option("log", "Spark::LOG")`` publishes.

The DataFrame's columns become the log's columns (a struct's members with
dotted names, as Zeek flattens records: ``id`` with ``orig_h`` becomes
``id.orig_h``), typed from Spark's types: BOOLEAN bool; BYTE, SHORT, INT,
LONG int; FLOAT, DOUBLE, DECIMAL double; STRING string; TIMESTAMP and DATE
time; ARRAY vector of its element. Spark has no unsigned, address, port,
subnet, interval or enum type, so ``zeekTypes`` (``n:count,host:addr``)
declares those: count from an integer, addr and subnet from text, port from
an integer or ``80/tcp``, interval from seconds, enum from text, time from
seconds or a timestamp, ``set[...]`` from an array. Every column is
``&optional`` (Spark columns are nullable): a null is an unset field.

Each task publishes the log's LogCreate first (a Zeek writes records only
for a log it has a LogCreate for; it ignores one it already has), then the
rows as Batches of up to :data:`LOG_BATCH_SIZE` LogWrites, as Zeek batches
its own, each record in Zeek's binary serialization. A row whose value its
column's type cannot hold is a bad row.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from broker_spark.columnar.record_batches import SchemaMappingError
from broker_spark.data.binary import encode
from broker_spark.data.types import Port
from broker_spark.data.varbyte import encode_varbyte
from broker_spark.errors import EncodeError
from broker_spark.reader.options import BrokerOptionError, WriterOptions
from broker_spark.spark.write.row_messages import BadRow, EncodedBatch
from broker_spark.zeek.log_scan import BATCH_HEAD, LOG_WRITE_HEAD
from broker_spark.zeek.log_schema import LogField, LogSchema
from broker_spark.zeek.logs import DEFAULT_WRITER, LogCreate
from broker_spark.zeek.record import encode_record
from broker_spark.zeek.types import TypeTag, ZeekType

__all__ = ["LOG_BATCH_SIZE", "LogRowEncoder", "log_schema_of"]

#: Records per Batch message, as Zeek's ``Broker::log_batch_size``.
LOG_BATCH_SIZE = 400


def _zeek_type_of(t: pa.DataType, name: str) -> ZeekType:
    if pa.types.is_boolean(t):
        return ZeekType(TypeTag.BOOL)
    if pa.types.is_integer(t):
        return ZeekType(TypeTag.INT)
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return ZeekType(TypeTag.DOUBLE)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return ZeekType(TypeTag.STRING)
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return ZeekType(TypeTag.TIME)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = _zeek_type_of(t.value_type, name)
        if inner.tag in (TypeTag.TABLE, TypeTag.VECTOR):
            raise SchemaMappingError(f"column {name}: Zeek logs hold no nested arrays ({t})")
        return ZeekType(TypeTag.VECTOR, inner.tag)
    raise SchemaMappingError(
        f"column {name}: no Zeek log type for {t}; declare one with option zeekTypes"
    )


def _flatten(
    fields: Sequence[pa.Field], prefix: str = ""
) -> list[tuple[str, pa.DataType, tuple[int, ...]]]:
    """Leaf columns as (dotted name, type, path of field indices)."""
    out = []
    for i, f in enumerate(fields):
        if pa.types.is_struct(f.type):
            children = [f.type.field(k) for k in range(f.type.num_fields)]
            for name, t, path in _flatten(children, f"{prefix}{f.name}."):
                out.append((name, t, (i, *path)))
        else:
            out.append((prefix + f.name, f.type, (i,)))
    return out


def log_schema_of(schema: pa.Schema, options: WriterOptions) -> LogSchema:
    """The log's columns for rows of ``schema``: their Spark types, or ``zeekTypes``."""
    declared = dict(options.zeek_types)
    leaves = _flatten(list(schema))
    names = {name for name, _, _ in leaves}
    unknown = sorted(set(declared) - names)
    if unknown:
        raise BrokerOptionError(
            "zeekTypes", unknown[0], f"names no column (the columns are {', '.join(sorted(names))})"
        )
    fields = []
    for name, t, _ in leaves:
        zeek_type = ZeekType.parse(declared[name]) if name in declared else _zeek_type_of(t, name)
        fields.append(LogField(name, zeek_type, optional=True))
    assert options.log is not None and options.log_path is not None
    return LogSchema(options.log, options.log_path, tuple(fields))


class LogRowEncoder:
    """Encodes rows into a LogCreate (first) and Batches of LogWrites."""

    def __init__(self, schema: pa.Schema, options: WriterOptions) -> None:
        self.schema = schema
        self.log = log_schema_of(schema, options)
        self.topic = options.topic or ""
        self._paths = [path for _, _, path in _flatten(list(schema))]
        self._convert = [_converter(f.zeek_type) for f in self.log.fields]
        self._create = encode(LogCreate.of(self.log))
        self._created = False
        stream = self.log.stream.encode()
        writer = DEFAULT_WRITER.encode()
        path = self.log.path.encode()
        self._head = (
            LOG_WRITE_HEAD
            + encode_varbyte(len(stream))
            + stream
            + b"\x0b"
            + encode_varbyte(len(writer))
            + writer
            + b"\x05"
            + encode_varbyte(len(path))
            + path
            + b"\x05"
        )

    def encode(self, batch: pa.RecordBatch, first_row: int = 0) -> EncodedBatch:
        columns = [self._column(batch, path) for path in self._paths]
        messages: list[tuple[str, bytes]] = []
        bad: list[BadRow] = []
        if not self._created:
            messages.append((self.topic, self._create))
            self._created = True
        writes: list[bytes] = []
        fields = self.log.fields
        for row in range(batch.num_rows):
            try:
                values = [
                    None if col[row] is None else convert(col[row])
                    for col, convert in zip(columns, self._convert, strict=True)
                ]
                serial = encode_record(values, fields)
            except (EncodeError, ValueError, TypeError) as exc:
                bad.append(BadRow(first_row + row, self.topic, None, str(exc)))
                continue
            writes.append(self._head + encode_varbyte(len(serial)) + serial)
            if len(writes) == LOG_BATCH_SIZE:
                messages.append((self.topic, _batch(writes)))
                writes = []
        if writes:
            messages.append((self.topic, _batch(writes)))
        return EncodedBatch(messages, bad)

    @staticmethod
    def _column(batch: pa.RecordBatch, path: tuple[int, ...]) -> list[Any]:
        arr: Any = batch.column(path[0])
        for index in path[1:]:
            arr = arr.field(index)  # a null struct leaves its members null too
        if len(path) > 1:
            parents = batch.column(path[0])
            if parents.null_count:
                arr = pc.if_else(parents.is_valid(), arr, pa.nulls(len(arr), arr.type))
        return arr.to_pylist()


def _batch(writes: list[bytes]) -> bytes:
    return BATCH_HEAD + encode_varbyte(len(writes)) + b"".join(writes)


def _converter(zeek_type: ZeekType) -> Any:
    """From what ``to_pylist`` gives to what the record codec takes for this type."""
    tag = zeek_type.tag
    if tag in (TypeTag.TABLE, TypeTag.VECTOR):
        inner = _converter(zeek_type.element)
        if tag is TypeTag.TABLE:
            return lambda v: {inner(x) for x in v if x is not None}
        return lambda v: [None if x is None else inner(x) for x in v]
    if tag is TypeTag.TIME:
        return _seconds_since_epoch
    if tag is TypeTag.INTERVAL:
        return lambda v: v.total_seconds() if isinstance(v, _dt.timedelta) else float(v)
    if tag is TypeTag.PORT:
        return _port
    if tag is TypeTag.DOUBLE:
        return float
    if tag in (TypeTag.INT, TypeTag.COUNT):
        return _integer
    return lambda v: v


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
        raise EncodeError(f"not an integer: {value!r:.60}")
    return value


def _seconds_since_epoch(value: Any) -> float:
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        delta = value - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
        return (delta // _dt.timedelta(microseconds=1)) / 1e6
    if isinstance(value, _dt.date):
        return (value - _dt.date(1970, 1, 1)).days * 86400.0
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise EncodeError(f"not a time: {value!r:.60}")


def _port(value: Any) -> Port:
    if isinstance(value, Port):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return Port(value, Port.Unknown)
    if isinstance(value, str):
        return Port.parse(value.strip())
    raise EncodeError(f"not a port: {value!r:.60}")
