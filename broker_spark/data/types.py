"""Broker's data model as Python values.

Every Broker type maps onto a Python value (REFERENCE.md section 1): ``None``,
``bool``, ``int`` (integer), :class:`Count` (count), ``float`` (real), ``str``
(string; ``bytes`` for strings that are not UTF-8), ``ipaddress`` addresses and
networks, :class:`Port`, ``datetime`` (timestamp), ``timedelta`` (timespan),
:class:`Enum`, ``set``/``frozenset``, ``dict``/mapping and ``tuple``/``list``.

Timestamps and timespans carry nanoseconds, which ``datetime`` and ``timedelta``
cannot, so decoders return :class:`Timestamp` and :class:`Timespan`: subclasses
that remember the nanosecond remainder and behave as the standard types
everywhere else.

The codecs work on these plain values directly (no wrapper objects on the hot
path); :func:`type_of` classifies a value and :func:`sort_key` gives the total
order Broker uses (by type tag, then value), which makes set and table encodings
canonical.
"""

from __future__ import annotations

import datetime as _dt
import enum
import ipaddress
import math
import struct
from collections.abc import Iterator, Mapping
from typing import Any

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1

UTC = _dt.timezone.utc
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=UTC)

#: ``datetime``'s and ``timedelta``'s own constructors. :class:`Timestamp` and
#: :class:`Timespan` take Broker's one-number forms in a Python ``__new__``, which
#: triples the cost of a construction; the decoders build through these instead.
new_datetime = _dt.datetime.__new__
new_timedelta = _dt.timedelta.__new__


class Count(int):
    """Broker's ``count``: an unsigned 64-bit integer, distinct from ``int`` (integer)."""

    __slots__ = ()

    def __new__(cls, value: Any = 0) -> Count:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(f"Count needs an integral value, got {value!r}")
        n = int.__new__(cls, value)
        if n < 0 or n > UINT64_MAX:
            raise ValueError(f"Count out of range [0, 2**64-1]: {int(n)}")
        return n

    @property
    def value(self) -> int:
        """The number as a plain ``int`` (Broker's ``Count.value``; read-only, as a count is)."""
        return int(self)

    def __repr__(self) -> str:
        return f"Count({int(self)})"

    def __str__(self) -> str:
        return int.__repr__(self)


class Port:
    """A transport-layer port: a number and a protocol (Broker's ``port``)."""

    __slots__ = ("_number", "_proto")

    Unknown = 0
    TCP = 1
    UDP = 2
    ICMP = 3

    _NAMES = {0: "?", 1: "tcp", 2: "udp", 3: "icmp"}
    _BY_NAME = {"?": 0, "tcp": 1, "udp": 2, "icmp": 3}

    def __init__(self, number: int, proto: int = 0) -> None:
        number = int(number)
        proto = int(proto)
        if not 0 <= number <= 65535:
            raise ValueError(f"port number out of range [0, 65535]: {number}")
        if proto not in self._NAMES:
            raise ValueError(f"unknown port protocol {proto} (expected 0..3)")
        self._number = number
        self._proto = proto

    def number(self) -> int:
        return self._number

    def type(self) -> int:
        return self._proto

    def protocol_name(self) -> str:
        return self._NAMES[self._proto]

    @classmethod
    def parse(cls, text: str) -> Port:
        """Parse ``80/tcp``; raise ValueError naming the text when it is not a port."""
        num, sep, proto = text.partition("/")
        if not sep or proto not in cls._BY_NAME or not num.isdigit():
            raise ValueError(f"not a port: {text!r}")
        return cls(int(num), cls._BY_NAME[proto])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Port):
            return self._number == other._number and self._proto == other._proto
        return NotImplemented

    def __lt__(self, other: Port) -> bool:
        return (self._number, self._proto) < (other._number, other._proto)

    def __hash__(self) -> int:
        return hash((Port, self._number, self._proto))

    def __str__(self) -> str:
        return f"{self._number}/{self._NAMES[self._proto]}"

    def __repr__(self) -> str:
        return f"Port({self._number}, {self._proto})"


