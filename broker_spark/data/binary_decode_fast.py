"""Compiled readers for the layouts a stream repeats (the decoder's fast path).

Why: the general reader (:mod:`~broker_spark.data.binary_decode`) pays, per
element, a loop turn, a chain of tag tests and a ``struct`` call of its own.
For a layout seen before, all of that is known in advance, so this module
writes a function for it: each run of fixed-size fields (tags, lengths,
counts, reals, addresses, ...) is read by one ``struct.unpack_from``, its
tags and lengths are checked by one ``if``, and the value is built by one
tuple display. That halves the cost of decoding a typical Zeek event.

Which reader to try comes from the message's head: a Zeek message is
``(format, type, (name, args...))``, and :func:`binary_read.decode` looks the
bytes up to the end of the name up in :data:`READERS` (trying the head in
:data:`LAST` first, by a prefix test). The head is then known, so a reader
starts after the name and returns the head's values as constants. The rest
is never trusted: the compiled code checks every tag, length and bound it
relies on and raises :class:`Miss` on anything else (anything malformed
included), and the caller then decodes the message with the general reader
(:mod:`~broker_spark.data.binary_decode`), which stays the reference for
values and errors alike and knows nothing of this module. Each message the
general reader had to decode teaches this module (:func:`learn`): a head seen
twice gets a compiled reader, and a reader that misses is rebuilt for the
union of both layouts (:func:`~broker_spark.data.binary_shape.merge`).

Only the default :class:`~broker_spark.data.binary_decode.DecodeLimits` use
this path, and a compiled reader cannot break them: shapes are at most
:data:`~broker_spark.data.binary_shape.MAX_DEPTH` deep and
:data:`~broker_spark.data.binary_shape.MAX_NODES` large, inline sets and tables
hold fewer than 128 elements, long strings go through the same bounded
reader, parts left to the general reader (ANY) get the depth they sit at, and
readers with such parts decline inputs large enough to need the element budget.

Values come out exactly as the general reader builds them (same types, same
shared small counts, ports and enum values); a few immutable leaves that
repeat get small caches of their own here (ports, sets of short strings as
frozensets to copy, the start of each minute for timestamps). Generated
source only ever contains numbers, tags and names from this module, never
bytes from the input, and every cache is bounded.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from types import CodeType, FunctionType
from typing import Any

from broker_spark.data import binary_decode as _bd
from broker_spark.data.binary_shape import (
    ANY,
    SET,
    VEC,
    Shape,
    compile_function,
    compiled,
    merge,
    scan,
)
from broker_spark.data.types import (
    UTC,
    Count,
    Port,
    Timespan,
    Timestamp,
    _minute_head,
    new_datetime,
    new_timedelta,
)

__all__ = ["READERS", "Miss", "compile_reader", "learn"]

_MAX_STRING = _bd.DEFAULT_LIMITS.max_string
_MAX_ITEMS = _bd.DEFAULT_LIMITS.max_items

_KEYS_MAX = 1024  # heads remembered (seen or compiled)
_MISSES_MAX = 16  # misses that teach nothing before a head is left to the general reader

Reader = Callable[[bytes, int], Any]

#: head -> compiled reader, consulted by :func:`binary_read.decode`.
READERS: dict[bytes, Reader] = {}
#: The last ``(head, reader)`` used, tried first by a prefix test (no slice, no hash).
#: Its placeholder head can never match: byte 22 of a message's head is 5.
LAST: list[tuple[bytes, Reader | None]] = [(bytes(25), None)]
_NO_HEAD = LAST[0]
# head -> [shape or None (seen once), misses]
_STATE: dict[bytes, list] = {}
_COMPILED: dict[Shape, tuple[CodeType, dict[str, Any]]] = {}


class Miss(Exception):
    """The input does not have the compiled layout (or is malformed)."""


def learn(key: bytes, buf: bytes, offset: int) -> None:
    """Note that the message under ``key`` at ``offset`` needed the general reader.

    The first sighting is only remembered; the second compiles a reader for
    its layout; a later one (the reader missed) widens the layout.
    """
    state = _STATE.get(key)
    if state is None:
        if not _is_head(key):
            return
        if len(_STATE) >= _KEYS_MAX:
            _STATE.clear()
            READERS.clear()
            LAST[0] = _NO_HEAD
        _STATE[key] = [None, 0]
        return
    if (len(buf) - offset) ** 2 > _MAX_ITEMS:
        return  # a reader with parts left as ANY declines these (see compile_reader)
    old = state[0]
    try:
        new = _body_shape(key, scan(buf, offset, _skip))
    except Exception:  # never expected; a decoded value must not be lost to it
        new = ANY
    if old is not None:
        new = merge(old, new)
        if new == old:  # (LAST may hold an older reader, put there by another thread)
            LAST[0] = _NO_HEAD
            state[1] += 1
            if state[1] > _MISSES_MAX:
                READERS.pop(key, None)
            return
    state[0] = new
    LAST[0] = _NO_HEAD
    reader = None if new == ANY else _reader_for(key, new)
    if reader is None:
        READERS.pop(key, None)
    else:
        READERS[key] = reader


_unpack_head = struct.Struct(">BBBQBQBBBB").unpack_from


def _is_head(key: bytes) -> bool:
    """Whether ``key`` is the head of a Zeek message up to the end of a short name."""
    if len(key) < 24:
        return False
    vec, n, tag, _, tag2, _, vec2, _, string, size = _unpack_head(key)
    return (vec, n, tag, tag2, vec2, string) == (14, 3, 2, 2, 14, 5) and size == len(
        key
    ) - 24 < 0x80


def _body_shape(key: bytes, shape: Shape) -> Shape:
    """The shapes after the name, as a vector: ``(VEC, (args, ...))``; ANY if not an event."""
    try:
        (vec, (first, second, (vec2, (name, *body)))) = shape
    except (TypeError, ValueError):
        return ANY
    if vec != VEC or vec2 != VEC or first != 2 or second != 2 or name != 5:
        return ANY
    return (VEC, tuple(body))


def _reader_for(key: bytes, body: Shape) -> Reader | None:
    """The reader for messages under ``key``: the body's code with the head's values bound."""
    try:
        name = key[24:].decode()
    except UnicodeDecodeError:  # decodes as bytes; not worth a reader
        return None
    code = compiled(_COMPILED, body, compile_reader)
    namespace = dict(code[1])
    namespace["_C0"] = _count(key[3:11])
    namespace["_C1"] = _count(key[12:20])
    namespace["_NAME"] = name
    namespace["_SKIP"] = len(key)
    return FunctionType(code[0], namespace)


def _count(raw: bytes) -> Count:
    value = int.from_bytes(raw, "big")
    return _bd._SMALL_COUNTS[value] if value < 256 else Count(value)


def _skip(buf: bytes, pos: int, depth: int) -> int:
    return _bd._DEFAULT_READ(buf, pos, 1, depth, None)[1]


def _subnet(raw: bytes) -> Any:
    return _bd._read_subnet(raw, 0)


def _new_port(key: int) -> Port:
    """The port for a tag-and-port word that missed the cache (a Miss if it is not one)."""
    if key >> 24 != 8 or key & 0xFF > 3:
        raise Miss
    if len(_PORTS) >= _CACHE_MAX:
        _PORTS.clear()
    port = _PORTS[key] = Port(key >> 8 & 0xFFFF, key & 0xFF)
    return port


_CACHE_MAX = 4096
# Ports by their tag byte and three bytes read as one big-endian word: the cache
# lookup doubles as the tag check, since only valid words are ever stored.
_PORTS: dict[int, Port] = {}


# Sets of short strings by their encoded elements: services, tags and flags
# repeat endlessly, and a set copied from a frozenset is cheaper than decoding.
_STRING_SETS: dict[bytes, frozenset] = {}
_STRING_SET_BYTES = 256  # larger sets are decoded every time, never remembered


def _string_set(raw: bytes, n: int) -> frozenset:
    """Decode ``n`` short strings laid end to end (remembered when small)."""
    items = []
    pos = 0
    for _ in range(n):
        end = pos + 2 + raw[pos + 1]
        items.append(raw[pos + 2 : end].decode())  # not UTF-8: the general reader's bytes
        pos = end
    if pos != len(raw):  # ran past the end of the buffer
        raise Miss
    value = frozenset(items)
    if len(raw) <= _STRING_SET_BYTES:
        if len(_STRING_SETS) >= _CACHE_MAX:
            _STRING_SETS.clear()
        _STRING_SETS[raw] = value
    return value


# A minute's start as the integer value of a ``datetime`` pickle state (10 bytes,
# big-endian: year to minute, then the second and the 24-bit microsecond zero).
_BASES: dict[int, int] = {}


def _minute_base(minute: int) -> int:
    if len(_BASES) >= _CACHE_MAX:
        _BASES.clear()
    base = _BASES[minute] = int.from_bytes(_minute_head(minute), "big") << 32
    return base


def _namespace() -> dict[str, Any]:
    return {
        "_Miss": Miss,
        "_SC": _bd._SMALL_COUNTS,
        "_new_int": int.__new__,
        "_Count": Count,
        "_ADDR": _bd._ADDRESSES,
        "_new_address": _bd._new_address,
        "_PORTS": _PORTS,
        "_new_port": _new_port,
        "_ENUMS": _bd._ENUMS,
        "_STRING_SETS": _STRING_SETS,
        "_string_set": _string_set,
        "_new_enum": _bd._new_enum,
        "_subnet": _subnet,
        "_read_bytes": _bd._read_bytes,
        "_MAX_STRING": _MAX_STRING,
        "_read": _bd._DEFAULT_READ,
        "_BASES": _BASES,
        "_minute_base": _minute_base,
        "_TS": Timestamp,
        "_UTC": UTC,
        "_SPAN": Timespan,
        "_NEW_TS": new_datetime,
        "_NEW_SPAN": new_timedelta,
        "set": set,
        "range": range,
    }


# Fixed-size leaves: (tag, struct format after the tag, value expression over the field).
_LEAVES: dict[int, tuple[str, str]] = {
    2: ("Q", "(_SC[{0}] if {0} < 256 else _new_int(_Count, {0}))"),
    3: ("q", "{0}"),
    4: ("d", "{0}"),
    6: ("16s", "(_ADDR.get({0}) or _new_address({0}))"),
    7: ("17s", "_subnet({0})"),
}


class _Source:
    """Writes the source of one reader, merging fixed-size fields into runs.

    Strings need no bound check of their own: a string running past the end
    leaves ``p`` beyond it for good, so either a later read fails or the
    caller sees that the reader did not stop at the end of the buffer.
    """

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.indent = 1
        self.names = 0
        self.structs: dict[str, str] = {}
        self._fmt: list[str] = []
        self._targets: list[str] = []
        self._checks: list[str] = []
        self._after: list[str] = []

    def name(self, prefix: str = "v") -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def field(self, fmt: str, check: str | None = None) -> str:
        """Add a field to the current run; ``check`` (over ``{0}``) is true on a miss."""
        var = self.name()
        self._fmt.append(fmt)
        self._targets.append(var)
        if check is not None:
            self._checks.append(check.format(var))
        return var

    def flush(self) -> None:
        """Read the current run: one unpack, one test, then the statements that follow it."""
        if not self._fmt:
            return
        fmt = ">" + "".join(self._fmt)
        unpack = self.structs.setdefault(fmt, f"_u{len(self.structs)}")
        self.emit(f"{', '.join(self._targets)}, = {unpack}(buf, p)")
        if self._checks:
            self.emit(f"if {' or '.join(self._checks)}:")
            self.emit("    raise _Miss")
        self.emit(f"p += {struct.calcsize(fmt)}")
        for line in self._after:
            self.emit(line)
        self._fmt, self._targets, self._checks, self._after = [], [], [], []

    def node(self, shape: Shape, depth: int) -> str:
        """Emit the reading of one value; return the expression that builds it."""
        if shape == ANY:
            self.flush()
            var = self.name("r")
            self.emit(f"{var}, p = _read(buf, p, 1, {depth}, None)")
            return f"{var}[0]"
        if type(shape) is tuple:
            return self.container(shape, depth)
        if shape in _LEAVES:
            self.field("B", f"{{0}} != {shape}")
            fmt, expr = _LEAVES[shape]
            return expr.format(self.field(fmt))
        if shape == 8:  # port: tag and value as one word, checked by the cache
            word = self.field("I")
            return f"(_PORTS.get({word}) or _new_port({word}))"
        if shape == 0:
            self.field("B", "{0} != 0")
            return "None"
        if shape == 1:
            self.field("B", "{0} != 1")
            return f"({self.field('B', '{0} > 1')} == 1)"
        if shape == 9 or shape == 10:
            self.field("B", f"{{0}} != {shape}")
            return self.time(shape, self.field("q"))
        return self.text(shape)

    def time(self, tag: int, ns: str) -> str:
        """A timestamp or timespan, as ``Timestamp.from_ns``/``Timespan.from_ns`` build it.

        Dividing by 1000 first keeps every division's divisor a single digit
        of CPython's integers, which takes the fast path.
        """
        var, a, b, c = self.name("t"), self.name("a"), self.name("b"), self.name("c")
        self._after.append(f"{a}, {b} = divmod({ns}, 1000)")
        if tag == 10:
            self._after += [
                f"{var} = _NEW_SPAN(_SPAN, 0, 0, {a})",
                f"{var}._nanos = {b}",
                f"{var}._ns = {ns}",
            ]
            return var
        # Minute, then microseconds in it; the pickle state's last four bytes are
        # the second and the 24-bit microsecond: r + (r // 10**6) * (2**24 - 10**6).
        self._after += [
            f"{a}, {c} = divmod({a}, 60000000)",
            f"{a} = _BASES.get({a}) or _minute_base({a})",
            f"{var} = _NEW_TS(_TS, ({a} + {c} + {c} // 1000000 * 15777216).to_bytes(10, 'big'), _UTC)",
            f"{var}._nanos = {b}",
            f"{var}._ns = {ns}",
        ]
        return var

    def text(self, tag: int) -> str:
        """A string or an enum value: tag and length in the run, then the characters."""
        if self._fmt:
            self.field("B", f"{{0}} != {tag}")
            n = self.field("B")
            self.flush()
            self.emit(f"if {n} < 128:")
        else:  # starts a run (as in a loop): indexing is cheaper than an unpack
            n = self.name()
            self.emit(f"if buf[p] != {tag}:")
            self.emit("    raise _Miss")
            self.emit(f"{n} = buf[p + 1]")
            self.emit("p += 2")
            self.emit(f"if {n} < 128:")
        raw = self.name("s")
        self.emit(f"    {raw} = buf[p:p + {n}]")
        self.emit(f"    p += {n}")
        self.emit("else:")
        self.emit(f"    {raw}, p = _read_bytes(buf, p - 1, _MAX_STRING)")
        if tag == 5:
            return f"{raw}.decode()"
        return f"(_ENUMS.get({raw}) or _new_enum({raw}, p))"

    def container(self, shape: tuple, depth: int) -> str:
        kind = shape[0]
        if kind == VEC:
            kids = shape[1]
            self.field("B", "{0} != 14")
            self.field("B", f"{{0}} != {len(kids)}")
            return self.display(kids, depth + 1)
        tag = 12 if kind == SET else 13
        self.field("B", f"{{0}} != {tag}")
        leaves = shape[1:]
        if leaves[0] is None:  # only empty ones seen so far
            self.field("B", "{0} != 0")
            return "set()" if kind == SET else "{}"
        n = self.field("B", "{0} > 127")
        self.flush()
        var = self.name("c")
        if shape == (SET, 5):
            return self.string_set(n, var)
        self.emit(f"{var} = {'{*()}' if kind == SET else '{}'}")  # {*()}: no call of set
        self.emit(f"for _ in range({n}):")
        self.indent += 1
        if kind == SET:
            elem = self.node(leaves[0], depth + 1)
            self.flush()
            self.emit(f"{var}.add({elem})")
        else:
            key = self.node(leaves[0], depth + 1)
            self.flush()
            keyvar = self.name("k")
            self.emit(f"{keyvar} = {key}")
            value = self.node(leaves[1], depth + 1)
            self.flush()
            self.emit(f"{var}[{keyvar}] = {value}")
        self.indent -= 1
        return var

    def string_set(self, n: str, var: str) -> str:
        """A set of short strings: found by its bytes among those seen, else decoded."""
        stop = self.name("q")
        self.emit(f"{stop} = p")
        self.emit(f"for _ in range({n}):")
        self.emit(f"    if buf[{stop}] != 5 or buf[{stop} + 1] > 127:")
        self.emit("        raise _Miss")
        self.emit(f"    {stop} += 2 + buf[{stop} + 1]")
        self.emit(f"{var} = buf[p:{stop}]")
        self.emit(f"p = {stop}")
        return f"set(_STRING_SETS.get({var}) or _string_set({var}, {n}))"

    def display(self, kids: tuple, depth: int, head: str = "") -> str:
        exprs = [self.node(kid, depth) for kid in kids]
        return f"({head}{', '.join(exprs)},)" if head or exprs else "()"


def _has_any(shape: Shape) -> bool:
    if shape == ANY:
        return True
    return type(shape) is tuple and shape[0] == VEC and any(map(_has_any, shape[1]))


def compile_reader(body: Shape) -> tuple[CodeType, dict[str, Any]]:
    """Compile the reader of a Zeek message whose elements after the name have ``body``.

    Returns the code and its namespace, to which :func:`learn` adds the head
    (``_SKIP``, its length; ``_C0``, ``_C1`` and ``_NAME``, its values). The
    reader, ``reader(buf, offset) -> value``, raises :class:`Miss` (or another
    exception) whenever the input differs from the layout or does not end
    where the value does, and for an input large enough that a part left to
    the general reader would need the element budget.
    """
    w = _Source()
    if _has_any(body):
        # Inputs this size take the general path, which counts elements (see decode).
        w.emit(f"if (len(buf) - p) ** 2 > {_MAX_ITEMS}:")
        w.emit("    raise _Miss")
    w.emit("p += _SKIP")
    expr = w.display(body[1], 2, "_NAME, ")
    w.flush()
    w.emit("if p != len(buf):")
    w.emit("    raise _Miss")
    w.emit(f"return (_C0, _C1, {expr})")
    source = "def reader(buf, p):\n" + "\n".join(w.lines) + "\n"
    namespace = _namespace()
    for fmt, unpack in w.structs.items():
        namespace[unpack] = struct.Struct(fmt).unpack_from
    return compile_function(source, namespace, "binary reader"), namespace
