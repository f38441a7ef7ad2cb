"""Raw fields of Broker's store commands around encoded values: optionals, variants, bare timespans.

Store commands (WIRE.md, "Store commands") are CAF-inspected structs whose
fields are not all tagged Broker values: an ``optional<T>`` is a presence byte
and the value, a ``variant`` a one-byte alternative index, and an expiry a bare
int64 of nanoseconds. These helpers read and write those fields next to the
value codec, with the same error discipline (:class:`DecodeError` naming the
offset on bad input).
"""

from __future__ import annotations

import datetime as _dt
import struct
from collections.abc import Callable
from typing import Any

from broker_spark.data.binary_encode import encode_into
from broker_spark.data.types import Timespan, timespan_ns
from broker_spark.errors import DecodeError, EncodeError

__all__ = [
    "encode_optional",
    "encode_timespan_raw",
    "encode_variant_header",
    "read_optional",
    "read_timespan_raw",
    "read_variant_header",
]

_pack_raw_i64 = struct.Struct(">q").pack
_unpack_q = struct.Struct(">q").unpack_from


def encode_optional(
    value: Any, out: bytearray, encode_value: Callable[[Any, bytearray], None] = encode_into
) -> None:
    """Append an optional: u8 0 when ``value`` is None, else u8 1 and ``encode_value``."""
    if value is None:
        out.append(0)
    else:
        out.append(1)
        encode_value(value, out)


def read_optional(
    buf: bytes, pos: int, read_value: Callable[[bytes, int], tuple[Any, int]]
) -> tuple[Any, int]:
    """Read an optional written by :func:`encode_optional`; absent gives ``None``."""
    if pos >= len(buf):
        raise DecodeError(f"truncated optional at offset {pos}")
    flag = buf[pos]
    if flag == 0:
        return None, pos + 1
    if flag != 1:
        raise DecodeError(f"optional flag {flag} at offset {pos} is neither 0 nor 1")
    return read_value(buf, pos + 1)


def encode_variant_header(index: int, out: bytearray) -> None:
    """Append a variant's u8 alternative index."""
    if not 0 <= index <= 255:
        raise EncodeError(f"variant index out of range [0, 255]: {index}")
    out.append(index)


def read_variant_header(buf: bytes, pos: int, alternatives: int) -> tuple[int, int]:
    """Read a variant's u8 index; an index beyond ``alternatives`` is a DecodeError."""
    if pos >= len(buf):
        raise DecodeError(f"truncated variant at offset {pos}")
    index = buf[pos]
    if index >= alternatives:
        raise DecodeError(
            f"variant index {index} at offset {pos} (only {alternatives} alternatives)"
        )
    return index, pos + 1


def encode_timespan_raw(value: _dt.timedelta, out: bytearray) -> None:
    """Append a timespan as a bare i64 of nanoseconds (no tag), as store expiries travel."""
    ns = timespan_ns(value)
    try:
        out += _pack_raw_i64(ns)
    except struct.error:
        raise EncodeError(f"timespan out of the int64 nanosecond range: {value!r}") from None


def read_timespan_raw(buf: bytes, pos: int) -> tuple[Timespan, int]:
    """Read a bare i64 of nanoseconds as a :class:`Timespan`."""
    if pos + 8 > len(buf):
        raise DecodeError(f"truncated timespan at offset {pos}")
    return Timespan.from_ns(_unpack_q(buf, pos)[0]), pos + 8
