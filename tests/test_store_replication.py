"""A master and two clones over a lossy, reordering, duplicating simulated network."""

from __future__ import annotations

import heapq
import random
import struct
from pathlib import Path
from typing import Any

import pytest
from recorded import VECTORS

from broker_spark.data.binary import encode
from broker_spark.data.types import Count, Timespan
from broker_spark.errors import EC, StoreError
from broker_spark.store import ops
from broker_spark.store.backends import MemoryBackend, SQLiteBackend, StoreBackend
from broker_spark.store.clone import CloneState
from broker_spark.store.commands import (
    AckCloneCommand,
    ClearCommand,
    CumulativeAckCommand,
    EntityId,
    EraseCommand,
    InternalCommand,
    PutCommand,
    decode_command,
    encode_command,
    unicast_target,
)
from broker_spark.store.events import StoreEvent
from broker_spark.store.master import MasterState

TICK = 100_000_000  # Broker's channel tick, in nanoseconds
SEC = 1_000_000_000
T0 = 1_700_000_000 * SEC
M = EntityId(b"\x01" * 16, 1)
A = EntityId(b"\x02" * 16, 2)
B = EntityId(b"\x03" * 16, 3)
FAST = {"connection_timeout": 30}  # ticks; keeps cut-off scenarios short


class Shuttle:
    """Moves encoded commands between a master and clones, one tick per step.

    Every message goes through ``encode_command``/``decode_command``; each copy to
    each receiver is lost, duplicated or delayed on a seeded RNG, and nodes in
    ``cut`` neither send nor receive.
    """

    def __init__(self, seed: int = 0, loss: float = 0.0, dup: float = 0.0, reorder: float = 0.0):
        self.rng = random.Random(seed)
        self.loss, self.dup, self.reorder = loss, dup, reorder
        self.now = T0
        self.ticks = 0
        self.master: MasterState | None = None
        self.clones: dict[str, CloneState] = {}
        self.cut: set[str] = set()
        self.events: dict[str, list[StoreEvent]] = {}
        self._flight: list[tuple[int, int, str, bytes]] = []
        self._n = 0

    def nodes(self) -> dict[str, Any]:
        out: dict[str, Any] = {} if self.master is None else {"master": self.master}
        out.update(self.clones)
        return out

    def collect(self) -> None:
        for name, node in self.nodes().items():
            for topic, cmd in node.outgoing():
                self._route(name, topic, cmd)
            self.events.setdefault(name, []).extend(node.events())

    def _route(self, src: str, topic: str, cmd: InternalCommand) -> None:
        raw = encode_command(cmd)
        if topic.endswith("/data/master"):
            dests = ["master"] if self.master is not None else []
        else:
            dests = list(self.clones)
        target = unicast_target(topic, cmd)
        if target is not None:
            dests = [d for d in dests if self.nodes()[d].entity.endpoint == target]
        for dest in dests:
            if src in self.cut or dest in self.cut or self.rng.random() < self.loss:
                continue
            for _ in range(2 if self.rng.random() < self.dup else 1):
                delay = 1 + (self.rng.randint(1, 4) if self.rng.random() < self.reorder else 0)
                self._n += 1
                heapq.heappush(self._flight, (self.ticks + delay, self._n, dest, raw))

    def step(self) -> None:
        self.collect()
        self.ticks += 1
        self.now += TICK
        batches: dict[str, list[InternalCommand]] = {}
        while self._flight and self._flight[0][0] <= self.ticks:
            _, _, dest, raw = heapq.heappop(self._flight)
            batches.setdefault(dest, []).append(decode_command(raw))
        nodes = self.nodes()
        for dest, cmds in batches.items():
            if dest in nodes:
                nodes[dest].receive_batch(cmds, self.now)
        for node in nodes.values():
            node.tick(self.now)
        self.collect()

    def run(self, ticks: int) -> None:
        for _ in range(ticks):
            self.step()

    def all_idle(self) -> bool:
        return (
            self.master is not None
            and self.master.idle()
            and all(c.idle() for c in self.clones.values())
        )

    def settle(self, max_ticks: int = 3000) -> None:
        """Heal the network, run until master and clones are idle, then make it lossy again."""
        saved = self.loss, self.dup, self.reorder
        self.loss = self.dup = self.reorder = 0.0
        self.cut.clear()
        try:
            for _ in range(max_ticks):
                if self.all_idle():
                    return
                self.step()
            raise AssertionError(f"not idle after {max_ticks} ticks")
        finally:
            self.loss, self.dup, self.reorder = saved


