"""Zeek's messages on top of Broker data, as Broker's Python ``broker.zeek`` offers them.

Zeek does not give its messages a type of their own on the wire: a Zeek message
is the vector ``(format 1, type, content)`` with counts for the first two, and
an event's content is ``(name, (args...))`` plus optionally a metadata vector of
``(count key, value)`` pairs (key 1 is the network timestamp). So an
:class:`Event` is a thin view over that vector: building one produces exactly
what Zeek sends, and wrapping received data lets code read it back. Publishing
an Event publishes its vector (``_broker_value``), which both codecs understand.

Like the real bindings, ``name()``, ``args()`` and ``metadata()`` raise (a
DecodeError, which is a ValueError) on data that is not a valid event, and
``valid()`` says whether it is one.
"""

from __future__ import annotations

import datetime as _dt
import enum
from collections.abc import Iterator, Mapping
from typing import Any

from broker_spark.data.types import Count
from broker_spark.data.value import RawData, freeze, from_py
from broker_spark.errors import DecodeError

PROTOCOL_VERSION = Count(1)
"""The format number Zeek puts first in every message."""


class MessageType(enum.IntEnum):
    """The second field of a Zeek message (``broker::zeek::Message::Type``)."""

    Invalid = 0
    Event = 1
    LogCreate = 2
    LogWrite = 3
    IdentifierUpdate = 4
    Batch = 5


class MetadataType:
    """Event metadata keys: 1 to 199 are Zeek's, 200 and up are free for users."""

    NetworkTimestamp = Count(1)
    UserMetadataStart = Count(200)


def _plain(value: Any) -> Any:
    """The Broker value behind a Message or Data wrapper (the value itself otherwise)."""
    if isinstance(value, Message):
        return value._data
    if isinstance(value, RawData):
        return value.value
    return value


def _is_vector(value: Any) -> bool:
    return isinstance(value, (tuple, list))


def _is_count(value: Any, expected: int | None = None) -> bool:
    return isinstance(value, Count) and (expected is None or value == expected)


def message_type(value: Any) -> MessageType:
    """The type a Zeek message claims (``Invalid`` for anything that is not one)."""
    value = _plain(value)
    if _is_vector(value) and len(value) >= 3 and _is_count(value[1]) and value[1] <= 5:
        return MessageType(int(value[1]))
    return MessageType.Invalid


def _event_fields(value: Any) -> tuple | list | None:
    """The content of a valid event vector (name, args[, metadata]), else None.

    Mirrors ``broker::zeek::Event::valid``: format 1, type 1, a content vector of
    a string name and an argument vector, and, if present, metadata entries that
    are ``(count, value)`` pairs whose network timestamp is a timestamp.
    """
    if not (_is_vector(value) and len(value) >= 3):
        return None
    if not (_is_count(value[0], 1) and _is_count(value[1], MessageType.Event)):
        return None
    fields = value[2]
    if not (_is_vector(fields) and len(fields) >= 2):
        return None
    if not isinstance(fields[0], (str, bytes)) or not _is_vector(fields[1]):
        return None
    if len(fields) > 2:
        if not _is_vector(fields[2]):
            return None
        for entry in fields[2]:
            if not (_is_vector(entry) and len(entry) == 2 and _is_count(entry[0])):
                return None
            if entry[0] == MetadataType.NetworkTimestamp and not isinstance(entry[1], _dt.datetime):
                return None
    return fields


def is_event(value: Any) -> bool:
    """Whether a Broker value (or Data, or Event) is a valid Zeek event."""
    return _event_fields(_plain(value)) is not None


def _name_text(name: str | bytes) -> str:
    return name if isinstance(name, str) else name.decode("utf-8", "backslashreplace")


def event_name_and_args(value: Any) -> tuple[str, tuple] | None:
    """``(name, args)`` of a Zeek event, or None when the value is not one.

    A name that is not UTF-8 (bytes) comes back with backslash escapes.
    """
    fields = _event_fields(_plain(value))
    if fields is None:
        return None
    return _name_text(fields[0]), tuple(fields[1])


