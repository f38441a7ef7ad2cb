"""Zeek's logs as lakehouse tables: one query, one table per log, exactly once.

What a Zeek user on Spark wants in the end is a table per log (``conn``,
``dns``, ``http``...), typed, partitioned by day, complete and without
duplicates, and still right after Zeek is upgraded or a site's script adds a
field. :func:`write_zeek_tables` builds that from one stream of every log
(``format=zeek-logs``, from relays, peering or Zeek's ZeroMQ backend):

* the stream's rows are Zeek's JSON lines (``_path``, ``log``) with the log's
  columns in force for each record (``log_schema_id``, ``log_schema``: from
  Zeek's LogCreate, or a ZeroMQ batch's header), so each micro-batch is split by
  log and by columns, and each part parsed into the log's typed, nested columns
  (:func:`~broker_spark.spark.zeek_schema.parse_zeek_json`) and written to its
  table, with the row's position (``offset``, ``record``, and ``relay`` when
  read from relays) and a ``day`` column (the day of ``ts`` in the session's
  time zone, ``spark.sql.session.timeZone``) it is partitioned by;
* **columns follow Zeek**: a log whose columns grow (a Zeek upgrade, a local
  ``&log`` field) adds the columns to its table from the first batch that
  carries them, no restart (older rows read null); a column whose type changed
  in a way the table cannot take sends those rows to the quarantine table
  (the raw line, the log, the position and the reason) instead of failing or
  corrupting the table;
* **exactly once** across retried batches and restarts: on Delta, Delta's
  idempotent writes (``txnAppId``/``txnVersion``: a batch already committed to
  a table is skipped); elsewhere (Spark's own tables, parquet), a marker per
  table and batch, written once the batch's files are in the table: the files
  are written to a staging folder under the checkpoint first (complete, or
  written again), then moved into the table under names made from the batch
  (a move that happened is not done twice), so a batch that was interrupted
  anywhere, between two tables or inside one, is finished on its retry and
  never doubled. That needs a file system whose renames are atomic (a local
  or mounted disk, HDFS); on object stores use Delta.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from broker_spark.errors import EC, BrokerError
from broker_spark.spark.zeek_schema import (
    GENERIC_LOG_FIELDS,
    OPTIONAL_METADATA,
    RELAY_METADATA,
    generic_log_schema,
    metadata_names,
    parse_zeek_json,
    zeek_log_schema,
)
from broker_spark.zeek.schema import LogSchema, standard_schema

__all__ = ["ZeekTableError", "ZeekTables", "table_input_schema", "write_zeek_tables"]

log = logging.getLogger(__name__)

#: The position and provenance columns every table row keeps, beside the log's own.
POSITION = ("offset", "record", "relay")
KEPT_METADATA = ("topic", "sender", "received_at", *POSITION)
#: The column a table is partitioned by: the day of the record's ``ts`` (session time zone).
DAY = "day"
#: Folder (under the checkpoint) of the markers and staged files of non-Delta tables.
STATE = "_zeek_tables"

#: Spark settings the writes of a batch run with (the session's own are put back after):
#: each JSON line parsed once (Spark's JSON expression optimizer otherwise gives every
#: column read from ``from_json`` a parse of its own: a conn line parsed 22 times, 3x
#: slower end to end), and a batch's rows written into their day's files as they come
#: instead of sorted by day first (a batch spans a day or two).
WRITE_SETTINGS = {
    "spark.sql.optimizer.enableJsonExpressionOptimization": "false",
    "spark.sql.maxConcurrentOutputFileWriters": "16",
}


class ZeekTableError(BrokerError):
    """A table cannot be written as asked (a name, a location, a format)."""

    code = EC.InvalidData


def table_input_schema() -> Any:
    """What the stream must hold: ``_path``, ``log`` and the metadata, with the columns in
    force for each record (``log_schema_id``, ``log_schema``) and ``relay``."""
    from pyspark.sql.types import StringType, StructField, StructType

    fields = list(generic_log_schema(relay=True).fields)
    fields += [StructField(name, StringType(), True) for name in OPTIONAL_METADATA[1:]]
    return StructType(fields)


def _safe(path: str) -> str:
    """A log path as a table name part (Zeek paths are words; a site's may not be)."""
    return re.sub(r"[^0-9A-Za-z_]", "_", path) or "_"


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
    ``parallel`` tables are written at once (1: one after the other).
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
    #: Called after each table's write of a batch (tests inject faults there).
    after_table: Callable[[str, int], None] | None = None
    _schemas: dict[str, LogSchema] = field(default_factory=dict, repr=False)
    _known: dict[str, _Known] = field(default_factory=dict, repr=False)
    _clashes: set[str] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        if "{path}" not in self.table:
            raise ZeekTableError(f"table {self.table!r} must name the log: put {{path}} in it")
        if not self.app_id:
            self.app_id = "broker-spark-zeek-tables:" + self.checkpoint

    # --- one micro-batch ------------------------------------------------------------------

    def __call__(self, batch: Any, batch_id: int) -> None:
        with _settings(batch.sparkSession, WRITE_SETTINGS):
            self._write_batch(batch, batch_id)

    def _write_batch(self, batch: Any, batch_id: int) -> None:
        # Kept for the batch's writes, each log's rows together: every table's write then
        # skips the cached blocks of the other logs (their _path range) instead of reading them.
        df = batch.sortWithinPartitions("_path", "log_schema_id").persist()
        try:
            by_table: dict[str, dict[str, list[str]]] = {}
            for path, ids in self._learn(df).items():  # two paths may make one name: a_b, a-b
                by_table.setdefault(self.table.format(path=_safe(path)), {})[path] = sorted(ids)
            names = sorted(by_table)
            workers = min(self.parallel, len(names))

            def write(name: str) -> list[Any]:
                return self._write_table(df, name, by_table[name], batch_id)

            if workers > 1:  # each table's Spark jobs are mostly waiting: overlap them
                with ThreadPoolExecutor(workers, thread_name_prefix="zeek-tables") as pool:
                    found = list(pool.map(write, names))
            else:
                found = [write(name) for name in names]
            quarantined = [rows for part in found for rows in part]
            if quarantined:
                if self.quarantine is None:
                    raise ZeekTableError(
                        "rows whose columns clash with their table, and no quarantine: "
                        + "; ".join(sorted(self._clashes))
                    )
                out = quarantined[0]
                for more in quarantined[1:]:
                    out = out.unionByName(more)
                self._commit(df.sparkSession, self.quarantine, out, batch_id)
        finally:
            df.unpersist()

    def _learn(self, df: Any) -> dict[str, list[str]]:
        """The logs of the batch, the schema ids of each, and the columns of every id (each
        partition names each of its ids once, on its first row): one job."""
        from pyspark.sql import functions as F

        rows = (
            df.groupBy("_path", "log_schema_id")
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
        self, df: Any, name: str, logs: dict[str, list[str]], batch_id: int
    ) -> list[Any]:
        """Write the batch's rows of a table's logs (their schema ids: ``logs``) into it, in
        one commit; the rows that cannot go there (for the quarantine)."""
        from pyspark.sql import functions as F

        spark = df.sparkSession
        if self._format(spark) != "delta":
            self._marked(spark, name).attach()
        present = _table_types(spark, name)
        typed: list[Any] = []
        quarantined: list[Any] = []
        for path, sid in ((path, sid) for path, ids in sorted(logs.items()) for sid in ids):
            schema = self._schemas.get(sid) or standard_schema(path, self.zeek_version)
            rows = df.where((F.col("_path") == path) & (F.col("log_schema_id") == sid))
            if schema is None:  # nothing says what its columns are
                quarantined.append(_quarantine(rows, "no schema is known for this log"))
                continue
            columns = zeek_log_schema(schema, self.columns, metadata=False)
            clash = _clash(present, columns)
            if clash:
                self._clashes.add(f"log {path} into {name}: {clash}")
                quarantined.append(_quarantine(rows, clash))
                continue
            # a metadata name the log uses itself (MQTT's topic) gets a leading _, as in a stream
            named = metadata_names(columns.names, optional=(RELAY_METADATA,))
            parsed = rows.select(
                parse_zeek_json(F.col("log"), schema, self.columns).alias("_r"),
                *[F.col(m).alias(named[m]) for m in KEPT_METADATA],
            ).select("_r.*", *[named[m] for m in KEPT_METADATA])
            # the day of the record's time (a log of a site's own may have no ts: its arrival)
            when = F.col("ts") if "ts" in schema.names else F.col("received_at")
            typed.append(parsed.withColumn(DAY, F.to_date(when)))
            present = _merged(present, parsed.schema)
        if typed:
            out = typed[0]
            for more in typed[1:]:
                out = out.unionByName(more, allowMissingColumns=True)
            self._commit(spark, name, out, batch_id)
            if self.after_table is not None:
                self.after_table(name, batch_id)
        return quarantined

    # --- exactly once ---------------------------------------------------------------------

    def _format(self, spark: Any) -> str:
        chosen = self.table_format or spark.conf.get("spark.sql.sources.default", "parquet")
        return str(chosen).lower()

    def _commit(self, spark: Any, name: str, df: Any, batch_id: int) -> None:
        fmt = self._format(spark)
        if fmt == "delta":
            (
                df.write.format("delta")
                .mode("append")
                .option("txnAppId", self.app_id)
                .option("txnVersion", batch_id)
                .option("mergeSchema", "true")
                .partitionBy(DAY)
                .saveAsTable(name)
            )
            return
        self._marked(spark, name).append(df, batch_id)

    def _marked(self, spark: Any, name: str) -> _MarkedTable:
        state = os.path.join(_local(self.checkpoint), STATE)
        known = self._known.setdefault(name, _Known())
        return _MarkedTable(spark, name, self._format(spark), state, known)


@dataclass
class _Known:
    """What a writer remembers of one of its tables between batches (saves a query each)."""

    location: str | None = None
    days: set[str] = field(default_factory=set)


class _MarkedTable:
    """Appends to a table made of files, once per batch (the module's marker protocol)."""

    def __init__(self, spark: Any, name: str, fmt: str, state: str, known: _Known) -> None:
        self.spark = spark
        self.name = name
        self.fmt = fmt
        self.state = os.path.join(state, _safe(name))
        self.known = known

    def append(self, df: Any, batch_id: int) -> None:
        marker = os.path.join(self.state, f"batch-{batch_id}.done")
        staging = os.path.join(self.state, "staging", f"batch-{batch_id}")
        if os.path.exists(marker):
            log.info("batch %d is in table %s already: skipped", batch_id, self.name)
            shutil.rmtree(staging, ignore_errors=True)
            return
        if not os.path.exists(os.path.join(staging, "_SUCCESS")):
            df.write.mode("overwrite").format(self.fmt).partitionBy(DAY).save(staging)
        self._ensure(df.schema)
        location = self._location()
        days: set[str] = set()
        for folder, _dirs, files in os.walk(staging):
            relative = os.path.relpath(folder, staging)
            for file in sorted(files):
                if file.startswith(("_", ".")):
                    continue
                days.add(relative)
                target_dir = os.path.normpath(os.path.join(location, relative))
                target = os.path.join(target_dir, f"b{batch_id:012d}-{file}")
                if os.path.exists(target):
                    continue  # moved before the batch was interrupted
                os.makedirs(target_dir, exist_ok=True)
                os.replace(os.path.join(folder, file), target)
        self._add_partitions(days)
        self.spark.catalog.refreshTable(self.name)
        partial = marker + ".partial"
        with open(partial, "w", encoding="ascii") as f:
            f.write(str(batch_id))
        os.replace(partial, marker)
        shutil.rmtree(staging, ignore_errors=True)
        self._forget_before(batch_id)

    def _add_partitions(self, folders: set[str]) -> None:
        """Tell the catalog about the days the batch brought (``day=2026-11-26``)."""
        new = sorted(folders - self.known.days)
        if not new:
            return
        if all(re.fullmatch(rf"{DAY}=\d{{4}}-\d{{2}}-\d{{2}}", f) for f in new):
            specs = " ".join(f"PARTITION ({DAY}='{f.split('=', 1)[1]}')" for f in new)
            self.spark.sql(f"ALTER TABLE {self.name} ADD IF NOT EXISTS {specs}")
        else:  # a day Spark spells its own way (no day: its default partition)
            self.spark.sql(f"ALTER TABLE {self.name} RECOVER PARTITIONS")
        self.known.days.update(new)

    def _forget_before(self, batch_id: int) -> None:
        """Drop the markers of earlier batches: Spark starts batch N only once N-1 is in its
        commit log, so only the newest batch can run again."""
        for entry in os.listdir(self.state):
            if entry.startswith("batch-") and entry.endswith(".done"):
                number = entry[len("batch-") : -len(".done")]
                if number.isdigit() and int(number) < batch_id:
                    os.remove(os.path.join(self.state, entry))

    def _ensure(self, schema: Any) -> None:
        """The table exists and has every column of ``schema`` (added where new)."""
        spark = self.spark
        if not self.attach():  # a statement, not a job writing nothing
            columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)
            spark.sql(
                f"CREATE TABLE {self.name} ({columns}) USING {self.fmt} PARTITIONED BY ({DAY})"
            )
            return
        present = {f.name for f in spark.table(self.name).schema.fields}
        new = [f for f in schema.fields if f.name not in present]
        if new:
            spec = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in new)
            spark.sql(f"ALTER TABLE {self.name} ADD COLUMNS ({spec})")
            log.info("table %s gained %s", self.name, ", ".join(f.name for f in new))

    def attach(self) -> bool:
        """Whether the table exists, after registering it again over its files when the
        catalog forgot it (a session catalog that lives in memory, after a restart)."""
        spark = self.spark
        if spark.catalog.tableExists(self.name):
            return True
        self.known.location = None
        self.known.days.clear()
        location = self._default_location()
        if location is None or not _holds_files(location):
            return False
        spark.sql(f"CREATE TABLE {self.name} USING {self.fmt} LOCATION '{location}'")
        spark.sql(f"ALTER TABLE {self.name} RECOVER PARTITIONS")
        return True

    def _default_location(self) -> str | None:
        """Where Spark keeps a managed table of this name: its database's folder."""
        parts = self.name.split(".")
        if len(parts) > 2:
            return None  # a catalog's table (Unity Catalog): its catalog keeps it
        database = parts[0] if len(parts) == 2 else self.spark.catalog.currentDatabase()
        try:
            folder = self.spark.catalog.getDatabase(database).locationUri
        except Exception:  # no such database: nothing to attach
            return None
        return os.path.join(_local(folder), parts[-1])

    def _location(self) -> str:
        if self.known.location is not None:
            return self.known.location
        rows = self.spark.sql(f"DESCRIBE TABLE EXTENDED {self.name}").collect()
        for row in rows:
            if row[0] == "Location":
                self.known.location = _local(row[1])
                return self.known.location
        raise ZeekTableError(f"table {self.name} has no location (not a table of files?)")


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


