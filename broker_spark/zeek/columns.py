"""Many log records of one layout, decoded column by column with numpy.

A Spark partition or a busy logger holds thousands of records of the same
log, and decoding them one at a time (:func:`~broker_spark.zeek.record.decode_values`)
costs Python work per value. Here the records stay where they are, in one
buffer, and each column is read for all records at once: a position per
record walks through the buffer, every field's header and payload is
gathered with one numpy indexing operation per column (per element index
for sets and vectors), and texts are cut out by their offsets. The cost per
record is a few machine operations per column; the Python work is per column.

What comes out is a :class:`DecodedBlock`: per column, what each record holds
(presence, payload positions, numbers), from which :mod:`~broker_spark.zeek.arrow_columns`
builds Arrow arrays and :mod:`~broker_spark.zeek.json_lines` Zeek's JSON lines.
A record that does not have the expected layout (another field count, a
value of another type, or malformed bytes) is not decoded here but flagged
in :attr:`DecodedBlock.ok`; callers decode those with the reference codec,
which also names what is wrong with a malformed one.

Where the optional C accelerator :data:`~broker_spark.zeek.compiled.record_walk`
was built, records whose column types are all known are walked in C instead, a
record at a time, into the same arrays; the tests run on both walks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from broker_spark.zeek import compiled
from broker_spark.zeek.types import CONTAINER_TAGS, TEXT_TAGS, TypeTag, ZeekType

__all__ = [
    "Block",
    "ColumnData",
    "DecodedBlock",
    "decode_block",
    "gather_bytes",
    "value_run_ends",
]

#: Zero bytes after the data, so that a gather never needs a bounds check of its own.
_PAD = 32

_FIXED = {
    TypeTag.BOOL: ">i8",
    TypeTag.INT: ">i8",
    TypeTag.COUNT: ">u8",
    TypeTag.DOUBLE: ">f8",
    TypeTag.TIME: ">f8",
    TypeTag.INTERVAL: ">f8",
}


@dataclass
class Block:
    """Records in one buffer: record ``i`` is ``data[starts[i]:ends[i]]``.

    A record is a LogWrite's ``serial_data`` (its field count, then the values), or
    with ``fields`` set, values only, that many (as records travel in Zeek's ZeroMQ
    log batches: :mod:`~broker_spark.zeek.log_batch`).
    """

    buf: np.ndarray  # uint8, with at least _PAD bytes after the last record (any values)
    starts: np.ndarray  # int64
    ends: np.ndarray  # int64
    fields: int | None = None

    @classmethod
    def from_spans(cls, data: bytes, starts: Sequence[int], ends: Sequence[int]) -> Block:
        buf = np.zeros(len(data) + _PAD, dtype=np.uint8)
        buf[: len(data)] = np.frombuffer(data, dtype=np.uint8)
        return cls(buf, np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64))

    @classmethod
    def from_records(cls, records: Sequence[bytes]) -> Block:
        lengths = np.fromiter(map(len, records), dtype=np.int64, count=len(records))
        ends = np.cumsum(lengths)
        return cls.from_spans(b"".join(records), ends - lengths, ends)

    def __len__(self) -> int:
        return len(self.starts)

    def record(self, i: int) -> bytes:
        """Record ``i`` as ``serial_data`` (with its field count, as the reference codec
        :func:`~broker_spark.zeek.record.decode_values` reads it)."""
        raw = self.buf[self.starts[i] : self.ends[i]].tobytes()
        return raw if self.fields is None else self.fields.to_bytes(4, "big") + raw


@dataclass
class ColumnData:
    """One column (or the elements of a set/vector column) for every record.

    ``present`` says which records hold a value. Then, by type: ``values``
    (bools, ints, counts, doubles, port numbers), ``proto`` (port protocols),
    ``starts``/``lengths`` (texts, and address bytes: 4 or 16 long), ``prefix``
    (subnet lengths); a set or vector has ``counts`` and ``elements``, a
    ColumnData of all its elements, record after record.
    """

    zeek_type: ZeekType
    present: np.ndarray
    values: np.ndarray | None = None
    proto: np.ndarray | None = None
    starts: np.ndarray | None = None
    lengths: np.ndarray | None = None
    prefix: np.ndarray | None = None
    counts: np.ndarray | None = None
    elements: ColumnData | None = None

    @property
    def tag(self) -> TypeTag:
        return self.zeek_type.tag

    def take(self, rows: np.ndarray) -> ColumnData:
        """The column of the records ``rows`` (indices) only; elements follow their records."""
        out = ColumnData(self.zeek_type, self.present[rows])
        for name in ("values", "proto", "starts", "lengths", "prefix", "counts"):
            arr = getattr(self, name)
            if arr is not None:
                setattr(out, name, arr[rows])
        if self.elements is not None:
            assert self.counts is not None
            first = np.cumsum(self.counts) - self.counts
            mine = self.counts[rows]
            idx = np.repeat(first[rows] - (np.cumsum(mine) - mine), mine) + np.arange(
                int(mine.sum()), dtype=np.int64
            )
            out.elements = self.elements.take(idx)
        return out


@dataclass
class DecodedBlock:
    """The columns of a block's records; ``ok[i]`` is False for a record of another layout."""

    block: Block
    columns: list[ColumnData]
    ok: np.ndarray
    types: tuple[ZeekType, ...] = field(default=())

    @property
    def all_ok(self) -> bool:
        return bool(self.ok.all())


