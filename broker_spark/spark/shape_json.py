"""Zeek JSON for a whole column of payloads at once, one *shape* at a time.

A stream of Zeek events is mostly the same few layouts over and over: the
same event names, the same argument types, strings of the same lengths (uids,
addresses, service names), only the numbers and the characters changing.
Two payloads of the same length whose bytes agree everywhere except inside
the fixed-size fields of their scalars (the 8 bytes of a count, the
characters of a string, ...) have the same structure, so their JSON is one
template with holes. This module finds such groups and fills the holes for
all rows of a group at once, in C: the bytes of a field across the rows are
gathered by extended-slice copies of the joined payloads, counts and integers
become text through Arrow casts, and the rows are assembled by Arrow's
``binary_join_element_wise``. Per row there is no Python work at all, where
the per-payload transcoder (:mod:`~broker_spark.spark.binary_json`) costs a
few microseconds.

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
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from broker_spark.data.binary import DEFAULT_LIMITS, decode_from
from broker_spark.data.json_codec import dumps_value
from broker_spark.data.varbyte import read_varbyte
from broker_spark.spark import binary_json as _bj

__all__ = ["MAX_SHAPES", "MIN_GROUP", "JsonColumns", "Shape", "build_shape", "json_columns"]

#: Rows of one payload length below this go to the per-row path (a template costs ~50 us).
MIN_GROUP = 16

#: Layouts tried per payload length before the remaining rows go to the per-row path.
MAX_SHAPES = 8

_MAX_DEPTH = 32
_MAX_STRING = DEFAULT_LIMITS.max_string
_MAX_CONTAINER = DEFAULT_LIMITS.max_container
_MAX_ITEMS = DEFAULT_LIMITS.max_items

_SAFE = bytes(c for c in range(0x20, 0x7F) if c not in b'"\\')
_STRING_OPEN = '{"@data-type":"string","data":"'
_COUNT_OPEN = '{"@data-type":"count","data":'
_INTEGER_OPEN = '{"@data-type":"integer","data":'
_TIMESPAN_OPEN = '{"@data-type":"timespan","data":"'
_VECTOR_OPEN = '{"@data-type":"vector","data":['
_NONE = '{"@data-type":"none","data":{}}'
_TRUE = '{"@data-type":"boolean","data":true}'
_FALSE = '{"@data-type":"boolean","data":false}'
_LEAF_SIZES = {6: 16, 7: 17, 8: 3, 10: 8}  # address, subnet, port, timespan: whole text
#: Timestamps from the epoch to 2100 take the bulk path (the reference's fast range).
_NS_BULK_LIMIT = 4_102_444_800 * 1_000_000_000
_LITTLE = sys.byteorder == "little"

NOT_EVENT, EVENT, UNKNOWN = 0, 1, 2


class _Refused(Exception):
    """The template builder or a hole cannot handle these rows: the per-row path can."""


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
    raise _BadRows(bad) if bad else _Refused


@dataclass(frozen=True)
class Hole:
    """Bytes ``[pos, pos + size)`` of every row, holding a value of Broker ``tag``."""

    pos: int
    size: int
    tag: int


@dataclass
class Shape:
    """One layout: the first row with its holes zeroed, and the JSON as text and holes.

    ``data`` (and ``args``) alternate constant text and indices into ``holes``;
    ``event`` says whether rows of this shape are Zeek events (``EVENT``), are
    not (``NOT_EVENT``), or need a per-row look (``UNKNOWN``); ``name`` is the
    hole of an event's name (None for an empty name).
    """

    length: int
    zeroed: bytes
    holes: list[Hole] = field(default_factory=list)
    data: list[str | int] = field(default_factory=list)
    event: int = NOT_EVENT
    name: int | None = None
    args: list[str | int] | None = None


class _Builder:
    """Walks one payload and records its template (recursive: depth is bounded)."""

    def __init__(self, buf: bytes, fixed: frozenset[int], opaque: frozenset[int]) -> None:
        self.buf = buf
        self.end = len(buf)
        self.fixed = fixed  # positions of counts kept as text (an event's head)
        self.opaque = opaque  # positions of values kept whole as text (event metadata)
        self.parts: list[str | Hole] = []
        self.budget = _MAX_ITEMS
        self.marks: dict[int, tuple[int, int]] = {}  # vector position -> (first, end) part

    def text(self, s: str) -> None:
        self.parts.append(s)

    def hole(self, pos: int, size: int, tag: int) -> None:
        if pos + size > self.end:
            raise _Refused
        self.parts.append(Hole(pos, size, tag))

    def value(self, pos: int, depth: int) -> int:
        buf = self.buf
        if pos >= self.end:
            raise _Refused
        tag = buf[pos]
        if pos in self.opaque:
            return self.whole(pos)
        if tag == 5:
            n, start = read_varbyte(buf, pos + 1)
            stop = start + n
            if stop > self.end or n > _MAX_STRING:
                raise _Refused
            if n:
                self.text(_STRING_OPEN)
                self.hole(start, n, 5)
                self.text('"}')
            else:
                self.text(_STRING_OPEN + '"}')
            return stop
        if tag == 2 or tag == 3:
            if pos in self.fixed:
                return self.whole(pos)
            self.text(_COUNT_OPEN if tag == 2 else _INTEGER_OPEN)
            self.hole(pos + 1, 8, tag)
            self.text("}")
            return pos + 9
        if tag == 9 or tag == 4:  # timestamp, real: the hole's text is the whole value
            self.hole(pos + 1, 8, tag)
            return pos + 9
        if tag in _LEAF_SIZES:
            self.hole(pos + 1, _LEAF_SIZES[tag], tag)
            return pos + 1 + _LEAF_SIZES[tag]
        if tag == 14:
            n, start = read_varbyte(buf, pos + 1)
            self.budget -= n
            if n > self.end - start or n > _MAX_CONTAINER or self.budget < 0 or depth >= _MAX_DEPTH:
                raise _Refused
            self.text(_VECTOR_OPEN)
            first = len(self.parts)
            at = start
            for i in range(n):
                if i:
                    self.text(",")
                at = self.value(at, depth + 1)
            self.marks[pos] = (first, len(self.parts))
            self.text("]}")
            return at
        if tag == 0:
            self.text(_NONE)
            return pos + 1
        if tag == 1:
            if pos + 1 >= self.end or buf[pos + 1] > 1:
                raise _Refused
            self.text(_TRUE if buf[pos + 1] else _FALSE)
            return pos + 2
        return self.whole(pos)  # enum, set, table: part of the template

    def whole(self, pos: int) -> int:
        try:
            value, stop = decode_from(self.buf, pos)
            self.text(dumps_value(value))
        except Exception:
            raise _Refused from None
        return stop


def _merge(parts: Sequence[str | Hole], holes: dict[Hole, int]) -> list[str | int]:
    """Adjacent constants joined into one text; holes as their index."""
    out: list[str | int] = []
    for p in parts:
        if isinstance(p, str):
            if out and isinstance(out[-1], str):
                out[-1] += p
            else:
                out.append(p)
        else:
            out.append(holes.setdefault(p, len(holes)))
    return out


def _event_layout(payload: bytes) -> tuple[int, frozenset[int], frozenset[int], int, int]:
    """``(event kind, fixed, opaque, name position, args position)`` of a payload's layout."""
    if not payload.startswith(_bj._EVENT_HEAD):
        # Not the usual layout: an event only if a vector of 3 or more starting with two
        # counts (whose values are holes): that needs a per-row look.
        if payload[:1] != b"\x0e":
            return NOT_EVENT, frozenset(), frozenset(), -1, -1
        n, pos = read_varbyte(payload, 1)
        if n >= 3 and payload[pos : pos + 1] == b"\x02" and payload[pos + 9 : pos + 10] == b"\x02":
            return UNKNOWN, frozenset(), frozenset(), -1, -1
        return NOT_EVENT, frozenset(), frozenset(), -1, -1
    try:
        fast = _bj._event_fast(payload)
    except Exception:
        return UNKNOWN, frozenset(), frozenset(), -1, -1
    # The head's counts are text, so every row of the shape has this head; metadata is kept
    # whole, so whether it is valid (a count key decides what its value must be) is too.
    fixed = frozenset((2, 11))
    args_pos = 24 + payload[23]
    opaque: frozenset[int] = frozenset()
    if payload[21] == 3:
        opaque = frozenset((_bj._transcode(payload, args_pos, []),))
    if fast is None:
        return NOT_EVENT, fixed, opaque, -1, -1
    return EVENT, fixed, opaque, 24, args_pos


