"""publish, subscribe, store, status and topology in-process, against real nodes on loopback."""

from __future__ import annotations

import ipaddress
import json
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from test_cli_support import chain, plain_endpoint, wait_until

from broker_spark.cli import main
from broker_spark.data import Count, Port
from broker_spark.data.types import Timespan
from broker_spark.zeek import Event


@pytest.fixture
def node():
    """A node with TLS off, listening on a free port, a subscriber on /t and a store master."""
    ep = plain_endpoint()
    port = ep.listen("127.0.0.1", 0)
    sub = ep.make_subscriber("/t", qsize=1000)
    store = ep.attach_master("kv")
    try:
        yield ep, port, sub, store
    finally:
        ep.shutdown()


def _peer(port: int) -> list[str]:
    return ["--peer", f"127.0.0.1:{port}", "--no-tls"]


def test_publish_values_from_arguments(node, capsys) -> None:
    ep, port, sub, _ = node
    argv = ["publish", "/t/x", "1", '"two"', '{"@data-type": "count", "data": 3}', "[4.5]"]
    assert main(argv + _peer(port)) == 0
    got = sub.get(4, 5.0)
    assert got == [("/t/x", 1), ("/t/x", "two"), ("/t/x", Count(3)), ("/t/x", (4.5,))]
    assert "published 4 messages on /t/x" in capsys.readouterr().err


def test_publish_takes_decimal_timespans(node, capsys) -> None:
    """As zeekpy writes intervals (float nanoseconds), rounded to whole nanoseconds."""
    ep, port, sub, _ = node
    span = '{"@data-type": "timespan", "data": "%s"}'
    argv = ["publish", "/t/x", span % "1500000000.0ns", span % "1.728e+16ns"]
    assert main(argv + _peer(port)) == 0
    assert sub.get(2, 5.0) == [
        ("/t/x", Timespan(1_500_000_000)),
        ("/t/x", Timespan(17_280_000_000_000_000)),
    ]
    assert main(["publish", "/t/x", span % "1.5.0ns", *_peer(port)]) == 2  # a usage error
    assert "timespan" in capsys.readouterr().err


def test_publish_an_event_and_strings(node) -> None:
    ep, port, sub, _ = node
    assert main(["publish", "/t", "--event", "ping", '"hi"', "2", *_peer(port)]) == 0
    topic, value = sub.get(5.0)
    assert Event(value).name() == "ping" and Event(value).args() == ["hi", 2]
    assert main(["publish", "/t", "--string", "not json", "42", *_peer(port)]) == 0
    assert sub.get(2, 5.0) == [("/t", "not json"), ("/t", "42")]


def test_publish_a_file_stops_at_a_bad_line(node, tmp_path: Path, capsys) -> None:
    ep, port, sub, _ = node
    path = tmp_path / "values.jsonl"
    path.write_bytes(b'1\n\n"a"\n{oops\n\xff\n4')  # no newline at the end
    assert main(["publish", "/t", "--file", str(path), *_peer(port)]) == 1
    err = capsys.readouterr().err
    assert err == f"broker-spark: error: {path} line 4: not JSON: Expecting property name " \
        "enclosed in double quotes at column 2\n"  # fmt: skip
    assert sub.get(2, 5.0) == [("/t", 1), ("/t", "a")]  # what came before it arrived
    assert main(["publish", "/t", "--file", str(path), "--skip-invalid", *_peer(port)]) == 0
    assert sub.get(3, 5.0) == [("/t", 1), ("/t", "a"), ("/t", 4)]
    err = capsys.readouterr().err
    assert "line 4: not JSON" in err and "line 5: not UTF-8 (byte 0) (skipped)" in err


def test_publish_events_from_lines(node, tmp_path: Path) -> None:
    ep, port, sub, _ = node
    path = tmp_path / "events.jsonl"
    path.write_text('["a", 1]\n["b", 2]\n')
    assert main(["publish", "/t", "--event", "e", "--file", str(path), *_peer(port)]) == 0
    assert [Event(v).args() for _, v in sub.get(2, 5.0)] == [["a", 1], ["b", 2]]