def _views(buf: np.ndarray) -> dict[str, np.ndarray]:
    """Overlapping views of ``buf``: element ``i`` of view ``">u8"`` is the big-endian number
    in bytes ``i`` to ``i + 8``. Indexing one with positions reads a number per position in
    one gather, several times faster than gathering the bytes and combining them."""
    out = {}
    for dtype in (">i8", ">u8", ">f8", ">i4", ">u4"):
        width = int(dtype[2])
        out[dtype] = np.ndarray(
            shape=(max(0, len(buf) - width + 1),), dtype=dtype, buffer=buf, strides=(1,)
        )
    return out


def _read_i32(views: dict[str, np.ndarray], pos: np.ndarray) -> np.ndarray:
    return views[">i4"][pos].astype(np.int32)


def gather_bytes(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenation of ``buf[starts[i]:starts[i]+lengths[i]]`` for all i (one gather)."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.uint8)
    before = np.cumsum(lengths) - lengths
    idx = np.repeat(starts - before, lengths) + np.arange(total, dtype=np.int64)
    return buf[idx]


class _Walk:
    """Positions of the records being decoded, and which of them still fit the layout.

    Reads are not bounds-checked one by one: a position never passes ``cap``
    (one byte beyond the data, so no record can end there), the buffer's
    padding covers the widest read from there, and a record is good only if
    its position ends exactly at its end. Positions only grow, so a value
    that ran past its record's end leaves the position beyond it.
    """

    def __init__(self, block: Block) -> None:
        header = 4 if block.fields is None else 0  # the field count before the values
        self.buf = block.buf
        self.views = _views(block.buf)
        self.limit = block.ends
        self.cap = len(block.buf) - _PAD + 1
        self.pos = block.starts + header
        self.ok = block.ends - block.starts >= header


def decode_block(block: Block, types: Sequence[ZeekType]) -> DecodedBlock:
    """Decode every record of ``block`` that has ``len(types)`` fields of these types.

    A column of unknown type (tag VOID) or a container of unknown element type
    takes the type of the first value found in it.
    """
    if compiled.record_walk is not None and all(_known(t) for t in types):
        return _decode_compiled(block, types)
    walk = _Walk(block)
    ok = walk.ok
    if block.fields is not None:
        ok &= block.fields == len(types)
    elif len(block):
        count = _read_i32(walk.views, np.where(ok, block.starts, 0))
        ok &= count == len(types)
    columns = _walk_columns(walk, ok, types)
    ok &= walk.pos == walk.limit
    if not ok.all():
        for column in columns:
            _forget(column, ok)
    return DecodedBlock(block, columns, ok, tuple(c.zeek_type for c in columns))


def _known(zeek_type: ZeekType) -> bool:
    """Whether the compiled walk takes the type (the numpy walk infers unknown ones)."""
    if zeek_type.tag is TypeTag.VOID:
        return False
    return zeek_type.tag not in CONTAINER_TAGS or zeek_type.subtag is not TypeTag.VOID


#: The dtype of the compiled walk's values (native order; the numpy walk's are big-endian).
_VALUES = {
    TypeTag.BOOL: np.int64,
    TypeTag.INT: np.int64,
    TypeTag.COUNT: np.uint64,
    TypeTag.DOUBLE: np.float64,
    TypeTag.TIME: np.float64,
    TypeTag.INTERVAL: np.float64,
    TypeTag.PORT: np.uint64,
}
_ARRAYS = ("present", "values", "proto", "starts", "lengths", "prefix", "counts")


def _decode_compiled(block: Block, types: Sequence[ZeekType]) -> DecodedBlock:
    """``decode_block`` by the compiled walk: the same columns and ``ok``."""
    walker = compiled.record_walk
    assert walker is not None
    fields_ok = block.fields is None or block.fields == len(types)
    ok, columns = walker.walk(
        block.buf,
        np.ascontiguousarray(block.starts, dtype=np.int64),
        np.ascontiguousarray(block.ends, dtype=np.int64),
        4 if block.fields is None else 0,
        fields_ok,
        [(int(t.tag), int(t.subtag)) for t in types],
    )
    out = [_compiled_column(t, arrays) for t, arrays in zip(types, columns, strict=True)]
    return DecodedBlock(block, out, np.frombuffer(ok, dtype=bool), tuple(types))


def _compiled_column(zeek_type: ZeekType, arrays: tuple) -> ColumnData:
    """A ColumnData of the compiled walk's arrays (bytearrays: writable, as numpy's are)."""
    column = ColumnData(zeek_type, np.frombuffer(arrays[0], dtype=bool))
    for name, data in zip(_ARRAYS[1:], arrays[1:-1], strict=True):  # the last: elements
        if data is not None:
            dtype = {"values": _VALUES.get(zeek_type.tag), "proto": np.int32}.get(name, np.int64)
            setattr(column, name, np.frombuffer(data, dtype=dtype))
    if arrays[-1] is not None:
        column.elements = _compiled_column(zeek_type.element, arrays[-1])
    return column


def _walk_columns(walk: _Walk, ok: np.ndarray, types: Sequence[ZeekType]) -> list[ColumnData]:
    return [_decode_column(walk, ok, None, zeek_type) for zeek_type in types]


def value_run_ends(block: Block, types: Sequence[ZeekType]) -> np.ndarray:
    """Where a run of ``len(types)`` values of these types ends, from each of
    ``block.starts`` (values only: ``block.fields`` is set, as records travel in
    Zeek's ZeroMQ log batches); -1 where the bytes there are not such a run.
    ``block.ends`` bound the reads (the end of the buffer's data will do)."""
    walk = _Walk(block)
    ok = walk.ok
    _walk_columns(walk, ok, types)
    ok &= walk.pos <= walk.limit
    return np.where(ok, walk.pos, -1)


def _forget(column: ColumnData, ok: np.ndarray) -> None:
    """Clear what a column holds for records that turned out not to fit: their lengths may
    point anywhere (the record was read without bounds checks), so nothing may gather them."""
    column.present &= ok
    if column.lengths is not None:
        column.lengths[~ok] = 0
    if column.elements is not None and column.counts is not None:
        owners = np.repeat(np.arange(len(ok)), column.counts)
        _forget(column.elements, ok[owners])


def _first_tag(heads: np.ndarray, mask: np.ndarray) -> TypeTag:
    hits = np.flatnonzero(mask)
    if not len(hits):
        return TypeTag.VOID
    try:
        return TypeTag(int(heads[hits[0]]) >> 32)
    except ValueError:
        return TypeTag.VOID


def _decode_column(
    walk: _Walk, ok: np.ndarray, rows: np.ndarray | None, zeek_type: ZeekType, depth: int = 0
) -> ColumnData:
    """Read one value per entry of ``rows`` (record indices; None: every record) at the
    records' positions and advance them; a value that does not fit clears its record's ``ok``."""
    views = walk.views
    buf = walk.buf
    if rows is None:
        row_ok, pos = ok, walk.pos
    else:
        row_ok, pos = ok[rows], walk.pos[rows]
    # type and subtype in one read: Zeek writes subtype 0 (another goes the reference way)
    head = views[">i8"][pos]
    flag = buf[pos + 8]
    if zeek_type.tag is TypeTag.VOID:
        zeek_type = ZeekType(_first_tag(head, row_ok), zeek_type.subtag, zeek_type.enum_name)
    tag = zeek_type.tag
    row_ok &= (head == int(tag) << 32) & (flag <= 1)
    present = flag.view(bool)
    present &= row_ok
    at = pos + 9
    column = ColumnData(zeek_type, present)
    counts = None
    dtype = _FIXED.get(tag)
    if dtype is not None:
        column.values = views[dtype][at]
        step = np.where(present, 17, 9)
    elif tag is TypeTag.PORT:
        number = views[">u8"][at]
        proto = views[">i4"][at + 8]
        row_ok &= ~present | ((number <= 65535) & (proto >= 0) & (proto <= 3))
        column.values = number
        column.proto = proto
        step = np.where(present, 21, 9)
    elif tag in TEXT_TAGS:
        length = views[">u4"][at].astype(np.int64)
        length[~present] = 0
        column.starts = at + 4
        column.lengths = length
        step = length + np.where(present, 13, 9)
    elif tag is TypeTag.ADDR or tag is TypeTag.SUBNET:
        skip = 1 if tag is TypeTag.SUBNET else 0
        family = buf[at + skip]
        v4 = family == 4
        row_ok &= ~present | v4 | (family == 6)
        width = np.where(v4, 4, 16)
        width[~present] = 0
        column.starts = at + 1 + skip
        column.lengths = width
        step = width + np.where(present, 10 + skip, 9)
        if skip:
            # Zeek keeps an IPv4 prefix as its length within IPv6 space: /8 travels as 104
            prefix = buf[at].astype(np.int64)
            prefix[v4] -= 96
            row_ok &= ~present | ((prefix >= 0) & (prefix <= np.where(v4, 32, 128)))
            column.prefix = prefix
    elif tag in (TypeTag.TABLE, TypeTag.VECTOR) and depth == 0:
        counts = views[">i8"][at].astype(np.int64)
        counts[~present] = 0
        limit = walk.limit if rows is None else walk.limit[rows]
        row_ok &= ~present | ((counts >= 0) & (counts <= (limit - at - 8) // 9))
        counts[~row_ok] = 0
        step = np.where(present, 17, 9)
    else:
        row_ok &= ~present  # a type no log record holds: only an unset value fits
        step = 9
    present &= row_ok
    if rows is None:
        pos += step
        np.minimum(pos, walk.cap, out=pos)
    else:
        ok[rows] = row_ok
        walk.pos[rows] = np.minimum(pos + step, walk.cap)
    if counts is not None:
        column.counts = counts
        column.elements = _decode_elements(walk, ok, rows, column)
    return column


def _decode_elements(
    walk: _Walk, ok: np.ndarray, rows: np.ndarray | None, column: ColumnData
) -> ColumnData:
    """The elements of a set/vector column, record after record (element j of every record
    that has one is read in round j, then put in its place)."""
    assert column.counts is not None
    counts = column.counts
    total = int(counts.sum())
    first = np.cumsum(counts) - counts
    element_type = column.zeek_type.element
    parts: list[tuple[np.ndarray, ColumnData]] = []
    for j in range(int(counts.max()) if len(counts) else 0):
        holders = np.flatnonzero(counts > j)
        records = holders if rows is None else rows[holders]
        part = _decode_column(walk, ok, records, element_type, depth=1)
        if element_type.tag is TypeTag.VOID:
            element_type = part.zeek_type
        parts.append((first[holders] + j, part))
    if element_type.tag is TypeTag.VOID:
        element_type = column.zeek_type.element
    column.zeek_type = ZeekType(column.zeek_type.tag, element_type.tag, element_type.enum_name)
    return _scatter(parts, total, element_type)


def _fields_of(tag: TypeTag) -> dict[str, str]:
    """The arrays a ColumnData of ``tag`` has, and their dtypes."""
    dtype = _FIXED.get(tag)
    if dtype is not None:
        return {"values": dtype}
    if tag is TypeTag.PORT:
        return {"values": ">u8", "proto": ">i4"}
    if tag in TEXT_TAGS or tag is TypeTag.ADDR:
        return {"starts": "<i8", "lengths": "<i8"}
    if tag is TypeTag.SUBNET:
        return {"starts": "<i8", "lengths": "<i8", "prefix": "<i8"}
    return {}


def _scatter(
    parts: list[tuple[np.ndarray, ColumnData]], total: int, zeek_type: ZeekType
) -> ColumnData:
    """One ColumnData of ``total`` entries from parts placed at their destinations."""
    out = ColumnData(zeek_type, np.zeros(total, dtype=bool))
    for name, dtype in _fields_of(zeek_type.tag).items():
        merged = np.zeros(total, dtype=dtype)
        for dest, part in parts:
            arr = getattr(part, name)
            if arr is not None:
                merged[dest] = arr
        setattr(out, name, merged)
    for dest, part in parts:
        out.present[dest] = part.present
    return out
