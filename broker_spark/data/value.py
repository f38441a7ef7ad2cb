"""``Data``: Broker's variant wrapper, plus conversion to and from Python and rendering.

Broker's Python bindings expose ``broker.Data(x)`` with ``get_type()``,
``Data.to_py`` and ``str()``. We keep values as plain Python objects (see
:mod:`broker_spark.data.types`), so ``Data`` is a thin, validating wrapper: it
normalises its input once (lists become tuples, ranges are checked) and renders
the way Broker's ``to_string`` does.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Callable, Mapping
from typing import Any

from broker_spark.data.types import (
    INT64_MAX,
    INT64_MIN,
    Count,
    DataType,
    Enum,
    FrozenTable,
    Port,
    Timespan,
    Timestamp,
    as_aware,
    sort_key,
    sorted_items,
    sorted_values,
    timespan_ns,
    timestamp_ns,
    type_of,
)

MAX_DEPTH = 64

# The views ``as_set()``, ``as_table()`` and ``as_vector()`` return, by kind. The
# views build on this module (their elements are :class:`RawData`), so it cannot
# import them: :mod:`~broker_spark.data.views` registers its classes here when it
# is imported, which the package's ``__init__`` does right after this module.
_VIEWS: dict[str, Callable[[RawData], Any]] = {}


def register_views(
    set_view: Callable[[RawData], Any],
    table_view: Callable[[RawData], Any],
    vector_view: Callable[[RawData], Any],
) -> None:
    """Name what ``as_set()``, ``as_table()`` and ``as_vector()`` build (called by views)."""
    _VIEWS.update(set=set_view, table=table_view, vector=vector_view)


def from_py(value: Any, *, _depth: int = 0) -> Any:
    """Validate and normalise a Python value into Broker's mapping.

    Lists become tuples, ``bytearray`` becomes ``bytes``, containers nested in
    sets or table keys become hashable, and out-of-range numbers raise
    ``ValueError`` naming the value instead of being wrapped.
    """
    if isinstance(value, RawData):
        return value.value
    tag = type_of(value)
    unwrap = getattr(value, "_broker_value", None)
    if unwrap is not None:
        return from_py(unwrap(), _depth=_depth)
    if tag >= DataType.Set and _depth >= MAX_DEPTH:
        raise ValueError(f"value nests more than {MAX_DEPTH} containers")
    d = _depth + 1
    if tag is DataType.Integer:
        if type(value) is not int:
            value = int(value)
        if not INT64_MIN <= value <= INT64_MAX:
            raise ValueError(f"integer out of int64 range: {value}")
        return value
    if tag is DataType.Count:
        return value if type(value) is Count else Count(value)
    if tag is DataType.Boolean:
        return bool(value)
    if tag is DataType.Real:
        return float(value)
    if tag is DataType.String:
        if isinstance(value, (bytearray, memoryview)):
            return bytes(value)
        return value
    if tag is DataType.Timestamp:
        return as_aware(value)  # a naive datetime is local time, as in Broker's bindings
    if tag is DataType.Timespan:
        return value
    if tag is DataType.Set:
        return {_hashable(from_py(v, _depth=d)) for v in value}
    if tag is DataType.Table:
        return {_hashable(from_py(k, _depth=d)): from_py(v, _depth=d) for k, v in value.items()}
    if tag is DataType.Vector:
        return tuple(from_py(v, _depth=d) for v in value)
    return value


def as_element(value: Any) -> Any:
    """``value`` (a ``Data`` or a Python value) as a set element or table key is stored."""
    return _hashable(from_py(value))


def _hashable(value: Any) -> Any:
    """The hashable twin of a value that must live in a set or be a table key."""
    if isinstance(value, set):
        return frozenset(value)
    if isinstance(value, dict):
        return FrozenTable(value)
    if isinstance(value, tuple):
        return tuple(_hashable(v) for v in value)
    return value


def freeze(value: Any) -> Any:
    """An immutable, hashable copy: sets become frozensets, tables read-only mappings."""
    if isinstance(value, (set, frozenset)):
        return frozenset(freeze(v) for v in value)
    if isinstance(value, Mapping):
        return FrozenTable({freeze(k): freeze(v) for k, v in value.items()})
    if isinstance(value, (tuple, list)):
        return tuple(freeze(v) for v in value)
    return value


def _render_real(x: float) -> str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.6f}"


def render_timestamp(value: _dt.datetime) -> str:
    """ISO 8601 in UTC with milliseconds, as Broker and Zeek's JSON API print timestamps."""
    ns = timestamp_ns(value)
    ts = Timestamp.from_ns(ns - ns % 1_000_000)
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}"


