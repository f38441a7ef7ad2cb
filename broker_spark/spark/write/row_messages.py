"""Rows to Broker data messages: what the writers publish for each Arrow batch.

The layout of the rows decides everything, once, when the writer is built
(so a schema that cannot be published fails the query at start):

* the **topic** is the ``topic`` option, or else a ``topic`` string column
  (as Spark's Kafka sink: the option wins when both are there);
* the **value** is, in this order of preference,

  - a ``data`` string column of Zeek JSON text (other columns are ignored,
    so the reader's own output can be written back as it is);
  - with ``format=zeek``, a Zeek event named by an ``event`` string column
    whose arguments are all the other columns, in order;
  - else all the other columns, in order, as one vector.

Typed columns become Broker values through the Arrow mapping
(:func:`broker_spark.data.arrow.from_arrow`: int64 -> integer, string ->
string, timestamp -> timestamp, list -> vector, map -> table, struct ->
vector, null -> none, ...), encoded a column at a time
(:mod:`~broker_spark.columnar.column_encode`) into exactly the bytes the values
would encode to. Each value is encoded once, here; the endpoint only moves
the bytes.

A row that cannot become a message (malformed ``data``, a null topic or
event name) is a :class:`BadRow`, with its position in the task's input and
the decoder's message; the writer fails the task with it, or publishes it to
``badRecordsTopic``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from broker_spark.columnar.column_encode import (
    encode_column,
    encode_rows_bulk,
    join_rows,
    vector_header,
)
from broker_spark.columnar.record_batches import SchemaMappingError
from broker_spark.columnar.typed_columns import bulk_column, check_column, encode_typed_column
from broker_spark.data.arrow import from_arrow
from broker_spark.data.binary import encode
from broker_spark.data.json_codec import loads_value
from broker_spark.errors import BrokerError
from broker_spark.reader.options import BrokerOptionError, WriterOptions
from broker_spark.zeek.script_types import ScriptType, parse_type

__all__ = ["BadRow", "EncodedBatch", "RowEncoder", "RowTopics", "field_index", "require_text"]

#: A Zeek event up to its name: ``[count 1 (format), count 1 (event), [name, [args...]]]``.
_EVENT_HEAD = (
    b"\x0e\x03\x02" + (1).to_bytes(8, "big") + b"\x02" + (1).to_bytes(8, "big") + b"\x0e\x02"
)


@dataclass(frozen=True)
class BadRow:
    """A row that did not become a message: where it was, what it held, why."""

    position: int
    topic: str | None
    text: str | None
    reason: str

    def describe(self) -> str:
        if self.text is None:
            return f"row {self.position}: {self.reason}"
        shown = self.text if len(self.text) <= 200 else self.text[:197] + "..."
        return f"row {self.position}: {self.reason} (data={shown!r})"


@dataclass
class EncodedBatch:
    """The messages of one Arrow batch, in row order, and the rows that failed."""

    messages: list[tuple[str, bytes]]
    bad: list[BadRow]


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def field_index(schema: pa.Schema, name: str) -> int | None:
    """The position of the column named ``name`` (case-insensitive, as Spark resolves names)."""
    for i, f in enumerate(schema):
        if f.name.lower() == name:
            return i
    return None


def require_text(schema: pa.Schema, name: str) -> None:
    """Refuse a column ``name`` that is not STRING (it must exist)."""
    i = field_index(schema, name)
    assert i is not None
    t = schema.field(i).type
    if not _is_text(t):
        raise SchemaMappingError(f"column {schema.field(i).name} must be STRING, not {t}")


class RowTopics:
    """Where each row's topic comes from: the ``topic`` option, else a STRING ``topic`` column
    (as Spark's Kafka sink: the option wins when both are there)."""

    def __init__(self, schema: pa.Schema, option: str | None) -> None:
        self.option = option
        self.column = field_index(schema, "topic")
        if option is None:
            if self.column is None:
                raise BrokerOptionError(
                    "topic", None, "is required when the rows have no topic column"
                )
            require_text(schema, "topic")

    def of(self, batch: pa.RecordBatch) -> list[Any]:
        """Each row's topic (None where the column is null)."""
        if self.option is not None:
            return [self.option] * batch.num_rows
        assert self.column is not None
        return batch.column(self.column).to_pylist()


class RowEncoder:
    """Encodes the rows of one schema into ``(topic, payload)`` messages."""

    def __init__(self, schema: pa.Schema, options: WriterOptions) -> None:
        self.schema = schema
        self.topic = options.topic
        self._topics = RowTopics(schema, options.topic)
        self._topic_col = self._topics.column
        self._data_col = field_index(schema, "data")
        self._event_col: int | None = None
        self._value_cols: list[int] = []
        if self._data_col is not None:
            self._require_text("data")
            self.mode = "json"
        else:
            skip = {self._topic_col}
            if options.format == "zeek":
                self._event_col = field_index(schema, "event")
                if self._event_col is None:
                    raise SchemaMappingError(
                        "format=zeek needs an event column (the event name) or a data column"
                    )
                self._require_text("event")
                skip.add(self._event_col)
                self.mode = "event"
            else:
                self.mode = "vector"
            self._value_cols = [i for i in range(len(schema)) if i not in skip]
            if self.mode == "vector" and not self._value_cols:
                raise SchemaMappingError(
                    "nothing to publish: the rows need a data column or value columns"
                )
            for i in self._value_cols:
                f = schema.field(i)
                try:
                    from_arrow(pa.array([], f.type))
                except BrokerError as exc:
                    raise SchemaMappingError(f"column {f.name} ({f.type}): {exc}") from None
        self._types = self._declared_types(options)

    def _declared_types(self, options: WriterOptions) -> dict[int, ScriptType]:
        """``zeekTypes``: the Zeek type of value columns, by position (checked against them)."""
        declared: dict[int, ScriptType] = {}
        for name, text in options.zeek_types:
            i = field_index(self.schema, name.lower())
            if i is None or i not in self._value_cols:
                what = "is the data column" if i == self._data_col else "names no value column"
                raise BrokerOptionError("zeekTypes", name, what)
            declared[i] = parse_type(text)
            f = self.schema.field(i)
            check_column(f.type, declared[i], f"column {f.name}")
        return declared

    def _column(self, batch: pa.RecordBatch, i: int, errors: dict[int, str]) -> list[bytes]:
        declared = self._types.get(i)
        if declared is None:
            return encode_column(batch.column(i), errors)
        name = self.schema.field(i).name
        return encode_typed_column(
            batch.column(i), declared, nullable=True, what=f"column {name}", errors=errors
        )

    def _require_text(self, name: str) -> None:
        require_text(self.schema, name)

    # --- encoding ----------------------------------------------------------------------

    def encode(self, batch: pa.RecordBatch, first_row: int = 0) -> EncodedBatch:
        """The messages of ``batch``; ``first_row`` is the position of its first row in the task."""
        n = batch.num_rows
        if n == 0:
            return EncodedBatch([], [])
        topics = self._topics.of(batch)
        if self.mode == "json":
            assert self._data_col is not None
            return self._encode_json(topics, batch.column(self._data_col).to_pylist(), first_row)
        fast = self._encode_bulk(batch, topics)
        if fast is not None:
            return fast
        errors: dict[int, str] = {}
        columns = [self._column(batch, i, errors) for i in self._value_cols]
        args_head = vector_header(len(columns))
        names: list[Any] | None = None
        if self.mode == "event":
            assert self._event_col is not None
            name_column = batch.column(self._event_col)
            names = name_column.to_pylist()
            prefixes: bytes | list[bytes] = [
                _EVENT_HEAD + fragment + args_head for fragment in encode_column(name_column)
            ]
        else:
            prefixes = args_head
        payloads = join_rows(prefixes, columns, n)
        clean = not errors and None not in topics and "" not in topics
        if clean and (names is None or None not in names):
            return EncodedBatch(list(zip(topics, payloads, strict=True)), [])
        messages: list[tuple[str, bytes]] = []
        bad: list[BadRow] = []
        for i, (topic, payload) in enumerate(zip(topics, payloads, strict=True)):
            if not topic:
                bad.append(_bad(first_row + i, topic, None))
            elif names is not None and names[i] is None:
                bad.append(BadRow(first_row + i, topic, None, "the event name is null"))
            elif i in errors:
                bad.append(BadRow(first_row + i, topic, None, errors[i]))
            else:
                messages.append((topic, payload))
        return EncodedBatch(messages, bad)

    def _encode_bulk(self, batch: pa.RecordBatch, topics: list[Any]) -> EncodedBatch | None:
        """All rows at once (:func:`encode_rows_bulk`) when no row can be bad: topics and
        event names present, every value column of a type that always encodes."""
        if None in topics or "" in topics:
            return None
        head = vector_header(len(self._value_cols))
        values = []
        for i in self._value_cols:
            declared = self._types.get(i)
            column = batch.column(i) if declared is None else bulk_column(batch.column(i), declared)
            if column is None:
                return None
            values.append(column)
        if self.mode == "event":
            assert self._event_col is not None
            names = batch.column(self._event_col)
            if names.null_count:
                return None
            parts: list[bytes | pa.Array] = [_EVENT_HEAD, names, head, *values]
        else:
            parts = [head, *values]
        payloads = encode_rows_bulk(parts)
        if payloads is None:
            return None
        return EncodedBatch(list(zip(topics, payloads, strict=True)), [])

    def _encode_json(self, topics: list[Any], texts: list[Any], first: int) -> EncodedBatch:
        messages: list[tuple[str, bytes]] = []
        bad: list[BadRow] = []
        for i, (topic, text) in enumerate(zip(topics, texts, strict=True)):
            if not topic or text is None:
                bad.append(_bad(first + i, topic, text))
                continue
            try:
                messages.append((topic, encode(loads_value(text))))
            except BrokerError as exc:
                bad.append(BadRow(first + i, topic, text, str(exc)))
        return EncodedBatch(messages, bad)


def _bad(position: int, topic: Any, text: Any, reason: str | None = None) -> BadRow:
    if reason is None:
        reason = "the topic is null or empty" if not topic else "the data is null"
    return BadRow(position, topic or None, text, reason)
