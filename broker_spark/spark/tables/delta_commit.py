"""A micro-batch's staged Parquet files committed to a Delta table by delta-rs, once.

Spark's Delta writer caps a Zeek table's rate near Spark's own Parquet writer
(a quarter of the read rate on two cores), so for Delta tables the writer's fast
path keeps the files the tasks wrote (:mod:`~broker_spark.spark.tables.stage`)
and has the driver commit them with ``deltalake`` (delta-rs), a well-kept
implementation of Delta's log, instead of a hand-written one:

* the batch's files are moved into the table's folder (``day=...`` as Spark
  writes them) under names made from the batch, after their list is saved, so a
  batch interrupted between the move and the commit commits the same files on
  its retry;
* one commit per table and batch adds them, each with its statistics from its
  footer (:mod:`.delta_stats`: readers skip files by them), carrying Delta's transaction
  (``txn``: app id = the query's identity, version = the batch id) as Spark's
  ``txnAppId``/``txnVersion`` do, so a batch whose version the table holds
  already commits nothing;
* a table is created partitioned by ``day``, at the protocol delta-rs creates
  (reader 1, writer 2: no deletion vectors, no column mapping), which every Delta
  reader reads; a column the batch brings is added first (older rows read null).

Tables are named as Spark names them: a path table (``delta.`/data/zeek/conn```)
or a catalog table, whose location the catalog gives (one that does not exist
yet is created at its database's folder and registered there). The files are
moved with renames, so the table's folder is a local or mounted disk, as for
the Parquet path.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Sequence
from typing import Any

from broker_spark.spark.tables.batch_files import forget_through, place_batch_files
from broker_spark.spark.tables.delta_stats import INDEXED_COLUMNS, file_stats
from broker_spark.spark.tables.markers import (
    TableMemory,
    ZeekTableError,
    default_location,
    local_path,
)
from broker_spark.spark.tables.stage import DAY, NO_DAY, safe_name

__all__ = ["DeltaFastTable", "delta_available", "is_path_table", "path_of"]

log = logging.getLogger(__name__)

#: A path table as Spark names it: delta.`/data/zeek/conn`.
_PATH_TABLE = re.compile(r"delta\.`(?P<path>[^`]+)`", re.IGNORECASE)

#: The table properties a table is created with: readable by every Delta reader.
CREATE_CONFIGURATION = {"delta.enableDeletionVectors": "false"}


def is_path_table(name: str) -> bool:
    """Whether ``name`` is a Delta path table (``delta.`/data/zeek/conn```), which Spark
    reads from its log each time (no catalog entry to refresh)."""
    return _PATH_TABLE.fullmatch(name) is not None


def path_of(name: str) -> str:
    """The folder of a Delta path table (``delta.`/data/zeek/conn``` -> /data/zeek/conn)."""
    found = _PATH_TABLE.fullmatch(name)
    if found is None:
        raise ZeekTableError(f"{name} is not a Delta path table (delta.`/folder`)")
    return found["path"]


def delta_available() -> bool:
    """Whether ``deltalake`` is installed (``pip install 'broker-spark[delta]'``)."""
    try:
        import deltalake  # noqa: F401  (optional: the [delta] extra)
    except ImportError:
        return False
    return True


class DeltaFastTable:
    """Appends a batch's staged files to one Delta table, once per batch (module doc)."""

    def __init__(self, spark: Any, name: str, state: str, known: TableMemory) -> None:
        self.spark = spark
        self.name = name
        self.state = os.path.join(state, "delta", safe_name(name))
        self.known = known

    def append(
        self,
        app_id: str,
        batch_id: int,
        staged: Sequence[tuple[str, str]],
        schema: Any,
    ) -> bool:
        """Commit the Parquet files under the ``staged`` folders (``(tag, folder)``, each
        holding ``day=...`` folders) as batch ``batch_id`` of ``app_id``, the table's
        columns made ``schema``'s (a Spark StructType, ``day`` last) first; False when
        the table holds the batch already (nothing committed)."""
        from deltalake import CommitProperties, DeltaTable, Transaction  # the [delta] extra

        location = self._location()
        table = self._open(location, schema)
        done = table.transaction_version(app_id)
        plan_file = os.path.join(self.state, f"batch-{batch_id}.json")
        if done is not None and done >= batch_id:
            log.info("batch %d is in Delta table %s already: skipped", batch_id, self.name)
            forget_through(self.state, batch_id)
            return False
        self._add_columns(table, schema)
        files = place_batch_files(plan_file, batch_id, staged, location)
        indexed = int(
            table.metadata().configuration.get(
                "delta.dataSkippingNumIndexedCols", str(INDEXED_COLUMNS)
            )
        )
        actions = [_add_action(location, relative, schema, indexed) for relative in files]
        properties = CommitProperties(app_transactions=[Transaction(app_id, batch_id)])
        table = DeltaTable(location)
        table.create_write_transaction(
            actions,
            mode="append",
            schema=table.schema(),
            partition_by=[DAY],
            commit_properties=properties,
        )
        forget_through(self.state, batch_id)
        return True

    def types(self) -> dict[str, Any]:
        """The table's columns as Spark types, by name (none before the table exists)."""
        from deltalake import DeltaTable  # the [delta] extra
        from pyspark.sql.types import StructType

        location = self._location()
        if not DeltaTable.is_deltatable(location):
            return {}
        schema = StructType.fromJson(json.loads(DeltaTable(location).schema().to_json()))
        return {f.name: f.dataType for f in schema.fields}

    # --- the table ------------------------------------------------------------------------

    def _location(self) -> str:
        if self.known.location is not None:
            return self.known.location
        if is_path_table(self.name):
            location = local_path(path_of(self.name))
        elif self.spark.catalog.tableExists(self.name):
            rows = self.spark.sql(f"DESCRIBE DETAIL {self.name}").collect()
            location = local_path(rows[0]["location"])
        else:
            found = default_location(self.spark, self.name)
            if found is None:
                raise ZeekTableError(
                    f"table {self.name}: no location to create it at; create it first "
                    "(CREATE TABLE ... USING delta LOCATION ...) or name a path table"
                )
            location = found
        self.known.location = location
        return location

    def _open(self, location: str, schema: Any) -> Any:
        """The table at ``location``, created (and registered in the catalog, for a catalog
        table) when there is none."""
        from deltalake import DeltaTable, Schema  # the [delta] extra

        if not DeltaTable.is_deltatable(location):
            os.makedirs(location, exist_ok=True)
            DeltaTable.create(
                location,
                Schema.from_json(schema.json()),
                mode="ignore",
                partition_by=[DAY],
                configuration=CREATE_CONFIGURATION,
            )
            log.info("created Delta table %s at %s", self.name, location)
        if not is_path_table(self.name) and not self.spark.catalog.tableExists(self.name):
            self.spark.sql(
                f"CREATE TABLE IF NOT EXISTS {self.name} USING delta LOCATION '{location}'"
            )
        return DeltaTable(location)

    def _add_columns(self, table: Any, schema: Any) -> None:
        """Add the columns of ``schema`` the table lacks (a new Zeek field)."""
        from deltalake import Schema  # the [delta] extra

        present = {f.name for f in table.schema().fields}
        wanted = Schema.from_json(schema.json()).fields
        new = [f for f in wanted if f.name not in present]
        if new:
            table.alter.add_columns(new)
            log.info("Delta table %s gained %s", self.name, ", ".join(f.name for f in new))


def _add_action(location: str, relative: str, schema: Any, indexed: int) -> Any:
    """Delta's add action of a file in the table (its day from its folder, its stats from
    its footer: :mod:`.delta_stats`)."""
    from deltalake.transaction import AddAction  # the [delta] extra

    path = os.path.join(location, relative)
    info = os.stat(path)
    folder = os.path.dirname(relative)
    day: str | None = None
    if folder.startswith(f"{DAY}="):
        day = folder.split("=", 1)[1]
        day = None if day == NO_DAY else day
    return AddAction(
        relative,
        info.st_size,
        {DAY: day},
        int(info.st_mtime * 1000) or int(time.time() * 1000),
        True,
        json.dumps(file_stats(path, schema, indexed)),
    )
