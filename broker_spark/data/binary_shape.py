"""Layouts ("shapes") of binary-encoded values, the key to the compiled codecs.

A stream repeats a few layouts endlessly: every ``connection_established``
event has the same argument types in the same order, only the numbers and
the characters of its strings change. The compiled codecs
(:mod:`~broker_spark.data.binary_decode_fast`,
:mod:`~broker_spark.data.binary_encode_fast`) turn one layout into straight-line
Python, which is several times cheaper than walking the value element by
element. This module describes layouts and learns them.

A shape is one of:

- an ``int`` ``0..11``: a leaf of that tag (the decoder's view) or of that
  kind (the encoder's view, see :mod:`~broker_spark.data.binary_encode_fast`);
- ``(VEC, children)``: a vector of exactly ``len(children)`` (< 128) elements;
- ``(SET, elem)``: a set of any size below 128 whose elements are all the leaf
  ``elem`` (``None`` while only empty sets were seen);
- ``(TABLE, key, value)``: likewise a table of leaf keys and leaf values;
- :data:`ANY`: anything; the compiled code hands it to the general codec.

Learning only ever generalises (:func:`merge`): two layouts that differ
somewhere meet at :data:`ANY` there, so a key's compiled code is rebuilt at
most a handful of times and then stays. Shapes are bounded in depth and in
size, so a compiled function stays small and its element count far below any
decode limit.
"""

from __future__ import annotations

from typing import Any

from broker_spark.data.varbyte import read_varbyte

__all__ = [
    "ANY",
    "MAX_DEPTH",
    "MAX_NODES",
    "SET",
    "TABLE",
    "VEC",
    "compiled",
    "compile_function",
    "depth_of",
    "merge",
    "scan",
]

ANY = -1
VEC = "vec"
SET = "set"
TABLE = "table"

#: Containers nested deeper than this inside a shape are left to the general codec.
MAX_DEPTH = 16
#: Nodes per shape; the rest of a larger value is left to the general codec.
MAX_NODES = 256

Shape = Any

# Encoded size of each fixed-size leaf, by tag (strings and enums are variable).
_FIXED = {0: 1, 1: 2, 2: 9, 3: 9, 4: 9, 6: 17, 7: 18, 8: 4, 9: 9, 10: 9}


#: Compiled functions kept per codec (one per shape); the cache is emptied when full.
COMPILED_MAX = 256


def compiled(cache: dict[Shape, Any], shape: Shape, compile_shape: Any) -> Any:
    """``compile_shape(shape)``, remembered in ``cache`` (bounded by :data:`COMPILED_MAX`):
    many names and heads share a layout, and compiling costs far more than a lookup."""
    code = cache.get(shape)
    if code is None:
        if len(cache) >= COMPILED_MAX:
            cache.clear()
        code = cache[shape] = compile_shape(shape)
    return code


def compile_function(source: str, namespace: dict[str, Any], label: str) -> Any:
    """The code of the one function ``source`` defines, its globals being ``namespace``
    (which also keeps the source, under ``__source__``, for debugging and tests)."""
    namespace["__source__"] = source
    module: dict[str, Any] = {}
    exec(compile(source, f"<{label}>", "exec"), namespace, module)
    (function,) = module.values()
    return function.__code__


def merge(a: Shape, b: Shape) -> Shape:
    """The most specific shape that both ``a`` and ``b`` fit."""
    if a == b:
        return a
    if type(a) is tuple and type(b) is tuple and a[0] == b[0]:
        if a[0] == VEC and len(a[1]) == len(b[1]):
            return (VEC, tuple(map(merge, a[1], b[1])))
        if a[1:] == (None,) * (len(a) - 1):  # an empty set or table fits any other
            return b
        if b[1:] == (None,) * (len(b) - 1):
            return a
    return ANY


def depth_of(shape: Shape) -> int:
    """Containers on the deepest path of ``shape`` (a leaf or ANY is 0)."""
    if type(shape) is not tuple:
        return 0
    if shape[0] == VEC:
        return 1 + max(map(depth_of, shape[1]), default=0)
    return 1


def scan(buf: bytes, pos: int, skip: Any) -> Shape:
    """The shape of the valid encoded value at ``pos``.

    Call only on bytes the general decoder accepted. ``skip(buf, pos, depth)``
    returns the offset after the value at ``pos`` (used for parts left as ANY).
    """
    return _scan(buf, pos, 0, [0], skip, False)[0]


def _scan(
    buf: bytes, pos: int, depth: int, nodes: list[int], skip: Any, in_set: bool
) -> tuple[Shape, int]:
    nodes[0] += 1
    tag = buf[pos]
    size = _FIXED.get(tag)
    if size is not None:
        return tag, pos + size
    if tag == 5 or tag == 11:
        n, start = read_varbyte(buf, pos + 1)
        end = start + n
        if tag == 5:
            try:
                buf[start:end].decode()
            except UnicodeDecodeError:  # decodes as bytes: leave to the general codec
                return ANY, end
            if n >= 0x80 and in_set:  # sets hold only short strings inline
                return ANY, end
        return tag, end
    n, start = read_varbyte(buf, pos + 1)
    if n >= 0x80 or depth >= MAX_DEPTH or nodes[0] + n > MAX_NODES:
        return ANY, skip(buf, pos, depth)
    values = n if tag != 13 else n + n
    kids = []
    p = start
    for _ in range(values):
        kid, p = _scan(buf, p, depth + 1, nodes, skip, tag == 12)
        kids.append(kid)
    if tag == 14:
        return (VEC, tuple(kids)), p
    if tag == 12:
        shape = (SET, _one_leaf(kids))
    else:
        shape = (TABLE, _one_leaf(kids[0::2]), _one_leaf(kids[1::2]))
    return (ANY if ANY in shape else shape), p


def _one_leaf(shapes: list[Shape]) -> Shape:
    """The leaf all ``shapes`` share, None for none, ANY when they differ or nest."""
    kinds = set(shapes)
    if not kinds:
        return None
    if len(kinds) == 1:
        (kind,) = kinds
        if type(kind) is int and kind >= 0:
            return kind
    return ANY
