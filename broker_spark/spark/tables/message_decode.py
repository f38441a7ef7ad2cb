"""Rows of Zeek messages' bytes (:mod:`~broker_spark.columnar.log_messages`) decoded.

Two ways, both by the reader's own converter
(:class:`~broker_spark.columnar.log_converter.LogConverter`) given the columns the
records were read with (the row's ``log_schema_id``), so a record decodes here
exactly as a stream of its log would give it:

* :class:`TypedMessages`: a log's rows into its typed columns, a row a record,
  for the tables writer's tasks (the columns and types
  :func:`~broker_spark.columnar.log_json.parse_lines` gives for the same
  records as JSON lines);
* :func:`line_runs_partition`: every row back into runs of Zeek's JSON lines
  (``message`` dropped), for the paths where Spark parses the lines itself (a
  group the tasks could not take, the quarantine, Delta's and other formats'
  writes). Rows that already hold lines pass as they are.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.types import LongType, StringType, StructField, StructType

from broker_spark.columnar.log_converter import LogConverter
from broker_spark.columnar.log_metadata import learn_schema_texts
from broker_spark.spark.compat import arrow_schema
from broker_spark.spark.zeek_schema import (
    MESSAGE,
    RECORDS,
    log_columns,
    zeek_log_schema,
)
from broker_spark.zeek.log_schema import LogSchema

__all__ = ["TypedMessages", "line_runs_partition"]

#: What a message row's records are rendered as: runs of JSON lines of one log.
_RUNS = StructType(
    [
        StructField("_path", StringType()),
        StructField("log", StringType()),
        StructField("record", LongType()),
        StructField(RECORDS, LongType()),
    ]
)


class TypedMessages:
    """Decodes message rows of one log (``path``) read with ``schema`` into its typed
    columns (``columns``: nested or flat), a row a record in the rows' order."""

    def __init__(self, path: str, schema: LogSchema, columns: str, zeek_version: str) -> None:
        spark_schema = zeek_log_schema(schema, columns, metadata=False)
        self.names = list(spark_schema.names)
        self.converter = LogConverter(
            arrow_schema(spark_schema),
            log_columns(spark_schema, schema.names),
            paths=[path],
            known=schema,
            zeek_version=zeek_version,
        )

    def decode(self, rows: pa.Table, records: int) -> tuple[list[str], list[pa.Array]]:
        """The columns of the ``records`` records of ``rows`` (``message``, ``sender``,
        ``offset``). Raises ``ValueError`` when a record does not decode as the columns
        say, or the rows hold another number of records (nothing is half decoded)."""
        n = rows.num_rows
        payloads = rows.column(MESSAGE).to_pylist()
        senders = rows.column("sender").to_pylist()
        offsets = rows.column("offset").fill_null(0).to_pylist()
        conv = self.converter
        before = conv.misfits + conv.undecodable
        out = conv.convert([""] * n, payloads, senders, [0] * n, offsets)
        bad = conv.misfits + conv.undecodable - before
        if bad:
            raise ValueError(f"{bad} records do not decode as the log's columns say")
        if out.num_rows != records:
            raise ValueError(f"{out.num_rows} records decoded from rows of {records}")
        return self.names, list(out.columns)


def line_runs_partition(
    known: dict[str, str], zeek_version: str
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that turns message rows into runs of JSON lines (the
    rows without ``message``); ``known`` are the columns (JSON) of schema ids learned
    before: a partition names an id's columns on its first row only."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        lines = _LineRuns(dict(known), zeek_version)
        for batch in batches:
            yield lines.take(batch)

    return run


class _LineRuns:
    """One task's renderer: a converter per log and schema id, the ids' columns seen."""

    def __init__(self, texts: dict[str, str], zeek_version: str) -> None:
        self.texts = texts
        self.zeek_version = zeek_version
        self.converters: dict[tuple[str, str], LogConverter] = {}

    def take(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        learn_schema_texts(batch, self.texts)
        keep = [name for name in batch.schema.names if name != MESSAGE]
        out = batch.select(keep)
        payloads = batch.column(MESSAGE)
        if payloads.null_count == len(payloads):
            return out
        needed = ("_path", "topic", "sender", "offset", "log_schema_id", MESSAGE)
        rows = batch.select(list(needed)).to_pydict()
        picked: list[int] = []
        logs: list[pa.Array] = []
        firsts: list[pa.Array] = []
        counts: list[pa.Array] = []
        for i, payload in enumerate(rows[MESSAGE]):
            if payload is None:  # lines already (a partition read as lines)
                picked.append(i)
                logs.append(batch.column("log").slice(i, 1))
                firsts.append(batch.column("record").slice(i, 1))
                counts.append(batch.column(RECORDS).slice(i, 1))
                continue
            runs = self._convert(rows, i, payload)
            picked += [i] * runs.num_rows
            logs.append(runs.column("log"))
            firsts.append(runs.column("record"))
            counts.append(runs.column(RECORDS))
        out = out.take(pa.array(np.asarray(picked, dtype=np.int64)))
        replaced = {
            "log": _joined(logs, pa.string()),
            "record": _joined(firsts, pa.int64()),
            RECORDS: _joined(counts, pa.int64()),
        }
        arrays = [
            replaced[name].cast(out.schema.field(name).type) if name in replaced else column
            for name, column in zip(out.schema.names, out.columns, strict=True)
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=out.schema)

    def _convert(self, rows: dict[str, list], i: int, payload: bytes) -> pa.RecordBatch:
        """Row ``i``'s records as runs of lines: ``log``, ``record``, ``records``."""
        path, sid = rows["_path"][i] or "", rows["log_schema_id"][i] or ""
        conv = self.converters.get((path, sid))
        if conv is None:
            text = self.texts.get(sid)
            known = LogSchema.from_json(json.loads(text), source="the stream") if text else None
            conv = self.converters[(path, sid)] = LogConverter(
                arrow_schema(_RUNS),
                log_columns(_RUNS),
                paths=[path],
                known=known,
                zeek_version=self.zeek_version,
            )
        return conv.convert(
            [rows["topic"][i] or ""],
            [payload],
            [rows["sender"][i] or ""],
            [0],
            [rows["offset"][i] or 0],
        )


def _joined(arrays: list[pa.Array], kind: pa.DataType) -> pa.Array:
    return pa.concat_arrays([a if a.type == kind else a.cast(kind) for a in arrays])
