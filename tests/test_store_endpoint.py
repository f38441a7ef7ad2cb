"""Data stores through the endpoint: one master and two clones on three endpoints.

The endpoints peer in memory (``core.memory_link``), which carries the same
node messages a TCP link does; ``test_store_endpoint_tcp.py`` repeats the core
scenario over real sockets.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import broker_spark as broker
from broker_spark.core import memory_link
from broker_spark.data.types import Count
from broker_spark.errors import EC, ShutdownError, StoreError

pytestmark = pytest.mark.timeout(30)

EVENTS = "<$>/local/data/store-events"


class Net:
    """Endpoint ``a`` holds the master, ``b`` and ``c`` a clone each; a-b and a-c peer."""

    def __init__(self, **clone_options: Any) -> None:
        self.a, self.b, self.c = broker.Endpoint(), broker.Endpoint(), broker.Endpoint()
        self.m = self.a.attach_master("s")
        self.ab, _ = memory_link.connect(self.a, self.b)
        self.ac, _ = memory_link.connect(self.a, self.c)
        self.c1 = self.b.attach_clone("s", **clone_options)
        self.c2 = self.c.attach_clone("s", **clone_options)
        self.stores = {"master": self.m, "clone1": self.c1, "clone2": self.c2}

    def sync(self, *writers: Any) -> None:
        """The developer guide's recipe: the writers go idle, then the master."""
        for w in writers:
            assert w.await_idle(5.0)
        assert self.m.await_idle(5.0)

    def contents(self, store: Any) -> dict:
        return {k: store.get(k) for k in store.keys()}

    def shutdown(self) -> None:
        for ep in (self.a, self.b, self.c):
            ep.shutdown()


@pytest.fixture
def net() -> Iterator[Net]:
    n = Net()
    n.sync(n.c1, n.c2)
    yield n
    n.shutdown()


def events_until(sub: Any, pred: Any, timeout: float = 5.0) -> list[tuple]:
    """Store events from ``sub`` until one satisfies ``pred``; fails after ``timeout``."""
    seen: list[tuple] = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"no matching store event; saw {seen}"
        item = sub.get(left)
        if item is None:
            continue
        seen.append(item[1])
        if pred(item[1]):
            return seen


# -- every operation, from every side ---------------------------------------------------


@pytest.mark.parametrize("writer", ["master", "clone1", "clone2"])
def test_every_operation_from_every_side(net: Net, writer: str) -> None:
    w = net.stores[writer]
    w.put("str", "abc")
    w.put("set", {1, 2})
    w.put("tab", {"x": 1})
    w.put("vec", (1, 2))
    w.put("gone", 0)
    net.sync(w)
    w.increment("n", 5)  # a missing key starts at zero
    w.increment("n", 2)
    w.decrement("n", 3)
    w.increment("cnt", Count(7))
    w.increment("ts", dt.timedelta(seconds=2))  # a timespan amount starts a timestamp
    w.append("str", "def")
    w.append("fresh", "xy")
    w.insert_into("set", 3)
    w.insert_into("tab", "y", 2)
    w.remove_from("set", 1)
    w.remove_from("tab", "x")
    w.push("vec", 3)
    w.push("newvec", "a")
    w.pop("vec")
    w.erase("gone")
    assert w.put_unique("u", 1) is True
    assert w.put_unique("u", 2) is False
    net.sync(w)
    expected = {
        "str": "abcdef",
        "set": {2, 3},
        "tab": {"y": 2},
        "vec": (1, 2),
        "n": 4,
        "cnt": Count(7),
        "ts": dt.datetime(1970, 1, 1, 0, 0, 2, tzinfo=dt.timezone.utc),
        "fresh": "xy",
        "newvec": ("a",),
        "u": 1,
    }
    for name, store in net.stores.items():
        assert net.contents(store) == expected, name
        assert store.keys() == set(expected)
        assert store.exists("str") and not store.exists("gone")
        assert store.get("gone") is None
        assert store.get_index_from_value("set", 2) is True
        assert store.get_index_from_value("set", 9) is False
        assert store.get_index_from_value("tab", "y") == 2
        assert store.get_index_from_value("tab", "nope") is None
        assert store.get_index_from_value("vec", 1) == 2
        assert store.get_index_from_value("vec", 7) is None
        assert store.get_index_from_value("str", 0) == "abcdef"  # any other value: itself
        assert isinstance(store.get("cnt"), Count)
    w.clear()
    net.sync(w)
    for store in net.stores.values():
        assert store.keys() == set()


