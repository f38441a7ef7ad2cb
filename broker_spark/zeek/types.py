"""Zeek's type tags and the Python values that keep what a Zeek log record holds exactly.

Zeek describes a log column by a ``TypeTag`` number (``src/Type.h``): the
LogCreate message carries the numbers, every value of a LogWrite carries its
own, and Zeek's description of its streams (``log-schemas.json``) spells them
as Zeek script types (``set[string]``, ``vector of addr``, ``enum Notice::Type``).
:class:`ZeekType` is one column type in both forms.

Zeek keeps times and intervals as doubles of seconds; a :class:`Timestamp` or
:class:`Timespan` holds nanoseconds, which cannot hold every double (a
duration of ``0.03878498077392578`` seconds has more digits than nanoseconds
give). So the record codec returns :class:`ZeekTime` and :class:`ZeekInterval`,
the same types remembering the exact double, and :class:`ZeekSet`, a frozenset
that keeps the order its elements were written in: Zeek's JSON writer prints
them in that order, and encoding a decoded record again must give its bytes.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from broker_spark.data.types import Timespan, Timestamp

__all__ = [
    "TypeTag",
    "ZeekInterval",
    "ZeekSet",
    "ZeekTime",
    "ZeekType",
    "seconds_to_ns",
    "zeek_interval",
    "zeek_time",
]


class TypeTag(enum.IntEnum):
    """Zeek's ``TypeTag`` numbers (``src/Type.h``), as log messages carry them."""

    VOID = 0
    BOOL = 1
    INT = 2
    COUNT = 3
    DOUBLE = 4
    TIME = 5
    INTERVAL = 6
    STRING = 7
    PATTERN = 8
    ENUM = 9
    PORT = 10
    ADDR = 11
    SUBNET = 12
    ANY = 13
    TABLE = 14
    RECORD = 15
    LIST = 16
    FUNC = 17
    FILE = 18
    VECTOR = 19

    @property
    def script_name(self) -> str:
        """The name a Zeek script uses (``count``, ``addr``; ``set`` for a table column)."""
        return _SCRIPT_NAMES.get(self, self.name.lower())


_SCRIPT_NAMES = {TypeTag.TABLE: "set"}
_BY_SCRIPT_NAME = {tag.script_name: tag for tag in TypeTag} | {"table": TypeTag.TABLE}

#: Tags whose values are texts on the wire (a 4-byte length, then the bytes).
TEXT_TAGS = frozenset({TypeTag.STRING, TypeTag.ENUM, TypeTag.FUNC, TypeTag.FILE})
#: Tags a log column may hold as a container of elements.
CONTAINER_TAGS = frozenset({TypeTag.TABLE, TypeTag.VECTOR})


@dataclass(frozen=True)
class ZeekType:
    """One column's type: its tag, the element tag of a set or vector, and an enum's name
    (known from Zeek's description of its logs, never sent on the wire, so not compared).

    ``ZeekType.parse("set[enum HTTP::Tags]")`` reads Zeek's spelling;
    ``str()`` writes it back (``vector of string``, ``set[addr]``).
    """

    tag: TypeTag
    subtag: TypeTag = TypeTag.VOID
    # Zeek's description names enums; the wire does not, so equality leaves the name out
    enum_name: str | None = field(default=None, compare=False)

    @classmethod
    def parse(cls, text: str) -> ZeekType:
        """Zeek's spelling of a log column's type; ValueError naming it when it is not one."""
        spec = text.strip()
        if spec.startswith("set[") and spec.endswith("]"):
            inner = cls.parse(spec[4:-1])
            return cls(TypeTag.TABLE, inner.tag, inner.enum_name)
        if spec.startswith("vector of "):
            inner = cls.parse(spec[len("vector of ") :])
            return cls(TypeTag.VECTOR, inner.tag, inner.enum_name)
        if spec.startswith("enum"):
            name = spec[4:].strip() or None
            return cls(TypeTag.ENUM, TypeTag.VOID, name)
        tag = _BY_SCRIPT_NAME.get(spec)
        if tag is None or tag in CONTAINER_TAGS:
            raise ValueError(f"not a Zeek log column type: {text!r}")
        return cls(tag)

    @property
    def element(self) -> ZeekType:
        """The type of a container's elements (VOID when unknown)."""
        return ZeekType(self.subtag, TypeTag.VOID, self.enum_name)

    def __str__(self) -> str:
        if self.tag is TypeTag.TABLE:
            return f"set[{self.element}]"
        if self.tag is TypeTag.VECTOR:
            return f"vector of {self.element}"
        if self.tag is TypeTag.ENUM and self.enum_name:
            return f"enum {self.enum_name}"
        return self.tag.script_name


def seconds_to_ns(seconds: float) -> int:
    """The nanosecond nearest to a double of seconds, exactly (``seconds * 1e9`` rounds twice).

    ``seconds - floor(seconds)`` is exact, and the fraction's product with 1e9
    errs by far less than half a nanosecond, so only the last rounding remains.
    """
    whole = math.floor(seconds)
    return whole * 1_000_000_000 + round((seconds - whole) * 1e9)


class ZeekTime(Timestamp):
    """A Zeek ``time``: a :class:`Timestamp` that remembers the double it came from."""

    __slots__ = ("seconds",)

    def __repr__(self) -> str:
        return f"ZeekTime({self.seconds!r})"


class ZeekInterval(Timespan):
    """A Zeek ``interval``: a :class:`Timespan` that remembers the double it came from."""

    __slots__ = ("seconds",)

    def __repr__(self) -> str:
        return f"ZeekInterval({self.seconds!r})"


def zeek_time(seconds: float) -> ZeekTime | float:
    """The time ``seconds`` after the epoch; the double itself when no datetime can hold it
    (NaN, infinities, beyond year 9999), so nothing Zeek wrote is lost."""
    try:
        ts = ZeekTime.from_ns(seconds_to_ns(seconds))
    except (OverflowError, ValueError):
        return seconds
    ts.seconds = seconds
    return ts


def zeek_interval(seconds: float) -> ZeekInterval | float:
    """The interval of ``seconds``; the double itself when no timedelta can hold it."""
    try:
        span = ZeekInterval.from_ns(seconds_to_ns(seconds))
    except (OverflowError, ValueError):
        return seconds
    span.seconds = seconds
    return span


class ZeekSet(frozenset):
    """A set whose iteration keeps the order its elements were written in.

    It compares, hashes and tests membership as the frozenset it is; only
    iteration (and so rendering and encoding) follows the written order.
    """

    __slots__ = ("_order",)

    def __new__(cls, items: Iterable[Any] = ()) -> ZeekSet:
        order = tuple(dict.fromkeys(items))
        made = super().__new__(cls, order)
        made._order = order
        return made

    def __iter__(self) -> Iterator[Any]:
        return iter(self._order)

    def __reduce__(self) -> tuple:
        return (ZeekSet, (self._order,))

    def __repr__(self) -> str:
        return f"ZeekSet({list(self._order)!r})"