def test_publish_typed_events_of_a_signature(node, tmp_path: Path, capsys) -> None:
    """--signature: arguments (VALUEs, or lines as arrays or objects by name) get Zeek's types."""
    ep, port, sub, _ = node
    sig = "Intel::seen(indicator: string, host: addr, p: port, n: count)"
    argv = ["publish", "/t", "--signature", sig, '"evil.com"', '"10.0.0.1"', '"80/tcp"', "3"]
    assert main(argv + _peer(port)) == 0
    path = tmp_path / "events.jsonl"
    path.write_text(
        '["a.com", "10.0.0.2", "53/udp", 4]\n'
        '{"n": 5, "p": "0/unknown", "host": "::1", "indicator": "b.com"}\n'
        '["c.com", "10.0.0.3", "22/tcp", -1]\n'
    )
    assert main(["publish", "/t", "--signature", sig, "--file", str(path), *_peer(port)]) == 1
    assert "line 3: argument n (count): -1 is out of range" in capsys.readouterr().err
    events = [Event(v) for _, v in sub.get(3, 5.0)]
    assert {e.name() for e in events} == {"Intel::seen"}
    assert [e.args() for e in events] == [
        ["evil.com", ipaddress.ip_address("10.0.0.1"), Port(80, Port.TCP), Count(3)],
        ["a.com", ipaddress.ip_address("10.0.0.2"), Port(53, Port.UDP), Count(4)],
        ["b.com", ipaddress.ip_address("::1"), Port(0, Port.Unknown), Count(5)],
    ]
    assert type(events[0].args()[3]) is Count
    bad = ["publish", "/t", "--signature", sig, '"x"', '"not an address"', '"80/tcp"', "1"]
    assert main(bad + _peer(port)) == 2
    assert "argument host (addr): 'not an address' is not an addr" in capsys.readouterr().err
    assert main(["publish", "/t", "--signature", "seen(n count)", "1", *_peer(port)]) == 2
    assert "--signature: expected ':'" in capsys.readouterr().err


def test_publish_waits_for_a_subscriber_when_asked(node, capsys) -> None:
    ep, port, sub, _ = node
    argv = ["publish", "/nobody", "1", "--await-subscriber", "0.2", *_peer(port)]
    assert main(argv) == 1
    assert "no subscriber of /nobody known to" in capsys.readouterr().err


def test_publish_through_the_websocket_api(node) -> None:
    ep, port, sub, _ = node
    ws_port = ep.web_socket_listen("127.0.0.1", 0)
    assert main(["publish", "/t/ws", "7", "--ws", f"ws://127.0.0.1:{ws_port}", "--no-tls"]) == 0
    assert sub.get(5.0) == ("/t/ws", 7)


def test_publish_generates_the_demo_events(node, capsys) -> None:
    ep, port, sub, _ = node
    argv = ["publish", "/t/conn", "--generate", "conn-events", "--rate", "2000", "--seconds", "0.2"]
    assert main(argv + _peer(port)) == 0
    got = sub.get(400, 5.0)
    assert len(got) == 400 and sub.get(0.05) is None  # 2000/s for 0.2 s, exactly
    event = Event(got[0][1])
    assert event.name() == "conn" and len(event.args()) == 8
    assert "published 400 events on /t/conn" in capsys.readouterr().err
    assert main(["publish", "/t", "1", "--generate", "conn", *_peer(port)]) == 2


def test_publish_generates_conn_log_records_as_zeek_sends_them(node, capsys) -> None:
    from broker_spark.zeek import Batch, LogCreate, as_message, standard_schema

    ep, port, sub, _ = node
    argv = ["publish", "/t/conn", "--generate", "conn", "--rate", "2000", "--seconds", "0.3"]
    assert main(argv + _peer(port)) == 0
    messages = []
    while (item := sub.get(0.5)) is not None:
        messages.append(as_message(item[1]))
    assert isinstance(messages[0], LogCreate)
    assert messages[0].schema() == standard_schema("conn")
    batches = messages[1:]
    assert all(isinstance(b, Batch) and 1 <= b.size() <= 400 for b in batches)
    assert sum(b.size() for b in batches) == 600  # 2000/s for 0.3 s, exactly
    record = batches[0].messages()[0].record(standard_schema("conn"))
    assert record["service"] in {"dns", "http", "ssl", "smtp", "ssh"}
    assert "published 600 records on /t/conn" in capsys.readouterr().err


