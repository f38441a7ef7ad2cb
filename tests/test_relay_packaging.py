"""What an operator installs a relay with: the systemd unit, the container image and its
compose service, ``node --check``, and a venv with broker-spark alone (no pyspark, no Java).

Without a Docker engine here, the image and the compose service are checked as
text: the Dockerfile's instructions, the compose file parsed, every command in
them parsed by broker-spark's own parser. The unit is checked by
``systemd-analyze verify`` where systemd's tools exist, and parsed everywhere.
The venv test installs the project into a fresh venv and runs a relay from it
(``make test-slow``: it installs packages).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_cli_support import ROOT, run_command

from broker_spark.cli import build_parser
from broker_spark.node.serve import STOP_BOUND
from broker_spark.node.settings import load_node_config

UNIT = ROOT / "conf" / "systemd" / "broker-spark-relay.service"
DOCKERFILE = ROOT / "docker" / "Dockerfile.relay"
COMPOSE = ROOT / "docker-compose.yml"
SPOOL_HOME = "/var/lib/broker-spark"


def unit_entries(text: str) -> dict[str, list[tuple[str, str]]]:
    """A systemd unit's sections as (key, value) pairs in order (keys may repeat)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        assert current is not None and "=" in line, f"not a unit line: {raw!r}"
        key, _, value = line.partition("=")
        current.append((key.strip(), value.strip()))
    return sections


def _one(entries: list[tuple[str, str]], key: str) -> str:
    values = [v for k, v in entries if k == key]
    assert len(values) == 1, (key, values)
    return values[0]


def _node_args(argv: list[str]) -> Any:
    assert argv[0].endswith("broker-spark") and argv[1] == "node", argv
    return build_parser().parse_args(argv[1:])


def test_the_unit_is_hardened_and_runs_the_relay_as_its_own_user() -> None:
    sections = unit_entries(UNIT.read_text())
    service = sections["Service"]
    assert _one(service, "User") == _one(service, "Group") == "broker-spark"
    assert _one(service, "ProtectSystem") == "strict"
    assert _one(service, "ReadWritePaths") == SPOOL_HOME
    assert _one(service, "StateDirectory") == "broker-spark"  # /var/lib/broker-spark
    assert _one(service, "WorkingDirectory") == SPOOL_HOME
    for key in ("NoNewPrivileges", "ProtectHome", "PrivateTmp", "PrivateDevices"):
        assert _one(service, key) == "yes", key
    assert _one(service, "CapabilityBoundingSet") == ""
    assert _one(service, "Restart") == "on-failure"
    assert _one(service, "KillSignal") == "SIGTERM"
    assert float(_one(service, "TimeoutStopSec")) > STOP_BOUND  # the planned stop's bound
    assert _one(service, "ExecReload") == "/bin/kill -HUP $MAINPID"
    start = _node_args(shlex.split(_one(service, "ExecStart")))
    check = _node_args(shlex.split(_one(service, "ExecStartPre")))
    assert check.check and not start.check and start.config == check.config
    assert _one(sections["Install"], "WantedBy") == "multi-user.target"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    """The unit as installed, with the venv's broker-spark for /opt/broker-spark's."""
    here = Path(sys.executable).parent / "broker-spark"
    text = UNIT.read_text().replace("/opt/broker-spark/bin/broker-spark", str(here))
    unit = tmp_path / UNIT.name
    unit.write_text(text)
    done = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "broker-spark-relay.service" not in done.stderr, done.stderr


