"""A micro-batch's Zeek log rows staged as Parquet files by the tasks that hold them.

The writer's fast path (:mod:`~broker_spark.spark.tables.log_tables`, for tables of
Parquet files, :data:`STAGED_FORMATS`, compressed as the session's
``spark.sql.parquet.compression.codec`` says): one Spark job (``mapInArrow``) in
which each task groups its rows by log and columns (``_path``, ``log_schema_id``),
makes each group's rows the log's typed columns and writes them, with the row's position and a ``day``
folder, under ``<folder>/<log>/<schema id>/day=<day>/``. The rows are made
typed as Spark's writers get them (:class:`~broker_spark.spark.tables.typed_rows.TypedRows`:
messages' bytes by the reader's own converter, JSON lines by Arrow's JSON
reader, each record its own row and ``record`` index), and a group's size
counts records. No cache, no sort, no JVM parse. The
driver gets one report row per task and group (what was written, the columns'
JSON, or why the group was not) and decides what goes into which table: a
group whose columns clash with its table, or that the task would not decode or
parse, is written through Spark from the batch instead, and its staged files
are left.

File names depend only on the task's partition and the group, and each file is
written under a hidden name and renamed, so a task that runs again (a retry,
a re-run batch) replaces its files instead of adding to them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from broker_spark.columnar.log_metadata import learn_schema_texts
from broker_spark.spark.tables.typed_rows import NotTyped, TypedRows, record_count
from broker_spark.spark.zeek_schema import MESSAGE, RECORDS, RELAY_METADATA, metadata_names
from broker_spark.zeek.log_schema import LogSchema, standard_schema

__all__ = [
    "DAY",
    "NO_DAY",
    "REPORT_SCHEMA",
    "STAGED_FORMATS",
    "StagedGroup",
    "arrow_codec",
    "arrow_knows_time_zone",
    "safe_name",
    "stage_partition",
]

#: The column a table is partitioned by: the day of the record's ``ts`` (session time zone).
DAY = "day"
#: The folder of rows without a day (Hive's, and Spark's, name for a null partition value).
NO_DAY = "__HIVE_DEFAULT_PARTITION__"
#: The report each task gives the driver, a row per group of its partition.
REPORT_SCHEMA = "path string, schema_id string, schema string, rows long, files long, error string"
#: Rows of a group held before they are written (a file each time): bounds a task's memory.
FLUSH_ROWS = 65_536


#: The table formats whose files the tasks write. Not ORC: Arrow writes time columns as
#: ORC's TIMESTAMP_INSTANT, which Spark before 4.3 cannot read (Databricks 17.3 and 18 run
#: 4.0 and 4.1), and Spark reads ORC's plain TIMESTAMP as a wall clock in the reading
#: JVM's time zone, which a task cannot know.
STAGED_FORMATS = frozenset({"parquet"})

#: Spark's compression codecs (``spark.sql.parquet.compression.codec``) as Arrow's
#: writer names them; one Arrow does not write (``lzo``) sends the batch through
#: Spark's own writer.
_CODECS = {
    "parquet": {
        "none": "none",
        "uncompressed": "none",
        "snappy": "snappy",
        "gzip": "gzip",
        "brotli": "brotli",
        "zstd": "zstd",
        "lz4": "lz4",
        "lz4_raw": "lz4",
    },
}


def arrow_codec(file_format: str, spark_codec: str | None) -> str | None:
    """The codec Arrow writes ``file_format`` files with for Spark's setting ``spark_codec``
    (the session's value, its default included: snappy for Parquet; None: unknown,
    snappy); None when Arrow has no such codec or the tasks do not write the format."""
    return _CODECS.get(file_format, {}).get((spark_codec or "snappy").lower())


def safe_name(path: str) -> str:
    """A log path as a table or folder name part (Zeek paths are words; a site's may not be)."""
    return re.sub(r"[^0-9A-Za-z_]", "_", path) or "_"


@dataclass
class _Group:
    path: str
    schema_id: str
    parts: list[pa.RecordBatch] = field(default_factory=list)
    held: int = 0
    rows: int = 0
    files: int = 0
    schema: LogSchema | None = None
    schema_json: str | None = None
    error: str | None = None
    typer: TypedRows | None = None


@dataclass(frozen=True)
class StagedGroup:
    """What the driver reads of a report: one group of one task."""

    path: str
    schema_id: str
    schema: str | None
    rows: int
    files: int
    error: str | None


def stage_partition(
    folder: str,
    keep: Sequence[str],
    *,
    columns: str,
    zeek_version: str,
    time_zone: str,
    known: dict[str, str] | None = None,
    codec: str = "snappy",
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of the stage job: ``keep`` are the stream's metadata
    columns each row keeps (named as :func:`metadata_names` names them beside the
    log's own columns: MQTT's ``topic`` keeps its name, the Broker topic is ``_topic``).
    ``known`` are the columns (JSON) of schema ids the driver learned from earlier
    batches: a partition names an id's columns on its first row only, and a batch
    that was repartitioned may hold rows of an id without that row. ``codec`` is the
    files' compression as Arrow names it (:func:`arrow_codec`)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        task = context.partitionId() if context is not None else 0
        stager = _Stager(folder, task, keep, columns, zeek_version, time_zone, codec)
        stager.texts.update(known or {})
        for batch in batches:
            stager.take(batch)
        yield stager.finish()

    return run


class _Stager:
    """One task's groups, their files and their report."""

    def __init__(
        self,
        folder: str,
        task: int,
        keep: Sequence[str],
        columns: str,
        zeek_version: str,
        time_zone: str,
        codec: str = "snappy",
    ) -> None:
        self.folder = folder
        self.codec = codec
        self.task = task
        self.keep = tuple(keep)
        self.columns = columns
        self.zeek_version = zeek_version
        self.time_zone = time_zone
        self.groups: dict[tuple[str, str], _Group] = {}
        self.texts: dict[str, str] = {}  # schema id: the columns' JSON, from the first row

    def take(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        learn_schema_texts(batch, self.texts)
        # rows of runs of records, or of messages' bytes
        shape = [name for name in (RECORDS, MESSAGE) if name in batch.schema.names]
        keep = batch.select(["log", *self.keep, *shape])
        key = pc.binary_join_element_wise(
            pc.fill_null(batch.column("_path"), ""),
            pc.fill_null(batch.column("log_schema_id"), ""),
            "\x1f",
        )
        encoded = key.dictionary_encode()
        names = encoded.dictionary.to_pylist()
        if len(names) == 1:
            self._add(names[0], keep)
            return
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        if len(_runs(codes)) > len(names):  # a log's rows apart: put each log's together
            order = np.argsort(codes, kind="stable")
            keep, codes = keep.take(pa.array(order)), codes[order]
        for code, first, count in _runs(codes):
            self._add(names[code], keep.slice(first, count))

    def _add(self, key: str, rows: pa.RecordBatch) -> None:
        path, _sep, sid = key.partition("\x1f")
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = _Group(path, sid)
        records = record_count(rows)
        group.rows += records
        if group.error is not None:
            return
        group.parts.append(rows)
        group.held += records
        if group.held >= FLUSH_ROWS:
            self._flush(group)

    def _schema(self, group: _Group) -> LogSchema | None:
        if group.schema is None:
            text = self.texts.get(group.schema_id)
            if text is not None:
                group.schema_json = text
                group.schema = LogSchema.from_json(json.loads(text), source="the stream")
            elif not group.schema_id and group.path:  # no LogCreate: Zeek's standard columns
                group.schema = standard_schema(group.path, self.zeek_version)
        return group.schema

    def _flush(self, group: _Group) -> None:
        parts, group.parts, group.held = group.parts, [], 0
        if group.error is not None or not parts:
            return
        schema = self._schema(group)
        if schema is None:  # the driver decides (no columns at all: the quarantine)
            group.error = "the log's columns are not known in this partition"
            return
        if group.typer is None:
            group.typer = TypedRows(group.path, schema, self.keep, self.columns, self.zeek_version)
        try:
            table = group.typer.typed(pa.Table.from_batches(parts))
            days = self._days(_when(table, schema, self.keep))
        except NotTyped as exc:
            group.error = str(exc)
            return
        self._write(group, table, days)

    def _days(self, when: Any) -> pa.Array:
        """Each row's day in the session's time zone, as its partition folder names it."""
        when = when.combine_chunks() if isinstance(when, pa.ChunkedArray) else when
        local = pc.local_timestamp(when.cast(pa.timestamp("us", tz=self.time_zone)))
        return local.cast(pa.date32())

    def _write(self, group: _Group, table: pa.Table, days: pa.Array) -> None:
        where = os.path.join(self.folder, safe_name(group.path), group.schema_id or "_")
        if len(pc.unique(days)) == 1:
            parts = [(days[0].as_py(), table)]
        else:  # a batch that spans midnight: each day's rows together, in one take
            order = pc.sort_indices(days)  # nulls last
            days, table = days.take(order), table.take(order)
            codes = days.cast(pa.int32()).fill_null(-(2**31)).to_numpy(zero_copy_only=False)
            parts = [
                (days[first].as_py(), table.slice(first, count))
                for _code, first, count in _runs(codes)
            ]
        for day, part in parts:
            label = day.isoformat() if isinstance(day, dt.date) else NO_DAY
            folder = os.path.join(where, f"{DAY}={label}")
            os.makedirs(folder, exist_ok=True)
            name = f"part-{self.task:05d}-{group.files:05d}.parquet"
            hidden = os.path.join(folder, f".{name}.{uuid.uuid4().hex}")
            pq.write_table(part, hidden, compression=self.codec)
            os.replace(hidden, os.path.join(folder, name))
            group.files += 1

    def finish(self) -> pa.RecordBatch:
        for group in self.groups.values():
            self._flush(group)
        groups = list(self.groups.values())
        for group in groups:
            if group.schema_json is None:
                group.schema_json = self.texts.get(group.schema_id)
        return pa.RecordBatch.from_pydict(
            {
                "path": [g.path for g in groups],
                "schema_id": [g.schema_id for g in groups],
                "schema": [g.schema_json for g in groups],
                "rows": pa.array([g.rows for g in groups], pa.int64()),
                "files": pa.array([g.files for g in groups], pa.int64()),
                "error": [g.error for g in groups],
            }
        )


def _when(table: pa.Table, schema: LogSchema, keep: Sequence[str]) -> Any:
    """The time a row's day is of: its ``ts`` (a log of a site's own may have no ts: its
    arrival); raises :class:`NotTyped` for a ts that is not a time (Spark's to_date)."""
    if "ts" in schema.names:
        when = table.column("ts")
    else:
        names = [f.name for f in table.schema][: len(table.schema) - len(keep)]
        when = table.column(metadata_names(names, optional=(RELAY_METADATA,))["received_at"])
    if not pa.types.is_timestamp(when.type):
        raise NotTyped(f"its ts is {when.type}, not a time")
    return when


def _runs(codes: np.ndarray) -> list[tuple[int, int, int]]:
    """``(code, first, count)`` of each run of equal codes, in order."""
    if not len(codes):
        return []
    starts = np.r_[0, np.flatnonzero(codes[1:] != codes[:-1]) + 1]
    counts = np.diff(np.r_[starts, len(codes)])
    return [(int(codes[a]), int(a), int(n)) for a, n in zip(starts, counts, strict=True)]


def arrow_knows_time_zone(zone: str | None) -> bool:
    """Whether Arrow can place days in ``zone`` (the session's ``spark.sql.session.timeZone``;
    one it does not know sends the batch through Spark's own writer)."""
    if not zone:
        return False
    try:
        pc.local_timestamp(pa.array([0], pa.timestamp("us", tz=zone)))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        return False
    return True
