"""Decoding Zeek's WebSocket JSON (Broker's "JSON API v1") into values.

Decoders walk the output of ``json.loads`` once, dispatching on ``@data-type``,
and every failure becomes a :class:`DecodeError` naming what was wrong and
where (``at data[2][0]``), ready to go back to a WebSocket client as the
context of a ``deserialization_failed`` error.

Choices where Broker's format is silent, lossy or not quite JSON (see also
:mod:`~broker_spark.data.json_encode`):

- Reals: JSON integers and reals are accepted, and the strings ``"nan"``,
  ``"inf"``, ``"-inf"`` (Broker writes them bare, which is not JSON).
- Timespans: an integer plus ns, us, ms, s, min, h or d.
- Timestamps: 0 to 9 fraction digits, an optional ``Z`` or
  ``+hh:mm``/``+hhmm``/``+hh`` offset; without an offset the time is UTC.
- Strings with ``\\udcXX`` escapes (Python's surrogateescape, as the encoder
  writes bytes that are not UTF-8) decode back to those bytes.
- Addresses and subnets inside ``::ffff:0:0/96`` are IPv4 in Broker, so they are
  read as IPv4. Subnets with host bits set are masked, as Broker does.
- Extra keys in value objects are ignored (as Broker does); a none's ``data``
  must be ``{}`` or null. Duplicate table keys: the last entry wins.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import json
import math
import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from functools import lru_cache
from typing import Any, NamedTuple

from broker_spark.data.types import (
    INT64_MAX,
    INT64_MIN,
    UINT64_MAX,
    Count,
    Enum,
    Port,
    Timespan,
    Timestamp,
)
from broker_spark.data.value import MAX_DEPTH, freeze
from broker_spark.errors import DecodeError

__all__ = [
    "MAX_TEXT_SIZE",
    "ClientDataMessage",
    "decode_client_message",
    "decode_subscriptions",
    "from_json_obj",
    "loads_value",
]

MAX_TEXT_SIZE = 16 * 1024 * 1024
"""Largest JSON text (in characters or bytes) the decoders accept."""

_EPOCH_ORDINAL = _dt.datetime(1970, 1, 1).toordinal()
_SURROGATE = re.compile("[\ud800-\udfff]")
_NS_PER = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_NS_PER.update(min=60 * _NS_PER["s"], h=3600 * _NS_PER["s"], d=86400 * _NS_PER["s"])
_TIMESPAN = re.compile(r"([+-]?[0-9]{1,20})(ns|us|ms|s|min|h|d)\Z")
# What lenient clients send (zeekpy: "1500000000.0ns"): a decimal number with a unit.
_DECIMAL_TIMESPAN = re.compile(
    r"([+-]?(?:[0-9]{1,40}\.?[0-9]{0,40}|\.[0-9]{1,40})(?:[eE][+-]?[0-9]{1,4})?)"
    r"(ns|us|ms|s|min|h|d)\Z"
)
_TIMESTAMP = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})"
    r"(?:\.([0-9]{1,9}))?(Z|[+-][0-9]{2}(?::?[0-9]{2})?)?\Z"
)
_PORT = re.compile(r"([0-9]{1,5})/(tcp|udp|icmp|\?)\Z")
_PROTO = {"?": Port.Unknown, "tcp": Port.TCP, "udp": Port.UDP, "icmp": Port.ICMP}
_REAL_WORDS = {"nan": math.nan, "inf": math.inf, "+inf": math.inf, "-inf": -math.inf}
_REAL_WORDS.update(infinity=math.inf, **{"+infinity": math.inf, "-infinity": -math.inf})


class _Invalid(Exception):
    """Internal: a decoding failure that collects its location while unwinding."""

    def __init__(self, msg: str, obj: Any = None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.obj = obj
        self.path = ""

    def locate(self, items: list, table: bool = False) -> None:
        """Prefix the path with the index of the failing element of ``items``."""
        for i, item in enumerate(items):
            if item is self.obj:
                part = ""
            elif table and type(item) is dict and item.get("key") is self.obj:
                part = ".key"
            elif table and type(item) is dict and item.get("value") is self.obj:
                part = ".value"
            else:
                continue
            self.path = f"[{i}]{part}{self.path}"
            break
        self.obj = None


def _describe(x: Any) -> str:
    """A short description of a JSON value for error messages."""
    if x is None:
        return "null"
    if type(x) is bool:
        return "true" if x else "false"
    if isinstance(x, (int, float)):
        text = repr(x)
        return "number " + (text if len(text) <= 40 else text[:37] + "...")
    if isinstance(x, str):
        text = json.dumps(x[:40])
        return "string " + (text if len(x) <= 40 else text[:-1] + '..."')
    if isinstance(x, list):
        return f"array of {len(x)}"
    if isinstance(x, dict):
        return "object"
    return type(x).__name__


def _expect(kind: str, x: Any) -> _Invalid:
    return _Invalid(f"{kind}, got {_describe(x)}")


def _d_none(x: Any, d: int) -> None:
    if x is None or (type(x) is dict and not x):
        return None
    raise _expect("none needs data {}", x)


def _d_bool(x: Any, d: int) -> bool:
    if type(x) is bool:
        return x
    raise _expect("boolean needs true or false", x)


def _d_count(x: Any, d: int) -> Count:
    if type(x) is int and 0 <= x <= UINT64_MAX:
        return int.__new__(Count, x)
    if type(x) is int:
        raise _expect("count out of range [0, 2^64-1]", x)
    raise _expect("count needs a JSON integer without decimal point", x)


def _d_int(x: Any, d: int) -> int:
    if type(x) is int and INT64_MIN <= x <= INT64_MAX:
        return x
    if type(x) is int:
        raise _expect("integer out of int64 range", x)
    raise _expect("integer needs a JSON integer without decimal point", x)


def _d_real(x: Any, d: int) -> float:
    if type(x) is float:
        return x
    if type(x) is int:
        try:
            return float(x)
        except OverflowError:
            raise _expect("real out of range", x) from None
    if type(x) is str and x.lower() in _REAL_WORDS:
        return _REAL_WORDS[x.lower()]
    raise _expect('real needs a JSON number (or "nan", "inf", "-inf")', x)


def _d_str(x: Any, d: int) -> str | bytes:
    if type(x) is not str:
        raise _expect("string needs a JSON string", x)
    if x.isascii() or not _SURROGATE.search(x):
        return x
    try:
        raw = x.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise _Invalid("string contains a lone surrogate that is no escaped byte") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _d_enum(x: Any, d: int) -> Enum:
    if type(x) is not str:
        raise _expect("enum-value needs a JSON string", x)
    if not x.isascii() and _SURROGATE.search(x):
        raise _Invalid("enum-value contains a lone surrogate")
    return Enum(x)


@lru_cache(maxsize=4096)
def _parse_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if addr.version == 6:
        if addr.scope_id is not None:
            return None
        if addr.ipv4_mapped is not None:
            return addr.ipv4_mapped
    return addr


def _d_address(x: Any, d: int) -> Any:
    if type(x) is str:
        addr = _parse_address(x)
        if addr is not None:
            return addr
    raise _expect("address needs IPv4 or IPv6 text", x)


@lru_cache(maxsize=4096)
def _parse_subnet(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    addr_text, sep, length = text.partition("/")
    if not sep or not length.isascii() or not length.isdigit() or len(length) > 3:
        return None
    try:
        addr = ipaddress.ip_address(addr_text)
    except ValueError:
        return None
    n = int(length)
    if addr.version == 6:
        if addr.scope_id is not None:
            return None
        if addr.ipv4_mapped is not None and n >= 96:
            addr, n = addr.ipv4_mapped, n - 96
    if n > addr.max_prefixlen:
        return None
    return ipaddress.ip_network((addr, n), strict=False)


def _d_subnet(x: Any, d: int) -> Any:
    if type(x) is str:
        net = _parse_subnet(x)
        if net is not None:
            return net
    raise _expect("subnet needs text <address>/<prefix length>", x)


@lru_cache(maxsize=1024)
def _parse_port(text: str) -> Port | None:
    m = _PORT.match(text)
    if m is None or int(m.group(1)) > 65535:
        return None
    return Port(int(m.group(1)), _PROTO[m.group(2)])


def _d_port(x: Any, d: int) -> Port:
    port = _parse_port(x) if type(x) is str else None
    if port is None:
        raise _expect("port needs text <0..65535>/<tcp|udp|icmp|?>", x)
    return port


@lru_cache(maxsize=1024)
def _parse_timespan(text: str) -> Timespan | None:
    """Broker writes a timespan as an integer and a unit (``"1500ms"``); a decimal
    number with a unit (``"1500000000.0ns"``, ``"1.5s"``, ``"2e3ms"``) is accepted too
    and rounded to the nearest nanosecond (ties to even)."""
    m = _TIMESPAN.match(text)
    if m is not None:
        ns = int(m.group(1)) * _NS_PER[m.group(2)]
    else:
        m = _DECIMAL_TIMESPAN.match(text)
        if m is None:
            return None
        try:
            exact = Decimal(m.group(1)) * _NS_PER[m.group(2)]
        except InvalidOperation:
            return None
        if not INT64_MIN - 1 <= exact <= INT64_MAX + 1:
            return None
        ns = int(exact.to_integral_value(rounding=ROUND_HALF_EVEN))
    return Timespan.from_ns(ns) if INT64_MIN <= ns <= INT64_MAX else None


def _d_timespan(x: Any, d: int) -> Timespan:
    span = _parse_timespan(x) if type(x) is str else None
    if span is None:
        raise _expect("timespan needs text <number><ns|us|ms|s|min|h|d> within int64 ns", x)
    return span


def _d_timestamp(x: Any, d: int) -> Timestamp:
    m = _TIMESTAMP.match(x) if type(x) is str else None
    if m is None:
        raise _expect("timestamp needs ISO 8601 text YYYY-MM-DDThh:mm:ss[.fraction][Z]", x)
    fraction, offset = m.group(7) or "", m.group(8)
    try:
        if len(fraction) in (0, 3, 6) and offset in (None, "Z") and "1678" <= x <= "2262":
            # The common case, parsed in C (every Python reads these fraction lengths).
            return Timestamp.fromisoformat(x[: m.end(7) if fraction else 19] + "+00:00")
        year, month, day, hour, minute, second = map(int, m.group(1, 2, 3, 4, 5, 6))
        days = _dt.date(year, month, day).toordinal() - _EPOCH_ORDINAL
        _dt.time(hour, minute, second)
    except ValueError:
        raise _expect("timestamp has an invalid date or time of day", x) from None
    secs = days * 86400 + hour * 3600 + minute * 60 + second
    if offset and offset != "Z":
        digits = offset[1:].replace(":", "")
        off = int(digits[:2]) * 3600 + int(digits[2:] or 0) * 60
        secs -= off if offset[0] == "+" else -off
    ns = secs * 1_000_000_000 + int(fraction.ljust(9, "0"))
    if not INT64_MIN <= ns <= INT64_MAX:
        raise _expect("timestamp out of int64 nanoseconds", x)
    return Timestamp.from_ns(ns)


def _list_or_fail(kind: str, x: Any, d: int) -> None:
    if type(x) is not list:
        raise _expect(f"{kind} needs a JSON array", x)
    if d >= MAX_DEPTH:
        raise _Invalid(f"value nested deeper than {MAX_DEPTH} levels")


def _d_vector(x: Any, d: int) -> tuple:
    _list_or_fail("vector", x, d)
    d += 1
    try:
        return tuple([_dec(e, d) for e in x])
    except _Invalid as err:
        err.locate(x)
        raise


def _hashable(v: Any) -> Any:
    return freeze(v) if isinstance(v, (set, dict, tuple)) else v


def _d_set(x: Any, d: int) -> set:
    _list_or_fail("set", x, d)
    d += 1
    try:
        items = [_dec(e, d) for e in x]
    except _Invalid as err:
        err.locate(x)
        raise
    try:
        return set(items)
    except TypeError:
        return {_hashable(v) for v in items}


def _d_table(x: Any, d: int) -> dict:
    _list_or_fail("table", x, d)
    d += 1
    out = {}
    try:
        for entry in x:
            if type(entry) is not dict or "key" not in entry or "value" not in entry:
                raise _Invalid(
                    f'table entry needs an object with "key" and "value", got {_describe(entry)}',
                    entry,
                )
            key = _dec(entry["key"], d)
            value = _dec(entry["value"], d)
            try:
                out[key] = value
            except TypeError:
                out[_hashable(key)] = value
    except _Invalid as err:
        err.locate(x, table=True)
        raise
    return out


_DECODERS: dict[str, Any] = {
    "none": _d_none,
    "boolean": _d_bool,
    "count": _d_count,
    "integer": _d_int,
    "real": _d_real,
    "string": _d_str,
    "enum-value": _d_enum,
    "address": _d_address,
    "subnet": _d_subnet,
    "port": _d_port,
    "timestamp": _d_timestamp,
    "timespan": _d_timespan,
    "vector": _d_vector,
    "set": _d_set,
    "table": _d_table,
}


def _dec(obj: Any, d: int) -> Any:
    try:
        decode = _DECODERS[obj["@data-type"]]
        data = obj["data"]
    except (KeyError, TypeError):
        decode, data = _dec_slow(obj)
    try:
        return decode(data, d)
    except _Invalid as err:
        if err.obj is None:
            err.obj = obj
        raise


def _dec_slow(obj: Any) -> tuple[Any, Any]:
    """The decoder and data of an object the fast path choked on, or why not."""
    if type(obj) is not dict:
        raise _Invalid(f"expected a value object, got {_describe(obj)}", obj)
    kind = obj.get("@data-type")
    decode = _DECODERS.get(kind) if type(kind) is str else None
    if decode is None:
        if kind is None:
            raise _Invalid('value object lacks "@data-type"', obj)
        raise _Invalid(f"unknown @data-type {_describe(kind)}", obj)
    if "data" not in obj and kind != "none":
        raise _Invalid(f'{kind} value object lacks "data"', obj)
    return decode, obj.get("data")


def _decode_error(err: _Invalid) -> DecodeError:
    where = f" (at data{err.path})" if err.path else ""
    return DecodeError(f"invalid data: {err.msg}{where}")


def from_json_obj(obj: Any) -> Any:
    """The value a parsed ``{"@data-type":...,"data":...}`` object stands for.

    Raises DecodeError naming what was wrong and where (``at data[2][0]``).
    """
    try:
        return _dec(obj, 0)
    except _Invalid as err:
        raise _decode_error(err) from None
    except (RecursionError, ValueError, TypeError, OverflowError) as exc:
        raise DecodeError(f"invalid data: {type(exc).__name__}: {exc}") from None


def _reject_constant(name: str) -> Any:
    raise DecodeError(f"malformed JSON: {name} is not valid JSON")


_JSON = json.JSONDecoder(parse_constant=_reject_constant)


def _parse_json(text: str | bytes | bytearray | memoryview) -> Any:
    """``json.loads`` behind size, type and strict-UTF-8 checks; DecodeError on any failure."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        if len(text) > MAX_TEXT_SIZE:
            raise DecodeError(f"input of {len(text)} bytes exceeds {MAX_TEXT_SIZE}")
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"input is not UTF-8: {exc.reason} at byte {exc.start}") from None
    elif not isinstance(text, str):
        raise DecodeError(f"expected JSON text, got {type(text).__name__}")
    if len(text) > MAX_TEXT_SIZE:
        raise DecodeError(f"input of {len(text)} characters exceeds {MAX_TEXT_SIZE}")
    try:
        return _JSON.decode(text)
    except DecodeError:
        raise
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise DecodeError(f"malformed JSON: {exc.msg} at {where}") from None
    except RecursionError:
        raise DecodeError("malformed JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer literal beyond Python's digit limit
        raise DecodeError(f"malformed JSON: {exc}") from None


def loads_value(text: str | bytes) -> Any:
    """Parse the JSON text of one value object (the inverse of :func:`dumps_value`)."""
    return from_json_obj(_parse_json(text))


class ClientDataMessage(NamedTuple):
    """A data message a WebSocket client sent: where to publish, and what."""

    topic: str
    value: Any


def decode_client_message(text: str | bytes) -> ClientDataMessage:
    """Parse a client's ``{"type":"data-message","topic":...,"@data-type":...,"data":...}``.

    Every failure is a DecodeError (code ``deserialization_failed``) whose
    message can go to the client as the error's context.
    """
    msg = _parse_json(text)
    if type(msg) is not dict:
        raise DecodeError(f"expected a data message object, got {_describe(msg)}")
    kind = msg.get("type", "data-message")
    if kind != "data-message":
        raise DecodeError(f'expected "type": "data-message", got {_describe(kind)}')
    topic = msg.get("topic")
    if type(topic) is not str or not topic or _SURROGATE.search(topic):
        what = (
            "no topic"
            if topic is None
            else f"topic must be a non-empty UTF-8 string, got {_describe(topic)}"
        )
        raise DecodeError(f"{what} in top-level JSON object")
    return ClientDataMessage(topic, from_json_obj(msg))


def decode_subscriptions(text: str | bytes) -> list[str]:
    """Parse a client's first message: a JSON array of topic prefixes."""
    topics = _parse_json(text)
    if type(topics) is not list:
        raise DecodeError(f"subscriptions must be a JSON array of strings, got {_describe(topics)}")
    for i, t in enumerate(topics):
        if type(t) is not str or _SURROGATE.search(t):
            raise DecodeError(f"subscription [{i}] is not a UTF-8 string: {_describe(t)}")
    return topics
