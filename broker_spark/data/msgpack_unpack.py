"""Unpacking our compact msgpack format back into Broker values (see :mod:`~broker_spark.data.msgpack_records`).

msgpack's C unpacker does the structure; every extension type reaches
``ext_hook``, one Python call each, so the hook handles the frequent ones
(small counts, timestamps) inline and serves immutable leaves that repeat in
real traffic (addresses, ports, enum names, subnets) from small memos keyed by
their payload. Arrays decode as tuples (``use_list=False``): every vector is a
tuple, and no other Broker type uses arrays.

Nothing is trusted: ``unpackb`` bounds every length by the input's size,
nesting of extension containers is bounded by :data:`MAX_NESTING`, and any
malformation raises :class:`DecodeError` naming what was wrong.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

import msgpack

from broker_spark.data.msgpack_ext import (
    EXT_ADDRESS,
    EXT_COUNT,
    EXT_ENUM,
    EXT_FROZEN_TABLE,
    EXT_FROZENSET,
    EXT_PORT,
    EXT_SET,
    EXT_SUBNET,
    EXT_TIMESPAN,
    EXT_TIMESTAMP,
    MAX_NESTING,
    PORT,
    TIME,
    UINT64_TAG,
    WIDE_TIME_BYTES,
    beyond_int64,
)
from broker_spark.data.types import Count, Enum, FrozenTable, Port, Timespan, Timestamp
from broker_spark.errors import DecodeError

__all__ = ["unpack_value"]


def unpack_value(data: bytes | bytearray | memoryview) -> Any:
    """Unpack one value packed by :func:`pack_value`; only :class:`DecodeError` escapes."""
    try:
        value = _unpack(data, 0)
    except DecodeError:
        raise
    except Exception as exc:  # msgpack, hashing, unicode, range: all mean malformed input
        raise DecodeError(f"malformed packed value: {type(exc).__name__}: {exc}") from None
    if UINT64_TAG in data:
        big = beyond_int64(value)
        if big is not None:
            raise DecodeError(f"malformed packed value: integer out of int64 range: {big}")
    return value


_SHALLOW = 4
"""Nesting levels decoded with ``unpackb``, whose parser state (about 40 KiB)
lives on the C stack; deeper levels use an ``Unpacker`` object, whose state
lives on the heap, so even ``MAX_NESTING`` levels fit a small thread stack."""


def _unpack(data: Any, depth: int) -> Any:
    # unpackb bounds every length by the input's size. msgpack's own timestamp
    # extension (-1) never reaches ext_hook; timestamp=3 turns it into a UTC
    # datetime, which is at least a Broker timestamp.
    if depth < _SHALLOW:
        return msgpack.unpackb(
            data,
            ext_hook=_EXT_HOOKS[depth],
            use_list=False,
            strict_map_key=False,
            raw=False,
            timestamp=3,
        )
    unpacker = msgpack.Unpacker(
        None,
        ext_hook=_EXT_HOOKS[depth],
        use_list=False,
        strict_map_key=False,
        raw=False,
        timestamp=3,
        max_buffer_size=max(len(data), 1),
    )
    unpacker.feed(data)
    value = unpacker.unpack()
    if unpacker.tell() != len(data):
        raise DecodeError("extra bytes after a nested value")
    return value


_TIME_SIZE = TIME.size
_unpack_time = TIME.unpack
_ts_from_ns = Timestamp.from_ns
_new_int = int.__new__
_COUNT_VALUES = [Count(i) for i in range(256)]


def _dec_count(data: bytes) -> Count:
    if not 1 <= len(data) <= 8:
        raise DecodeError(f"count extension of {len(data)} bytes (expected 1 to 8)")
    # Eight bytes cannot exceed Count's range, so skip its validating constructor.
    return _new_int(Count, int.from_bytes(data, "big"))


def _dec_address(data: bytes) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if len(data) == 4:
        return ipaddress.IPv4Address(data)
    if len(data) == 16:
        return ipaddress.IPv6Address(data)
    raise DecodeError(f"address extension of {len(data)} bytes (expected 4 or 16)")


def _dec_subnet(data: bytes) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    if len(data) == 5:
        cls: Any = ipaddress.IPv4Network
    elif len(data) == 17:
        cls = ipaddress.IPv6Network
    else:
        raise DecodeError(f"subnet extension of {len(data)} bytes (expected 5 or 17)")
    try:
        return cls((data[:-1], data[-1]))
    except ValueError as exc:
        raise DecodeError(f"bad subnet extension: {exc}") from None


def _dec_port(data: bytes) -> Port:
    if len(data) != 3:
        raise DecodeError(f"port extension of {len(data)} bytes (expected 3)")
    number, proto = PORT.unpack(data)
    try:
        return Port(number, proto)
    except ValueError as exc:
        raise DecodeError(f"bad port extension: {exc}") from None


def _time_ns(data: bytes, what: str) -> int:
    """The nanoseconds a timestamp or timespan extension holds."""
    if len(data) == _TIME_SIZE:
        micros, nanos = _unpack_time(data)
        if nanos < 1000:
            return micros * 1000 + nanos
        raise DecodeError(f"{what} extension with {nanos} nanoseconds beyond the microsecond")
    if len(data) == WIDE_TIME_BYTES:
        return int.from_bytes(data, "big", signed=True)
    raise DecodeError(f"{what} extension of {len(data)} bytes (expected {_TIME_SIZE} or 12)")


def _dec_timestamp(data: bytes) -> Timestamp:
    ns = _time_ns(data, "timestamp")
    try:
        return _ts_from_ns(ns)
    except (OverflowError, ValueError):
        raise DecodeError(f"timestamp out of range: {ns}ns") from None


def _dec_timespan(data: bytes) -> Timespan:
    ns = _time_ns(data, "timespan")
    try:
        return Timespan.from_ns(ns)
    except (OverflowError, ValueError):
        raise DecodeError(f"timespan out of range: {ns}ns") from None


def _dec_enum(data: bytes) -> Enum:
    try:
        return Enum(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise DecodeError("enum name is not UTF-8") from None


_MEMO_LIMIT = 4096
_MEMO_KEY_MAX = 128
_MEMOS: dict[int, dict[bytes, Any]] = {EXT_ADDRESS: {}, EXT_SUBNET: {}, EXT_PORT: {}, EXT_ENUM: {}}
"""Decoded immutable leaves by payload, per extension code.

