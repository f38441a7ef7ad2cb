"""Views of Zeek's other messages: LogCreate, LogWrite, IdentifierUpdate and Batch.

Broker's Python bindings hand these out as plain data (only ``Event`` has a
class there); zeek/broker's C++ has ``broker::zeek::LogCreate`` and friends,
whose accessors these follow (``stream_id()``, ``writer_id()``,
``writer_info()``, ``path()``, ``serial_data()``, ``id_name()``,
``id_value()``). Like :class:`~broker_spark.zeek.message.Event`, each is a thin
view over the vector Zeek sends: constructing one builds exactly Zeek's
message, wrapping received data reads it back, ``valid()`` checks it the way
Broker does, and the accessors raise :class:`DecodeError` on invalid data.

Content layouts (ZEEK.md section 1):

* LogCreate: ``(stream_id enum, writer_id enum, writer_info, fields)`` with
  ``writer_info = (path, rotation_base, rotation_interval, network_time,
  config table, post_proc_func)`` and one ``(name, secondary_name or nil,
  type count, subtype count, optional bool)`` per column;
* LogWrite: ``(stream_id enum, writer_id enum, path, serial_data)``, the record
  in Zeek's binary serialization (:mod:`~broker_spark.zeek.record`);
* IdentifierUpdate: ``(id_name, id_value)``;
* Batch: a vector of whole Zeek messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from broker_spark.data.types import Count, Enum
from broker_spark.errors import DecodeError
from broker_spark.zeek.log_schema import LogField, LogSchema
from broker_spark.zeek.message import (
    PROTOCOL_VERSION,
    Event,
    Message,
    MessageType,
    _is_count,
    _is_vector,
    _plain,
)
from broker_spark.zeek.record import decode_values, encode_record
from broker_spark.zeek.types import TypeTag, ZeekType

__all__ = [
    "DEFAULT_WRITER",
    "Batch",
    "IdentifierUpdate",
    "LogCreate",
    "LogWrite",
    "WriterInfo",
    "as_message",
]

#: The writer Zeek names in the log messages it sends (its ASCII writer, JSON or not).
DEFAULT_WRITER = "Log::WRITER_ASCII"


def _enum_name(value: Any) -> str | None:
    return value.name if isinstance(value, Enum) else None


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return None


def _outer(data: Any, kind: MessageType) -> Sequence[Any] | None:
    """The content vector of ``data`` if it is a Zeek message of ``kind`` (format 1)."""
    if not (_is_vector(data) and len(data) >= 3):
        return None
    if not (_is_count(data[0], 1) and _is_count(data[1], kind) and _is_vector(data[2])):
        return None
    return data[2]


class _View(Message):
    __slots__ = ()
    KIND: MessageType = MessageType.Invalid

    def _content(self) -> Sequence[Any]:
        content = _outer(self._data, self.KIND)
        if content is None or not self._valid_content(content):
            raise DecodeError(f"invalid {type(self).__name__}: {self._data!r:.200}")
        return content

    @staticmethod
    def _valid_content(content: Sequence[Any]) -> bool:
        return True

    def valid(self) -> bool:
        content = _outer(self._data, self.KIND)
        return content is not None and self._valid_content(content)


@dataclass(frozen=True)
class WriterInfo:
    """The writer's settings a LogCreate carries (``WriterBackend::WriterInfo``)."""

    path: str
    rotation_base: float = 0.0
    rotation_interval: float = 0.0
    network_time: float = 0.0
    config: Mapping[str, str] = field(default_factory=dict)
    post_proc_func: str = ""

    def to_data(self) -> tuple:
        return (
            self.path,
            float(self.rotation_base),
            float(self.rotation_interval),
            float(self.network_time),
            dict(self.config),
            self.post_proc_func,
        )

    @classmethod
    def from_data(cls, value: Any) -> WriterInfo:
        if not (_is_vector(value) and len(value) >= 6):
            raise DecodeError(f"invalid writer info: {value!r:.120}")
        path, base, interval, now, config, post = value[:6]
        reals = (base, interval, now)
        if _text(path) is None or not all(isinstance(x, float) for x in reals):
            raise DecodeError(f"invalid writer info: {value!r:.120}")
        if not isinstance(config, Mapping) or _text(post) is None:
            raise DecodeError(f"invalid writer info: {value!r:.120}")
        return cls(_text(path) or "", base, interval, now, dict(config), _text(post) or "")


def _field_data(f: LogField) -> tuple:
    return (f.name, f.secondary_name, Count(int(f.type)), Count(int(f.subtype)), f.optional)