def test_subscribe_prints_json_lines(node, capsys) -> None:
    ep, port, _, _ = node
    result: list[int] = []
    argv = ["subscribe", "/s", "--count", "2", "--timeout", "10", "--format", "plain"]
    thread = threading.Thread(target=lambda: result.append(main(argv + _peer(port))))
    thread.start()
    try:
        assert wait_until(lambda: any(t.string() == "/s" for t in ep.peer_subscriptions()))
        ep.publish("/s/a", {"k": Count(1)})
        ep.publish("/s/b", Event("hello", "x"))
        ep.publish("/s/c", "not printed")
    finally:
        thread.join(15)
    assert result == [0]
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(x) for x in lines] == [
        {"topic": "/s/a", "data": {"k": 1}},
        {"topic": "/s/b", "event": "hello", "args": ["x"]},
    ]


def test_subscribe_times_out_short_of_its_count(node, capsys) -> None:
    ep, port, _, _ = node
    assert main(["subscribe", "/q", "--count", "1", "--timeout", "0.3", *_peer(port)]) == 1
    assert "timed out after 0.3 s with 0 of 1 messages" in capsys.readouterr().err


def test_store_commands(node, capsys) -> None:
    ep, port, _, master = node
    assert main(["store", "put", "kv", "-k", "a", "[1, 2]", *_peer(port)]) == 0
    assert master.get("a") == (1, 2)
    argv = ["store", "put", "kv", '{"@data-type": "count", "data": 7}', '"x"', *_peer(port)]
    assert main(argv) == 0
    assert master.get(Count(7)) == "x"
    capsys.readouterr()
    assert main(["store", "get", "kv", "-k", "a", "--format", "plain", *_peer(port)]) == 0
    assert capsys.readouterr().out == "[1, 2]\n"
    assert main(["store", "keys", "kv", "--format", "text", *_peer(port)]) == 0
    assert capsys.readouterr().out.splitlines() == ["7", "a"]
    assert main(["store", "erase", "kv", "-k", "a", *_peer(port)]) == 0
    assert master.get("a") is None
    assert main(["store", "get", "kv", "-k", "a", *_peer(port)]) == 1
    assert capsys.readouterr().err.endswith("\nbroker-spark: error: store 'kv' has no key \"a\"\n")
    assert main(["store", "get", "other", "-k", "a", "--timeout", "0.3", *_peer(port)]) == 1
    assert "no master of store 'other' answered within 0.3 s" in capsys.readouterr().err
    assert main(["store", "get", "kv", "a", *_peer(port)]) == 2  # a is no JSON: -k needed
    assert "use -k" in capsys.readouterr().err


