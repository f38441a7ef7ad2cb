"""Compiled writers for the layouts a stream repeats (the encoder's fast path).

Why: the general writer (:mod:`~broker_spark.data.binary_encode`) tests the
type of every element against a chain of types and appends each one with a
``struct`` call of its own. For a layout seen before, all of that is known in
advance, so this module writes a function for it: the values are unpacked
into locals, their exact types checked by one comparison per vector, each run
of fixed-size fields packed by one ``struct.pack``, and the pieces joined once.

Which writer to try comes from the value: a Zeek message is
``(format, type, (name, args...))``, and :func:`binary_write.encode` looks
its name up in :data:`WRITERS`. The head's encoding up to the end of the name
is then a constant of the writer. The rest is never trusted: the compiled
code checks the exact type of every value it touches and raises :class:`Miss`
on anything else, and any exception it raises (a value out of range, say)
sends the value to the general writer (:mod:`~broker_spark.data.binary_encode`),
which stays the reference for bytes and errors alike and knows nothing of this
module. Each message the general writer had to encode teaches this module, as
for the reader: a name seen twice gets a compiled writer, and one that misses
is rebuilt for the union of both layouts. Generated source holds only numbers
and names from this module, and every cache is bounded.

The shape of a value here uses *kinds* rather than tags (:data:`KINDS`): an
IPv4 and an IPv6 address encode differently, and a timestamp or timespan
compiles only when it remembers the nanoseconds it was built from (anything
else is left to the general writer as ANY).
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Callable
from types import CodeType, FunctionType
from typing import Any

from broker_spark.data import binary_encode as _be
from broker_spark.data.binary_shape import (
    ANY,
    MAX_DEPTH,
    MAX_NODES,
    SET,
    VEC,
    Shape,
    compile_function,
    compiled,
    merge,
)
from broker_spark.data.types import Count, Enum, Port, Timespan, Timestamp

__all__ = ["KINDS", "WRITERS", "Miss", "compile_writer", "learn", "shape_of"]

_KEYS_MAX = 1024
_MISSES_MAX = 16

Writer = Callable[[tuple], bytes]

#: name -> compiled writer, consulted by :func:`binary_write.encode`.
WRITERS: dict[str, Writer] = {}
_STATE: dict[str, list] = {}
_COMPILED: dict[Shape, tuple[CodeType, dict[str, Any]]] = {}

# Kinds of leaves: exact type -> (kind, struct format, pack arguments over the value ``{0}``).
# A format of None means a piece of its own (strings and enum values).
_STR, _ENUM, _TS, _SPAN = 5, 11, 9, 10
KINDS: dict[type, tuple[int, str | None, str]] = {
    type(None): (0, "B", "0"),
    bool: (1, "BB", "1, {0}"),
    Count: (2, "BQ", "2, {0}"),
    int: (3, "Bq", "3, {0}"),
    float: (4, "Bd", "4, {0}"),
    str: (_STR, None, "(_SB.get({0}) or _str_bytes({0}))"),
    ipaddress.IPv4Address: (6, "BQQ", "6, 0, _V4 | {0}._ip"),
    ipaddress.IPv6Address: (7, "BQQ", "6, {0}._ip >> 64, {0}._ip & _LOW64"),
    Port: (8, "BHB", "8, {0}._number, {0}._proto"),
    Timestamp: (_TS, "Bq", "9, {0}._ns"),
    Timespan: (_SPAN, "Bq", "10, {0}._ns"),
    Enum: (_ENUM, None, "(_EB.get({0}.name) or _enum_bytes({0}.name))"),
}
_BY_KIND = {kind: (t, fmt, args) for t, (kind, fmt, args) in KINDS.items()}
_TYPE_NAMES = {
    type(None): "_NoneType",
    bool: "bool",
    Count: "_Count",
    int: "int",
    float: "float",
    str: "str",
    ipaddress.IPv4Address: "_IPv4",
    ipaddress.IPv6Address: "_IPv6",
    Port: "_Port",
    Timestamp: "_Timestamp",
    Timespan: "_Timespan",
    Enum: "_Enum",
}


class Miss(Exception):
    """The value does not have the compiled layout."""


def _miss() -> Any:
    raise Miss


def shape_of(value: Any) -> Shape:
    """The layout of ``value`` in kinds, ANY where the compiled writer should not go."""
    return _shape(value, 0, [0])


def _shape(value: Any, depth: int, nodes: list[int]) -> Shape:
    nodes[0] += 1
    t = type(value)
    leaf = KINDS.get(t)
    if leaf is not None:
        if (t is Timestamp or t is Timespan) and not hasattr(value, "_ns"):
            return ANY  # not built from nanoseconds: the general writer works them out
        return leaf[0]
    if t is tuple:
        if len(value) >= 128 or depth >= MAX_DEPTH or nodes[0] + len(value) > MAX_NODES:
            return ANY
        return (VEC, tuple(_shape(v, depth + 1, nodes) for v in value))
    if t is set and len(value) < 128 and all(type(v) is str for v in value):
        return (SET, _STR)
    return ANY


def learn(key: str, value: tuple) -> None:
    """Note that the message named ``key`` needed the general writer (see the module doc)."""
    state = _STATE.get(key)
    if state is None:
        if len(_STATE) >= _KEYS_MAX:
            _STATE.clear()
            WRITERS.clear()
        _STATE[key] = [None, 0]
        return
    old = state[0]
    try:
        new = _head_and_body(value)
    except Exception:  # never expected; an encoded value must not be lost to it
        new = ANY
    if old is not None:
        if new != ANY and old != ANY and new[:2] == old[:2]:
            new = (*new[:2], merge(old[2], new[2]))
        else:
            new = ANY
        if new == old:
            state[1] += 1
            if state[1] > _MISSES_MAX:
                WRITERS.pop(key, None)
            return
    state[0] = new
    if new == ANY or new[2] == ANY:
        WRITERS.pop(key, None)
    else:
        WRITERS[key] = _writer_for(key, *new)


def _head_and_body(value: tuple) -> Any:
    """``(format, type, shape after the name)`` of a Zeek message; ANY if it is not one."""
    fmt, kind, (_, *body) = value
    if type(fmt) is not Count or type(kind) is not Count:
        return ANY
    return (int(fmt), int(kind), shape_of(tuple(body)))


def _writer_for(name: str, fmt: int, kind: int, body: Shape) -> Writer:
    """The writer for messages named ``name``: the body's code with the head bound."""
    code = compiled(_COMPILED, body, compile_writer)
    namespace = dict(code[1])
    namespace["_C0"] = fmt
    namespace["_C1"] = kind
    out = bytearray(bytes((14, 3, 2)) + fmt.to_bytes(8, "big") + b"\x02" + kind.to_bytes(8, "big"))
    out += bytes((14, len(body[1]) + 1))
    out += _be._str_bytes(name)
    namespace["_HEAD"] = bytes(out)
    return FunctionType(code[0], namespace)