def _field_from_data(value: Any) -> LogField:
    if not (_is_vector(value) and len(value) >= 5):
        raise DecodeError(f"invalid log field: {value!r:.120}")
    name, secondary, tag, subtag, optional = value[:5]
    if _text(name) is None or not (_is_count(tag) and _is_count(subtag)):
        raise DecodeError(f"invalid log field: {value!r:.120}")
    if not isinstance(optional, bool) or (secondary is not None and _text(secondary) is None):
        raise DecodeError(f"invalid log field: {value!r:.120}")
    try:
        zeek_type = ZeekType(TypeTag(int(tag)), TypeTag(int(subtag)))
    except ValueError:
        raise DecodeError(f"log field {name!r}: unknown type {tag}/{subtag}") from None
    return LogField(_text(name) or "", zeek_type, optional, _text(secondary))


class LogCreate(_View):
    """``LogCreate(stream_id, writer_id, writer_info, fields)`` or ``LogCreate(data)``.

    ``writer_info`` is a :class:`WriterInfo` or just the path (``"conn"``);
    ``fields`` are :class:`~broker_spark.zeek.log_schema.LogField` (or a
    :class:`~broker_spark.zeek.log_schema.LogSchema`). ``LogCreate.of(schema)``
    builds one from a schema alone.
    """

    __slots__ = ()
    KIND = MessageType.LogCreate

    def __init__(self, *args: Any) -> None:
        if len(args) == 1:
            super().__init__(args[0])
            return
        if len(args) != 4:
            raise TypeError(
                "LogCreate(stream_id, writer_id, writer_info, fields) or LogCreate(data)"
            )
        stream_id, writer_id, info, fields = args
        if isinstance(info, str):
            info = WriterInfo(info)
        if isinstance(fields, LogSchema):
            fields = fields.fields
        content = (
            Enum(str(stream_id)),
            Enum(str(writer_id)),
            info.to_data(),
            tuple(_field_data(f) for f in fields),
        )
        super().__init__((PROTOCOL_VERSION, Count(self.KIND), content))

    @classmethod
    def of(cls, schema: LogSchema, writer_id: str = DEFAULT_WRITER) -> LogCreate:
        return cls(schema.stream, writer_id, WriterInfo(schema.path), schema.fields)

    @staticmethod
    def _valid_content(content: Sequence[Any]) -> bool:
        return len(content) >= 4 and isinstance(content[0], Enum) and isinstance(content[1], Enum)

    def stream_id(self) -> str:
        return self._content()[0].name

    def writer_id(self) -> str:
        return self._content()[1].name

    def writer_info(self) -> WriterInfo:
        return WriterInfo.from_data(self._content()[2])

    def path(self) -> str:
        return self.writer_info().path

    def fields(self) -> tuple[LogField, ...]:
        fields = self._content()[3]
        if not _is_vector(fields):
            raise DecodeError(f"invalid LogCreate fields: {fields!r:.120}")
        return tuple(_field_from_data(f) for f in fields)

    def schema(self) -> LogSchema:
        """The stream's columns as a :class:`LogSchema` (path from the writer info)."""
        return LogSchema(self.stream_id(), self.path(), self.fields(), source="LogCreate")


class LogWrite(_View):
    """``LogWrite(stream_id, writer_id, path, serial_data)`` or ``LogWrite(data)``.

    ``LogWrite.of(schema, values)`` serializes a record of ``schema``'s columns
    (values in column order, or a mapping by name) the way Zeek does.
    """

    __slots__ = ()
    KIND = MessageType.LogWrite

    def __init__(self, *args: Any) -> None:
        if len(args) == 1:
            super().__init__(args[0])
            return
        if len(args) != 4:
            raise TypeError("LogWrite(stream_id, writer_id, path, serial_data) or LogWrite(data)")
        stream_id, writer_id, path, serial = args
        if not isinstance(serial, (bytes, bytearray, memoryview)):
            raise TypeError(f"serial_data must be bytes, got {type(serial).__name__}")
        content = (Enum(str(stream_id)), Enum(str(writer_id)), str(path), bytes(serial))
        super().__init__((PROTOCOL_VERSION, Count(self.KIND), content))

    @classmethod
    def of(
        cls,
        schema: LogSchema,
        values: Sequence[Any] | Mapping[str, Any],
        writer_id: str = DEFAULT_WRITER,
    ) -> LogWrite:
        return cls(schema.stream, writer_id, schema.path, encode_record(values, schema.fields))

    @staticmethod
    def _valid_content(content: Sequence[Any]) -> bool:
        return (
            len(content) >= 4
            and isinstance(content[0], Enum)
            and isinstance(content[1], Enum)
            and _text(content[2]) is not None
            and isinstance(content[3], (str, bytes))
        )

    def stream_id(self) -> str:
        return self._content()[0].name

    def writer_id(self) -> str:
        return self._content()[1].name

    def path(self) -> str:
        return _text(self._content()[2]) or ""

    def serial_data(self) -> bytes:
        """The record's bytes (a string on the wire; Broker hands it out as str when it
        happens to be UTF-8, which encodes back to the same bytes)."""
        raw = self._content()[3]
        return raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else raw

    def values(self, names: Sequence[str] | None = None) -> list[Any]:
        """The record's values in column order (None for unset); see
        :func:`~broker_spark.zeek.record.decode_values`. ``names`` improve error messages."""
        return decode_values(self.serial_data(), names)

    def record(self, schema: LogSchema | Sequence[LogField] | Sequence[str]) -> dict[str, Any]:
        """The record as ``{column name: value}`` (unset fields left out, as in Zeek's JSON)."""
        items = schema.fields if isinstance(schema, LogSchema) else schema
        names = [f if isinstance(f, str) else f.name for f in items]
        values = self.values(names)
        if len(values) != len(names):
            raise DecodeError(
                f"LogWrite of {self.path()}: {len(values)} values, {len(names)} names"
            )
        return {n: v for n, v in zip(names, values, strict=True) if v is not None}


