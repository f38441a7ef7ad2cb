"""The WebSocket side of one endpoint: its servers, its outgoing bridges, its TLS.

``Endpoint.web_socket_listen`` / ``web_socket_peer`` / ``web_socket_unpeer``
delegate here from any thread; everything that touches connections runs on
the endpoint's loop. One manager per endpoint, made on first use, kept on the
endpoint's :class:`~broker_spark.core.transport_host.TransportHost` and dropped
with it (nothing to stop explicitly: the endpoint's shutdown closes every link
and cancels every task, and the servers' and bridges' own clean-up closes their
sockets).

TLS follows the endpoint's settings, as Broker does ("the same SSL
parameters for native and WebSocket peers"): a server speaks ``wss`` with
the endpoint's server context (anonymous unless certificates are
configured) and plain ``ws`` when ``disable_ssl`` is set; a bridge to a
``wss://`` URL uses the endpoint's client context, which accepts a server
without a verifiable certificate unless certificates are configured.

The arrow runs one way: :mod:`broker_spark.endpoint` imports this module and
this module does not import the endpoint (nor the package root); of an
endpoint it uses only the ``TransportHost`` it hands out (``transport_host()``).
"""

from __future__ import annotations

import concurrent.futures
import ssl
import threading
import time
from typing import TYPE_CHECKING, Any

from broker_spark.config import TLSSettings
from broker_spark.tls import TLSContexts, make_contexts
from broker_spark.topic import topic_list
from broker_spark.version import Version
from broker_spark.websocket.bridge import WebSocketPeer, normalize_url
from broker_spark.websocket.pacing import DEFAULT_GROUP, DEFAULT_WINDOW
from broker_spark.websocket.server import DEFAULT_MAX_CONNECTIONS, WebSocketServer

if TYPE_CHECKING:
    from broker_spark.core.transport_host import TransportHost, TransportOwner

__all__ = [
    "DEFAULT_CLOSE_TIMEOUT",
    "DEFAULT_MAX_SIZE",
    "DEFAULT_OPEN_TIMEOUT",
    "WebSocketManager",
    "manager_for",
]

#: Largest frame a client may send (bytes); beyond it the connection closes with 1009.
DEFAULT_MAX_SIZE = 4 * 1024 * 1024
#: Seconds a polite close may take before the connection is aborted.
DEFAULT_CLOSE_TIMEOUT = 2.0
#: Seconds an outgoing connection may take to open and be acked.
DEFAULT_OPEN_TIMEOUT = 10.0

_KEY = "websocket_manager"


def manager_for(endpoint: TransportOwner) -> WebSocketManager:
    """The WebSocket manager of ``endpoint`` (made on first use; thread-safe).

    Kept on the endpoint's transport host, so it lives exactly as long as the endpoint.
    """
    host = endpoint.transport_host()
    return host.kept(_KEY, lambda: WebSocketManager(host))


def _version() -> str:
    return Version.string()