def render(value: Any) -> str:
    """Render a value the way Broker's ``to_string`` does."""
    tag = type_of(value)
    if tag is DataType.None_:
        return "nil"
    if tag is DataType.Boolean:
        return "T" if value else "F"
    if tag is DataType.Real:
        return _render_real(value)
    if tag is DataType.String:
        if isinstance(value, str):
            return value
        return bytes(value).decode("utf-8", errors="backslashreplace")
    if tag in (DataType.Count, DataType.Integer):
        return int.__repr__(int(value))
    if tag is DataType.Timespan:
        return f"{timespan_ns(value)}ns"
    if tag is DataType.Timestamp:
        return render_timestamp(value)
    if tag is DataType.Set:
        return "{" + ", ".join(render(v) for v in sorted_values(value)) + "}"
    if tag is DataType.Table:
        return "{" + ", ".join(f"{render(k)} -> {render(v)}" for k, v in sorted_items(value)) + "}"
    if tag is DataType.Vector:
        return "(" + ", ".join(render(v) for v in value) + ")"
    if tag is DataType.Subnet:
        return f"{value.network_address}/{value.prefixlen}"
    return str(value)


class RawData:
    """A Broker value, as Broker's bindings hand out container elements (``_broker.Data``).

    :class:`Data` is the public subclass. Broker's ``as_set()``, ``as_table()``
    and ``as_vector()`` give elements that are *not* instances of
    ``broker.Data`` but convert with ``Data(x)`` and ``Data.to_py(x)``; code
    (Broker's own tests among it) relies on telling the two apart, so the
    views (:mod:`~broker_spark.data.views`) hand out this base class.
    """

    __slots__ = ("value",)

    Type = DataType  # ``Data.Type``: the members Broker's Python bindings name

    def __init__(self, value: Any = None) -> None:
        self.value = from_py(value)

    def get_type(self) -> DataType:
        return type_of(self.value)

    @staticmethod
    def from_py(value: Any) -> Data:
        return value if isinstance(value, Data) else Data(value)

    @staticmethod
    def to_py(data: Any) -> Any:
        return data.value if isinstance(data, RawData) else from_py(data)

    def _broker_value(self) -> Any:
        return self.value

    # --- Broker's typed accessors: the value if it has that type, else TypeError ------------

    def _as(self, tag: DataType) -> Any:
        held = type_of(self.value)
        if held is not tag:
            raise TypeError(f"Data holds a {held.name} value, not a {tag.name}: {self!s:.100}")
        return self.value

    def as_none(self) -> None:
        self._as(DataType.None_)

    def as_boolean(self) -> bool:
        return self._as(DataType.Boolean)

    def as_count(self) -> Count:
        return self._as(DataType.Count)

    def as_integer(self) -> int:
        return self._as(DataType.Integer)

    def as_real(self) -> float:
        return self._as(DataType.Real)

    def as_string(self) -> str:
        return self._as(DataType.String)

    def as_address(self) -> Any:
        return self._as(DataType.Address)

    def as_subnet(self) -> Any:
        return self._as(DataType.Subnet)

    def as_port(self) -> Port:
        return self._as(DataType.Port)

    def as_timestamp(self) -> _dt.datetime:
        return self._as(DataType.Timestamp)

    def as_timespan(self) -> _dt.timedelta:
        return self._as(DataType.Timespan)

    def as_enum_value(self) -> Enum:
        return self._as(DataType.EnumValue)

    def as_set(self) -> Any:
        """The set as a :class:`~broker_spark.data.views.Set` shared with this value."""
        self._as(DataType.Set)
        return _VIEWS["set"](self)

    def as_table(self) -> Any:
        """The table as a :class:`~broker_spark.data.views.Table` shared with this value."""
        self._as(DataType.Table)
        return _VIEWS["table"](self)

    def as_vector(self) -> Any:
        """The vector as a :class:`~broker_spark.data.views.Vector` shared with this value."""
        self._as(DataType.Vector)
        return _VIEWS["vector"](self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RawData):
            return sort_key(self.value) == sort_key(other.value)
        return NotImplemented

    def __lt__(self, other: RawData) -> bool:
        return sort_key(self.value) < sort_key(other.value)

    def __hash__(self) -> int:
        return hash(sort_key(self.value))

    def __str__(self) -> str:
        return render(self.value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"


class Data(RawData):
    """A Broker value: wraps a Python value after validating it (``broker.Data``)."""

    __slots__ = ()


__all__ = [
    "Count",
    "Data",
    "DataType",
    "Enum",
    "FrozenTable",
    "Port",
    "RawData",
    "Timespan",
    "Timestamp",
    "as_element",
    "freeze",
    "from_py",
    "render",
]
