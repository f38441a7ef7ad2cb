"""Packing Broker values into our compact msgpack format (see :mod:`~broker_spark.data.msgpack_records`).

The packer runs with ``strict_types=True``, so the exact builtin types
(``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``list``, ``dict``)
are packed natively in C and everything else reaches ``default`` once: a
``tuple`` (a vector) becomes a list, every other Broker type an extension type.

``default`` is the per-value cost of this format, so the frequent types are
tested inline by exact type, and the extension objects of immutable leaves
that repeat in real traffic (small counts, addresses, ports, enum names) are
remembered in small bounded memos instead of being rebuilt.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import struct
import threading
from collections.abc import Callable, Mapping
from typing import Any

import msgpack
from msgpack import ExtType

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
    U64,
    UINT64_TAG,
    WIDE_TIME_BYTES,
    beyond_int64,
    ext,
    new_tuple,
)
from broker_spark.data.types import (
    UTC,
    Count,
    DataType,
    Enum,
    FrozenTable,
    Port,
    Timespan,
    Timestamp,
    as_aware,
    type_of,
)
from broker_spark.errors import EncodeError

__all__ = ["pack_value"]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = _dt.timedelta(microseconds=1)
_IPv4Address = ipaddress.IPv4Address
_IPv6Address = ipaddress.IPv6Address
_pack_time = TIME.pack
_pack_u64 = U64.pack

_PACKERS: list[msgpack.Packer] = []
"""Idle packers. A ``Packer`` is neither thread-safe nor re-entrant, and a set's
payload is packed while the outer packer is mid-value, so each pack borrows one
(``list.pop`` and ``append`` are atomic) and gives it back."""


def pack_value(value: Any) -> bytes:
    """Pack one Broker value; :class:`EncodeError` when it has no Broker type or is out of range.

    Integers must fit int64 (counts, uint64); absurdly deep nesting fails with
    :class:`EncodeError` rather than exhausting the stack.
    """
    try:
        packed = _pack(value)
        if UINT64_TAG in packed:
            big = beyond_int64(value)
            if big is not None:
                raise ValueError(f"integer out of int64 range: {big}")
        return packed
    except EncodeError:
        raise
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise EncodeError(f"cannot pack value: {type(exc).__name__}: {exc}") from None


def _pack(value: Any) -> bytes:
    try:
        packer = _PACKERS.pop()
    except IndexError:
        packer = msgpack.Packer(strict_types=True, default=_default, use_bin_type=True)
    try:
        return packer.pack(value)
    finally:
        _PACKERS.append(packer)


# Small counts (message envelopes, versions, flags) are by far the most frequent.
_SMALL_COUNTS = [ext(EXT_COUNT, bytes((i,))) for i in range(256)]

_MEMO_LIMIT = 4096
_MEMO_NAME_MAX = 128  # longer enum names are not remembered, so memos stay small
_V4_EXTS: dict[int, ExtType] = {}
_PORT_EXTS: dict[int, ExtType] = {}
_ENUM_EXTS: dict[str, ExtType] = {}


def _remember(memo: dict, key: Any, value: ExtType) -> ExtType:
    if len(memo) >= _MEMO_LIMIT:
        memo.clear()
    memo[key] = value
    return value


def _time_bytes(micros: int, nanos: int) -> bytes:
    if 0 <= nanos < 1000:
        try:
            return _pack_time(micros, nanos)
        except struct.error:
            pass
    return (micros * 1000 + nanos).to_bytes(WIDE_TIME_BYTES, "big", signed=True)


def _enc_count(value: int) -> ExtType:
    if 0 <= value < 256:
        return _SMALL_COUNTS[value]
    try:
        return new_tuple(ExtType, (EXT_COUNT, _pack_u64(value)))
    except struct.error:
        raise EncodeError(f"count out of range [0, 2**64-1]: {int(value)}") from None


def _enc_address4(value: ipaddress.IPv4Address) -> ExtType:
    return _V4_EXTS.get(value._ip) or _remember(
        _V4_EXTS, value._ip, ext(EXT_ADDRESS, value._ip.to_bytes(4, "big"))
    )


def _enc_address6(value: ipaddress.IPv6Address) -> ExtType:
    return ext(EXT_ADDRESS, value.packed)


def _enc_subnet(value: ipaddress.IPv4Network | ipaddress.IPv6Network) -> ExtType:
    return ext(EXT_SUBNET, value.network_address.packed + bytes((value.prefixlen,)))


def _enc_port(value: Port) -> ExtType:
    key = value._number << 2 | value._proto
    return _PORT_EXTS.get(key) or _remember(
        _PORT_EXTS, key, ext(EXT_PORT, PORT.pack(value._number, value._proto))
    )


def _enc_timestamp(value: _dt.datetime) -> ExtType:
    nanos = getattr(value, "_nanos", 0)
    if value.tzinfo is None:  # naive: local time, as everywhere in the data model
        value = as_aware(value)
    return new_tuple(ExtType, (EXT_TIMESTAMP, _time_bytes((value - _EPOCH) // _ONE_US, nanos)))


def _enc_timespan(value: _dt.timedelta) -> ExtType:
    data = _time_bytes(value // _ONE_US, getattr(value, "_nanos", 0))
    return new_tuple(ExtType, (EXT_TIMESPAN, data))


def _enc_enum(value: Enum) -> ExtType:
    name = value.name
    found = _ENUM_EXTS.get(name)
    if found is not None:
        return found
    made = ext(EXT_ENUM, name.encode())
    return _remember(_ENUM_EXTS, name, made) if len(name) <= _MEMO_NAME_MAX else made


class _Nesting(threading.local):
    depth = 0


_nesting = _Nesting()


def _pack_nested(code: int, payload: Any) -> ExtType:
    """An extension container's payload, packed with the same bound the decoder applies."""
    state = _nesting
    depth = state.depth
    if depth >= MAX_NESTING:
        raise EncodeError(f"sets and tables nested deeper than {MAX_NESTING} levels")
    state.depth = depth + 1
    try:
        return new_tuple(ExtType, (code, _pack(payload)))
    finally:
        state.depth = depth


