"""A local SparkSession with the real Delta and Iceberg connectors, for the ``lake`` tests.

The connectors' jars are fetched from Maven Central by ``.ci/fetch-jars`` (mvn, cached
in ~/.cache/broker-spark/jars) for the running PySpark's version and given to Spark as
jars (``spark.jars``). Delta is the session catalog's (``DeltaCatalog``); Iceberg is the
catalog ``lake``, a JDBC catalog over a SQLite file that pyiceberg's SQL catalog reads
and writes too (the same tables: the Iceberg fast path commits there). A run needs its
own pytest process (one SparkContext a process): ``pytest -m lake``.

pyiceberg makes the catalog's tables, and Spark's JDBC catalog is told not to
(``jdbc.init-catalog-tables=false``): Iceberg's check for them (1.10, 1.11) leaves a
result set open on the pooled SQLite connection, whose read transaction then keeps
that connection on the file as it was (no table created after it is ever seen; outside
WAL mode, pyiceberg's commits wait for "database is locked"). Server databases (and
REST, Hive, Glue catalogs) are not affected.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest
import spark_fixtures

ROOT = Path(__file__).resolve().parent.parent

#: The Iceberg catalog of the tests, as Spark names it.
ICEBERG = "lake"


def connector_jars() -> list[str]:
    """The connectors' jars for this PySpark (fetched once); fails, never skips, when they
    cannot be fetched."""
    version = ".".join(pyspark.__version__.split(".")[:2])
    done = subprocess.run(
        [str(ROOT / ".ci" / "fetch-jars"), version], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"the Delta and Iceberg connectors for Spark {version}: {done.stderr}")
    jars = sorted(glob.glob(os.path.join(done.stdout.strip(), "*.jar")))
    assert jars, done.stdout
    return jars


def lake_conf(folder: str) -> dict[str, str]:
    """Spark's settings for Delta (session catalog) and Iceberg (``lake``, JDBC over SQLite
    in ``folder``, its tables made here by pyiceberg)."""
    from pyiceberg.catalog.sql import SqlCatalog

    prefix = f"spark.sql.catalog.{ICEBERG}"
    SqlCatalog(ICEBERG, uri=f"sqlite:///{folder}/iceberg-catalog.db").engine.dispose()
    return {
        "spark.jars": ",".join(connector_jars()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension,"
        "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # a Delta log replayed in 2 tasks, not 50 (a test's tables hold a few commits)
        "spark.databricks.delta.snapshotPartitions": "2",
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "jdbc",
        f"{prefix}.uri": f"jdbc:sqlite:{folder}/iceberg-catalog.db",
        f"{prefix}.warehouse": f"file:{folder}/iceberg",
        f"{prefix}.jdbc.init-catalog-tables": "false",  # pyiceberg made them (see above)
    }


#: The running lake session and its catalog's folder: test modules import the fixture, and
#: pytest makes a session fixture of each module's import; the first makes the session.
_LAKE: tuple[Any, str] | None = None


@pytest.fixture(scope="session")
def lake() -> Iterator[Any]:
    """The shared session, started with the connectors (``spark`` is the same session)."""
    global _LAKE
    if _LAKE is not None:  # another module's import of this fixture made it
        yield _LAKE[0]
        return
    if spark_fixtures._session is not None:
        pytest.fail("a session without the connectors runs already: run pytest -m lake alone")
    folder = tempfile.mkdtemp(prefix="broker-spark-lake-")
    try:
        session = spark_fixtures._session = spark_fixtures._start_session(conf=lake_conf(folder))
        _LAKE = (session, folder)
        yield session
    finally:
        _LAKE = None
        if spark_fixtures._session is not None:
            spark_fixtures._session.stop()
            spark_fixtures._session = None
        if spark_fixtures._warehouse is not None:
            shutil.rmtree(spark_fixtures._warehouse, ignore_errors=True)
            spark_fixtures._warehouse = None
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def lake_folder(lake: Any) -> str:
    """The folder of the session's Iceberg catalog ``lake`` (its SQLite file, warehouse): a
    driver process a test starts uses it too (``lake_conf(lake_folder)``)."""
    assert _LAKE is not None and _LAKE[0] is lake
    return _LAKE[1]
