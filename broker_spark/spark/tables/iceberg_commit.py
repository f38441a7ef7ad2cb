"""A micro-batch's staged Parquet files added to an Iceberg table by pyiceberg, once.

The Iceberg side of the writer's fast path (as :mod:`.delta_commit` is Delta's):
the driver moves the files the tasks wrote into the table's ``data/day=...``
folders (:mod:`.batch_files`) and appends them in one snapshot per table and batch,
through ``pyiceberg``, into the catalog Spark is configured with
(``spark.sql.catalog.<name>.*``, read from the session: JDBC, REST, Hive, Glue).

* **Once**: the snapshot's summary holds the query's identity and the batch id
  (``broker-spark.app-id``, ``broker-spark.batch-id``), as Spark's own Iceberg
  streaming sink keeps its query id and epoch there; a batch the table's history
  holds already commits nothing.
* **Columns follow Zeek**: a table is created (format 2, partitioned by ``day``
  by identity) from the files' columns; a column a batch brings is added first.
  The files carry no Iceberg field ids, so the table's name mapping
  (``schema.name-mapping.default``) is kept current: Iceberg readers map the files'
  columns by name, as for files ``add_files`` imports. ``day`` is not in the files:
  readers take an identity partition's value from the file's partition.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from broker_spark.spark.tables.batch_files import forget_through, place_batch_files
from broker_spark.spark.tables.markers import TableMemory, ZeekTableError, local_path
from broker_spark.spark.tables.stage import DAY, NO_DAY, safe_name

__all__ = ["APP_ID", "BATCH_ID", "IcebergFastTable", "catalog_properties", "iceberg_available"]

log = logging.getLogger(__name__)

#: The snapshot summary's keys of the writer's identity and the batch it committed.
APP_ID = "broker-spark.app-id"
BATCH_ID = "broker-spark.batch-id"
_EPOCH = dt.date(1970, 1, 1)
_NAME_MAPPING = "schema.name-mapping.default"
#: The catalogs loaded in this driver, by name and properties (see _catalog).
_CATALOGS: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
#: The Spark application's settings, by its id: read once (a few hundred py4j calls).
_APP_SETTINGS: dict[str, dict[str, str]] = {}
#: Held around each catalog call of this driver's writers: a writer commits its tables from
#: threads, and a catalog over SQLite takes one writer at a time ("database is locked").
_LOCK = threading.RLock()


def iceberg_available() -> bool:
    """Whether ``pyiceberg`` is installed (``pip install 'broker-spark[iceberg]'``)."""
    try:
        import pyiceberg  # noqa: F401  (optional: the [iceberg] extra)
    except ImportError:
        return False
    return True


def catalog_properties(settings: dict[str, str], name: str) -> dict[str, str]:
    """pyiceberg's properties of the catalog Spark configures as ``name`` (``settings``:
    the session's, ``spark.sql.catalog.<name>.*``)."""
    prefix = f"spark.sql.catalog.{name}."
    spark = {k[len(prefix) :]: v for k, v in settings.items() if k.startswith(prefix)}
    if not spark:
        raise ZeekTableError(f"no Iceberg catalog {name!r}: set spark.sql.catalog.{name}.*")
    kind = spark.get("type", "").lower()
    impl = spark.get("catalog-impl", "")
    out = {k: v for k, v in spark.items() if k not in ("type", "catalog-impl")}
    if (
        "warehouse" in out
        and out["warehouse"].startswith("file:")
        and "://" not in out["warehouse"]
    ):
        out["warehouse"] = "file://" + out["warehouse"][len("file:") :]
    if kind == "jdbc" or impl.endswith("JdbcCatalog"):
        out["type"] = "sql"
        out["uri"] = _sql_uri(spark.get("uri", ""), spark)
    elif kind in ("rest", "hive", "glue"):
        out["type"] = kind
    elif impl.endswith("GlueCatalog"):
        out["type"] = "glue"
    elif impl.endswith("RESTCatalog"):
        out["type"] = "rest"
    else:
        raise ZeekTableError(f"Iceberg catalog {name!r}: type {kind or impl!r} is not known")
    return out


