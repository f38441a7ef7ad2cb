"""One master and two clones on three endpoints peered over loopback TCP (TLS on)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import broker_spark as broker
from broker_spark.errors import EC, StoreError

pytestmark = pytest.mark.timeout(60)

EVENTS = "<$>/local/data/store-events"


def contents(store: Any) -> dict:
    return {k: store.get(k) for k in store.keys()}


class TcpNet:
    """Master on ``a`` (listening), clones on ``b`` and ``c`` (dialling ``a``)."""

    def __init__(self, path: str | None = None) -> None:
        self.a, self.b, self.c = broker.Endpoint(), broker.Endpoint(), broker.Endpoint()
        self.m = self.attach_master(path)
        self.port = self.a.listen("127.0.0.1", 0)
        assert self.port > 0
        assert self.b.peer("127.0.0.1", self.port, 0)
        assert self.c.peer("127.0.0.1", self.port, 0)
        self.c1 = self.b.attach_clone("s")
        self.c2 = self.c.attach_clone("s")

    def attach_master(self, path: str | None) -> Any:
        if path is None:
            return self.a.attach_master("s")
        return self.a.attach_master("s", broker.Backend.SQLite, {"path": path})

    def sync(self, *writers: Any) -> None:
        for w in writers:
            assert w.await_idle(10.0)
        assert self.m.await_idle(10.0)

    def shutdown(self) -> None:
        for ep in (self.a, self.b, self.c):
            ep.shutdown()


@pytest.fixture
def net() -> Iterator[TcpNet]:
    n = TcpNet()
    n.sync(n.c1, n.c2)
    yield n
    n.shutdown()


def test_operations_from_master_and_clones(net: TcpNet) -> None:
    sub = net.c.make_subscriber(EVENTS)
    net.m.put("a", 1)
    net.c1.put("b", {1, 2})
    net.c2.increment("n", 3)
    net.c1.push("v", "x")
    net.m.insert_into("t", "k", "v")
    net.c2.append("s", "xy")
    net.sync(net.c1, net.c2)
    net.c1.remove_from("b", 1)
    net.c2.decrement("n", 1)
    net.m.erase("a")
    net.sync(net.c1, net.c2)
    expected = {"b": {2}, "n": 2, "v": ("x",), "t": {"k": "v"}, "s": "xy"}
    for store in (net.m, net.c1, net.c2):
        assert contents(store) == expected
    with pytest.raises(StoreError) as err:
        net.c1.increment("s", 1)
    assert err.value.code == EC.TypeClash
    seen = []
    while ("erase", "s", "a") not in seen and (item := sub.get(5.0)) is not None:
        seen.append(item[1][:3])
    assert seen[0] == ("insert", "s", "a") and seen[-1] == ("erase", "s", "a")


def test_expiry_and_put_unique_race(net: TcpNet) -> None:
    net.c1.put("e", 1, expiry=0.2)
    results: list[bool] = []
    barrier = threading.Barrier(2)

    def race(store: Any) -> None:
        barrier.wait()
        results.append(store.put_unique("u", store.name()))

    threads = [threading.Thread(target=race, args=(s,)) for s in (net.c1, net.c2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert sorted(results) == [False, True]
    sub = net.b.make_subscriber(EVENTS)
    while (item := sub.get(5.0)) is not None and item[1][0] != "expire":
        pass
    assert item is not None
    net.sync(net.c1, net.c2)
    for store in (net.m, net.c1, net.c2):
        assert store.get("e") is None and store.get("u") == "s"


def test_unpeered_clone_converges_after_peering_again(net: TcpNet) -> None:
    assert net.b.unpeer("127.0.0.1", net.port)
    net.m.put("during", 1)
    net.c1.put("queued", 2)
    assert net.b.peer("127.0.0.1", net.port, 0)
    net.sync(net.c1, net.c2)
    for store in (net.m, net.c1, net.c2):
        assert contents(store) == {"during": 1, "queued": 2}


def test_master_restarted_on_sqlite_over_tcp(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sqlite")
    n = TcpNet(path)
    try:
        for i in range(20):
            n.m.put(i, str(i))
        n.sync(n.c1, n.c2)
        n.a.shutdown()
        n.c1.put("while-down", True)
        n.a = broker.Endpoint()
        n.m = n.attach_master(path)
        port = n.a.listen("127.0.0.1", 0)
        assert n.b.peer("127.0.0.1", port, 0) and n.c.peer("127.0.0.1", port, 0)
        n.sync(n.c1, n.c2)
        expected = {i: str(i) for i in range(20)}
        expected["while-down"] = True
        for store in (n.m, n.c1, n.c2):
            assert contents(store) == expected
        d = broker.Endpoint()
        try:
            assert d.peer("127.0.0.1", port, 0)
            with pytest.raises(StoreError) as err:
                d.attach_master("s")
            assert err.value.code == EC.MasterExists
        finally:
            d.shutdown()
    finally:
        n.shutdown()
