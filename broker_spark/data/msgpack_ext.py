"""The msgpack extension types of our record format, and the layouts both sides share.

Our compact msgpack format (see :mod:`~broker_spark.data.msgpack_records`) packs the
exact builtin types natively and every other Broker type as an extension type
with one of the codes below. This module holds only what the packer
(:mod:`~broker_spark.data.msgpack_pack`) and the unpacker
(:mod:`~broker_spark.data.msgpack_unpack`) must agree on.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from msgpack import ExtType

EXT_COUNT = 1
EXT_ADDRESS = 2
EXT_SUBNET = 3
EXT_PORT = 4
EXT_TIMESTAMP = 5
EXT_TIMESPAN = 6
EXT_ENUM = 7
EXT_SET = 8
EXT_FROZENSET = 9
EXT_FROZEN_TABLE = 10

MAX_NESTING = 64
"""How deep sets and frozen tables may nest inside each other (packing and unpacking).

Each level is a separate msgpack call, so this bound keeps both the Python
recursion and the C stack small even for hostile input. Vectors and tables do
not count: they are native msgpack containers, which the C code bounds by itself.
"""

TIME = struct.Struct(">qH")
"""Timestamps and timespans: microseconds, then the nanoseconds beyond them (0..999).

That is the split ``datetime`` already holds, so neither side multiplies or
divides; Broker's int64 nanoseconds always fit."""

WIDE_TIME_BYTES = 12
"""Nanoseconds as a signed 12-byte integer, for datetimes and timedeltas beyond int64 microseconds."""

PORT = struct.Struct(">HB")
U64 = struct.Struct(">Q")

# ExtType's own constructor validates its arguments in Python; ours are valid by
# construction, and building the namedtuple directly is three times faster.
new_tuple = tuple.__new__


def ext(code: int, data: bytes) -> ExtType:
    """An ``ExtType`` built without re-validating its (known good) fields."""
    return new_tuple(ExtType, (code, data))


UINT64_TAG = b"\xcf"
"""msgpack's tag of a 64-bit unsigned integer: the only way a plain ``int`` above
int64 can appear in a packed value (counts are extension types)."""

_INT64_MAX = (1 << 63) - 1


def beyond_int64(value: Any) -> int | None:
    """The first plain ``int`` (an integer, not a count) above int64 inside ``value``, if any.

    msgpack packs and unpacks such integers natively, without a hook, so both
    sides call this, but only when the packed bytes hold :data:`UINT64_TAG`
    at all (a byte search in C): the walk in Python is for the rare value.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is int:
            if item > _INT64_MAX:
                return item
        elif kind in (tuple, list, set, frozenset):
            stack.extend(item)
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
    return None


__all__ = [
    "EXT_ADDRESS",
    "EXT_COUNT",
    "EXT_ENUM",
    "EXT_FROZENSET",
    "EXT_FROZEN_TABLE",
    "EXT_PORT",
    "EXT_SET",
    "EXT_SUBNET",
    "EXT_TIMESPAN",
    "EXT_TIMESTAMP",
    "MAX_NESTING",
    "PORT",
    "TIME",
    "UINT64_TAG",
    "beyond_int64",
    "U64",
    "WIDE_TIME_BYTES",
    "ext",
    "new_tuple",
]