# Encodings of small sets of strings, by their elements: the services, tags and
# flags of a stream repeat endlessly, and a frozenset is far cheaper to build
# and look up than sorting and encoding the strings again. Only sets of exact
# strings are stored, and a string equals only strings, so a hit is exact.
_SETS: dict[frozenset, bytes] = {}
_SETS_MAX = 1024
_SET_MAX_ITEMS = 16
_SET_MAX_BYTES = 512


def _str_set(value: set) -> bytes:
    """The encoding of a set of strings in canonical (code point) order, remembered if small."""
    n = len(value)
    pieces = [_be._SET_HDR[n]]
    for item in sorted(value) if n > 1 else value:
        if type(item) is not str:
            raise Miss
        pieces.append(_be._STR_BYTES.get(item) or _be._str_bytes(item))
    data = b"".join(pieces)
    if n <= _SET_MAX_ITEMS and len(data) <= _SET_MAX_BYTES:
        if len(_SETS) >= _SETS_MAX:
            _SETS.clear()
        _SETS[frozenset(value)] = data
    return data


def _general(value: Any) -> bytearray:
    out = bytearray()
    (_be._ENCODERS.get(type(value)) or _be._resolve(value))(value, out)
    return out


def _namespace() -> dict[str, Any]:
    names = {name: t for t, name in _TYPE_NAMES.items()}
    return {
        **names,
        "_Miss": Miss,
        "_miss": _miss,
        "_general": _general,
        "_SETS": _SETS,
        "_str_set": _str_set,
        "frozenset": frozenset,
        "_SB": _be._STR_BYTES,
        "_str_bytes": _be._str_bytes,
        "_EB": _be._ENUM_BYTES,
        "_enum_bytes": _be._enum_bytes,
        "_SET_HDR": _be._SET_HDR,
        "_V4": _be._V4_MAPPED,
        "_LOW64": _be._LOW64,
    }


