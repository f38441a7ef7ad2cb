"""What an operator watches a relay with: every metric documented, served over TLS, and the
dashboard and alert rules in conf/ made of metrics that exist, the rules checked by promtool.

A metric added to the collector without its row in docs/reference/metrics.md (generated:
make reference) fails here, and so does a documented one that is gone; the Grafana dashboard and the
Prometheus rules may only name metrics the relay serves (and Prometheus' ``up``).
``promtool`` (Debian's prometheus package, which .ci/run installs) checks the rules
and runs their unit tests; without it the test is skipped, except in CI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry
from test_cli_support import ROOT

from broker_spark.cli import main
from broker_spark.spool.metrics import MetricsServer, StatusCollector

DOC = ROOT / "docs" / "reference" / "metrics.md"
RULES = ROOT / "conf" / "prometheus" / "broker-spark-relay.rules.yml"
RULE_TESTS = ROOT / "conf" / "prometheus" / "broker-spark-relay.rules.test.yml"
DASHBOARD = ROOT / "conf" / "grafana" / "broker-spark-relay.json"

#: A status with every part a relay's status can have, so every metric is made.
FULL_STATUS = {
    "start": 10,
    "end": 110,
    "bytes": 123456,
    "oldest_age_s": 3600.0,
    "error": None,
    "paused": "disk: 1 bytes free",
    "disk_free_bytes": 1,
    "disk_min_free_bytes": 2,
    "retention_seconds": 86400.0,
    "retention_bytes": 1 << 30,
    "peers": [{"id": "x", "address": "127.0.0.1:1", "status": "Peered"}],
    "sources": [
        {
            "kind": "zeromq-logs",
            "arrived": 5,
            "undecodable": 1,
            "refused": {"connection": 2},
        }
    ],
    "listeners": [{"listener": "relay", "connections": 1, "refused": {"forbidden": 1}}],
    "readers": [{"name": "spark", "role": "follow", "committed": 100, "lag_seconds": 2.5}],
}


def served_metrics() -> set[str]:
    """The names of the metric families a relay serves, as a scrape shows them."""
    registry = CollectorRegistry()
    registry.register(StatusCollector(lambda: FULL_STATUS))
    text = generate_latest(registry).decode()
    names = set(re.findall(r"^# TYPE (\S+) (counter|gauge)", text, re.M))
    return {n if n.endswith("_total") or kind != "counter" else n + "_total" for n, kind in names}


def documented_metrics() -> set[str]:
    return set(re.findall(r"^\| `(broker_spark_[a-z_]+)` \|", DOC.read_text(), re.M))


def test_every_metric_is_documented_and_every_documented_one_is_served() -> None:
    served, documented = served_metrics(), documented_metrics()
    assert served - documented == set(), "metrics without a row in docs/reference/metrics.md"
    assert documented - served == set(), "documented metrics a relay does not serve"
    assert len(served) >= 19


def _names_in(expr: str) -> set[str]:
    return set(re.findall(r"\b(broker_spark_[a-z_]+|up)\b", expr))


def test_the_rules_and_the_dashboard_use_metrics_that_exist() -> None:
    import yaml

    known = documented_metrics() | {"up"}
    rules = yaml.safe_load(RULES.read_text())
    exprs = [str(r["expr"]) for g in rules["groups"] for r in g["rules"]]
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert {
        "BrokerSparkRelayDown", "BrokerSparkRelayReaderLag", "BrokerSparkRelayDiskPaused",
        "BrokerSparkRelayHoldsLessThanItsRetention", "BrokerSparkRelayRefusingConnections",
        "BrokerSparkRelayUndecodable",
    } <= alerts  # fmt: skip
    dashboard = json.loads(DASHBOARD.read_text())
    exprs += [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = set().union(*map(_names_in, exprs))
    assert used - known == set()
    panels = {p["title"] for p in dashboard["panels"]}
    assert {"Reader lag (seconds)", "Free disk against the floor", "Relays up"} <= panels
    assert dashboard["templating"]["list"][0]["type"] == "datasource"


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing: .ci/run installs Debian's prometheus package")
        pytest.skip("no promtool here (apt-get install prometheus; CI installs it)")
    return found


def test_promtool_checks_the_rules_and_runs_their_tests() -> None:
    promtool = _promtool()
    check = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 10 rules found" in check.stdout
    tested = subprocess.run(
        [promtool, "test", "rules", str(RULE_TESTS)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=RULE_TESTS.parent,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_metrics_over_tls_with_a_token_that_reloads(tmp_path: Path) -> None:
    assert main(["certs", "--out", str(tmp_path), "--nodes", "relay"]) == 0
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "relay.pem", tmp_path / "relay.key")
    server = MetricsServer(lambda: FULL_STATUS, "127.0.0.1", 0, token="one", tls=server_ctx)
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    client.check_hostname = False
    url = f"https://127.0.0.1:{server.port}/metrics"

    def scrape(token: str) -> int:
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=10, context=client) as answer:
                assert b"broker_spark_spool_paused 1.0" in answer.read()
                return answer.status
        except urllib.error.HTTPError as exc:
            return exc.code

    try:
        assert scrape("one") == 200 and scrape("two") == 401
        with pytest.raises(OSError):  # plain HTTP gets no answer (a reset, or no response)
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5)
        server.reload("two", server_ctx)
        assert scrape("two") == 200 and scrape("one") == 401
        assert server.admission.snapshot()["refused"].get("tls", 0) >= 1
    finally:
        server.close()
