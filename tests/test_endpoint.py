"""The endpoint facade: Broker's API surface, configuration, statuses, shutdown and threads."""

from __future__ import annotations

import select
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest

import broker_spark as broker
from broker_spark.core import memory_link
from broker_spark.core.loop_thread import LoopThread
from broker_spark.core.node_message import node_message
from broker_spark.errors import ShutdownError

PEER = bytes(15) + b"\x09"


def _threads() -> set[threading.Thread]:
    return set(threading.enumerate())


@pytest.fixture
def pair():
    with broker.Endpoint() as a, broker.Endpoint() as b:
        yield a, b


def wait_peer_filter(ep: broker.Endpoint, peer: broker.Endpoint, topic: str) -> None:
    core = ep._core
    assert core.wait_until(lambda: topic in core.peer_filters().get(peer.node_id(), ()), 5.0)


# -- the module surface ------------------------------------------------------------------


def test_module_offers_broker_names():
    for name in (
        "Endpoint",
        "Configuration",
        "BrokerOptions",
        "Subscriber",
        "StatusSubscriber",
        "Publisher",
        "Status",
        "Error",
        "SC",
        "EC",
        "Topic",
        "Data",
        "Count",
        "Port",
        "Enum",
        "Timestamp",
        "Timespan",
        "Backend",
        "PeerStatus",
        "PeerFlags",
        "NetworkInfo",
        "EndpointInfo",
        "PeerInfo",
        "Version",
        "now",
    ):
        assert hasattr(broker, name), name
    assert broker.__version__ == "0.1.0"
    assert broker.Backend.Memory != broker.Backend.SQLite
    assert broker.SC.PeerAdded.name == "PeerAdded"
    assert isinstance(broker.Version.string(), str)
    assert broker.now().tzinfo is not None
    with pytest.raises(AttributeError):
        _ = broker.NoSuchThing


def test_import_stays_light():
    code = "import sys, broker_spark; print('asyncio' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- configuration -----------------------------------------------------------------------


def test_configuration_defaults_and_aliases():
    opts = broker.BrokerOptions()
    assert (opts.disable_ssl, opts.disable_forwarding, opts.ttl) == (False, False, 16)
    assert (opts.ignore_broker_conf, opts.use_real_time) == (False, True)
    assert (opts.peer_buffer_size, opts.peer_overflow_policy) == (2048, "disconnect")
    assert opts.forward is True
    opts.forward = False
    assert opts.disable_forwarding is True
    cfg = broker.Configuration(opts)
    assert cfg.options.disable_forwarding is True
    assert cfg.openssl_certificate == "" and not cfg.authenticated
    cfg.openssl_cafile = "/tmp/ca.pem"
    assert cfg.authenticated
    assert broker.BrokerOptions(ttl=3).ttl == 3
    with pytest.raises(TypeError):
        broker.BrokerOptions(no_such_option=1)


@pytest.mark.parametrize(
    "field, value",
    [
        ("ttl", 0),
        ("ttl", 70000),
        ("peer_overflow_policy", "explode"),
        ("subscriber_overflow_policy", "sometimes"),
        ("peer_buffer_size", 0),
        ("publisher_buffer_size", -1),
    ],
)
def test_invalid_options_are_refused(field, value):
    opts = broker.BrokerOptions()
    setattr(opts, field, value)
    threads = _threads()
    with pytest.raises(ValueError, match=field):
        broker.Endpoint(broker.Configuration(opts))
    assert _threads() == threads


def test_endpoint_accepts_options_and_configuration():
    with broker.Endpoint(broker.BrokerOptions(ttl=5)) as ep:
        assert ep.config.options.ttl == 5
    with pytest.raises(TypeError):
        broker.Endpoint("not a configuration")


# -- identity and simple flow ------------------------------------------------------------


def test_node_ids_are_distinct_uuids(pair):
    a, b = pair
    assert str(uuid.UUID(a.node_id())) == a.node_id()
    assert a.node_id() != b.node_id()
    assert repr(a) == a.node_id()


