"""Spool records to Arrow batches: the rows the stream reader yields, and their schemas.

Spark checks the first Arrow batch a reader yields against its own Arrow form
of the declared schema with ``pa.Schema.equals``, nullability included; a
scratch session with pyspark 4.3 showed every column of a DDL schema nullable,
``TIMESTAMP`` as ``timestamp("us", tz="UTC")`` and ``LONG`` as ``int64``. So
the Arrow schemas below are exactly that, and batches are built against the
schema Spark hands the reader, never one we infer.

Columns, by name (matched case-insensitively, as Spark does):

* ``topic``, ``sender`` (STRING), ``received_at`` (TIMESTAMP), ``offset`` (LONG):
  the record's metadata; ``relay`` (STRING) the id of the relay it was read from
  (null when it was not), which with ``offset`` says where a record is;
* ``data`` (STRING): the value as Zeek JSON text;
* ``event``, ``args`` (STRING): a Zeek event's name and its arguments as a JSON
  array of Zeek JSON values; null when the value is not an event;
* any other column of a user schema is a *value column*: the value's vector
  (with ``format=zeek``, an event's arguments; otherwise the value itself) is
  mapped onto the value columns by position through the Arrow mapping. A
  value that is not a vector of exactly that many elements, or an element that
  does not fit its column, becomes null and is counted in ``misfits``;
  ``mode=FAILFAST`` raises instead, naming the offset and column.

A payload that is not valid Broker binary gives nulls in every value-derived
column and counts in ``undecodable`` (FAILFAST: raises).
"""

from __future__ import annotations

import array
import bisect
import contextlib
import gc
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import msgpack
import pyarrow as pa

from broker_spark import zeek
from broker_spark.columnar.binary_json import binary_to_json, event_to_json
from broker_spark.columnar.shape_json import assemble, json_columns, json_columns_at
from broker_spark.columnar.strided import StridedRecords, strided_records
from broker_spark.data.arrow import to_arrow
from broker_spark.data.binary import decode
from broker_spark.data.json_codec import dumps_value
from broker_spark.data.msgpack_records import MAX_RECORD_SIZE
from broker_spark.errors import EC, BrokerError, DecodeError, EncodeError

__all__ = [
    "DEFAULT_SCHEMA",
    "ZEEK_SCHEMA",
    "RecordConverter",
    "RecordConversionError",
    "SchemaMappingError",
    "default_schema",
    "records_to_arrow",
]

_TIMESTAMP = pa.timestamp("us", tz="UTC")
DEFAULT_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("data", pa.string()),
        pa.field("sender", pa.string()),
        pa.field("received_at", _TIMESTAMP),
        pa.field("offset", pa.int64()),
    ]
)
ZEEK_SCHEMA = DEFAULT_SCHEMA.append(pa.field("event", pa.string())).append(
    pa.field("args", pa.string())
)

_UNDECODABLE = object()
_TEXT_COLUMNS = ("topic", "sender", "data", "event", "args", "relay")
_METADATA = frozenset({*_TEXT_COLUMNS, "received_at", "offset"})


class SchemaMappingError(BrokerError, ValueError):
    """A user schema the records cannot be mapped onto (reported when the query starts)."""

    code = EC.TypeClash


class RecordConversionError(BrokerError, ValueError):
    """A record that does not fit the schema, in ``FAILFAST`` mode."""

    code = EC.ConversionFailed


RELAY_FIELD = pa.field("relay", pa.string())


def default_schema(fmt: str = "default", relay: bool = False) -> pa.Schema:
    """The Arrow schema of the default output (``fmt="zeek"`` adds ``event``, ``args``;
    ``relay`` the id of the relay a row comes from)."""
    schema = ZEEK_SCHEMA if fmt == "zeek" else DEFAULT_SCHEMA
    return schema.append(RELAY_FIELD) if relay else schema


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _check_metadata(name: str, t: pa.DataType) -> None:
    if name in _TEXT_COLUMNS:
        ok, want = _is_text(t), "STRING"
    elif name == "received_at":
        ok, want = pa.types.is_timestamp(t) and t.tz in (None, "UTC", "+00:00"), "TIMESTAMP"
    else:
        ok, want = t == pa.int64(), "LONG"
    if not ok:
        raise SchemaMappingError(f"column {name} must be {want}, not {t}")


