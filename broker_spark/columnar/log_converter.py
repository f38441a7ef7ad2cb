"""``format=zeek-logs``: the records of Zeek's log messages as rows, on the executors.

A partition's messages are mostly Batches of LogWrites. The converter finds
every record in them without decoding a message (:class:`~broker_spark.zeek.log_scan.LogScanner`),
groups the records by sender, stream, path and the schema in force when they
arrived (the partition carries the schemas learned before it; LogCreates
inside it update them as they come), decodes each group column by column
(:mod:`~broker_spark.zeek.columns`), and fills the query's columns:

* typed (one log): each output column takes the Zeek column of its name
  (``id.orig_h``, from a flat name or a struct member); a column the record's
  schema lacks is null, so a LogCreate that changes a log's columns leaves
  the query's rows whole: old ones keep their values, new columns of the log
  are dropped, missing ones are null;
* generic (``_path``, ``log``): each record as Zeek's JSON line; with a
  ``records`` column, a row per run of a message's records of one log
  (:mod:`~broker_spark.columnar.log_line_runs`); with ``records`` and ``message``,
  a row per log of a message holding the message's bytes, nothing decoded
  (:mod:`~broker_spark.columnar.log_messages`: what the tables writer reads).

A record whose LogCreate was not seen takes the names of the log's known
schema (built-in or learned at start) when its values have that layout, and
counts as ``unnamed``; one that has another layout gets null log columns
(typed; counted as a misfit) or positional names ``_1``, ``_2``... (generic).
Bytes that are no record count as ``undecodable``; with ``mode=FAILFAST``
both of these fail the query, naming the offset. A message a relay could not
decode and kept (:mod:`~broker_spark.zeek.undecodable`: a newer Zeek's format, a
sender's bad frames) is an **undecodable row** in the generic output: ``_path``
is :data:`UNDECODABLE_PATH` and ``log`` a JSON object with its ``source``,
``reason``, ``sender`` and ``frames`` (base64), so nothing a relay kept is out
of sight (rows of messages' bytes too: ``message`` null, for the tables
writer's quarantine); typed queries (one log's columns) and readers of some logs
have no place for it and count it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_spark.columnar.log_columns import MESSAGE, RECORDS, LogColumns
from broker_spark.columnar.log_line_runs import join_runs, run_starts
from broker_spark.columnar.log_messages import message_rows
from broker_spark.columnar.log_metadata import (
    per_message_text,
    received_times,
    repeated_text,
    schema_id,
    schema_texts,
)
from broker_spark.columnar.record_batches import RecordConversionError, unpack_columns
from broker_spark.data.msgpack_records import record_fields
from broker_spark.errors import DecodeError
from broker_spark.zeek.arrow_columns import sql_array
from broker_spark.zeek.columns import _PAD, Block, DecodedBlock, decode_block
from broker_spark.zeek.log_lines import group_lines
from broker_spark.zeek.log_scan import LogGroup, LogScanner
from broker_spark.zeek.log_schema import LogSchema, SchemaRegistry, standard_schema
from broker_spark.zeek.record import decode_values
from broker_spark.zeek.undecodable import MAGIC, is_undecodable, unpack_undecodable

__all__ = ["CHUNK_RECORDS", "UNDECODABLE_PATH", "LogConverter", "schema_id"]

#: The ``_path`` of a generic row that holds a message a relay could not decode.
UNDECODABLE_PATH = "broker-spark:undecodable"

log = logging.getLogger(__name__)

#: Records decoded together: enough that the work is per column, few enough that a
#: chunk's bytes stay in the processor's caches (measured best between 2,000 and 8,000).
CHUNK_RECORDS = 4096


@dataclass
class _Piece:
    """Rows made from one chunk of one group: their arrival order, message, and columns."""

    order: np.ndarray
    messages: np.ndarray
    path: str
    columns: dict[str, pa.Array] = field(default_factory=dict)
    schema: LogSchema | None = None  # the columns the records were read with


class LogConverter:
    """Turns spool records holding Zeek log messages into Arrow batches of one schema.

    ``known`` is the log's schema the query's columns were made from (typed
    mode), used to name records whose LogCreate was not seen; ``paths`` keeps
    only those logs. ``schemas`` are the schemas learned before the first record.
    """

    def __init__(
        self,
        schema: pa.Schema,
        columns: LogColumns,
        mode: str = "PERMISSIVE",
        paths: Sequence[str] | None = None,
        known: LogSchema | None = None,
        schemas: Sequence[tuple[tuple[str, str, str], LogSchema]] = (),
        on_schema: Callable[[str, LogSchema, bool], None] | None = None,
        zeek_version: str = "9.1",
    ) -> None:
        self.schema = schema
        #: whose standard logs' columns name a log nothing else has described
        self.zeek_version = zeek_version
        self.columns = columns
        self.strict = mode == "FAILFAST"
        self.paths = tuple(paths) if paths else None
        self.known = known
        self.registry = SchemaRegistry(schemas)
        self.on_schema = on_schema
        self.misfits = 0
        #: The id of the relay the records come from (a relay reader sets it per partition).
        self.relay: str | None = None
        self.undecodable = 0
        self.unnamed = 0
        self.others = 0
        self._targets = _leaf_types(schema, columns)

    # --- the BatchConverter interface -------------------------------------------------

    def convert_packed(self, packed: bytes, count: int | None = None) -> pa.RecordBatch:
        """The rows of a record stream's messages. The messages are scanned where they lie in
        the stream (a message holds hundreds of records, so walking the stream's headers in
        Python costs little per row); a stream the walk does not understand is unpacked."""
        if not packed:
            return _empty(self.schema)
        spans = record_spans(packed, count)
        if spans is not None:
            return self._convert(packed, *spans)
        topics, payloads, senders, received, offsets = unpack_columns(packed, count)
        return self.convert(topics, payloads, senders, received, offsets)

    def convert(
        self,
        topics: Sequence[str],
        payloads: Sequence[bytes],
        senders: Sequence[str],
        received: Sequence[int],
        offsets: Sequence[int],
    ) -> pa.RecordBatch:
        """The rows of the records of these messages (spool record columns)."""
        data = b"".join(payloads) + bytes(_PAD)  # room for reads past the last record
        lengths = np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads))
        ends = np.cumsum(lengths)
        starts = ends - lengths
        return self._convert(
            data, starts.tolist(), ends.tolist(), topics, senders, received, offsets
        )

    def _convert(
        self,
        data: bytes,
        starts: Sequence[int],
        ends: Sequence[int],
        topics: Sequence[str],
        senders: Sequence[str],
        received: Sequence[int],
        offsets: Sequence[int],
    ) -> pa.RecordBatch:
        scanner = LogScanner(self.registry, self.paths, self.on_schema)
        kept: list[int] = []  # messages a relay kept undecodable, shown as rows
        show_kept = self.columns.generic and self.paths is None

        def broken(i: int) -> None:
            if self.strict:
                raise RecordConversionError(
                    f"record at offset {offsets[i]}: the message is not valid Broker data"
                )
            if show_kept and is_undecodable(data[starts[i] : starts[i] + len(MAGIC)]):
                kept.append(i)

        scanner.scan_all(data, starts, ends, senders, broken)
        self.undecodable += scanner.undecodable
        self.others += scanner.others
        groups = scanner.take_groups()
        if not groups and not kept:
            return _empty(self.schema)
        # messages' bytes, decoded later; FAILFAST decodes here, to fail on a broken record
        if self.columns.generic and MESSAGE in self.columns.roles and not self.strict:
            schemas = [self._names_for(group) for group in groups]
            fields = {"topic": topics, "sender": senders, "received": received, "offset": offsets}
            lines = _undecodable_lines(kept, data, starts, ends, senders)
            rows = message_rows(
                groups, schemas, data, (starts, ends), fields, self.schema, self.columns.roles,
                self.relay, [(i, UNDECODABLE_PATH, line) for i, line in zip(kept, lines, strict=True)],
            )  # fmt: skip
            if rows is not None:  # else a message holds a log under two schemas: runs of lines
                self.unnamed += sum(len(g.starts) for g in groups if g.schema is None)
                return rows
        buf = padded(data, ends[-1] if ends else 0)
        pieces: list[_Piece] = []
        if kept:
            pieces.append(_undecodable_piece(kept, data, starts, ends, senders, scanner.records))
        for group in groups:
            if self.columns.generic:
                pieces.append(self._lines(group, buf, data, offsets))
                continue
            messages, order = group.messages(), group.order()
            for lo in range(0, len(group.starts), CHUNK_RECORDS):
                hi = lo + CHUNK_RECORDS
                block = Block(
                    buf,
                    np.asarray(group.starts[lo:hi], dtype=np.int64),
                    np.asarray(group.ends[lo:hi], dtype=np.int64),
                    group.fields,
                )
                piece = _Piece(order[lo:hi], messages[lo:hi], group.path)
                pieces.append(self._piece(group, block, piece, offsets))
        return self._assemble(pieces, topics, senders, received, offsets)

    # --- one chunk of one group --------------------------------------------------------

    def _names_for(self, group: LogGroup) -> LogSchema | None:
        if group.schema is not None:
            return group.schema
        if self.known is not None and self.known.path == group.path:
            return self.known
        return standard_schema(group.path, self.zeek_version)

    def _piece(
        self, group: LogGroup, block: Block, piece: _Piece, offsets: Sequence[int]
    ) -> _Piece:
        """Typed columns of one chunk of a group."""
        schema = piece.schema = self._names_for(group)
        messages = piece.messages
        decoded = decode_block(block, schema.types) if schema is not None else None
        ok = decoded.ok if decoded is not None else np.zeros(len(block), dtype=bool)
        if group.schema is None:
            self.unnamed += len(block)
        bad = np.flatnonzero(~ok)
        broken = 0
        for row in bad:  # another layout, or no record at all
            try:
                decode_values(block.record(int(row)))
            except DecodeError as exc:
                self._fail(offsets, int(messages[row]), str(exc))
                broken += 1
                continue
            self._fail(offsets, int(messages[row]), "its values do not have the log's columns")
        self.undecodable += broken
        self.misfits += len(bad) - broken
        piece.columns.update(self._typed(block, decoded, schema, ok))
        return piece

    def _fail(self, offsets: Sequence[int], message: int, why: str) -> None:
        if self.strict:
            raise RecordConversionError(f"record at offset {offsets[message]}: {why}")

    def _lines(
        self, group: LogGroup, buf: np.ndarray, data: bytes, offsets: Sequence[int]
    ) -> _Piece:
        """A group's records as Zeek's JSON lines (``_path``/``log`` output)."""
        schema = self._names_for(group)
        if group.schema is None:
            self.unnamed += len(group.starts)
        lines, broken, _positional = group_lines(buf, data, group, schema)
        messages = group.messages()
        if broken:
            self._fail(offsets, int(messages[broken[0]]), "the record does not decode")
        self.undecodable += len(broken)
        piece = _Piece(group.order(), messages, group.path, schema=schema)
        piece.columns["log"] = pa.array(lines, pa.string())
        return piece

    def _typed(
        self,
        block: Block,
        decoded: DecodedBlock | None,
        schema: LogSchema | None,
        ok: np.ndarray,
    ) -> dict[str, pa.Array]:
        n = len(block)
        out: dict[str, pa.Array] = {}
        names = schema.names if schema is not None else ()
        where = {name: i for i, name in enumerate(names)}
        for leaf, target in self._targets.items():
            index = where.get(leaf)
            if decoded is None or index is None:
                out[leaf] = pa.nulls(n, target)
                continue
            arr, misfits = sql_array(block.buf, decoded.columns[index])
            if misfits and self.strict:
                raise RecordConversionError(f"column {leaf}: a value does not fit {target}")
            self.misfits += misfits
            arr = self._cast(arr, target, leaf)
            if not ok.all():
                arr = pc.if_else(pa.array(ok), arr, pa.nulls(n, target))
            out[leaf] = arr
        return out

    def _cast(self, arr: pa.Array, target: pa.DataType, leaf: str) -> pa.Array:
        if arr.type == target:
            return arr
        try:
            return arr.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            if self.strict:
                raise RecordConversionError(f"column {leaf}: {exc}") from None
            self.misfits += len(arr) - arr.null_count
            return pa.nulls(len(arr), target)

    # --- the batch ----------------------------------------------------------------------

    def _assemble(
        self,
        pieces: list[_Piece],
        topics: Sequence[str],
        senders: Sequence[str],
        received: Sequence[int],
        offsets: Sequence[int],
    ) -> pa.RecordBatch:
        order = np.concatenate([p.order for p in pieces])
        # rows in arrival order; one log's rows (the usual partition) already are
        in_order = bool((order[1:] >= order[:-1]).all())
        perm = None if in_order else pa.array(np.argsort(order, kind="stable"))
        messages = pa.array(np.concatenate([p.messages for p in pieces]))

        def arrange(arrays: list[pa.Array]) -> pa.Array:
            joined = arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)
            return joined if perm is None else pc.take(joined, perm)

        def column(name: str, kind: pa.DataType) -> pa.Array:
            return arrange([_as(p.columns[name], kind) for p in pieces])

        meta = {
            "topic": lambda: per_message_text(topics, messages),
            "sender": lambda: per_message_text(senders, messages),
            "received_at": lambda: received_times(received, messages),
            "offset": lambda: pc.take(pa.array(offsets, pa.int64()), messages),
            "record": lambda: _record_index(pieces),
            "log_schema_id": lambda: pa.concat_arrays(
                [repeated_text(schema_id(p.schema), len(p.order)) for p in pieces]
            ),
            "log_schema": lambda: pa.concat_arrays([_first_only(p) for p in pieces]),
            "relay": lambda: pa.repeat(pa.scalar(self.relay, pa.string()), len(messages)),
            MESSAGE: lambda: pa.nulls(len(messages), pa.binary()),  # lines, not bytes
            "_path": lambda: pa.concat_arrays(
                [repeated_text(p.path, len(p.order)) for p in pieces]
            ),
        }
        placed = {"_path", "record", "log_schema_id", "log_schema"}  # the pieces' order
        by_role = {name: role for role, name in self.columns.roles.items()}
        runs = None
        if RECORDS in self.columns.roles:  # a row per run of a log's records in a message
            groups = np.concatenate([np.full(len(p.order), i) for i, p in enumerate(pieces)])
            lines = column("log", pa.string())
            runs = run_starts(
                arrange([messages]).to_numpy(zero_copy_only=False),
                arrange([pa.array(groups)]).to_numpy(zero_copy_only=False),
                lines.is_valid().to_numpy(zero_copy_only=False),
            )
            joined, counts = join_runs(lines, runs)
        arrays = []
        for f in self.schema:
            role = by_role.get(f.name)
            if role == "log":
                arrays.append(_as(joined, f.type) if runs is not None else column("log", f.type))
                continue
            if role is None:
                values = self._field(f, "", pieces, arrange)
            elif role == RECORDS:
                arrays.append(_as(pa.array(counts), f.type))
                continue
            else:
                values = meta[role]()
                if role in placed:
                    values = arrange([values])
                elif perm is not None:
                    values = pc.take(values, perm)
            if runs is not None:  # a run's first record's values
                values = values.take(pa.array(runs))
            arrays.append(_as(values, f.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _field(self, f: pa.Field, prefix: str, pieces: list[_Piece], arrange: Any) -> pa.Array:
        name = prefix + f.name
        if pa.types.is_struct(f.type):
            children = [
                self._field(f.type.field(i), name + ".", pieces, arrange)
                for i in range(f.type.num_fields)
            ]
            return pa.StructArray.from_arrays(children, fields=list(f.type))
        return arrange([_as(p.columns[name], f.type) for p in pieces])


def _undecodable_piece(
    kept: list[int],
    data: bytes,
    starts: Sequence[int],
    ends: Sequence[int],
    senders: Sequence[str],
    records: int,
) -> _Piece:
    """Rows for messages a relay kept undecodable, after every record found (``records``)."""
    n = len(kept)
    piece = _Piece(
        np.arange(records, records + n, dtype=np.int64),
        np.asarray(kept, dtype=np.int64),
        UNDECODABLE_PATH,
    )
    piece.columns["log"] = pa.array(
        _undecodable_lines(kept, data, starts, ends, senders), pa.string()
    )
    return piece


def _undecodable_lines(
    kept: list[int],
    data: bytes,
    starts: Sequence[int],
    ends: Sequence[int],
    senders: Sequence[str],
) -> list[str]:
    """The ``log`` of each kept message's row: a JSON object of its source, reason, sender
    and frames (base64)."""
    import base64
    import json

    lines = []
    for i in kept:
        try:
            found = unpack_undecodable(data[starts[i] : ends[i]])
            line = {
                "source": found.source,
                "reason": found.reason,
                "sender": senders[i],
                "frames": [base64.b64encode(f).decode("ascii") for f in found.frames],
            }
        except DecodeError as exc:
            line = {"source": None, "reason": str(exc), "sender": senders[i], "frames": []}
        lines.append(json.dumps(line, separators=(",", ":")))
    return lines


def _first_only(piece: _Piece) -> pa.Array:
    """The piece's schema as JSON on its first row, nulls on the others."""
    n = len(piece.order)
    if piece.schema is None or n == 0:
        return pa.nulls(n, pa.string())
    text = schema_texts(piece.schema)[1]
    return pa.concat_arrays([pa.array([text]), pa.nulls(n - 1, pa.string())])