def state(pairs: Any) -> dict[bytes, bytes]:
    return {encode(k): encode(v) for k, v in pairs}


def setup(
    seed: int = 0,
    backend: StoreBackend | None = None,
    loss: float = 0.0,
    dup: float = 0.0,
    reorder: float = 0.0,
    **kwargs: Any,
) -> Shuttle:
    net = Shuttle(seed, loss, dup, reorder)
    stale = kwargs.pop("stale_interval", 10 * SEC)
    net.master = MasterState("kv", backend or MemoryBackend(), M, net.now, **kwargs)
    net.clones["a"] = CloneState("kv", A, net.now, stale_interval=stale, **kwargs)
    net.clones["b"] = CloneState("kv", B, net.now, stale_interval=stale, **kwargs)
    return net


def assert_converged(net: Shuttle) -> dict[bytes, bytes]:
    assert net.master is not None
    expected = state(net.master.backend.snapshot())
    for name, clone in net.clones.items():
        assert state(clone.snapshot()) == expected, f"clone {name} differs from the master"
    return expected


def replay(events: list[StoreEvent]) -> dict[bytes, bytes]:
    """The state a subscriber following only the store events would rebuild."""
    out: dict[bytes, bytes] = {}
    for e in events:
        if e.kind in ("insert", "update"):
            out[encode(e.key)] = encode(e.value)
        else:
            out.pop(encode(e.key), None)
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_operation_from_everyone_converges_under_loss(seed: int) -> None:
    net = setup(seed, loss=0.25, dup=0.1, reorder=0.3)
    master, a, b = net.master, net.clones["a"], net.clones["b"]
    assert master is not None
    master.local(PutCommand("gone", 0, None, M), net.now)
    net.run(3)
    a.local(ClearCommand(A), net.now)  # clears before any clone is attached, possibly
    net.settle()
    now = net.now
    master.local(PutCommand("from-master", "m", None, M), now)
    a.local(PutCommand("from-a", "a", None, A), now)
    b.local(PutCommand("from-b", "b", None, B), now)
    for node, amount in ((master, 1), (a, 10), (b, 100)):
        node.local(ops.increment("n", amount), now)
        node.local(ops.insert_into("set", amount), now)
        node.local(ops.insert_into("table", f"k{amount}", amount), now)
    net.run(2)
    a.local(ops.push("vec", "x"), net.now)
    b.local(ops.append("text", "hello"), net.now)
    master.local(ops.increment("span", Timespan.from_ns(5)), net.now)
    net.run(5)
    master.local(ops.decrement("n", 1), net.now)
    b.local(EraseCommand("from-master", B), net.now)
    a.local(ops.remove_from("set", 10), net.now)
    net.run(20)
    net.settle()
    final = assert_converged(net)
    assert master.get("n") == 110
    assert master.get("set") == {1, 100}
    assert master.get("table") == {"k1": 1, "k10": 10, "k100": 100}
    assert master.get("vec") == ("x",)
    assert master.get("text") == "hello"
    assert not master.exists("from-master") and not master.exists("gone")
    assert {master.get("from-a"), master.get("from-b")} == {"a", "b"}
    for name in ("a", "b"):
        assert replay(net.events[name]) == final, f"events of clone {name} do not add up"
    assert replay(net.events["master"]) == final
    assert a.get_index_from_value("table", "k100") == 100 and b.keys()


