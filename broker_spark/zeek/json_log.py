"""One log record as the JSON line Zeek's own JSON writer would write for it.

``render_line(values, names)`` takes a record's values as the record codec
decodes them and writes what ``LogAscii::use_json = T`` writes: one object,
keys in column order, unset fields left out (or ``null`` with
``include_unset``, Zeek's ``json_include_unset_fields``), no spaces. The
spelling of each value is :mod:`~broker_spark.zeek.text`'s. Many records of
one layout render faster column by column (:mod:`~broker_spark.zeek.json_columns`),
which must give the same text.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
from collections.abc import Callable, Sequence
from typing import Any

from broker_spark.data.types import Enum, Port, timespan_ns, timestamp_ns
from broker_spark.errors import EncodeError
from broker_spark.zeek.text import (
    TIMESTAMP_FORMATS,
    addr_text,
    format_double,
    format_time,
    json_quote,
    zeek_text,
)
from broker_spark.zeek.types import TypeTag

__all__ = ["LineRenderer", "render_line", "render_value"]


def _seconds(value: Any) -> float:
    exact = getattr(value, "seconds", None)
    if isinstance(exact, float):
        return exact
    if isinstance(value, _dt.datetime):
        return timestamp_ns(value) / 1_000_000_000
    if isinstance(value, _dt.timedelta):
        return timespan_ns(value) / 1_000_000_000
    return float(value)


def render_value(value: Any, timestamps: str = "epoch") -> str:
    """One value as Zeek's JSON writer spells it (``null`` for an unset one)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):  # int and Count
        return int.__repr__(value)
    if isinstance(value, float):
        return format_double(value)
    if isinstance(value, _dt.datetime):
        return format_time(_seconds(value), timestamps)
    if isinstance(value, _dt.timedelta):
        return format_double(_seconds(value))
    if isinstance(value, (str, bytes)):
        return json_quote(zeek_text(value))
    if isinstance(value, Enum):
        return json_quote(zeek_text(value.name))
    if isinstance(value, Port):
        return str(value.number())
    if isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return '"' + addr_text(value.packed) + '"'
    if isinstance(value, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        return f'"{addr_text(value.network_address.packed)}/{value.prefixlen}"'
    if isinstance(value, (set, frozenset, tuple, list)):
        return "[" + ",".join(render_value(v, timestamps) for v in value) + "]"
    raise EncodeError(f"no Zeek JSON for a {type(value).__name__}: {value!r:.80}")


class LineRenderer:
    """Renders records of one set of column names; the keys are quoted once, here.

    ``timestamps`` is ``epoch`` (Zeek's default), ``iso8601``, ``millis`` or
    ``millis-unsigned``; ``first`` puts one key and its (JSON) text first, as
    ``broker-spark logs`` does with ``_path`` when it prints several logs.
    """

    def __init__(
        self,
        names: Sequence[str],
        timestamps: str = "epoch",
        include_unset: bool = False,
        types: Sequence[Any] | None = None,
    ) -> None:
        if timestamps not in TIMESTAMP_FORMATS:
            raise ValueError(f"timestamps must be one of {', '.join(TIMESTAMP_FORMATS)}")
        self.names = tuple(names)
        # a time no datetime holds (beyond year 9999, NaN) decodes as a float: only its
        # column's type tells it from a double
        self.times = frozenset(i for i, t in enumerate(types or ()) if _tag_of(t) == TypeTag.TIME)
        self.time_sets = frozenset(
            i for i, t in enumerate(types or ()) if _subtag_of(t) == TypeTag.TIME
        )
        self.keys = tuple(json_quote(zeek_text(n)) + ":" for n in self.names)
        self.timestamps = timestamps
        self.include_unset = include_unset
        self._render: Callable[[Any, str], str] = render_value

    def render(self, values: Sequence[Any], first: tuple[str, str] | None = None) -> str:
        """The line of one record (without a newline)."""
        keys = self.keys
        if len(values) > len(keys):
            keys = keys + tuple(f'"_{i + 1}":' for i in range(len(keys), len(values)))
        parts = [] if first is None else [json_quote(first[0]) + ":" + first[1]]
        ts = self.timestamps
        render = self._render
        for i, (key, value) in enumerate(zip(keys, values, strict=False)):
            if value is None:
                if self.include_unset:
                    parts.append(key + "null")
                continue
            if isinstance(value, float) and i in self.times:
                parts.append(key + format_time(value, ts))
            elif i in self.time_sets and isinstance(value, (tuple, frozenset)):
                items = (
                    format_time(v, ts) if isinstance(v, float) else render(v, ts) for v in value
                )
                parts.append(key + "[" + ",".join(items) + "]")
            else:
                parts.append(key + render(value, ts))
        return "{" + ",".join(parts) + "}"


def render_line(
    values: Sequence[Any],
    names: Sequence[str],
    timestamps: str = "epoch",
    include_unset: bool = False,
    types: Sequence[Any] | None = None,
) -> str:
    r"""A record's values (in column order, None for unset) as Zeek's JSON log line.

    With fewer ``names`` than values (a record whose LogCreate was not seen),
    the rest are named ``_<position>`` counting from 1. ``types`` (the columns'
    :class:`~broker_spark.zeek.types.ZeekType`\ s or fields) tell a time that
    decoded as a float (no datetime holds it) from a double.
    """
    return LineRenderer(names, timestamps, include_unset, types).render(values)


def _tag_of(spec: Any) -> Any:
    spec = getattr(spec, "zeek_type", spec)
    return getattr(spec, "tag", None)


def _subtag_of(spec: Any) -> Any:
    spec = getattr(spec, "zeek_type", spec)
    return getattr(spec, "subtag", None)
