"""Broker data stores as Spark tables: a store's contents, its changes, and writes into it.

* ``spark.read.format("broker").option("store", NAME)``: the store's current
  contents. The snapshot is taken while Spark plans the read (driver side,
  a short-lived endpoint that peers with ``peer`` and attaches a clone) and
  travels inside the partitions, so executors start no endpoint.
* ``spark.readStream...option("store", NAME)``: every change (insert,
  update, erase, expire) as a row. The stream reader's endpoint attaches a
  clone and subscribes to the store's events topic; events are spooled like
  any message, so offsets, restarts and ``failOnDataLoss`` work as for topics.
* ``df.write...option("store", NAME)``: each row is a ``put`` through a clone
  (``key``, ``value``, optional ``expiry`` seconds; the other columns of a
  store read, ``op``, ``ts`` and ``offset``, are ignored, so a read writes
  back as it is); ``mode("overwrite")`` clears the store first, once, when
  Spark creates the writer on the driver.

Spark asks a data source for one schema without saying whether it will be
read as a batch or a stream, so both share :data:`STORE_DDL`: ``key``,
``value`` (Zeek JSON text), ``op`` (``insert``/``update``/``erase``/``expire``;
``snapshot`` in a batch read), ``expiry`` (seconds, null when none; always
null in a batch read, as only the master knows expiries) and ``ts`` (when the
change arrived, or when the snapshot was taken) and ``offset`` (the change's
position in the stream; null in a batch read). A user schema may pick any
of these columns by name.

Writing keys and values: a STRING ``key``/``value`` column holds Zeek JSON
text when the text starts with ``{`` (so what a read returns writes back
unchanged) and is a plain string otherwise; other column types go through
the Arrow mapping. ``zeekTypes`` (``key:addr,value:set[port]``) gives the key
or value its Zeek type instead (see :mod:`~broker_spark.zeek.typed_values`):
a row that does not fit fails the task, or with ``mode=PERMISSIVE`` is
skipped and counted.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

from broker_spark.columnar.record_batches import RecordConversionError, SchemaMappingError
from broker_spark.columnar.typed_columns import check_column
from broker_spark.data.arrow import from_arrow
from broker_spark.data.binary import decode
from broker_spark.data.json_codec import dumps_value, loads_value
from broker_spark.data.types import timespan_ns
from broker_spark.endpoint import Endpoint
from broker_spark.errors import EC, BrokerError, DecodeError, EncodeError
from broker_spark.reader.connect import EndpointSettings, open_endpoint
from broker_spark.reader.in_process import ReaderRuntime
from broker_spark.reader.offsets import plan_partitions
from broker_spark.reader.options import BrokerOptionError, ReaderOptions, WriterOptions
from broker_spark.spark.compat import ArrowStreamWriterBase, arrow_batches
from broker_spark.spark.read.rows import MessageRows
from broker_spark.spark.read.stream import StreamReader
from broker_spark.store.events import store_events_topic
from broker_spark.zeek.script_types import ScriptType, parse_type
from broker_spark.zeek.typed_values import convert

__all__ = [
    "STORE_DDL",
    "STORE_SCHEMA",
    "StoreEventRows",
    "StoreEventConverter",
    "StoreStreamWriter",
    "StoreTableReader",
    "StoreTableWriter",
    "StoreWriteError",
    "store_change_reader",
]

log = logging.getLogger(__name__)

#: The key of a row a PERMISSIVE store write skipped (its key or value did not fit its type).
_SKIPPED = object()

STORE_DDL = "key STRING, value STRING, op STRING, expiry DOUBLE, ts TIMESTAMP, offset LONG"
_TS = pa.timestamp("us", tz="UTC")
STORE_SCHEMA = pa.schema(
    [
        pa.field("key", pa.string()),
        pa.field("value", pa.string()),
        pa.field("op", pa.string()),
        pa.field("expiry", pa.float64()),
        pa.field("ts", _TS),
        pa.field("offset", pa.int64()),
    ]
)
_KINDS = {f.name: f.type for f in STORE_SCHEMA}

#: Seconds a clone may take to receive its master's snapshot (or to get writes acknowledged).
STORE_TIMEOUT = 30.0
#: Rows per partition of a batch read.
ROWS_PER_PARTITION = 100_000


class StoreWriteError(BrokerError):
    """A store write or snapshot that the master did not confirm in time."""

    code = EC.RequestTimeout


def _check_store_schema(schema: pa.Schema) -> None:
    """Every column must be one of :data:`STORE_SCHEMA`'s, with a compatible type."""
    for f in schema:
        want = _KINDS.get(f.name.lower())
        if want is None:
            raise SchemaMappingError(
                f"column {f.name}: a store table has only {', '.join(STORE_SCHEMA.names)}"
            )
        ok = (
            pa.types.is_timestamp(f.type)
            if want == _TS
            else f.type == want or (want == pa.string() and pa.types.is_large_string(f.type))
        )
        if not ok:
            raise SchemaMappingError(f"column {f.name} must be {want}, not {f.type}")