class WebSocketManager:
    """Servers and bridges of one endpoint; the public methods may be called from any thread."""

    def __init__(self, host: TransportHost) -> None:
        self._host = host
        self._core = host.core
        self._config = host.config
        self._lock = threading.Lock()
        self._contexts: TLSContexts | None = None
        self._contexts_made = False
        self.servers: dict[int, WebSocketServer] = {}
        self.peers: dict[str, WebSocketPeer] = {}

    # -- TLS ----------------------------------------------------------------------------

    def _settings(self, disable_ssl: bool) -> TLSSettings:
        return TLSSettings.of(self._config, disable_ssl)

    def contexts(self) -> TLSContexts:
        """The endpoint's TLS contexts, made once (also when the endpoint disabled SSL)."""
        with self._lock:
            if not self._contexts_made:
                self._contexts = make_contexts(self._settings(False))
                self._contexts_made = True
            assert self._contexts is not None
            return self._contexts

    # -- serving ------------------------------------------------------------------------

    def listen(
        self,
        address: str = "127.0.0.1",
        port: int = 0,
        *,
        send_buffer_size: int | None = None,
        max_size: int = DEFAULT_MAX_SIZE,
        close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
        ssl_context: ssl.SSLContext | None = None,
        token: str | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        per_address: int | None = None,
    ) -> int:
        """Serve the API on ``address:port``; the bound port, or 0 when binding failed.

        With ``token`` clients must present it (``Authorization: Bearer``, or as
        their URL's password); at most ``max_connections`` are served at once, at most
        ``per_address`` (default: the ``connections_per_address`` option) from one address.
        """
        if ssl_context is None and not self._config.options.disable_ssl:
            ssl_context = self.contexts().server
        server = WebSocketServer(
            self._core,
            version=_version(),
            ssl_context=ssl_context,
            send_capacity=_positive(
                "send_buffer_size", send_buffer_size, self._config.options.peer_buffer_size
            ),
            max_size=_positive("max_size", max_size, DEFAULT_MAX_SIZE),
            close_timeout=close_timeout,
            token=token,
            max_connections=_positive("max_connections", max_connections, DEFAULT_MAX_CONNECTIONS),
            per_address=_positive(
                "per_address", per_address, self._config.options.connections_per_address
            ),
        )
        try:
            bound = self._host.run_coro(server.start(address, port))
        except OSError:
            return 0
        with self._lock:
            self.servers[bound] = server
        return bound

    # -- bridging -----------------------------------------------------------------------

    def peer(
        self,
        url: str,
        topics: Any = (),
        retry: float = 10.0,
        *,
        publish_topics: Any = None,
        window: int = DEFAULT_WINDOW,
        group: int = DEFAULT_GROUP,
        send_buffer_size: int | None = None,
        max_size: int = DEFAULT_MAX_SIZE,
        open_timeout: float = DEFAULT_OPEN_TIMEOUT,
        close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
        ssl_context: ssl.SSLContext | None = None,
        token: str | None = None,
        wait: bool = True,
    ) -> bool:
        """Bridge to the WebSocket API at ``url``; True once acked (see :class:`WebSocketPeer`).

        ``topics`` are what we subscribe to; what we send is every publication of this
        endpoint, or (``publish_topics``) those and forwarded messages on those prefixes;
        at most ``window`` messages are in flight, a probe after every ``group``.

        With ``wait`` (the default) blocks until the first attempt succeeded or
        failed; with ``retry`` > 0 a failed bridge keeps trying in the background.
        Without ``wait`` returns False right away and connects in the background.
        ``token`` is sent as ``Authorization: Bearer`` (a server started with one).
        """
        url = normalize_url(url)
        prefixes = tuple(dict.fromkeys(topic_list(topics)))
        if ssl_context is None and url.startswith("wss:"):
            ssl_context = self.contexts().client
        with self._lock:
            existing = self.peers.get(url)
        if existing is not None and not existing.finished:
            return existing.link is not None
        publish = (
            None if publish_topics is None else tuple(dict.fromkeys(topic_list(publish_topics)))
        )
        bridge = WebSocketPeer(
            self._core,
            url,
            prefixes,
            publish_topics=publish,
            window=_positive("window", window, DEFAULT_WINDOW),
            group=_positive("group", group, DEFAULT_GROUP),
            retry=float(retry),
            ssl_context=ssl_context,
            send_capacity=_positive(
                "send_buffer_size", send_buffer_size, self._config.options.peer_buffer_size
            ),
            max_size=_positive("max_size", max_size, DEFAULT_MAX_SIZE),
            open_timeout=open_timeout,
            close_timeout=close_timeout,
            token=token,
        )
        with self._lock:
            self.peers[url] = bridge
        self._host.run_sync(bridge.start)
        if not wait:
            return False
        try:
            return bridge.first_result.result(2 * open_timeout + close_timeout)
        except concurrent.futures.TimeoutError:
            return False

    def link(self, url: str) -> Any:
        """The link of the bridge to ``url`` while it is up, else None."""
        with self._lock:
            bridge = self.peers.get(normalize_url(url))
        return None if bridge is None else bridge.link

    def flush(self, url: str, timeout: float) -> bool:
        """Wait until the bridge to ``url`` sent everything and the server processed it (the
        echo of the last probe); False when it did not within ``timeout`` or the link is down."""
        deadline = time.monotonic() + timeout
        delay = 0.0005
        while True:
            link = self.link(url)
            if link is None or link.closed:
                return False
            if self._host.run_sync(link.settled):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    def unpeer(self, url: str) -> bool:
        """Stop the bridge to ``url`` (the peer is reported removed); False if there was none."""
        url = normalize_url(url)
        with self._lock:
            bridge = self.peers.pop(url, None)
        if bridge is None:
            return False
        self._host.run_coro(bridge.stop())
        return True


def _positive(name: str, value: int | None, default: int) -> int:
    if value is None:
        return default
    if type(value) is not int or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value
