"""Secrets never show: not in logs, errors, status output, reprs or metrics.

A relay node run with everything secret a deployment has (a key encrypted with a
passphrase read from a file, CURVE secret keys read from files, a WebSocket URL
with a password in it) and everything it emits (its stdout and stderr, ``status
--relay``, ``/metrics``, the errors of a wrong passphrase and of misspelled
options) is searched for each secret.
"""

from __future__ import annotations

import argparse
import json
import signal
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from test_cli_support import run_command

from broker_spark.addresses import without_credentials
from broker_spark.cli import main
from broker_spark.cli.args import PASSPHRASE_ENV, TLS_FLAGS, tls_flags
from broker_spark.node.settings import NodeSettings
from broker_spark.reader.options import parse_reader_options
from broker_spark.reader.options.values import BrokerOptionError
from broker_spark.zeromq.curve import generate_keypair

pytestmark = pytest.mark.timeout(120)

PASSPHRASE = "pass-S3CRET-phrase-71"
WS_PASSWORD = "ws-S3CRET-pw-93"
WS_TOKEN = "ws-S3CRET-token-28"
METRICS_TOKEN = "metrics-S3CRET-token-46"


def _encrypted_key(certs: Path, name: str) -> Path:
    """``name``'s key from ``broker-spark certs``, encrypted with PASSPHRASE."""
    key = serialization.load_pem_private_key((certs / f"{name}.key").read_bytes(), None)
    out = certs / f"{name}.enc.key"
    out.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(PASSPHRASE.encode()),
        )
    )
    return out


def test_a_relay_node_run_emits_no_secret(
    spawn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    certs = tmp_path / "certs"
    assert main(["certs", "--out", str(certs), "--nodes", "relay", "reader"]) == 0
    key = _encrypted_key(certs, "relay")
    (tmp_path / "passphrase").write_text(PASSPHRASE + "\n")
    server, client = generate_keypair(), generate_keypair()
    (tmp_path / "curve.secret").write_text(server["secret"])
    (tmp_path / "ws.token").write_text(WS_TOKEN + "\n")
    monkeypatch.setenv("BROKER_SPARK_METRICS_TOKEN", METRICS_TOKEN)
    tls = ["--cert", str(certs / "relay.pem"), "--key", str(key), "--ca", str(certs / "ca.pem")]
    node = spawn(
        "node", "--listen", "127.0.0.1:0", "--spool", str(tmp_path / "spool"),
        "--subscribe", "zeek/", "--relay", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
        "--zeromq-logs", "tcp://127.0.0.1:0",
        f"--curve-server-publickey={server['public']}",
        "--curve-server-secretkey", f"@{tmp_path / 'curve.secret'}",
        f"--curve-client-publickey={client['public']}",
        "--websocket-peer", f"ws://zeek:{WS_PASSWORD}@127.0.0.1:1/v1/messages/json",
        "--websocket", "127.0.0.1:0", "--websocket-token", f"@{tmp_path / 'ws.token'}",
        "--passphrase", f"@{tmp_path / 'passphrase'}", "--log-level", "debug", *tls,
    )  # fmt: skip
    relay = node.expect(r"^relay listening on (\S+)", 30).group(1)
    port = node.expect(r"^metrics listening on \S+:(\d+)", 30).group(1)
    node.expect("^ready$", 30)
    reader = ["--cert", str(certs / "reader.pem"), "--key", str(certs / "reader.key"),
              "--ca", str(certs / "ca.pem")]  # fmt: skip
    shown = run_command("status", "--relay", relay, "--json", *reader)
    assert shown.returncode == 0, shown.stderr
    sources = {s["kind"] for s in json.loads(shown.stdout)["sources"]}
    assert {"zeromq-logs", "websocket"} <= sources
    listeners = {x["listener"] for x in json.loads(shown.stdout)["listeners"]}
    assert listeners == {"relay", "peering", "websocket", "metrics"}
    with pytest.raises(urllib.error.HTTPError) as refused:  # the token is asked for
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)
    assert refused.value.code == 401
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        scraped = answer.read().decode()
    assert 'listener="metrics",reason="unauthorized"} 1.0' in scraped
    # A wrong passphrase is an error that names the key file, not the passphrase tried.
    wrong = run_command("node", "--listen", "127.0.0.1:0", *tls, "--passphrase", "wrong-S3CRET")
    assert wrong.returncode == 2 and str(key) in wrong.stderr
    assert node.signal(signal.SIGINT) == 0
    emitted = "\n".join(
        [node.stderr(), shown.stdout, shown.stderr, scraped, wrong.stdout, wrong.stderr]
    )
    assert "ws://***@127.0.0.1:1/" in emitted  # the WebSocket peer is shown, without password
    for secret in (
        PASSPHRASE, server["secret"], WS_PASSWORD, "wrong-S3CRET", WS_TOKEN, METRICS_TOKEN
    ):  # fmt: skip
        assert secret not in emitted


def test_the_passphrase_comes_from_a_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def flags(**given: str) -> argparse.Namespace:
        return argparse.Namespace(**{flag: given.get(flag) for flag in TLS_FLAGS})

    (tmp_path / "p").write_text(PASSPHRASE + "\n")
    assert tls_flags(flags(passphrase=f"@{tmp_path / 'p'}")) == {"passphrase": PASSPHRASE}
    monkeypatch.setenv(PASSPHRASE_ENV, "from-the-environment")
    assert tls_flags(flags(key="k.pem"))["passphrase"] == "from-the-environment"
    assert tls_flags(flags()) == {}  # without a key it would ask for mutual TLS: not taken
    assert tls_flags(flags(key="k.pem", passphrase="given"))["passphrase"] == "given"
    conf = tmp_path / "node.toml"
    conf.write_text('[tls]\nkey = "k.pem"\npassphrase = "@p"\n')  # relative to the file
    from broker_spark.node.settings import load_node_config

    assert load_node_config(conf).tls.passphrase == PASSPHRASE


def test_settings_and_urls_never_show_secrets() -> None:
    server = generate_keypair()
    s = NodeSettings(curve={"curve_server_secretkey": server["secret"]})
    s.tls = s.tls.replace(passphrase=PASSPHRASE)
    assert server["secret"] not in repr(s) and PASSPHRASE not in repr(s)
    assert without_credentials("wss://u:p@zeek:27759/v1") == "wss://***@zeek:27759/v1"
    assert without_credentials("ws://zeek:27759/v1") == "ws://zeek:27759/v1"


@pytest.mark.parametrize(
    "options",
    [
        {"ssl.passphrse": PASSPHRASE},  # misspelled: still a secret's name
        {"ssl.passphrase": "first-S3CRET", "SSL.PASSPHRASE": PASSPHRASE},  # given twice
        {"zeromq.curveServerSecretKy": PASSPHRASE},
    ],
)
def test_option_errors_do_not_echo_secret_values(options: dict[str, str]) -> None:
    with pytest.raises(BrokerOptionError) as err:
        parse_reader_options({"topics": "zeek/", "listen": ":0", **options})
    assert PASSPHRASE not in str(err.value) and "first-S3CRET" not in str(err.value)
    assert err.value.value is None