def test_reads_return_copies(net: Net) -> None:
    value = {"k": {1, 2}}
    net.m.put("t", value)
    value["k"].add(3)  # the caller's object is not the stored one
    net.sync()
    for store in net.stores.values():
        got = store.get("t")
        assert got == {"k": {1, 2}}
        got["k"] = "changed"
        assert store.get("t") == {"k": {1, 2}}


def test_put_expiry_vanishes_everywhere(net: Net) -> None:
    subs = [ep.make_subscriber(EVENTS) for ep in (net.a, net.b, net.c)]
    net.c1.put("e", "short", expiry=0.2)
    net.m.put("keep", "long", expiry=dt.timedelta(seconds=60))
    for sub in subs:
        events_until(sub, lambda ev: ev[0] == "expire" and ev[2] == "e")
    for store in net.stores.values():
        assert store.get("e") is None
        assert store.get("keep") == "long"
    net.m.put("e", "again", expiry=0.2)
    net.m.put("e", "again")  # a write without expiry cancels the pending one
    net.sync()
    net.m.put("probe", 1, expiry=0.3)
    events_until(subs[0], lambda ev: ev[0] == "expire" and ev[2] == "probe")
    assert net.c2.get("e") == "again"


def test_put_unique_race_between_clones(net: Net) -> None:
    results: dict[str, list[bool]] = {"c1": [], "c2": []}
    keys = [f"race-{i}" for i in range(20)]
    barrier = threading.Barrier(2)

    def run(name: str, store: Any) -> None:
        barrier.wait()
        for k in keys:
            results[name].append(store.put_unique(k, name))

    threads = [
        threading.Thread(target=run, args=("c1", net.c1)),
        threading.Thread(target=run, args=("c2", net.c2)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    for i, k in enumerate(keys):
        assert results["c1"][i] != results["c2"][i], k  # exactly one of them inserted
        winner = "c1" if results["c1"][i] else "c2"
        assert net.m.get(k) == winner


# -- failures change nothing ---------------------------------------------------------------


def test_type_clashes_raise_and_change_nothing(net: Net) -> None:
    net.m.put("str", "abc")
    net.m.put("vec", (1, 2))
    net.sync()
    for name, store in net.stores.items():
        with pytest.raises(StoreError) as err:
            store.increment("str", 1)
        assert err.value.code == EC.TypeClash, name
        with pytest.raises(StoreError) as err:
            store.insert_into("vec", 5)  # a set insert on a vector
        assert err.value.code == EC.TypeClash, name
        with pytest.raises(StoreError) as err:
            store.append("vec", "x")
        assert err.value.code == EC.TypeClash, name
        with pytest.raises(StoreError) as err:
            store.get_index_from_value("vec", "zero")
        assert err.value.code == EC.TypeClash, name
        with pytest.raises(StoreError) as err:
            store.increment("n", "not a number")
        assert err.value.code == EC.TypeClash, name
    with pytest.raises(StoreError) as err:
        net.m.decrement("missing", 1)
    assert err.value.code == EC.NoSuchKey
    status = net.a.make_status_subscriber()
    net.c1.decrement("missing", 1)  # the clone cannot tell: the master drops it and reports
    report = status.get(5.0)
    assert report is not None and report.code() == EC.NoSuchKey, report
    net.sync(net.c1, net.c2)
    for store in net.stores.values():
        assert net.contents(store) == {"str": "abc", "vec": (1, 2)}


def test_bad_values_are_refused_before_sending(net: Net) -> None:
    with pytest.raises(TypeError):
        net.c1.put("k", object())
    with pytest.raises(TypeError):
        net.m.put("k", 1, expiry="soon")
    with pytest.raises(ValueError):
        net.m.put(1 << 70, 1)
    assert net.m.keys() == set()


# -- topology changes ------------------------------------------------------------------------


def test_clone_cut_off_reports_stale_data_and_converges() -> None:
    n = Net(stale_interval=0.3)
    try:
        n.sync(n.c1, n.c2)
        n.m.put("before", 1)
        n.sync()
        status = n.b.make_status_subscriber()
        memory_link.disconnect(n.ab)
        n.m.put("during", 2)
        n.m.erase("before")
        n.c1.put("from-cut-clone", 3)  # waits for the master, then goes at least once
        err = status.get(5.0)
        assert err is not None and err.code() == EC.StaleData, err
        assert n.c1.get("before") == 1  # reads keep answering from the replica
        n.ab, _ = memory_link.connect(n.a, n.b)
        n.sync(n.c1)
        expected = {"during": 2, "from-cut-clone": 3}
        for name, store in n.stores.items():
            assert n.contents(store) == expected, name
    finally:
        n.shutdown()


def test_master_restarted_on_sqlite_serves_the_same_data(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sqlite")
    b, c = broker.Endpoint(), broker.Endpoint()
    a = broker.Endpoint()
    try:
        m = a.attach_master("s", broker.Backend.SQLite, {"path": path})
        memory_link.connect(a, b)
        memory_link.connect(a, c)
        c1, c2 = b.attach_clone("s"), c.attach_clone("s")
        for i in range(50):
            m.put(f"k{i}", i)
        m.put("exp", "soon", expiry=60.0)
        c1.put("from-clone", True)
        assert c1.await_idle(5.0) and m.await_idle(5.0)
        a.shutdown()  # commits and closes the database
        c2.put("while-down", "queued")  # buffered until a master answers
        a = broker.Endpoint()
        m = a.attach_master("s", broker.Backend.SQLite, {"path": path})
        assert m.get("k49") == 49 and m.get("from-clone") is True
        memory_link.connect(a, b)
        memory_link.connect(a, c)
        assert c1.await_idle(5.0) and c2.await_idle(5.0) and m.await_idle(5.0)
        expected = {f"k{i}": i for i in range(50)}
        expected.update({"exp": "soon", "from-clone": True, "while-down": "queued"})
        for store in (m, c1, c2):
            assert {k: store.get(k) for k in store.keys()} == expected
    finally:
        for ep in (a, b, c):
            ep.shutdown()


def test_second_master_in_the_network_fails_with_master_exists(net: Net) -> None:
    d = broker.Endpoint()
    try:
        memory_link.connect(net.b, d)
        memory_link.connect(net.a, d)
        with pytest.raises(StoreError) as err:
            d.attach_master("s")
        assert err.value.code == EC.MasterExists
        assert net.a.attach_master("s").name() == "s"  # the same endpoint: its master
        net.b.make_subscriber("t")  # ordinary subscriptions never look like a master
        assert d.attach_master("t").name() == "t"
    finally:
        d.shutdown()


def test_commands_flood_through_an_endpoint_without_stores() -> None:
    a, relay, c = broker.Endpoint(), broker.Endpoint(), broker.Endpoint()
    try:
        relay.forward(["s/<$>/data/"])
        m = a.attach_master("s")
        memory_link.connect(a, relay)
        memory_link.connect(relay, c)
        clone = c.attach_clone("s")
        m.put("k", "v")
        clone.put("back", 1)
        assert clone.await_idle(5.0) and m.await_idle(5.0)
        assert clone.get("k") == "v" and m.get("back") == 1
    finally:
        for ep in (a, relay, c):
            ep.shutdown()


def test_master_and_clone_on_one_endpoint() -> None:
    with broker.Endpoint() as a:
        m = a.attach_master("s")
        clone = a.attach_clone("s")
        assert a.attach_clone("s").name() == "s"
        m.put("k", 1)
        clone.increment("k", 2)
        assert clone.put_unique("u", "x") is True
        assert clone.await_idle(5.0) and m.await_idle(5.0)
        assert clone.get("k") == 3 and m.get("u") == "x"


# -- events, idleness, backends, shutdown ---------------------------------------------------


def test_store_events_reach_local_subscribers(net: Net) -> None:
    subs = {"master": net.a.make_subscriber(EVENTS), "clone": net.c.make_subscriber(EVENTS)}
    one = net.b.make_subscriber(f"{EVENTS}/s")
    other = net.b.make_subscriber(f"{EVENTS}/other")
    net.m.put("k", 1)
    net.sync()
    net.c1.put("k", 2)
    net.sync(net.c1)
    net.m.erase("k")
    for where, sub in subs.items():
        seen = events_until(sub, lambda ev: ev[0] == "erase")
        kinds = [ev[0] for ev in seen]
        assert kinds == ["insert", "update", "erase"], where
        insert, update = seen[0], seen[1]
        assert insert[1:5] == ("s", "k", 1, None)
        assert insert[5] == net.a.node_id()  # the publisher: the master's endpoint
        assert update[1:6] == ("s", "k", 1, 2, None)
        assert update[6] == net.b.node_id()  # the clone on b wrote it
    assert [ev[0] for ev in events_until(one, lambda ev: ev[0] == "erase")][-1] == "erase"
    assert other.poll() == []


def test_await_idle_semantics() -> None:
    with broker.Endpoint() as lonely:
        clone = lonely.attach_clone("s", max_get_delay=0.2)
        t = time.monotonic()
        assert clone.await_idle(0.3) is False  # no master: never idle
        assert time.monotonic() - t < 2.0
        with pytest.raises(StoreError) as err:
            clone.get("k")  # no snapshot within max_get_delay
        assert err.value.code == EC.StaleData
        m = lonely.attach_master("alone")
        assert m.await_idle(0.0) is True  # no clones: nothing to wait for
        m.put("k", 1)
        assert m.await_idle() is True


def test_clone_reads_wait_for_the_first_snapshot() -> None:
    a, b = broker.Endpoint(), broker.Endpoint()
    try:
        m = a.attach_master("s")
        m.put("k", "v")
        clone = b.attach_clone("s")
        later = threading.Timer(0.2, memory_link.connect, (a, b))
        later.start()
        assert clone.get("k") == "v"  # waited for the master's snapshot
        later.join(5)
    finally:
        a.shutdown()
        b.shutdown()


def test_sqlite_backend_failures_name_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"this is not a database" * 100)
    with broker.Endpoint() as ep:
        with pytest.raises(StoreError) as err:
            ep.attach_master("s", broker.Backend.SQLite, {"path": str(blocker / "db")})
        assert err.value.code == EC.CannotOpenFile and str(blocker) in str(err.value)
        with pytest.raises(StoreError) as err:
            ep.attach_master("s", broker.Backend.SQLite, {"path": str(corrupt)})
        assert err.value.code == EC.BackendFailure and str(corrupt) in str(err.value)
        with pytest.raises(StoreError) as err:
            ep.attach_master("s", broker.Backend.SQLite, {})
        assert err.value.code == EC.CannotOpenFile
        m = ep.attach_master("s", broker.Backend.SQLite, {"path": str(tmp_path / "ok.db")})
        m.put("k", 1)  # the failed attempts left nothing behind
        assert m.get("k") == 1


def test_shutdown_wakes_blocked_callers_and_leaves_no_threads(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    a = broker.Endpoint()
    clone = a.attach_clone("s", put_unique_timeout=30.0)
    m = a.attach_master("p", broker.Backend.SQLite, {"path": str(tmp_path / "p.db")})
    for i in range(100):
        m.put(i, i)
    errors: list[BaseException] = []

    def wait_unique() -> None:
        try:
            clone.put_unique("k", 1)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=wait_unique)
    t.start()
    deadline = time.monotonic() + 5
    while not clone._get_actor()._unique and time.monotonic() < deadline:
        time.sleep(0.01)  # until the request is in flight
    a.shutdown()
    t.join(5)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], ShutdownError)
    with pytest.raises((ShutdownError, StoreError)):
        clone.get("k")
    with pytest.raises(ShutdownError):
        m.put("late", 1)
    assert set(threading.enumerate()) <= before
    with broker.Endpoint() as again:
        m2 = again.attach_master("p", broker.Backend.SQLite, {"path": str(tmp_path / "p.db")})
        assert len(m2.keys()) == 100  # everything was committed at shutdown


def test_reset_and_context_manager(net: Net) -> None:
    with net.b.attach_clone("s") as handle:
        assert handle.name() == "s"
    with pytest.raises(StoreError):
        handle.get("k")
    net.c1.put("still", "works")  # the clone itself lives on
    net.sync(net.c1)
    assert net.m.get("still") == "works"
