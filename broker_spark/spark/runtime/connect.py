"""Open an endpoint that reaches the Broker world as the data source's options say.

Both the stream reader (driver side, long-lived) and the writers (one short
endpoint per task) come here: build a :class:`Configuration` from the ``ssl.*``
options, then ``listen``, ``peer`` and/or connect to a ``websocket`` API. Any
failure shuts the half-built endpoint down and raises
:class:`~broker_spark.spark.options.BrokerOptionError` naming the option and
what went wrong (the endpoint's own error status when it gave one), so a query
fails at start with a message that says what to fix.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from broker_spark.config import Configuration
from broker_spark.endpoint import Endpoint
from broker_spark.spark.options import BrokerOptionError, ConnectionOptions, HostPort

__all__ = ["EndpointSettings", "open_endpoint", "open_log_receiver"]

log = logging.getLogger(__name__)


class EndpointSettings:
    """Sizes of the endpoint's queues, raised from Broker's small defaults for bulk traffic."""

    def __init__(
        self,
        subscriber_queue_size: int = 8192,
        publisher_buffer_size: int = 8192,
        peer_buffer_size: int = 8192,
    ) -> None:
        self.subscriber_queue_size = subscriber_queue_size
        self.publisher_buffer_size = publisher_buffer_size
        self.peer_buffer_size = peer_buffer_size

    def configure(self, config: Configuration) -> Configuration:
        opts = config.options
        opts.subscriber_queue_size = self.subscriber_queue_size
        opts.publisher_buffer_size = self.publisher_buffer_size
        opts.peer_buffer_size = self.peer_buffer_size
        return config


def _errors_text(statuses: Any) -> str:
    """The messages of the errors the endpoint reported (``""`` if none)."""
    if statuses is None:
        return ""
    try:
        items = statuses.poll()
    except Exception:
        return ""
    texts = []
    for item in items:
        message = getattr(item, "message", None)
        code = getattr(item, "code", None)
        if callable(message) and callable(code):
            texts.append(f"{code().name}: {message()}")
    return "; ".join(texts)


def open_endpoint(
    conn: ConnectionOptions,
    *,
    settings: EndpointSettings | None = None,
    before_connect: Callable[[Endpoint], None] | None = None,
    retry: float = 0.0,
    websocket_topics: Sequence[str] = (),
    websocket_options: dict[str, Any] | None = None,
) -> Endpoint:
    """An endpoint that listens, peers and connects as ``conn`` says.

    ``before_connect`` runs after the endpoint exists and before any peering
    (subscribe there, so a peer learns the filter in the handshake and no
    message published right after the peering is missed). ``retry`` is the
    redial interval after a peering or bridge drops (0: never); the first
    attempt fails at once either way, so an unreachable peer fails the
    query at start. ``websocket_topics`` are what a WebSocket bridge subscribes
    to (it sends whatever the endpoint publishes); ``websocket_options`` go to
    :meth:`~broker_spark.endpoint.Endpoint.web_socket_peer` (its pacing).
    """
    config = (settings or EndpointSettings()).configure(conn.configuration())
    endpoint = Endpoint(config)
    try:
        statuses = endpoint.make_status_subscriber(False)
        if before_connect is not None:
            before_connect(endpoint)
        if conn.listen is not None:
            _listen(endpoint, conn.listen, statuses)
        for address in conn.peers:
            _peer(endpoint, address, retry, statuses)
        if conn.websocket is not None:
            _websocket(endpoint, conn, websocket_topics, retry, statuses, websocket_options or {})
        if conn.zeromq.proxy:
            _zeromq(endpoint, conn, statuses)
        statuses.reset()
    except BaseException:
        endpoint.shutdown()
        raise
    return endpoint


def _listen(endpoint: Endpoint, address: HostPort, statuses: Any) -> None:
    try:
        port = endpoint.listen(address.host, address.port)
    except NotImplementedError as exc:
        raise BrokerOptionError("listen", str(address), f"not supported yet: {exc}") from None
    except OSError as exc:
        raise BrokerOptionError("listen", str(address), f"cannot listen: {exc}") from None
    if not port:
        why = _errors_text(statuses) or "the address is in use or not local"
        raise BrokerOptionError("listen", str(address), f"cannot listen: {why}")
    log.info("broker endpoint %s listens on %s:%d", endpoint.node_id(), address.host, port)


def _peer(endpoint: Endpoint, address: HostPort, retry: float, statuses: Any) -> None:
    try:
        ok = endpoint.peer(address.host, address.port, retry)
    except NotImplementedError as exc:
        raise BrokerOptionError("peer", str(address), f"not supported yet: {exc}") from None
    except OSError as exc:
        raise BrokerOptionError("peer", str(address), f"cannot peer: {exc}") from None
    if not ok:
        why = _errors_text(statuses) or "the peer is unreachable or refused the peering"
        raise BrokerOptionError("peer", str(address), f"cannot peer: {why}")


def _websocket(
    endpoint: Endpoint,
    conn: ConnectionOptions,
    topics: Sequence[str],
    retry: float,
    statuses: Any,
    options: dict[str, Any],
) -> None:
    target = conn.websocket
    assert target is not None
    connect = getattr(endpoint, "web_socket_peer", None)
    if connect is None:
        raise BrokerOptionError("websocket", target.url, "not supported yet by this endpoint")
    try:
        ok = connect(target.url, list(topics), retry, **options)
    except NotImplementedError as exc:
        raise BrokerOptionError("websocket", target.url, f"not supported yet: {exc}") from None
    except (OSError, ValueError) as exc:
        raise BrokerOptionError("websocket", target.url, f"cannot connect: {exc}") from None
    if ok is False:
        why = _errors_text(statuses) or "the server is unreachable or refused the connection"
        raise BrokerOptionError("websocket", target.url, f"cannot connect: {why}")


#: Milliseconds a task's XPUB may take to hand what it published to the proxy when it
#: closes (Zeek's linger_ms is 500): the writers' acknowledgement waits for that.
ZEROMQ_LINGER_MS = 30_000


def _zeromq(endpoint: Endpoint, conn: ConnectionOptions, statuses: Any) -> None:
    """Join the Zeek cluster whose ZeroMQ proxy the options name (ZeroMQ redials by itself)."""
    zeromq = conn.zeromq
    if zeromq.xsub is None or zeromq.xpub is None:
        raise BrokerOptionError(
            "zeromq.proxy",
            None,
            "needs both the proxy's XPUB (connectXsubEndpoint) and XSUB (connectXpubEndpoint)",
        )
    try:
        ok = endpoint.zeromq_join(
            zeromq.xsub, zeromq.xpub, curve=zeromq.curve_keys(), linger_ms=ZEROMQ_LINGER_MS
        )
    except ValueError as exc:
        raise BrokerOptionError("zeromq.proxy", zeromq.xsub, str(exc)) from None
    if not ok:
        why = _errors_text(statuses) or "no ZeroMQ proxy answered"
        raise BrokerOptionError(
            "zeromq.proxy", f"{zeromq.xsub},{zeromq.xpub}", f"cannot join: {why}"
        )


def open_log_receiver(conn: ConnectionOptions) -> Any:
    """The logger role on Zeek's ZeroMQ cluster backend: a PULL socket bound on
    ``zeromq.logs`` that Zeek nodes PUSH their log batches to, drained on its own thread
    (a :class:`~broker_spark.zeromq.log_receiver.ZeroMQLogReceiver`: ``take_stamped``
    and ``close``, as the pump takes an endpoint's subscription). With CURVE keys (the
    ``zeromq.curve*`` options, or Zeek's environment variables) it is a CURVE server.
    Fails with a :class:`BrokerOptionError` naming the option when it cannot bind."""
    from broker_spark.zeromq.curve import CurveConfigError
    from broker_spark.zeromq.log_receiver import ZeroMQBindError, ZeroMQLogReceiver

    bind = conn.zeromq.logs
    if bind is None:
        raise BrokerOptionError("zeromq.logs", None, "is required for the ZeroMQ logger role")
    try:
        receiver = ZeroMQLogReceiver(bind, curve=conn.zeromq.curve_keys())
    except (CurveConfigError, ZeroMQBindError) as exc:
        raise BrokerOptionError("zeromq.logs", bind, str(exc)) from None
    log.info(
        "receiving Zeek's logs on %s%s", receiver.endpoint, " (CURVE)" if receiver.curve else ""
    )
    return receiver
