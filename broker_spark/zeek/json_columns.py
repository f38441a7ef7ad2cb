"""Zeek's JSON log lines for many records at once, built column by column with Arrow.

Every value's text is made of *pieces*: strings picked by index out of arrays
(a column's texts cast by an Arrow kernel, a table of the 256 octets, a few
constants). A line is ``{``, then per value a joint piece (the previous
value's closing quote or bracket, a comma, the key, an opening quote), the
value's pieces, and finally ``}``. One ``take`` gathers every row's pieces and
one ``binary_join`` concatenates them: two copies of each byte, in C, and
Python work per column, not per row.

Values whose text needs more than a kernel can do (strings with bytes other
than printable ASCII, ``"`` or ``\\``; doubles Arrow would print with an
exponent; the IPv6 addresses Zeek writes with an IPv4 tail; ISO 8601 times)
are spelt one at a time by :mod:`~broker_spark.zeek.text`, exactly as
:mod:`~broker_spark.zeek.json_log` spells them for one record, which the
tests hold the two to.

Where the optional C accelerator :data:`~broker_spark.zeek.compiled.zeek_texts`
was built, the join is one pass of C over the rows instead, which also spells
integers, addresses and texts needing no escapes itself (:class:`Native`
parts), without Python's lock; every other text still comes from the kernels
above. The tests run on both and hold their lines equal byte for byte.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_spark.zeek import compiled
from broker_spark.zeek.arrow_columns import ipv6_strings, printable_rows, raw_texts, row_spans
from broker_spark.zeek.columns import ColumnData, DecodedBlock
from broker_spark.zeek.text import (
    TIMESTAMP_FORMATS,
    format_double,
    format_time,
    json_quote,
    zeek_text,
)
from broker_spark.zeek.types import TEXT_TAGS, TypeTag

__all__ = ["Native", "Texts", "double_texts", "render_block", "value_texts"]

_STRING = pa.string()


@functools.cache
def _texts(name: str) -> pa.Array:
    """The fixed texts the columns' JSON is made of: ``"octets"`` ("0" to "255"),
    ``"octets_dot"`` ("0." to "255.") and ``"constants"`` (indexed by the names below).
    Made on first use, not at import: pyarrow's first ``pa.array`` imports pandas when it is
    installed (140 ms of CPU), which a process importing this module but rendering nothing
    (a reader's driver side) would pay."""
    texts = {
        "octets": [str(i) for i in range(256)],
        "octets_dot": [f"{i}." for i in range(256)],
        "constants": ["true", "false", ".0", "/", "null"],
        "none": [],
    }
    return pa.array(texts[name], _STRING)


_TRUE, _FALSE, _POINT_ZERO, _SLASH, _NULL = range(5)


@dataclass(frozen=True)
class Native:
    """A piece the compiled join spells itself, as ``zeek_texts.join`` takes it (its
    source lists the kinds); only made when the accelerator is there."""

    spec: tuple


@dataclass
class Texts:
    """A column's JSON texts: row ``r`` is ``before``, then ``array[index[r]]`` for each
    ``(array, index)`` of ``parts`` whose index is not -1 (or the :class:`Native`
    part's text), then ``after``."""

    parts: list[tuple[pa.Array, np.ndarray | None] | Native]  # index None: row i's is i
    before: str = ""
    after: str = ""
    rows: int = field(default=0)


def _whole(arr: pa.Array) -> tuple[pa.Array, np.ndarray | None]:
    """An array whose entry ``i`` is row ``i``'s piece (no index needed)."""
    return arr, None


def _replace(arr: pa.Array, rows: np.ndarray, texts: Sequence[str]) -> pa.Array:
    """``arr`` with the entries at ``rows`` replaced by ``texts``."""
    if not len(rows):
        return arr
    mask = np.zeros(len(arr), dtype=bool)
    mask[rows] = True
    return pc.replace_with_mask(arr, pa.array(mask), pa.array(list(texts), arr.type))


def double_texts(values: np.ndarray) -> Texts:
    """Doubles as rapidjson writes them (``format_double``), in bulk."""
    values = values.astype(np.float64, copy=False)
    text = pa.array(values).cast(_STRING)
    finite = np.isfinite(values)
    # Arrow writes integral doubles without a decimal point ("3600"), rapidjson adds ".0";
    # literal searches, as a regular expression would be compiled on every call
    spelled = pc.or_(pc.match_substring(text, "."), pc.match_substring(text, "e"))
    integral = np.asarray(spelled.to_numpy(zero_copy_only=False), dtype=bool)
    integral = ~integral & finite
    odd = ~finite | np.asarray(
        pc.match_substring(text, "e+").to_numpy(zero_copy_only=False), dtype=bool
    )
    rows = np.flatnonzero(odd)
    text = _replace(text, rows, [format_double(float(values[i])) for i in rows])
    suffix = np.where(integral, _POINT_ZERO, -1)
    return Texts([_whole(text), (_texts("constants"), suffix)])


def _text_json(buf: np.ndarray, col: ColumnData) -> pa.Array:
    """Texts as the inside of JSON strings: printable ASCII without quotes or backslashes
    in bulk, the others one at a time (Zeek's escaping, then JSON's)."""
    data, offsets = raw_texts(buf, col)
    safe = printable_rows(data, offsets, extra=b'"\\')
    n = len(offsets) - 1
    large = int(offsets[-1]) >= (1 << 31) - 1
    kind = pa.large_binary() if large else pa.binary()
    offs = offsets if large else offsets.astype(np.int32)
    raw = pa.Array.from_buffers(kind, n, [None, pa.py_buffer(offs), pa.py_buffer(data)])
    fix = np.flatnonzero(~safe)
    if not len(fix):
        return raw.cast(_STRING)
    texts = [json_quote(zeek_text(raw[int(i)].as_py()))[1:-1] for i in fix]
    blank = pc.replace_with_mask(raw, pa.array(~safe), pa.array([b""] * len(fix), kind))
    return _replace(blank.cast(_STRING), fix, texts)


def _addr_parts(buf: np.ndarray, col: ColumnData) -> list[tuple[pa.Array, np.ndarray]]:
    """An address as pieces: IPv4 as four octets from a table, IPv6 as one text."""
    assert col.starts is not None and col.lengths is not None
    v4 = col.present & (col.lengths == 4)
    at = np.where(v4, col.starts, 0)
    octet = [buf[at + k].astype(np.int64) for k in range(4)]
    parts = [(_texts("octets_dot"), np.where(v4, octet[k], -1)) for k in range(3)]
    parts.append((_texts("octets"), np.where(v4, octet[3], -1)))
    v6 = np.flatnonzero(col.present & (col.lengths == 16))
    if len(v6):
        raw = buf[col.starts[v6][:, None] + np.arange(16)]
        index = np.full(len(v4), -1, dtype=np.int64)
        index[v6] = np.arange(len(v6))
        parts.append((ipv6_strings(raw), index))
    return parts


# the compiled join's kinds of part (its source says what each holds)
_WHOLE, _TABLE, _INT, _UINT, _ADDR, _RAW = range(6)


def _texts_spec(arr: pa.Array) -> tuple:
    """A string array as the compiled join takes texts: its buffers, offset and length."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.type not in (_STRING, pa.large_string()):
        arr = arr.cast(_STRING)
    validity, offsets, data = arr.buffers()
    return (offsets, data, validity, arr.offset, len(arr), arr.type == pa.large_string())


def _int64s(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.int64)


def _native_addr(buf: np.ndarray, col: ColumnData) -> Native:
    """Addresses for the compiled join, which spells IPv4 and IPv6 itself."""
    _, starts, lengths, _has = row_spans(col)
    return Native((_ADDR, buf, starts, lengths))


def _native_text(buf: np.ndarray, col: ColumnData) -> Native:
    """Texts for the compiled join: copied as they are where nothing needs escaping, the
    others spelt one at a time (Zeek's escaping, then JSON's), as ``_text_json`` does."""
    accelerator = compiled.zeek_texts
    assert accelerator is not None
    n, starts, lengths, has = row_spans(col)
    plain = np.frombuffer(accelerator.plain(n, buf, starts, lengths, has), bool)
    index = np.full(n, -1, dtype=np.int64)
    fix = np.flatnonzero(~plain)
    texts = _texts("none")
    if len(fix):
        raw = [buf[starts[i] : starts[i] + lengths[i]].tobytes() for i in fix]
        texts = pa.array([json_quote(zeek_text(b))[1:-1] for b in raw], _STRING)
        index[fix] = np.arange(len(fix))
    return Native((_RAW, buf, starts, lengths, _texts_spec(texts), index))


def _native_parts(buf: np.ndarray, col: ColumnData) -> Texts | None:
    """The column's texts with the parts the compiled join spells itself, or None for a
    column it does not (those take the kernels' texts)."""
    tag = col.tag
    if tag is TypeTag.INT:
        return Texts([Native((_INT, _int64s(col.values)))])
    if tag is TypeTag.COUNT:
        return Texts([Native((_UINT, np.ascontiguousarray(col.values.astype(np.uint64))))])
    if tag is TypeTag.PORT:
        return Texts([Native((_UINT, col.values.astype(np.uint16).astype(np.uint64)))])
    if tag in TEXT_TAGS:
        return Texts([_native_text(buf, col)], '"', '"')
    if tag is TypeTag.ADDR:
        return Texts([_native_addr(buf, col)], '"', '"')
    if tag is TypeTag.SUBNET:
        assert col.prefix is not None
        prefix = np.where(col.present, np.clip(col.prefix, 0, 255), -1)
        slash = (_texts("constants"), np.full(len(prefix), _SLASH))
        return Texts([_native_addr(buf, col), slash, (_texts("octets"), prefix)], '"', '"')
    return None


def value_texts(
    buf: np.ndarray, col: ColumnData, timestamps: str = "epoch", native: bool = False
) -> Texts:
    """The JSON text of every entry of a column (absent entries: anything; callers skip).
    ``native``: with :class:`Native` parts where the compiled join spells them."""
    tag = col.tag
    n = len(col.present)
    if native:
        texts = _native_parts(buf, col)
        if texts is not None:
            return texts
    if tag is TypeTag.BOOL:
        return Texts([(_texts("constants"), np.where(col.values != 0, _TRUE, _FALSE))])
    if tag in (TypeTag.INT, TypeTag.COUNT, TypeTag.PORT):
        kind = {TypeTag.INT: np.int64, TypeTag.COUNT: np.uint64, TypeTag.PORT: np.uint16}[tag]
        return Texts([_whole(pa.array(col.values.astype(kind)).cast(_STRING))])
    if tag in (TypeTag.DOUBLE, TypeTag.INTERVAL) or (tag is TypeTag.TIME and timestamps == "epoch"):
        return double_texts(col.values)
    if tag is TypeTag.TIME:
        texts = [format_time(float(v), timestamps) for v in col.values]
        return Texts([_whole(pa.array(texts, _STRING))])
    if tag in TEXT_TAGS:
        return Texts([_whole(_text_json(buf, col))], '"', '"')
    if tag is TypeTag.ADDR:
        return Texts(_addr_parts(buf, col), '"', '"')
    if tag is TypeTag.SUBNET:
        assert col.prefix is not None
        prefix = np.where(col.present, np.clip(col.prefix, 0, 255), -1)
        parts = [
            *_addr_parts(buf, col),
            (_texts("constants"), np.full(n, _SLASH)),
            (_texts("octets"), prefix),
        ]
        return Texts(parts, '"', '"')
    if tag in (TypeTag.TABLE, TypeTag.VECTOR):
        assert col.elements is not None and col.counts is not None
        element = value_texts(buf, col.elements, timestamps, native)
        inner = _join(
            [(element, col.elements.present)], len(col.elements.present), nulls=True, braces=None
        )
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(col.counts, out=offsets[1:])
        joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), inner), ",")
        return Texts([_whole(joined)], "[", "]")
    raise ValueError(f"no Zeek JSON for column type {col.zeek_type}")


