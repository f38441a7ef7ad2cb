"""A node's listeners off loopback authenticate their clients, or the user says otherwise.

``broker-spark node`` bound to an address other hosts reach must require mutual
TLS (Broker peers, relay readers, WebSocket clients) or CURVE (the ZeroMQ
logger); ``--allow-anonymous`` opts out with a warning at start.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from test_cli_support import run_command

from broker_spark.addresses import is_loopback
from broker_spark.cli.errors import UsageError
from broker_spark.config import TLSSettings
from broker_spark.node.exposure import check_exposure, open_listeners
from broker_spark.node.settings import NodeSettings, load_node_config
from broker_spark.zeromq.curve import CurveKeys, generate_keypair

pytestmark = pytest.mark.timeout(60)

MUTUAL = TLSSettings(certificate="a.pem", key="a.key", cafile="ca.pem")


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"])
def test_loopback_addresses_and_names(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize(
    "host", ["", "*", "0.0.0.0", "::", "10.0.0.5", "192.168.1.1", "no-such-host.invalid"]
)
def test_wildcards_other_addresses_and_unknown_names_are_reachable(host: str) -> None:
    assert not is_loopback(host)


def test_the_defaults_bind_loopback_and_need_nothing() -> None:
    s = NodeSettings(spool_dir="spool", websocket=("127.0.0.1", 9997), metrics=("::1", 9101))
    assert open_listeners(s) == []
    assert check_exposure(s) == []


def test_tokens_authenticate_the_websocket_api_over_tls_and_the_metrics() -> None:
    s = NodeSettings(
        listen=None, spool_dir="spool", relay=None, websocket=("0.0.0.0", 9997),
        metrics=("0.0.0.0", 9101),
    )  # fmt: skip
    assert [o.flag.split()[0] for o in open_listeners(s)] == ["--websocket", "--metrics"]
    s.websocket_token, s.metrics_token = "w" * 32, "m" * 32
    assert open_listeners(s) == []
    # Over plain TCP a token can be read off the wire: it authenticates nothing.
    s.tls = TLSSettings(disable_ssl=True)
    assert [o.flag.split()[0] for o in open_listeners(s)] == ["--websocket"]
    assert "--websocket-token over TLS" in open_listeners(s)[0].remedy


def test_tokens_from_the_config_file_and_its_files(tmp_path: Path) -> None:
    (tmp_path / "ws.token").write_text("ws-secret-1234\n")
    conf = tmp_path / "node.toml"
    conf.write_text(
        '[websocket]\nlisten = "0.0.0.0:9997"\ntoken = "@ws.token"\n'
        '[metrics]\nlisten = "127.0.0.1:0"\ntoken = "metrics-secret-5678"\n'
    )
    s = load_node_config(conf)
    assert (s.websocket_token, s.metrics_token) == ("ws-secret-1234", "metrics-secret-5678")
    assert "secret" not in repr(s)  # tokens stay out of reprs and logs
    conf.write_text("[metrics]\ntoken = 123456\n")
    with pytest.raises(UsageError) as err:
        load_node_config(conf)
    assert "[metrics] token must be a string" in str(err.value) and "123456" not in str(err.value)


@pytest.mark.parametrize(
    ("change", "flag"),
    [
        ({"listen": ("0.0.0.0", 9999)}, "--listen 0.0.0.0:9999"),
        ({"websocket": ("10.0.0.5", 9997)}, "--websocket 10.0.0.5:9997"),
        ({"spool_dir": "spool", "relay": ("::", 9998)}, "--relay [::]:9998"),
        ({"zeromq_logs": "tcp://0.0.0.0:5557"}, "--zeromq-logs tcp://0.0.0.0:5557"),
        ({"spool_dir": "spool", "relay": None, "metrics": ("", 9101)}, "--metrics :9101"),
    ],
)
def test_a_listener_off_loopback_without_authentication_is_refused(change, flag) -> None:
    s = NodeSettings(**change)
    with pytest.raises(UsageError) as err:
        check_exposure(s)
    text = str(err.value)
    assert text.startswith(flag) and "--allow-anonymous" in text
    # Opting out: the node starts, with one warning naming that listener.
    s.allow_anonymous = True
    warnings = check_exposure(s)
    assert len(warnings) == 1 and warnings[0].startswith(flag)


def test_mutual_tls_authenticates_peers_readers_and_websocket_clients() -> None:
    s = NodeSettings(
        listen=("0.0.0.0", 9999), websocket=("0.0.0.0", 9997), spool_dir="spool",
        relay=("0.0.0.0", 9998), tls=MUTUAL,
    )  # fmt: skip
    assert open_listeners(s) == []
    # Certificates with TLS turned off authenticate nothing.
    s.tls = MUTUAL.replace(disable_ssl=True)
    assert [o.flag.split()[0] for o in open_listeners(s)] == ["--listen", "--websocket", "--relay"]
    # Anonymous TLS (Broker's default) encrypts but authenticates nobody.
    s.tls = TLSSettings()
    assert len(open_listeners(s)) == 3


def test_a_relay_without_a_spool_serves_nothing() -> None:
    assert open_listeners(NodeSettings(listen=None, relay=("0.0.0.0", 9998))) == []


def test_curve_authenticates_the_zeromq_logger() -> None:
    server, client = generate_keypair(), generate_keypair()
    keys = CurveKeys(
        server_publickey=server["public"], server_secretkey=server["secret"],
        client_publickey=client["public"],
    )  # fmt: skip
    s = NodeSettings(listen=None, zeromq_logs="tcp://0.0.0.0:5557", spool_dir="spool")
    assert open_listeners(s, keys) == []
    assert [o.flag for o in open_listeners(s, CurveKeys())] == ["--zeromq-logs tcp://0.0.0.0:5557"]
    # ipc:// and loopback endpoints are this host's only.
    for local in ("ipc:///tmp/logs.sock", "tcp://127.0.0.1:5557"):
        assert open_listeners(NodeSettings(listen=None, zeromq_logs=local)) == []


def test_the_refusal_names_every_open_listener() -> None:
    s = NodeSettings(listen=("0.0.0.0", 9999), spool_dir="spool", relay=("0.0.0.0", 9998))
    with pytest.raises(UsageError) as err:
        check_exposure(s)
    assert "--listen 0.0.0.0:9999" in str(err.value) and "--relay 0.0.0.0:9998 too" in str(
        err.value
    )


def test_allow_anonymous_from_the_config_file(tmp_path: Path) -> None:
    conf = tmp_path / "node.toml"
    conf.write_text('[endpoint]\nlisten = "0.0.0.0:9999"\nallow_anonymous = true\n')
    s = load_node_config(conf)
    assert s.allow_anonymous and len(check_exposure(s)) == 1
    conf.write_text('[endpoint]\nallow_anonymous = "yes"\n')
    with pytest.raises(UsageError, match="allow_anonymous"):
        load_node_config(conf)


def test_the_node_command_refuses_then_starts_with_a_warning(spawn) -> None:
    refused = run_command("node", "--listen", "0.0.0.0:0", "--no-tls")
    assert refused.returncode == 2 and refused.stdout == ""
    err = refused.stderr
    assert err.startswith("broker-spark: error: --listen 0.0.0.0:0 is reachable from other hosts")
    assert err.count("\n") == 1 and "Traceback" not in err
    node = spawn("node", "--listen", "0.0.0.0:0", "--no-tls", "--allow-anonymous")
    node.expect("^ready$")
    assert "--listen 0.0.0.0:0 accepts unauthenticated clients" in node.stderr()
    assert node.signal(signal.SIGINT) == 0


@pytest.mark.slow  # 3 s of a command's run: make test-slow (make test stays under 5 minutes)
def test_the_logs_command_follows_the_same_rule() -> None:
    refused = run_command("logs", "--listen", "0.0.0.0:0", "--timeout", "1")
    assert refused.returncode == 2
    assert refused.stderr.startswith("broker-spark: error: --listen 0.0.0.0:0 is reachable")
    refused = run_command("logs", "--zeromq-bind", "tcp://0.0.0.0:0", "--timeout", "1")
    assert refused.returncode == 2
    assert refused.stderr.startswith("broker-spark: error: --zeromq-bind tcp://0.0.0.0:0 is")
    opted = run_command("logs", "--listen", "0.0.0.0:0", "--timeout", "0.5", "--allow-anonymous")
    assert opted.returncode == 0, opted.stderr
    assert "--listen 0.0.0.0:0 accepts unauthenticated clients" in opted.stderr