class _Writer:
    """Writes the source of one writer, merging fixed-size fields into runs."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.pieces: list[str] = []
        self.names = 0
        self.structs: dict[str, str] = {}
        self._fmt: list[str] = []
        self._args: list[str] = []
        self.type_tuples: dict[tuple, str] = {}  # type tuples checked against, by name

    def name(self, prefix: str = "x") -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    def emit(self, line: str) -> None:
        self.lines.append("    " + line)

    def pack(self, fmt: str, args: str) -> None:
        self._fmt.append(fmt)
        self._args.append(args)

    def flush(self) -> None:
        if self._fmt:
            fmt = ">" + "".join(self._fmt)
            pack = self.structs.setdefault(fmt, f"_p{len(self.structs)}")
            self.pieces.append(f"{pack}({', '.join(self._args)})")
            self._fmt, self._args = [], []

    def piece(self, expr: str) -> None:
        self.flush()
        self.pieces.append(expr)

    def vector(self, var: str, kids: tuple, head: bool = False) -> None:
        """Unpack the vector ``var`` into locals, check their types, write them.

        With no ANY among several of them the exact types are checked at once,
        by comparing ``tuple(map(type, var))`` with the expected tuple (which
        checks the length too); otherwise one by one after unpacking (which
        fails on a wrong length). With ``head`` the
        first element is the message's name, already written as part of ``_HEAD``.
        """
        if not head:
            self.pack("BB", f"14, {len(kids)}")
        names = [self.name() for _ in kids]
        if head:
            names[0] = "_"
        first = []  # checked before unpacking (the unpacking relies on them)
        checks = []
        if not kids:
            first.append(f"len({var})")  # (no unpacking to check the length)
        elif ANY not in kids and len(kids) >= 4:  # (for fewer, one by one is cheaper)
            types = tuple(self.type_of(kid) for kid in kids)
            first.append(f"tuple(map(type, {var})) != {self.constant(types)}")
        else:
            checks += [
                f"type({name}) is not {self.type_name(kid)}"
                for name, kid in zip(names, kids, strict=True)
                if kid != ANY and name != "_"
            ]
        checks += [
            f"len({name}) > 127"
            for name, kid in zip(names, kids, strict=True)
            if type(kid) is tuple and kid[0] == SET
        ]
        for group in (first, checks):
            if group:
                self.emit(f"if {' or '.join(group)}:")
                self.emit("    raise _Miss")
            if group is first and names:
                self.emit(f"{', '.join(names)}, = {var}")
        for name, kid in zip(names, kids, strict=True):
            if name != "_":
                self.node(name, kid)

    def constant(self, types: tuple) -> str:
        return self.type_tuples.setdefault(types, f"_T{len(self.type_tuples)}")

    @staticmethod
    def type_of(kid: Shape) -> type:
        if type(kid) is tuple:
            return tuple if kid[0] == VEC else set
        return _BY_KIND[kid][0]

    def type_name(self, kid: Shape) -> str:
        if type(kid) is tuple:
            return "tuple" if kid[0] == VEC else "set"
        return _TYPE_NAMES[_BY_KIND[kid][0]]

    def node(self, var: str, shape: Shape) -> None:
        if shape == ANY:
            self.piece(f"_general({var})")
        elif type(shape) is tuple and shape[0] == VEC:
            self.vector(var, shape[1])
        elif type(shape) is tuple:  # a set of strings (its size was checked with its type)
            self.piece(f"(_SETS.get(frozenset({var})) or _str_set({var}))")
        else:
            _, fmt, args = _BY_KIND[shape]
            if fmt is None:
                self.piece(args.format(var))
            else:
                self.pack(fmt, args.format(var))


def compile_writer(body: Shape) -> tuple[CodeType, dict[str, Any]]:
    """Compile the writer of a Zeek message whose elements after the name have ``body``.

    Returns the code and its namespace, to which :func:`learn` adds the head
    (``_C0``/``_C1``, the format and type counts it expects, and ``_HEAD``, the
    encoding up to the end of the name). The writer, ``writer(value) -> bytes``,
    raises :class:`Miss` (or another exception) whenever the value differs from
    the layout or is out of range.
    """
    w = _Writer()
    w.names = 3
    w.emit("x1, x2, x3, = value")
    w.emit("if type(x1) is not _Count or type(x2) is not _Count or x1 != _C0 or x2 != _C1:")
    w.emit("    raise _Miss")
    w.pieces.append("_HEAD")
    w.vector("x3", (_STR, *body[1]), head=True)
    w.flush()
    w.emit(f"return b''.join([{', '.join(w.pieces)}])")
    source = "def writer(value):\n" + "\n".join(w.lines) + "\n"
    namespace = _namespace()
    for fmt, pack in w.structs.items():
        namespace[pack] = struct.Struct(fmt).pack
    for types, name in w.type_tuples.items():
        namespace[name] = types
    return compile_function(source, namespace, "binary writer"), namespace
