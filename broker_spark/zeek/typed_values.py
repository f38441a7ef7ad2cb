"""Values made into the Broker data a Zeek type expects, and the check Zeek makes on receipt.

:func:`converter` builds, once per type, the function that turns what a
writer has (a Python value from an Arrow column, from JSON on the command
line, or a Broker value already) into the Broker value of a Zeek script type
(:mod:`~broker_spark.zeek.script_types`), as Zeek's own ``val_to_data``
(``src/broker/Data.cc``) would have sent it:

* ``count`` from a non-negative integer (or its decimal text), ``int``
  within int64, ``double`` from any number, ``bool``;
* ``time`` from a datetime, or from epoch seconds converted as Zeek
  converts its doubles (``duration_cast`` to nanoseconds: truncated), so a
  DOUBLE column of Zeek's times gives Zeek's bytes; ``interval`` likewise
  from a timedelta, seconds, or text such as ``1500ms``;
* ``addr``, ``subnet`` (host bits masked, as Zeek does), ``port``
  (``80/tcp``, ``0/unknown``, or ``{port, proto}`` as Zeek's JSON writes it:
  an integer alone is refused, it names no protocol) and ``enum`` from text;
* ``pattern`` from its text (``ab+c`` or ``/ab+c/``), sent as Zeek sends
  it: the exact and the anywhere form, ``^?(ab+c)$?`` and ``^?(.|\\n)*(ab+c)``;
* ``set``, ``vector`` from sequences, ``table`` from mappings or key-value
  pairs (composite indexes from sequences or structs, element by element),
  ``record`` from a mapping by field name or a sequence by position;
* ``any``: the value as it is (its own Broker type).

A value that does not fit raises :class:`~broker_spark.errors.EncodeError`
naming where in the value it is (``field inner.n: -1 is not a count``); a
null is refused wherever Zeek would not take ``none``: only a record field
with ``&optional`` or ``&default`` may be null.

:func:`conforms` is the receiving side's check (Zeek's ``data_type_check``):
whether a decoded Broker value has the types a handler declares. The test
servers use it to answer as Zeek does.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from broker_spark.data.json_codec import from_json_obj
from broker_spark.data.types import (
    INT64_MAX,
    INT64_MIN,
    UINT64_MAX,
    Count,
    Enum,
    Port,
    Timespan,
    Timestamp,
    timespan_ns,
    timestamp_ns,
)
from broker_spark.errors import BrokerError, EncodeError
from broker_spark.zeek.script_types import (
    Basic,
    EnumType,
    EventSignature,
    RecordType,
    ScriptType,
    SetType,
    TableType,
    VectorType,
)

__all__ = [
    "conforms",
    "convert",
    "converter",
    "event_conforms",
    "pattern_value",
    "seconds_ns",
]

Convert = Callable[[Any], Any]

_ADDRESSES = (ipaddress.IPv4Address, ipaddress.IPv6Address)
_NETWORKS = (ipaddress.IPv4Network, ipaddress.IPv6Network)
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+\Z")
_PROTOCOLS = {"tcp": Port.TCP, "udp": Port.UDP, "icmp": Port.ICMP, "unknown": 0, "?": 0}
_BOOLS = {"t": True, "true": True, "f": False, "false": False}


class _Misfit(ValueError):
    """A value that does not fit its type (the message says why, the caller adds where)."""


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def seconds_ns(seconds: float | int | Decimal) -> int:
    """Seconds as nanoseconds the way Zeek converts its times and intervals: the double's
    product with 10**9, truncated (an integer of seconds converts exactly)."""
    if isinstance(seconds, int):
        return seconds * 1_000_000_000
    return int(float(seconds) * 1e9)


def pattern_value(text: str) -> tuple[str, str]:
    """A pattern as Zeek sends it: its exact and its anywhere regular expression."""
    if len(text) >= 2 and text.startswith("/") and text.endswith("/"):
        text = text[1:-1]
    return (f"^?({text})$?", f"^?(.|\\n)*({text})")


# --- atomic types -----------------------------------------------------------------------


def _integer(v: Any, lo: int, hi: int, what: str) -> int:
    if isinstance(v, bool):
        raise _Misfit(f"{_show(v)} is not {what}")
    if isinstance(v, int):
        n = v
    elif (
        (isinstance(v, Decimal) and v == v.to_integral_value())
        or (isinstance(v, float) and v.is_integer())
        or (isinstance(v, str) and _INTEGER_TEXT.match(v.strip()))
    ):
        n = int(v)
    else:
        raise _Misfit(f"{_show(v)} is not {what}")
    if not lo <= n <= hi:
        raise _Misfit(f"{n} is out of range for {what} ({lo} to {hi})")
    return n


def _count(v: Any) -> Count:
    if type(v) is Count:
        return v
    return int.__new__(Count, _integer(v, 0, UINT64_MAX, "a count"))


def _int(v: Any) -> int:
    if type(v) is int and INT64_MIN <= v <= INT64_MAX:
        return v
    return int(_integer(v, INT64_MIN, INT64_MAX, "an int"))


def _double(v: Any) -> float:
    if isinstance(v, bool):
        raise _Misfit(f"{_show(v)} is not a double")
    if isinstance(v, (int, float, Decimal)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            pass
    raise _Misfit(f"{_show(v)} is not a double")


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in _BOOLS:
        return _BOOLS[v.strip().lower()]
    raise _Misfit(f"{_show(v)} is not a bool (T, F, true or false)")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float, Decimal)) and not isinstance(v, bool)


def _temporal(
    v: Any, native: type, made: type, ns_of: Callable[[Any], int], data_type: str, text: str
) -> Any:
    """A time or an interval: ``native`` (datetime, timedelta), seconds (a number or its
    text, converted as Zeek converts its doubles), or Broker's JSON text of ``data_type``."""
    if isinstance(v, native):
        return v if isinstance(v, made) else made.from_ns(ns_of(v))
    if _number(v):
        return made.from_ns(seconds_ns(v))
    if isinstance(v, str):
        stripped = v.strip()
        try:
            return made.from_ns(seconds_ns(float(stripped)))
        except ValueError:
            pass
        cleaned = (
            stripped.removesuffix("Z") if data_type == "timestamp" else stripped.replace(" ", "")
        )
        try:
            return from_json_obj({"@data-type": data_type, "data": cleaned})
        except BrokerError:
            pass
    raise _Misfit(f"{_show(v)} is not {text}")


