"""The value operations behind the Store API, with Broker's meaning and type checks.

Broker's store API reduces every modifier to two commands: ``add`` (increment,
append, insert_into, push) and ``subtract`` (decrement, remove_from, pop). The
master applies them with an *adder* and a *remover* whose meaning depends on the
stored type; ``get_index_from_value`` uses a *retriever*. This module holds those
three as pure functions on Python values (they return a new value and never
modify their input, so a failed operation changes nothing), plus builders that
turn an API call into its command.

Semantics (Broker's ``appliers.hh``, in our words):

- add: count, integer, real and timespan add a value of the same type; a
  timestamp adds a timespan; a string appends a string; a vector appends any
  value; a set inserts any value; a table inserts ``(key, value)`` given as a
  vector of two (another length is ``InvalidData``). Count arithmetic wraps
  modulo 2**64 and integer/time arithmetic wraps in int64, as in C++.
- A missing key starts from the default of the command's ``init_type`` (0, 0.0,
  "", empty containers, the epoch); ``increment`` derives it from the amount
  (a timespan amount starts a *timestamp*), so incrementing a missing key works,
  while an amount of another type (init type none) cannot create a key.
- subtract: the inverse for numbers and timestamps; a vector drops its last
  element (the operand is ignored, which is how ``pop`` works); sets and tables
  remove the operand; a missing key is ``NoSuchKey``.
- get_index_from_value: sets answer membership, tables look up (``NoSuchKey``
  when absent), vectors index by a non-negative count or integer (``TypeClash``
  for another index type, ``NoSuchKey`` out of range); any other value returns
  itself, as Broker does.

One choice is stricter than Broker: an ``add`` whose ``init_type`` names a
different type than the stored value fails with ``TypeClash`` (Broker would,
e.g., append an ``insert_into`` index to a vector, or push an increment amount
onto a vector). The only cross-type pair allowed is a timestamp init type on a
stored timespan, which is what ``increment(key, timespan)`` on a timespan needs.
An init type of none (Broker's ``increment`` with a non-numeric amount, which
our builders refuse early) applies the adder as Broker does.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from broker_spark.data.types import (
    Count,
    DataType,
    Enum,
    Port,
    Timespan,
    Timestamp,
    timespan_ns,
    timestamp_ns,
    type_of,
)
from broker_spark.data.value import freeze
from broker_spark.errors import EC, StoreError
from broker_spark.store.commands import NIL, AddCommand, EntityId, SubtractCommand

__all__ = [
    "MISSING",
    "add_value",
    "append",
    "decrement",
    "default_value",
    "increment",
    "increment_init_type",
    "index_value",
    "insert_into",
    "pop",
    "push",
    "remove_from",
    "subtract_value",
]


class _Missing:
    """Marks an absent key (distinct from ``None``, which is Broker's none value)."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Any = _Missing()

_U64 = 1 << 64
_I64_MIN = -(1 << 63)


def _wrap_i64(n: int) -> int:
    return (n - _I64_MIN) % _U64 + _I64_MIN


def _type_of(value: Any, what: str) -> DataType:
    try:
        return type_of(value)
    except TypeError:
        raise StoreError(f"{what} has no Broker type: {value!r}", EC.TypeClash) from None


def _clash(op: str, current: DataType, operand: Any) -> StoreError:
    try:
        operand_type = type_of(operand).name
    except TypeError:
        operand_type = type(operand).__name__
    return StoreError(
        f"{op}: cannot apply a {operand_type} operand to a {current.name} value", EC.TypeClash
    )


def default_value(init_type: DataType) -> Any:
    """What a missing key starts as for ``init_type`` (Broker's ``data::from_type``)."""
    init_type = DataType(init_type)
    if init_type is DataType.None_:
        raise StoreError("add to a missing key without an init type", EC.TypeClash)
    return _DEFAULTS[init_type]()


_DEFAULTS = {
    DataType.Boolean: lambda: False,
    DataType.Count: lambda: Count(0),
    DataType.Integer: lambda: 0,
    DataType.Real: lambda: 0.0,
    DataType.String: lambda: "",
    DataType.Address: lambda: ipaddress.IPv6Address(0),
    DataType.Subnet: lambda: ipaddress.IPv6Network((0, 0)),
    DataType.Port: lambda: Port(0, Port.Unknown),
    DataType.Timestamp: lambda: Timestamp.from_ns(0),
    DataType.Timespan: lambda: Timespan.from_ns(0),
    DataType.EnumValue: lambda: Enum(""),
    DataType.Set: set,
    DataType.Table: dict,
    DataType.Vector: tuple,
}


def add_value(current: Any, operand: Any, init_type: DataType = DataType.None_) -> Any:
    """Broker's adder: the new value of ``current + operand`` (``current`` may be MISSING)."""
    init_type = DataType(init_type)
    if current is MISSING:
        current = default_value(init_type)
    ct = _type_of(current, "stored value")
    mismatch = init_type is not DataType.None_ and ct is not init_type
    if mismatch and not (init_type is DataType.Timestamp and ct is DataType.Timespan):
        raise StoreError(
            f"add: the operation expects a {init_type.name} but the key holds a {ct.name}",
            EC.TypeClash,
        )
    ot = _type_of(operand, "operand")
    if ct is DataType.Count and ot is DataType.Count:
        return Count((int(current) + int(operand)) % _U64)
    if ct is DataType.Integer and ot is DataType.Integer:
        return _wrap_i64(current + operand)
    if ct is DataType.Real and ot is DataType.Real:
        return float(current) + float(operand)
    if ct is DataType.Timespan and ot is DataType.Timespan:
        return Timespan.from_ns(_wrap_i64(timespan_ns(current) + timespan_ns(operand)))
    if ct is DataType.Timestamp and ot is DataType.Timespan:
        return Timestamp.from_ns(_wrap_i64(timestamp_ns(current) + timespan_ns(operand)))
    if ct is DataType.String and ot is DataType.String:
        return _concat(current, operand)
    if ct is DataType.Vector:
        return (*current, operand)
    if ct is DataType.Set:
        out = set(current)
        out.add(freeze(operand))
        return out
    if ct is DataType.Table:
        if ot is not DataType.Vector:
            raise _clash("add", ct, operand)
        if len(operand) != 2:
            raise StoreError(
                f"add: a table insert needs a (key, value) vector of 2, got {len(operand)}",
                EC.InvalidData,
            )
        out = dict(current)
        out[freeze(operand[0])] = operand[1]
        return out
    raise _clash("add", ct, operand)


def _concat(a: str | bytes, b: str | bytes) -> str | bytes:
    if isinstance(a, str) and isinstance(b, str):
        return a + b
    raw = (a.encode() if isinstance(a, str) else bytes(a)) + (
        b.encode() if isinstance(b, str) else bytes(b)
    )
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw


def subtract_value(current: Any, operand: Any) -> Any:
    """Broker's remover: the new value of ``current - operand``; MISSING is NoSuchKey."""
    if current is MISSING:
        raise StoreError("subtract from a missing key", EC.NoSuchKey)
    ct = _type_of(current, "stored value")
    ot = _type_of(operand, "operand")
    if ct is DataType.Count and ot is DataType.Count:
        return Count((int(current) - int(operand)) % _U64)
    if ct is DataType.Integer and ot is DataType.Integer:
        return _wrap_i64(current - operand)
    if ct is DataType.Real and ot is DataType.Real:
        return float(current) - float(operand)
    if ct is DataType.Timespan and ot is DataType.Timespan:
        return Timespan.from_ns(_wrap_i64(timespan_ns(current) - timespan_ns(operand)))
    if ct is DataType.Timestamp and ot is DataType.Timespan:
        return Timestamp.from_ns(_wrap_i64(timestamp_ns(current) - timespan_ns(operand)))
    if ct is DataType.Vector:
        return tuple(current[:-1])
    if ct is DataType.Set:
        out = set(current)
        out.discard(freeze(operand))
        return out
    if ct is DataType.Table:
        out = dict(current)
        out.pop(freeze(operand), None)
        return out
    raise _clash("subtract", ct, operand)


def index_value(current: Any, index: Any) -> Any:
    """Broker's retriever for ``get_index_from_value``."""
    ct = _type_of(current, "stored value")
    if ct is DataType.Vector:
        it = _type_of(index, "index")
        if it not in (DataType.Count, DataType.Integer) or index < 0:
            raise StoreError(
                f"get_index_from_value: a vector needs a non-negative count or integer "
                f"index, got {index!r}",
                EC.TypeClash,
            )
        if index >= len(current):
            raise StoreError(
                f"get_index_from_value: index {int(index)} beyond a vector of {len(current)}",
                EC.NoSuchKey,
            )
        return current[int(index)]
    if ct is DataType.Set:
        return freeze(index) in current
    if ct is DataType.Table:
        key = freeze(index)
        if key not in current:
            raise StoreError(f"get_index_from_value: no key {index!r} in the table", EC.NoSuchKey)
        return current[key]
    return current


# -- API calls -> commands ---------------------------------------------------------

_INCREMENT_INIT = {
    DataType.Count: DataType.Count,
    DataType.Integer: DataType.Integer,
    DataType.Real: DataType.Real,
    DataType.Timespan: DataType.Timestamp,
}


def increment_init_type(amount: Any) -> DataType:
    """The init type ``increment`` uses: the amount's numeric type, timestamp for a timespan."""
    return _INCREMENT_INIT.get(_type_of(amount, "amount"), DataType.None_)


def _check_amount(op: str, amount: Any) -> None:
    if increment_init_type(amount) is DataType.None_:
        raise StoreError(
            f"{op}: the amount must be a count, integer, real or timespan, got {amount!r}",
            EC.TypeClash,
        )


def increment(
    key: Any, amount: Any, expiry: int | None = None, publisher: EntityId = NIL
) -> AddCommand:
    """``increment(key, amount)``: a missing key starts at zero (the epoch for a timespan)."""
    _check_amount("increment", amount)
    return AddCommand(key, amount, increment_init_type(amount), expiry, publisher)


def decrement(
    key: Any, amount: Any, expiry: int | None = None, publisher: EntityId = NIL
) -> SubtractCommand:
    """``decrement(key, amount)``: fails with NoSuchKey on a missing key (at the master)."""
    _check_amount("decrement", amount)
    return SubtractCommand(key, amount, expiry, publisher)


def append(key: Any, text: Any, expiry: int | None = None, publisher: EntityId = NIL) -> AddCommand:
    """``append(key, s)``: string concatenation; a missing key starts as ""."""
    if _type_of(text, "appended value") is not DataType.String:
        raise StoreError(f"append: expected a string, got {text!r}", EC.TypeClash)
    return AddCommand(key, text, DataType.String, expiry, publisher)


def insert_into(
    key: Any,
    index: Any,
    value: Any = MISSING,
    expiry: int | None = None,
    publisher: EntityId = NIL,
) -> AddCommand:
    """``insert_into(key, i)`` adds to a set; ``insert_into(key, i, v)`` sets a table entry."""
    _type_of(index, "index")
    if value is MISSING:
        return AddCommand(key, index, DataType.Set, expiry, publisher)
    _type_of(value, "value")
    return AddCommand(key, (index, value), DataType.Table, expiry, publisher)


def remove_from(
    key: Any, index: Any, expiry: int | None = None, publisher: EntityId = NIL
) -> SubtractCommand:
    """``remove_from(key, i)``: removes a set element or a table key."""
    _type_of(index, "index")
    return SubtractCommand(key, index, expiry, publisher)


def push(key: Any, value: Any, expiry: int | None = None, publisher: EntityId = NIL) -> AddCommand:
    """``push(key, v)``: appends to a vector; a missing key starts as an empty vector."""
    _type_of(value, "value")
    return AddCommand(key, value, DataType.Vector, expiry, publisher)


def pop(key: Any, expiry: int | None = None, publisher: EntityId = NIL) -> SubtractCommand:
    """``pop(key)``: drops a vector's last element (Broker sends the key as the operand)."""
    return SubtractCommand(key, key, expiry, publisher)
