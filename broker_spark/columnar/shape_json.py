"""Zeek JSON for a whole column of payloads at once, one *shape* at a time.

A stream of Zeek events is mostly the same few layouts over and over: the
same event names, the same argument types, strings of the same lengths (uids,
addresses, service names), only the numbers and the characters changing.
Two payloads of the same length whose bytes agree everywhere except inside
the fixed-size fields of their scalars (the 8 bytes of a count, the
characters of a string, ...) have the same structure, so their JSON is one
template with holes. This module finds such groups and fills the holes for
all rows of a group at once, in C: the rows are one ``fixed_size_binary``
Arrow array (the joined payloads, or with :func:`json_columns_at` the spool's
records themselves, payload at a fixed place), the bytes of a field across
the rows are one ``binary_slice``, counts and integers become text through
Arrow casts, and the rows are assembled by Arrow's ``binary_join_element_wise``.
A hole that holds the same bytes in every row (an event's ``count 1`` head,
its name, a constant uid) is text once, merged into the template's constants.
Per row there is no Python work at all, where the per-payload transcoder
(:mod:`~broker_spark.columnar.binary_json`) costs a few microseconds.

What it does not handle it leaves to the caller's per-row path: rows of a
length shared by fewer than :data:`MIN_GROUP` rows, payloads whose first row
the template builder refuses (malformed, too deep, too large), anything past
:data:`MAX_SHAPES` layouts per length, and rows with a field the reference
codec rejects (a subnet's length above 128, a port's unknown protocol), so
the per-row path reports them as it always did. Whatever it does produce equals
``binary_to_json``/``event_to_json`` of each payload, which equal the
reference codecs; the tests check that on generated values.

Which bytes are holes, and what they become:

* count, integer: the 8 bytes; the decimal text (an Arrow cast);
* string: its characters (the length byte is structure); the characters
  themselves when all rows hold printable ASCII without ``"`` or ``\\``,
  else each row's JSON escape;
* timestamp: the 8 bytes; the text up to the second from a small memo per
  distinct second, and the milliseconds by Arrow arithmetic;
* address, port, subnet: per-row text from the memo ``binary_json`` keeps,
  keyed by the bytes (a dict lookup per row: hosts and services repeat);
  real, timespan: per-row text by a plain function (a fraction of a
  microsecond; they are rarer than counts and strings);
* none, booleans, enums, sets, tables and event metadata are not holes but
  part of the template: rows that differ there are a different shape.

For ``format=zeek`` the event name and arguments come from the same
template: an event's head (``count 1, count 1``) and its metadata are part
of the template, so whether a row is an event is decided once per shape.
"""

from __future__ import annotations

import array
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from broker_spark.columnar import binary_json as _bj
from broker_spark.columnar.shape_template import (
    NOT_EVENT,
    STRING_OPEN,
    UNKNOWN,
    Hole,
    Refused,
    Shape,
    build_shape,
    template_runs,
)
from broker_spark.columnar.strided import field_bytes as _buffer
from broker_spark.columnar.strided import fixed_rows, mismatched
from broker_spark.data.json_codec import dumps_value

__all__ = [
    "MAX_SHAPES",
    "MIN_GROUP",
    "JsonColumns",
    "Shape",
    "build_shape",
    "json_columns",
    "json_columns_at",
]

#: Rows of one payload length below this go to the per-row path (a template costs ~50 us).
MIN_GROUP = 16

#: Layouts tried per payload length before the remaining rows go to the per-row path.
MAX_SHAPES = 8

_SAFE = bytes(c for c in range(0x20, 0x7F) if c not in b'"\\')
_TIMESPAN_OPEN = '{"@data-type":"timespan","data":"'
#: Timestamps from the epoch to 2100 take the bulk path (the reference's fast range).
_NS_BULK_LIMIT = 4_102_444_800 * 1_000_000_000
_LITTLE = sys.byteorder == "little"


class _BadRows(Exception):
    """Rows (positions among those filled) whose field the reference codec rejects."""

    def __init__(self, rows: list[int]) -> None:
        super().__init__(rows)
        self.rows = rows


def _each(convert: Callable[[Any], str], items: list[Any]) -> pa.Array:
    """``convert`` of every item as a string array; items it fails on raise :class:`_BadRows`."""
    try:
        return pa.array(list(map(convert, items)), pa.string())
    except Exception:
        pass
    bad: list[int] = []
    for i, item in enumerate(items):
        try:
            convert(item)
        except Exception:
            bad.append(i)
    raise _BadRows(bad) if bad else Refused


