"""The ``broker-spark`` parser, its help and errors, and JSON values in and out (in-process)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import subprocess
import sys

import pytest

from broker_spark.cli import build_parser, main
from broker_spark.cli.args import parse_host_port
from broker_spark.cli.values import parse_value, render_message, render_value, to_plain
from broker_spark.data import Count, Enum, Port
from broker_spark.zeek import Event

COMMANDS = [
    ["node"],
    ["publish"],
    ["subscribe"],
    ["store"],
    ["store", "get"],
    ["store", "put"],
    ["store", "erase"],
    ["store", "keys"],
    ["status"],
    ["topology"],
    ["certs"],
    ["demo"],
    ["bench"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_subcommand_has_help(command: list[str], capsys: pytest.CaptureFixture) -> None:
    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: broker-spark {' '.join(command)}")


#: What running a command needs and building the parser must not load (issue 52).
_HEAVY = (
    "broker_spark.endpoint",
    "asyncio",
    "cryptography",
    "zmq",
    "websockets",
    "pyspark",
    "pyarrow",
    "broker_spark.spool",
)


def test_building_the_parser_loads_none_of_what_the_commands_run() -> None:
    """``--help`` and a usage error import only the flags (``cli/parsers``); the chosen
    command's module comes with what it runs."""
    code = (
        "import sys\n"
        "from broker_spark.cli import build_parser, command_function\n"
        "parsed = build_parser().parse_args(sys.argv[1:])\n"
        f"print(sorted(m for m in {_HEAVY!r} if m in sys.modules))\n"
        "command_function(parsed.run)\n"
        f"print(sorted(m for m in {_HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, "publish", "/t", "1"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    assert out[0] == "[]"
    assert "broker_spark.endpoint" in out[1] and "asyncio" in out[1]


def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("node", "publish", "subscribe", "store", "status", "topology", "certs", "demo"):
        assert f"\n    {name} " in out


def test_version(capsys: pytest.CaptureFixture) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("broker-spark 0.")


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["nonsense"],
        ["node", "--bogus"],
        ["node", "--listen", "localhost:99999"],
        ["node", "--master", "x:oracle"],
        ["publish"],
        ["subscribe", "/t", "--count", "0"],
        ["store", "get", "name"],
        ["--log-level", "loud", "node"],
    ],
)
def test_usage_errors_are_one_line_and_exit_2(argv: list[str], capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("broker-spark: error: "), err


def test_bad_json_value_is_a_usage_error_with_a_hint(capsys: pytest.CaptureFixture) -> None:
    assert main(["publish", "/t", "hello", "--no-tls", "--peer", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "broker-spark: error: VALUE 1 ('hello'): not JSON: Expecting value at column 1 "
        """(a string needs JSON quotes: '"hello"')\n"""
    )


def test_unreachable_peer_is_a_runtime_error(capsys: pytest.CaptureFixture) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["publish", "/t", "1", "--no-tls", "--peer", f"127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"broker-spark: error: cannot connect to 127.0.0.1:{port}: ")
    assert err.count("\n") == 1 and err.count("cannot connect") == 1


def test_positionals_may_follow_options() -> None:
    args = build_parser().parse_args(["publish", "/t", "--peer", "h:1", "1", "-5", '"x"'])
    assert args.values == ["1", "-5", '"x"'] and args.peer == ("h", 1)
    args = build_parser().parse_args(["store", "put", "s", "-k", "k", "1", "--key", "f.key"])
    assert (args.store_key, args.store_value, args.key) == ("k", "1", "f.key")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("host:9999", ("host", 9999)),
        ("9999", ("127.0.0.1", 9999)),
        (":0", ("127.0.0.1", 0)),
        ("[::1]:9999", ("::1", 9999)),
        ("0.0.0.0:1", ("0.0.0.0", 1)),
    ],
)
def test_host_port(text: str, expected: tuple[str, int]) -> None:
    assert parse_host_port(text) == expected


@pytest.mark.parametrize("text", ["host", "host:x", "host:70000", "::1:9999", ""])
def test_bad_host_port(text: str) -> None:
    with pytest.raises(ValueError):
        parse_host_port(text)


# -- values -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", 42),
        ("-7", -7),
        (str(2**64 - 1), Count(2**64 - 1)),
        ("2.5", 2.5),
        ("1e3", 1000.0),
        ('"10.0.0.1"', "10.0.0.1"),
        ("true", True),
        ("null", None),
        ("[1, [2]]", (1, (2,))),
        ('{"a": 1}', {"a": 1}),
        ('{"@data-type": "count", "data": 3}', Count(3)),
        ('[{"@data-type": "port", "data": "80/tcp"}, "x"]', (Port(80, Port.TCP), "x")),
        ('{"@data-type": "enum-value", "data": "Conn::LOG"}', Enum("Conn::LOG")),
    ],
)
def test_plain_and_zeek_json_values(text: str, expected: object) -> None:
    value = parse_value(text)
    assert value == expected and type(value) is type(expected)


def test_inference_only_when_asked() -> None:
    text = '["10.0.0.1", "10.0.0.0/8", "443/tcp", "1500ms", "2024-05-01T12:00:00Z", "host"]'
    assert parse_value(text) == ("10.0.0.1", "10.0.0.0/8", "443/tcp", "1500ms",
                                 "2024-05-01T12:00:00Z", "host")  # fmt: skip
    addr, net, port, span, ts, host = parse_value(text, infer=True)
    assert addr == ipaddress.ip_address("10.0.0.1")
    assert net == ipaddress.ip_network("10.0.0.0/8")
    assert port == Port(443, Port.TCP)
    assert span == dt.timedelta(milliseconds=1500)
    assert ts == dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone.utc)
    assert host == "host"


@pytest.mark.parametrize(
    "text", ["hello", "NaN", "[1,", str(2**64), '{"@data-type": "count", "data": -1}']
)
def test_invalid_values(text: str) -> None:
    with pytest.raises(ValueError):
        parse_value(text)


def test_rendering_formats() -> None:
    value = (Count(1), ipaddress.ip_address("10.0.0.1"), {"x", "a"}, Port(53, Port.UDP))
    assert json.loads(render_value(value, "json"))["@data-type"] == "vector"
    assert parse_value(render_value(value, "json")) == value  # json is lossless
    assert to_plain(value) == [1, "10.0.0.1", ["a", "x"], "53/udp"]
    assert render_value(value, "text") == "(1, 10.0.0.1, {a, x}, 53/udp)"
    assert to_plain({Count(1): dt.timedelta(seconds=2)}) == [[1, 2.0]]


def test_rendering_events() -> None:
    event = Event("ping", "hi", Count(2))._broker_value()
    line = json.loads(render_message("/t", event, "json"))
    assert line["topic"] == "/t" and line["event"] == "ping"
    assert parse_value(json.dumps(line["data"])) == event
    assert json.loads(render_message("/t", event, "plain")) == {
        "topic": "/t",
        "event": "ping",
        "args": ["hi", 2],
    }
    assert render_message("/t", event, "text") == "/t: ping(hi, 2)"
    assert json.loads(render_message("/t", 5, "plain")) == {"topic": "/t", "data": 5}
