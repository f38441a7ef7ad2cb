"""Events over Zeek's ZeroMQ cluster backend: the recorded messages, and joining a real proxy.

``zeek-zmq-events`` holds what a real Zeek (9.1.0-dev) published through its proxy
(four frames: topic, node id, ``broker-bin-v1``, Broker binary data) and what it
accepted and rejected. The proxy here is pyzmq's ``proxy_steerable`` on XPUB/XSUB
with Zeek's socket options (``zeromq_proxy.py``); the "Zeek node" on the other side
is raw pyzmq sockets speaking exactly the recorded frames.
"""

from __future__ import annotations

import time

import pytest
from zeek_recordings import zmq_messages
from zeromq_proxy import zeek_node, zeromq_proxy

import broker_spark as broker
from broker_spark.data.binary import decode, encode
from broker_spark.data.types import Count, Port
from broker_spark.errors import EC
from broker_spark.zeek import Event
from broker_spark.zeromq.curve import CurveKeys, generate_keypair
from broker_spark.zeromq.proxy_link import wait_until

pytestmark = pytest.mark.timeout(60)

EVENTS = "zeek-zmq-events"


def _plain() -> broker.Endpoint:
    return broker.Endpoint(broker.Configuration(broker.BrokerOptions(disable_ssl=True)))


def test_every_recorded_event_decodes_to_zeeks_values_and_encodes_back() -> None:
    received = zmq_messages(EVENTS, "python/sub_received.jsonl")
    assert len(received) == 18
    names = []
    for topic, node, serializer, payload in received:
        assert topic == b"zeek.test.from-zeek.values" and serializer == b"broker-bin-v1"
        assert node.startswith(b"zeromq_")
        value = decode(payload)
        assert encode(value) == payload
        event = Event(value)
        assert event.valid()
        names.append(event.name())
    assert names[0] == "ZTest::ev_count" and names[-1] == "ZTest::ev_all"
    first = Event(decode(received[0][3]))
    assert first.args() == [Count(0), Count(42), Count(2**64 - 1)]  # Zeek's printout: 0, 42, max
    # what Python sent Zeek, re-encoded from our decoding: the recorded bytes
    for frames in zmq_messages(EVENTS, "python/sent.jsonl"):
        if frames[2] == b"broker-bin-v1":
            assert encode(decode(frames[3])) == frames[3]