def _sql_uri(jdbc: str, spark: dict[str, str]) -> str:
    """SQLAlchemy's URL of a JDBC catalog's database (SQLite, PostgreSQL, MySQL)."""
    if jdbc.startswith("jdbc:sqlite:"):  # sqlite-jdbc's settings (?journal_mode=WAL) stay
        return "sqlite:///" + jdbc[len("jdbc:sqlite:") :].split("?", 1)[0]  # in the file
    for driver, dialect in (("postgresql", "postgresql+psycopg2"), ("mysql", "mysql+pymysql")):
        if jdbc.startswith(f"jdbc:{driver}://"):
            user = spark.get("jdbc.user", "")
            password = spark.get("jdbc.password", "")
            who = f"{user}:{password}@" if user else ""
            return f"{dialect}://{who}{jdbc[len(f'jdbc:{driver}://') :]}"
    raise ZeekTableError(f"JDBC catalog database {jdbc!r}: SQLite, PostgreSQL or MySQL")


class IcebergFastTable:
    """Appends a batch's staged files to one Iceberg table, once per batch (module doc)."""

    def __init__(self, spark: Any, name: str, state: str, known: TableMemory) -> None:
        parts = name.split(".")
        if len(parts) != 3:
            raise ZeekTableError(f"Iceberg table {name!r}: name it catalog.namespace.table")
        self.spark = spark
        self.name = name
        self.catalog_name, self.namespace, self.table_name = parts
        self.state = os.path.join(state, "iceberg", safe_name(name))
        self.known = known
        #: The table as :meth:`types` loaded it for the batch :meth:`append` then commits.
        self._loaded: Any = None

    def _catalog(self) -> Any:
        """The catalog, loaded once per its properties: a writer's tables are committed by
        threads at once, and a SQL catalog makes its own tables when loaded."""
        from pyiceberg.catalog import load_catalog  # the [iceberg] extra

        context = self.spark.sparkContext
        app = context.applicationId
        if app not in _APP_SETTINGS:
            _APP_SETTINGS[app] = dict(context.getConf().getAll())
        settings = dict(_APP_SETTINGS[app])
        for key in ("type", "catalog-impl", "uri", "warehouse"):  # the session's own, if set
            full = f"spark.sql.catalog.{self.catalog_name}.{key}"
            value = self.spark.conf.get(full, None)
            if value is not None:
                settings[full] = value
        properties = catalog_properties(settings, self.catalog_name)
        key = (self.catalog_name, tuple(sorted(properties.items())))
        with _LOCK:
            if key not in _CATALOGS:
                _CATALOGS[key] = load_catalog(self.catalog_name, **properties)
            return _CATALOGS[key]

    def _table(self) -> Any:
        """The table, None before it exists."""
        from pyiceberg.exceptions import NoSuchTableError  # the [iceberg] extra

        try:
            with _LOCK:
                return self._catalog().load_table((self.namespace, self.table_name))
        except NoSuchTableError:
            return None

    def types(self) -> dict[str, Any]:
        """The table's columns as Spark types, by name (none before the table exists); the
        table loaded here is the one the batch's :meth:`append` commits to."""
        table = self._loaded = self._table()
        if table is None:
            return {}
        return {f.name: f.dataType for f in self.spark.table(self.name).schema.fields}

    def append(
        self, app_id: str, batch_id: int, staged: Sequence[tuple[str, str]], schema: Any
    ) -> bool:
        """Add the Parquet files under the ``staged`` folders as batch ``batch_id`` of
        ``app_id``; False when the table holds the batch already (nothing committed).
        ``schema`` (Spark's) is not needed: the files say their columns."""
        from pyiceberg.io.pyarrow import (  # the [iceberg] extra
            compute_statistics_plan,
            data_file_statistics_from_parquet_metadata,
            parquet_path_to_id_mapping,
        )
        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
        from pyiceberg.typedef import Record

        plan_file = os.path.join(self.state, f"batch-{batch_id}.json")
        table = self._loaded if self._loaded is not None else self._table()
        self._loaded = None  # the next batch loads it again (others may commit between)
        if table is not None and _committed(table, app_id) >= batch_id:
            log.info("batch %d is in Iceberg table %s already: skipped", batch_id, self.name)
            forget_through(self.state, batch_id)
            return False
        columns = _columns([f for _tag, root in staged for f in _files(root)])
        with _LOCK:
            table = self._shaped(table, columns)
        location = table.location()
        data = local_path(location.rstrip("/") + "/data")
        files = place_batch_files(plan_file, batch_id, staged, data)
        metadata = table.metadata
        stats_plan = compute_statistics_plan(table.schema(), metadata.properties)
        mapping = parquet_path_to_id_mapping(table.schema())
        mapping_text = table.schema().name_mapping.model_dump_json()
        with _LOCK, table.transaction() as tx:
            if metadata.properties.get(_NAME_MAPPING) != mapping_text:
                tx.set_properties({_NAME_MAPPING: mapping_text})
            summary = {APP_ID: app_id, BATCH_ID: str(batch_id)}
            with tx.update_snapshot(snapshot_properties=summary).fast_append() as adding:
                for relative in files:
                    path = os.path.join(data, relative)
                    footer = pq.read_metadata(path)
                    stats = data_file_statistics_from_parquet_metadata(footer, stats_plan, mapping)
                    adding.append_data_file(
                        DataFile.from_args(
                            content=DataFileContent.DATA,
                            file_path=_uri(location, "data/" + relative),
                            file_format=FileFormat.PARQUET,
                            partition=Record(_day(relative)),
                            file_size_in_bytes=os.path.getsize(path),
                            sort_order_id=None,
                            spec_id=metadata.default_spec_id,
                            equality_ids=None,
                            key_metadata=None,
                            **stats.to_serialized_dict(),
                        )
                    )
        forget_through(self.state, batch_id)
        return True

    def _shaped(self, table: Any, columns: pa.Schema) -> Any:
        """The table with every column of ``columns`` (created, by day, if need be)."""
        if table is None:
            catalog = self._catalog()
            catalog.create_namespace_if_not_exists(self.namespace)
            with_day = columns.append(pa.field(DAY, pa.date32()))
            table = catalog.create_table_if_not_exists(
                (self.namespace, self.table_name),
                schema=with_day,
                properties={"format-version": "2"},
            )
            if not table.spec().fields:
                with table.update_spec() as spec:
                    spec.add_identity(DAY)
            log.info("created Iceberg table %s at %s", self.name, table.location())
            return table
        present = set(table.schema().column_names)
        if any(f.name not in present for f in columns):
            with table.update_schema() as update:
                update.union_by_name(columns)
            log.info("Iceberg table %s gained columns", self.name)
        return table