def test_published_values_arrive_as_broker_types(pair):
    a, b = pair
    with b.make_subscriber(["/test", broker.Topic("/other")]) as sub:
        memory_link.connect(a, b)
        a.publish("/test/1", ())
        a.publish_batch(("/test/2", (1, 2, 3)), ("/other", {"a": broker.Count(1)}))
        a.publish(broker.Topic("/test/3"), broker.Data([True, None]))
        msgs = sub.get(4)
        assert msgs == [
            ("/test/1", ()),
            ("/test/2", (1, 2, 3)),
            ("/other", {"a": broker.Count(1)}),
            ("/test/3", (True, None)),
        ]
        assert all(type(t) is str for t, _ in msgs)
        assert type(msgs[2][1]["a"]) is broker.Count
        assert not sub.available()


def test_zeek_events_travel_as_their_broker_value(pair):
    a, b = pair
    with b.make_subscriber("/z") as sub:
        memory_link.connect(a, b)
        a.publish("/z", broker.zeek.Event("ping", broker.Count(1), "x"))
        topic, data = sub.get(5.0)
        event = broker.zeek.Event(data)
        assert topic == "/z"
        assert event.name() == "ping"
        assert list(event.args()) == [broker.Count(1), "x"]


def test_publisher_api(pair):
    a, b = pair
    with b.make_subscriber("/test") as sub, a.make_publisher("/test") as pub:
        memory_link.connect(a, b)
        assert pub.capacity() == a.config.options.publisher_buffer_size
        assert pub.demand() == pub.free_capacity() == pub.capacity() - pub.buffered()
        pub.publish([1, 2, 3])
        pub.publish_batch(["a", "b", "c"], [True, False])
        assert sub.get(3) == [
            ("/test", (1, 2, 3)),
            ("/test", ("a", "b", "c")),
            ("/test", (True, False)),
        ]
        assert pub.send_rate() >= 0.0
        r, _, _ = select.select([pub.fd()], [], [], 5.0)
        assert r, "a publisher with demand has a readable fd"
    with pytest.raises(ShutdownError):
        pub.publish(1)
    assert pub.demand() == 0


def test_unencodable_values_are_refused(pair):
    a, _ = pair
    with pytest.raises(TypeError):
        a.publish("/t", object())
    with pytest.raises(ValueError):
        a.publish("/t", 1 << 70)


def test_own_publications_never_reach_own_subscribers(pair):
    a, b = pair
    with a.make_subscriber("/t") as mine, b.make_subscriber("/t") as theirs:
        memory_link.connect(a, b)
        a.publish("/t/own", 1)
        # b got it, so a has routed it: had it gone to a's subscriber it would be queued now.
        assert theirs.get(5.0) == ("/t/own", 1)
        b.publish("/t/peer", 2)
        assert mine.get(5.0) == ("/t/peer", 2)
        assert mine.poll() == []
        assert theirs.poll() == []


def test_injected_messages_with_our_own_sender_are_not_delivered():
    with broker.Endpoint() as ep, ep.make_subscriber("/t") as sub:
        own = ep._core.node_id
        ep._core.inject(
            [
                node_message("/t/a", 1, own),
                node_message("/t/b", 2, PEER),
                node_message("/t/c", 3, own),
            ]
        )
        ep._core.inject([node_message("/t/d", 4, PEER)])
        assert sub.get(2, 5.0) == [("/t/b", 2), ("/t/d", 4)]
        assert sub.poll() == []


def test_forward_adds_to_filter_without_a_subscriber(pair):
    a, b = pair
    memory_link.connect(a, b)
    b.forward(["/fwd", "/fwd/deeper"])
    wait_peer_filter(a, b, "/fwd")
    assert a.peer_subscriptions() == [broker.Topic("/fwd")]


def test_peers_and_await_peer(pair):
    a, b = pair
    assert a.peers() == []
    assert not a.await_peer(b.node_id(), 0.01)
    memory_link.connect(a, b)
    assert a.await_peer(b.node_id())
    assert b.await_peer(a.node_id(), 1.0)
    (info,) = a.peers()
    assert info.peer.node == info.peer.id == b.node_id()
    assert info.status == broker.PeerStatus.Peered


# -- statuses ----------------------------------------------------------------------------


def test_peering_statuses_on_both_sides():
    with (
        broker.Endpoint() as a,
        broker.Endpoint() as b,
        a.make_status_subscriber(True) as sa,
        b.make_status_subscriber(True) as sb,
    ):
        la, _ = memory_link.connect(a, b)
        st_a, st_b = sa.get(2), sb.get(2)
        assert [s.code() for s in st_a] == [broker.SC.EndpointDiscovered, broker.SC.PeerAdded]
        assert [s.code() for s in st_b] == [broker.SC.EndpointDiscovered, broker.SC.PeerAdded]
        assert st_a[1].context().node == b.node_id()
        assert st_b[1].context().node_id() == a.node_id()
        assert st_a[1].context().network.get().address == ""
        assert st_a[1].message()
        memory_link.disconnect(la)
        assert sa.get().code() == broker.SC.PeerRemoved
        assert sb.get(5.0).code() == broker.SC.PeerRemoved
        assert sa.get().code() == broker.SC.EndpointUnreachable
        assert a.peers() == []


