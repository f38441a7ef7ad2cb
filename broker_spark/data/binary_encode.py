"""Encoding values in Broker's native binary format (WIRE.md, "Values"), byte for byte.

Every publication is encoded once, so this is on the hot path and written for
CPython speed: the elements of a container are encoded by one loop that tests
the exact type of each against the frequent types in order of frequency and
handles those inline (no call per element); everything else dispatches through
a dict keyed by exact type. Fixed-size values go out through precompiled
:class:`struct.Struct` packers, tags with short lengths come from tables, and
the encodings of immutable leaves that repeat (enum names, short strings,
IPv4 addresses) from small bounded memos. Output accumulates in one
``bytearray``. Sets of strings, the usual kind, are put in canonical order by
one ``sorted`` call.

This is the reference encoder: it defines the bytes of every value and every
error, and knows nothing of the writers compiled for the layouts a stream
repeats (:mod:`~broker_spark.data.binary_encode_fast`, which builds on the
helpers here). :mod:`~broker_spark.data.binary_write` holds the ``encode``
that tries a compiled writer first and falls back to this module's; the
public face (:mod:`~broker_spark.data.binary`) exports that one.

Encoding is canonical: sets and tables are written in Broker's order (type
tag, then value), so equal values always give equal bytes.

Values out of range raise :class:`EncodeError` (a ``ValueError``) and values
without a Broker type ``TypeError``, both naming the value.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import struct
from collections.abc import Callable, Mapping
from typing import Any

from broker_spark.data.types import (
    UTC,
    Count,
    Enum,
    FrozenTable,
    Port,
    Timespan,
    Timestamp,
    sorted_values,
    timespan_ns,
    timestamp_ns,
)
from broker_spark.data.varbyte import encode_varbyte
from broker_spark.errors import EncodeError

__all__ = ["encode_into", "reference_encode"]

_IPv4Address = ipaddress.IPv4Address
_IPv6Address = ipaddress.IPv6Address
_IPv4Network = ipaddress.IPv4Network
_IPv6Network = ipaddress.IPv6Network

_pack_u64 = struct.Struct(">BQ").pack
_pack_i64 = struct.Struct(">Bq").pack
_pack_f64 = struct.Struct(">Bd").pack
_pack_addr = struct.Struct(">BQQ").pack
_pack_subnet = struct.Struct(">BQQB").pack
_pack_port = struct.Struct(">BHB").pack

# An IPv4-mapped address: upper 64 bits zero, lower 64 bits 0000:ffff:a.b.c.d.
_V4_MAPPED = 0xFFFF_0000_0000
_LOW64 = (1 << 64) - 1

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = _dt.timedelta(microseconds=1)

# Tag plus one-byte length, precomputed for short strings and containers.
_STR_HDR = [bytes((5, n)) for n in range(128)]
_SET_HDR = [bytes((12, n)) for n in range(128)]
_TABLE_HDR = [bytes((13, n)) for n in range(128)]
_VEC_HDR = [bytes((14, n)) for n in range(128)]

# Leaves that repeat endlessly in Zeek traffic (enum names, service names and
# event names, a few hundred hosts) are immutable, so their encodings are
# remembered: by enum name, by short string, by IPv4 address (its integer).
# Each memo is a dict emptied when full, so unique values cost one failed
# lookup and never grow memory past the bound.
_ENUM_BYTES: dict[str, bytes] = {}
_ENUM_BYTES_MAX = 1024
_STR_BYTES: dict[str, bytes] = {}
_STR_BYTES_MAX = 4096
_STR_BYTES_LEN = 48  # longer strings are encoded every time, never remembered
_ADDR4_BYTES: dict[int, bytes] = {}
_ADDR4_BYTES_MAX = 4096

# Types whose Python order equals Broker's order among values of that one type
# (str: code point order is UTF-8 byte order). Reals are left out for NaN.
_NATURAL_ORDER = frozenset({str, int, Count, bool, bytes, Enum, Port, _IPv4Address})


def reference_encode(value: Any) -> bytes:
    """Encode one value (any Python value of Broker's mapping) to bytes, by the reference.

    Raises ``ValueError`` (an :class:`EncodeError`) for values out of range and
    ``TypeError`` for values that have no Broker type, naming the value. Never
    tries a compiled writer (:func:`broker_spark.data.binary.encode` does).
    """
    out = bytearray()
    try:
        if type(value) is tuple and 0 < len(value) < 128:  # the usual message
            out += _VEC_HDR[len(value)]
            _items(value, out)
        else:
            (_ENCODERS.get(type(value)) or _resolve(value))(value, out)
    except RecursionError:
        raise EncodeError("value nested too deeply (or contains itself)") from None
    return bytes(out)


def encode_into(value: Any, out: bytearray) -> None:
    """Append the encoding of ``value`` to ``out``; on error ``out`` is left as it was."""
    mark = len(out)
    try:
        (_ENCODERS.get(type(value)) or _resolve(value))(value, out)
    except RecursionError:
        del out[mark:]
        raise EncodeError("value nested too deeply (or contains itself)") from None
    except BaseException:
        del out[mark:]
        raise


def _items(values: Any, out: bytearray) -> None:
    """Encode a sequence of values; the frequent types are handled inline.

    Range errors (``struct.error``) are turned into the precise message by
    re-running the failing value through its own encoder.
    """
    try:
        for x in values:
            t = type(x)
            if t is str:
                data = _STR_BYTES.get(x)
                if data is None:
                    data = _str_bytes(x)
                out += data
            elif t is Count:
                out += _pack_u64(2, x)
            elif t is tuple:
                n = len(x)
                if n < 128:
                    out += _VEC_HDR[n]
                else:
                    out.append(14)
                    out += encode_varbyte(n)
                if n:
                    _items(x, out)
            elif x is None:
                out.append(0)
            elif t is int:
                out += _pack_i64(3, x)
            elif t is float:
                out += _pack_f64(4, x)
            elif t is _IPv4Address:
                out += _ADDR4_BYTES.get(x._ip) or _addr4_bytes(x._ip)
            elif t is Port:
                out += _pack_port(8, x._number, x._proto)
            elif t is Timestamp and x.tzinfo is UTC:
                try:
                    nanos = x._nanos
                except AttributeError:
                    nanos = 0
                out += _pack_i64(9, (x - _EPOCH) // _ONE_US * 1000 + nanos)
            elif t is Timespan:
                try:
                    nanos = x._nanos
                except AttributeError:
                    nanos = 0
                out += _pack_i64(10, x // _ONE_US * 1000 + nanos)
            elif t is Enum:
                out += _ENUM_BYTES.get(x.name) or _enum_bytes(x.name)
            elif t is set:
                n = len(x)
                if n < 128:
                    out += _SET_HDR[n]
                else:
                    out.append(12)
                    out += encode_varbyte(n)
                if n > 1:
                    x = _canonical(x)
                if n:
                    _items(x, out)
            else:
                (_ENCODERS.get(t) or _resolve(x))(x, out)
    except UnicodeEncodeError:
        raise EncodeError(f"string is not encodable as UTF-8: {x!r:.200}") from None
    except struct.error:
        (_ENCODERS.get(type(x)) or _resolve(x))(x, bytearray())  # raises the precise error
        raise EncodeError(f"{type(x).__name__} out of range: {x!r:.200}") from None


def _utf8(value: str) -> bytes:
    try:
        return value.encode()
    except UnicodeEncodeError:
        raise EncodeError(f"string is not encodable as UTF-8: {value!r:.200}") from None


def _length(tag: int, hdr: list[bytes], n: int, out: bytearray) -> None:
    if n < 128:
        out += hdr[n]
    else:
        out.append(tag)
        out += encode_varbyte(n)


def _enc_none(value: None, out: bytearray) -> None:
    out.append(0)


def _enc_bool(value: bool, out: bytearray) -> None:
    out += b"\x01\x01" if value else b"\x01\x00"


def _enc_count(value: int, out: bytearray) -> None:
    try:
        out += _pack_u64(2, value)
    except struct.error:
        raise EncodeError(f"count out of range [0, 2**64-1]: {int(value)}") from None


def _enc_int(value: int, out: bytearray) -> None:
    try:
        out += _pack_i64(3, value)
    except struct.error:
        raise EncodeError(f"integer out of int64 range: {int(value)}") from None


def _enc_real(value: float, out: bytearray) -> None:
    out += _pack_f64(4, value)


def _enc_str(value: str, out: bytearray) -> None:
    raw = _utf8(value)
    _length(5, _STR_HDR, len(raw), out)
    out += raw


def _enc_bytes(value: bytes | bytearray | memoryview, out: bytearray) -> None:
    raw = bytes(value)
    _length(5, _STR_HDR, len(raw), out)
    out += raw


# ``_ip`` is the integer an ipaddress object wraps (stable since Python 3.3);
# ``int(addr)`` returns the same through a Python-level call ten times slower.
def _enc_addr4(value: ipaddress.IPv4Address, out: bytearray) -> None:
    out += _pack_addr(6, 0, _V4_MAPPED | value._ip)


def _enc_addr6(value: ipaddress.IPv6Address, out: bytearray) -> None:
    n = value._ip
    out += _pack_addr(6, n >> 64, n & _LOW64)


def _enc_net4(value: ipaddress.IPv4Network, out: bytearray) -> None:
    out += _pack_subnet(7, 0, _V4_MAPPED | value.network_address._ip, value.prefixlen + 96)


def _enc_net6(value: ipaddress.IPv6Network, out: bytearray) -> None:
    n = value.network_address._ip
    out += _pack_subnet(7, n >> 64, n & _LOW64, value.prefixlen)


def _enc_port(value: Port, out: bytearray) -> None:
    out += _pack_port(8, value.number(), value.type())


def _enc_timestamp(value: _dt.datetime, out: bytearray) -> None:
    try:
        out += _pack_i64(9, timestamp_ns(value))
    except struct.error:
        raise EncodeError(f"timestamp out of the int64 nanosecond range: {value!r}") from None


def _enc_timespan(value: _dt.timedelta, out: bytearray) -> None:
    try:
        out += _pack_i64(10, timespan_ns(value))
    except struct.error:
        raise EncodeError(f"timespan out of the int64 nanosecond range: {value!r}") from None


def _str_bytes(value: str) -> bytes:
    """A string's encoding, remembered when it is short (bounded)."""
    raw = value.encode()
    n = len(raw)
    if n < 128:
        data = _STR_HDR[n] + raw
        if n <= _STR_BYTES_LEN:
            if len(_STR_BYTES) >= _STR_BYTES_MAX:
                _STR_BYTES.clear()
            _STR_BYTES[value] = data
        return data
    return b"\x05" + encode_varbyte(n) + raw


def _addr4_bytes(ip: int) -> bytes:
    data = _pack_addr(6, 0, _V4_MAPPED | ip)
    if len(_ADDR4_BYTES) >= _ADDR4_BYTES_MAX:
        _ADDR4_BYTES.clear()
    _ADDR4_BYTES[ip] = data
    return data


def _enum_bytes(name: str) -> bytes:
    """The encoding of the enum value ``name`` (remembered, bounded)."""
    raw = _utf8(name)
    n = len(raw)
    if n >= 128:  # long names are encoded every time, never remembered
        return b"\x0b" + encode_varbyte(n) + raw
    data = bytes((11, n)) + raw
    if len(_ENUM_BYTES) >= _ENUM_BYTES_MAX:
        _ENUM_BYTES.clear()
    _ENUM_BYTES[name] = data
    return data


def _enc_enum(value: Enum, out: bytearray) -> None:
    out += _ENUM_BYTES.get(value.name) or _enum_bytes(value.name)


def _canonical(values: Any) -> Any:
    """Values in Broker's order: plain ``sorted`` when one type sorts naturally.

    Sets of strings, the most common by far, are settled by ``sorted`` alone: a
    str only compares with str (and its subclasses, which encode as strings),
    so if sorting succeeds with a str first, every element is a string, and
    Python's code point order is UTF-8 byte order.
    """
    try:
        ordered = sorted(values)
    except (TypeError, AttributeError, ValueError):  # incomparable: order by tag first
        return sorted_values(values)
    kind = type(ordered[0])
    if kind is str:
        return ordered
    if kind in _NATURAL_ORDER:
        for v in ordered:
            if type(v) is not kind:
                break
        else:
            return ordered
    return sorted_values(values)


def _enc_set(value: Any, out: bytearray) -> None:
    n = len(value)
    if n < 128:
        out += _SET_HDR[n]
    else:
        out.append(12)
        out += encode_varbyte(n)
    if n:
        _items(_canonical(value) if n > 1 else value, out)


def _enc_table(value: Mapping, out: bytearray) -> None:
    n = len(value)
    _length(13, _TABLE_HDR, n, out)
    if n:
        keys = _canonical(value.keys()) if n > 1 else value.keys()
        _items([x for k in keys for x in (k, value[k])], out)


def _enc_vector(value: tuple | list, out: bytearray) -> None:
    n = len(value)
    if n < 128:
        out += _VEC_HDR[n]
    else:
        out.append(14)
        out += encode_varbyte(n)
    if n:
        _items(value, out)


_ENCODERS: dict[type, Callable[[Any, bytearray], None]] = {
    str: _enc_str,
    Count: _enc_count,
    int: _enc_int,
    tuple: _enc_vector,
    float: _enc_real,
    bool: _enc_bool,
    type(None): _enc_none,
    _IPv4Address: _enc_addr4,
    _IPv6Address: _enc_addr6,
    Port: _enc_port,
    Timestamp: _enc_timestamp,
    _dt.datetime: _enc_timestamp,
    Timespan: _enc_timespan,
    _dt.timedelta: _enc_timespan,
    list: _enc_vector,
    set: _enc_set,
    frozenset: _enc_set,
    dict: _enc_table,
    FrozenTable: _enc_table,
    Enum: _enc_enum,
    _IPv4Network: _enc_net4,
    _IPv6Network: _enc_net6,
    bytes: _enc_bytes,
    bytearray: _enc_bytes,
    memoryview: _enc_bytes,
}


def _enc_wrapped(value: Any, out: bytearray) -> None:
    encode_into(value._broker_value(), out)


def _resolve(value: Any) -> Callable[[Any, bytearray], None]:
    """The encoder for a value whose exact type is not in the table (subclasses, ABCs)."""
    for cls in type(value).__mro__[1:-1]:
        fn = _ENCODERS.get(cls)
        if fn is not None:
            return fn
    if isinstance(value, Mapping):
        return _enc_table
    if hasattr(value, "_broker_value"):
        return _enc_wrapped
    raise TypeError(f"no Broker type for {type(value).__name__} value {value!r:.200}")