class Message:
    """Any Zeek message: the ``(format, type, content)`` vector it is made of."""

    __slots__ = ("_data",)

    def __init__(self, data: Any) -> None:
        self._data = from_py(_plain(data))

    def as_data(self) -> Any:
        """The underlying Broker value (a vector), as-is."""
        return self._data

    def type(self) -> MessageType:
        return message_type(self._data)

    def _broker_value(self) -> Any:
        return self._data

    # A message behaves as the vector it is, so code that walks vectors handles it.
    def __iter__(self) -> Iterator[Any]:
        return iter(self._data) if _is_vector(self._data) else iter(())

    def __len__(self) -> int:
        return len(self._data) if _is_vector(self._data) else 0

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Message):
            return self._data == other._data
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # the data may hold sets and tables

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._data!r})"


def _metadata_vector(metadata: Any) -> tuple:
    """Metadata from a mapping or pairs, keys made counts (as the real bindings do)."""
    items = metadata.items() if isinstance(metadata, Mapping) else metadata
    out = []
    for entry in items:
        key, value = entry
        out.append((key if isinstance(key, Count) else Count(key), value))
    return tuple(out)


class Event(Message):
    """A Zeek event: ``Event(name, *args, metadata=None)`` or ``Event(data)``.

    ``Event(data)`` wraps a received value (no validation: ask ``valid()``);
    ``metadata`` is a mapping or pairs of ``(key, value)``, e.g.
    ``{MetadataType.NetworkTimestamp: ts}``.
    """

    __slots__ = ()

    def __init__(self, *args: Any, metadata: Any = None) -> None:
        if not args:
            raise TypeError("Event needs a name (and arguments) or a message value")
        if len(args) == 1 and not isinstance(args[0], str):
            super().__init__(args[0])
            return
        name, params = args[0], tuple(args[1:])
        if not isinstance(name, str):
            raise TypeError(f"event name must be a str, got {type(name).__name__}")
        content: tuple = (name, params)
        if metadata is not None:
            content += (_metadata_vector(metadata),)
        super().__init__((PROTOCOL_VERSION, Count(MessageType.Event), content))

    def valid(self) -> bool:
        return _event_fields(self._data) is not None

    def _fields(self) -> tuple | list:
        fields = _event_fields(self._data)
        if fields is None:
            kind = "data" if self.type() is MessageType.Event else "data/type"
            raise DecodeError(f"invalid Event {kind}: {self._data!r:.200}")
        return fields

    def name(self) -> str:
        return _name_text(self._fields()[0])

    def args(self) -> list:
        return list(self._fields()[1])

    def metadata(self) -> list[tuple] | None:
        """The ``(key, value)`` metadata pairs, or None when there are none."""
        fields = self._fields()
        if len(fields) > 2 and fields[2]:
            return [tuple(entry) for entry in fields[2]]
        return None

    def ts(self) -> _dt.datetime | None:
        """The network timestamp from the metadata, if any."""
        for key, value in self.metadata() or ():
            if key == MetadataType.NetworkTimestamp:
                return value
        return None

    def __repr__(self) -> str:
        if not self.valid():
            return f"Event({self._data!r})"
        params = "".join(f", {a!r}" for a in self.args())
        meta = self.metadata()
        extra = f", metadata={meta!r}" if meta is not None else ""
        return f"Event({self.name()!r}{params}{extra})"


class SafeEvent(Event):
    """An Event whose ``args()`` are immutable and hashable (frozensets, read-only tables)."""

    __slots__ = ()

    def args(self) -> list:
        return [freeze(a) for a in super().args()]


__all__ = [
    "PROTOCOL_VERSION",
    "Event",
    "Message",
    "MessageType",
    "MetadataType",
    "SafeEvent",
    "event_name_and_args",
    "is_event",
    "message_type",
]
