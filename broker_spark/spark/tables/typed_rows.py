"""Rows of one Zeek log, as the stream gives them, made that log's typed columns.

Both ways a batch reaches its tables start here: the stage job
(:mod:`~broker_spark.spark.tables.stage`, whose tasks write Parquet with Arrow)
and Spark's writers (:mod:`~broker_spark.spark.tables.typed_frames`: Delta,
Iceberg, ORC, Spark's Parquet), so a record gets the same columns and values
whichever writes it. The rows may be messages' bytes (a ``message`` column: a
message's records of one log, what ``write_zeek_tables`` reads), decoded by the
reader's own converter
(:class:`~broker_spark.spark.tables.message_decode.TypedMessages`); or JSON
lines, a record a row or runs of a message's records (a ``records`` column),
parsed by Arrow's JSON reader (:mod:`~broker_spark.columnar.log_json`). Each
record gets its own row and ``record`` index back
(:func:`~broker_spark.columnar.log_line_runs.run_positions`).

Rows that cannot be made typed here (a record that does not decode as its
columns say, a count past 2^63) raise :class:`NotTyped`; :meth:`TypedRows.lines`
gives the same rows as Zeek's JSON lines, a record each, for Spark's own parse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_spark.columnar.log_json import parse_lines
from broker_spark.columnar.log_line_runs import run_positions
from broker_spark.spark.tables.message_decode import TypedMessages, line_runs_partition
from broker_spark.spark.zeek_schema import MESSAGE, RECORDS, RELAY_METADATA, metadata_names
from broker_spark.zeek.log_schema import LogSchema

__all__ = ["NotTyped", "TypedRows", "record_count"]


class NotTyped(Exception):
    """Why rows of a log were not made typed here (Spark parses their JSON lines instead)."""


class TypedRows:
    """Makes rows of log ``path`` read with ``schema`` its typed columns (``columns``:
    nested or flat) followed by the metadata ``keep`` names (named as
    :func:`metadata_names` names them beside the log's own columns), a row a record."""

    def __init__(
        self,
        path: str,
        schema: LogSchema,
        keep: Sequence[str],
        columns: str,
        zeek_version: str,
    ) -> None:
        self.path = path
        self.schema = schema
        self.keep = tuple(keep)
        self.columns = columns
        self.zeek_version = zeek_version
        self._decoder: TypedMessages | None = None

    def typed(self, rows: pa.Table) -> pa.Table:
        """``rows`` (lines, runs of lines or messages' bytes, mixed too) as the log's typed
        columns and the kept metadata; raises :class:`NotTyped` (nothing is half made)."""
        pieces = [rows]
        lines = rows.column(MESSAGE).null_count if MESSAGE in rows.column_names else 0
        if 0 < lines < rows.num_rows:  # messages' bytes, and lines (a partition read so)
            as_bytes = rows.column(MESSAGE).is_valid()
            pieces = [rows.filter(as_bytes), rows.filter(pc.invert(as_bytes))]
        made = [self._typed(piece) for piece in pieces]
        if any(table.schema != made[0].schema for table in made[1:]):
            raise NotTyped("its lines and its messages gave other columns")
        return made[0] if len(made) == 1 else pa.concat_tables(made)

    def _typed(self, rows: pa.Table) -> pa.Table:
        kept, records = self._kept(rows)
        if MESSAGE in rows.column_names and rows.column(MESSAGE).null_count == 0:
            if self._decoder is None:
                self._decoder = TypedMessages(
                    self.path, self.schema, self.columns, self.zeek_version
                )
            try:
                names, arrays = self._decoder.decode(rows, records or 0)
            except ValueError as exc:
                raise NotTyped(f"not decoded as its columns say: {exc}") from None
        else:
            try:
                lines = rows.column("log").combine_chunks()
                names, arrays = parse_lines(lines, self.schema, self.columns, records)
            except (pa.ArrowException, ValueError) as exc:
                raise NotTyped(f"not read by Arrow's JSON reader: {exc}") from None
        names = list(names)  # the decoder's own list: never grown in place
        named = metadata_names(names, optional=(RELAY_METADATA,))
        for meta in self.keep:
            names.append(named[meta])
            arrays.append(kept[meta])
        return pa.Table.from_arrays(arrays, names=names)

    def _kept(self, rows: pa.Table) -> tuple[dict[str, pa.Array], int | None]:
        """The kept metadata a record each, and how many records runs hold (None: a row
        is a record)."""
        kept = {meta: rows.column(meta).combine_chunks() for meta in self.keep}
        if RECORDS not in rows.column_names:
            return kept, None
        counts = rows.column(RECORDS).combine_chunks().to_numpy(zero_copy_only=False)
        which, index = run_positions(counts)
        kept = {meta: values.take(pa.array(which)) for meta, values in kept.items()}
        if "record" in kept:
            firsts = kept["record"].to_numpy(zero_copy_only=False)
            kept["record"] = pa.array(firsts + index, kept["record"].type)
        return kept, len(which)

    def lines(self, rows: pa.Table, known: dict[str, str]) -> tuple[pa.Array, dict[str, pa.Array]]:
        """``rows`` as Zeek's JSON lines, a record each (null where a record does not
        decode at all), and the kept metadata of each (the metadata named as in the
        stream, not beside the log's columns). ``known``: the columns (JSON) of schema
        ids, for messages' bytes."""
        batch = rows.combine_chunks().to_batches()
        if MESSAGE in rows.column_names and batch:
            render = line_runs_partition(dict(known), self.zeek_version)
            runs = pa.Table.from_batches([out for part in batch for out in render(iter([part]))])
        else:
            runs = rows
        kept, records = self._kept(runs)
        text = runs.column("log").combine_chunks()
        if records is None:
            return text, kept
        counts = runs.column(RECORDS).combine_chunks().to_numpy(zero_copy_only=False)
        split = pc.split_pattern(text, "\n")
        # a run whose line is null (a record that did not decode) is one null record
        filled = pc.if_else(pc.is_null(text), pa.scalar([None], split.type), split)
        flat = pc.list_flatten(filled)
        if len(flat) != int(np.sum(counts)):
            raise ValueError(f"{len(flat)} lines in runs of {int(np.sum(counts))} records")
        return flat, kept


def record_count(rows: pa.RecordBatch | pa.Table) -> int:
    """The records ``rows`` hold: a row each, or a run each (a ``records`` column)."""
    if RECORDS not in rows.schema.names:
        return rows.num_rows
    return int(pc.sum(rows.column(RECORDS)).as_py() or 0)


def to_schema(table: pa.Table, schema: pa.Schema) -> pa.RecordBatch:
    """``table``'s columns, by name, as one batch of ``schema`` (absent columns null)."""
    arrays: list[Any] = []
    for f in schema:
        if f.name in table.column_names:
            column = table.column(f.name).combine_chunks()
            arrays.append(column if column.type == f.type else column.cast(f.type))
        else:
            arrays.append(pa.nulls(table.num_rows, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