def _record_index(pieces: list[_Piece]) -> pa.Array:
    """Each record's index among the records of its log in its message (arrival order), in
    the pieces' order: with the message's offset, where the record is. A filter on logs
    keeps or drops a log's records all together, so the index does not depend on it."""
    order = np.concatenate([p.order for p in pieces])
    messages = np.concatenate([p.messages for p in pieces]).astype(np.int64)
    codes: dict[str, int] = {}
    for p in pieces:
        codes.setdefault(p.path, len(codes))
    paths = np.concatenate([np.full(len(p.order), codes[p.path], np.int64) for p in pieces])
    key = messages * len(codes) + paths
    by_key = np.lexsort((order, key))
    n = len(by_key)
    sorted_key = key[by_key]
    firsts = np.flatnonzero(np.r_[True, sorted_key[1:] != sorted_key[:-1]])
    group_start = np.repeat(firsts, np.diff(np.r_[firsts, n]))
    index = np.empty(n, np.int64)
    index[by_key] = np.arange(n, dtype=np.int64) - group_start
    return pa.array(index)


def padded(data: bytes, used: int) -> np.ndarray:
    """``data`` as the buffer of a :class:`~broker_spark.zeek.columns.Block`, which reads up
    to :data:`~broker_spark.zeek.columns._PAD` bytes past a record: the bytes themselves
    when that many follow the last record (a record stream ends with the last message's
    sender and numbers), else a padded copy."""
    if len(data) - used >= _PAD:
        return np.frombuffer(data, dtype=np.uint8)
    buf = np.zeros(len(data) + _PAD, dtype=np.uint8)
    buf[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    return buf


def record_spans(packed: bytes, count: int | None) -> tuple[list, ...] | None:
    """Where each record's payload lies in a record stream, and its other fields:
    ``(starts, ends, topics, senders, received, offsets)``; None when a record is not
    the plain ``[str, bin, str, uint, uint]`` msgpack array this reads (the unpacking
    path then decodes, or rejects, the stream). The record's framing is read by
    :func:`~broker_spark.data.msgpack_records.record_fields`, the spool's one reader."""
    starts: list[int] = []
    ends: list[int] = []
    topics: list[str] = []
    senders: list[str] = []
    received: list[int] = []
    offsets: list[int] = []
    pos = 0
    size = len(packed)
    try:
        while pos < size:
            fields = record_fields(packed, pos)
            if fields is None:
                return None
            (t_at, t_len), (p_at, p_len), (s_at, s_len), (r_at, r_len), (o_at, o_len) = fields
            topics.append(packed[t_at : t_at + t_len].decode("utf-8"))
            starts.append(p_at)
            ends.append(p_at + p_len)
            senders.append(packed[s_at : s_at + s_len].decode("utf-8"))
            received.append(int.from_bytes(packed[r_at : r_at + r_len], "big"))
            offsets.append(int.from_bytes(packed[o_at : o_at + o_len], "big"))
            pos = o_at + o_len
    except UnicodeDecodeError:
        return None
    if pos != size or (count is not None and len(starts) != count):
        return None
    return starts, ends, topics, senders, received, offsets


def _as(arr: pa.Array, kind: pa.DataType) -> pa.Array:
    return arr if arr.type == kind else arr.cast(kind)


def _leaf_types(schema: pa.Schema, columns: LogColumns) -> dict[str, pa.DataType]:
    """The Arrow type of each log column the output holds, by Zeek name."""
    roles = set(columns.roles.values())
    out: dict[str, pa.DataType] = {}

    def walk(f: pa.Field, prefix: str) -> None:
        if pa.types.is_struct(f.type):
            for i in range(f.type.num_fields):
                walk(f.type.field(i), f"{prefix}{f.name}.")
        else:
            out[prefix + f.name] = f.type

    for f in schema:
        if f.name not in roles:
            walk(f, "")
    return out


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)