def test_peer_shutdown_is_reported_as_lost():
    with broker.Endpoint() as a, a.make_status_subscriber(True) as sa:
        b = broker.Endpoint()
        memory_link.connect(a, b)
        assert len(sa.get(2)) == 2
        b.shutdown()
        assert sa.get(5.0).code() == broker.SC.PeerLost
        assert a._core.wait_until(lambda: not a._core.peer_filters(), 5.0)


def test_status_subscriber_without_statuses_gets_errors_only():
    with broker.Endpoint() as a, broker.Endpoint() as b:
        errors_only = a.make_status_subscriber()
        everything = a.make_status_subscriber(receive_statuses=True)
        sub = a.make_subscriber("/t")
        memory_link.connect(a, b)
        assert len(everything.get(2)) == 2
        assert errors_only.get(0.0) is None
        a._core.inject([("/t/bad", b"\xff\x00", 1, 16, PEER), node_message("/t/good", 7, PEER)])
        assert sub.get() == ("/t/good", 7)  # the broken message is skipped
        err = errors_only.get(5.0)
        assert isinstance(err, broker.Error)
        assert err.code() == broker.EC.DeserializationFailed
        assert "/t/bad" in err.message()
        assert everything.get(5.0).code() == broker.EC.DeserializationFailed
        for s in (errors_only, everything, sub):
            s.reset()


# -- shutdown and threads --------------------------------------------------------------------


def test_shutdown_wakes_blocked_subscribers_and_leaves_no_threads():
    before = _threads()
    ep = broker.Endpoint()
    subs = [ep.make_subscriber(f"/t{i}") for i in range(3)]
    status = ep.make_status_subscriber(True)
    outcomes: list[str] = []
    started = threading.Barrier(len(subs) + 2)

    def wait_on(s):
        started.wait()
        try:
            s.get()
            outcomes.append("value")
        except ShutdownError:
            outcomes.append("shutdown")

    threads = [threading.Thread(target=wait_on, args=(s,)) for s in [*subs, status]]
    for t in threads:
        t.start()
    started.wait()
    t0 = time.monotonic()
    ep.shutdown()
    assert time.monotonic() - t0 < 1.5
    for t in threads:
        t.join(2.0)
        assert not t.is_alive()
    assert outcomes == ["shutdown"] * 4
    assert _threads() == before
    ep.shutdown()  # idempotent
    assert ep.is_shutdown
    with pytest.raises(ShutdownError):
        ep.publish("/t0", 1)
    with pytest.raises(ShutdownError):
        ep.make_subscriber("/t")
    with pytest.raises(ShutdownError):
        subs[0].get(0.0)


def test_shutdown_releases_a_blocked_publisher():
    with broker.Endpoint() as a:
        b = broker.Endpoint()
        sub = b.make_subscriber("/t", qsize=1)
        memory_link.connect(a, b, capacity=4)
        pub = a.make_publisher("/t")
        full = threading.Event()
        result: list[object] = []

        def flood():
            try:
                while True:
                    if pub.demand() == 0:
                        full.set()
                    pub.publish(1)
            except ShutdownError as exc:
                result.append(exc)

        t = threading.Thread(target=flood)
        t.start()
        assert full.wait(10.0), "the publisher never ran out of demand"
        a.shutdown()
        t.join(2.0)
        assert not t.is_alive()
        assert isinstance(result[0], ShutdownError)
        sub.reset()
        b.shutdown()


def test_queued_items_are_still_returned_after_shutdown():
    ep = broker.Endpoint()
    sub = ep.make_subscriber("/t")
    ep._core.inject([node_message("/t", i, PEER) for i in range(3)])
    assert sub.get(1) == [("/t", 0)]
    assert sub.available() == 2  # one batch, delivered in one piece
    ep.shutdown()
    assert sub.get(5) == [("/t", 1), ("/t", 2)]
    with pytest.raises(ShutdownError):
        sub.get()