def build_shape(payload: bytes, want_event: bool = False) -> Shape | None:
    """The template of ``payload``'s layout, or None when the per-row path must take it."""
    try:
        kind, fixed, opaque, name_pos, args_pos = (
            _event_layout(payload) if want_event else (NOT_EVENT, frozenset(), frozenset(), -1, -1)
        )
        builder = _Builder(payload, fixed, opaque)
        if builder.value(0, 0) != len(payload):
            return None
    except Exception:  # malformed, too large, too deep: the per-row path says what
        return None
    parts = builder.parts
    holes: dict[Hole, int] = {}
    shape = Shape(len(payload), b"", event=kind)
    shape.data = _merge(parts, holes)
    if kind == EVENT:
        name = next((p for p in parts if isinstance(p, Hole) and p.pos == name_pos), None)
        shape.name = None if name is None else holes[name]
        first, end = builder.marks[args_pos]
        shape.args = _merge(["[", *parts[first:end], "]"], holes)
    shape.holes = sorted(holes, key=holes.__getitem__)
    zeroed = bytearray(payload)
    for h in shape.holes:
        zeroed[h.pos : h.pos + h.size] = bytes(h.size)
    shape.zeroed = bytes(zeroed)
    return shape


# --- filling the holes of many rows -----------------------------------------------------------