def _masked(arr: pa.Array, keep: np.ndarray) -> pa.Array:
    """``arr`` (a string array, one entry per row) with the rows not in ``keep`` null."""
    if keep.all():
        return arr
    if arr.type == _STRING and arr.offset == 0 and arr.null_count == 0:
        _validity, offsets, data = arr.buffers()
        bits = pa.py_buffer(np.packbits(keep, bitorder="little"))
        nulls = int(len(keep) - np.count_nonzero(keep))
        return pa.Array.from_buffers(_STRING, len(arr), [bits, offsets, data], null_count=nulls)
    return pc.if_else(pa.array(keep), arr, pa.scalar(None, _STRING))


def _join(
    columns: Sequence[tuple[Texts, np.ndarray]],
    n: int,
    keys: Sequence[str] | None = None,
    nulls: bool = False,
    braces: tuple[str, str] | None = ("{", "}"),
) -> pa.Array:
    """``n`` strings, each the concatenation of its row's pieces (in C where the
    accelerator was built, else with Arrow's kernels).

    With ``keys``, a row is an object: ``{``, then ``key:value`` for each column
    present in it (all columns with ``nulls``, absent ones as ``null``), comma
    separated, then ``}``. Without, a row is its one column's value (``null``
    where absent when ``nulls``), for the elements of sets and vectors.

    Every piece position becomes one array aligned with the rows (null where the
    row has no such piece): the joints picked from a small pool of constants, the
    values as they are or picked from their tables; one element-wise join in C
    then concatenates each row's pieces, skipping the nulls.
    """
    if compiled.zeek_texts is not None and braces == (None if keys is None else ("{", "}")):
        return _join_compiled(columns, n, keys, nulls)
    pool: list[str] = []
    found: dict[str, int] = {}

    def piece(text: str) -> int:
        at = found.get(text)
        if at is None:
            at = found[text] = len(pool)
            pool.append(text)
        return at

    # per piece position: the pool index of each row's joint (-1: none; the pool is
    # complete only at the end), or an array aligned with the rows
    slots: list[np.ndarray | pa.Array] = []
    afters = sorted({t.after for t, _ in columns} | {""})
    after_id = {a: i for i, a in enumerate(afters)}
    pending = np.full(n, -1, dtype=np.int64)  # the after-id of the row's last value
    opening = braces[0] if braces else ""
    for c, (texts, has) in enumerate(columns):
        shown = np.ones(n, dtype=bool) if nulls else has
        label = "" if keys is None else keys[c] + ":"
        joints = np.array(
            [piece(opening + label + texts.before)]
            + [piece(a + "," + label + texts.before) for a in afters],
            dtype=np.int64,
        )
        joint = joints[pending + 1]
        if nulls:
            bare = np.array(
                [piece(opening + label + "null")]
                + [piece(a + "," + label + "null") for a in afters],
                dtype=np.int64,
            )
            joint = np.where(has, joint, bare[pending + 1])
        if keys is None:  # one value per row: no separators, no braces
            joint = np.where(has, piece(texts.before), piece("null") if nulls else -1)
        slots.append(np.where(shown, joint, -1))
        for array, index in texts.parts:
            if index is None:
                slots.append(_masked(array, has))
            else:
                keep = has & (index >= 0)
                slots.append(pc.take(array, pa.array(index, mask=~keep)))
        if keys is None:
            pending = np.where(has, after_id[texts.after], -1)
        else:
            pending = np.where(has, after_id[texts.after], np.where(shown, after_id[""], pending))
    closing = braces[1] if braces else ""
    ends = np.array(
        [piece((opening + closing) if keys is not None else "")]
        + [piece(a + closing) for a in afters],
        dtype=np.int64,
    )
    slots.append(ends[pending + 1])
    return pc.binary_join_element_wise(*_pieces(slots, pool, n), "", null_handling="skip")