def _time(v: Any) -> Timestamp:
    what = "a time (a timestamp, epoch seconds or ISO 8601 text)"
    return _temporal(v, _dt.datetime, Timestamp, timestamp_ns, "timestamp", what)


def _interval(v: Any) -> Timespan:
    what = "an interval (a duration, seconds, or text like 1500ms)"
    return _temporal(v, _dt.timedelta, Timespan, timespan_ns, "timespan", what)


def _string(v: Any) -> str | bytes:
    if isinstance(v, (str, bytes)):
        return v
    raise _Misfit(f"{_show(v)} is not a string")


def _pattern(v: Any) -> tuple[str, str]:
    if isinstance(v, str):
        return pattern_value(v)
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(x, str) for x in v):
        return (v[0], v[1])
    raise _Misfit(f"{_show(v)} is not a pattern (its text, such as ab+c)")


def _port(v: Any) -> Port:
    if isinstance(v, Port):
        return v
    if isinstance(v, str):
        number, sep, proto = v.strip().partition("/")
        if sep and number.isdigit() and proto.lower() in _PROTOCOLS:
            try:
                return Port(int(number), _PROTOCOLS[proto.lower()])
            except ValueError as exc:
                raise _Misfit(str(exc)) from None
    if isinstance(v, Mapping):
        number = v.get("port", v.get("number"))
        proto = v.get("proto", v.get("protocol"))
        if isinstance(number, int) and isinstance(proto, str) and proto.lower() in _PROTOCOLS:
            try:
                return Port(number, _PROTOCOLS[proto.lower()])
            except ValueError as exc:
                raise _Misfit(str(exc)) from None
    if isinstance(v, int) and not isinstance(v, bool):
        raise _Misfit(f"{v} is not a port: a port needs its protocol, as in {v}/tcp")
    raise _Misfit(f"{_show(v)} is not a port (80/tcp, 53/udp, 8/icmp or 0/unknown)")


def _addr(v: Any) -> Any:
    if isinstance(v, _ADDRESSES):
        return v
    if isinstance(v, str):
        text = v.strip()
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1]
        try:
            return ipaddress.ip_address(text)
        except ValueError:
            pass
    raise _Misfit(f"{_show(v)} is not an addr")


def _subnet(v: Any) -> Any:
    if isinstance(v, _NETWORKS):
        return v
    if isinstance(v, str) and "/" in v:
        text = v.strip().replace("[", "").replace("]", "")
        try:
            return ipaddress.ip_network(text, strict=False)
        except ValueError:
            pass
    raise _Misfit(f"{_show(v)} is not a subnet (such as 10.0.0.0/8)")


