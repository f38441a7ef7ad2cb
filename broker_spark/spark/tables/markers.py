"""A table of files that a micro-batch is appended to exactly once: the marker protocol.

For tables that are not Delta (Spark's own Parquet tables), each batch's files
are written to a staging folder under the checkpoint first (complete, or
written again), then moved into the table under names made from the batch (a
move that happened is not done twice), the days they hold registered with the
catalog, and a marker written per table and batch: a batch that was
interrupted anywhere, between two tables or inside one, is finished on its
retry and never doubled. That needs a file system whose renames are atomic (a
local or mounted disk, HDFS); on object stores use Delta.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from broker_spark.errors import EC, BrokerError
from broker_spark.spark.tables.stage import DAY, safe_name

__all__ = ["MarkedTable", "TableMemory", "ZeekTableError", "default_location", "local_path"]

log = logging.getLogger(__name__)


class ZeekTableError(BrokerError):
    """A table cannot be written as asked (a name, a location, a format)."""

    code = EC.InvalidData


@dataclass
class TableMemory:
    """What a writer remembers of one of its tables between batches (saves a query each)."""

    location: str | None = None
    days: set[str] = field(default_factory=set)


class MarkedTable:
    """Appends to a table made of files, once per batch (the module's marker protocol)."""

    def __init__(self, spark: Any, name: str, fmt: str, state: str, known: TableMemory) -> None:
        self.spark = spark
        self.name = name
        self.fmt = fmt
        self.state = os.path.join(state, safe_name(name))
        self.known = known

    def append(
        self,
        df: Any,
        batch_id: int,
        *,
        staged: Sequence[tuple[str, str]] = (),
        schema: Any = None,
    ) -> None:
        """Append batch ``batch_id`` once: ``df``'s rows (written by Spark, None: none) and
        the Parquet files of ``staged`` folders (``(tag, folder)``, each holding
        ``day=...`` folders: the stage job's), the table's columns made ``schema``'s
        (``df``'s if None) first."""
        marker = os.path.join(self.state, f"batch-{batch_id}.done")
        staging = os.path.join(self.state, "staging", f"batch-{batch_id}")
        if os.path.exists(marker):
            log.info("batch %d is in table %s already: skipped", batch_id, self.name)
            shutil.rmtree(staging, ignore_errors=True)
            return
        if df is not None and not os.path.exists(os.path.join(staging, "_SUCCESS")):
            df.write.mode("overwrite").format(self.fmt).partitionBy(DAY).save(staging)
        self._ensure(schema if schema is not None else df.schema)
        location = self._location()
        days: set[str] = set()
        roots = [("", staging)] if df is not None else []
        for tag, root in [*roots, *staged]:
            prefix = f"b{batch_id:012d}-{tag}-" if tag else f"b{batch_id:012d}-"
            days |= _move_files(root, location, prefix)
        self._add_partitions(days)
        os.makedirs(self.state, exist_ok=True)
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
        location = default_location(spark, self.name)
        if location is None or not _holds_files(location):
            return False
        spark.sql(f"CREATE TABLE {self.name} USING {self.fmt} LOCATION '{location}'")
        spark.sql(f"ALTER TABLE {self.name} RECOVER PARTITIONS")
        return True

    def _location(self) -> str:
        if self.known.location is not None:
            return self.known.location
        rows = self.spark.sql(f"DESCRIBE TABLE EXTENDED {self.name}").collect()
        for row in rows:
            if row[0] == "Location":
                self.known.location = local_path(row[1])
                return self.known.location
        raise ZeekTableError(f"table {self.name} has no location (not a table of files?)")


def default_location(spark: Any, name: str) -> str | None:
    """Where Spark keeps a managed table named ``name``: its database's folder (None: a
    catalog's table, whose catalog keeps it, or no such database)."""
    parts = name.split(".")
    if len(parts) > 2:
        return None  # a catalog's table (Unity Catalog): its catalog keeps it
    database = parts[0] if len(parts) == 2 else spark.catalog.currentDatabase()
    try:
        folder = spark.catalog.getDatabase(database).locationUri
    except Exception:  # no such database: nothing to attach
        return None
    return os.path.join(local_path(folder), parts[-1])


def _move_files(root: str, location: str, prefix: str) -> set[str]:
    """Move the data files under ``root`` into the same folders under ``location``, each
    named ``prefix`` + its name (a file moved before an interruption is not moved again);
    the folders (days) they are in, those emptied by an earlier attempt included."""
    days: set[str] = set()
    for folder, _dirs, files in os.walk(root):
        relative = os.path.relpath(folder, root)
        if relative.startswith(f"{DAY}="):
            days.add(relative)
        for file in sorted(files):
            if file.startswith(("_", ".")):
                continue
            days.add(relative)
            target_dir = os.path.normpath(os.path.join(location, relative))
            target = os.path.join(target_dir, prefix + file)
            if os.path.exists(target):
                continue  # moved before the batch was interrupted
            os.makedirs(target_dir, exist_ok=True)
            os.replace(os.path.join(folder, file), target)
    return days


def _holds_files(folder: str) -> bool:
    for _root, _dirs, files in os.walk(folder):
        if any(not f.startswith(("_", ".")) for f in files):
            return True
    return False


def local_path(location: str) -> str:
    """A location as a local path; ZeekTableError for one only a file system client reaches."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return parsed.path if parsed.scheme else location
    raise ZeekTableError(
        f"{location}: tables of files are written exactly once through atomic renames on a "
        "local or mounted file system; for object stores use table_format='delta'"
    )