def _flags(mask: np.ndarray) -> np.ndarray:
    """A boolean mask as the compiled join's bytes (0 or 1 a row)."""
    return np.ascontiguousarray(mask, dtype=bool).view(np.uint8)


def _join_compiled(
    columns: Sequence[tuple[Texts, np.ndarray]], n: int, keys: Sequence[str] | None, nulls: bool
) -> pa.Array:
    """``_join`` in C: the same lines, from the same texts or :class:`Native` parts."""
    accelerator = compiled.zeek_texts
    assert accelerator is not None
    specs = []
    for c, (texts, has) in enumerate(columns):
        parts: list[tuple] = []
        for part in texts.parts:
            if isinstance(part, Native):
                parts.append(part.spec)
            elif part[1] is None:
                parts.append((_WHOLE, _texts_spec(part[0])))
            else:
                parts.append((_TABLE, _texts_spec(part[0]), _int64s(part[1])))
        label = b"" if keys is None else (keys[c] + ":").encode()
        specs.append((label, texts.before.encode(), texts.after.encode(), _flags(has), parts))
    offsets, data = accelerator.join(n, specs, keys is not None, nulls)
    return pa.Array.from_buffers(_STRING, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _pieces(
    slots: list[np.ndarray | pa.Array], pool: list[str], n: int
) -> list[pa.Array | pa.Scalar]:
    """The element-wise join's arguments for ``n`` rows: value arrays as they are, and
    each joint slot (pool indexes, -1: none) picked from the pool, except that a slot the
    same in every row is one string (a scalar the join repeats; runs of them merged) or
    nothing (none in any row). Most joints are the same in every row (a column present in
    all of them after another one), and a scalar spares the join an array of it."""
    table: pa.Array | None = None
    out: list[pa.Array | pa.Scalar] = []
    constant: list[str] = []  # the joints in a row since the last array
    for s in slots:
        if isinstance(s, np.ndarray) and len(s) and bool((s == s[0]).all()):
            if s[0] >= 0:
                constant.append(pool[int(s[0])])
            continue
        if constant:
            out.append(pa.scalar("".join(constant), _STRING))
            constant = []
        if isinstance(s, np.ndarray):
            if table is None:
                table = pa.array(pool, _STRING)
            s = pc.take(table, pa.array(s, mask=s < 0))
        out.append(s)
    if constant:
        out.append(pa.scalar("".join(constant), _STRING))
    if not any(isinstance(a, pa.Array) for a in out):  # a row count the join cannot tell
        text = "".join(a.as_py() for a in out)
        return [pa.array([text] * n, _STRING)]
    return out


def render_block(
    decoded: DecodedBlock,
    names: Sequence[str],
    timestamps: str = "epoch",
    include_unset: bool = False,
    first: tuple[str, pa.Array] | None = None,
) -> pa.Array:
    """The JSON line of every record of ``decoded`` (entries of records that are not
    ``ok`` are meaningless; callers render those one at a time).

    ``first`` is a key and a string array of JSON texts to put first in every line
    (``broker-spark logs`` puts ``"_path"`` there).
    """
    if timestamps not in TIMESTAMP_FORMATS:
        raise ValueError(f"timestamps must be one of {', '.join(TIMESTAMP_FORMATS)}")
    buf = decoded.block.buf
    n = len(decoded.block)
    columns: list[tuple[Texts, np.ndarray]] = []
    keys: list[str] = []
    native = compiled.zeek_texts is not None
    if first is not None:
        keys.append(json_quote(first[0]))
        columns.append((Texts([_whole(first[1])]), np.ones(n, dtype=bool)))
    for name, col in zip(names, decoded.columns, strict=False):
        keys.append(json_quote(zeek_text(name)))
        columns.append((value_texts(buf, col, timestamps, native), col.present))
    return _join(columns, n, keys, nulls=include_unset)