def _as_zeek_json(value):
    """A decoded value as Zeek's ``to_json`` writes it (the printout's ``json=``), for the
    types whose JSON says everything (records, intervals, patterns and composite keys are
    compared by their other tests)."""
    import datetime as dt
    import ipaddress

    from broker_spark.data.types import Enum

    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):  # not UTF-8: Zeek escapes what is not printable ASCII
        return "".join(chr(c) if 32 <= c < 127 else f"\\x{c:02x}" for c in value)
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address | ipaddress._BaseNetwork):
        return str(value)
    if isinstance(value, Port):
        return {"port": value.number(), "proto": ["unknown", "tcp", "udp", "icmp"][value.type()]}
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, tuple):
        return [_as_zeek_json(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted(_as_zeek_json(v) for v in value)
    if isinstance(value, dict):
        return {str(k): _as_zeek_json(v) for k, v in value.items()}
    raise TypeError(type(value))


#: Types whose JSON (Zeek's to_json) does not show the value as the others do: intervals
#: (``"1.0 sec 500.0 msecs"``), patterns, records (unset fields left out) and composite keys.
_NOT_COMPARED = {
    "interval",
    "pattern",
    "ZTest::Rec",
    "set[addr,port]",
    "table[count,string] of addr",
}


def test_every_recorded_event_holds_the_values_zeek_printed() -> None:
    import json

    from recorded import VECTORS

    events = {}
    for frames in zmq_messages(EVENTS, "python/sub_received.jsonl"):
        event = Event(decode(frames[3]))
        events[event.name().removeprefix("ZTest::")] = event.args()
    position: dict[str, int] = {}
    compared = 0
    for line in (VECTORS / EVENTS / "zeek" / "stdout.txt").read_text().splitlines():
        if not line.startswith("SEND ") or "(no arguments)" in line:
            continue
        name, _arg, rest = line[5:].split(" ", 2)
        kind = rest.split(" print=")[0].removeprefix("type=")
        i = position[name] = position.get(name, -1) + 1
        value = events[name][i]
        try:
            printed = json.loads(rest.rsplit(" json=", 1)[1])
        except ValueError:
            continue  # Zeek's JSON of bytes that are not UTF-8 (\x escapes) is not JSON
        if kind in _NOT_COMPARED:
            continue
        if kind.startswith("set["):
            printed = sorted(printed)
        got = _as_zeek_json(value)
        if kind == "time":
            assert abs(got - printed) < 1e-6, line
        else:
            assert got == printed, line
        compared += 1
    assert sum(len(a) for a in events.values()) == sum(position.values()) + len(position)
    assert compared == 50, compared  # of the 60 arguments Zeek printed


def test_subscriptions_as_the_proxy_forwards_them() -> None:
    subs = zmq_messages(EVENTS, "python/xpub_subscriptions.jsonl")
    assert [f[0] for f in subs] == [
        b"\x01zeek.test.to-zeek.",
        b"\x01zeek/supervisor",
        b"\x01zeek/table/",
        b"\x01zeek.test.from-zeek.",
    ]


def test_a_joined_endpoint_exchanges_zeeks_frames_with_a_zeek_node() -> None:
    recorded = zmq_messages(EVENTS, "python/sub_received.jsonl")
    with zeromq_proxy() as proxy, _plain() as ep:
        sub = ep.make_subscriber("zeek.test.from-zeek.")
        statuses = ep.make_status_subscriber(True)
        assert ep.zeromq_join(proxy.xpub, proxy.xsub)
        codes = [s.code() for s in statuses.poll()]
        assert codes[:2] == [broker.SC.EndpointDiscovered, broker.SC.PeerAdded]
        with zeek_node(proxy, ("zeek.test.to-zeek.",)) as node:
            # the node sees our subscription, as Zeek's XPUB hands it to script land
            assert wait_until(lambda: node.sees("zeek.test.from-zeek."), 10)
            # Zeek -> us: the recorded frames, decoded as Broker's bindings give them
            for frames in recorded:
                node.xpub.send_multipart(frames)
            got = sub.get(18, 10)
            assert [t for t, _v in got] == ["zeek.test.from-zeek.values"] * 18
            assert [Event(v).name() for _t, v in got] == [
                Event(decode(f[3])).name() for f in recorded
            ]
            # us -> Zeek: once the node's subscription arrived, four frames, our payload untouched
            assert wait_until(
                lambda: any(str(t) == "zeek.test.to-zeek." for t in ep.peer_subscriptions()), 10
            )
            event = Event("ZTest::from_python_simple", Count(7), Port(443, Port.TCP))
            ep.publish("zeek.test.to-zeek.events", event)
            assert node.xsub.poll(10_000)
            topic, node_id, serializer, payload = node.xsub.recv_multipart()
            assert topic == b"zeek.test.to-zeek.events" and serializer == b"broker-bin-v1"
            assert node_id.startswith(b"zeromq_broker-spark_")
            assert payload == encode(event.as_data())
            # a message in another serializer is dropped with an error status; the next one counts
            node.xpub.send_multipart([b"zeek.test.from-zeek.x", b"n", b"broker-json-v1", b"{}"])
            node.xpub.send_multipart(recorded[0])
            assert sub.get(1, 10)[0][0] == "zeek.test.from-zeek.values"
            errors = [s for s in statuses.poll() if isinstance(s, broker.Error)]
            assert errors and errors[0].code() == EC.DeserializationFailed
            assert "broker-json-v1" in errors[0].message()
            # our own publication coming back (same node id) is not delivered to us
            sub2 = ep.make_subscriber("zeek.test.to-zeek.")
            node.xpub.send_multipart([b"zeek.test.to-zeek.x", node_id, b"broker-bin-v1", payload])
            assert sub2.get(0.3) is None
        assert ep.zeromq_leave()
        assert not ep.zeromq_leave()


def test_two_endpoints_publish_and_subscribe_through_the_proxy() -> None:
    with zeromq_proxy() as proxy, _plain() as a, _plain() as b:
        sub = b.make_subscriber("zeek/events/")
        assert a.zeromq_join(proxy.xpub, proxy.xsub) and b.zeromq_join(proxy.xpub, proxy.xsub)
        assert wait_until(lambda: any(str(t) == "zeek/events/" for t in a.peer_subscriptions()), 10)
        a.publish_batch(*[("zeek/events/n", Event("E::n", Count(i))) for i in range(3000)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 3000 and time.monotonic() < deadline:
            got.extend(sub.get(500, 0.5))
        assert [Event(v).args()[0] for _t, v in got] == [Count(i) for i in range(3000)]


def test_nobody_at_the_proxy_address_is_a_clear_failure() -> None:
    with _plain() as ep:
        statuses = ep.make_status_subscriber()
        assert not ep.zeromq_join("tcp://127.0.0.1:9", "tcp://127.0.0.1:9", timeout=0.5)
        error = statuses.get(1.0)
        assert error.code() == EC.PeerUnavailable and "no ZeroMQ proxy answered" in error.message()
        with pytest.raises(ValueError, match="cannot connect to the ZeroMQ proxy"):
            ep.zeromq_join("nonsense", "nonsense")


def _keys() -> CurveKeys:
    server, client = generate_keypair(), generate_keypair()
    return CurveKeys(server["public"], server["secret"], client["public"], client["secret"])


def test_keys_resolved_from_zeeks_environment_join_with_the_environment_still_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CLI's node and Spark's ``zeromq.proxy`` read the keys from Zeek's
    ``ZEEK_CLUSTER_BACKEND_ZEROMQ_CURVE_*`` variables and hand them to ``zeromq_join``:
    the join takes them as given (it once read the environment again and refused
    "both as options and in environment variables": found by the live cluster test)."""
    keys = _keys()
    for name in ("server_publickey", "server_secretkey", "client_publickey", "client_secretkey"):
        role, kind = name.split("_")
        env = f"ZEEK_CLUSTER_BACKEND_ZEROMQ_CURVE_{role.upper()}_{kind.upper()}"
        monkeypatch.setenv(env, getattr(keys, name))
    with zeromq_proxy(keys) as proxy, _plain() as a, _plain() as b:
        resolved = CurveKeys.resolve(None)
        assert resolved == keys
        assert a.zeromq_join(proxy.xpub, proxy.xsub, curve=resolved)
        assert b.zeromq_join(proxy.xpub, proxy.xsub)  # None: the environment's keys


def test_curve_clients_join_a_curve_proxy_and_a_wrong_key_is_refused() -> None:
    keys = _keys()
    with zeromq_proxy(keys) as proxy, _plain() as a, _plain() as b:
        sub = b.make_subscriber("zeek/x")
        client = CurveKeys(keys.server_publickey, "", keys.client_publickey, keys.client_secretkey)
        assert a.zeromq_join(proxy.xpub, proxy.xsub, curve=client)
        assert b.zeromq_join(proxy.xpub, proxy.xsub, curve=client)
        assert wait_until(lambda: any(str(t) == "zeek/x" for t in a.peer_subscriptions()), 10)
        a.publish("zeek/x", Event("E::curve", "secret"))
        assert Event(sub.get(10.0)[1]).args() == ["secret"]
        other = _keys()
        for wrong in (
            CurveKeys(keys.server_publickey, "", other.client_publickey, other.client_secretkey),
            CurveKeys(other.server_publickey, "", keys.client_publickey, keys.client_secretkey),
        ):
            with _plain() as c:
                statuses = c.make_status_subscriber()
                assert not c.zeromq_join(proxy.xpub, proxy.xsub, curve=wrong, timeout=5)
                error = statuses.get(2.0)
                assert error is not None and error.code() == EC.PeerInvalid
                assert "handshake with the ZeroMQ proxy" in error.message()
        assert other.client_publickey in proxy.refused
