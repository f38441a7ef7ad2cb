"""``broker-spark logs`` and ``node --log-dir``: a real Zeek's recorded logs through real processes."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator

import pytest
from spark_fixtures import plain_config, wait_for
from test_cli_support import Command
from zeek_recordings import recording

import broker_spark as broker
from broker_spark.node.log_dir import LogDirectory, next_rotation, rotated_name

pytestmark = pytest.mark.timeout(120)

HTTP = "zeek-logs-http-methods"


@pytest.fixture
def zeek() -> Iterator[broker.Endpoint]:
    """Plays the Zeek: an endpoint that sends the recorded log messages."""
    endpoint = broker.Endpoint(plain_config())
    try:
        yield endpoint
    finally:
        endpoint.shutdown()


def _send_when_subscribed(zeek: broker.Endpoint, name: str) -> None:
    wait_for(lambda: any(str(t).startswith("zeek/logs") for t in zeek.peer_subscriptions()), 30)
    zeek.publish_encoded(recording(name).data)


def test_one_log_prints_exactly_zeeks_lines(spawn, zeek) -> None:
    port = zeek.listen("127.0.0.1", 0)
    rec = recording(HTTP)
    expected = rec.local_lines("conn")
    logs = spawn(
        "logs", "conn", "--peer", f"127.0.0.1:{port}", "--no-tls",
        "--count", str(len(expected)), "--timeout", "60", "--wait", "10",
    )  # fmt: skip
    _send_when_subscribed(zeek, HTTP)
    assert logs.rest(60) == expected
    assert logs.proc.returncode == 0, logs.stderr()


def test_several_logs_gain_path_first_and_zeek_may_dial_us(spawn, zeek) -> None:
    rec = recording(HTTP)
    total = sum(len(rec.writes[p]) for p in ("http", "files"))
    logs = spawn(
        "logs", "http", "files", "--listen", "127.0.0.1:0", "--no-tls", "--log-level", "info",
        "--count", str(total), "--timeout", "60",
    )  # fmt: skip
    bound = wait_for(lambda: _listening_port(logs), 30, "the listening port")
    assert zeek.peer("127.0.0.1", bound, retry=0)
    _send_when_subscribed(zeek, HTTP)
    lines = logs.rest(60)
    assert len(lines) == total
    by_path: dict[str, list[str]] = {}
    for line in lines:
        assert line.startswith('{"_path":"')
        obj = json.loads(line)
        path = obj.pop("_path")
        # the rest of the line is Zeek's, byte for byte
        by_path.setdefault(path, []).append("{" + line[line.index(",") + 1 :])
        assert list(obj)[0] == "ts"
    assert by_path == {p: rec.local_lines(p) for p in ("http", "files")}


def _listening_port(cmd: Command) -> int | None:
    import re

    match = re.search(r"waiting for Zeek to peer on 127\.0\.0\.1:(\d+)", cmd.stderr())
    return int(match.group(1)) if match else None


def test_a_node_writes_one_json_log_per_path_like_zeeks_logger(spawn, zeek, tmp_path) -> None:
    out = tmp_path / "zeek-logs"
    node = spawn(
        "node", "--listen", "127.0.0.1:0", "--no-tls", "--log-dir", str(out), "--log-rotate", "0"
    )
    node.expect(r"^node ")
    port = int(node.expect(r"^listening on 127\.0\.0\.1:(\d+)$").group(1))
    node.expect("^ready$")
    assert zeek.peer("127.0.0.1", port, retry=0)
    _send_when_subscribed(zeek, "zeek-logs-dns-edns-ecs")
    rec = recording("zeek-logs-dns-edns-ecs")
    wait_for(
        lambda: (
            (out / "dns.log").exists()
            and len((out / "dns.log").read_text().splitlines()) == len(rec.writes["dns"])
        ),
        30,
        "dns.log written",
    )
    node.proc.send_signal(signal.SIGTERM)
    assert node.proc.wait(30) == 0, node.stderr()
    for path in rec.writes:
        assert (out / f"{path}.log").read_text().splitlines() == rec.local_lines(path)


def test_the_log_directory_rotates_as_zeeks_logger(tmp_path) -> None:
    now = [time.mktime((2024, 3, 1, 9, 59, 0, 0, 0, -1))]  # local 09:59:00
    directory = LogDirectory(str(tmp_path), 3600, clock=lambda: now[0])
    assert next_rotation(now[0], 3600) == time.mktime((2024, 3, 1, 10, 0, 0, 0, 0, -1))
    directory.write([("conn", '{"a":1}'), ("dns", '{"b":2}')])
    opened = now[0]
    now[0] += 30
    directory.write([("conn", '{"a":2}')])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conn.log", "dns.log"]
    now[0] += 61  # past 10:00
    directory.write([("conn", '{"a":3}')])  # rotates first, then a new conn.log
    assert (tmp_path / rotated_name("conn", opened)).read_text() == '{"a":1}\n{"a":2}\n'
    assert (tmp_path / "conn.2024-03-01-09-59-00.log").exists()
    assert (tmp_path / "conn.log").read_text() == '{"a":3}\n'
    assert not (tmp_path / "dns.log").exists()  # rotated; no new record: no new file
    directory.close()  # shutting down rotates what is open
    assert not (tmp_path / "conn.log").exists()
    assert len(list(tmp_path.glob("conn.2024-03-01-*.log"))) == 2
    for name in ("../x", "a/b"):
        flat = LogDirectory(str(tmp_path / "flat"), 0)
        flat.write([(name, "{}")])
        flat.close()
    assert sorted(p.name for p in (tmp_path / "flat").iterdir()) == ["_x.log", "a_b.log"]
