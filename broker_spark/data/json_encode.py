"""Encoding values as Zeek's WebSocket JSON (Broker's "JSON API v1").

Every value is an object ``{"@data-type": T, "data": D}``; a data message adds
``"type": "data-message"`` and ``"topic"`` in front. This is on the hot path
(Zeek's WebSocket clients and Spark's ``data`` column), so encoders dispatch on
the exact Python type and build the JSON text directly: ``json.dumps`` cannot
print reals the way Broker does, and skipping the intermediate objects is faster.

Choices where Broker's format is silent or lossy (see also
:mod:`~broker_spark.data.json_decode`):

- Reals: Broker prints ``%f`` (six decimals). We emit exactly that when it reads
  back to the same double, otherwise the shortest ``repr`` (so our own round
  trips are exact). NaN and infinities become the JSON strings ``"nan"``,
  ``"inf"``, ``"-inf"`` (Broker writes them bare, which is not JSON).
- Timespans: an integer plus the coarsest exact unit among ns, us, ms, s (as
  Broker does; zero is ``"0s"``).
- Timestamps: UTC, milliseconds, as Broker prints them (sub-millisecond digits
  are dropped).
- Strings that are not UTF-8 (``bytes``): each undecodable byte becomes the
  escape ``\\udcXX`` (Python's surrogateescape), so the text stays ASCII-safe
  JSON and decodes back to the same bytes. Output is always ASCII.
- Addresses and subnets inside ``::ffff:0:0/96`` are IPv4 in Broker, so they are
  written as IPv4. Subnets with host bits set are masked, as Broker does.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import json
import math
import re
import uuid
from functools import lru_cache
from json.encoder import encode_basestring_ascii as _quote
from typing import Any

from broker_spark.data.types import (
    INT64_MAX,
    INT64_MIN,
    UTC,
    Count,
    DataType,
    Enum,
    FrozenTable,
    Port,
    Timespan,
    Timestamp,
    as_aware,
    sorted_items,
    sorted_values,
    timespan_ns,
    timestamp_ns,
    type_of,
)
from broker_spark.data.value import MAX_DEPTH, RawData
from broker_spark.errors import EC, EncodeError

__all__ = ["dumps_value", "encode_ack", "encode_data_message", "encode_error", "to_json_obj"]

_EPOCH_NAIVE = _dt.datetime(1970, 1, 1)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _fail(what: str) -> EncodeError:
    return EncodeError(f"cannot encode as Zeek JSON: {what}")


def _check_utf8(s: str) -> str:
    if not s.isascii() and _SURROGATE.search(s):
        raise _fail(f"string with a lone surrogate: {s[:40]!r}")
    return s


def _string_data(v: Any) -> str:
    """A string's JSON ``data`` as a Python str (non-UTF-8 bytes as \\udcXX escapes)."""
    if type(v) is str:
        return _check_utf8(v)
    if isinstance(v, str):
        return _check_utf8(str.__str__(v))
    raw = bytes(v)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "surrogateescape")


def _real_text(x: float) -> str:
    if math.isfinite(x):
        s = f"{x:.6f}"
        return s if float(s) == x else repr(x)
    return '"nan"' if x != x else ('"inf"' if x > 0 else '"-inf"')


