"""Whole networks of version 2 endpoints in SimNet: routes, exactly-once delivery, failures, TTL.

Message-count bounds asserted here (docs/protocol-v2.md, "Message counts"):
with copies in breadth-first order (``reorder=False``) one subscription change
costs exactly ``2E - (n - 1)`` messages in a connected network of n nodes and
E links -- ``n - 1`` in a chain, ``(n - 1)^2`` in a full mesh; with copies in
random order it costs at most ``deg(origin) + sum over the others of
(deg - 1) * (n - dist)``. A lost link costs at most two revocation floods
(each at most 2E) and ``2 + r`` subscription floods, r being the ids named in
the two refresh lists.
"""

from __future__ import annotations

import random

import pytest

from broker_spark.protocol.routing import EndpointDiscovered, EndpointUnreachable
from broker_spark.protocol.v2_messages import PathRevocation
from tests.simnet import (
    SimNet,
    bfs_distances,
    chain,
    full_mesh,
    random_connected,
    ring,
    star,
)

TOPOLOGIES = {
    "chain10": chain(10),
    "ring12": ring(12),
    "star10": star(10),
    "mesh8": full_mesh(8),
    "random50": random_connected(50, 40, seed=1),
    "random50-dense": random_connected(50, 80, seed=2),
}


def degrees(edges) -> dict:
    deg: dict = {}
    for a, b in edges:
        deg[a] = deg.get(a, 0) + 1
        deg[b] = deg.get(b, 0) + 1
    return deg


def assert_routes_match_bfs(net: SimNet, edges) -> None:
    """Every node's distances equal breadth-first hop counts; paths follow real links."""
    links = {frozenset(e) for e in edges}
    for src in net.nodes:
        truth = bfs_distances(edges, src)
        router = net.router(src)
        assert {net.name_of(i) for i in router.reachable()} == set(truth), src
        for dst, hops in truth.items():
            path = net.path_names(src, dst)
            assert path is not None and len(path) == hops, (src, dst, path, hops)
            assert all(
                frozenset(pair) in links for pair in zip([src, *path], path, strict=False)
            ), path


def converged(name: str, *, reorder: bool, seed: int = 7, **faults) -> tuple[SimNet, list]:
    edges = TOPOLOGIES[name]
    net = SimNet(seed, reorder=reorder, **faults).build(edges)
    for node in net.nodes:
        if node % 3 == 0:
            net.subscribe(node, "/t")
        elif node % 3 == 1:
            net.subscribe(node, "/other")
        # node % 3 == 2 subscribes to nothing and only forwards
    net.run()
    return net, edges


