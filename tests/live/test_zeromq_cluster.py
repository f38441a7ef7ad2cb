"""A real Zeek cluster on the ZeroMQ backend logs into two relay nodes; Spark makes the tables.

The site of docs/how-to/zeek-cluster-zeromq.md and docs/how-to/databricks.md, on loopback: Zeek's manager (it runs
the cluster's XPUB/XSUB proxy), a proxy and two workers, started from the doc's cluster
layout; its two loggers are ``broker-spark node --zeromq-logs ... --spool ... --relay``
processes started from the doc's command, with mutual TLS for readers and CURVE as
zeekctl configures it for Zeek. Each worker reads a trace. One query, the doc's
``write_zeek_tables`` cell, reads both relays into a table per log.

The oracle is Zeek itself: the same traces read by a standalone Zeek writing JSON logs
(``-D`` on both sides, so the uids agree). Every table must hold exactly those records,
typed. Between two rounds of traces, logger 1's relay is stopped and started again
(``systemctl restart``): the second round's tables hold both rounds, nothing lost and
nothing twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import spark_fixtures
from cluster import Site
from doc_snippets import replace_all, snippet
from pcaps import TRACES
from spark_fixtures import wait_for
from tables_check import assert_table_is_zeeks, tables_of, wait_for_tables
from zeek_procs import Oracle

spark = spark_fixtures.spark

pytestmark = [pytest.mark.live, pytest.mark.spark, pytest.mark.timeout(900)]

ROUND_1 = (TRACES / "bro.org.pcap", TRACES / "smtp.pcap")
ROUND_2 = (TRACES / "wikipedia.pcap", TRACES / "ecdhe.pcap")


def tables_query(spark: Any, site: Site, db: str, table_format: str = "parquet") -> Any:
    """docs/how-to/databricks.md's query cell, run as written but for where things are here: the
    relays, the reader's certificate, the checkpoint, the database, and the tables' format
    (``parquet`` here, whose PySpark has no Delta connector; ``delta`` in
    test_zeromq_delta.py, with the connector) by the fast path (no Unity Catalog here)."""
    certs = site.certs
    code = replace_all(
        snippet("how-to/databricks.md", "tables-query"),
        {
            "logger1.example.net:9998,logger2.example.net:9998": ",".join(
                r.relay for r in site.relays
            ),
            "/local_disk0/broker-tls/reader.pem": str(certs / "reader.pem"),
            "/local_disk0/broker-tls/reader.key": str(certs / "reader.key"),
            "/local_disk0/broker-tls/ca.pem": str(certs / "ca.pem"),
            "/Volumes/main/zeek/state/checkpoints/tables": str(site.folder / "checkpoint"),
            '"main.zeek.{path}"': f'"{db}.{{path}}"',
            '"main.zeek.quarantine"': f'"{db}.quarantine"',
            'table_format="delta"': f'table_format="{table_format}"',
            "spark_writer=True,  # Unity Catalog managed tables: Spark's Delta writer": "",
        },
    )
    scope: dict[str, Any] = {"spark": spark}
    exec(compile(code, "docs/how-to/databricks.md#tables-query", "exec"), scope)
    return scope["query"]


def managers_own_logs(spark: Any, db: str) -> bool:
    """The manager's cluster log reached the tables: with ``manager_is_logger = F`` (the
    doc's layout) the manager PUSHes its own logs to the relays too."""
    if "cluster" not in tables_of(spark, db):
        return False
    spark.catalog.refreshTable(f"{db}.cluster")
    return spark.table(f"{db}.cluster").where("node = 'manager'").count() > 0


def run_the_query(
    spark: Any, site: Site, db: str, expected: dict[str, int], table_format: str = "parquet"
) -> None:
    query = tables_query(spark, site, db, table_format)
    try:
        wait_for_tables(spark, db, expected)
        wait_for(lambda: managers_own_logs(spark, db), 60, "the manager's own cluster log")
        assert query.exception() is None
    finally:
        query.stop()


def check_round(spark: Any, db: str, logs: dict[str, list[str]], workers: int, tmp: Path) -> None:
    """Each log's table holds Zeek's records of every round so far; nothing else came."""
    for path, lines in sorted(logs.items()):
        assert_table_is_zeeks(spark, f"{db}.{path}", path, lines, tmp)
    # what each node says of itself: one packet filter per worker run
    spark.catalog.refreshTable(f"{db}.packet_filter")
    filters = spark.table(f"{db}.packet_filter").select("node").collect()
    assert sorted(r.node for r in filters) == sorted(["worker-1", "worker-2"] * workers)
    made = tables_of(spark, db)
    assert made - set(logs) <= {"packet_filter", "cluster", "reporter"}, made
    assert "quarantine" not in made


def test_a_zeromq_cluster_logs_into_two_relays_and_one_query_makes_the_tables(
    spark: Any, zeromq_site: Site, oracle: Oracle, tmp_path: Path
) -> None:
    db = "live_zmq"
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {db} LOCATION '{tmp_path / 'warehouse'}'")
    try:
        site = zeromq_site
        site.cluster.read(ROUND_1)
        logs = oracle.union(ROUND_1)
        run_the_query(spark, site, db, {p: len(lines) for p, lines in logs.items()})
        check_round(spark, db, logs, 1, tmp_path)
        per_relay = spark.table(f"{db}.conn").groupBy("relay").count().collect()
        assert len(per_relay) == 2, "both loggers had a share of the conn log"

        # logger 1 restarts between the rounds, on its spool
        site.relays[0].stop()
        site.relays[0].start()
        site.cluster.read(ROUND_2)
        logs = oracle.union(ROUND_1 + ROUND_2)
        run_the_query(spark, site, db, {p: len(lines) for p, lines in logs.items()})
        check_round(spark, db, logs, 2, tmp_path)
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")
