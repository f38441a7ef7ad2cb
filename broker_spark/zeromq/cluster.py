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
only what :class:`ZeroMQOwner` describes of an endpoint.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

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
    from broker_spark.core.actor import Core
    from broker_spark.core.loop_thread import LoopThread

__all__ = ["DEFAULT_JOIN_TIMEOUT", "ZeroMQOwner", "join", "leave", "links_of"]

#: Seconds a join waits for the proxy to forward both ways.
DEFAULT_JOIN_TIMEOUT = 10.0

_ATTRIBUTE = "_zeromq_links"
_lock = threading.Lock()


class ZeroMQOwner(Protocol):
    """What joining uses of an endpoint (an :class:`~broker_spark.endpoint.Endpoint` is one)."""

    _core: Core
    _loop: LoopThread

    def node_id(self) -> str: ...


def links_of(endpoint: ZeroMQOwner) -> dict[tuple[str, str], ZeroMQLink]:
    with _lock:
        links = getattr(endpoint, _ATTRIBUTE, None)
        if links is None:
            links = {}
            setattr(endpoint, _ATTRIBUTE, links)
        return links


def join(
    endpoint: ZeroMQOwner,
    xsub_endpoint: str,
    xpub_endpoint: str,
    *,
    curve: CurveKeys | None = None,
    timeout: float = DEFAULT_JOIN_TIMEOUT,
    linger_ms: int = LINGER_MS,
) -> bool:
    """Join the cluster whose proxy has its XPUB at ``xsub_endpoint`` and its XSUB at
    ``xpub_endpoint``; True once the proxy forwards both ways (see the module)."""
    core = endpoint._core
    loop = endpoint._loop
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
    marker = f"{INTERNAL_TOPIC_PREFIX}{endpoint.node_id()}.join."
    network = NetworkInfo(xsub_endpoint, 0, 0.0)

    def handshake(name: str, ok: bool, why: str) -> None:
        if not ok:
            failures.append(why)

    def make() -> ZeroMQLink:
        link = ZeroMQLink(
            core,
            xsub_endpoint,
            xpub_endpoint,
            node_id=zeromq_node_id(endpoint.node_id()),
            curve=curve,
            linger_ms=linger_ms,
            on_handshake=handshake,
        )
        link.subscribe_marker(marker)
        return link

    try:
        link = loop.run_sync(make)
    except Exception as exc:  # a malformed endpoint (zmq.ZMQError)
        loop.run_sync(
            core.emit,
            Error(
                EC.PeerUnavailable, f"cannot join {xsub_endpoint}: {exc}", EndpointInfo("", network)
            ),
        )
        raise ValueError(f"cannot connect to the ZeroMQ proxy at {xsub_endpoint}: {exc}") from None
    ready = wait_until(lambda: bool(failures) or marker in link.internal, timeout)
    if failures or not ready:
        if not failures:
            loop.run_sync(
                core.emit,
                Error(
                    EC.PeerUnavailable,
                    f"no ZeroMQ proxy answered at {xsub_endpoint} and {xpub_endpoint} "
                    f"within {timeout:g} s",
                    EndpointInfo("", network),
                ),
            )
        loop.run_sync(link.close, SC.PeerLost)
        return False

    def add() -> None:
        link.subscribe_marker(marker, subscribe=False)
        link.prefixes = tuple(sorted(link.subscriptions))
        link.joined = True
        core.add_link(link)

    try:
        loop.run_sync(add)
    except BrokerError:
        loop.run_sync(link.close, SC.PeerLost)
        return False
    with _lock:
        links[key] = link
    return True


def leave(endpoint: ZeroMQOwner, xsub_endpoint: str | None = None) -> bool:
    """Leave the cluster(s) joined (all, or the one whose proxy XPUB is ``xsub_endpoint``);
    what the XPUB still holds is sent for up to ``linger_ms``. False if none was joined."""
    links = links_of(endpoint)
    with _lock:
        chosen = [k for k in links if xsub_endpoint is None or k[0] == xsub_endpoint]
        gone = [links.pop(k) for k in chosen]
    for link in gone:
        endpoint._loop.run_sync(endpoint._core.remove_link, link, SC.PeerRemoved)
    return bool(gone)
