"""The template of one payload's layout: its JSON as constant text and holes.

:mod:`~broker_spark.columnar.shape_json` fills templates for many rows at once;
this module builds one from the first row of a group (a walk over the Broker
binary, bounded in depth and size) and says which bytes every row of the
shape must share (:func:`template_runs`). See ``shape_json`` for what a hole
is and what each kind becomes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from broker_spark.columnar import binary_json as _bj
from broker_spark.data.binary import DEFAULT_LIMITS, decode_from
from broker_spark.data.json_codec import dumps_value
from broker_spark.data.varbyte import read_varbyte

__all__ = [
    "EVENT",
    "NOT_EVENT",
    "STRING_OPEN",
    "UNKNOWN",
    "Hole",
    "Refused",
    "Shape",
    "build_shape",
    "template_runs",
]

_MAX_DEPTH = 32
_MAX_STRING = DEFAULT_LIMITS.max_string
_MAX_CONTAINER = DEFAULT_LIMITS.max_container
_MAX_ITEMS = DEFAULT_LIMITS.max_items

STRING_OPEN = '{"@data-type":"string","data":"'
_COUNT_OPEN = '{"@data-type":"count","data":'
_INTEGER_OPEN = '{"@data-type":"integer","data":'
_VECTOR_OPEN = '{"@data-type":"vector","data":['
_NONE = '{"@data-type":"none","data":{}}'
_TRUE = '{"@data-type":"boolean","data":true}'
_FALSE = '{"@data-type":"boolean","data":false}'
_LEAF_SIZES = {6: 16, 7: 17, 8: 3, 10: 8}  # address, subnet, port, timespan: whole text

NOT_EVENT, EVENT, UNKNOWN = 0, 1, 2


class Refused(Exception):
    """The template builder or a hole cannot handle these rows: the per-row path can."""


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
            raise Refused
        self.parts.append(Hole(pos, size, tag))

    def value(self, pos: int, depth: int) -> int:
        buf = self.buf
        if pos >= self.end:
            raise Refused
        tag = buf[pos]
        if pos in self.opaque:
            return self.whole(pos)
        if tag == 5:
            n, start = read_varbyte(buf, pos + 1)
            stop = start + n
            if stop > self.end or n > _MAX_STRING:
                raise Refused
            if n:
                self.text(STRING_OPEN)
                self.hole(start, n, 5)
                self.text('"}')
            else:
                self.text(STRING_OPEN + '"}')
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
                raise Refused
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
                raise Refused
            self.text(_TRUE if buf[pos + 1] else _FALSE)
            return pos + 2
        return self.whole(pos)  # enum, set, table: part of the template

    def whole(self, pos: int) -> int:
        try:
            value, stop = decode_from(self.buf, pos)
            self.text(dumps_value(value))
        except Exception:
            raise Refused from None
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


def template_runs(shape: Shape, base: int = 0) -> list[tuple[int, bytes]]:
    """The bytes of ``shape`` outside its holes, as ``(position + base, bytes)`` runs."""
    runs = []
    at = 0
    for h in sorted(shape.holes, key=lambda h: h.pos):
        if h.pos > at:
            runs.append((base + at, shape.zeroed[at : h.pos]))
        at = max(at, h.pos + h.size)
    if at < shape.length:
        runs.append((base + at, shape.zeroed[at:]))
    return runs