def _address_text(a: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    if a.version == 4:
        i = a._ip  # the wrapped integer (stable since Python 3.3); int(a) is much slower
        return f"{i >> 24}.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"
    return _ipv6_text(a)


@lru_cache(maxsize=4096)
def _ipv6_text(a: ipaddress.IPv6Address) -> str:
    if a.ipv4_mapped is not None:
        return _address_text(a.ipv4_mapped)
    return str(ipaddress.IPv6Address(a.packed) if a.scope_id is not None else a)


def _subnet_text(n: ipaddress.IPv4Network | ipaddress.IPv6Network) -> str:
    if n.version == 4:
        return f"{_address_text(n.network_address)}/{n.prefixlen}"
    if n.prefixlen >= 96 and n.network_address.ipv4_mapped is not None:
        return f"{_address_text(n.network_address.ipv4_mapped)}/{n.prefixlen - 96}"
    return f"{n.network_address}/{n.prefixlen}"


def _timespan_data(v: _dt.timedelta) -> str:
    ns = timespan_ns(v)
    if not INT64_MIN <= ns <= INT64_MAX:
        raise _fail(f"timespan out of int64 nanoseconds: {v!r}")
    if ns == 0:
        return "0s"
    for unit in ("ns", "us", "ms"):
        if ns % 1000:
            return f"{ns}{unit}"
        ns //= 1000
    return f"{ns}s"


def _timestamp_data(v: _dt.datetime) -> str:
    if v.tzinfo is None:  # naive: local time, as everywhere in the data model
        v = as_aware(v)
    if v.tzinfo is UTC and 1678 <= v.year <= 2261:
        return "%04d-%02d-%02dT%02d:%02d:%02d.%03d" % (  # noqa: UP031 (fastest here)
            v.year,
            v.month,
            v.day,
            v.hour,
            v.minute,
            v.second,
            v.microsecond // 1000,  # the fields floor to the millisecond
        )
    ns = timestamp_ns(v)
    if not INT64_MIN <= ns <= INT64_MAX:
        raise _fail(f"timestamp out of int64 nanoseconds: {v!r}")
    ms = ns // 1_000_000
    if ms * 1_000_000 < INT64_MIN:  # flooring would leave int64: take the next millisecond
        ms += 1
    secs, ms = divmod(ms, 1000)
    return (_EPOCH_NAIVE + _dt.timedelta(seconds=secs)).isoformat() + f".{ms:03d}"


def _int_checked(v: int) -> int:
    if not INT64_MIN <= v <= INT64_MAX:
        raise _fail(f"integer out of int64 range: {v}")
    return v


def _t_none(v: Any, d: int) -> str:
    return '{"@data-type":"none","data":{}}'


def _t_bool(v: Any, d: int) -> str:
    return '{"@data-type":"boolean","data":true}' if v else '{"@data-type":"boolean","data":false}'


def _t_count(v: Any, d: int) -> str:
    return '{"@data-type":"count","data":' + int.__repr__(v) + "}"


def _t_int(v: Any, d: int) -> str:
    return '{"@data-type":"integer","data":' + int.__repr__(_int_checked(v)) + "}"


def _t_real(v: Any, d: int) -> str:
    return '{"@data-type":"real","data":' + _real_text(v) + "}"


def _t_str(v: Any, d: int) -> str:
    if v.isascii():
        return '{"@data-type":"string","data":' + _quote(v) + "}"
    return '{"@data-type":"string","data":' + _quote(_string_data(v)) + "}"


def _t_bytes(v: Any, d: int) -> str:
    return '{"@data-type":"string","data":' + _quote(_string_data(v)) + "}"


def _t_address(v: Any, d: int) -> str:
    return '{"@data-type":"address","data":"' + _address_text(v) + '"}'


def _t_subnet(v: Any, d: int) -> str:
    return '{"@data-type":"subnet","data":"' + _subnet_text(v) + '"}'


def _t_port(v: Any, d: int) -> str:
    return '{"@data-type":"port","data":"' + str(v) + '"}'


def _t_timestamp(v: Any, d: int) -> str:
    return '{"@data-type":"timestamp","data":"' + _timestamp_data(v) + '"}'


def _t_timespan(v: Any, d: int) -> str:
    return '{"@data-type":"timespan","data":"' + _timespan_data(v) + '"}'


def _t_enum(v: Any, d: int) -> str:
    return '{"@data-type":"enum-value","data":' + _quote(_check_utf8(v.name)) + "}"


def _deeper(d: int) -> int:
    if d >= MAX_DEPTH:
        raise _fail(f"value nested deeper than {MAX_DEPTH} levels")
    return d + 1


def _t_vector(v: Any, d: int) -> str:
    d = _deeper(d)
    get = _TEXT.get
    parts = [get(type(x), _t_other)(x, d) for x in v]
    return '{"@data-type":"vector","data":[' + ",".join(parts) + "]}"


def _t_set(v: Any, d: int) -> str:
    d = _deeper(d)
    get = _TEXT.get
    parts = [get(type(x), _t_other)(x, d) for x in sorted_values(v)]
    return '{"@data-type":"set","data":[' + ",".join(parts) + "]}"


def _t_table(v: Any, d: int) -> str:
    d = _deeper(d)
    get = _TEXT.get
    parts = [
        '{"key":' + get(type(k), _t_other)(k, d) + ',"value":' + get(type(x), _t_other)(x, d) + "}"
        for k, x in sorted_items(v)
    ]
    return '{"@data-type":"table","data":[' + ",".join(parts) + "]}"


_BY_TAG_TEXT = {
    DataType.None_: _t_none,
    DataType.Boolean: _t_bool,
    DataType.Count: _t_count,
    DataType.Integer: lambda v, d: _t_int(int(v), d),
    DataType.Real: lambda v, d: _t_real(float(v), d),
    DataType.String: _t_bytes,
    DataType.Address: _t_address,
    DataType.Subnet: _t_subnet,
    DataType.Port: _t_port,
    DataType.Timestamp: _t_timestamp,
    DataType.Timespan: _t_timespan,
    DataType.EnumValue: _t_enum,
    DataType.Set: _t_set,
    DataType.Table: _t_table,
    DataType.Vector: _t_vector,
}


def _unwrap(v: Any) -> Any:
    """The plain value behind a ``Data`` or an object with ``_broker_value()``, else None."""
    if isinstance(v, RawData):
        return v.value
    unwrap = getattr(v, "_broker_value", None)
    return unwrap() if unwrap is not None else None


def _t_other(v: Any, d: int) -> str:
    inner = _unwrap(v)
    if inner is not None or isinstance(v, RawData):
        return _TEXT.get(type(inner), _t_other)(inner, d)
    try:
        tag = type_of(v)
    except TypeError as exc:
        raise _fail(str(exc)) from None
    return _BY_TAG_TEXT[tag](v, d)


_TEXT: dict[type, Any] = {
    type(None): _t_none,
    bool: _t_bool,
    Count: _t_count,
    int: _t_int,
    float: _t_real,
    str: _t_str,
    bytes: _t_bytes,
    ipaddress.IPv4Address: _t_address,
    ipaddress.IPv6Address: _t_address,
    ipaddress.IPv4Network: _t_subnet,
    ipaddress.IPv6Network: _t_subnet,
    Port: _t_port,
    _dt.datetime: _t_timestamp,
    Timestamp: _t_timestamp,
    _dt.timedelta: _t_timespan,
    Timespan: _t_timespan,
    Enum: _t_enum,
    tuple: _t_vector,
    list: _t_vector,
    set: _t_set,
    frozenset: _t_set,
    dict: _t_table,
    FrozenTable: _t_table,
}


def dumps_value(value: Any) -> str:
    """The value object ``{"@data-type":...,"data":...}`` as compact, ASCII-only JSON text."""
    try:
        return _TEXT.get(type(value), _t_other)(value, 0)
    except RecursionError:
        raise _fail("value nested too deeply") from None


def encode_data_message(topic: str, value: Any) -> str:
    """A server-to-client data message, keys in Broker's order."""
    body = dumps_value(value)
    return '{"type":"data-message","topic":' + _quote(_check_utf8(str(topic))) + "," + body[1:]


def encode_ack(endpoint_id: str | uuid.UUID | bytes, version: str) -> str:
    """The handshake reply ``{"type":"ack","endpoint":<uuid>,"version":<version>}``."""
    if isinstance(endpoint_id, bytes):
        endpoint_id = uuid.UUID(bytes=endpoint_id)
    return json.dumps(
        {"type": "ack", "endpoint": str(endpoint_id), "version": str(version)},
        separators=(",", ":"),
    )


def encode_error(code_name: str | EC, context: str) -> str:
    """An error for a client, e.g. ``encode_error("deserialization_failed", "input #1 ...")``."""
    code = code_name.snake_name if isinstance(code_name, EC) else str(code_name)
    return json.dumps(
        {"type": "error", "code": code, "context": str(context)}, separators=(",", ":")
    )


def to_json_obj(value: Any) -> dict:
    """``{"@data-type": T, "data": D}`` with D made of JSON types only.

    Reals stay Python floats here (``json.dumps`` prints them its own way; use
    :func:`dumps_value` for Broker's six-decimal text), NaN and infinities are
    the strings ``"nan"``, ``"inf"``, ``"-inf"``.
    """
    return json.loads(dumps_value(value))
