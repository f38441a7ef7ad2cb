"""Record streams whose records all have one layout: columns by slicing, not by unpacking.

A partition's record stream (:mod:`broker_spark.data.msgpack_records`) is msgpack
``[topic, payload, sender, received_at_ns, offset]`` records back to back.
Unpacking it makes six Python objects per record, which costs more than
everything else the worker does with a row. But a stream of Zeek events from
one peer is usually records of one length: the same topic and sender, payloads
of one layout, and integers msgpack writes at one width (nanosecond times
always take 8 bytes; offsets keep their width for millions of records). Then
record ``i`` starts at ``i * stride`` and each field sits at the same place in
every record, so the stream *is* an Arrow ``fixed_size_binary(stride)`` array,
and a field across all rows is one ``binary_slice`` (in C): the topic and
sender columns are slices cast to strings, the times and offsets slices read
as big-endian integers, and the payloads stay where they are for
:func:`~broker_spark.columnar.shape_json.json_columns_at` to read.

This only ever takes streams it can prove are such records: the first
record's headers give the layout, the stream's length must be exactly
``count`` strides, and every header byte of every record must equal the
first record's (checked a run at a time in C); the texts must be UTF-8 (the
cast checks). Anything else (records of several lengths, integers msgpack
wrote as fixints or signed, a malformed stream) is left to the unpacking path,
which decodes or rejects it as it always did. Whatever this produces equals
what that path produces.
"""

from __future__ import annotations

import array
import sys
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from broker_spark.data.msgpack_records import (
    MAX_RECORD_SIZE,
    record_fields,
)

__all__ = ["StridedRecords", "field_bytes", "fixed_rows", "mismatched", "strided_records"]

_LITTLE = sys.byteorder == "little"
#: ``array`` type codes of unsigned integers by width (those whose itemsize matches here).
_ARRAY_CODES = {
    size: next(c for c in "BHILQ" if array.array(c).itemsize == size) for size in (1, 2, 4, 8)
}
_ARROW_UINTS = {1: pa.uint8(), 2: pa.uint16(), 4: pa.uint32(), 8: pa.uint64()}


@dataclass(frozen=True)
class _Layout:
    """Where the fields of every record are: ``(position, size)`` of each field's bytes."""

    stride: int
    topic: tuple[int, int]
    payload: tuple[int, int]
    sender: tuple[int, int]
    received: tuple[int, int]
    offset: tuple[int, int]

    def header_runs(self, first: bytes) -> list[tuple[int, bytes]]:
        """The bytes between the fields (array, str, bin and int headers): equal in all records."""
        runs = []
        at = 0
        for pos, size in (self.topic, self.payload, self.sender, self.received, self.offset):
            runs.append((at, first[at:pos]))
            at = pos + size
        return runs


def _layout(packed: bytes, count: int) -> _Layout | None:
    """The layout of the first record, if the stream could be ``count`` records like it."""
    total = len(packed)
    if count < 1 or total % count:
        return None
    stride = total // count
    # an integer packed in its tag (a fixint) is left to the unpacking path (see above)
    fields = record_fields(packed[:stride], fixints=False)
    if fields is None or sum(fields[-1]) != stride:
        return None
    if any(size > MAX_RECORD_SIZE for _, size in fields[:3]):
        return None
    return _Layout(stride, *fields)


#: Runs up to this long are compared a byte column at a time (an extended slice of the
#: stream, ~1.5 ns a row), longer ones as one ``binary_slice`` (~6 to 40 ns a row).
_BYTEWISE = 4


def fixed_rows(buf: bytes, stride: int, count: int) -> pa.FixedSizeBinaryArray:
    """``count`` rows of ``stride`` bytes back to back in ``buf`` as an Arrow array (no copy)."""
    return pa.Array.from_buffers(pa.binary(stride), count, [None, pa.py_buffer(buf)])