def _gather(buf: bytes, length: int, rows: int, pos: int, size: int) -> bytearray:
    """Bytes ``[pos, pos + size)`` of each row of ``buf``, back to back."""
    out = bytearray(size * rows)
    for k in range(size):
        out[k::size] = buf[pos + k :: length]
    return out


def _gather_u64(buf: bytes, length: int, rows: int, pos: int) -> bytearray:
    """The big-endian 8-byte field at ``pos`` of each row, as native-order 64-bit words."""
    out = bytearray(8 * rows)
    for k in range(8):
        out[k::8] = buf[pos + (7 - k if _LITTLE else k) :: length]
    return out


def _words(raw: bytearray, rows: int, kind: pa.DataType) -> pa.Array:
    return pa.Array.from_buffers(kind, rows, [None, pa.py_buffer(raw)])


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
    return _bj._string(raw)[len(_STRING_OPEN) : -2]


def _name_text(raw: bytes) -> str:
    """An event name as ``binary_json`` reads it."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw.decode("utf-8", "backslashreplace")


class _Rows:
    """The joined payloads of ``count`` rows of one length, and their holes as Arrow text."""

    def __init__(self, buf: bytes, length: int, count: int) -> None:
        self.buf = buf
        self.length = length
        self.count = count
        self._raw: dict[Hole, bytearray] = {}

    def raw(self, h: Hole) -> bytearray:
        got = self._raw.get(h)
        if got is None:
            got = self._raw[h] = _gather(self.buf, self.length, self.count, h.pos, h.size)
        return got

    def strings(self, h: Hole) -> tuple[pa.Array, bool]:
        """The characters of string hole ``h`` as a string array, and whether all are safe
        (printable ASCII without quote or backslash: their JSON is themselves)."""
        raw = self.raw(h)
        offsets = array.array("i", range(0, len(raw) + 1, h.size))
        arr = pa.Array.from_buffers(
            pa.string(), self.count, [None, pa.py_buffer(offsets), pa.py_buffer(raw)]
        )
        return arr, not raw.translate(None, _SAFE)

    def text(self, h: Hole) -> list[pa.Array | str]:
        """The JSON text of hole ``h`` in every row, as pieces to join."""
        rows, tag = self.count, h.tag
        if tag == 5:
            arr, safe = self.strings(h)
            if safe:
                return [arr]
            return [_each(_string_inner, _chunks(self.raw(h), h.size))]
        if tag == 6 or tag == 7 or tag == 8:
            return [_each(_leaf_text, _chunks(self.raw(h), h.size, bytes((tag,))))]
        words = _gather_u64(self.buf, self.length, rows, h.pos)
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
        if isinstance(p, str):
            pieces.append(p)
        else:
            pieces.extend(holes[p])
    if not any(isinstance(p, pa.Array) for p in pieces):
        return pa.array(["".join(pieces)] * rows, pa.string())  # type: ignore[arg-type]
    return pc.binary_join_element_wise(*pieces, "")


def _fill(shape: Shape, rows: _Rows, want_event: bool) -> tuple[pa.Array, ...]:
    """``(data, event, args)`` of rows of one shape (event and args only with ``want_event``)."""
    texts = []
    bad: set[int] = set()
    for h in shape.holes:
        try:
            texts.append(rows.text(h))
        except _BadRows as exc:
            bad.update(exc.rows)
        except Exception:
            raise _Refused from None
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
        names, safe = rows.strings(hole)
        if not safe:
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
    """Row indices by payload length; None when all rows have one length."""
    lengths = list(map(len, payloads))
    if min(lengths) == max(lengths):
        return None
    groups: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        group = groups.get(n)
        if group is None:
            groups[n] = [i]
        else:
            group.append(i)
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


def _match(shape: Shape, rows: list[bytes], length: int) -> tuple[list[int] | None, list[int]]:
    """Which rows have ``shape`` (None: all of them), and which do not."""
    count = len(rows)
    zeroed = bytearray(b"".join(rows))
    for h in shape.holes:
        blank = bytes(count)
        for k in range(h.pos, h.pos + h.size):
            zeroed[k::length] = blank
    z = shape.zeroed
    if zeroed == z * count:
        return None, []
    flags = [zeroed[i : i + length] == z for i in range(0, len(zeroed), length)]
    return [i for i, f in enumerate(flags) if f], [i for i, f in enumerate(flags) if not f]


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
        matched, others = _match(shape, rows, length)
        picked = rows if matched is None else [rows[i] for i in matched]
        try:
            arrays = _fill(shape, _Rows(b"".join(picked), length, len(picked)), want_event)
        except _BadRows as exc:  # fields the reference rejects: the per-row path reports them
            chosen = range(len(rows)) if matched is None else matched
            bad = set(exc.rows)
            out.rest.extend(at[chosen[i]] for i in exc.rows)
            matched = [r for i, r in enumerate(chosen) if i not in bad]
            picked = [rows[i] for i in matched]
            try:
                arrays = _fill(shape, _Rows(b"".join(picked), length, len(picked)), want_event)
            except (_BadRows, _Refused):
                out.rest.extend(at[i] for i in matched)
                arrays = ()
        except _Refused:
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