def _any(v: Any) -> Any:
    return v


_ATOMIC: dict[str, Convert] = {
    "bool": _bool,
    "int": _int,
    "count": _count,
    "double": _double,
    "time": _time,
    "interval": _interval,
    "string": _string,
    "pattern": _pattern,
    "port": _port,
    "addr": _addr,
    "subnet": _subnet,
    "any": _any,
}


def _enum(t: EnumType) -> Convert:
    if t.names is None:

        def open_enum(v: Any) -> Enum:
            if isinstance(v, Enum):
                return v
            if isinstance(v, str) and v.strip():
                return Enum(v.strip())
            raise _Misfit(f"{_show(v)} is not an enum name")

        return open_enum
    known = {name: name for name in t.names}
    for name in t.names:  # the short name too, where it is not ambiguous
        short = name.rpartition("::")[2]
        known.setdefault(short, name)

    def closed_enum(v: Any) -> Enum:
        text = v.name if isinstance(v, Enum) else v
        if isinstance(text, str) and text.strip() in known:
            return Enum(known[text.strip()])
        raise _Misfit(f"{_show(v)} is not one of {', '.join(t.names or ())}")

    return closed_enum


# --- composite types ------------------------------------------------------------------------


def _sequence(v: Any, what: str) -> list[Any]:
    if isinstance(v, (list, tuple, set, frozenset)):
        return list(v)
    raise _Misfit(f"{_show(v)} is not a {what}")


def _index(types: tuple[ScriptType, ...]) -> Convert:
    """A set element or table key: one value, or a composite index as a vector."""
    if len(types) == 1:
        one = converter(types[0])
        return lambda k: _not_null(one, k, "an index")
    parts = [converter(t) for t in types]

    def composite(k: Any) -> tuple:
        items = list(k.values()) if isinstance(k, Mapping) else _sequence(k, "composite index")
        if len(items) != len(parts):
            raise _Misfit(f"an index of {len(items)} values for [{', '.join(map(str, types))}]")
        return tuple(
            _not_null(conv, x, f"index part {i + 1}")
            for i, (conv, x) in enumerate(zip(parts, items, strict=True))
        )

    return composite


def _not_null(conv: Convert, x: Any, what: str) -> Any:
    if x is None:
        raise _Misfit(f"{what} is null")
    return conv(x)


def _set(t: SetType) -> Convert:
    element = _index(t.index)

    def convert_set(v: Any) -> set:
        return {element(x) for x in _sequence(v, f"set ({t})")}

    return convert_set


def _pairs(v: Any) -> list[tuple[Any, Any]]:
    if isinstance(v, Mapping):
        return list(v.items())
    if isinstance(v, (list, tuple)):
        out = []
        for item in v:
            if isinstance(item, Mapping) and "key" in item:
                out.append((item["key"], item.get("value")))
            elif isinstance(item, (list, tuple)) and len(item) == 2:
                out.append((item[0], item[1]))
            else:
                raise _Misfit(f"{_show(item)} is not a key and a value")
        return out
    raise _Misfit(f"{_show(v)} is not a table (a map, or key-value pairs)")


def _table(t: TableType) -> Convert:
    key = _index(t.index)
    value = converter(t.value)

    def convert_table(v: Any) -> dict:
        out = {}
        for k, x in _pairs(v):
            ck = key(k)
            if x is None:
                raise _Misfit(f"the value of {_show(k)} is null")
            try:
                out[ck] = value(x)
            except _Misfit as exc:
                raise _Misfit(f"[{_show(k)}]: {exc}") from None
        return out

    return convert_table


def _vector(t: VectorType) -> Convert:
    element = converter(t.element)

    def convert_vector(v: Any) -> tuple:
        items = _sequence(v, f"vector ({t})")
        out = []
        for i, x in enumerate(items):
            if x is None:
                raise _Misfit(f"element {i} is null (Zeek sends no vectors with holes)")
            try:
                out.append(element(x))
            except _Misfit as exc:
                raise _Misfit(f"element {i}: {exc}") from None
        return tuple(out)

    return convert_vector