def test_reset_subscriber_raises_and_unsubscribes(pair):
    a, b = pair
    sub = b.make_subscriber("/t")
    memory_link.connect(a, b)
    wait_peer_filter(a, b, "/t")
    sub.reset()
    sub.reset()
    with pytest.raises(ShutdownError):
        sub.get(0.0)
    assert sub.available() == 0
    b._loop.run_sync(lambda: None)  # the removal was queued on b's loop before this
    assert not b._core.subscribers
    assert a._core.wait_until(lambda: not a._core.peer_filters()[b.node_id()], 5.0)


def test_interpreter_with_live_endpoints_exits_promptly():
    code = textwrap.dedent(
        """
        import threading
        import broker_spark as broker
        from broker_spark.core import memory_link
        a, b = broker.Endpoint(), broker.Endpoint()
        sub = b.make_subscriber("/t")
        memory_link.connect(a, b)
        a.publish("/t", 1)
        assert sub.get(5.0) == ("/t", 1)
        def loop(get):
            while True:  # a reader that never checks for None: must neither raise nor spin
                get()

        threading.Thread(target=sub.get, daemon=True).start()   # blocked at exit
        threading.Thread(target=sub.get, args=(3,), daemon=True).start()
        threading.Thread(target=loop, args=(sub.get,), daemon=True).start()
        statuses = b.make_status_subscriber(True)
        threading.Thread(target=loop, args=(lambda: statuses.get(30.0),), daemon=True).start()
        print("ok")
        """
    )
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    assert out.stderr == ""  # no ShutdownError traceback from the blocked threads
    assert time.monotonic() - t0 < 10


def test_getters_blocked_when_the_interpreter_exits_return_nothing(monkeypatch):
    """What the exit path does, in-process: the endpoint module's exit flag is set, as
    its atexit hook sets it before the endpoints' finalizers run."""
    import broker_spark.endpoint as endpoint_module

    ep = broker.Endpoint()
    sub = ep.make_subscriber("/t")
    statuses = ep.make_status_subscriber(True)
    results: dict[str, object] = {}
    started = threading.Barrier(4)

    def run(name, get):
        started.wait()
        results[name] = get()

    threads = [
        threading.Thread(target=run, args=("get", sub.get)),
        threading.Thread(target=run, args=("get n", lambda: sub.get(3))),
        threading.Thread(target=run, args=("status", statuses.get)),
    ]
    for t in threads:
        t.start()
    started.wait()
    deadline = time.monotonic() + 5
    while not (sub._queue._waiters == 2 and statuses._queue._waiters == 1):
        assert time.monotonic() < deadline, "the getters never blocked"
        time.sleep(0.01)
    monkeypatch.setattr(endpoint_module, "_exiting", True)
    ep.shutdown()
    for t in threads:
        t.join(5)
        assert not t.is_alive()
    assert results == {"get": None, "get n": [], "status": None}
    # A getter that comes later waits out its timeout, then returns nothing.
    assert sub.get(0.05) is None
    assert sub.get(2, 0.05) == []


def test_garbage_collected_endpoint_stops_its_thread():
    before = _threads()
    ep = broker.Endpoint()
    thread = ep._loop.thread
    del ep
    import gc

    gc.collect()
    thread.join(2.0)
    assert not thread.is_alive()
    assert _threads() == before


def test_a_subscriber_keeps_its_endpoint_alive():
    import gc

    def make():
        ep = broker.Endpoint()
        return ep.make_subscriber("/t"), ep._core

    sub, core = make()
    gc.collect()
    core.inject([node_message("/t", 1, PEER)])
    assert sub.get(5.0) == ("/t", 1)
    sub._owner.shutdown()


# -- the loop thread -------------------------------------------------------------------------


def test_loop_thread_helpers():
    lt = LoopThread("test-loop")
    try:
        assert lt.run_sync(lambda x: x + 1, 41) == 42
        assert lt.run_sync(lambda: lt.run_sync(lambda: "inline")) == "inline"
        with pytest.raises(ZeroDivisionError):
            lt.run_sync(lambda: 1 / 0)

        async def coro():
            return "coro"

        assert lt.run_coro(coro()) == "coro"
        assert lt.running
    finally:
        assert lt.stop()
    assert lt.stop()
    with pytest.raises(ShutdownError):
        lt.call_soon(print)
    with pytest.raises(ShutdownError):
        lt.run_sync(print)