@pytest.mark.parametrize("seed", range(6))
def test_put_unique_race_from_two_clones_has_one_winner(seed: int) -> None:
    net = setup(seed, loss=0.2, dup=0.1, reorder=0.3)
    a, b = net.clones["a"], net.clones["b"]
    net.run(seed % 3)
    ra = a.put_unique("lock", "a", None, net.now)
    rb = b.put_unique("lock", "b", None, net.now)
    net.run(10)
    net.settle()
    results = {"a": a.put_unique_results(), "b": b.put_unique_results()}
    assert results["a"] in ([(ra, True)], [(ra, False)])
    assert results["b"] in ([(rb, True)], [(rb, False)])
    winners = [name for name, res in results.items() if res[0][1]]
    assert len(winners) == 1
    assert net.master is not None and net.master.get("lock") == winners[0]
    assert a.get("lock") == b.get("lock") == winners[0]
    assert net.master.put_unique("lock", "m", None, net.now) is False


def test_expiry_vanishes_on_master_and_clones() -> None:
    net = setup(4, loss=0.1, reorder=0.2)
    master, a, b = net.master, net.clones["a"], net.clones["b"]
    assert master is not None
    net.settle()
    master.local(PutCommand("short", 1, SEC, M), net.now)
    a.local(PutCommand("from-clone", 2, SEC // 2, A), net.now)
    b.local(ops.increment("counter", 1, expiry=SEC), net.now)
    master.local(PutCommand("renewed", 3, SEC, M), net.now)
    master.local(PutCommand("renewed", 4, None, M), net.now)  # a later put cancels the expiry
    net.run(3)
    assert b.exists("short") or not b.synced
    net.run(25)
    net.settle()
    assert_converged(net)
    assert master.keys() == ["renewed"]
    assert a.keys() == ["renewed"] and b.keys() == ["renewed"]
    for name in ("master", "a", "b"):
        expired = sorted(e.key for e in net.events[name] if e.kind == "expire")
        assert expired == ["counter", "from-clone", "short"], name


def test_expiry_is_not_early() -> None:
    net = setup()
    net.settle()
    assert net.master is not None
    net.master.local(PutCommand("k", 1, 5 * SEC, M), net.now)
    net.run(49)
    assert net.master.exists("k") and net.clones["a"].exists("k")
    net.run(3)
    assert not net.master.exists("k")
    net.settle()
    assert not net.clones["a"].exists("k")


def test_a_clone_cut_off_reports_stale_data_and_converges_when_restored() -> None:
    net = setup(5, loss=0.1, reorder=0.2, stale_interval=SEC, **FAST)
    master, a, b = net.master, net.clones["a"], net.clones["b"]
    assert master is not None
    net.settle()
    b.local(PutCommand("before", 0, None, B), net.now)
    net.settle()
    assert b.get("before") == 0
    net.cut.add("b")
    for i in range(10):
        master.local(PutCommand(f"m{i}", i, None, M), net.now)
        a.local(ops.increment("n", 1), net.now)
        net.step()
    b.local(PutCommand("while-cut", 1, None, B), net.now)  # queued, sent when restored
    net.run(40)  # beyond the stale interval and the channel timeout
    with pytest.raises(StoreError) as info:
        b.get("m1")
    assert info.value.code is EC.StaleData
    assert b.stale() and not b.idle()
    assert not a.stale() and a.get("m1") == 1
    net.settle()
    assert_converged(net)
    assert not b.stale()
    assert b.get("m9") == 9 and b.get("n") == 10 and master.get("while-cut") == 1
    assert b.resyncs >= 1


def test_lost_updates_make_the_clone_resynchronise_from_a_snapshot() -> None:
    net = setup(6, buffer_capacity=4)  # the master keeps only 4 events for retransmission
    master, b = net.master, net.clones["b"]
    assert master is not None
    net.settle()
    net.cut.add("b")
    for i in range(20):
        master.local(PutCommand(f"k{i}", i, None, M), net.now)
    net.run(5)  # shorter than the channel timeout: b only sees a gap when it returns
    net.cut.clear()
    net.settle()
    assert_converged(net)
    assert b.get("k0") == 0 and b.resyncs >= 1


def test_master_restarted_on_sqlite_serves_the_persisted_state(tmp_path: Path) -> None:
    path = tmp_path / "kv.db"
    net = setup(7, SQLiteBackend(path), loss=0.1, reorder=0.2, **FAST)
    master, a, b = net.master, net.clones["a"], net.clones["b"]
    assert master is not None
    net.settle()
    master.local(PutCommand("m", 1, None, M), net.now)
    a.local(ops.insert_into("set", "a"), net.now)
    b.local(PutCommand("soon-gone", 1, 3 * SEC, B), net.now)
    net.settle()
    master.close()
    net.master = None
    net.run(10)  # master down: clones keep their replica, writes wait
    a.local(PutCommand("while-down", 2, None, A), net.now)
    m2 = EntityId(b"\x09" * 16, 1)
    restarted = MasterState("kv", SQLiteBackend(path), m2, net.now, **FAST)
    assert restarted.get("m") == 1 and restarted.get("set") == {"a"}
    net.master = restarted
    for _ in range(2000):
        if a.master == m2 and b.master == m2 and net.all_idle():
            break
        net.step()
    net.settle()
    assert_converged(net)
    assert restarted.get("while-down") == 2 and b.get("while-down") == 2
    net.run(30)  # the persisted expiry still fires after the restart
    net.settle()
    assert not restarted.exists("soon-gone") and not b.exists("soon-gone")
    restarted.close()


def test_await_idle_meanings() -> None:
    net = setup()
    master, a = net.master, net.clones["a"]
    assert master is not None
    assert master.idle()  # no clones yet: nothing to wait for
    assert not a.idle()  # not connected to a master yet
    net.settle()
    a.local(PutCommand("k", 1, None, A), net.now)
    assert not a.idle()  # its write is not acknowledged
    for _ in range(100):
        if a.idle():
            break
        net.step()
    assert a.idle() and master.get("k") == 1
    master.local(PutCommand("k", 2, None, M), net.now)
    assert not master.idle()  # clones have not acked the latest command
    net.settle()
    assert master.idle() and net.clones["b"].get("k") == 2


def test_store_events_use_brokers_layout() -> None:
    net = setup()
    master = net.master
    assert master is not None
    master.local(PutCommand("k", 1, 5 * SEC, A), net.now)
    master.local(PutCommand("k", 2, None, A), net.now)
    master.local(EraseCommand("k", A), net.now)
    master.local(PutCommand("e", 1, SEC, A), net.now)
    net.run(15)
    events = net.events["master"] + master.events()
    assert [e.kind for e in events] == ["insert", "update", "erase", "insert", "expire"]
    assert {e.topic for e in events} == {"<$>/local/data/store-events/kv"}
    pub = ("02020202-0202-0202-0202-020202020202", Count(2))
    assert events[0].to_data() == ("insert", "kv", "k", 1, Timespan.from_ns(5 * SEC), *pub)
    assert events[1].to_data() == ("update", "kv", "k", 1, 2, None, *pub)
    assert events[2].to_data() == ("erase", "kv", "k", *pub)
    master_pub = (M.endpoint_string(), Count(1))
    assert events[4].to_data() == ("expire", "kv", "e", *master_pub)


def test_bad_writes_are_refused_and_change_nothing() -> None:
    net = setup()
    master, a = net.master, net.clones["a"]
    assert master is not None
    net.settle()
    master.local(PutCommand("text", "abc", None, M), net.now)
    net.settle()
    net.events.clear()
    for bad in (ops.increment("text", 1), ops.push("text", 1), ops.decrement("missing", 1)):
        with pytest.raises(StoreError) as info:
            master.local(bad, net.now)
        assert info.value.code in (EC.TypeClash, EC.NoSuchKey)
    with pytest.raises(StoreError) as info:
        a.local(ops.increment("text", 1), net.now)  # checked against the replica
    assert info.value.code is EC.TypeClash
    assert master.outgoing() == [] and master.events() == []
    assert a.outgoing() == []
    assert master.get("text") == "abc"


def test_reads_before_the_first_snapshot_are_stale() -> None:
    net = setup()
    clone = net.clones["a"]
    with pytest.raises(StoreError) as info:
        clone.keys()
    assert info.value.code is EC.StaleData
    clone.local(PutCommand("early", 1, None, A), net.now)  # buffered until attached
    net.settle()
    assert clone.get("early") == 1


def test_malformed_channel_traffic_is_dropped() -> None:
    net = setup()
    master = net.master
    assert master is not None
    net.settle()
    before = master.dropped
    stranger = EntityId(b"\x07" * 16, 7)
    master.receive(InternalCommand(9, stranger, M, PutCommand("x", 1, None, stranger)), net.now)
    master.receive(InternalCommand(0, A, M, CumulativeAckCommand(10**6)), net.now)  # beyond seq
    assert master.dropped == before + 2
    net.settle()
    assert not master.exists("x")


# -- interoperation with Broker's recorded session ------------------------------------

REAL_CLONE = EntityId(bytes.fromhex("3169cf5839ef5d9cb880c909a280dce4"), 8)
REAL_MASTER = EntityId(bytes.fromhex("da5de73efaa650a7ac2a16fb92f55afd"), 6)


def _recorded(direction: str) -> list[InternalCommand]:
    data = (VECTORS / f"broker-v1-types-and-store.{direction}.bin").read_bytes()
    out, pos = [], 0
    while pos < len(data):
        (size,) = struct.unpack_from(">I", data, pos)
        body = data[pos + 4 : pos + 4 + size]
        pos += 4 + size
        if len(body) > 37 and body[32] == 2 and body[1:5] != b"ZEEK":
            (n,) = struct.unpack_from(">H", body, 35)
            out.append(decode_command(body[37 + n :]))
    return out


def test_our_master_serves_a_recorded_broker_clone() -> None:
    master = MasterState("kv", MemoryBackend(), REAL_MASTER, T0)
    sent = []
    for cmd in _recorded("c2s"):
        master.receive(cmd, T0)
        sent.extend(c for _, c in master.outgoing())
    assert isinstance(sent[0].content, AckCloneCommand) and sent[0].receiver == REAL_CLONE
    assert master.get("a") == 1 and master.get("n") == 5 and master.get("e") == "x"
    assert [e.kind for e in master.events()] == ["insert", "insert", "insert"]


def test_our_clone_follows_a_recorded_broker_master() -> None:
    clone = CloneState("kv", REAL_CLONE, T0)
    hello = clone.outgoing()
    assert [encode_command(c) for _, c in hello] == [encode_command(_recorded("c2s")[0])]
    for cmd in _recorded("s2c"):
        clone.receive(cmd, T0)
    assert clone.master == REAL_MASTER and clone.synced
    assert state(clone.snapshot()) == state([("a", 1), ("n", 5), ("e", "x")])


def test_a_clone_the_master_dropped_is_taken_back_when_it_speaks_again() -> None:
    net = Shuttle(8)
    net.master = MasterState("kv", MemoryBackend(), M, net.now, connection_timeout=20)
    net.clones["a"] = CloneState("kv", A, net.now, connection_timeout=1000)
    master, a = net.master, net.clones["a"]
    net.settle()
    net.cut.add("a")
    master.local(PutCommand("k", 1, None, M), net.now)
    net.run(30)
    assert master.clones == ()  # timed out at the master, while the clone still waits
    net.cut.clear()
    for _ in range(50):
        if a.exists("k"):
            break
        net.step()
    assert a.get("k") == 1 and a.resyncs == 0  # taken back long before its own timeout
    net.settle()
    assert_converged(net)