# --- filling the holes of many rows -----------------------------------------------------------


def _words(raw: bytes, rows: int, kind: pa.DataType) -> pa.Array:
    """Big-endian 8-byte fields, back to back, as a 64-bit Arrow array of ``kind``."""
    words = array.array("Q")
    words.frombytes(raw)
    if _LITTLE:
        words.byteswap()
    return pa.Array.from_buffers(kind, rows, [None, pa.py_buffer(words)])


def _chunks(raw: bytes | bytearray, size: int, head: bytes = b"") -> list[bytes]:
    """Each row's field (with ``head`` in front) from the gathered bytes of a hole."""
    data = bytes(raw)
    return [head + data[i : i + size] for i in range(0, len(data), size)]


def _leaf_text(key: bytes) -> str:
    """An address, port or subnet (tag and bytes) as Zeek JSON, memoized as ``binary_json`` does."""
    text = _bj._leaves.get(key)
    if text is None:
        text, _ = _bj._reference_leaf(key, 0, len(key) - 1)
    return text


def _timespan_text(ns: int) -> str:
    """A timespan as Zeek JSON: the coarsest exact unit, as the reference prints it."""
    if ns == 0:
        return _TIMESPAN_OPEN + '0s"}'
    for unit in ("ns", "us", "ms"):
        if ns % 1000:
            return f'{_TIMESPAN_OPEN}{ns}{unit}"}}'
        ns //= 1000
    return f'{_TIMESPAN_OPEN}{ns}s"}}'


def _string_inner(raw: bytes) -> str:
    """The JSON of a string's characters, between its quotes."""
    return _bj._string(raw)[len(STRING_OPEN) : -2]


def _name_text(raw: bytes) -> str:
    """An event name as ``binary_json`` reads it."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw.decode("utf-8", "backslashreplace")


class _Rows:
    """Rows whose payloads sit at ``base`` of each of ``count`` records of ``stride`` bytes
    back to back in ``buf`` (joined payloads, or whole spool records), and their holes as
    Arrow text. A field across all rows is one ``binary_slice``."""

    def __init__(self, buf: bytes, stride: int, count: int, base: int = 0) -> None:
        self.buf = buf
        self.stride = stride
        self.count = count
        self.base = base
        self.records = fixed_rows(buf, stride, count)
        self._raw: dict[Hole, bytes] = {}

    def field(self, h: Hole) -> pa.Array:
        start = self.base + h.pos
        return pc.binary_slice(self.records, start, start + h.size)

    def raw(self, h: Hole) -> bytes:
        """The bytes of hole ``h`` of every row, back to back."""
        got = self._raw.get(h)
        if got is None:
            got = self._raw[h] = _buffer(self.field(h), h.size).to_pybytes()
        return got

    def constant(self, h: Hole) -> bool:
        """Whether every row holds the same bytes in hole ``h``."""
        if self.count < 2:
            return False
        raw = self.raw(h)
        return raw == raw[: h.size] * self.count

    def strings(self, h: Hole) -> pa.Array | None:
        """The characters of string hole ``h`` as a string array when all are safe
        (printable ASCII without quote or backslash: their JSON is themselves); else None."""
        if self.raw(h).translate(None, _SAFE):
            return None
        return self.field(h).cast(pa.string())

    def text(self, h: Hole) -> list[pa.Array | str]:
        """The JSON text of hole ``h`` in every row, as pieces to join."""
        rows, tag = self.count, h.tag
        if tag == 5:
            arr = self.strings(h)
            if arr is not None:
                return [arr]
            return [_each(_string_inner, _chunks(self.raw(h), h.size))]
        if tag == 6 or tag == 7 or tag == 8:
            return [_each(_leaf_text, _chunks(self.raw(h), h.size, bytes((tag,))))]
        words = self.raw(h)
        if tag == 2:
            return [_words(words, rows, pa.uint64()).cast(pa.string())]
        if tag == 4:
            return [_each(dumps_value, _words(words, rows, pa.float64()).to_pylist())]
        ints = _words(words, rows, pa.int64())
        if tag == 3:
            return [ints.cast(pa.string())]
        if tag == 9:
            return _timestamps(ints)
        assert tag == 10
        return [_each(_timespan_text, ints.to_pylist())]


def _timestamps(ns: pa.Array) -> list[pa.Array | str]:
    """Timestamps as Zeek JSON (``binary_json._timestamp``): a memo per second, ms in bulk."""
    lo, hi = pc.min_max(ns).values()
    if lo.as_py() < 0 or hi.as_py() >= _NS_BULK_LIMIT:
        return [_each(_bj._timestamp, ns.to_pylist())]
    ms = pc.divide(ns, 1_000_000)
    seconds = pc.divide(ms, 1000)
    millis = pc.subtract(ms, pc.multiply(seconds, 1000))
    distinct = pc.unique(seconds)
    prefixes = pa.array(
        [_bj._timestamp(s * 1_000_000_000)[:-6] for s in distinct.to_pylist()], pa.string()
    )
    heads = prefixes.take(pc.index_in(seconds, distinct))
    return [heads, ".", pc.utf8_lpad(millis.cast(pa.string()), width=3, padding="0"), '"}']


def _join(template: list[str | int], holes: list[list[pa.Array | str]], rows: int) -> pa.Array:
    pieces: list[pa.Array | str] = []
    for p in template:
        for piece in (p,) if isinstance(p, str) else holes[p]:
            if isinstance(piece, str) and pieces and isinstance(pieces[-1], str):
                pieces[-1] += piece
            else:
                pieces.append(piece)
    if len(pieces) == 1 and isinstance(pieces[0], str):
        return pa.array([pieces[0]] * rows, pa.string())
    return pc.binary_join_element_wise(*pieces, "")


def _constant_text(rows: _Rows, h: Hole) -> list[pa.Array | str]:
    """The text of a hole every row holds the same bytes in: the first row's, once."""
    try:
        pieces = _Rows(rows.buf[: rows.stride], rows.stride, 1, rows.base).text(h)
    except _BadRows:
        raise _BadRows(list(range(rows.count))) from None
    return ["".join(p if isinstance(p, str) else p[0].as_py() for p in pieces)]


