"""A real Zeek cluster on the ZeroMQ backend logs into two relay nodes; the Databricks guide's
query writes Delta tables by the fast path, and Delta's own Spark reader checks them.

The site of test_zeromq_cluster.py (docs/how-to/zeek-cluster-zeromq.md), one round of
traces; the query is docs/how-to/databricks.md's cell as written, ``table_format="delta"``
kept (the tasks write the Parquet files, delta-rs commits them with the batch's ``txn``),
into catalog tables with a location. The session has Delta's and Iceberg's connectors
(:mod:`lake_fixtures`), so this runs in the ``lake`` step on a PySpark the connectors
support (``.ci/spark-versions``), not in ``make test-live``. The oracle is Zeek's own JSON
logs of the same traces, as there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cluster import Site
from lake_fixtures import lake  # noqa: F401
from test_zeromq_cluster import ROUND_1, check_round, run_the_query
from zeek_procs import Oracle

pytestmark = [pytest.mark.live, pytest.mark.lake, pytest.mark.spark, pytest.mark.timeout(900)]


@pytest.fixture(scope="session")
def spark(lake: Any) -> Any:  # noqa: F811
    return lake


def test_a_zeromq_clusters_logs_become_delta_tables_by_the_fast_path(
    spark: Any, zeromq_site: Site, oracle: Oracle, tmp_path: Path
) -> None:
    db = "live_delta"
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {db} LOCATION '{tmp_path / 'warehouse'}'")
    try:
        zeromq_site.cluster.read(ROUND_1)
        logs = oracle.union(ROUND_1)
        expected = {p: len(lines) for p, lines in logs.items()}
        run_the_query(spark, zeromq_site, db, expected, table_format="delta")
        check_round(spark, db, logs, 1, tmp_path)  # read through Delta's reader
        for path in [*logs, "packet_filter"]:
            detail = spark.sql(f"DESCRIBE DETAIL {db}.{path}").first()
            assert detail["format"] == "delta" and detail["partitionColumns"] == ["day"], path
            history = spark.sql(f"DESCRIBE HISTORY {db}.{path}").collect()
            assert all(h["engineInfo"] and "delta-rs" in h["engineInfo"] for h in history), path
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")