def test_status_and_topology_of_a_chain(tmp_path: Path, capsys) -> None:
    with chain(3) as (eps, ports):
        a, b, c = eps
        c.make_subscriber("/from-c")
        b.forward("/via-b")
        ids = [ep.node_id() for ep in eps]
        assert wait_until(lambda: a._tcp().fabric.router.is_reachable(c._core.node_id))
        assert main(["status", *_peer(ports[0])]) == 0
        out = capsys.readouterr().out
        assert f"node           {ids[0]}  at 127.0.0.1:{ports[0]}  (protocol 2)" in out
        assert "routes         2 endpoint(s) reachable" in out
        for node_id in ids:
            assert node_id[:8] in out
        assert f"  {ids[2][:8]}  2     {ids[1][:8]}  /from-c" in out
        assert main(["status", "--json", *_peer(ports[0])]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["peers"] == [ids[1]]
        assert data["endpoints"][ids[2]] == {"subscriptions": ["/from-c"], "route": ids[1:]}
        assert data["endpoints"][ids[1]]["subscriptions"] == ["/via-b"]
        svg = tmp_path / "net.svg"
        assert main(["topology", "--out", str(svg), *_peer(ports[1])]) == 0
        assert capsys.readouterr().out == f"wrote {svg}: 3 endpoints, 2 links\n"
    root = ET.parse(svg).getroot()
    ns = {"s": "http://www.w3.org/2000/svg"}
    assert len(root.findall(".//s:circle[@class='node']", ns)) == 3
    assert len(root.findall(".//s:line[@class='link']", ns)) == 2
    labels = {t.text for t in root.findall(".//s:text[@class='label']", ns)}
    assert labels == {i[:8] for i in ids}


def test_status_of_a_version_1_node(capsys) -> None:
    ep = plain_endpoint(versions=(1, 1))
    try:
        ep.make_subscriber("zeek/events")
        port = ep.listen("127.0.0.1", 0)
        assert main(["status", *_peer(port)]) == 0
        out = capsys.readouterr().out
        assert "(protocol 1)" in out and "subscriptions  zeek/events" in out
        assert "unknown: protocol version 1 shares no routing information" in out
    finally:
        ep.shutdown()


def test_topology_snapshot_of_an_endpoint() -> None:
    with chain(2) as (eps, ports):
        a, b = eps
        assert wait_until(lambda: b.node_id() in a.topology()["endpoints"])
        snap = a.topology()
        assert snap["node"] == a.node_id() and snap["filter"] == []
        (peer,) = snap["peers"]
        assert peer["node"] == b.node_id() and peer["version"] == 2 and peer["inbound"]
        assert snap["endpoints"][b.node_id()]["paths"] == [[b.node_id()]]
        json.dumps(snap)  # plain data


def test_a_peer_s_filter_in_the_topology_is_what_reaches_it() -> None:
    """A version 2 peer's ``filter`` is its own subscription as the router knows it, not
    the union of everyone's that the fabric advertises on each link: a peer that asked
    for nothing shows nothing while another asked for logs, and once it shows a topic,
    what the node publishes on it reaches it. A version 1 peer shows the filter it stated."""
    node = plain_endpoint()
    port = node.listen("127.0.0.1", 0)
    conn, quiet, zeek = plain_endpoint(), plain_endpoint(), plain_endpoint(versions=(1, 1))
    try:
        conn.make_subscriber("zeek/logs/conn")
        zeek.make_subscriber("zeek/logs/weird")
        for ep in (conn, quiet, zeek):
            ep.peer("127.0.0.1", port)

        def filters() -> dict[str, list[str]]:
            return {p["node"]: p["filter"] for p in node.topology()["peers"]}

        assert wait_until(lambda: conn.node_id() in node.topology()["endpoints"])
        assert wait_until(lambda: len(filters()) == 3)
        assert filters() == {
            conn.node_id(): ["zeek/logs/conn"],
            quiet.node_id(): [],
            zeek.node_id(): ["zeek/logs/weird"],
        }
        dns = quiet.make_subscriber("zeek/logs/dns")
        assert wait_until(lambda: filters()[quiet.node_id()] == ["zeek/logs/dns"])
        node.publish("zeek/logs/dns", "the first message after it shows")
        assert dns.get(10.0) == ("zeek/logs/dns", "the first message after it shows")
    finally:
        for ep in (conn, quiet, zeek, node):
            ep.shutdown()


def test_connection_count_drops_after_unpeer() -> None:
    from broker_spark.introspect import connection_count

    with chain(2) as (eps, ports):
        a, b = eps
        assert connection_count(b) == 1
        b.unpeer("127.0.0.1", ports[0])
        assert wait_until(lambda: connection_count(b) == 0)


def test_node_serves_until_stopped(tmp_path: Path) -> None:
    """The command's settings run by the node part's Python API (what the command runs
    under its signals): ready once it announced every address, gone after stop()."""
    from broker_spark.cli import build_parser
    from broker_spark.cli.node import settings_from
    from broker_spark.node import Node

    db = tmp_path / "m.sqlite"
    args = build_parser().parse_args(
        [
            "node",
            "--listen",
            ":0",
            "--no-tls",
            "--websocket",
            "127.0.0.1:0",
            "--master",
            f"m:sqlite:{db}",
            "--forward",
            "/fwd",
        ]  # fmt: skip
    )
    heard: list[str] = []
    with Node(settings_from(args), announce=heard.append) as node:
        assert node.running
        lines = list(node.announcements)
        listening = node.address()
    assert lines == heard
    assert lines[0].startswith("node ") and lines[-1] == "ready"
    assert listening is not None and listening[1] > 0
    assert lines[1] == f"listening on 127.0.0.1:{listening[1]}"
    assert lines[2].startswith("websocket listening on 127.0.0.1:")
    assert db.is_file() and not node.running


def test_a_node_that_cannot_start_says_why(tmp_path: Path) -> None:
    from broker_spark.exits import UsageError
    from broker_spark.node import Node, NodeSettings

    settings = NodeSettings(listen=None, spool_dir=str(tmp_path / "spool"))
    with pytest.raises(UsageError, match="--spool needs topics"):
        Node(settings).start()


def test_node_that_cannot_listen(node, capsys) -> None:
    ep, port, _, _ = node
    assert main(["node", "--listen", f"127.0.0.1:{port}", "--no-tls"]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("node ")
    assert captured.err.startswith(f"broker-spark: error: cannot listen on 127.0.0.1:{port}: ")
    assert captured.err.count("\n") == 1 and "in use" in captured.err
