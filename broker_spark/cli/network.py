"""``broker-spark status`` and ``broker-spark topology``: what a running node's network looks like.

Both peer a temporary endpoint (a leaf, so it never carries traffic) with the
node over protocol version 2 and read what the temporary endpoint's routing
table then knows (``Endpoint.topology()``): the node, every endpoint reachable
through it with its subscriptions, and the paths to each. The links drawn are
the node's own peerings plus every hop of every path learned; that is the
whole network for chains, trees and rings, while in a dense mesh a link that
is on no shortest path may be missing. A node whose peer speaks only
protocol version 1 (a real Zeek) shares no routes: it shows up alone, with its
subscriptions.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from broker_spark.cli.client_endpoint import Client
from broker_spark.cli.errors import CliError
from broker_spark.cli.node_ids import short
from broker_spark.cli.spool_status import run_spool_status
from broker_spark.cli.svg import render_svg
from broker_spark.cli.tables import table

__all__ = [
    "NETWORK_FIELDS",
    "Network",
    "network_from_snapshot",
    "run_status",
    "run_topology",
]

#: Every key of a node's status (``status --json``) and what it means; docs/reference/status.md
#: is generated from here, and tests/test_reference.py checks it against a node's.
NETWORK_FIELDS = {
    "node": "the node's endpoint id",
    "address": "the `host:port` it was reached at",
    "protocol": "the wire protocol version of the peering (1: Broker's, 2: multi-hop, "
    "between broker-spark endpoints)",
    "peers": "the ids of the node's own peers",
    "endpoints.ID.subscriptions": "the topic prefixes endpoint ID subscribes to (the node "
    "included)",
    "endpoints.ID.route": "the node's shortest path to endpoint ID (the ids after the node)",
    "links": "every link learned, each a pair of endpoint ids",
}

#: Seconds the routing table may take to stop changing after peering.
SETTLE_TIMEOUT = 2.0


@dataclass
class Network:
    """A node's network as seen through one temporary peer."""

    node: str
    address: str
    version: int | None
    #: Subscriptions (filter prefixes) of every endpoint, the node included.
    filters: dict[str, list[str]] = field(default_factory=dict)
    #: For each other endpoint, the node's shortest path to it (ids after the node).
    routes: dict[str, list[str]] = field(default_factory=dict)
    #: Undirected links, each a sorted pair of ids.
    links: set[tuple[str, str]] = field(default_factory=set)

    def peers_of(self, node: str) -> list[str]:
        return sorted({b if a == node else a for a, b in self.links if node in (a, b)})

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "address": self.address,
            "protocol": self.version,
            "peers": self.peers_of(self.node),
            "endpoints": {
                n: {"subscriptions": f, "route": self.routes.get(n, [])}
                for n, f in sorted(self.filters.items())
            },
            "links": sorted([a, b] for a, b in self.links),
        }


def network_from_snapshot(snapshot: dict[str, Any], address: str) -> Network:
    """Build the node's network from the probe's ``Endpoint.topology()``."""
    peers = snapshot["peers"]
    if not peers:
        raise CliError(f"{address} closed the peering before it could be inspected")
    peer = peers[0]
    node = peer["node"]
    endpoints = snapshot["endpoints"]
    net = Network(node, address, peer["version"])
    own = endpoints.get(node)
    net.filters[node] = list(own["filter"] if own else peer["filter"])
    for other, info in endpoints.items():
        if other == node:
            continue
        net.filters[other] = list(info["filter"])
        for path in info["paths"]:
            for a, b in zip(path, path[1:], strict=False):
                net.links.add((a, b) if a < b else (b, a))
            if path and path[0] == node and other not in net.routes:
                net.routes[other] = path[1:]  # paths come shortest first
    return net


def _settled_snapshot(endpoint: Any) -> dict[str, Any]:
    """The topology once two snapshots in a row agree (routes arrive in a burst)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    snap = endpoint.topology()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        again = endpoint.topology()
        if again == snap:
            break
        snap = again
    return snap


def inspect_network(args: argparse.Namespace) -> Network:

    with Client(args) as client:
        client.connect()
        snapshot = _settled_snapshot(client.endpoint)
        return network_from_snapshot(snapshot, client.target)


def _subs(prefixes: list[str]) -> str:
    return ", ".join(prefixes) if prefixes else "-"


def format_status(net: Network) -> list[str]:
    version = f"protocol {net.version}" if net.version else "protocol unknown"
    lines = [
        f"node           {net.node}  at {net.address}  ({version})",
        f"subscriptions  {_subs(net.filters[net.node])}",
    ]
    peers = net.peers_of(net.node)
    if net.version == 1:
        lines.append("peers, routes  unknown: protocol version 1 shares no routing information")
        return lines
    lines.append(f"peers          {len(peers)}")
    if peers:
        rows = [["ENDPOINT", "SUBSCRIPTIONS"]]
        rows += [[short(p), _subs(net.filters.get(p, []))] for p in peers]
        lines += table(rows)
    lines.append(f"routes         {len(net.routes)} endpoint(s) reachable")
    if net.routes:
        rows = [["ENDPOINT", "HOPS", "VIA", "SUBSCRIPTIONS"]]
        order = sorted(net.routes, key=lambda n: (len(net.routes[n]), n))
        for n in order:
            route = net.routes[n]
            via = " > ".join(short(h) for h in route[:-1]) or "-"
            rows.append([short(n), str(len(route)), via, _subs(net.filters.get(n, []))])
        lines += table(rows)
    return lines


def run_status(args: argparse.Namespace) -> int:
    if args.spool is not None or args.relay is not None:
        return run_spool_status(args)
    net = inspect_network(args)
    text = json.dumps(net.as_dict(), indent=2) if args.json else "\n".join(format_status(net))
    sys.stdout.write(text + "\n")
    return 0


def run_topology(args: argparse.Namespace) -> int:

    net = inspect_network(args)
    svg = render_svg(net)
    if args.out == "-":
        sys.stdout.write(svg)
    else:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(svg)
        n, m = len(net.filters), len(net.links)
        print(f"wrote {args.out}: {n} endpoint{'s'[n == 1 :]}, {m} link{'s'[m == 1 :]}")
    return 0
