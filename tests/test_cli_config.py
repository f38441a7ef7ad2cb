"""Node configuration files: conf/*.toml, the checks on unknown keys and types, flags over files."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_support import ROOT

from broker_spark.cli import build_parser, main
from broker_spark.cli.node import settings_from
from broker_spark.exits import UsageError
from broker_spark.node.settings import ConfigError, NodeSettings, load_node_config

CONF_FILES = sorted((ROOT / "conf").glob("*.toml"))


def test_the_examples_are_there() -> None:
    names = {p.name for p in CONF_FILES}
    assert {
        "standalone.toml",
        "tls-a.toml",
        "tls-b.toml",
        "zeek-facing.toml",
        "relay-zeromq.toml",
    } <= names
    assert (ROOT / "conf" / "log4j2.properties").is_file()


@pytest.mark.parametrize("path", CONF_FILES, ids=lambda p: p.name)
def test_every_example_config_loads(path: Path) -> None:
    settings = load_node_config(path)
    config = settings.configuration()
    assert config.options.ttl >= 1
    if path.name.startswith("tls-"):
        # Certificate paths resolve next to the file: conf/certs/, where `certs` writes.
        assert Path(settings.tls.certificate).parent == ROOT / "conf" / "certs"
        assert config.authenticated
    if path.name == "zeek-facing.toml":
        assert settings.websocket is not None and "zeek/" in settings.forward
    if path.name == "relay-zeromq.toml":
        assert settings.zeromq_logs == "tcp://127.0.0.1:5557" and settings.listen is None
        assert settings.spool_dir == str(ROOT / "conf" / "spool")
        assert settings.metrics == ("127.0.0.1", 9101) and settings.relay == ("127.0.0.1", 9998)


def test_log4j2_quiets_spark() -> None:
    text = (ROOT / "conf" / "log4j2.properties").read_text()
    assert "rootLogger.level = warn" in text


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "node.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[endpoint]\nlisen = '1.2.3.4:1'\n",
            "unknown key 'lisen' in [endpoint] (did you mean 'listen'?)",
        ),
        ("[endpoints]\n", "unknown key 'endpoints' in the file"),
        ("[tls]\ncertfile = 'x'\n", "unknown key 'certfile' in [tls]"),
        ("[options]\nttl = 0\n", "ttl must be an integer in [1, 65535]"),
        ("[options]\nnope = 1\n", "unknown key 'nope' in [options]"),
        ("[endpoint]\nretry = 'soon'\n", "[endpoint] retry must be a number, got 'soon'"),
        ("[endpoint]\npeers = '1.2.3.4:1'\n", "[endpoint] peers must be a list, got"),
        ("[endpoint]\nlisten = 'nowhere'\n", "[endpoint] listen: 'nowhere' is not HOST:PORT"),
        ("[tls]\ndisable = 'yes'\n", "[tls] disable must be true or false"),
        ("[[master]]\nname = 's'\nbackend = 'sqlite'\n", "the sqlite backend needs a path"),
        ("[[master]]\nbackend = 'memory'\n", "[[master]] needs a name"),
        ("[[clone]]\nname = 's'\npath = 'x'\n", "unknown key 'path' in [[clone]]"),
        ("master = 1\n", "master must be an array of tables"),
        ("[log]\nlevel = 'loud'\n", "[log] level must be one of"),
        ("[endpoint\n", "invalid TOML"),
        ("[spool]\ndirs = 'x'\n", "unknown key 'dirs' in [spool] (did you mean 'dir'?)"),
        ("[spool]\nretention_bytes = -1\n", "[spool] retention_bytes must be positive"),
        ("[spool]\nfsync = 'sometimes'\n", "[spool] fsync must be one of never, interval"),
        ("[spool]\nmin_free_bytes = -1\n", "[spool] min_free_bytes must be zero"),
        ("[spool]\nrelay_decoders = -1\n", "[spool] relay_decoders must be zero"),
        ("[spool]\nrelay_decoders = 'all'\n", "[spool] relay_decoders must be a number, got 'all'"),
        ("[spool]\nrelay = 'here'\n", "[spool] relay: 'here' is not HOST:PORT"),
    ],
)
def test_bad_configs_name_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_node_config(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)


def test_a_bad_config_is_a_one_line_usage_error(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path, "[websocket]\nport = 9997\n")
    assert main(["node", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"broker-spark: error: {path}: unknown key 'port' in [websocket]\n"
    assert main(["node", "--config", str(tmp_path / "missing.toml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_relative_paths_are_relative_to_the_file(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "[tls]\ncertificate = 'c/a.pem'\nkey = '/abs/a.key'\n"
        "[[master]]\nname = 's'\nbackend = 'SQLite'\npath = 'data/s.db'\n",
    )
    s = load_node_config(path)
    assert s.tls.certificate == str(tmp_path / "c" / "a.pem")
    assert s.tls.key == "/abs/a.key"
    assert (s.masters[0].backend, s.masters[0].path) == ("sqlite", str(tmp_path / "data/s.db"))


def test_flags_override_the_file(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "[endpoint]\nlisten = '127.0.0.1:9991'\npeers = ['a:1', 'b:2']\nforward = ['/x']\n"
        "[tls]\ncertificate = 'a.pem'\nkey = 'a.key'\ncafile = 'ca.pem'\n[options]\nttl = 5\n",
    )
    args = build_parser().parse_args(
        [
            "node",
            "--config",
            str(path),
            "--listen",
            ":0",
            "--peer",
            "c:3",
            "--cert",
            "/b.pem",
            "--ttl",
            "9",
            "--master",
            "m:sqlite:/tmp/m.db",
            "--no-forwarding",
        ]  # fmt: skip
    )
    s = settings_from(args)
    assert s.listen == ("127.0.0.1", 0)
    assert s.peers == [("c", 3)]  # replaced, not appended
    assert s.forward == ["/x"]  # not given: the file's
    assert s.tls.certificate == "/b.pem" and s.tls.key == str(tmp_path / "a.key")
    assert s.options == {"ttl": 9, "disable_forwarding": True}
    assert [(m.name, m.backend, m.path) for m in s.masters] == [("m", "sqlite", "/tmp/m.db")]
    no_listen = settings_from(build_parser().parse_args(["node", "--no-listen"]))
    assert no_listen.listen is None and no_listen == NodeSettings(listen=None)


def test_a_spool_section_and_its_flags(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "[spool]\ndir = 'spool'\ntopics = ['zeek/logs/']\nrelay = '0.0.0.0:9990'\n"
        "retention_bytes = 4096\nretention_seconds = 60\nsegment_bytes = 2048\n",
    )
    s = load_node_config(path)
    assert s.spool_segment_bytes == 2048
    assert (s.spool_dir, s.spool_topics, s.relay) == (
        str(tmp_path / "spool"),
        ["zeek/logs/"],
        ("0.0.0.0", 9990),
    )
    assert (s.spool_retention_bytes, s.spool_retention_seconds) == (4096, 60.0)
    args = build_parser().parse_args(
        ["node", "--config", str(path), "--spool-retention", "1m", "--spool-segment", "64k",
         "--no-relay"]
    )  # fmt: skip
    flags = settings_from(args)
    assert (flags.spool_retention_bytes, flags.relay) == (1 << 20, None)
    assert flags.spool_segment_bytes == 64 << 10
    from broker_spark.node.serve import relay_node as _relay_node

    node = _relay_node(flags)  # the spool takes the file size: retention drops whole files
    try:
        assert node.service.spool.segment_bytes == 64 << 10
    finally:
        node.stop()
    assert main(["node", "--subscribe", "zeek/", "--no-tls"]) == 2  # topics without a spool


def test_the_relay_decodes_for_as_many_tasks_as_it_is_told(tmp_path: Path) -> None:
    from broker_spark.node.serve import relay_node as _relay_node
    from broker_spark.spool.relay_server import DEFAULT_DECODERS

    assert load_node_config(_write(tmp_path, "")).relay_decoders == DEFAULT_DECODERS
    path = _write(tmp_path, "[spool]\ndir = 'spool'\ntopics = ['zeek/']\nrelay_decoders = 0\n")
    assert load_node_config(path).relay_decoders == 0
    args = ["node", "--config", str(path), "--relay", "127.0.0.1:0", "--relay-decoders", "3"]
    flags = settings_from(build_parser().parse_args(args))
    assert flags.relay_decoders == 3
    node = _relay_node(flags)
    try:
        assert node.settings.decoders == 3  # what the node's relay server is made with
    finally:
        node.stop()
    flags.relay_decoders = -1
    with pytest.raises(UsageError, match="--relay-decoders must be 0"):
        _relay_node(flags)


def test_zeromq_websocket_and_metrics_sections(tmp_path: Path) -> None:
    path = tmp_path / "relay.toml"
    path.write_text(
        "[zeromq]\nlogs = 'tcp://0.0.0.0:5557'\nproxy = 'zeek-proxy'\n"
        "curve_client_publickey = 'abc'\n"
        "[websocket]\npeers = ['ws://zeek:27759/v1/messages/json']\n"
        "[metrics]\nlisten = '0.0.0.0:9101'\n"
    )
    s = load_node_config(path)
    assert (s.zeromq_logs, s.zeromq_proxy) == ("tcp://0.0.0.0:5557", "zeek-proxy")
    assert s.curve == {"client_publickey": "abc"}
    assert s.websocket_peers == ["ws://zeek:27759/v1/messages/json"]
    assert s.metrics == ("0.0.0.0", 9101)
    path.write_text("[zeromq]\ncurve_server_key = 'x'\n")
    with pytest.raises(ConfigError, match="unknown key 'curve_server_key' in \\[zeromq\\]"):
        load_node_config(path)