@pytest.mark.parametrize("reorder", [False, True], ids=["bfs-order", "any-order"])
@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_routes_and_exactly_once_delivery(name: str, reorder: bool) -> None:
    net, edges = converged(name, reorder=reorder)
    assert_routes_match_bfs(net, edges)
    subscribers = {n for n in net.nodes if n % 3 == 0}
    publishers = sorted(net.nodes)[:: max(1, len(net.nodes) // 4)]
    for i, publisher in enumerate(publishers):
        net.publish(publisher, "/t/x", b"payload-%d" % i, command=bool(i % 2))
    net.run()
    for node in net.nodes:
        got = sorted(d.payload for d in net.received(node))
        want = sorted(b"payload-%d" % i for i, p in enumerate(publishers) if p != node)
        assert got == (want if node in subscribers else []), node
    assert {d.kind for d in net.deliveries} == {"data", "command"}
    assert net.ttl_dropped == 0 and net.unroutable == 0


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_flooding_message_counts(name: str) -> None:
    edges = TOPOLOGIES[name]
    n, links = len({x for e in edges for x in e}), len(edges)
    deg = degrees(edges)
    for reorder in (False, True):
        net = SimNet(3, reorder=reorder).build(edges)
        net.run()
        origin = n - 1
        net.reset_stats()
        net.subscribe(origin, "/t")
        net.run()
        count = net.sent["subscription"]
        assert set(net.sent) == {"subscription"}
        if reorder:
            dist = bfs_distances(edges, origin)
            bound = deg[origin] + sum((deg[v] - 1) * (n - d) for v, d in dist.items())
            assert 2 * links - (n - 1) <= count <= bound
        else:
            assert count == 2 * links - (n - 1)
    if name == "chain10":
        assert 2 * links - (n - 1) == n - 1
    if name == "mesh8":
        assert 2 * links - (n - 1) == (n - 1) ** 2


def test_chain_subscription_costs_n_minus_one_messages() -> None:
    net = SimNet(0, reorder=True).build(chain(10))
    net.run()
    net.reset_stats()
    net.subscribe(4, "/zeek")  # from the middle too
    net.run()
    assert net.sent["subscription"] == 9


@pytest.mark.parametrize("ttl", [1, 4, 8, 9, 16])
def test_ttl_limits_hops_on_a_chain(ttl: int) -> None:
    net = SimNet(1).build(chain(10))
    for node in range(1, 10):
        net.subscribe(node, "/t")
    net.run()
    net.publish(0, "/t", b"x", ttl=ttl)
    net.run()
    assert sorted(d.node for d in net.deliveries) == list(range(1, min(ttl, 9) + 1))
    assert net.ttl_dropped == (1 if ttl < 9 else 0)


def test_data_loss_never_duplicates() -> None:
    net, _ = converged("random50", reorder=True, drop=0.1, faulty_kinds={"data"})
    for i in range(20):
        net.publish(i, "/t/x", b"%d" % i)
    net.run()
    assert net.dropped["data"] > 0
    seen = [(d.node, d.payload) for d in net.deliveries]
    assert len(seen) == len(set(seen))
    assert all(d.node % 3 == 0 for d in net.deliveries)


def test_duplicated_and_reordered_routing_messages_still_converge() -> None:
    net, edges = converged(
        "random50", reorder=True, duplicate=0.2, faulty_kinds={"subscription", "revocation"}
    )
    assert net.duplicated["subscription"] > 0
    assert_routes_match_bfs(net, edges)
    edges = [e for e in edges if e != edges[3]]
    net.remove_link(*TOPOLOGIES["random50"][3])
    net.run()
    assert net.duplicated["revocation"] > 0
    assert_routes_match_bfs(net, edges)


def reachability_from_events(net: SimNet, events) -> set:
    state: dict = {}
    for event in events:
        if isinstance(event, EndpointDiscovered):
            state[event.endpoint] = True
        elif isinstance(event, EndpointUnreachable):
            state[event.endpoint] = False
    return {net.name_of(e) for e, up in state.items() if up}


def names(net: SimNet, events, kind) -> set:
    return {net.name_of(e.endpoint) for e in events if isinstance(e, kind)}


@pytest.mark.parametrize("reorder", [False, True], ids=["bfs-order", "any-order"])
def test_link_failures_and_heals_converge(reorder: bool) -> None:
    """Random link removals and additions on a sparse 50-node graph, then heal everything."""
    rng = random.Random(3)  # 5 removals (2 of them cut the graph), 4 additions
    original = random_connected(50, 15, seed=3)
    edges = set(original)
    net = SimNet(11, reorder=reorder).build(original)
    for node in net.nodes:
        net.subscribe(node, f"/t/{node % 4}")
    net.run()
    history = {n: list(net.nodes[n].events) for n in net.nodes}
    refreshes: list[int] = []
    net.on_send = lambda src, dst, msg: (
        refreshes.append(len(msg.refresh))
        if isinstance(msg, PathRevocation) and msg.revoker == net.id_of(src)
        else None
    )
    partitions = 0

    def settle_and_check(before: dict) -> None:
        nonlocal partitions
        net.run()
        assert_routes_match_bfs(net, edges)
        for node in net.nodes:
            events = net.nodes[node].events
            history[node] += events
            reach = set(bfs_distances(edges, node))
            assert reachability_from_events(net, history[node]) == reach, node
            assert set(before[node]) - reach <= names(net, events, EndpointUnreachable)
            assert reach - set(before[node]) <= names(net, events, EndpointDiscovered)
            partitions += bool(set(before[node]) - reach)
        if net.sent["revocation"] and not reorder:
            flood = 2 * len(edges)
            assert net.sent["revocation"] <= 2 * flood
            assert net.sent["subscription"] <= (2 + sum(refreshes)) * flood
        # publications reach exactly the reachable subscribers, once
        net.reset_stats()
        net.publish(0, "/t/1", b"p")
        net.run()
        want = {n for n in bfs_distances(edges, 0) if n % 4 == 1}
        assert sorted(d.node for d in net.deliveries) == sorted(want)

    for _ in range(10):
        before = {n: bfs_distances(edges, n) for n in net.nodes}
        net.reset_stats()
        refreshes.clear()
        if rng.random() < 0.6:
            edge = rng.choice(sorted(edges))
            edges.discard(edge)
            net.remove_link(*edge)
        else:
            edge = tuple(sorted(rng.sample(range(50), 2)))
            if edge in edges:
                continue
            edges.add(edge)
            net.add_link(*edge)
        settle_and_check(before)
    assert partitions  # some removal cut the network in two
    before = {n: bfs_distances(edges, n) for n in net.nodes}
    net.reset_stats()
    for edge in original:
        if edge not in edges:
            edges.add(edge)
            net.add_link(*edge)
    settle_and_check(before)
    assert net.sent["revocation"] == 0


def test_partition_reports_unreachable_then_heal_rediscovers() -> None:
    edges = chain(10)
    net = SimNet(2).build(edges)
    net.run()
    net.reset_stats()
    net.remove_link(4, 5)
    net.run()
    for left in range(5):
        down = {
            net.name_of(e.endpoint)
            for e in net.nodes[left].events
            if isinstance(e, EndpointUnreachable)
        }
        assert down == set(range(5, 10))
        assert net.router(left).reachable() == {net.id_of(n) for n in range(5) if n != left}
    net.reset_stats()
    net.add_link(4, 5)
    net.run()
    assert_routes_match_bfs(net, edges)
    for right in range(5, 10):
        up = {
            net.name_of(e.endpoint)
            for e in net.nodes[right].events
            if isinstance(e, EndpointDiscovered)
        }
        assert up == set(range(5))
    # a heal needs no flood: the two replays plus the forwards of improvements
    assert net.sent["revocation"] == 0


def test_crashed_node_becomes_unreachable_everywhere() -> None:
    net, edges = converged("mesh8", reorder=True)
    net.isolate(3)
    net.run()
    for node in net.nodes:
        if node != 3:
            assert net.id_of(3) not in net.router(node).reachable()
    assert_routes_match_bfs(net, [e for e in edges if 3 not in e])


def test_lost_next_hop_reroutes_a_message_in_flight() -> None:
    # 1 reaches 3 through 2 or through 4; the link 1's plan uses breaks mid-flight.
    net = SimNet(4, reorder=False).build([(0, 1), (1, 2), (2, 3), (1, 4), (4, 3)])
    net.subscribe(3, "/t")
    net.run()
    first, second, _ = net.path_names(0, 3)
    assert first == 1
    net.publish(0, "/t", b"x")
    net.remove_link(1, second)
    net.run()
    assert [d.node for d in net.deliveries] == [3]
    assert net.unroutable == 0


def test_same_seed_same_run() -> None:
    def run(seed: int):
        net = SimNet(seed, reorder=True, duplicate=0.1, faulty_kinds={"subscription"})
        net.build(random_connected(20, 15, seed=4))
        for node in range(0, 20, 2):
            net.subscribe(node, "/t")
        net.run()
        net.publish(1, "/t", b"x")
        net.remove_link(*random_connected(20, 15, seed=4)[0])
        net.run()
        return (
            dict(net.sent),
            net.steps,
            [(d.node, d.payload) for d in net.deliveries],
            [n.events for n in net.nodes.values()],
        )

    assert run(9) == run(9)
    assert run(9)[1] != run(10)[1]


def test_publisher_never_receives_its_own_publication() -> None:
    net, _ = converged("ring12", reorder=False)
    net.publish(0, "/t", b"x")
    net.run()
    assert 0 not in {d.node for d in net.deliveries}
    assert {d.node for d in net.deliveries} == {3, 6, 9}
