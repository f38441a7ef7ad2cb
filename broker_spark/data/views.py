"""``Set``, ``Table`` and ``Vector``: what ``Data.as_set()``, ``as_table()`` and ``as_vector()`` return.

Broker's bindings hand out its C++ containers of ``data`` as Python objects
whose elements are bare ``Data`` values (not instances of the public
``broker.Data`` subclass), which convert back with ``Data(x)`` or
``Data.to_py(x)``. Code written for them iterates in Broker's order, indexes
tables with ``Data`` keys, and edits a set in place (``remove``, ``clear``).
These views do the same over the plain Python value a ``Data`` holds: they
share it, so an edit through a view is an edit of the ``Data``, and every
element comes out as a :class:`~broker_spark.data.value.RawData`.

The views build on :mod:`~broker_spark.data.value`, which therefore does not
import them: this module registers its classes there when it is imported
(:func:`~broker_spark.data.value.register_views`), for ``as_set()`` and the rest.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from broker_spark.data.types import FrozenTable, sorted_items, sorted_values
from broker_spark.data.value import RawData, as_element, from_py, register_views, render

__all__ = ["Set", "Table", "Vector"]


def _element(value: Any) -> RawData:
    """A bare ``Data`` around a value that is valid already (no second validation)."""
    element = RawData.__new__(RawData)
    element.value = value
    return element


class Set:
    """A Broker set, shared with the ``Data`` it came from."""

    __slots__ = ("_owner",)

    def __init__(self, owner: RawData) -> None:
        if not isinstance(owner.value, set):  # a frozenset (inside a container): make it ours
            owner.value = set(owner.value)
        self._owner = owner

    def __iter__(self) -> Iterator[RawData]:
        return (_element(v) for v in sorted_values(self._owner.value))

    def __len__(self) -> int:
        return len(self._owner.value)

    def __contains__(self, item: object) -> bool:
        return as_element(item) in self._owner.value

    def add(self, item: Any) -> None:
        self._owner.value.add(as_element(item))

    def remove(self, item: Any) -> None:
        """Remove ``item`` (a ``Data`` or a Python value); ``KeyError`` if it is absent."""
        self._owner.value.remove(as_element(item))

    def discard(self, item: Any) -> None:
        self._owner.value.discard(as_element(item))

    def clear(self) -> None:
        self._owner.value.clear()

    def _broker_value(self) -> set:
        return self._owner.value

    def __str__(self) -> str:
        return "Set{" + ", ".join(map(render, sorted_values(self._owner.value))) + "}"

    __repr__ = __str__


class Table:
    """A Broker table, shared with the ``Data`` it came from; keys and values are ``Data``."""

    __slots__ = ("_owner",)

    def __init__(self, owner: RawData) -> None:
        if isinstance(owner.value, FrozenTable):  # read-only (inside a container): make it ours
            owner.value = dict(owner.value)
        self._owner = owner

    def __getitem__(self, key: Any) -> RawData:
        return _element(self._owner.value[as_element(key)])

    def __setitem__(self, key: Any, value: Any) -> None:
        self._owner.value[as_element(key)] = from_py(value)

    def __delitem__(self, key: Any) -> None:
        del self._owner.value[as_element(key)]

    def __contains__(self, key: object) -> bool:
        return as_element(key) in self._owner.value

    def __len__(self) -> int:
        return len(self._owner.value)

    def __iter__(self) -> Iterator[RawData]:
        return (_element(k) for k, _ in sorted_items(self._owner.value))

    def keys(self) -> list[RawData]:
        return list(self)

    def values(self) -> list[RawData]:
        return [_element(v) for _, v in sorted_items(self._owner.value)]

    def items(self) -> list[tuple[RawData, RawData]]:
        return [(_element(k), _element(v)) for k, v in sorted_items(self._owner.value)]

    def _broker_value(self) -> dict:
        return self._owner.value

    def __str__(self) -> str:
        pairs = sorted_items(self._owner.value)
        return "Table{" + ", ".join(f"{render(k)}: {render(v)}" for k, v in pairs) + "}"

    __repr__ = __str__


class Vector:
    """A Broker vector, shared with the ``Data`` it came from; elements are ``Data``.

    The ``Data`` holds a tuple, so an edit stores a new tuple in it.
    """

    __slots__ = ("_owner",)

    def __init__(self, owner: RawData) -> None:
        self._owner = owner

    def __getitem__(self, index: int) -> RawData:
        return _element(self._owner.value[index])

    def __setitem__(self, index: int, value: Any) -> None:
        items = list(self._owner.value)
        items[index] = from_py(value)
        self._owner.value = tuple(items)

    def append(self, value: Any) -> None:
        self._owner.value = (*self._owner.value, from_py(value))

    def __len__(self) -> int:
        return len(self._owner.value)

    def __iter__(self) -> Iterator[RawData]:
        return (_element(v) for v in self._owner.value)

    def _broker_value(self) -> tuple:
        return self._owner.value

    def __str__(self) -> str:
        return "Vector[" + ", ".join(map(render, self._owner.value)) + "]"

    __repr__ = __str__


register_views(Set, Table, Vector)