def _record(t: RecordType) -> Convert:
    fields = [(f.name, f.nullable, converter(f.type)) for f in t.fields]
    by_name = {f.name.lower(): i for i, f in enumerate(t.fields)}

    def convert_record(v: Any) -> tuple:
        if isinstance(v, Mapping):
            values: list[Any] = [None] * len(fields)
            for name, x in v.items():
                i = by_name.get(str(name).lower())
                if i is None:
                    raise _Misfit(f"{name!r} is not a field of {t}")
                values[i] = x
        elif isinstance(v, (list, tuple)):
            if len(v) != len(fields):
                raise _Misfit(f"{len(v)} values for a record of {len(fields)} fields")
            values = list(v)
        else:
            raise _Misfit(f"{_show(v)} is not a record (a struct, mapping or sequence)")
        out = []
        for (name, nullable, conv), x in zip(fields, values, strict=True):
            if x is None:
                if not nullable:
                    raise _Misfit(f"field {name} is null (it is not &optional)")
                out.append(None)
                continue
            try:
                out.append(conv(x))
            except _Misfit as exc:
                raise _Misfit(f"field {name}: {exc}") from None
        return tuple(out)

    return convert_record


def converter(t: ScriptType) -> Convert:
    """The function making a non-null value into Broker data of type ``t`` (raises ValueError)."""
    if isinstance(t, Basic):
        return _ATOMIC[t.name]
    if isinstance(t, EnumType):
        return _enum(t)
    if isinstance(t, SetType):
        return _set(t)
    if isinstance(t, TableType):
        return _table(t)
    if isinstance(t, VectorType):
        return _vector(t)
    if isinstance(t, RecordType):
        return _record(t)
    raise TypeError(f"not a Zeek script type: {t!r}")


def convert(value: Any, t: ScriptType, what: str = "value") -> Any:
    """``value`` as Broker data of type ``t``; EncodeError naming ``what`` when it does not fit."""
    if value is None:
        raise EncodeError(f"{what} is null")
    try:
        return converter(t)(value)
    except ValueError as exc:
        raise EncodeError(f"{what} ({t}): {exc}") from None


# --- the receiving side's check ------------------------------------------------------------


def _is_atomic(value: Any, name: str) -> bool:
    if name == "any":
        return True
    if name == "bool":
        return isinstance(value, bool)
    if name == "count":
        return isinstance(value, Count)
    if name == "int":
        return isinstance(value, int) and not isinstance(value, (bool, Count))
    if name == "double":
        return isinstance(value, float)
    if name == "time":
        return isinstance(value, _dt.datetime)
    if name == "interval":
        return isinstance(value, _dt.timedelta)
    if name == "string":
        return isinstance(value, (str, bytes))
    if name == "pattern":
        return (
            isinstance(value, (tuple, list))
            and len(value) == 2
            and all(isinstance(x, (str, bytes)) for x in value)
        )
    if name == "port":
        return isinstance(value, Port)
    if name == "addr":
        return isinstance(value, _ADDRESSES)
    if name == "subnet":
        return isinstance(value, _NETWORKS)
    return False


def _index_conforms(value: Any, types: tuple[ScriptType, ...]) -> bool:
    if len(types) == 1:
        return conforms(value, types[0])
    return (
        isinstance(value, (tuple, list))
        and len(value) == len(types)
        and all(conforms(x, t) for x, t in zip(value, types, strict=True))
    )


def conforms(value: Any, t: ScriptType) -> bool:
    """Whether the Broker value ``value`` converts to Zeek type ``t`` as a receiving Zeek
    checks it (``none`` only where a record field may be unset)."""
    if isinstance(t, Basic):
        return _is_atomic(value, t.name)
    if isinstance(t, EnumType):
        return isinstance(value, Enum) and (t.names is None or value.name in t.names)
    if isinstance(t, SetType):
        return isinstance(value, (set, frozenset)) and all(
            _index_conforms(x, t.index) for x in value
        )
    if isinstance(t, TableType):
        return isinstance(value, Mapping) and all(
            _index_conforms(k, t.index) and conforms(v, t.value) for k, v in value.items()
        )
    if isinstance(t, VectorType):
        return isinstance(value, (tuple, list)) and all(conforms(x, t.element) for x in value)
    if isinstance(t, RecordType):
        return (
            isinstance(value, (tuple, list))
            and len(value) == len(t.fields)
            and all(x is None or conforms(x, f.type) for x, f in zip(value, t.fields, strict=True))
        )
    return False


def event_conforms(signature: EventSignature, name: str, args: Any) -> bool:
    """Whether an event named ``name`` with ``args`` is one the handler ``signature`` takes."""
    return (
        name == signature.name
        and isinstance(args, (tuple, list))
        and len(args) == len(signature.params)
        and all(conforms(a, p.type) for a, p in zip(args, signature.params, strict=True))
    )
