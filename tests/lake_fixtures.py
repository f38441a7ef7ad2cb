"""A local SparkSession with the real Delta and Iceberg connectors, for the ``lake`` tests.

The connectors' jars are fetched from Maven Central by ``.ci/fetch-jars`` (mvn, cached
in ~/.cache/broker-spark/jars) for the running PySpark's version and given to Spark as
jars (``spark.jars``). Delta is the session catalog's (``DeltaCatalog``); Iceberg is the
catalog ``lake``, a JDBC catalog over a SQLite file that pyiceberg's SQL catalog reads
and writes too (the same tables: the Iceberg fast path commits there). A run needs its
own pytest process (one SparkContext a process): ``pytest -m lake``.
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
    in ``folder``)."""
    prefix = f"spark.sql.catalog.{ICEBERG}"
    return {
        "spark.jars": ",".join(connector_jars()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension,"
        "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # a Delta log replayed in 2 tasks, not 50 (a test's tables hold a few commits)
        "spark.databricks.delta.snapshotPartitions": "2",
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "jdbc",
        # WAL: Spark's connections and pyiceberg's read and write the file side by side
        f"{prefix}.uri": f"jdbc:sqlite:{folder}/iceberg-catalog.db?journal_mode=WAL",
        f"{prefix}.warehouse": f"file:{folder}/iceberg",
        f"{prefix}.jdbc.schema-version": "V1",
    }


@pytest.fixture(scope="session")
def lake() -> Iterator[Any]:
    """The shared session, started with the connectors (``spark`` is the same session)."""
    if spark_fixtures._session is not None:
        pytest.fail("a session without the connectors runs already: run pytest -m lake alone")
    folder = tempfile.mkdtemp(prefix="broker-spark-lake-")
    try:
        session = spark_fixtures._session = spark_fixtures._start_session(conf=lake_conf(folder))
        # Spark's JDBC catalog makes the SQLite file (in WAL mode) before pyiceberg opens it:
        # the other way round, Spark's connections do not see pyiceberg's commits
        session.sql(f"SHOW NAMESPACES IN {ICEBERG}").collect()
        yield session
    finally:
        if spark_fixtures._session is not None:
            spark_fixtures._session.stop()
            spark_fixtures._session = None
        if spark_fixtures._warehouse is not None:
            shutil.rmtree(spark_fixtures._warehouse, ignore_errors=True)
            spark_fixtures._warehouse = None
        shutil.rmtree(folder, ignore_errors=True)
