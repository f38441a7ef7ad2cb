"""The command as users run it: real processes peering over loopback, plain TCP and TLS."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from test_cli_support import Command, run_command

from broker_spark.cli import main


def _port(node: Command) -> int:
    node.expect(r"^node [0-9a-f-]{36}$")
    port = int(node.expect(r"^listening on 127\.0\.0\.1:(\d+)$").group(1))
    node.expect("^ready$")
    return port


def _line(i: int) -> str:
    """Input line i: integers, strings and Zeek JSON counts in turn."""
    if i % 3 == 0:
        return str(i)
    if i % 3 == 1:
        return json.dumps(f"s{i}")
    return json.dumps({"@data-type": "count", "data": i})


def test_every_line_of_a_10000_line_stdin_arrives(spawn, tmp_path: Path) -> None:
    n = 10_000
    node = spawn("node", "--listen", "127.0.0.1:0", "--no-tls")
    port = _port(node)
    peer = ["--peer", f"127.0.0.1:{port}", "--no-tls"]
    sub = spawn("subscribe", "/load", "--count", str(n), "--timeout", "60", *peer)
    data = tmp_path / "input.jsonl"
    data.write_text("".join(_line(i) + "\n" for i in range(n)))
    with open(data) as stdin:
        publish = spawn("publish", "/load/x", "--await-subscriber", "15", *peer, stdin=stdin)
        assert publish.proc.wait(60) == 0, publish.stderr()
    assert f"published {n} messages on /load/x" in publish.stderr()
    lines = sub.rest(60)
    assert sub.proc.returncode == 0, sub.stderr()
    assert len(lines) == n
    kinds = ("integer", "string", "count")
    for i, line in enumerate(lines):  # all there, in order, each with its type
        data = json.loads(line)["data"]
        assert data == {"@data-type": kinds[i % 3], "data": f"s{i}" if i % 3 == 1 else i}
    assert node.signal(signal.SIGTERM) == 0
    assert "Traceback" not in node.stderr()


def test_mutual_tls_with_certificates_from_certs(spawn, tmp_path: Path, capsys) -> None:
    certs = tmp_path / "certs"
    assert main(["certs", "--out", str(certs), "--nodes", "a", "b", "c"]) == 0

    def tls(name: str) -> list[str]:
        return ["--cert", str(certs / f"{name}.pem"), "--key", str(certs / f"{name}.key"),
                "--ca", str(certs / "ca.pem")]  # fmt: skip

    node = spawn("node", "--listen", "127.0.0.1:0", *tls("a"))
    port = _port(node)
    peer = ["--peer", f"127.0.0.1:{port}"]
    sub = spawn("subscribe", "/secure", "--format", "text", *peer, *tls("c"))
    publish = run_command("publish", "/secure", '"one"', "2", "--await-subscriber", "15",
                          *peer, *tls("b"))  # fmt: skip
    assert publish.returncode == 0, publish.stderr
    assert sub.expect("^/secure: one$")
    assert sub.expect("^/secure: 2$")
    assert sub.signal(signal.SIGINT) == 0  # interrupted: the normal end of subscribe
    # Anonymous TLS cannot peer with a node that requires certificates.
    capsys.readouterr()
    assert main(["status", *peer]) == 1
    err = capsys.readouterr().err
    assert err.startswith("broker-spark: error: ") and err.count("\n") == 1
    assert node.signal(signal.SIGINT) == 0
    assert "Traceback" not in node.stderr() + sub.stderr()


def test_a_node_from_the_standalone_config(spawn, capsys) -> None:
    node = spawn("node", "--config", "conf/standalone.toml", "--listen", "127.0.0.1:0")
    port = _port(node)
    peer = ["--peer", f"127.0.0.1:{port}"]  # TLS on, anonymous: as configured
    assert main(["store", "put", "demo", "-k", "greeting", '"hello"', *peer]) == 0
    assert main(["store", "get", "demo", "-k", "greeting", "--format", "plain", *peer]) == 0
    assert capsys.readouterr().out == '"hello"\n'
    assert node.signal(signal.SIGTERM) == 0
    err = node.stderr()
    assert "master of store demo (memory)" in err and "shutting down" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["node", "--listen"], 2, "argument --listen: expected one argument"),
        (["publish", "/t", "{bad"], 2, "VALUE 1 ('{bad'): not JSON"),
        (["subscribe", "/t", "--peer", "127.0.0.1:1", "--no-tls"], 1, "cannot connect to"),
        (["node", "--config", "tests/no/such.toml"], 2, "cannot read tests/no/such.toml"),
    ],
    ids=["bad-flag", "bad-json", "unreachable", "bad-config"],
)
def test_errors_are_one_line_without_traceback(args: list[str], code: int, message: str) -> None:
    result = run_command(*args)
    assert result.returncode == code
    assert result.stderr.startswith("broker-spark: error: ")
    assert result.stderr.count("\n") == 1 and message in result.stderr
    assert result.stdout == ""


def test_a_bad_config_key_in_a_process(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    path.write_text("[endpoint]\nlisten = '127.0.0.1:0'\npeer = []\n")
    result = run_command("node", "--config", str(path))
    assert result.returncode == 2
    assert result.stderr == (
        f"broker-spark: error: {path}: unknown key 'peer' in [endpoint] (did you mean 'peers'?)\n"
    )