def _instructions(text: str) -> list[tuple[str, str]]:
    """A Dockerfile's instructions (continuation lines joined, comments dropped)."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def test_the_image_runs_the_relay_unprivileged_on_a_spool_volume() -> None:
    steps = _instructions(DOCKERFILE.read_text())
    words = [w for w, _ in steps]
    args = dict(steps)
    run = " ".join(rest for word, rest in steps if word == "RUN")
    assert "pip install --no-cache-dir /tmp/broker-spark " in run  # no [spark] extra
    every = " ".join(rest for _w, rest in steps).replace("pyspark_broker", "").lower()
    assert "pyspark" not in every and "java" not in every and "jdk" not in every
    assert steps[-1] == ("CMD", '["--config", "/etc/broker-spark/relay.toml"]')
    assert args["ENTRYPOINT"] == '["broker-spark", "node"]'
    assert args["USER"] == "broker-spark" and words.index("USER") > words.index("RUN")
    assert (
        "useradd --system" in args["RUN"]
        and f"chown broker-spark:broker-spark {SPOOL_HOME}" in (args["RUN"])
    )
    assert args["VOLUME"] == f'["{SPOOL_HOME}"]'
    assert args["STOPSIGNAL"] == "SIGTERM"
    health = yaml.safe_load(args["HEALTHCHECK"].split("CMD", 1)[1])
    assert health[:3] == ["broker-spark", "status", "--relay"]
    build_parser().parse_args(health[1:])
    assert (ROOT / "docker" / "Dockerfile.relay.dockerignore").exists()


def test_compose_has_the_relay_with_its_volume_and_healthcheck() -> None:
    doc = yaml.safe_load(COMPOSE.read_text())
    relay = doc["services"]["relay"]
    assert relay["build"]["dockerfile"] == "docker/Dockerfile.relay"
    assert f"relay-spool:{SPOOL_HOME}" in relay["volumes"]
    assert "relay-spool" in doc["volumes"]
    node = _node_args(shlex.split(relay["command"]))
    assert "./conf:/conf:ro" in relay["volumes"] and node.config.startswith("/conf/")
    settings = load_node_config(ROOT / "conf" / node.config.removeprefix("/conf/"))
    assert settings.spool_dir == f"{SPOOL_HOME}/spool" and settings.zeromq_logs
    assert settings.tls.certificate == "/certs/relay.pem"
    test = relay["healthcheck"]["test"]
    assert test[0] == "CMD" and test[1:4] == ["broker-spark", "status", "--relay"]
    build_parser().parse_args(test[2:])
    assert relay["stop_signal"] == "SIGTERM"
    assert float(relay["stop_grace_period"].removesuffix("s")) > STOP_BOUND
    assert "relay" in shlex.split(doc["services"]["certs"]["command"])


def test_node_check_says_what_is_wrong_and_binds_nothing(tmp_path: Path) -> None:
    ok = run_command(
        "node", "--check", "--no-tls", "--spool", str(tmp_path / "spool"), "--subscribe",
        "zeek/logs/", "--zeromq-logs", "tcp://127.0.0.1:5557", "--listen", "127.0.0.1:1",
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("configuration OK: plain TCP")
    assert "fsync interval, compression zstd, to readers auto" in ok.stdout
    assert "decoding     the rows of 2 log readers' tasks at once" in ok.stdout
    assert not (tmp_path / "spool").exists()
    bad_cert = run_command(
        "node", "--check", "--cert", str(tmp_path / "nope.pem"), "--key", str(tmp_path / "k"),
        "--ca", str(tmp_path / "ca"), "--spool", str(tmp_path / "s"), "--subscribe", "z/",
    )  # fmt: skip
    assert bad_cert.returncode != 0 and "nope.pem" in bad_cert.stderr
    locked = tmp_path / "ro"
    locked.mkdir(mode=0o500)
    if os.geteuid() != 0:  # root may write anywhere
        unwritable = run_command(
            "node", "--check", "--no-tls", "--spool", str(locked / "s"), "--subscribe", "z/"
        )
        assert unwritable.returncode != 0 and "not writable" in unwritable.stderr
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    done = run_command(
        "node", "--check", "--no-tls", "--spool", str(not_a_folder / "s"), "--subscribe", "z/"
    )
    assert done.returncode != 0 and "is not a folder" in done.stderr
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("[spool]\nfsync = 'sometimes'\n")
    done = run_command("node", "--check", "--config", str(bad_toml))
    assert done.returncode != 0 and "fsync must be one of" in done.stderr
    bad_toml.write_text("[spool]\ncompression = 'gzip'\n")
    done = run_command("node", "--check", "--config", str(bad_toml))
    assert done.returncode != 0 and "compression must be one of zstd, lz4, none" in done.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_relay_host_needs_no_pyspark(tmp_path: Path) -> None:
    """``pip install broker-spark`` into a fresh venv (no extras): no pyspark, no Java, and
    ``broker-spark node`` runs from it as a relay, keeps a batch and stops cleanly."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    build = tmp_path / "src"
    shutil.copytree(
        ROOT,
        build,
        ignore=shutil.ignore_patterns(".venv*", ".git", "*.egg-info", "build", "__pycache__"),
    )
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(build)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    shutil.rmtree(build)
    for absent in ("pyspark", "py4j"):
        found = subprocess.run([str(python), "-c", f"import {absent}"], capture_output=True)
        assert found.returncode != 0, f"{absent} was installed"
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME")}
    env["PATH"] = f"{venv / 'bin'}:/usr/bin:/bin"
    env["PYTHONUNBUFFERED"] = "1"
    spool = tmp_path / "spool"
    node = subprocess.Popen(
        [
            str(venv / "bin" / "broker-spark"),
            "node",
            "--no-tls",
            "--no-listen",
            "--spool",
            str(spool),
            "--subscribe",
            "zeek/logs/",
            "--relay",
            "127.0.0.1:0",
            "--zeromq-logs",
            "tcp://127.0.0.1:0",
        ],  # fmt: skip
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        assert node.stdout is not None
        lines = []
        while (line := node.stdout.readline().strip()) != "ready":
            assert line, node.stderr.read() if node.stderr else ""
            lines.append(line)
        endpoint = next(x for x in lines if x.startswith("zeromq logs on ")).split()[-1]
        import zmq
        from zeek_recordings import ZMQ_LOGS, zmq_messages

        ctx = zmq.Context()
        push = ctx.socket(zmq.PUSH)
        push.connect(endpoint)
        push.send_multipart(zmq_messages(ZMQ_LOGS)[0])
        time.sleep(1.0)
        push.close(1000)
        ctx.term()
        node.send_signal(signal.SIGTERM)
        assert node.wait(60) == 0
    finally:
        if node.poll() is None:
            node.kill()
            node.wait(10)
    from broker_spark.spool.spool import Spool

    with Spool(spool, readonly=True) as view:
        assert view.end_offset() == 1