def _fill(shape: Shape, rows: _Rows, want_event: bool) -> tuple[pa.Array, ...]:
    """``(data, event, args)`` of rows of one shape (event and args only with ``want_event``)."""
    texts = []
    bad: set[int] = set()
    for h in shape.holes:
        try:
            texts.append(_constant_text(rows, h) if rows.constant(h) else rows.text(h))
        except _BadRows as exc:
            bad.update(exc.rows)
        except Exception:
            raise Refused from None
    if bad:
        raise _BadRows(sorted(bad))
    data = _join(shape.data, texts, rows.count)
    if not want_event:
        return (data,)
    if shape.event == NOT_EVENT:
        nulls = pa.nulls(rows.count, pa.string())
        return data, nulls, nulls
    assert shape.args is not None
    if shape.name is None:
        names = pa.array([""] * rows.count, pa.string())
    else:
        hole = shape.holes[shape.name]
        names = rows.strings(hole)
        if names is None:
            raw = bytes(rows.raw(hole))
            size = hole.size
            names = pa.array(
                [_name_text(raw[i : i + size]) for i in range(0, len(raw), size)], pa.string()
            )
    return data, names, _join(shape.args, texts, rows.count)


# --- the column -------------------------------------------------------------------------------


@dataclass
class JsonColumns:
    """What :func:`json_columns` made: per group of rows (indices, arrays), and the rest."""

    groups: list[tuple[list[int] | None, tuple[pa.Array, ...]]]
    rest: list[int]


def _by_length(payloads: Sequence[bytes]) -> dict[int, list[int]] | None:
    """Row indices (ascending) by payload length; None when all rows have one length.

    Grouped by Arrow (a stable sort of the lengths, then runs), not by a dict
    append per row: the groups are runs of the sorted order.
    """
    lengths = pa.array(list(map(len, payloads)), pa.int64())
    lo, hi = pc.min_max(lengths).values()
    if lo == hi:
        return None
    order = pc.sort_indices(lengths)  # stable: indices ascend within a length
    runs = pc.value_counts(lengths.take(order))
    flat = order.to_pylist()
    groups: dict[int, list[int]] = {}
    at = 0
    for length, count in zip(
        runs.field("values").to_pylist(), runs.field("counts").to_pylist(), strict=True
    ):
        groups[length] = flat[at : at + count]
        at += count
    return groups