def _committed(table: Any, app_id: str) -> int:
    """The newest batch of ``app_id`` in the table's history (-1: none): the current
    snapshot's ancestors, newest first, until one of ``app_id``'s."""
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    snapshot = table.current_snapshot()
    while snapshot is not None:
        summary = snapshot.summary
        if summary is not None and summary.get(APP_ID) == app_id:
            return int(summary.get(BATCH_ID, -1))
        parent = snapshot.parent_snapshot_id
        snapshot = by_id.get(parent) if parent is not None else None
    return -1


def _files(root: str) -> list[str]:
    found = []
    for folder, _dirs, files in os.walk(root):
        found += [os.path.join(folder, f) for f in files if not f.startswith(("_", "."))]
    return found


def _columns(files: list[str]) -> pa.Schema:
    """The columns of the batch's files, all of them (groups of a log may differ)."""
    schemas = [pq.read_schema(f) for f in files]
    if not schemas:
        raise ZeekTableError("a batch without files to add")
    return pa.unify_schemas([s.remove_metadata() for s in schemas])


def _day(relative: str) -> int | None:
    """The day partition of a file (``day=2026-11-28/...``) as Iceberg keeps a date."""
    folder = relative.split("/", 1)[0]
    if not folder.startswith(f"{DAY}=") or folder == f"{DAY}={NO_DAY}":
        return None
    return (dt.date.fromisoformat(folder.split("=", 1)[1]) - _EPOCH).days


def _uri(location: str, relative: str) -> str:
    """A file's address as the table's location spells addresses."""
    parsed = urlparse(location)
    return (
        location.rstrip("/") + "/" + relative if parsed.scheme else os.path.join(location, relative)
    )