class Enum:
    """An enum value, known only by its name (Broker's ``enum_value``)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"Enum name must be a str, got {type(name).__name__}")
        self.name = name

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Enum):
            return self.name == other.name
        return NotImplemented

    def __lt__(self, other: Enum) -> bool:
        return self.name < other.name

    def __hash__(self) -> int:
        return hash((Enum, self.name))

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Enum({self.name!r})"


class Timestamp(_dt.datetime):
    """A UTC ``datetime`` that keeps Broker's nanosecond precision.

    One built by :meth:`from_ns` (every decoded one) also remembers the
    nanoseconds it was built from, in ``_ns``: the compiled binary encoder
    writes that instead of working the instant out again from the fields
    (two ``timedelta`` operations, most of the cost of encoding a timestamp).
    Values are immutable, so it never goes stale; others simply lack it.
    """

    __slots__ = ("_nanos", "_ns")

    def __new__(cls, *args: Any, **kwargs: Any) -> Timestamp:
        """``Timestamp(seconds)``: seconds since the epoch, a number, as Broker's bindings
        take it; any other arguments are ``datetime``'s."""
        if len(args) == 1 and not kwargs and _is_number(args[0]):
            return cls.from_ns(_seconds_ns(args[0]))
        return super().__new__(cls, *args, **kwargs)

    @classmethod
    def from_ns(cls, ns: int) -> Timestamp:
        """The instant ``ns`` nanoseconds after the epoch.

        This runs once per decoded timestamp, so it avoids ``datetime``'s slow
        paths: a subclass built by arithmetic goes through a Python-level
        constructor call with eight arguments, while ``datetime``'s pickle form
        (its fields as ten bytes, plus the tzinfo) is copied in directly. The
        first six of those bytes (year to minute) are remembered per minute,
        since the timestamps of a stream cluster in time.
        """
        minute, rem = divmod(ns, 60_000_000_000)
        head = _MINUTE_HEADS.get(minute)
        if head is None:
            head = _minute_head(minute)
        micros, nanos = divmod(rem, 1000)
        second, micro = divmod(micros, 1_000_000)
        ts = new_datetime(cls, head + _pack_tail(second, micro >> 16, micro & 0xFFFF), UTC)
        ts._nanos = nanos  # always set: reading an unset slot raises, which is slow
        ts._ns = ns
        return ts

    @property
    def nanosecond(self) -> int:
        """Nanoseconds beyond the microsecond (0..999)."""
        return getattr(self, "_nanos", 0)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _dt.datetime):
            return timestamp_ns(self) == timestamp_ns(other)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        if isinstance(other, _dt.datetime):
            return timestamp_ns(self) != timestamp_ns(other)
        return NotImplemented

    def __lt__(self, other: _dt.datetime) -> bool:
        return timestamp_ns(self) < timestamp_ns(other)

    def __le__(self, other: _dt.datetime) -> bool:
        return timestamp_ns(self) <= timestamp_ns(other)

    def __gt__(self, other: _dt.datetime) -> bool:
        return timestamp_ns(self) > timestamp_ns(other)

    def __ge__(self, other: _dt.datetime) -> bool:
        return timestamp_ns(self) >= timestamp_ns(other)

    def __hash__(self) -> int:
        return _dt.datetime.__hash__(self) ^ self.nanosecond

    def __repr__(self) -> str:
        return f"Timestamp.from_ns({timestamp_ns(self)})"


class Timespan(_dt.timedelta):
    """A ``timedelta`` that keeps Broker's nanosecond precision.

    Like :class:`Timestamp`, one built by :meth:`from_ns` remembers its
    nanoseconds in ``_ns`` for the binary encoder.
    """

    __slots__ = ("_nanos", "_ns")

    def __new__(cls, *args: Any, **kwargs: Any) -> Timespan:
        """``Timespan(n)`` as Broker's bindings take it: an ``int`` is nanoseconds, a
        ``float`` seconds; any other arguments are ``timedelta``'s (days first)."""
        if len(args) == 1 and not kwargs and _is_number(args[0]):
            n = args[0]
            return cls.from_ns(int(n) if isinstance(n, int) else _seconds_ns(n))
        return super().__new__(cls, *args, **kwargs)

    @classmethod
    def from_ns(cls, ns: int) -> Timespan:
        micros, rem = divmod(ns, 1000)
        span = new_timedelta(cls, 0, 0, micros)
        span._nanos = rem  # always set: reading an unset slot raises, which is slow
        span._ns = ns
        return span

    @property
    def nanoseconds(self) -> int:
        """Nanoseconds beyond the microsecond (0..999)."""
        return getattr(self, "_nanos", 0)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _dt.timedelta):
            return timespan_ns(self) == timespan_ns(other)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        if isinstance(other, _dt.timedelta):
            return timespan_ns(self) != timespan_ns(other)
        return NotImplemented

    def __lt__(self, other: _dt.timedelta) -> bool:
        return timespan_ns(self) < timespan_ns(other)

    def __le__(self, other: _dt.timedelta) -> bool:
        return timespan_ns(self) <= timespan_ns(other)

    def __gt__(self, other: _dt.timedelta) -> bool:
        return timespan_ns(self) > timespan_ns(other)

    def __ge__(self, other: _dt.timedelta) -> bool:
        return timespan_ns(self) >= timespan_ns(other)

    def __hash__(self) -> int:
        return _dt.timedelta.__hash__(self) ^ self.nanoseconds

    def __repr__(self) -> str:
        return f"Timespan.from_ns({timespan_ns(self)})"


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _seconds_ns(seconds: float) -> int:
    """Seconds (an int or a float) as whole nanoseconds; ``ValueError`` for NaN or infinity."""
    if isinstance(seconds, int):
        return seconds * 1_000_000_000
    if not math.isfinite(seconds):
        raise ValueError(f"not a finite number of seconds: {seconds!r}")
    return round(seconds * 1e9)