def _holds_files(folder: str) -> bool:
    for _root, _dirs, files in os.walk(folder):
        if any(not f.startswith(("_", ".")) for f in files):
            return True
    return False


def _local(location: str) -> str:
    """A location as a local path; ZeekTableError for one only a file system client reaches."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return parsed.path if parsed.scheme else location
    raise ZeekTableError(
        f"{location}: tables of files are written exactly once through atomic renames on a "
        "local or mounted file system; for object stores use table_format='delta'"
    )


# --- columns and clashes -------------------------------------------------------------------------


def _table_types(spark: Any, name: str) -> dict[str, Any]:
    if not spark.catalog.tableExists(name):
        return {}
    return {f.name: f.dataType for f in spark.table(name).schema.fields}


def _clash(present: dict[str, Any], log_columns: Any) -> str:
    """Why the log's columns cannot go into a table of ``present`` columns ("" if they can)."""
    for f in log_columns.fields:
        old = present.get(f.name)
        if old is not None and not _fits(old, f.dataType):
            return (
                f"column {f.name} is {f.dataType.simpleString()} in the log and "
                f"{old.simpleString()} in the table"
            )
    return ""


def _fits(table: Any, log_type: Any) -> bool:
    """Whether values of ``log_type`` go into a column of ``table`` type: the same, or a struct
    that gained fields (Zeek records grow)."""
    from pyspark.sql.types import StructType

    if isinstance(table, StructType) and isinstance(log_type, StructType):
        mine = {f.name: f.dataType for f in table.fields}
        return all(f.name not in mine or _fits(mine[f.name], f.dataType) for f in log_type.fields)
    return table == log_type


def _merged(present: dict[str, Any], schema: Any) -> dict[str, Any]:
    out = dict(present)
    for f in schema.fields:
        out.setdefault(f.name, f.dataType)
    return out


def _quarantine(rows: Any, reason: str) -> Any:
    from pyspark.sql import functions as F

    return rows.select(
        F.col("_path").alias("log"),
        F.col("log").alias("line"),
        *POSITION,
        "received_at",
        F.lit(reason).alias("reason"),
        F.to_date(F.col("received_at")).alias(DAY),
    )


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
    reader = reader.schema(table_input_schema())
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
    )
    stream = reader.load().writeStream.foreachBatch(writer)
    stream = stream.option("checkpointLocation", checkpoint)
    if trigger:
        stream = stream.trigger(**trigger)
    if query_name:
        stream = stream.queryName(query_name)
    return stream.start()


#: The generic columns the stream gives (for the docs and the tests).
STREAM_COLUMNS = (*GENERIC_LOG_FIELDS, *OPTIONAL_METADATA)
