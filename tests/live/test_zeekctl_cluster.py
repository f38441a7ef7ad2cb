"""docs/how-to/zeek-cluster-zeromq.md's zeekctl recipe, run against a real Zeek cluster laid out as zeekctl does it.

zeekctl starts a Zeek for every logger of ``node.cfg``, so a site whose loggers are
broker-spark nodes leaves them out of ``node.cfg``; zeekctl then writes
``redef Cluster::manager_is_logger = T;`` into the cluster layout (ZeekControl/install.py
in zeek/zeekctl) and gives every node a port. The doc's ``local.zeek``
(``<!-- live: zeekctl-local -->``) names the broker-spark nodes as the log endpoints and
turns the manager's own logging remote. Here the broker-spark nodes are
``node --zeromq-logs ... --log-dir`` (Zeek's JSON files, as a logger writes them): what
they wrote, together, must be exactly what a standalone Zeek writes for the same traces,
and the manager's own logs must reach them too. Without the recipe's last two lines (the
manager's logging) the manager keeps its logs in its own folder: they are needed, as the
doc says.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cluster import CurveKeys, ZeekCluster
from doc_snippets import replace_all, snippet
from pcaps import TRACES
from ports import free_port
from test_cli_support import Command
from zeek_procs import PROCESS_LOGS, Oracle, read_json_logs

pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]

TRACES_READ = (TRACES / "wikipedia.pcap", TRACES / "smtp.pcap")


def zeekctl_layout() -> str:
    """The cluster-layout.zeek zeekctl writes for a node.cfg of a manager, a proxy and two
    workers (no logger), on loopback: the manager is the logger, every node has a port."""
    ports = [free_port() for _ in range(5)]
    nodes = [
        ("control", "CONTROL", ""),
        ("manager", "MANAGER", ""),
        ("proxy-1", "PROXY", ', $manager="manager"'),
        ("worker-1", "WORKER", ', $manager="manager"'),
        ("worker-2", "WORKER", ', $manager="manager"'),
    ]
    lines = ["# Automatically generated. Do not edit.", "redef Cluster::manager_is_logger = T;"]
    lines.append("redef Cluster::nodes = {")
    for (name, kind, extra), port in zip(nodes, ports, strict=True):
        lines.append(
            f'\t["{name}"] = [$node_type=Cluster::{kind}, $ip=127.0.0.1, $p={port}/tcp{extra}],'
        )
    return "\n".join([*lines, "};", ""])


def local_zeek(folder: Path, endpoints: list[str], whole: bool) -> Path:
    """The doc's local.zeek, the broker-spark nodes' endpoints in it; ``whole=False`` leaves
    out its last two lines (the manager's logging)."""
    text = replace_all(
        snippet("how-to/zeek-cluster-zeromq.md", "zeekctl-local"),
        {"tcp://10.0.0.5:5557": endpoints[0], "tcp://10.0.0.6:5557": endpoints[1]},
    )
    if not whole:
        lines = text.splitlines()
        assert all(line.startswith("redef Log::") for line in lines[-2:]), lines
        text = "\n".join(lines[:-2]) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "local.zeek"
    path.write_text(text)
    return path


def records(lines: list[str]) -> Counter[str]:
    """Zeek's JSON lines as a multiset of their values (key order and a double's last
    digit as rapidjson writes it do not count: the parsed values must be equal)."""
    return Counter(json.dumps(json.loads(line), sort_keys=True) for line in lines)


def run_cluster(zeek: Path, folder: Path, whole: bool) -> tuple[dict[str, list[str]], str]:
    """The cluster with the recipe (``whole`` or without its last two lines): what the
    broker-spark nodes wrote, by log, and the cluster logs Zeek wrote into its own folder
    (rotated as it ended, in Zeek's default TSV)."""
    keys = CurveKeys.new()
    endpoints = [f"tcp://127.0.0.1:{free_port()}" for _ in range(2)]
    nodes: list[Command] = []
    cluster = ZeekCluster(
        zeek, folder / "zeek", zeekctl_layout(), keys,
        scripts=[local_zeek(folder / "site", endpoints, whole)],
    )  # fmt: skip
    try:
        for i, endpoint in enumerate(endpoints):
            logs = folder / f"logger-{i + 1}"
            node = Command(
                "node", "--no-listen", "--zeromq-logs", endpoint, "--log-dir", str(logs),
                "--log-rotate", "0", tmp=folder / f"node-{i + 1}", env=keys.environment(),
            )  # fmt: skip
            nodes.append(node)
            node.expect("^ready$", 60)
        cluster.start_control()
        cluster.read(TRACES_READ)
        cluster.running["manager"].stop()  # SIGTERM: Zeek flushes its logs as it ends
        for node in nodes:
            assert node.signal() == 0, node.stderr()
    finally:
        for node in nodes:
            node.close()
        cluster.close()
    received: dict[str, list[str]] = {}
    for i in range(len(endpoints)):
        for path, lines in read_json_logs(folder / f"logger-{i + 1}").items():
            received.setdefault(path, []).extend(lines)
    kept = "".join(f.read_text() for f in sorted(cluster.folder.glob("cluster*.log")))
    return received, kept


def managers(lines: list[str]) -> list[Any]:
    return [r for r in map(json.loads, lines) if r.get("node") == "manager"]


def test_the_zeekctl_recipe_sends_every_log_the_managers_too(
    zeek: Path, oracle: Oracle, tmp_path: Path
) -> None:
    received, kept = run_cluster(zeek, tmp_path, whole=True)
    expected = oracle.union(TRACES_READ)
    for path, lines in sorted(expected.items()):
        assert records(received.get(path, [])) == records(lines), path
    assert set(received) - set(expected) <= PROCESS_LOGS, sorted(received)
    assert managers(received.get("cluster", [])), "the manager's cluster log reached the nodes"
    assert not kept, f"the manager kept a cluster log of its own: {kept[:500]}"


def test_without_its_last_lines_the_manager_keeps_its_own_logs(
    zeek: Path, oracle: Oracle, tmp_path: Path
) -> None:
    received, kept = run_cluster(zeek, tmp_path, whole=False)
    for path, lines in sorted(oracle.union(TRACES_READ).items()):  # the workers' all arrive
        assert records(received.get(path, [])) == records(lines), path
    assert "\tmanager\t" in kept, kept[:500]  # ts, node, message: Zeek's TSV cluster log
    assert not managers(received.get("cluster", []))