Addresses, ports and enum names repeat heavily in real traffic (a handful of
hosts and services, a few dozen enum names), and building them is the costly
part of decoding them. The values are immutable, so sharing them is safe; each
memo is simply emptied when it reaches ``_MEMO_LIMIT`` entries."""


def _memoized(code: int, decode: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    memo = _MEMOS[code]

    def decode_and_remember(data: bytes) -> Any:
        value = decode(data)
        if len(data) <= _MEMO_KEY_MAX:  # long payloads (enum names) are not remembered
            if len(memo) >= _MEMO_LIMIT:
                memo.clear()
            memo[bytes(data)] = value
        return value

    return decode_and_remember


_LEAF_DECODERS: dict[int, Callable[[bytes], Any]] = {
    EXT_COUNT: _dec_count,
    EXT_ADDRESS: _memoized(EXT_ADDRESS, _dec_address),
    EXT_SUBNET: _memoized(EXT_SUBNET, _dec_subnet),
    EXT_PORT: _memoized(EXT_PORT, _dec_port),
    EXT_TIMESTAMP: _dec_timestamp,
    EXT_TIMESPAN: _dec_timespan,
    EXT_ENUM: _memoized(EXT_ENUM, _dec_enum),
}
_get_memo = _MEMOS.get
_get_leaf_decoder = _LEAF_DECODERS.get


def _dec_container(code: int, data: bytes, depth: int) -> Any:
    if code not in (EXT_SET, EXT_FROZENSET, EXT_FROZEN_TABLE):
        raise DecodeError(f"unknown extension type {code}")
    if depth >= MAX_NESTING:
        raise DecodeError(f"sets and tables nested deeper than {MAX_NESTING} levels")
    inner = _unpack(data, depth + 1)
    if code == EXT_FROZEN_TABLE:
        if type(inner) is not dict:
            raise DecodeError("frozen table extension does not hold a map")
        return FrozenTable(inner)
    if type(inner) is not tuple:
        raise DecodeError("set extension does not hold an array")
    return set(inner) if code == EXT_SET else frozenset(inner)


def _make_ext_hook(depth: int) -> Callable[[int, bytes], Any]:
    """The ``ext_hook`` for one nesting level: the level travels in the closure,
    which keeps decoding thread-safe and re-entrant without shared state."""

    def ext_hook(code: int, data: bytes) -> Any:
        # Counts and timestamps are inlined: they are the most frequent extensions.
        if code == EXT_COUNT and len(data) == 1:
            return _COUNT_VALUES[data[0]]
        if code == EXT_TIMESTAMP and len(data) == _TIME_SIZE:
            micros, nanos = _unpack_time(data)
            if nanos < 1000:
                return _ts_from_ns(micros * 1000 + nanos)
        memo = _get_memo(code)
        if memo is not None:
            value = memo.get(data)
            if value is not None:
                return value
        dec = _get_leaf_decoder(code)
        if dec is not None:
            return dec(data)
        return _dec_container(code, data, depth)

    return ext_hook


_EXT_HOOKS = [_make_ext_hook(depth) for depth in range(MAX_NESTING + 1)]
