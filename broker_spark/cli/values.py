"""Broker values on the command line: JSON in, JSON (or text) out.

Input (``publish`` values, ``store`` keys and values) is one JSON text per
value, read in two ways at once:

- an object with an ``"@data-type"`` key is Zeek's WebSocket JSON
  (``{"@data-type": "count", "data": 1}``), decoded exactly, at any depth;
- everything else is plain JSON, mapped to the Broker type a Python user
  would get from the same Python value: integers are ``integer`` (int64; one
  beyond int64 but within uint64 becomes a ``count``), numbers with a
  fraction or exponent are ``real``, strings ``string``, ``true``/``false``
  ``boolean``, ``null`` ``none``, arrays ``vector`` and objects ``table``
  with string keys.

Strings stay strings: ``"10.0.0.1"`` is not guessed to be an address unless
``--infer`` asks for it, because a guess that is right for one field is wrong
for another (a host name that looks like a timespan, a version that looks like
an address). With ``--infer`` a string that reads as a port (``80/tcp``), a
subnet, an address, a timestamp (``2024-05-01T12:00:00Z``) or a timespan
(``1500ms``) becomes that type, tried in this order. Use Zeek JSON for counts,
enums, sets and anything else plain JSON cannot say.

Output renders a value in one of three formats: ``json`` (Zeek's WebSocket
JSON, lossless, and readable back by ``publish``), ``plain`` (ordinary JSON
for tools like ``jq``: counts are numbers, addresses and ports strings, sets
sorted arrays, timestamps ISO 8601 text, timespans seconds) and ``text``
(Broker's own rendering, ``str(Data(x))``).
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import json
import math
from collections.abc import Mapping
from typing import Any

from broker_spark.data.json_codec import dumps_value, from_json_obj
from broker_spark.data.types import (
    INT64_MAX,
    INT64_MIN,
    UINT64_MAX,
    Count,
    Enum,
    Port,
    sorted_items,
    sorted_values,
)
from broker_spark.data.value import Data
from broker_spark.errors import DecodeError
from broker_spark.zeek import event_name_and_args

__all__ = ["FORMATS", "parse_value", "render_message", "render_value"]

FORMATS = ("json", "plain", "text")

#: Types a string may be read as under ``--infer``, in the order they are tried.
_INFERRED = ("port", "subnet", "address", "timestamp", "timespan")

_MAX_DEPTH = 100


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_JSON = json.JSONDecoder(parse_constant=_reject_constant)


def parse_value(text: str, infer: bool = False) -> Any:
    """The Broker value of one JSON text (see the module docstring); ValueError if invalid."""
    try:
        obj = _JSON.decode(text)
    except json.JSONDecodeError as exc:
        hint = ""
        if text and text.lstrip()[:1] not in '[{"-0123456789tfn':
            hint = f" (a string needs JSON quotes: '{json.dumps(text)}')"
        raise ValueError(f"not JSON: {exc.msg} at column {exc.colno}{hint}") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    return from_plain(obj, infer)


def from_plain(obj: Any, infer: bool = False, depth: int = 0) -> Any:
    """Map parsed JSON to a Broker value (Zeek JSON objects decoded exactly)."""
    if depth > _MAX_DEPTH:
        raise ValueError("JSON nested too deeply")
    if obj is None or isinstance(obj, (bool, float)):
        return obj
    if isinstance(obj, int):
        if INT64_MIN <= obj <= INT64_MAX:
            return obj
        if 0 <= obj <= UINT64_MAX:
            return Count(obj)
        raise ValueError(f"integer {obj} is out of Broker's range (int64 or uint64)")
    if isinstance(obj, str):
        return _infer(obj) if infer else obj
    if isinstance(obj, list):
        return tuple(from_plain(x, infer, depth + 1) for x in obj)
    if isinstance(obj, dict):
        if "@data-type" in obj:
            try:
                return from_json_obj(obj)
            except DecodeError as exc:
                raise ValueError(str(exc)) from None
        return {
            (_infer(k) if infer else k): from_plain(v, infer, depth + 1) for k, v in obj.items()
        }
    raise ValueError(f"unsupported JSON value {obj!r}")  # pragma: no cover - json gives no other


def _infer(text: str) -> Any:
    for kind in _INFERRED:
        try:
            return from_json_obj({"@data-type": kind, "data": text})
        except DecodeError:
            continue
    return text


# -- output -------------------------------------------------------------------------


def render_value(value: Any, fmt: str) -> str:
    """One value as text in ``fmt`` (``json``, ``plain`` or ``text``)."""
    if fmt == "json":
        return dumps_value(value)
    if fmt == "plain":
        return json.dumps(to_plain(value), ensure_ascii=False)

    return str(Data(value))


def render_message(topic: str, value: Any, fmt: str) -> str:
    """One received message as one line.

    ``json``: ``{"topic": T, "data": <Zeek JSON>}``, plus ``"event": NAME`` when
    the value is a Zeek event; ``plain``: ``{"topic": T, "data": <plain JSON>}``,
    or ``{"topic": T, "event": NAME, "args": [...]}`` for an event; ``text``:
    ``T: <value>``, or ``T: NAME(arg, ...)`` for an event.
    """
    event = event_name_and_args(value)
    if fmt == "json":
        head = '{"topic":' + json.dumps(topic)
        if event is not None:
            head += ',"event":' + json.dumps(event[0])
        return head + ',"data":' + dumps_value(value) + "}"
    if fmt == "plain":
        if event is not None:
            body = {"topic": topic, "event": event[0], "args": [to_plain(a) for a in event[1]]}
        else:
            body = {"topic": topic, "data": to_plain(value)}
        return json.dumps(body, ensure_ascii=False)

    if event is not None:
        return f"{topic}: {event[0]}({', '.join(str(Data(a)) for a in event[1])})"
    return f"{topic}: {Data(value)}"


def to_plain(value: Any) -> Any:
    """A value as ordinary JSON data (lossy: see the module docstring)."""

    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):  # Count included
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, (Port, Enum)):
        return str(value)
    if isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return str(value)
    if isinstance(value, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        return str(value)
    if isinstance(value, _dt.datetime):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (set, frozenset)):
        return [to_plain(v) for v in sorted_values(value)]
    if isinstance(value, Mapping):
        items = sorted_items(value)
        if all(isinstance(k, str) for k, _ in items):
            return {k: to_plain(v) for k, v in items}
        return [[to_plain(k), to_plain(v)] for k, v in items]
    if isinstance(value, (tuple, list)):
        return [to_plain(v) for v in value]
    inner = getattr(value, "_broker_value", None)
    if inner is not None:
        return to_plain(inner())
    return str(value)
