"""Decoding Broker's native binary encoding of values (WIRE.md, "Values").

Every delivery is decoded once, so this is on the hot path and written for
CPython speed. A container's elements are read by one loop that handles every
leaf type inline (no function call, no ``(value, offset)`` tuple per element)
and stores them into a list sized in advance; only a nested container costs a
call. The loop is a closure made once per :class:`DecodeLimits`, so the limits
are read from cells rather than attributes.

This is the reference decoder: it defines every value and every error, and
knows nothing of the readers compiled for the layouts a stream repeats
(:mod:`~broker_spark.data.binary_decode_fast`, which builds on the helpers
here). :mod:`~broker_spark.data.binary_read` holds the ``decode`` that tries a
compiled reader first and falls back to this module's; the public face
(:mod:`~broker_spark.data.binary`) exports that one.

Leaves that repeat and are immutable are shared instead of rebuilt: small
counts, and addresses, ports and enum values through small caches keyed by
their encoded bytes (emptied when full). Building an ``ipaddress`` object or
an :class:`Enum` costs several times a dict lookup, and Zeek traffic repeats
a few hosts, services and enum names endlessly.

Decoding trusts nothing. Every size is checked against :class:`DecodeLimits`
and against the bytes that remain *before* anything is allocated (each element
takes at least one byte, so a count larger than the rest of the buffer is
impossible), nesting is bounded, and whatever goes wrong surfaces as a
:class:`DecodeError` naming what and where, never as another exception type.

Choices where the wire format is silent or Python's model differs:

- A subnet whose address has host bits set is built with ``strict=False``: the
  host bits are cleared, so re-encoding it gives the masked network.
- A subnet with an IPv4-mapped (``::ffff:0:0/96``) address and a stored length
  below 96 has no meaning in Broker (its IPv4 length would be negative): rejected.
- An IPv6 address or subnet inside ``::ffff:0:0/96`` decodes as IPv4, as in Broker.
- A string that is not valid UTF-8 decodes as ``bytes``; an enum name must be UTF-8.
- Elements of sets and keys of tables decode hashable all the way down
  (set -> frozenset, table -> :class:`FrozenTable`, vector -> tuple).
- Python merges equal values of different Broker types in a set or as table
  keys (``Count(1) == 1 == True``); a received set holding both keeps one.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker_spark.data.types import Count, Enum, Port, Timespan, Timestamp, new_timedelta
from broker_spark.data.value import freeze
from broker_spark.data.varbyte import read_varbyte
from broker_spark.errors import DecodeError

__all__ = [
    "DEFAULT_LIMITS",
    "DecodeLimits",
    "decode_from",
    "reference_decode",
    "reference_decode_bytes",
]


@dataclass(frozen=True)
class DecodeLimits:
    """Bounds a decoder enforces before spending memory on untrusted input.

    ``max_items`` bounds the elements of all containers of one value together:
    a one- or two-byte element can cost a few hundred bytes as a Python object
    (an empty ``set`` is 216 bytes), so the input size alone does not bound memory.
    """

    max_depth: int = 64
    max_container: int = 1 << 20
    max_string: int = 1 << 24
    max_items: int = 1 << 21


DEFAULT_LIMITS = DecodeLimits()

_IPv4Address = ipaddress.IPv4Address
_IPv6Address = ipaddress.IPv6Address
_IPv4Network = ipaddress.IPv4Network
_IPv6Network = ipaddress.IPv6Network

_unpack_q = struct.Struct(">q").unpack_from
_unpack_Q = struct.Struct(">Q").unpack_from
_unpack_d = struct.Struct(">d").unpack_from
_unpack_QQ = struct.Struct(">QQ").unpack_from
_unpack_QQB = struct.Struct(">QQB").unpack_from
_unpack_HB = struct.Struct(">HB").unpack_from

# An IPv4-mapped address: upper 64 bits zero, lower 64 bits 0000:ffff:a.b.c.d.
_V4_MAPPED = 0xFFFF_0000_0000
_V4_MASK = 0xFFFF_FFFF_0000_0000

_new_int = int.__new__
_SMALL_COUNTS = tuple(Count(i) for i in range(256))
_ts_from_ns = Timestamp.from_ns
_Timespan = Timespan
_new_timedelta = new_timedelta

_CACHE_SIZE = 4096
_CACHED_NAME_MAX = 128  # longer enum names are not remembered, so caches stay small
_ADDRESSES: dict[bytes, Any] = {}
_PORTS: dict[bytes, Port] = {}
_ENUMS: dict[bytes, Enum] = {}

_RANGES = tuple(range(n) for n in range(256))
_CONTAINER_NAMES = {12: "set", 13: "table", 14: "vector"}


def reference_decode(
    buf: bytes | bytearray | memoryview,
    limits: DecodeLimits = DEFAULT_LIMITS,
    *,
    offset: int = 0,
) -> Any:
    """Decode exactly one value that fills ``buf`` from ``offset`` to its end, by the reference.

    Trailing bytes are an error. ``offset`` lets a caller decode the payload of
    an envelope body in place (``decode(msg.body, offset=msg.payload_offset)``).
    Never tries a compiled reader (:func:`broker_spark.data.binary.decode` does).
    """
    if type(buf) is not bytes:
        buf = bytes(buf)
    return reference_decode_bytes(buf, limits, offset)


def reference_decode_bytes(buf: bytes, limits: DecodeLimits, offset: int) -> Any:
    """:func:`reference_decode` of a buffer that is ``bytes`` already (also the dispatcher's fallback)."""
    if not 0 <= offset < len(buf):
        raise DecodeError(f"no value at offset {offset} of a {len(buf)}-byte buffer")
    size = len(buf) - offset
    if size == 9:
        # A lone integer, count or real (a message carrying one number): no reader needed.
        tag = buf[offset]
        if tag == 3:
            return _unpack_q(buf, offset + 1)[0]
        if tag == 2:
            value = _unpack_Q(buf, offset + 1)[0]
            return _SMALL_COUNTS[value] if value < 256 else _new_int(Count, value)
        if tag == 4:
            return _unpack_d(buf, offset + 1)[0]
    read = _DEFAULT_READ if limits is DEFAULT_LIMITS else _reader(limits)
    budget = None if size * size <= limits.max_items else [limits.max_items]
    try:
        n = buf[offset + 1] if buf[offset] == 14 and size > 1 else 0
        if (
            0 < n < 0x80
            and n <= size - 2
            and budget is None
            and n <= limits.max_container
            and limits.max_depth > 0
        ):
            # The usual message, a short vector that cannot break the limits (a
            # budget is needed only for large inputs): read its elements directly.
            items, pos = read(buf, offset + 2, n, 1, None)
            value = tuple(items)
        else:
            items, pos = read(buf, offset, 1, 0, budget)
            value = items[0]
    except Exception as exc:
        raise _decode_error(exc, buf) from None
    if pos != len(buf):
        raise DecodeError(f"trailing bytes at offset {pos} ({len(buf) - pos} after the value)")
    return value


def decode_from(
    buf: bytes | bytearray | memoryview, pos: int = 0, limits: DecodeLimits = DEFAULT_LIMITS
) -> tuple[Any, int]:
    """Decode one value starting at ``pos``; return ``(value, pos_after)``.

    A buffer that is not ``bytes`` is copied once, so pass ``bytes`` when
    calling repeatedly on one large buffer.
    """
    if type(buf) is not bytes:
        buf = bytes(buf)
    if not 0 <= pos < len(buf):
        raise DecodeError(f"no value at offset {pos} of a {len(buf)}-byte buffer")
    read = _DEFAULT_READ if limits is DEFAULT_LIMITS else _reader(limits)
    size = len(buf) - pos
    budget = None if size * size <= limits.max_items else [limits.max_items]
    try:
        items, pos = read(buf, pos, 1, 0, budget)
    except Exception as exc:
        raise _decode_error(exc, buf) from None
    return items[0], pos


def _decode_error(exc: Exception, buf: bytes) -> Exception:
    """Translate whatever a malformed buffer raised into a :class:`DecodeError`."""
    if isinstance(exc, DecodeError):
        return exc
    if isinstance(exc, (IndexError, struct.error)):
        return DecodeError(f"truncated value: the buffer ends at offset {len(buf)}")
    if isinstance(exc, (ValueError, OverflowError, TypeError, RecursionError)):
        return DecodeError(f"malformed value: {exc}")
    return exc


_Reader = Callable[[bytes, int, int, int, list], tuple[list, int]]
_READERS: dict[DecodeLimits, _Reader] = {}


def _reader(limits: DecodeLimits) -> _Reader:
    """The element reader for ``limits`` (made once per distinct limits)."""
    read = _READERS.get(limits)
    if read is None:
        if len(_READERS) >= 64:
            _READERS.clear()
        read = _READERS[limits] = _make_reader(limits)
    return read


def _make_reader(limits: DecodeLimits) -> _Reader:
    """Build the function that reads ``n`` consecutive values, under ``limits``.

    ``read_items(buf, pos, n, depth, budget)`` returns the values as a list and
    the offset after them. ``depth`` counts the containers around them and
    ``budget`` is a one-element list holding how many more container elements
    this value may have (shared by the whole recursion), or None when the input
    is too small to exceed ``max_items``: every element has a tag byte of its
    own, so an input of ``L`` bytes holds at most ``L`` containers declaring
    fewer than ``L`` elements each, and ``L * L <= max_items`` makes counting moot.
    """
    max_depth = limits.max_depth
    max_container = limits.max_container
    max_string = limits.max_string
    short = max_string if max_string < 0x80 else 0x7F  # lengths read from one byte

    def read_items(
        buf: bytes, pos: int, n: int, depth: int, budget: list[int] | None
    ) -> tuple[list, int]:
        items: list[Any] = [None] * n
        end = len(buf)
        # Tags are tested as a two-level tree, each level in order of frequency in
        # Zeek traffic, so a typical element costs two or three comparisons.
        for i in _RANGES[n] if n < 256 else range(n):
            tag = buf[pos]
            if tag < 6:
                if tag == 5:  # string
                    size = buf[pos + 1]
                    if size <= short:
                        start = pos + 2
                        pos = start + size
                        if pos > end:
                            raise _bad_string(start, size, end, max_string)
                        raw = buf[start:pos]
                    else:
                        raw, pos = _read_bytes(buf, pos + 1, max_string)
                    try:
                        items[i] = raw.decode()
                    except UnicodeDecodeError:
                        items[i] = raw
                elif tag == 2:  # count
                    value = _unpack_Q(buf, pos + 1)[0]
                    items[i] = _SMALL_COUNTS[value] if value < 256 else _new_int(Count, value)
                    pos += 9
                elif tag == 0:  # none (the list already holds it)
                    pos += 1
                elif tag == 3:  # integer
                    items[i] = _unpack_q(buf, pos + 1)[0]
                    pos += 9
                elif tag == 4:  # real
                    items[i] = _unpack_d(buf, pos + 1)[0]
                    pos += 9
                else:  # boolean
                    b = buf[pos + 1]
                    if b > 1:
                        raise DecodeError(
                            f"boolean byte {b} at offset {pos + 1} is neither 0 nor 1"
                        )
                    items[i] = b == 1
                    pos += 2
            elif tag >= 12:  # vector, set, table
                if tag > 14:
                    raise DecodeError(f"unknown value tag {tag} at offset {pos}")
                start = pos
                size = buf[pos + 1]
                if size < 0x80:
                    pos += 2
                else:
                    size, pos = read_varbyte(buf, pos + 1)
                if tag == 14:  # vector
                    if depth >= max_depth or size > end - pos or size > max_container:
                        raise _bad_size(start, size, end - pos, depth, tag, limits)
                    if not size:
                        items[i] = ()
                        continue
                    if budget is not None:
                        budget[0] -= size
                        if budget[0] < 0:
                            raise _bad_size(start, size, end - pos, depth, tag, limits)
                    inner, pos = read_items(buf, pos, size, depth + 1, budget)
                    items[i] = tuple(inner)
                    continue
                values = size if tag == 12 else size + size  # a table entry is two values
                if depth >= max_depth or values > end - pos or size > max_container:
                    raise _bad_size(start, size, end - pos, depth, tag, limits)
                if not size:
                    items[i] = set() if tag == 12 else {}
                    continue
                if budget is not None:
                    budget[0] -= size
                    if budget[0] < 0:
                        raise _bad_size(start, size, end - pos, depth, tag, limits)
                inner, pos = read_items(buf, pos, values, depth + 1, budget)
                if tag == 12:
                    try:
                        items[i] = set(inner)
                    except TypeError:  # an element is or holds a set or table: freeze
                        items[i] = {freeze(v) for v in inner}
                else:
                    items[i] = _make_table(inner)
            elif tag == 6:  # address
                raw = buf[pos + 1 : pos + 17]
                addr = _ADDRESSES.get(raw)
                items[i] = addr if addr is not None else _new_address(raw)
                pos += 17
            elif tag == 8:  # port
                raw = buf[pos + 1 : pos + 4]
                port = _PORTS.get(raw)
                items[i] = port if port is not None else _new_port(raw, pos + 1)
                pos += 4
            elif tag == 9:  # timestamp
                items[i] = _ts_from_ns(_unpack_q(buf, pos + 1)[0])
                pos += 9
            elif tag == 10:  # timespan
                ns = _unpack_q(buf, pos + 1)[0]
                micros, nanos = divmod(ns, 1000)
                span = _new_timedelta(_Timespan, 0, 0, micros)
                span._nanos = nanos
                span._ns = ns
                items[i] = span
                pos += 9
            elif tag == 11:  # enum value
                size = buf[pos + 1]
                if size <= short:
                    start = pos + 2
                    pos = start + size
                    if pos > end:
                        raise _bad_string(start, size, end, max_string)
                    raw = buf[start:pos]
                else:
                    raw, pos = _read_bytes(buf, pos + 1, max_string)
                enum = _ENUMS.get(raw)
                items[i] = enum if enum is not None else _new_enum(raw, pos)
            else:  # subnet
                items[i] = _read_subnet(buf, pos + 1)
                pos += 18
        return items, pos

    return read_items


def _make_table(items: list[Any]) -> dict[Any, Any]:
    keys = items[0::2]
    try:
        return dict(zip(keys, items[1::2], strict=True))
    except TypeError:  # a key is a set, a table or holds one: freeze it
        return dict(zip(map(freeze, keys), items[1::2], strict=True))


def _read_bytes(buf: bytes, pos: int, max_string: int) -> tuple[bytes, int]:
    """A string's raw bytes at ``pos`` (its varbyte length), within the limit."""
    n, pos = read_varbyte(buf, pos)
    stop = pos + n
    if n > max_string or stop > len(buf):
        raise _bad_string(pos, n, len(buf), max_string)
    return buf[pos:stop], stop


def _bad_string(pos: int, n: int, end: int, max_string: int) -> DecodeError:
    if n > max_string:
        return DecodeError(f"string at offset {pos} of {n} bytes exceeds the limit of {max_string}")
    return DecodeError(f"truncated string at offset {pos}: need {n} bytes, have {end - pos}")


def _bad_size(
    start: int, n: int, left: int, depth: int, tag: int, limits: DecodeLimits
) -> DecodeError:
    where = f"{_CONTAINER_NAMES[tag]} at offset {start}"
    if depth >= limits.max_depth:
        return DecodeError(f"{where} nested deeper than {limits.max_depth} containers")
    if n > limits.max_container:
        return DecodeError(
            f"{where} declares {n} elements, above the limit of {limits.max_container}"
        )
    if (n + n if tag == 13 else n) > left:
        return DecodeError(f"{where} declares {n} elements but only {left} bytes remain")
    return DecodeError(f"{where} goes beyond the limit of {limits.max_items} elements in one value")


def _remember(cache: dict[bytes, Any], raw: bytes, value: Any) -> Any:
    if len(cache) >= _CACHE_SIZE:
        cache.clear()
    cache[raw] = value
    return value


def _new_address(raw: bytes) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """Build (and remember) the address for 16 bytes that missed the cache."""
    hi, lo = _unpack_QQ(raw)  # struct.error (truncated) when fewer than 16 bytes remain
    if hi == 0 and lo & _V4_MASK == _V4_MAPPED:
        return _remember(_ADDRESSES, raw, _IPv4Address(lo & 0xFFFF_FFFF))
    return _remember(_ADDRESSES, raw, _IPv6Address(hi << 64 | lo))


def _new_port(raw: bytes, pos: int) -> Port:
    """Build (and remember) the port for 3 bytes that missed the cache."""
    number, proto = _unpack_HB(raw)
    if proto > 3:
        raise DecodeError(f"unknown port protocol {proto} at offset {pos + 2}")
    return _remember(_PORTS, raw, Port(number, proto))


def _new_enum(raw: bytes, pos: int) -> Enum:
    """Build (and remember) the enum value for a name that missed the cache."""
    try:
        name = raw.decode()
    except UnicodeDecodeError:
        raise DecodeError(f"enum name before offset {pos} is not valid UTF-8") from None
    enum = Enum(name)
    return _remember(_ENUMS, raw, enum) if len(raw) <= _CACHED_NAME_MAX else enum


def _read_subnet(buf: bytes, pos: int) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    hi, lo, length = _unpack_QQB(buf, pos)
    if hi == 0 and lo & _V4_MASK == _V4_MAPPED:
        if not 96 <= length <= 128:
            raise DecodeError(f"IPv4 subnet length {length} (stored) at offset {pos + 16}")
        return _IPv4Network((lo & 0xFFFF_FFFF, length - 96), strict=False)
    if length > 128:
        raise DecodeError(f"IPv6 subnet length {length} at offset {pos + 16} above 128")
    return _IPv6Network((hi << 64 | lo, length), strict=False)


_DEFAULT_READ = _make_reader(DEFAULT_LIMITS)
