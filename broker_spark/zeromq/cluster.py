"""An endpoint's membership of Zeek ZeroMQ clusters: ``Endpoint.zeromq_join`` / ``zeromq_leave``.

Joining makes a :class:`~broker_spark.zeromq.proxy_link.ZeroMQLink` (XSUB and XPUB
connected to the cluster's proxy) and waits until the proxy forwards both ways,
as Zeek does before it publishes (``internal_topic_prefix`` in
scripts/policy/frameworks/cluster/backend/zeromq/options.zeek): a subscription to
a topic of our own goes out on the XSUB, and once it comes back on our XPUB the
proxy has also handed us every subscription it knew. Only then is the link added
to the core (``EndpointDiscovered``, ``PeerAdded``), so the first publications
already go where the cluster wants them. A failed CURVE handshake (wrong keys)
ends the attempt at once with an ``Error`` status saying so, as it is fatal to a
Zeek node; no answer within ``timeout`` is ``EC.PeerUnavailable``.

This module sits beside :mod:`~broker_spark.websocket.manager` and, like it, uses
of an endpoint only the :class:`~broker_spark.core.transport_host.TransportHost` it
hands out (``transport_host()``); the links joined are kept there.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from broker_spark.errors import EC, SC, BrokerError
from broker_spark.status import EndpointInfo, Error, NetworkInfo
from broker_spark.zeromq.curve import CurveKeys
from broker_spark.zeromq.proxy_link import (
    INTERNAL_TOPIC_PREFIX,
    LINGER_MS,
    ZeroMQLink,
    wait_until,
    zeromq_node_id,
)

if TYPE_CHECKING:
    from broker_spark.core.transport_host import TransportOwner

__all__ = ["DEFAULT_JOIN_TIMEOUT", "join", "leave", "links_of"]

#: Seconds a join waits for the proxy to forward both ways.
DEFAULT_JOIN_TIMEOUT = 10.0

_KEY = "zeromq_links"
_lock = threading.Lock()


def links_of(endpoint: TransportOwner) -> dict[tuple[str, str], ZeroMQLink]:
    """The endpoint's joined links, by the proxy's two endpoints."""
    return endpoint.transport_host().kept(_KEY, dict)


def join(
    endpoint: TransportOwner,
    xsub_endpoint: str,
    xpub_endpoint: str,
    *,
    curve: CurveKeys | None = None,
    timeout: float = DEFAULT_JOIN_TIMEOUT,
    linger_ms: int = LINGER_MS,
) -> bool:
    """Join the cluster whose proxy has its XPUB at ``xsub_endpoint`` and its XSUB at
    ``xpub_endpoint``; True once the proxy forwards both ways (see the module)."""
    host = endpoint.transport_host()
    core = host.core
    key = (xsub_endpoint, xpub_endpoint)
    links = links_of(endpoint)
    existing = links.get(key)
    if existing is not None and not existing.closed:
        return True
    if curve is not None and curve.any:
        curve.require_client()
    else:
        curve = None
    failures: list[str] = []
    marker = f"{INTERNAL_TOPIC_PREFIX}{host.node_id()}.join."
    network = NetworkInfo(xsub_endpoint, 0, 0.0)

    def handshake(name: str, ok: bool, why: str) -> None:
        if not ok:
            failures.append(why)

    def make() -> ZeroMQLink:
        link = ZeroMQLink(
            core,
            xsub_endpoint,
            xpub_endpoint,
            node_id=zeromq_node_id(host.node_id()),
            curve=curve,
            linger_ms=linger_ms,
            on_handshake=handshake,
        )
        link.subscribe_marker(marker)
        return link

    try:
        link = host.run_sync(make)
    except Exception as exc:  # a malformed endpoint (zmq.ZMQError)
        host.emit(
            Error(
                EC.PeerUnavailable, f"cannot join {xsub_endpoint}: {exc}", EndpointInfo("", network)
            )
        )
        raise ValueError(f"cannot connect to the ZeroMQ proxy at {xsub_endpoint}: {exc}") from None
    ready = wait_until(lambda: bool(failures) or marker in link.internal, timeout)
    if failures or not ready:
        if not failures:
            host.emit(
                Error(
                    EC.PeerUnavailable,
                    f"no ZeroMQ proxy answered at {xsub_endpoint} and {xpub_endpoint} "
                    f"within {timeout:g} s",
                    EndpointInfo("", network),
                )
            )
        host.run_sync(link.close, SC.PeerLost)
        return False

    def add() -> None:
        link.subscribe_marker(marker, subscribe=False)
        link.prefixes = tuple(sorted(link.subscriptions))
        link.joined = True
        core.add_link(link)

    try:
        host.run_sync(add)
    except BrokerError:
        host.run_sync(link.close, SC.PeerLost)
        return False
    with _lock:
        links[key] = link
    return True


def leave(endpoint: TransportOwner, xsub_endpoint: str | None = None) -> bool:
    """Leave the cluster(s) joined (all, or the one whose proxy XPUB is ``xsub_endpoint``);
    what the XPUB still holds is sent for up to ``linger_ms``. False if none was joined."""
    links = links_of(endpoint)
    with _lock:
        chosen = [k for k in links if xsub_endpoint is None or k[0] == xsub_endpoint]
        gone = [links.pop(k) for k in chosen]
    host = endpoint.transport_host()
    for link in gone:
        host.remove_link(link, SC.PeerRemoved)
    return bool(gone)