class RecordConverter:
    """Turns spool records into Arrow batches of one schema; counts what did not fit.

    Built once per schema (the column roles are worked out here, so a
    mismatched user schema fails before any data flows) and reused per batch.
    """

    def __init__(
        self, schema: pa.Schema | None = None, fmt: str = "default", mode: str = "PERMISSIVE"
    ) -> None:
        if fmt not in ("default", "zeek"):
            raise SchemaMappingError(f"format must be default or zeek, not {fmt!r}")
        if mode not in ("PERMISSIVE", "FAILFAST"):
            raise SchemaMappingError(f"mode must be PERMISSIVE or FAILFAST, not {mode!r}")
        self.schema = schema if schema is not None else default_schema(fmt)
        self.fmt = fmt
        self.strict = mode == "FAILFAST"
        self.misfits = 0
        self.undecodable = 0
        #: The id of the relay the records come from (a relay reader sets it per partition).
        self.relay: str | None = None
        self._roles: list[str | int] = []  # a metadata name, or a value column's position
        self._value_fields: list[pa.Field] = []
        for f in self.schema:
            role = f.name.lower()
            if role in _METADATA:
                _check_metadata(role, f.type)
                self._roles.append(role)
            else:
                try:
                    to_arrow([], f.type, name=f.name)
                except EncodeError as exc:
                    raise SchemaMappingError(f"column {f.name}: {exc}") from None
                self._roles.append(len(self._value_fields))
                self._value_fields.append(f)
        names = [r for r in self._roles if isinstance(r, str)]
        if len(set(names)) != len(names):
            raise SchemaMappingError(f"schema {self.schema} names a metadata column twice")
        self._wants_event = "event" in names or "args" in names
        self._wants_data = "data" in names

    # --- public ----------------------------------------------------------------------

    def convert(self, records: Iterable[Sequence[Any]]) -> pa.RecordBatch:
        """A batch from ``(topic, payload, sender, received_at_ns, offset)`` records."""
        rows = records if isinstance(records, (list, tuple)) else list(records)
        if not rows:
            return _empty(self.schema)
        try:
            columns = list(zip(*rows, strict=True))
        except (TypeError, ValueError):
            raise RecordConversionError("records must all be 5-tuples") from None
        if len(columns) != 5:
            raise RecordConversionError("records must all be 5-tuples")
        return self._convert_columns(*columns)

    def convert_packed(self, packed: bytes, count: int | None = None) -> pa.RecordBatch:
        """A batch from a record stream (``Spool.read_packed``); ``count`` records if known
        (a stream holding another number of records is malformed).

        A stream of ``count`` records of one layout (the usual partition) is read
        in place, column by column (:mod:`~broker_spark.columnar.strided`); anything
        else is unpacked into Python objects first, several times slower."""
        if not packed:
            if count:
                raise DecodeError(f"malformed record stream: empty, expected {count} records")
            return _empty(self.schema)
        with _no_gc():
            strided = strided_records(packed, count)
            if strided is not None:
                batch = self._convert_strided(strided)
                if batch is not None:
                    return batch
            columns = unpack_columns(packed, count)
        return self._convert_columns(*columns)

    # --- work ------------------------------------------------------------------------

    def _convert_strided(self, strided: StridedRecords) -> pa.RecordBatch | None:
        """The batch of a stream of records of one layout, read in place (None: the stream
        holds something only unpacking can tell, such as a text that is not UTF-8)."""
        layout = strided.layout
        topics = strided.texts(layout.topic)
        senders = strided.texts(layout.sender)
        received = strided.int64s(layout.received)
        offsets = strided.int64s(layout.offset)
        if topics is None or senders is None or received is None or offsets is None:
            return None
        derived: dict[str, Any] | None = None
        small = layout.payload[1] * strided.count <= _CHUNK_BYTES  # texts stay below 2 GiB
        if small and not self._value_fields and (self._wants_event or self._wants_data):
            arrays = json_columns_at(
                strided.packed,
                layout.stride,
                strided.count,
                *layout.payload,
                self._wants_event,
            )
            if arrays is not None:
                derived = dict(zip(("data", "event", "args"), arrays, strict=False))
        wanted = self._value_fields or self._wants_event or self._wants_data
        payloads: Sequence[bytes] = strided.payloads() if derived is None and wanted else ()
        return self._convert_columns(topics, payloads, senders, received, offsets, derived)

    def _convert_columns(
        self,
        topics: Sequence[str] | pa.Array,
        payloads: Sequence[bytes],
        senders: Sequence[str] | pa.Array,
        received: Sequence[int] | pa.Array,
        offsets: Sequence[int] | pa.Array,
        derived: dict[str, Any] | None = None,
    ) -> pa.RecordBatch:
        """The batch from the records' columns (Python sequences or Arrow arrays); ``derived``
        holds the value-derived columns when they were made already."""
        if derived is None:
            offset_list = offsets.to_pylist() if isinstance(offsets, pa.Array) else offsets
            derived = self._derive(payloads, offset_list)
            value_arrays = self._value_arrays(derived.get("vectors"), offset_list)
        else:
            value_arrays = []
        arrays = []
        for f, role in zip(self.schema, self._roles, strict=True):
            if isinstance(role, int):
                arrays.append(value_arrays[role])
            elif role == "topic":
                arrays.append(_as_array(topics, f.type))
            elif role == "sender":
                arrays.append(_as_array(senders, f.type))
            elif role == "offset":
                arrays.append(_as_array(offsets, pa.int64()))
            elif role == "relay":
                arrays.append(pa.repeat(pa.scalar(self.relay, f.type), len(offsets)))
            elif role == "received_at":
                ns = _as_array(received, pa.timestamp("ns", tz=f.type.tz))
                arrays.append(ns.cast(f.type, safe=False))
            elif isinstance(derived[role], pa.Array):
                arr = derived[role]
                arrays.append(arr if arr.type == f.type else arr.cast(f.type))
            elif pa.types.is_string(f.type):
                arrays.append(_ascii_strings(derived[role]))
            else:
                arrays.append(pa.array(derived[role], f.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _failed(self, offset: int, exc: Exception) -> None:
        if self.strict:
            raise RecordConversionError(f"record at offset {offset}: {exc}") from None
        self.undecodable += 1

    def _derive(
        self, payloads: Sequence[bytes], offsets: Sequence[int]
    ) -> dict[str, list[Any] | pa.Array]:
        """The value-derived columns: data, event, args, and the vectors for value columns."""
        if self._value_fields:
            return dict(self._decode_all(payloads, offsets))
        if self._wants_event or self._wants_data:
            return self._json_columns(payloads, offsets)
        return {}

    def _json_columns(self, payloads: Sequence[bytes], offsets: Sequence[int]) -> dict[str, Any]:
        """``data`` (and ``event``, ``args``): payloads of a common shape in bulk
        (:mod:`~broker_spark.columnar.shape_json`), the others one at a time."""
        want_event = self._wants_event
        names = ("data", "event", "args") if want_event else ("data",)
        chunks: list[list[pa.Array]] = [[] for _ in names]
        for lo, hi in _chunk_bounds(payloads):
            part = payloads[lo:hi] if lo or hi < len(payloads) else payloads
            bulk = json_columns(part, want_event)
            rest: list[list[str | None]] = [[] for _ in names]
            for i in bulk.rest:
                try:
                    texts = event_to_json(part[i]) if want_event else (binary_to_json(part[i]),)
                except (DecodeError, EncodeError) as exc:
                    self._failed(offsets[lo + i], exc)
                    texts = (None,) * len(names)
                for column, text in zip(rest, texts, strict=True):
                    column.append(text)
            arrays = assemble(len(part), bulk, tuple(rest), len(names))
            for chunk, arr in zip(chunks, arrays, strict=True):
                chunk.append(arr)
        return {
            name: chunk[0] if len(chunk) == 1 else pa.concat_arrays(chunk)
            for name, chunk in zip(names, chunks, strict=True)
        }

    def _decode_all(self, payloads: Sequence[bytes], offsets: Sequence[int]) -> dict[str, list]:
        """Typed schemas need the values themselves: decode each payload once."""
        data: list[str | None] = []
        events: list[str | None] = []
        args: list[str | None] = []
        vectors: list[Any] = []
        zeek_format = self.fmt == "zeek"
        for payload, offset in zip(payloads, offsets, strict=True):
            try:
                value = decode(payload)
                text = dumps_value(value) if self._wants_data else None
            except (DecodeError, EncodeError) as exc:
                self._failed(offset, exc)
                data.append(None)
                events.append(None)
                args.append(None)
                vectors.append(_UNDECODABLE)
                continue
            event = zeek.event_name_and_args(value) if zeek_format or self._wants_event else None
            data.append(text)
            if event is None:
                events.append(None)
                args.append(None)
            else:
                events.append(event[0])
                args.append(
                    "[" + ",".join(map(dumps_value, event[1])) + "]" if self._wants_event else None
                )
            vectors.append(event[1] if zeek_format and event is not None else value)
        return {"data": data, "event": events, "args": args, "vectors": vectors}

    def _value_arrays(self, vectors: list[Any] | None, offsets: Sequence[int]) -> list[pa.Array]:
        if not self._value_fields:
            return []
        assert vectors is not None
        width = len(self._value_fields)
        columns: list[list[Any]] = [[] for _ in range(width)]
        empty = (None,) * width
        for vector, offset in zip(vectors, offsets, strict=True):
            if vector is _UNDECODABLE:  # already counted
                row: Sequence[Any] = empty
            elif isinstance(vector, (tuple, list)) and len(vector) == width:
                row = vector
            else:
                what = (
                    f"a vector of {len(vector)}"
                    if isinstance(vector, (tuple, list))
                    else type(vector).__name__
                )
                if self.strict:
                    raise RecordConversionError(
                        f"record at offset {offset}: {what} does not map onto {width} columns"
                    )
                self.misfits += 1
                row = empty
            for column, item in zip(columns, row, strict=True):
                column.append(item)
        arrays = []
        for f, values in zip(self._value_fields, columns, strict=True):
            try:
                array, misfits = to_arrow(values, f.type, strict=self.strict, name=f.name)
            except EncodeError:
                raise self._locate_failure(f, values, offsets) from None
            self.misfits += misfits
            arrays.append(array)
        return arrays

    def _locate_failure(
        self, f: pa.Field, values: list[Any], offsets: Sequence[int]
    ) -> RecordConversionError:
        """FAILFAST: the first record whose element does not fit, named by its offset."""
        for value, offset in zip(values, offsets, strict=True):
            try:
                to_arrow([value], f.type, strict=True, name=f.name)
            except EncodeError as exc:
                return RecordConversionError(f"record at offset {offset}: {exc}")
        return RecordConversionError(f"column {f.name}: values do not fit {f.type}")


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """Without the cyclic collector: unpacking allocates a tuple per record and field list,
    which makes it run over and over for nothing (records hold no cycles)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def unpack_columns(packed: bytes, count: int | None) -> list[tuple[Any, ...]]:
    """The five columns of a record stream, checked to be ``str, bytes, str, int, int``.

    With ``count`` known, the stream is read as one msgpack array of that many
    records: one C call, and a stream that holds fewer records or more bytes
    fails there. Without it, record by record, as the stream says nothing of its end.
    """
    limit = min(len(packed), MAX_RECORD_SIZE)
    bounds: dict[str, Any] = {
        "raw": False,
        "use_list": False,
        "max_str_len": limit,
        "max_bin_len": limit,
        "max_map_len": 0,
        "max_ext_len": 0,
    }
    try:
        if count is not None:
            if not 0 < count <= len(packed):
                raise DecodeError(
                    f"malformed record stream: {count} records in {len(packed)} bytes"
                )
            rows = msgpack.unpackb(
                b"\xdd" + count.to_bytes(4, "big") + packed,
                max_array_len=max(count, 5),
                **bounds,
            )
        else:
            unpacker = msgpack.Unpacker(
                None, max_buffer_size=len(packed), max_array_len=5, **bounds
            )
            unpacker.feed(packed)
            rows = []
            try:
                while unpacker.tell() < len(packed):
                    rows.append(unpacker.unpack())
            except msgpack.OutOfData:
                raise DecodeError(f"truncated record at byte {unpacker.tell()}") from None
        columns = list(zip(*rows, strict=True))
    except DecodeError:
        raise
    except Exception as exc:
        raise DecodeError(f"malformed record stream: {type(exc).__name__}: {exc}") from None
    if len(columns) != 5 or not _typed_columns(columns):
        raise DecodeError("malformed record stream: records are not [str, bytes, str, int, int]")
    return columns


#: Payload bytes per bulk conversion: the JSON of a chunk must stay far below 2 GiB
#: (Arrow's string offsets are 32-bit; Zeek JSON is at most ~12 times the payload).
_CHUNK_BYTES = 64 * 1024 * 1024


def _chunk_bounds(payloads: Sequence[bytes]) -> list[tuple[int, int]]:
    """``[lo, hi)`` ranges of rows holding at most :data:`_CHUNK_BYTES` of payload each."""
    total = sum(map(len, payloads))
    if total <= _CHUNK_BYTES:
        return [(0, len(payloads))]
    bounds = []
    lo = 0
    ends = list(itertools.accumulate(map(len, payloads)))
    while lo < len(payloads):
        base = ends[lo - 1] if lo else 0
        hi = max(lo + 1, bisect.bisect_right(ends, base + _CHUNK_BYTES, lo))
        bounds.append((lo, hi))
        lo = hi
    return bounds


def _typed_columns(columns: list[tuple[Any, ...]]) -> bool:
    """Whether the transposed records have the field types of a record (checked in C)."""
    return all(
        set(map(type, column)) == {kind}
        for column, kind in zip(columns, (str, bytes, str, int, int), strict=True)
    )


def _ascii_strings(values: list[str | None]) -> pa.Array:
    """A string array from texts known to be ASCII (Zeek JSON output always is).

    ``pa.array`` on a list of long strings copies them one at a time; joining
    them once and handing Arrow the offsets is several times faster.
    """
    nulls = values.count(None)
    texts: list[str] = [v if v is not None else "" for v in values] if nulls else values  # type: ignore[misc]
    data = "".join(texts)
    if len(data) >= 1 << 31 or not data.isascii():
        return pa.array(values, pa.string())
    offsets = array.array("i", [0])
    offsets.extend(itertools.accumulate(map(len, texts)))
    validity = None
    if nulls:
        validity = pa.array([v is not None for v in values], pa.bool_()).buffers()[1]
    return pa.StringArray.from_buffers(
        len(values), pa.py_buffer(offsets), pa.py_buffer(data.encode("ascii")), validity, nulls
    )


def _as_array(values: Sequence[Any] | pa.Array, kind: pa.DataType) -> pa.Array:
    """``values`` as an Arrow array of ``kind`` (cast when they are one already)."""
    if isinstance(values, pa.Array):
        return values if values.type == kind else values.cast(kind)
    return pa.array(values, kind)


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


def records_to_arrow(
    records: Iterable[Sequence[Any]],
    schema: pa.Schema | None = None,
    fmt: str = "default",
    mode: str = "PERMISSIVE",
) -> pa.RecordBatch:
    """One-off conversion (a :class:`RecordConverter` keeps the misfit counts across batches)."""
    return RecordConverter(schema, fmt, mode).convert(records)
