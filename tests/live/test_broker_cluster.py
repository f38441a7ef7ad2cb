"""A real Zeek cluster on the Broker backend, its two loggers each shadowed by a relay node.

docs/how-to/zeek-broker.md, "With relay nodes": a cluster's nodes send each log
record to the next Zeek logger that is alive, on that logger's node topic
(``Cluster::rr_log_topic``), so one relay node per logger, subscribed to ``zeek/logs/``
and that logger's node topic, gets what its logger gets, once. The cluster (a manager, two
Zeek loggers writing their own JSON logs, a worker reading a trace) runs the doc's snippet
that has every node dial both relays (``<!-- live: broker-cluster-peers -->``); the tables
``write_zeek_tables`` makes over both relays must hold exactly the records the two Zeek
loggers wrote: every record, once.

A Zeek on the Broker backend sends no log write while it has no peer, and round robin has
nowhere to go until the loggers are up, so the worker gets its trace (on stdin) only once
it said it has both loggers and all its peers (tests/live/pcaps.py).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import spark_fixtures
from doc_snippets import replace_all, snippet
from pcaps import TRACES, feed_when_ready, read
from ports import free_port
from tables_check import assert_relays_write_zeeks_tables
from test_cli_support import Command
from zeek_procs import PROCESS_LOGS, SCRIPTS, ZeekProcess, read_json_logs

spark = spark_fixtures.spark

pytestmark = [pytest.mark.live, pytest.mark.spark, pytest.mark.timeout(600)]

NODES = ("manager", "logger-1", "logger-2", "worker-1")


def layout(ports: dict[str, int]) -> str:
    """The cluster-layout.zeek zeekctl writes for a Broker cluster with two loggers."""
    lines = ["redef Cluster::manager_is_logger = F;", "redef Cluster::nodes = {"]
    kinds = {"manager": "MANAGER", "logger-1": "LOGGER", "logger-2": "LOGGER"}
    for node, kind in kinds.items():
        lines.append(
            f'\t["{node}"] = [$node_type=Cluster::{kind}, $ip=127.0.0.1, $p={ports[node]}/tcp],'
        )
    lines.append(
        '\t["worker-1"] = [$node_type=Cluster::WORKER, $ip=127.0.0.1, $manager="manager"],'
    )
    return "\n".join([*lines, "};", ""])


@pytest.fixture
def relays(tmp_path: Path) -> Iterator[list[tuple[int, str]]]:
    """Two relay nodes, each ``(the port Zeek dials, where readers read)``."""
    started: list[Command] = []
    where: list[tuple[int, str]] = []
    try:
        for i in (1, 2):
            listen, relay = free_port(), f"127.0.0.1:{free_port()}"
            cmd = Command(
                "node", "--listen", f"127.0.0.1:{listen}", "--spool", str(tmp_path / f"spool{i}"),
                "--subscribe", "zeek/logs/", "--subscribe", f"zeek/cluster/node/logger-{i}/",
                "--relay", relay, tmp=tmp_path / f"relay{i}",
            )  # fmt: skip
            started.append(cmd)
            cmd.expect("^ready$", 60)
            where.append((listen, relay))
        yield where
    finally:
        for cmd in started:
            cmd.close()


def test_each_logger_of_a_broker_cluster_is_shadowed_by_a_relay_and_the_tables_are_whole(
    spark: Any, zeek: Path, tmp_path: Path, relays: list[tuple[int, str]]
) -> None:
    ports = {node: free_port() for node in NODES}
    peers = replace_all(
        snippet("how-to/zeek-broker.md", "broker-cluster-peers"),
        {
            '"10.0.0.5", 9999/tcp': f'"127.0.0.1", {relays[0][0]}/tcp',
            '"10.0.0.6", 9999/tcp': f'"127.0.0.1", {relays[1][0]}/tcp',
        },
    )
    procs: dict[str, ZeekProcess] = {}
    db = "live_broker_cluster"
    try:
        for node in NODES:
            folder = tmp_path / node
            folder.mkdir()
            (folder / "cluster-layout.zeek").write_text(layout(ports))
            (folder / "relay-peers.zeek").write_text(peers)
            args = ["relay-peers.zeek", str(SCRIPTS / "live-broker-cluster.zeek")]
            if node == "worker-1":
                args = ["-D", "-C", "-r", "-", *args]
            procs[node] = ZeekProcess(
                zeek, node, args, folder, env={"CLUSTER_NODE": node},
                stdin=subprocess.PIPE if node == "worker-1" else None,
            )  # fmt: skip
            if node != "worker-1":
                procs[node].wait_line(rf"^live {node} up", 120)
        worker = procs["worker-1"]
        assert worker.proc.stdin is not None
        feed_when_ready(
            worker.proc.stdin, read(TRACES / "bro.org.pcap"), lambda: "ready" in worker.stdout()
        )
        worker.finished(180)
        for node in ("manager", "logger-1", "logger-2"):  # SIGTERM: each flushes its logs
            procs[node].stop()
        logs: dict[str, list[str]] = {}
        for node in ("logger-1", "logger-2"):
            for path, lines in read_json_logs(tmp_path / node).items():
                logs.setdefault(path, []).extend(lines)
        oracle = {p: lines for p, lines in logs.items() if p not in PROCESS_LOGS}
        assert {"conn", "http", "files"} <= set(oracle), sorted(logs)
        for node in ("logger-1", "logger-2"):  # round robin: each logger had a share
            assert read_json_logs(tmp_path / node).get("conn"), node

        assert_relays_write_zeeks_tables(
            spark, db, ",".join(relay for _port, relay in relays), oracle, tmp_path, PROCESS_LOGS
        )
    finally:
        for proc in procs.values():
            proc.stop()
        spark.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")
