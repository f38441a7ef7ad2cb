"""What an endpoint knows about the network, as plain data: ``Endpoint.topology()``.

An endpoint never sees the whole network directly: it knows its own peers
(the links), and, over protocol version 2, what the routing table learned
from subscription flooding: every reachable endpoint, the paths to it and its
filter. This module takes that knowledge as a snapshot, on the endpoint's
loop (where the state lives, so it is consistent), and hands it out as dicts,
lists and strings that any thread may keep, print or turn into JSON. The
``status`` and ``topology`` commands of the CLI draw from it.

A path is listed from this endpoint outwards, without this endpoint: the
first element is a direct peer, the last the endpoint it leads to. So the
links of the network that this endpoint can see are its own peerings plus the
consecutive pairs of every path. Peers over version 1 (a real Zeek, or Broker
before 3.0) forward no routing information: they show up as peers with their
filter and nothing beyond them.

The arrow runs one way: :mod:`broker_spark.endpoint` imports this module
(``Endpoint.topology``), this module never imports the endpoint. It takes any
object with the two parts it reads, described by :class:`Introspectable`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from broker_spark.core.actor import Core
from broker_spark.core.link import Link
from broker_spark.core.peering import Peering
from broker_spark.protocol.routing import Router
from broker_spark.status import PeerFlags

if TYPE_CHECKING:
    from broker_spark.core.actor import Core
    from broker_spark.core.loop_thread import LoopThread

__all__ = ["Introspectable", "connection_count", "topology_snapshot"]


class Introspectable(Protocol):
    """What introspection reads from an endpoint: its core and the loop thread it runs on.

    An :class:`~broker_spark.endpoint.Endpoint` is one; this module names only
    these two parts, so it does not depend on the endpoint module.
    """

    _core: Core
    _loop: LoopThread


def _id_str(node: bytes) -> str:

    return Core.id_to_str(node)


def _peering(endpoint: Introspectable) -> Any:

    return Peering.existing(endpoint._core)


def topology_snapshot(endpoint: Introspectable) -> dict[str, Any]:
    """This endpoint's view of the network (see the module docstring).

    Returns ``{"node": id, "filter": [prefixes], "peers": [...], "endpoints": {...}}``:

    - ``peers``: one dict per link with ``node``, ``address``, ``port`` (empty
      and 0 when unknown, e.g. for inbound or in-process peers), ``inbound``,
      ``version`` (1 or 2 for TCP/TLS peers, None for other links) and
      ``filter`` (the topics the peer asked us for; see :func:`_asked_for`);
    - ``endpoints``: for every endpoint reachable over version 2 routing, by
      id: ``filter`` (its own subscriptions), ``distance`` (hops) and
      ``paths`` (lists of ids, shortest first).
    """
    core = endpoint._core
    peering = _peering(endpoint)

    def snapshot() -> dict[str, Any]:
        router = peering.fabric.router if peering is not None else None
        peers = []
        for link in list(core.links.values()):
            peers.append(
                {
                    "node": link.peer_str,
                    "address": link.network.address,
                    "port": link.network.port,
                    "inbound": bool(link.flags & PeerFlags.Inbound),
                    "version": getattr(link, "version", None),
                    "filter": _asked_for(link, router),
                }
            )
        endpoints: dict[str, Any] = {}
        if router is not None:
            for node in sorted(router.reachable()):
                paths = sorted(router.paths(node), key=lambda p: (len(p), p))
                endpoints[_id_str(node)] = {
                    "filter": list(router.filter_of(node) or ()),
                    "distance": router.distance(node),
                    "paths": [[_id_str(hop) for hop in path] for path in paths],
                }
        return {
            "node": core.node_str,
            "filter": list(core.filter),
            "peers": sorted(peers, key=lambda p: p["node"]),
            "endpoints": endpoints,
        }

    return endpoint._loop.run_sync(snapshot)


def _asked_for(link: Link, router: Router | None) -> list[str]:
    """The topics a peer asked us for: what a message of ours must match to reach it.

    A version 1 peer, a WebSocket client or a ZeroMQ proxy states its filter on the
    link. A version 2 link's prefixes are not its peer's: the fabric advertises on
    every such link the union of all reachable endpoints' filters, so that the core
    hands it whatever anyone beyond wants. Its peer's own subscription is what the
    router learned from the peer's subscription update (none until that arrived,
    and until then nothing published here is routed to it), so that is the filter
    shown: "three peers subscribed" then means three peers receive.
    """
    if router is not None and link.kind == "broker" and getattr(link, "version", 1) >= 2:
        return list(router.filter_of(link.peer_id) or ())
    return list(link.prefixes)


def connection_count(endpoint: Introspectable) -> int:
    """Open TCP/TLS connections, peered or not (0 once every goodbye has completed).

    The CLI's one-shot commands wait for this to drop to zero after ``unpeer``:
    a connection closes when the peer answered our goodbye, which it does
    only after reading everything we sent before it.
    """
    peering = _peering(endpoint)
    if peering is None:
        return 0
    return int(endpoint._loop.run_sync(lambda: len(peering.conns)))
