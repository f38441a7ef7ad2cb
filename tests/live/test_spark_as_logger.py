"""A Spark query as a real Zeek cluster's one logger (``zeromq.logs``), with CURVE.

The smallest ZeroMQ deployment of docs/zeek.md section 6: the cluster layout's one
``LOGGER`` entry is the Spark driver's PULL socket, and the query reads the conn log
with its typed columns. What it reads must be exactly the conn log a standalone Zeek
writes for the same traces.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest
import spark_fixtures
from cluster import CurveKeys, ZeekCluster
from pcaps import TRACES
from ports import free_port
from spark_fixtures import wait_for
from tables_check import NOT_LOGGED
from zeek_procs import Oracle

from broker_spark.spark.zeek_schema import read_zeek_json

spark = spark_fixtures.spark

pytestmark = [pytest.mark.live, pytest.mark.spark, pytest.mark.timeout(300)]

TRACES_READ = (TRACES / "bro.org.pcap", TRACES / "long-connection.pcap")


def layout(logger: int) -> str:
    return (
        "redef Cluster::manager_is_logger = F;\n"
        "redef Cluster::nodes = {\n"
        '\t["manager"]  = [$node_type=Cluster::MANAGER, $ip=127.0.0.1],\n'
        f'\t["logger-1"] = [$node_type=Cluster::LOGGER,  $ip=127.0.0.1, $p={logger}/tcp],\n'
        '\t["worker-1"] = [$node_type=Cluster::WORKER,  $ip=127.0.0.1, $manager="manager"],\n'
        '\t["worker-2"] = [$node_type=Cluster::WORKER,  $ip=127.0.0.1, $manager="manager"],\n'
        "};\n"
    )


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_a_spark_query_is_the_clusters_logger(
    spark: Any, zeek: Path, oracle: Oracle, tmp_path: Path
) -> None:
    keys = CurveKeys.new()
    port = free_port()
    conn = (
        spark.readStream.format("broker")
        .option("format", "zeek-logs")
        .option("logs", "conn")
        .option("zeromq.logs", f"tcp://127.0.0.1:{port}")
        .option("zeromq.curveServerSecretKey", keys.server_secret)
        .option("zeromq.curveClientPublicKey", keys.client_public)
        .load()
    )
    query = conn.writeStream.format("memory").queryName("live_logger_conn").start()
    cluster = ZeekCluster(zeek, tmp_path / "zeek", layout(port), keys)
    try:
        wait_for(lambda: listening(port), 60, "the query's PULL socket")
        cluster.start_control()
        cluster.read(TRACES_READ)
        want = oracle.union(TRACES_READ)["conn"]
        wait_for(
            lambda: spark.sql("select * from live_logger_conn").count() >= len(want),
            120,
            f"{len(want)} conn records",
        )
        time.sleep(1.0)  # a record read twice would come now
        assert query.exception() is None
    finally:
        query.stop()
        cluster.close()
    got = spark.sql("select * from live_logger_conn")
    got = got.select(*[c for c in got.columns if c not in (*NOT_LOGGED, "_path")])
    file = tmp_path / "conn.log"
    file.write_text("\n".join(want) + "\n")
    archived = read_zeek_json(spark, str(file), "conn").drop("_path")
    assert got.schema == archived.schema
    assert got.count() == archived.count() == len(want)
    assert got.exceptAll(archived).count() == 0 and archived.exceptAll(got).count() == 0
