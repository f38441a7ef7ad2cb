"""SIGHUP: a relay node takes a new certificate, key, CA, reader limits and tokens without a
restart; connections made before keep theirs; a bad file keeps the old settings.

A real node process with mutual TLS from a TOML file, real certificates of two
CAs (``broker-spark certs``), a real relay reader and a real HTTPS scrape of
``/metrics``: the files are replaced under the node, as an operator's rotation
does, and the node is sent SIGHUP.
"""

from __future__ import annotations

import json
import shutil
import signal
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from spark_fixtures import wait_for

from broker_spark.cli import main
from broker_spark.config import TLSSettings
from broker_spark.spool.relay_client import RelayError, SpoolClient, SpoolClientError
from broker_spark.tls import make_contexts

pytestmark = pytest.mark.timeout(120)


def _certs(out: Path) -> Path:
    assert main(["certs", "--out", str(out), "--nodes", "relay", "reader"]) == 0
    return out


def _client(certs: Path) -> ssl.SSLContext:
    settings = TLSSettings(
        certificate=str(certs / "reader.pem"),
        key=str(certs / "reader.key"),
        cafile=str(certs / "ca.pem"),
    )
    contexts = make_contexts(settings)
    assert contexts is not None
    return contexts.client


def _install(certs: Path, live: Path) -> None:
    """What a rotation does: the node's files replaced in place."""
    for name in ("relay.pem", "relay.key", "ca.pem"):
        shutil.copyfile(certs / name, live / name)


def _scrape(url: str, cafile: Path, token: str) -> int:
    ctx = ssl.create_default_context(cafile=str(cafile))
    ctx.check_hostname = False
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10, context=ctx) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _config(path: Path, live: Path, readers: str = "") -> None:
    path.write_text(
        f"""
[tls]
certificate = "{live / "relay.pem"}"
key = "{live / "relay.key"}"
cafile = "{live / "ca.pem"}"

[metrics]
listen = "127.0.0.1:0"
token = "@{live / "metrics.token"}"
tls = true

[spool]
dir = "{live.parent / "spool"}"
topics = ["zeek/"]
relay = "127.0.0.1:0"
{readers}
"""
    )


def _reloaded(node, times: int) -> None:
    wait_for(lambda: node.stderr().count("reloaded (SIGHUP)") >= times, 20, "reloaded")


def test_sighup_rotates_certificates_ca_limits_and_tokens(spawn, tmp_path: Path) -> None:
    first, second = _certs(tmp_path / "ca1"), _certs(tmp_path / "ca2")
    live = tmp_path / "live"
    live.mkdir()
    _install(first, live)
    (live / "metrics.token").write_text("one\n")
    conf = tmp_path / "node.toml"
    _config(conf, live)
    node = spawn("node", "--config", str(conf), "--listen", "127.0.0.1:0")
    relay = node.expect(r"^relay listening on (\S+)", 30).group(1)
    metrics = node.expect(r"^metrics listening on (\S+) \(https\)", 30).group(1)
    node.expect("^ready$", 30)
    host, port = relay.rsplit(":", 1)
    url = f"https://{metrics}/metrics"

    before = SpoolClient.tcp(host, int(port), _client(first))
    try:
        before.hello("follow", "kept")
        assert _scrape(url, first / "ca.pem", "one") == 200

        _install(second, live)  # a new CA, certificate and key; a new token; a limit
        (live / "metrics.token").write_text("two\n")
        _config(conf, live, '[spool.readers]\n"reader" = ["zeek/dns/"]\n')
        node.proc.send_signal(signal.SIGHUP)
        _reloaded(node, 1)

        # new connections: the new CA and certificate, the new limit, the new token
        with (
            pytest.raises((SpoolClientError, RelayError, OSError)),
            SpoolClient.tcp(host, int(port), _client(first)) as old_ca,
        ):
            old_ca.hello("follow", "old")
        with SpoolClient.tcp(host, int(port), _client(second)) as new_ca:
            welcome = new_ca.hello("follow", "new")
            assert welcome["topics"] == ["zeek/dns/"]  # limited now
        assert _scrape(url, second / "ca.pem", "two") == 200
        assert _scrape(url, second / "ca.pem", "one") == 401
        # the connection made before keeps what it was admitted with
        assert int(before.request("bounds")["end"]) >= 0

        # a bad file: the old settings stay, and the log says why
        (live / "relay.pem").write_text("not a certificate\n")
        node.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reload (SIGHUP) failed" in node.stderr(), 20, "the failure logged")
        with SpoolClient.tcp(host, int(port), _client(second)) as still:
            assert still.hello("follow", "still")["topics"] == ["zeek/dns/"]
        assert _scrape(url, second / "ca.pem", "two") == 200
    finally:
        before.close()
    assert node.proc.poll() is None
    assert node.signal() == 0
    assert json.dumps(node.stderr().count("reloaded (SIGHUP)")) == "1"