class IdentifierUpdate(_View):
    """``IdentifierUpdate(id_name, id_value)`` or ``IdentifierUpdate(data)``:
    what ``Broker::publish_id`` sends (a global's name and its new value)."""

    __slots__ = ()
    KIND = MessageType.IdentifierUpdate

    def __init__(self, *args: Any) -> None:
        if len(args) == 1:
            super().__init__(args[0])
            return
        if len(args) != 2:
            raise TypeError("IdentifierUpdate(id_name, id_value) or IdentifierUpdate(data)")
        name, value = args
        if not isinstance(name, str):
            raise TypeError(f"id_name must be a str, got {type(name).__name__}")
        content = (name, _plain(value))
        super().__init__((PROTOCOL_VERSION, Count(self.KIND), content))

    @staticmethod
    def _valid_content(content: Sequence[Any]) -> bool:
        return len(content) >= 2 and isinstance(content[0], (str, bytes))

    def id_name(self) -> str:
        return _text(self._content()[0]) or ""

    def id_value(self) -> Any:
        return self._content()[1]


class Batch(_View):
    """``Batch(message, ...)`` or ``Batch(data)``: several Zeek messages in one.

    Iterating a Batch gives its messages as views (:func:`as_message`); a Batch
    is valid when every message in it is (Broker rejects the whole Batch
    otherwise), and Batches may nest.
    """

    __slots__ = ()
    KIND = MessageType.Batch

    def __init__(self, *messages: Any) -> None:
        if len(messages) == 1 and not isinstance(messages[0], Message):
            super().__init__(messages[0])
            return
        content = tuple(_plain(m) for m in messages)
        super().__init__((PROTOCOL_VERSION, Count(self.KIND), content))

    @staticmethod
    def _valid_content(content: Sequence[Any]) -> bool:
        return all(as_message(m).valid() for m in content)

    def messages(self) -> list[Message]:
        return [as_message(m) for m in self._content()]

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages())

    def __len__(self) -> int:
        return self.size()

    def size(self) -> int:
        content = _outer(self._data, self.KIND)
        return len(content) if content is not None else 0

    def empty(self) -> bool:
        return self.size() == 0


_VIEWS: dict[MessageType, type[Message]] = {
    MessageType.Event: Event,
    MessageType.LogCreate: LogCreate,
    MessageType.LogWrite: LogWrite,
    MessageType.IdentifierUpdate: IdentifierUpdate,
    MessageType.Batch: Batch,
}


class _Invalid(_View):
    __slots__ = ()

    def valid(self) -> bool:
        return False


def as_message(value: Any) -> Message:
    """The view that fits a Zeek message (``Event``, ``LogCreate``, ... by its type field);
    a view whose ``valid()`` is False for anything else."""
    plain = _plain(value)
    if _is_vector(plain) and len(plain) >= 3 and _is_count(plain[1]):
        view = _VIEWS.get(MessageType(int(plain[1])) if plain[1] <= 5 else MessageType.Invalid)
        if view is not None:
            return view(value if isinstance(value, Message) else plain)
    return _Invalid(plain)


def iter_log_messages(value: Any) -> Iterable[Message]:
    """Every message of a value, Batches flattened (for log consumers)."""
    message = as_message(value)
    if isinstance(message, Batch) and message.valid():
        for inner in message._content():
            yield from iter_log_messages(inner)
    else:
        yield message