def mismatched(
    buf: bytes, stride: int, count: int, runs: list[tuple[int, bytes]]
) -> pa.BooleanArray | None:
    """None when every row of ``buf`` (``count`` rows of ``stride`` bytes) holds ``data`` at
    ``pos`` for each ``(pos, data)`` of ``runs``; else a mask of the rows that do not."""
    repeated: dict[bytes, bytes] = {}
    differ = []
    for pos, data in runs:
        if len(data) <= _BYTEWISE:
            for k in range(len(data)):
                byte = data[k : k + 1]
                want = repeated.get(byte)
                if want is None:
                    want = repeated[byte] = byte * count
                if buf[pos + k :: stride] != want:
                    differ.append((pos, data))
                    break
        elif buf[pos : pos + len(data)] != data or not field_bytes(
            pc.binary_slice(fixed_rows(buf, stride, count), pos, pos + len(data)), len(data)
        ).equals(pa.py_buffer(data * count)):
            differ.append((pos, data))
    if not differ:
        return None
    rows = fixed_rows(buf, stride, count)
    bad = None
    for pos, data in differ:
        got = pc.binary_slice(rows, pos, pos + len(data))
        wrong = pc.invert(pc.equal(got, pa.scalar(data, pa.binary(len(data)))))
        bad = wrong if bad is None else pc.or_(bad, wrong)
    return bad


def field_bytes(column: pa.Array, width: int) -> pa.Buffer:
    """The bytes of a ``fixed_size_binary(width)`` column without nulls, back to back."""
    return column.buffers()[1].slice(column.offset * width, len(column) * width)


class StridedRecords:
    """A record stream of ``count`` records of one layout, read column by column."""

    def __init__(self, packed: bytes, count: int, layout: _Layout) -> None:
        self.packed = packed
        self.count = count
        self.layout = layout
        self.records = fixed_rows(packed, layout.stride, count)

    def field(self, pos: int, size: int) -> pa.Array:
        """Bytes ``[pos, pos + size)`` of every record as ``fixed_size_binary(size)``."""
        return pc.binary_slice(self.records, pos, pos + size)

    def texts(self, where: tuple[int, int]) -> pa.Array | None:
        """A str field as a string array; None if one is not UTF-8."""
        pos, size = where
        if size == 0:
            return pa.array([""] * self.count, pa.string())
        try:
            return self.field(pos, size).cast(pa.string())
        except (pa.ArrowInvalid, ValueError):
            return None

    def uints(self, where: tuple[int, int]) -> pa.Array:
        """A big-endian unsigned field as an unsigned Arrow array of its width."""
        pos, size = where
        words = array.array(_ARRAY_CODES[size])
        words.frombytes(field_bytes(self.field(pos, size), size))
        if _LITTLE and size > 1:
            words.byteswap()
        return pa.Array.from_buffers(_ARROW_UINTS[size], self.count, [None, pa.py_buffer(words)])

    def int64s(self, where: tuple[int, int]) -> pa.Array | None:
        """An unsigned field as int64; None if a value does not fit (the unpacking path says what)."""
        values = self.uints(where)
        if where[1] == 8 and pc.max(values).as_py() >= 1 << 63:
            return None
        return values.cast(pa.int64())

    def payloads(self) -> list[bytes]:
        """Each record's payload as bytes (for what cannot read them in place)."""
        pos, size = self.layout.payload
        if not size:
            return [b""] * self.count
        data = field_bytes(self.field(pos, size), size).to_pybytes()
        return [data[i : i + size] for i in range(0, len(data), size)]


def strided_records(packed: bytes, count: int | None) -> StridedRecords | None:
    """The stream as :class:`StridedRecords` when it provably is ``count`` records of one
    layout; None otherwise (the unpacking path then decodes or rejects it)."""
    if not count or not packed:
        return None
    layout = _layout(packed, count)
    if layout is None:
        return None
    if mismatched(packed, layout.stride, count, layout.header_runs(packed)) is not None:
        return None
    return StridedRecords(packed, count, layout)