def _enc_set(value: set) -> ExtType:
    return _pack_nested(EXT_SET, list(value))


def _enc_frozenset(value: frozenset) -> ExtType:
    return _pack_nested(EXT_FROZENSET, list(value))


def _enc_frozen_table(value: Mapping) -> ExtType:
    return _pack_nested(EXT_FROZEN_TABLE, dict(value.items()))


_ENCODERS: dict[type, Callable[[Any], Any]] = {
    _IPv4Address: _enc_address4,
    _IPv6Address: _enc_address6,
    ipaddress.IPv4Network: _enc_subnet,
    ipaddress.IPv6Network: _enc_subnet,
    Port: _enc_port,
    Timestamp: _enc_timestamp,
    _dt.datetime: _enc_timestamp,
    Timespan: _enc_timespan,
    _dt.timedelta: _enc_timespan,
    Enum: _enc_enum,
    set: _enc_set,
    frozenset: _enc_frozenset,
    FrozenTable: _enc_frozen_table,
}

_NATIVE = frozenset({type(None), bool, int, float, str, bytes, list, dict})


def _default(value: Any) -> Any:
    """msgpack's hook for everything that is not an exact native type.

    Vectors, counts and decoded UTC timestamps are the most frequent by far, so
    they are handled inline (each Python call saved here is measurable per message).
    """
    cls = type(value)
    if cls is tuple:
        return list(value)
    if cls is Count:
        if 0 <= value < 256:
            return _SMALL_COUNTS[value]
        return _enc_count(value)
    if cls is Timestamp and value.tzinfo is UTC:
        try:
            nanos = value._nanos
        except AttributeError:
            nanos = 0
        return new_tuple(ExtType, (EXT_TIMESTAMP, _time_bytes((value - _EPOCH) // _ONE_US, nanos)))
    if cls is _IPv4Address:
        return _V4_EXTS.get(value._ip) or _enc_address4(value)
    try:
        enc = _ENCODERS[cls]
    except KeyError:
        return _fallback(value)
    return enc(value)


def _fallback(value: Any) -> Any:
    """Subclasses, ABCs and wrappers: reduce to a native value or an extension type.

    msgpack calls ``default`` only once per object, so whatever we return must
    be packable without another call.
    """
    unwrap = getattr(value, "_broker_value", None)
    if unwrap is not None:
        inner = unwrap()
        return inner if type(inner) in _NATIVE else _default(inner)
    try:
        tag = type_of(value)
    except TypeError as exc:
        raise EncodeError(str(exc)) from None
    if tag is DataType.Boolean:
        return bool(value)
    if tag is DataType.Count:
        return _enc_count(value)
    if tag is DataType.Integer:
        return int(value)
    if tag is DataType.Real:
        return float(value)
    if tag is DataType.String:
        return str.__str__(value) if isinstance(value, str) else bytes(value)
    if tag is DataType.Address:
        return _enc_address4(value) if value.version == 4 else _enc_address6(value)
    if tag is DataType.Subnet:
        return _enc_subnet(value)
    if tag is DataType.Port:
        return _enc_port(value)
    if tag is DataType.EnumValue:
        return _enc_enum(value)
    if tag is DataType.Timestamp:
        return _enc_timestamp(value)
    if tag is DataType.Timespan:
        return _enc_timespan(value)
    if tag is DataType.Set:
        return _enc_frozenset(value) if isinstance(value, frozenset) else _enc_set(value)
    if tag is DataType.Table:
        # A mapping that is not a dict may be serving as a key: keep it hashable.
        return _enc_frozen_table(value)
    if tag is DataType.Vector:
        return list(value)
    raise EncodeError(f"cannot pack {type(value).__name__} value {value!r}")