def _rows_batch(schema: pa.Schema, columns: dict[str, list[Any]]) -> pa.RecordBatch:
    """A batch of ``schema`` from full columns by name (``ts`` as nanoseconds)."""
    arrays = []
    for f in schema:
        values = columns[f.name.lower()]
        if f.name.lower() == "ts":
            arrays.append(pa.array(values, pa.timestamp("ns", tz="UTC")).cast(f.type, safe=False))
        else:
            arrays.append(pa.array(values, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# --- the stream of changes -------------------------------------------------------------------


def _seconds(span: Any) -> float | None:
    return None if span is None else timespan_ns(span) / 1e9


class StoreEventConverter:
    """Spooled store events (:mod:`broker_spark.store.events`) to rows of a store schema."""

    def __init__(self, schema: pa.Schema, mode: str = "PERMISSIVE") -> None:
        _check_store_schema(schema)
        self.schema = schema
        self.strict = mode == "FAILFAST"
        self.misfits = 0
        self.undecodable = 0

    def convert_packed(self, packed: bytes, count: int | None = None) -> pa.RecordBatch:
        cols: dict[str, list[Any]] = {name: [] for name in STORE_SCHEMA.names}
        unpacker = msgpack.Unpacker(raw=False, use_list=False, max_buffer_size=len(packed) or 1)
        unpacker.feed(packed)
        for record in unpacker:
            _topic, payload, _sender, received_ns, offset = record
            try:
                op, key, value, expiry = self._event(decode(payload))
                texts = (dumps_value(key), None if value is _ABSENT else dumps_value(value))
            except (DecodeError, EncodeError, ValueError, TypeError) as exc:
                if self.strict:
                    raise RecordConversionError(f"store event at offset {offset}: {exc}") from None
                self.undecodable += 1
                continue
            cols["op"].append(op)
            cols["key"].append(texts[0])
            cols["value"].append(texts[1])
            cols["expiry"].append(_seconds(expiry))
            cols["ts"].append(received_ns)
            cols["offset"].append(offset)
        return _rows_batch(self.schema, cols)

    @staticmethod
    def _event(event: Any) -> tuple[str, Any, Any, Any]:
        """``(op, key, value or _ABSENT, expiry)`` of an event vector."""
        if not isinstance(event, tuple) or len(event) < 5 or not isinstance(event[0], str):
            raise ValueError(f"not a store event: {event!r:.80}")
        op = event[0]
        if op == "insert" and len(event) == 7:
            return op, event[2], event[3], event[4]
        if op == "update" and len(event) == 8:
            return op, event[2], event[4], event[5]
        if op in ("erase", "expire") and len(event) == 5:
            return op, event[2], _ABSENT, None
        raise ValueError(f"not a store event: {event!r:.80}")


_ABSENT = object()


class StoreEventRows(MessageRows):
    """A store's change events as rows (the converter half of :func:`store_change_reader`):
    message rows whose converter reads store events."""

    def converter(self, partition: Any = None) -> StoreEventConverter:
        return StoreEventConverter(self.arrow_schema, self.options.mode)


def store_change_reader(
    options: ReaderOptions, schema: pa.Schema, parallelism: int | None = None
) -> StreamReader:
    """``readStream...option("store", NAME)``: a store's changes, through a local clone
    whose store events the reader's own endpoint receives."""
    runtime = functools.partial(_clone_runtime, options)
    return StreamReader(options, StoreEventRows(options, schema), parallelism, runtime=runtime)


def _clone_runtime(options: ReaderOptions) -> ReaderRuntime:
    """The reader's own endpoint, subscribed to the store's events of a clone it attaches."""
    name = options.store
    assert name is not None
    return ReaderRuntime(
        options,
        [store_events_topic(name)],
        after_connect=lambda endpoint: endpoint.attach_clone(name),
    )


# --- the batch read ------------------------------------------------------------------------


class StoreRowsPartition(InputPartition):
    """Rows of a store snapshot, carried inline: packed ``(key text, value text)`` pairs."""

    def __init__(self, packed: bytes, taken_ns: int) -> None:
        super().__init__(None)
        self.packed = packed
        self.taken_ns = taken_ns


def _snapshot(endpoint: Endpoint, name: str) -> list[tuple[str, str]]:
    """The clone's contents once its master's snapshot arrived, sorted by key text."""
    clone = endpoint.attach_clone(name)
    try:
        deadline = time.monotonic() + STORE_TIMEOUT
        while True:
            try:
                keys = clone.keys()
                break
            except BrokerError as exc:
                if exc.code != EC.StaleData or time.monotonic() > deadline:
                    raise StoreWriteError(
                        f"store {name!r}: no snapshot from its master through the peering ({exc})"
                    ) from None
        rows = []
        for key in keys:
            value = clone.get(key)
            if value is not None or clone.exists(key):
                rows.append((dumps_value(key), dumps_value(value)))
        rows.sort()
        return rows
    finally:
        clone.reset()


class StoreTableReader(DataSourceReader):
    """``spark.read...option("store", NAME)``: the store's keys and values."""

    def __init__(self, options: ReaderOptions, schema: pa.Schema) -> None:
        _check_store_schema(schema)
        self.options = options
        self.arrow_schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        name = self.options.store
        assert name is not None
        endpoint = open_endpoint(self.options.connection, settings=EndpointSettings())
        try:
            rows = _snapshot(endpoint, name)
        finally:
            endpoint.shutdown()
        taken = time.time_ns()
        ranges = plan_partitions(0, len(rows), ROWS_PER_PARTITION) or [(0, 0)]
        return [
            StoreRowsPartition(msgpack.packb(rows[lo:hi], use_bin_type=True), taken)
            for lo, hi in ranges
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, StoreRowsPartition)
        rows = msgpack.unpackb(partition.packed, raw=False, use_list=False)
        if not rows:
            return
        n = len(rows)
        keys, values = zip(*rows, strict=True)
        yield _rows_batch(
            self.arrow_schema,
            {
                "key": list(keys),
                "value": list(values),
                "op": ["snapshot"] * n,
                "expiry": [None] * n,
                "ts": [partition.taken_ns] * n,
                "offset": [None] * n,
            },
        )


# --- writing ---------------------------------------------------------------------------------


@dataclass
class StoreCommitMessage(WriterCommitMessage):
    """How many rows one task put into the store."""

    puts: int


def _column_values(batch: pa.RecordBatch, index: int, what: str, first: int) -> list[Any]:
    """Broker values of a key/value column (Zeek JSON text in STRING columns starting ``{``)."""
    array = batch.column(index)
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        return from_arrow(array)
    out = []
    for row, text in enumerate(array.to_pylist()):
        if text is not None and text.startswith("{"):
            try:
                out.append(loads_value(text))
            except DecodeError as exc:
                raise DecodeError(f"row {first + row}: {what} is not Zeek JSON: {exc}") from None
        else:
            out.append(text)
    return out


class _StoreWriting:
    """What the batch and stream store writers share."""

    options: WriterOptions
    schema: pa.Schema

    def _setup(self, options: WriterOptions, schema: pa.Schema) -> None:
        self.options = options
        self.schema = schema
        names = [f.name.lower() for f in schema]
        for needed in ("key", "value"):
            if needed not in names:
                raise SchemaMappingError(f"a store write needs a {needed} column")
        extra = set(names) - {"key", "value", "expiry", "op", "ts", "offset"}
        if extra:
            raise SchemaMappingError(
                f"a store write takes key, value and expiry columns, not {sorted(extra)}"
            )
        self._key = names.index("key")
        self._value = names.index("value")
        self._expiry = names.index("expiry") if "expiry" in names else None
        if self._expiry is not None:
            t = schema.field(self._expiry).type
            if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
                raise SchemaMappingError(f"column expiry must be a number of seconds, not {t}")
        for i in (self._key, self._value):
            f = schema.field(i)
            try:
                from_arrow(pa.array([], f.type))
            except BrokerError as exc:
                raise SchemaMappingError(f"column {f.name} ({f.type}): {exc}") from None
        self._types: dict[int, ScriptType] = {}
        for name, text in options.zeek_types:
            if name.lower() not in ("key", "value"):
                raise BrokerOptionError("zeekTypes", name, "a store write types key and value only")
            i = self._key if name.lower() == "key" else self._value
            self._types[i] = parse_type(text)
            check_column(schema.field(i).type, self._types[i], f"column {name}")
        self._skipped = 0

    def _values(self, batch: pa.RecordBatch, index: int, what: str, first: int) -> list[Any]:
        """The Broker values of the key or value column: its Zeek type's with ``zeekTypes``."""
        declared = self._types.get(index)
        if declared is None:
            return _column_values(batch, index, what, first)
        out: list[Any] = []
        for row, v in enumerate(batch.column(index).to_pylist()):
            out.append(None if v is None else convert(v, declared, f"row {first + row}: {what}"))
        return out

    def _batch_values(self, batch: pa.RecordBatch, first: int) -> tuple[list[Any], list[Any]]:
        """Keys and values of ``batch``; a row that does not fit its type fails the task, or
        (``mode=PERMISSIVE``) is skipped and counted (its key becomes :data:`_SKIPPED`)."""
        try:
            return (
                self._values(batch, self._key, "key", first),
                self._values(batch, self._value, "value", first),
            )
        except EncodeError:
            if not self.options.permissive:
                raise
        keys, values = [], []
        for row in range(batch.num_rows):
            one = batch.slice(row, 1)
            try:
                keys.append(self._values(one, self._key, "key", first + row)[0])
                values.append(self._values(one, self._value, "value", first + row)[0])
            except EncodeError as exc:
                log.warning("skipped a row that does not fit: %s", exc)
                self._skipped += 1
                keys.append(_SKIPPED)
                values.append(None)
        return keys, values

    def _clear(self) -> None:
        """``overwrite``: empty the store before any task writes (runs once, on the driver)."""
        name = self.options.store
        endpoint = open_endpoint(self.options.connection, settings=EndpointSettings())
        try:
            clone = endpoint.attach_clone(name)
            clone.clear()
            if not clone.await_idle(STORE_TIMEOUT):
                raise StoreWriteError(f"store {name!r}: the master did not confirm clear()")
        finally:
            endpoint.shutdown()

    def _put_all(self, iterator: Iterator[pa.RecordBatch]) -> StoreCommitMessage:
        name = self.options.store
        endpoint = open_endpoint(self.options.connection, settings=EndpointSettings())
        puts = 0
        try:
            clone = endpoint.attach_clone(name)
            seen = 0
            for batch in iterator:
                keys, values = self._batch_values(batch, seen)
                seen += batch.num_rows
                expiries = (
                    batch.column(self._expiry).to_pylist()
                    if self._expiry is not None
                    else [None] * batch.num_rows
                )
                for key, value, expiry in zip(keys, values, expiries, strict=True):
                    if key is _SKIPPED:
                        continue
                    clone.put(key, value, expiry)
                    puts += 1
            if puts and not clone.await_idle(STORE_TIMEOUT):
                raise StoreWriteError(f"store {name!r}: the master did not confirm {puts} puts")
        finally:
            endpoint.shutdown()
        return StoreCommitMessage(puts)


class StoreTableWriter(_StoreWriting, DataSourceArrowWriter):
    """``df.write...option("store", NAME)``: put rows (``overwrite``: clear first)."""

    def __init__(self, options: WriterOptions, schema: pa.Schema, overwrite: bool) -> None:
        self._setup(options, schema)
        if overwrite:
            self._clear()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StoreCommitMessage:
        return self._put_all(iterator)


class StoreStreamWriter(_StoreWriting, ArrowStreamWriterBase):
    """``df.writeStream...option("store", NAME)``: put the rows of every micro-batch."""

    def __init__(self, options: WriterOptions, schema: pa.Schema, overwrite: bool) -> None:
        self._setup(options, schema)
        self._committed: set[int] = set()

    def write(self, iterator: Iterator[Any]) -> StoreCommitMessage:
        return self._put_all(arrow_batches(iterator, self.schema))  # Spark 4.0 hands rows

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if batchId not in self._committed:
            self._committed.add(batchId)
