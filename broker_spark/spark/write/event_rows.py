"""Rows to Zeek events of a declared signature: what ``.option("signature", ...)`` publishes.

Each row is one event ``NAME(arg, ...)`` of the signature, its arguments
taken from the columns of the same names (case-insensitive, as Spark
resolves names) and encoded as the Zeek types the signature declares
(:mod:`~broker_spark.columnar.typed_columns`), so the bytes are those a Zeek
would send for the same values (checked against recordings of a real Zeek).
The topic is the ``topic`` option or a ``topic`` column; a column named by
``networkTimestamp`` becomes the event's metadata ``[[1, time]]`` (Zeek's
network timestamp); any other column is an error when the write starts, so
a misspelt argument never goes unnoticed.

Encoding is by column: the constant head of the event (format, type, name
and the argument vector's header) once, each argument column's fragments,
joined per row; in bulk through Arrow when every argument is a flat column
that needs no per-value work. A row whose argument does not fit its type,
is null, or has no topic is a :class:`~broker_spark.spark.write.row_messages.BadRow`.
"""

from __future__ import annotations

import pyarrow as pa

from broker_spark.columnar.column_encode import encode_rows_bulk, join_rows, vector_header
from broker_spark.columnar.record_batches import SchemaMappingError
from broker_spark.columnar.typed_columns import (
    bulk_column,
    check_column,
    encode_typed_column,
    metadata_column,
)
from broker_spark.data.binary import encode
from broker_spark.reader.options import BrokerOptionError, WriterOptions
from broker_spark.spark.write.row_messages import BadRow, EncodedBatch, RowTopics, field_index
from broker_spark.zeek.script_types import Basic, EventSignature

__all__ = ["SignatureRowEncoder", "event_head"]

_TIME = Basic("time")


def event_head(name: str, args: int, metadata: bool = False) -> bytes:
    """An event's bytes up to its first argument: ``[1, 1, [name, [`` (and room for metadata)."""
    content = b"\x0e\x03" if metadata else b"\x0e\x02"
    fmt = b"\x0e\x03\x02" + (1).to_bytes(8, "big") + b"\x02" + (1).to_bytes(8, "big")
    return fmt + content + encode(name) + vector_header(args)


class SignatureRowEncoder:
    """Encodes the rows of one schema into events of ``options.signature``."""

    def __init__(self, schema: pa.Schema, options: WriterOptions) -> None:
        signature = options.signature
        assert signature is not None
        self.signature: EventSignature = signature
        self.schema = schema
        self._topics = RowTopics(schema, options.topic)
        # a topic column is not an argument (with the option too, which wins over it)
        used = set() if self._topics.column is None else {self._topics.column}
        self._time_col: int | None = None
        if options.network_timestamp is not None:
            self._time_col = field_index(schema, options.network_timestamp.lower())
            if self._time_col is None:
                raise BrokerOptionError(
                    "networkTimestamp", options.network_timestamp, "names no column"
                )
            f = schema.field(self._time_col)
            check_column(f.type, _TIME, f"column {f.name} (networkTimestamp)")
            used.add(self._time_col)
        self._args: list[int] = []
        missing = []
        for param in signature.params:
            i = field_index(schema, param.name.lower())
            if i is None or i in used:
                missing.append(param.name)
                continue
            f = schema.field(i)
            check_column(f.type, param.type, f"argument {param.name} (column {f.name})")
            self._args.append(i)
            used.add(i)
        names = ", ".join(f.name for f in schema)
        if missing:
            raise SchemaMappingError(
                f"{signature.name} needs a column for each argument: no column "
                f"{', '.join(missing)} (the columns are {names})"
            )
        extra = [f.name for i, f in enumerate(schema) if i not in used]
        if extra:
            raise SchemaMappingError(
                f"column {extra[0]} is no argument of {signature} "
                "(drop it, or name it in networkTimestamp or topic)"
            )
        self._head = event_head(signature.name, len(self._args), self._time_col is not None)

    def encode(self, batch: pa.RecordBatch, first_row: int = 0) -> EncodedBatch:
        """The events of ``batch``; ``first_row`` is the position of its first row in the task."""
        n = batch.num_rows
        if n == 0:
            return EncodedBatch([], [])
        topics = self._topics.of(batch)
        clean_topics = None not in topics and "" not in topics
        if clean_topics and self._time_col is None:
            bulk = self._bulk(batch)
            if bulk is not None:
                return EncodedBatch(list(zip(topics, bulk, strict=True)), [])
        errors: dict[int, str] = {}
        columns = [
            encode_typed_column(
                batch.column(i),
                p.type,
                nullable=False,
                what=f"argument {p.name}",
                errors=errors,
            )
            for i, p in zip(self._args, self.signature.params, strict=True)
        ]
        if self._time_col is not None:
            columns.append(
                metadata_column(batch.column(self._time_col), "the network timestamp", errors)
            )
        payloads = join_rows(self._head, columns, n)
        if clean_topics and not errors:
            return EncodedBatch(list(zip(topics, payloads, strict=True)), [])
        messages: list[tuple[str, bytes]] = []
        bad: list[BadRow] = []
        for row, (topic, payload) in enumerate(zip(topics, payloads, strict=True)):
            if not topic:
                bad.append(
                    BadRow(first_row + row, topic or None, None, "the topic is null or empty")
                )
            elif row in errors:
                bad.append(BadRow(first_row + row, topic, None, errors[row]))
            else:
                messages.append((topic, payload))
        return EncodedBatch(messages, bad)

    def _bulk(self, batch: pa.RecordBatch) -> list[bytes] | None:
        """Every row at once, when each argument is a flat column the bulk join encodes."""
        if not self._args:
            return [self._head] * batch.num_rows
        parts: list[bytes | pa.Array] = [self._head]
        for i, p in zip(self._args, self.signature.params, strict=True):
            cast = bulk_column(batch.column(i), p.type)
            if cast is None:
                return None
            parts.append(cast)
        return encode_rows_bulk(parts)
