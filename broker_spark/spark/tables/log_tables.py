"""Zeek's logs as lakehouse tables: one query, one table per log, exactly once.

What a Zeek user on Spark wants in the end is a table per log (``conn``,
``dns``, ``http``...), typed, partitioned by day, complete and without
duplicates, and still right after Zeek is upgraded or a site's script adds a
field. :func:`write_zeek_tables` builds that from one stream of every log
(``format=zeek-logs``, from relays, peering or Zeek's ZeroMQ backend):

* the stream's rows are a row per log of each message, holding the message's
  Broker bytes (``message``, ``records``: :mod:`~broker_spark.columnar.log_messages`,
  so Spark moves a row per Zeek Batch, and no JSON is rendered or parsed on the
  way), with the log's columns in force for its records (``log_schema_id``,
  ``log_schema``: from Zeek's LogCreate, or a ZeroMQ batch's header), so each
  micro-batch is split by log and by columns, and each part decoded into the
  log's typed, nested columns (the columns a stream of that log gives, and
  :func:`~broker_spark.spark.zeek_schema.parse_zeek_json` gives for its JSON
  lines) and written to its table, with the row's position (``offset``,
  ``record``, and ``relay`` when read from relays) and a ``day`` column (the
  day of ``ts`` in the session's time zone, ``spark.sql.session.timeZone``) it
  is partitioned by;
* **columns follow Zeek**: a log whose columns grow (a Zeek upgrade, a local
  ``&log`` field) adds the columns to its table from the first batch that
  carries them, no restart (older rows read null); a column whose type changed
  in a way the table cannot take sends those rows to the quarantine table
  (the raw line, the log, the position and the reason) instead of failing or
  corrupting the table;
* **exactly once** across retried batches and restarts: on Delta, Delta's
  idempotent writes (``txnAppId``/``txnVersion``: a batch already committed to
  a table is skipped); elsewhere (Spark's own tables), a marker per table and
  batch (:mod:`~broker_spark.spark.tables.markers`).

The query reads its stream deferred (``deferredRows``,
:mod:`~broker_spark.spark.read.deferred`): a micro-batch is a row per partition,
and the tasks that write read their partitions' rows themselves, so a message's
bytes reach the task that decodes them without crossing Spark's JVM (the stage
job); the jobs that need the rows in Spark (the quarantine, Spark's writer) take
them from :func:`~broker_spark.spark.read.deferred.deferred_rows`.
:class:`ZeekTables` takes a stream of the rows themselves as well.

How a batch is written depends on the tables' format. Parquet tables (Spark's
default): one job in which each task decodes its rows into each log's typed
columns and writes its Parquet files with Arrow under the checkpoint
(:mod:`~broker_spark.spark.tables.stage`), then the driver moves each table's
files in. Delta, Iceberg, ORC and any other format (and Parquet with
``spark_writer``): the batch's rows are kept (a row per log of each message),
and each table's rows are made typed by the tasks with the same code
(:mod:`~broker_spark.spark.tables.typed_frames`, a ``mapInArrow`` per log) and
written by Spark's writer, no JSON in between. Either way, rows a task refuses
(a record that does not decode as its columns say, a count past 2^63) are
parsed by Spark from their JSON lines, and rows whose columns clash with their
table go to the quarantine as JSON lines (:func:`each_record`). After each
commit the table is refreshed in the sessions that read it (:mod:`.freshness`).
:class:`ZeekTables` also takes a stream of runs of JSON lines
(``table_input_schema(runs=True)``) or of a row a record
(``table_input_schema()``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from broker_spark.columnar.log_converter import UNDECODABLE_PATH
from broker_spark.spark.read.deferred import DEFERRED_COLUMN, deferred_rows, read_deferred
from broker_spark.spark.tables.columns import (
    KEPT_METADATA,
    clash_of,
    each_record,
    kept_undecodable_reason,
    merged,
    quarantine_rows,
    table_input_schema,
    table_types,
    with_metadata,
)
from broker_spark.spark.tables.delta_commit import (
    DeltaFastTable,
    delta_available,
    is_path_table,
    path_of,
)
from broker_spark.spark.tables.freshness import jvm_session, refresh_everywhere
from broker_spark.spark.tables.iceberg_commit import IcebergFastTable, iceberg_available
from broker_spark.spark.tables.iceberg_spark import append_once
from broker_spark.spark.tables.markers import (
    MarkedTable,
    TableMemory,
    ZeekTableError,
    local_path,
)
from broker_spark.spark.tables.stage import (
    DAY,
    REPORT_SCHEMA,
    STAGED_FORMATS,
    StagedGroup,
    arrow_codec,
    arrow_knows_time_zone,
    safe_name,
    stage_partition,
)
from broker_spark.spark.tables.typed_frames import typed_frame
from broker_spark.spark.zeek_schema import (
    GENERIC_LOG_FIELDS,
    MESSAGE,
    OPTIONAL_METADATA,
    RECORDS,
    zeek_log_schema,
)
from broker_spark.zeek.log_schema import LogSchema, standard_schema

__all__ = [
    "ZeekTableError",
    "ZeekTables",
    "each_record",
    "table_input_schema",
    "write_zeek_tables",
]

log = logging.getLogger(__name__)

#: Folder (under the checkpoint) of the markers and staged files of non-Delta tables.
STATE = "_zeek_tables"

#: Spark settings the writes of a batch run with (the session's own are put back after):
#: each JSON line parsed once (Spark's JSON expression optimizer otherwise gives every
#: column read from ``from_json`` a parse of its own: a conn line parsed 22 times, 3x
#: slower end to end), a batch's rows written into their day's files as they come
#: instead of sorted by day first (a batch spans a day or two), and the stage job's
#: rows handed to its tasks 64 at a time: a row is a run of up to a message's records
#: (hundreds of lines), and Spark's 10,000 rows would be gigabytes in one Arrow batch.
WRITE_SETTINGS = {
    "spark.sql.optimizer.enableJsonExpressionOptimization": "false",
    "spark.sql.maxConcurrentOutputFileWriters": "16",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "64",
}


#: The formats with a fast path, and whether its library is installed.
FAST_FORMATS: dict[str, Callable[[], bool]] = {
    "delta": delta_available,
    "iceberg": iceberg_available,
}


@dataclass
class ZeekTables:
    """The ``foreachBatch`` of :func:`write_zeek_tables`: each micro-batch into its tables.

    ``table`` names each log's table (``{path}`` replaced: ``zeek_{path}``,
    ``main.zeek.{path}``), ``quarantine`` the table of rows whose columns clash
    with their table (None: such rows fail the batch). ``table_format`` is
    ``delta`` (idempotent writes by Delta's transaction ids) or any other format
    Spark writes tables in (the marker protocol; None: the session's default,
    ``spark.sql.sources.default``). ``app_id`` names the writer in Delta's
    transaction log and must stay the same across restarts (the checkpoint's
    path does). ``zeek_version`` picks the built-in columns of Zeek's standard
    logs ("9.1", "9.0", "8.0") for a log the stream has not described.
    ``parallel`` tables are committed at once (1: one after the other).
    ``spark_writer``: Parquet tables written by Spark's own writer too (what Delta,
    Iceberg and ORC tables always are), not by the tasks with Arrow.

    A micro-batch holds the stream's rows (:func:`table_input_schema`), or, read with
    ``deferredRows`` set to ``table_input_schema(runs=True, messages=True)`` (what
    :func:`write_zeek_tables` does), a row per partition that the tasks read.
    """

    checkpoint: str
    table: str = "zeek_{path}"
    quarantine: str | None = "zeek_quarantine"
    table_format: str | None = None
    columns: str = "nested"
    zeek_version: str = "9.1"
    app_id: str = ""
    #: Tables written at once (their Spark jobs overlap; 1: one after the other).
    parallel: int = 4
    spark_writer: bool = False
    #: Called after each table's write of a batch (tests inject faults there).
    after_table: Callable[[str, int], None] | None = None
    _schemas: dict[str, LogSchema] = field(default_factory=dict, repr=False)
    _known: dict[str, TableMemory] = field(default_factory=dict, repr=False)
    _clashes: set[str] = field(default_factory=set, repr=False)
    _warned: bool = field(default=False, repr=False)
    #: JVM sessions that read the tables (the query's own), refreshed after each commit.
    _sessions: list[Any] = field(default_factory=list, repr=False, compare=False)
    #: The fast paths' committers, by table (they hold the batch's session).
    _fast_tables: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if "{path}" not in self.table:
            raise ZeekTableError(f"table {self.table!r} must name the log: put {{path}} in it")
        if not self.app_id:
            self.app_id = "broker-spark-zeek-tables:" + self.checkpoint

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (Spark Connect ships the writer to the server): without JVM sessions."""
        state = dict(self.__dict__)
        state["_sessions"] = []
        state["_fast_tables"] = {}
        return state

    def fresh_in(self, spark: Any) -> ZeekTables:
        """Refresh the tables in ``spark`` too after each commit (write_zeek_tables does
        this for the session it is given); returns the writer."""
        session = jvm_session(spark)
        if session is not None:
            self._sessions.append(session)
        return self

    # --- one micro-batch ------------------------------------------------------------------

    def __call__(self, batch: Any, batch_id: int) -> None:
        with _settings(batch.sparkSession, WRITE_SETTINGS):
            self._write_batch(batch, batch_id)

    def _write_batch(self, batch: Any, batch_id: int) -> None:
        spark = batch.sparkSession
        rows, partitions = batch, None
        if batch.columns == [DEFERRED_COLUMN]:  # write_zeek_tables' stream: its partitions
            rows = deferred_rows(batch, _stream_rows())
            partitions = batch
        zone = spark.conf.get("spark.sql.session.timeZone")
        fmt = self._format(spark)
        codec = None
        files = "parquet" if self._fast(spark) else fmt  # Delta's, Iceberg's files: Parquet
        if files in STAGED_FORMATS and not self.spark_writer:
            codec = arrow_codec(files, _setting(spark, f"spark.sql.{files}.compression.codec"))
        if codec is not None and arrow_knows_time_zone(zone):
            self._write_staged(rows, partitions, batch_id, zone, codec)
        else:
            self._write_typed(rows, batch_id)

    def _write_staged(
        self, batch: Any, partitions: Any, batch_id: int, zone: str, codec: str
    ) -> None:
        """Parquet tables: the tasks decode and write the rows (the stage job), the driver
        moves each table's files in (Spark writes only the groups the tasks did not take).
        ``partitions``: a deferred stream's, which the stage job's tasks read themselves
        (None: the stage job takes ``batch``, the stream's rows)."""
        folder = os.path.join(self._state(), "staged", f"batch-{batch_id}")
        groups = self._stage(batch, partitions, folder, zone, codec)
        by_table: dict[str, dict[str, list[str]]] = {}
        kept = []
        for (path, sid), group in sorted(groups.items()):
            if path == UNDECODABLE_PATH:
                kept = self._kept_undecodable(batch)
                continue
            if group.schema is not None and sid not in self._schemas:
                self._schemas[sid] = LogSchema.from_json(json.loads(group.schema), "the stream")
            by_table.setdefault(self._table_of(path), {}).setdefault(path, []).append(sid)
        quarantined = kept + self._each_table(
            sorted(by_table),
            lambda name: self._write_table(batch, name, by_table[name], batch_id, groups, folder),
        )
        self._quarantine(batch.sparkSession, quarantined, batch_id)
        shutil.rmtree(folder, ignore_errors=True)

    def _each_table(self, names: list[str], write: Callable[[str], list[Any]]) -> list[Any]:
        """``write`` each table (``parallel`` at once: a table's commit is mostly catalog
        calls and Spark jobs that wait); the rows they leave for the quarantine."""
        workers = min(self.parallel, len(names))
        if workers > 1:
            with ThreadPoolExecutor(workers, thread_name_prefix="zeek-tables") as pool:
                found = list(pool.map(write, names))
        else:
            found = [write(name) for name in names]
        return [row for part in found for row in part]

    def _known_texts(self) -> dict[str, str]:
        """The columns (JSON) of the schema ids learned so far, for the tasks: a partition
        names an id's columns on its first row only."""
        return {sid: json.dumps(schema.to_json()) for sid, schema in self._schemas.items()}

    def _table_of(self, path: str) -> str:
        """The table of log ``path`` (two paths may make one name: ``a_b``, ``a-b``)."""
        return self.table.format(path=safe_name(path))

    def _stage(
        self, batch: Any, partitions: Any, folder: str, zone: str, codec: str
    ) -> dict[tuple[str, str], StagedGroup]:
        """Run the stage job (on a deferred stream's ``partitions``, read by its tasks, else on
        ``batch``'s rows), or read what it staged before (a batch run again after the
        driver died): the groups of the batch, by log and schema id."""
        report = os.path.join(folder, "_REPORT.json")
        staged = os.path.dirname(folder)
        if os.path.isdir(staged):  # only the newest batch can run again
            for entry in os.listdir(staged):
                if entry != os.path.basename(folder):
                    shutil.rmtree(os.path.join(staged, entry), ignore_errors=True)
        if os.path.exists(report):
            with open(report, encoding="utf-8") as f:
                return {(g["path"], g["schema_id"]): StagedGroup(**g) for g in json.load(f)}
        shutil.rmtree(folder, ignore_errors=True)  # a job that did not finish
        run = stage_partition(
            folder,
            KEPT_METADATA,
            columns=self.columns,
            zeek_version=self.zeek_version,
            time_zone=zone,
            known=self._known_texts(),
            codec=codec,
        )
        if partitions is not None:
            job = partitions.mapInArrow(_reading_first(run), REPORT_SCHEMA)
        else:
            job = batch.select(*self._input_columns(batch)).mapInArrow(run, REPORT_SCHEMA)
        groups: dict[tuple[str, str], StagedGroup] = {}
        for row in job.collect():
            key = (row["path"], row["schema_id"])  # a group of each task that held its rows
            had = groups.get(key) or StagedGroup(*key, None, 0, 0, None)
            groups[key] = StagedGroup(
                *key,
                had.schema or row["schema"],
                had.rows + row["rows"],
                had.files + row["files"],
                had.error or row["error"],
            )
        os.makedirs(folder, exist_ok=True)
        partial = report + ".partial"
        with open(partial, "w", encoding="utf-8") as f:
            json.dump([vars(g) for g in groups.values()], f)
        os.replace(partial, report)
        return groups

    def _write_typed(self, batch: Any, batch_id: int) -> None:
        """Delta, Iceberg, ORC, Spark's Parquet: each table's rows made typed by the tasks
        (:func:`typed_frame`, a ``mapInArrow`` per log) and written by Spark's writer."""
        # kept for the batch's jobs (the logs and their columns, then a job per table): the
        # source is read once, as a row per log of each message, not once per table
        df = batch.select(*self._input_columns(batch)).persist()
        try:
            by_table: dict[str, dict[str, list[str]]] = {}
            kept = []
            for path, ids in self._learn(df).items():
                if path == UNDECODABLE_PATH:
                    kept = self._kept_undecodable(df)
                    continue
                by_table.setdefault(self._table_of(path), {})[path] = sorted(ids)
            quarantined = kept + self._each_table(
                sorted(by_table),
                lambda name: self._write_table(df, name, by_table[name], batch_id),
            )
            self._quarantine(df.sparkSession, quarantined, batch_id)
        finally:
            df.unpersist()

    def _kept_undecodable(self, rows: Any) -> list[Any]:
        """The quarantine's rows of the messages a relay kept undecodable (``rows``: the
        stream's), their reason the relay's; none without a quarantine (the relay's spool
        still holds them, and ``format=zeek-logs`` shows them), said in the log."""
        from pyspark.sql import functions as F

        kept = rows.where(F.col("_path") == UNDECODABLE_PATH)
        if self.quarantine is None:
            log.warning(
                "messages a relay kept undecodable are in this batch and there is no "
                "quarantine table: not written (the relay's spool keeps them)"
            )
            return []
        lines = each_record(kept, {}, self.zeek_version)
        return [quarantine_rows(lines, kept_undecodable_reason(F.col("log")))]

    @staticmethod
    def _input_columns(batch: Any) -> list[str]:
        columns = ["_path", "log", "log_schema_id", "log_schema", *KEPT_METADATA]
        return columns + [name for name in (RECORDS, MESSAGE) if name in batch.columns]

    def _quarantine(self, spark: Any, quarantined: list[Any], batch_id: int) -> None:
        if not quarantined:
            return
        if self.quarantine is None:
            raise ZeekTableError(
                "rows whose columns clash with their table, and no quarantine: "
                + "; ".join(sorted(self._clashes))
            )
        out = quarantined[0]
        for more in quarantined[1:]:
            out = out.unionByName(more)
        self._commit(spark, self.quarantine, out, batch_id)

    def _learn(self, df: Any) -> dict[str, list[str]]:
        """The logs of the batch, the schema ids of each, and the columns of every id (each
        partition names each of its ids once, on its first row): one job."""
        from pyspark.sql import functions as F

        rows = (
            df.groupBy(
                "_path", F.coalesce(F.col("log_schema_id"), F.lit("")).alias("log_schema_id")
            )
            .agg(F.first("log_schema", ignorenulls=True).alias("log_schema"))
            .collect()
        )
        by_path: dict[str, list[str]] = {}
        for row in rows:
            sid = row["log_schema_id"] or ""
            by_path.setdefault(row["_path"], []).append(sid)
            if row["log_schema"] is not None and sid not in self._schemas:
                self._schemas[sid] = LogSchema.from_json(
                    json.loads(row["log_schema"]), source="the stream"
                )
        return by_path

    def _write_table(
        self,
        df: Any,
        name: str,
        logs: dict[str, list[str]],
        batch_id: int,
        staged: dict[tuple[str, str], StagedGroup] | None = None,
        folder: str = "",
    ) -> list[Any]:
        """Write the batch's rows (``df``: the stream's) of a table's logs (their schema ids:
        ``logs``) into it, in one commit: a group the stage job wrote (``staged``, under
        ``folder``) by its files, the others made typed by the tasks and written by Spark;
        the rows that cannot go there (for the quarantine)."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import DateType, StructField, StructType

        spark = df.sparkSession
        fast = staged is not None and self._format(spark) in FAST_FORMATS
        if self._format(spark) not in ("delta", "iceberg"):
            self._marked(spark, name).attach()
        # the fast paths: the table's columns as its format's library says
        present = self._fast_table(spark, name).types() if fast else table_types(spark, name)
        typed: list[Any] = []
        roots: list[tuple[str, str]] = []
        fields: dict[str, Any] = {}
        quarantined: list[Any] = []
        for path, sid in ((path, sid) for path, ids in sorted(logs.items()) for sid in ids):
            schema = self._schemas.get(sid) or standard_schema(path, self.zeek_version)
            sids = F.coalesce(F.col("log_schema_id"), F.lit(""))
            rows = df.where((F.col("_path") == path) & (sids == sid))
            if schema is None:  # nothing says what its columns are
                quarantined.append(self._quarantine_rows(rows, "no schema is known for this log"))
                continue
            columns = zeek_log_schema(schema, self.columns, metadata=False)
            clash = clash_of(present, columns)
            if clash:
                self._clashes.add(f"log {path} into {name}: {clash}")
                quarantined.append(self._quarantine_rows(rows, clash))
                continue
            group = staged.get((path, sid)) if staged is not None else None
            if group is not None and group.error is None:
                out = with_metadata(columns)
                tag = f"{safe_name(path)}-{sid or '_'}"
                roots.append((tag, os.path.join(folder, safe_name(path), sid or "_")))
            else:
                if group is not None:
                    log.info("log %s (%s): written by Spark, %s", path, sid, group.error)
                made = typed_frame(
                    rows,
                    path,
                    schema,
                    columns=self.columns,
                    zeek_version=self.zeek_version,
                    known=self._known_texts(),
                )
                typed.append(made)
                out = made.schema
            for f in out.fields:
                fields.setdefault(f.name, f)
            present = merged(present, out)
        if typed or roots:
            written = typed[0] if typed else None
            for more in typed[1:]:
                written = written.unionByName(more, allowMissingColumns=True)
            fields.pop(DAY, None)
            shape = StructType([*fields.values(), StructField(DAY, DateType(), True)])
            self._commit(spark, name, written, batch_id, staged=roots, schema=shape, fast=fast)
            if self.after_table is not None:
                self.after_table(name, batch_id)
        return quarantined

    def _quarantine_rows(self, rows: Any, reason: str) -> Any:
        """The quarantine's rows of ``rows`` (the stream's): their JSON lines, a record each."""
        return quarantine_rows(each_record(rows, self._known_texts(), self.zeek_version), reason)

    # --- exactly once ---------------------------------------------------------------------

    def _format(self, spark: Any) -> str:
        chosen = self.table_format or spark.conf.get("spark.sql.sources.default", "parquet")
        return str(chosen).lower()

    def _commit(
        self,
        spark: Any,
        name: str,
        df: Any,
        batch_id: int,
        *,
        staged: Sequence[tuple[str, str]] = (),
        schema: Any = None,
        fast: bool = False,
    ) -> None:
        """Append ``df`` (None: no rows through Spark) and the ``staged`` folders' files to
        table ``name`` as batch ``batch_id``, once; ``fast``: a Delta or Iceberg table
        committed by delta-rs or pyiceberg (the batch went through the stage job)."""
        fmt = self._format(spark)
        if fast:
            roots = list(staged)
            if df is not None:  # rows the tasks left to Spark: its Parquet files too
                roots.append(("spark", self._spark_files(df, name, batch_id)))
            self._fast_table(spark, name).append(self.app_id, batch_id, roots, schema)
            shutil.rmtree(os.path.join(self._state(), "spark-files", safe_name(name)), True)
        elif fmt == "delta":
            write = (
                df.write.format("delta")
                .mode("append")
                .option("txnAppId", self.app_id)
                .option("txnVersion", batch_id)
                .option("mergeSchema", "true")
                .partitionBy(DAY)
            )
            if is_path_table(name):  # delta.`/data/zeek/conn`: Spark saves it by its path
                write.save(path_of(name))
            else:
                write.saveAsTable(name)
        elif fmt == "iceberg":
            append_once(spark, name, df, self.app_id, batch_id)
        else:
            self._marked(spark, name).append(df, batch_id, staged=staged, schema=schema)
        if not is_path_table(name):  # a path table is read from its log each time
            refresh_everywhere(spark, name, self._sessions)

    def _fast(self, spark: Any) -> bool:
        """Whether the batch's tables take a fast path (files by the tasks, commits by
        delta-rs or pyiceberg): Delta or Iceberg, not ``spark_writer``, the library there."""
        fmt = self._format(spark)
        if self.spark_writer or fmt not in FAST_FORMATS:
            return False
        if FAST_FORMATS[fmt]():
            return True
        if not self._warned:
            self._warned = True
            log.warning(
                "%s tables written by Spark's writer: install broker-spark[%s] for the fast "
                "path (the tasks' files committed by the format's Python library)",
                fmt,
                fmt,
            )
        return False

    def _fast_table(self, spark: Any, name: str) -> DeltaFastTable | IcebergFastTable:
        """Table ``name``'s committer, one a table and session (a batch's ``types`` and
        ``append`` share what the library loaded)."""
        found = self._fast_tables.get(name)
        if found is None or found.spark is not spark:
            known = self._known.setdefault(name, TableMemory())
            kind = IcebergFastTable if self._format(spark) == "iceberg" else DeltaFastTable
            found = self._fast_tables[name] = kind(spark, name, self._state(), known)
        return found

    def _spark_files(self, df: Any, name: str, batch_id: int) -> str:
        """Spark's Parquet files of ``df`` for batch ``batch_id`` of table ``name``, in a
        folder under the checkpoint (kept from an earlier attempt that finished them)."""
        folder = os.path.join(self._state(), "spark-files", safe_name(name), f"batch-{batch_id}")
        if not os.path.exists(os.path.join(folder, "_SUCCESS")):
            df.write.mode("overwrite").format("parquet").partitionBy(DAY).save(folder)
        return folder

    def _marked(self, spark: Any, name: str) -> MarkedTable:
        known = self._known.setdefault(name, TableMemory())
        return MarkedTable(spark, name, self._format(spark), self._state(), known)

    def _state(self) -> str:
        return os.path.join(local_path(self.checkpoint), STATE)


def _stream_rows() -> Any:
    """The rows :func:`write_zeek_tables`' stream stands for (its ``deferredRows``): a row per
    log of each message, holding the message's bytes; one schema for the reader and the writer."""
    return table_input_schema(runs=True, messages=True)