def json_columns(payloads: Sequence[bytes], want_event: bool = False) -> JsonColumns:
    """Zeek JSON (and with ``want_event`` event names and arguments) of the payloads that
    share a shape with enough others; the indices of the others in ``rest``, ascending."""
    out = JsonColumns([], [])
    if not payloads:
        return out
    groups = _by_length(payloads)
    if groups is None:
        _shapes(list(payloads), None, want_event, out)
    else:
        for indices in groups.values():
            if len(indices) < MIN_GROUP:
                out.rest.extend(indices)
            else:
                _shapes(list(itemgetter(*indices)(payloads)), indices, want_event, out)
    out.rest.sort()
    return out


def _match(shape: Shape, rows: bytes, count: int) -> tuple[list[int] | None, list[int]]:
    """Which of ``count`` joined ``rows`` have ``shape`` (None: all of them), and which do not."""
    bad = mismatched(rows, shape.length, count, template_runs(shape))
    if bad is None:
        return None, []
    return pc.indices_nonzero(pc.invert(bad)).to_pylist(), pc.indices_nonzero(bad).to_pylist()


def json_columns_at(
    buf: bytes, stride: int, count: int, base: int, length: int, want_event: bool = False
) -> tuple[pa.Array, ...] | None:
    """``(data,)`` or ``(data, event, args)`` of ``count`` records of ``stride`` bytes in
    ``buf`` when the payload at ``[base, base + length)`` of every one has the first one's
    shape; None when not (or a row's field is one the per-row path must report): the
    caller then takes the payloads one by one."""
    if not count:
        return None
    shape = build_shape(buf[base : base + length], want_event)
    if shape is None or (want_event and shape.event == UNKNOWN):
        return None
    if mismatched(buf, stride, count, template_runs(shape, base)) is not None:
        return None
    try:
        return _fill(shape, _Rows(buf, stride, count, base), want_event)
    except (_BadRows, Refused):
        return None


def _shapes(
    rows: list[bytes], indices: Sequence[int] | None, want_event: bool, out: JsonColumns
) -> None:
    """Rows of one length (at ``indices`` of the batch; None: all of it, in order): peel off
    one shape at a time."""
    length = len(rows[0])
    whole = indices is None
    at: Sequence[int] = range(len(rows)) if indices is None else indices
    for _ in range(MAX_SHAPES):
        shape = build_shape(rows[0], want_event)
        if shape is None or (want_event and shape.event == UNKNOWN):
            break
        joined = b"".join(rows)
        matched, others = _match(shape, joined, len(rows))
        picked = joined if matched is None else b"".join([rows[i] for i in matched])
        try:
            arrays = _fill(shape, _Rows(picked, length, len(picked) // length), want_event)
        except _BadRows as exc:  # fields the reference rejects: the per-row path reports them
            chosen = range(len(rows)) if matched is None else matched
            bad = set(exc.rows)
            out.rest.extend(at[chosen[i]] for i in exc.rows)
            matched = [r for i, r in enumerate(chosen) if i not in bad]
            picked = b"".join([rows[i] for i in matched])
            try:
                arrays = _fill(shape, _Rows(picked, length, len(matched)), want_event)
            except (_BadRows, Refused):
                out.rest.extend(at[i] for i in matched)
                arrays = ()
        except Refused:
            break
        if matched is None and whole:
            out.groups.append((None, arrays))
            return
        if arrays:
            chosen = range(len(rows)) if matched is None else matched
            out.groups.append(([at[i] for i in chosen], arrays))
        if not others:
            return
        rows = [rows[i] for i in others]
        at = [at[i] for i in others]
        whole = False
    out.rest.extend(at)


def assemble(
    n: int, columns: JsonColumns, rest: tuple[Sequence[str | None], ...], width: int
) -> list[pa.Array]:
    """The ``width`` columns of all ``n`` rows in order: the groups' arrays, the rest's texts."""
    if len(columns.groups) == 1 and columns.groups[0][0] is None and not columns.rest:
        return list(columns.groups[0][1])
    order: list[int] = []
    chunks: list[list[pa.Array]] = [[] for _ in range(width)]
    for indices, arrays in columns.groups:
        order.extend(indices if indices is not None else range(n))
        for chunk, arr in zip(chunks, arrays, strict=True):
            chunk.append(arr)
    if columns.rest:
        order.extend(columns.rest)
        for chunk, texts in zip(chunks, rest, strict=True):
            chunk.append(pa.array(texts, pa.string()))
    where = pc.sort_indices(pa.array(order, pa.int64()))
    return [pa.concat_arrays(chunk).take(where) for chunk in chunks]
