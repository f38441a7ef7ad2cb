"""docker-compose.yml without a Docker engine: it parses, its commands are real, its files exist."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_cli_support import ROOT

from broker_spark.cli import build_parser

COMPOSE = ROOT / "docker-compose.yml"


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(doc, dict) and isinstance(doc.get("services"), dict)
    return doc["services"]


def _command(service: dict[str, Any]) -> list[str]:
    command = service.get("command", [])
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def test_the_cluster_is_all_there(services: dict[str, Any]) -> None:
    assert {"spark-master", "spark-worker", "broker-a", "broker-b", "generator", "driver"} <= set(
        services
    )
    commands = {name: _command(s) for name, s in services.items()}
    assert commands["spark-master"][-3:-2] == ["org.apache.spark.deploy.master.Master"]
    assert "spark://spark-master:7077" in commands["spark-worker"]
    # Two nodes peered with TLS certificates made by the one-shot certs service.
    assert commands["certs"][:2] == ["broker-spark", "certs"]
    for node in ("broker-a", "broker-b"):
        assert commands[node][:2] == ["broker-spark", "node"] and "--cert" in commands[node]
        assert services[node]["depends_on"]["certs"]["condition"] == (
            "service_completed_successfully"
        )
    assert "broker-a:9999" in commands["broker-b"]
    # The driver runs the demo query against the cluster's master.
    driver = commands["driver"]
    assert driver[:2] == ["broker-spark", "demo"]
    assert driver[driver.index("--master") + 1] == "spark://spark-master:7077"


def test_every_broker_spark_command_parses(services: dict[str, Any]) -> None:
    parser = build_parser()
    checked = 0
    for name, service in services.items():
        argv = _command(service)
        if argv[:1] != ["broker-spark"]:
            continue
        args = parser.parse_args(argv[1:])  # SystemExit here means an invalid command line
        assert args.command == argv[1], name
        checked += 1
    assert checked >= 5


def _files(service: dict[str, Any]) -> list[Path]:
    """The host paths a service needs: its build context and Dockerfile, its bind mounts."""
    out = []
    build = service.get("build")
    if isinstance(build, str):
        build = {"context": build}
    if build:
        context = ROOT / build.get("context", ".")
        out += [context, context / build.get("dockerfile", "Dockerfile")]
    for volume in service.get("volumes", []):
        source = volume.split(":")[0] if isinstance(volume, str) else volume.get("source", "")
        if source.startswith((".", "/")):
            out.append(ROOT / source)
    return out


def test_every_referenced_file_exists(services: dict[str, Any]) -> None:
    paths = [p for s in services.values() for p in _files(s)]
    assert any(p.name == "Dockerfile" for p in paths)
    assert any(p.name == "log4j2.properties" for p in paths)
    for path in paths:
        assert path.exists(), path
    # The node configs the commands name, inside the ./conf mount.
    for service in services.values():
        argv = _command(service)
        if "--config" in argv:
            config = argv[argv.index("--config") + 1]
            assert config.startswith("/conf/") and (ROOT / "conf" / config[6:]).is_file()


def test_the_dockerfile_builds_on_apache_spark() -> None:
    text = (ROOT / "docker" / "Dockerfile").read_text()
    assert "ARG SPARK_IMAGE=apache/spark:" in text and "FROM ${SPARK_IMAGE}" in text
    for copied in ("pyproject.toml", "README.md", "broker_spark", "pyspark_broker"):
        assert (ROOT / copied).exists()