def _reading_first(
    run: Callable[[Iterator[Any]], Iterator[Any]],
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """``run`` (a ``mapInArrow`` function of the stream's rows) over a deferred stream's
    partitions: each task reads its partitions' rows itself, then runs it."""

    def deferred(batches: Iterator[Any]) -> Iterator[Any]:
        return run(read_deferred(batches))

    return deferred


def _setting(spark: Any, key: str) -> str | None:
    """The session's value of ``key`` (its default when unset); None if Spark has none."""
    try:
        value = spark.conf.get(key)
    except Exception:  # a setting this Spark does not define
        return None
    return None if value is None else str(value)


@contextmanager
def _settings(spark: Any, settings: dict[str, str]) -> Iterator[None]:
    """The session with ``settings`` while the block runs, its own values after."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


# --- the query ------------------------------------------------------------------------------------


def write_zeek_tables(
    source: Any,
    checkpoint: str,
    *,
    table: str = "zeek_{path}",
    quarantine: str | None = "zeek_quarantine",
    table_format: str | None = None,
    logs: Sequence[str] | None = None,
    columns: str = "nested",
    zeek_version: str = "9.1",
    parallel: int = 4,
    spark_writer: bool = False,
    trigger: dict[str, Any] | None = None,
    query_name: str | None = None,
) -> Any:
    """Start one query that writes each Zeek log of ``source`` into a table of its own.

    ``source`` is ``spark.readStream.format("broker")`` with the options that
    reach the logs (``relay``, ``peer``, ``listen``, ``zeromq.logs``...), not
    loaded: the query reads ``format=zeek-logs`` (``logs`` keeps some logs only)
    with the columns it needs. ``checkpoint`` is the query's checkpoint folder
    (on a volume, on Databricks); the other arguments are :class:`ZeekTables`'s.
    ``trigger`` is ``writeStream.trigger``'s keywords (``{"availableNow": True}``).
    Returns the running ``StreamingQuery``.
    """
    reader = source.option("format", "zeek-logs").option("zeekVersion", zeek_version)
    # a row per partition, read by the stage job's tasks: the rows cross the JVM once
    reader = reader.option("deferredRows", _stream_rows().json())
    if logs:
        reader = reader.option("logs", ",".join(logs))
    writer = ZeekTables(
        checkpoint=checkpoint,
        table=table,
        quarantine=quarantine,
        table_format=table_format,
        columns=columns,
        zeek_version=zeek_version,
        parallel=parallel,
        spark_writer=spark_writer,
    )
    writer.fresh_in(getattr(source, "_spark", None))
    stream = reader.load().writeStream.foreachBatch(writer)
    stream = stream.option("checkpointLocation", checkpoint)
    if trigger:
        stream = stream.trigger(**trigger)
    if query_name:
        stream = stream.queryName(query_name)
    return stream.start()


#: The generic columns the stream gives (for the docs and the tests).
STREAM_COLUMNS = (*GENERIC_LOG_FIELDS, *OPTIONAL_METADATA)
