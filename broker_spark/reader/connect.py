"""Open an endpoint that reaches the Broker world as the data source's options say.

Both the stream reader (driver side, long-lived) and the writers (one short
endpoint per task) come here: build a :class:`Configuration` from the ``ssl.*``
options, then ``listen``, ``peer`` and/or connect to a ``websocket`` API (each
opened by :class:`~broker_spark.source_opener.SourceOpener`, the command's opener
too). Any failure shuts the half-built endpoint down and raises
:class:`~broker_spark.reader.options.BrokerOptionError` naming the option and
what went wrong (the endpoint's own error status when it gave one), so a query
fails at start with a message that says what to fix.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from broker_spark.config import Configuration
from broker_spark.endpoint import Endpoint
from broker_spark.reader.options import BrokerOptionError, ConnectionOptions
from broker_spark.source_opener import SourceError, SourceOpener, open_zeromq_logs
from broker_spark.zeromq.curve import CurveConfigError

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
        opener = SourceOpener(endpoint, endpoint.make_status_subscriber(False))
        if before_connect is not None:
            before_connect(endpoint)
        if conn.listen is not None:
            port = _opened("listen", opener.listen, conn.listen.host, conn.listen.port)
            log.info(
                "broker endpoint %s listens on %s:%d", endpoint.node_id(), conn.listen.host, port
            )
        for address in conn.peers:
            _opened("peer", opener.peer, address.host, address.port, retry)
        if conn.websocket is not None:
            url, topics, pacing = conn.websocket.url, list(websocket_topics), websocket_options
            _opened("websocket", opener.websocket, url, topics, retry, **(pacing or {}))
        if conn.zeromq.proxy:
            _zeromq(opener, conn)
        opener.statuses.reset()
    except BaseException:
        endpoint.shutdown()
        raise
    return endpoint


def _opened(option: str, open_source: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """``open_source(*args, **kw)``, its failure as ``option``'s error (showing the source as
    the opener does: a URL without its credentials)."""
    try:
        return open_source(*args, **kw)
    except SourceError as exc:
        raise BrokerOptionError(option, exc.target, exc.reason) from None


#: Milliseconds a task's XPUB may take to hand what it published to the proxy when it
#: closes (Zeek's linger_ms is 500): the writers' acknowledgement waits for that.
ZEROMQ_LINGER_MS = 30_000


def _zeromq(opener: SourceOpener, conn: ConnectionOptions) -> None:
    """Join the Zeek cluster whose ZeroMQ proxy the options name (ZeroMQ redials by itself)."""
    zeromq = conn.zeromq
    if zeromq.xsub is None or zeromq.xpub is None:
        raise BrokerOptionError(
            "zeromq.proxy",
            None,
            "needs both the proxy's XPUB (connectXsubEndpoint) and XSUB (connectXpubEndpoint)",
        )
    _opened(
        "zeromq.proxy",
        opener.zeromq_proxy,
        zeromq.xsub,
        zeromq.xpub,
        curve=zeromq.curve_keys(),
        linger_ms=ZEROMQ_LINGER_MS,
    )


def open_log_receiver(conn: ConnectionOptions) -> Any:
    """The logger role on Zeek's ZeroMQ cluster backend: a PULL socket bound on
    ``zeromq.logs`` that Zeek nodes PUSH their log batches to, drained on its own thread
    (a :class:`~broker_spark.zeromq.log_receiver.ZeroMQLogReceiver`: ``take_stamped``
    and ``close``, as the pump takes an endpoint's subscription). With CURVE keys (the
    ``zeromq.curve*`` options, or Zeek's environment variables) it is a CURVE server.
    Fails with a :class:`BrokerOptionError` naming the option when it cannot bind."""
    bind = conn.zeromq.logs
    if bind is None:
        raise BrokerOptionError("zeromq.logs", None, "is required for the ZeroMQ logger role")
    try:
        return open_zeromq_logs(bind, conn.zeromq.curve_keys())
    except CurveConfigError as exc:
        raise BrokerOptionError("zeromq.logs", bind, str(exc)) from None
    except SourceError as exc:
        raise BrokerOptionError("zeromq.logs", bind, exc.reason) from None