def as_aware(value: _dt.datetime) -> _dt.datetime:
    """``value`` with a zone: a naive ``datetime`` is local time, as Broker's bindings read it
    (``datetime.timestamp()``); one beyond what the local zone can convert is taken as UTC."""
    if value.tzinfo is not None:
        return value
    try:
        return value.astimezone(UTC)
    except (OverflowError, ValueError, OSError):
        return value.replace(tzinfo=UTC)


_EPOCH_TS = Timestamp(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE = _dt.datetime(1970, 1, 1)
_ONE_US = _dt.timedelta(microseconds=1)
_ONE_MINUTE = _dt.timedelta(minutes=1)
_pack_head = struct.Struct(">HBBBB").pack  # year, month, day, hour, minute
_pack_tail = struct.Struct(">BBH").pack  # second, microsecond (3 bytes, big-endian)
_MINUTE_HEADS: dict[int, bytes] = {}
_MINUTE_HEADS_MAX = 4096


def _minute_head(minute: int) -> bytes:
    """The year-to-minute bytes of a ``datetime``'s pickle state (remembered, bounded)."""
    d = _EPOCH_NAIVE + _ONE_MINUTE * minute  # OverflowError when out of datetime's range
    head = _pack_head(d.year, d.month, d.day, d.hour, d.minute)
    if len(_MINUTE_HEADS) >= _MINUTE_HEADS_MAX:
        _MINUTE_HEADS.clear()
    _MINUTE_HEADS[minute] = head
    return head


def timestamp_ns(value: _dt.datetime) -> int:
    """Nanoseconds since the epoch; a naive ``datetime`` is local time (:func:`as_aware`)."""
    if value.tzinfo is None:
        value = as_aware(value)
    # timedelta // timedelta is exact integer arithmetic, in C.
    return (value - _EPOCH) // _ONE_US * 1000 + getattr(value, "_nanos", 0)


def timespan_ns(value: _dt.timedelta) -> int:
    """Nanoseconds in a timedelta (exact, including a :class:`Timespan`'s remainder)."""
    return value // _ONE_US * 1000 + getattr(value, "_nanos", 0)


class FrozenTable(Mapping):
    """A read-only, hashable table: used where a table must be a set element or key."""

    __slots__ = ("_d", "_hash")

    def __init__(self, items: Any = ()) -> None:
        self._d = dict(items)
        self._hash: int | None = None

    def __getitem__(self, key: Any) -> Any:
        return self._d[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._d.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self._d == dict(other.items())
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenTable({self._d!r})"


class DataType(enum.IntEnum):
    """Broker's type tags, which are also the tags of the binary encoding."""

    None_ = 0
    Boolean = 1
    Count = 2
    Integer = 3
    Real = 4
    String = 5
    Address = 6
    Subnet = 7
    Port = 8
    Timestamp = 9
    Timespan = 10
    EnumValue = 11
    Set = 12
    Table = 13
    Vector = 14

    Nil = 0  # Broker's bindings name none both ``Nil`` and ``None`` (added below)

    def __str__(self) -> str:
        return f"Type.{self.name}"  # as Broker's bindings print ``Data.Type`` members

    def __repr__(self) -> str:
        return f"<Type.{self.name}: {self.value}>"


# ``None`` is a keyword, so that alias cannot be written in the class body.
type.__setattr__(DataType, "None", DataType.None_)
DataType._member_map_["None"] = DataType.None_

_EXACT_TAGS: dict[type, DataType] = {
    type(None): DataType.None_,
    bool: DataType.Boolean,
    Count: DataType.Count,
    int: DataType.Integer,
    float: DataType.Real,
    str: DataType.String,
    bytes: DataType.String,
    ipaddress.IPv4Address: DataType.Address,
    ipaddress.IPv6Address: DataType.Address,
    ipaddress.IPv4Network: DataType.Subnet,
    ipaddress.IPv6Network: DataType.Subnet,
    Port: DataType.Port,
    _dt.datetime: DataType.Timestamp,
    Timestamp: DataType.Timestamp,
    _dt.timedelta: DataType.Timespan,
    Timespan: DataType.Timespan,
    Enum: DataType.EnumValue,
    set: DataType.Set,
    frozenset: DataType.Set,
    dict: DataType.Table,
    FrozenTable: DataType.Table,
    tuple: DataType.Vector,
    list: DataType.Vector,
}


def type_of(value: Any) -> DataType:
    """The Broker type of a Python value; ``TypeError`` naming it when it has none."""
    tag = _EXACT_TAGS.get(type(value))
    if tag is not None:
        return tag
    # Subclasses and ABCs, checked in an order where bool precedes int and Count precedes int.
    if isinstance(value, bool):
        return DataType.Boolean
    if isinstance(value, Count):
        return DataType.Count
    if isinstance(value, int):
        return DataType.Integer
    if isinstance(value, float):
        return DataType.Real
    if isinstance(value, (str, bytes, bytearray, memoryview)):
        return DataType.String
    if isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return DataType.Address
    if isinstance(value, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        return DataType.Subnet
    if isinstance(value, _dt.datetime):
        return DataType.Timestamp
    if isinstance(value, _dt.timedelta):
        return DataType.Timespan
    if isinstance(value, (set, frozenset)):
        return DataType.Set
    if isinstance(value, Port):
        return DataType.Port
    if isinstance(value, Enum):
        return DataType.EnumValue
    if isinstance(value, Mapping):
        return DataType.Table
    if isinstance(value, (tuple, list)):
        return DataType.Vector
    unwrap = getattr(value, "_broker_value", None)
    if unwrap is not None:
        return type_of(unwrap())
    raise TypeError(f"no Broker type for {type(value).__name__} value {value!r}")


def address_bytes(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bytes:
    """The 16-byte form Broker uses: IPv4 as ``::ffff:a.b.c.d``."""
    if addr.version == 4:
        return b"\x00" * 10 + b"\xff\xff" + addr.packed
    return addr.packed


def _real_key(x: float) -> tuple[int, float]:
    # NaNs sort after everything, tie-broken by their bits so sets of NaNs stay canonical.
    if math.isnan(x):
        return (1, float(struct.unpack(">q", struct.pack(">d", x))[0]))
    return (0, x)


def sort_key(value: Any) -> tuple:
    """A key giving Broker's total order: by type tag, then by value."""
    tag = type_of(value)
    if tag is DataType.None_:
        return (0,)
    if tag is DataType.Real:
        return (4, _real_key(value))
    if tag is DataType.String:
        raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        return (5, raw)
    if tag is DataType.Address:
        return (6, address_bytes(value))
    if tag is DataType.Subnet:
        return (
            7,
            address_bytes(value.network_address),
            value.prefixlen + (96 if value.version == 4 else 0),
        )
    if tag is DataType.Port:
        return (8, value.number(), value.type())
    if tag is DataType.Timestamp:
        return (9, timestamp_ns(value))
    if tag is DataType.Timespan:
        return (10, timespan_ns(value))
    if tag is DataType.EnumValue:
        return (11, value.name)
    if tag is DataType.Set:
        return (12, tuple(sorted(sort_key(v) for v in value)))
    if tag is DataType.Table:
        return (13, tuple(sorted((sort_key(k), sort_key(v)) for k, v in value.items())))
    if tag is DataType.Vector:
        return (14, tuple(sort_key(v) for v in value))
    return (int(tag), int(value))


def sorted_values(values: Any) -> list:
    """Values in Broker's canonical order (fast path for homogeneous simple sets)."""
    try:
        items = list(values)
        first = type(items[0]) if items else None
        if first in (int, str, float, Count) and all(type(v) is first for v in items):
            # Code-point order equals UTF-8 byte order, so strings sort as they are.
            if first is float and any(math.isnan(v) for v in items):
                return sorted(items, key=sort_key)
            return sorted(items)
    except TypeError:
        pass
    return sorted(items, key=sort_key)


def sorted_items(table: Mapping) -> list:
    """A table's items in Broker's canonical key order."""
    keys = sorted_values(table.keys())
    return [(k, table[k]) for k in keys]
