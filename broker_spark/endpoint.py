"""``Endpoint``: the public, thread-safe facade of Broker's Python API.

An endpoint owns one core (:mod:`broker_spark.core.actor`) running on one
asyncio loop in one daemon thread. Every method here may be called from any
thread: hot paths (``publish``) encode in the caller's thread and append to a
bounded queue the core drains in batches; control operations run on the loop
and wait for it.

``shutdown()`` (also on ``with`` exit, on garbage collection and at
interpreter exit) closes links, wakes every subscriber blocked in ``get()``
with :class:`~broker_spark.errors.ShutdownError`, releases publishers blocked
on a full queue, stops the loop and joins its thread within about a second.
At interpreter exit a blocked ``get()`` returns ``None`` (``[]`` for
``get(n)``) instead, so a daemon thread left reading ends without a traceback
(Broker's own bindings hang there).

This facade sits on top: it imports :mod:`~broker_spark.introspect`,
:mod:`~broker_spark.store_api`, :mod:`~broker_spark.websocket.manager` and
:mod:`~broker_spark.zeromq.cluster` (lazily: an endpoint that never uses stores
or WebSockets never loads them) and hands them itself; none of them imports
this module. ``introspect`` and ``store_api`` declare, as a ``typing.Protocol``
on their own side, the few parts of an endpoint they use (``_core``, ``_loop``);
the transports beside the endpoint (WebSocket, ZeroMQ) use only its
:class:`~broker_spark.core.transport_host.TransportHost` (``transport_host()``).
"""

from __future__ import annotations

import atexit
import datetime as _dt
import uuid
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from broker_spark.config import BrokerOptions, Configuration
from broker_spark.core.actor import Core
from broker_spark.core.delivery import flush
from broker_spark.core.loop_thread import LoopThread
from broker_spark.core.node_message import DATA
from broker_spark.core.queues import SubscriberQueue
from broker_spark.core.transport_host import TransportHost
from broker_spark.data.binary import encode
from broker_spark.publisher import Publisher
from broker_spark.status import PeerInfo, PeerStatus
from broker_spark.subscriber import RawSubscriber, StatusSubscriber, Subscriber
from broker_spark.topic import Topic, as_topic_str, topic_list

if TYPE_CHECKING:
    from broker_spark.core.link import Link
    from broker_spark.store_api import Store

T = TypeVar("T")

__all__ = ["Endpoint"]

#: What ``await_peer`` waits without a timeout (Broker's default).
AWAIT_PEER_TIMEOUT = 10.0

#: Seconds ``shutdown`` gives the loop to close everything, and then its thread to end.
SHUTDOWN_TIMEOUT = 0.5


_exiting = False


def _mark_exiting() -> None:
    """At exit, before any endpoint's finalizer: the shutdowns that follow are the exit's."""
    global _exiting
    _exiting = True


def _shutdown(core: Core, loop_thread: LoopThread) -> None:
    """Close the core on its loop, then stop the loop; never raises, never hangs long."""
    core.at_exit = _exiting
    try:
        loop_thread.run_sync(core.close, timeout=SHUTDOWN_TIMEOUT)
    except Exception:
        # The loop is gone or wedged: release the thread-safe parts from here.
        core.close_from_outside()
    loop_thread.stop(SHUTDOWN_TIMEOUT)


class Endpoint:
    """A Broker endpoint: publishes, subscribes, peers (``import broker_spark as broker``)."""

    def __init__(self, config: Configuration | BrokerOptions | None = None) -> None:
        if config is None:
            config = Configuration()
        elif isinstance(config, BrokerOptions):
            config = Configuration(config)
        elif not isinstance(config, Configuration):
            raise TypeError(f"expected a Configuration, got {type(config).__name__}")
        options = config.options
        options.validate()
        self._config = config
        self._options = options
        node = uuid.uuid4()
        self._node_str = str(node)
        self._node_id = node.bytes
        self._ttl = options.ttl
        self._loop = LoopThread(name=f"broker-spark-{self._node_str[:8]}")
        self._core = Core(self._node_id, options, self._loop)
        self._publish_src = self._core.make_source(options.publisher_buffer_size)
        self._transports = TransportHost(self._core, self._loop, config)
        # Runs on shutdown(), on garbage collection and at interpreter exit.
        self._finalizer = weakref.finalize(self, _shutdown, self._core, self._loop)
        # atexit runs the last registered first: keep _mark_exiting ahead of the finalizers.
        atexit.unregister(_mark_exiting)
        atexit.register(_mark_exiting)

    # -- identity -------------------------------------------------------------------

    def node_id(self) -> str:
        """This endpoint's id: a random UUID string."""
        return self._node_str

    @property
    def config(self) -> Configuration:
        return self._config

    # -- publishing --------------------------------------------------------------------

    def publish(self, topic: Any, data: Any) -> None:
        """Publish ``data`` on ``topic`` to peers; blocks while the publish queue is full."""
        if type(topic) is not str:
            topic = as_topic_str(topic)
        self._publish_src.put((topic, encode(data), DATA, self._ttl, self._node_id))

    def publish_batch(self, *batch: Any) -> None:
        """Publish each ``(topic, data)`` pair, in order."""
        ttl, sender = self._ttl, self._node_id
        self._publish_src.put_many(
            [
                (t if type(t) is str else as_topic_str(t), encode(d), DATA, ttl, sender)
                for t, d in batch
            ]
        )

    def publish_encoded(self, messages: Any) -> None:
        """Publish ``(topic, payload)`` pairs whose payloads are Broker binary already.

        A broker_spark extension (Broker's bindings have no such call): bytes that
        are encoded once (a Spark task's rows, a recorded Zeek session) are sent
        as they are. Blocks while the publish queue is full, like
        :meth:`publish_batch`.
        """
        ttl, sender = self._ttl, self._node_id
        batch = [(t, p, DATA, ttl, sender) for t, p in messages]
        if batch:
            self._publish_src.put_many(batch)

    def make_publisher(self, topic: Any) -> Publisher:
        return Publisher(self._core, topic, owner=self)

    # -- subscribing ---------------------------------------------------------------------

    def make_subscriber(
        self, topics: Any, qsize: int | None = None, overflow: str | None = None
    ) -> Subscriber:
        """A subscriber to every prefix in ``topics`` (one topic or an iterable).

        ``qsize`` defaults to 20 (``subscriber_queue_size``); ``overflow`` to
        ``"block"`` (``subscriber_overflow_policy``), see :class:`Subscriber`.
        With ``"block"``, ``qsize`` is a floor: the queue also takes what fits in
        ``subscriber_queue_bytes`` (4 MiB), and only then holds the senders back.
        """
        return self._subscribe(topics, qsize, overflow, safe=False)

    def make_safe_subscriber(
        self, topics: Any, qsize: int | None = None, overflow: str | None = None
    ) -> Subscriber:
        """Like :meth:`make_subscriber`, returning immutable, hashable values."""
        return self._subscribe(topics, qsize, overflow, safe=True)

    def make_raw_subscriber(
        self, topics: Any, qsize: int | None = None, overflow: str | None = None
    ) -> RawSubscriber:
        """Like :meth:`make_subscriber`, its items the payloads' bytes as they arrived
        (an extension; see :class:`~broker_spark.subscriber.RawSubscriber`)."""
        return self._subscribe(topics, qsize, overflow, safe=False, raw=True)

    def _subscribe(
        self,
        topics: Any,
        qsize: int | None,
        overflow: str | None,
        safe: bool,
        raw: bool = False,
    ) -> Any:
        opts = self._options
        prefixes = tuple(dict.fromkeys(topic_list(topics)))
        queue = SubscriberQueue(
            prefixes,
            opts.subscriber_queue_size if qsize is None else qsize,
            opts.subscriber_overflow_policy if overflow is None else overflow,
            safe=safe,
            max_bytes=opts.subscriber_queue_bytes,
        )
        self._loop.run_sync(self._core.add_subscriber, queue)
        if raw:
            return RawSubscriber(self._core, queue, owner=self)
        return Subscriber(self._core, queue, safe, owner=self)

    def make_status_subscriber(self, receive_statuses: bool = False) -> StatusSubscriber:
        """Errors always; statuses (peer added, removed, ...) only with ``receive_statuses``."""
        queue = SubscriberQueue(
            (), self._options.status_queue_size, "drop_oldest", receive_statuses=receive_statuses
        )
        self._loop.run_sync(self._core.add_status_subscriber, queue)
        return StatusSubscriber(self._core, queue, owner=self)

    def forward(self, topics: Any) -> None:
        """Add ``topics`` to this endpoint's filter without a local subscriber."""
        self._loop.run_sync(self._core.add_forward, topic_list(topics))

    # -- peers ------------------------------------------------------------------------------

    def peers(self) -> list[PeerInfo]:
        """Our peers: peered ones, and addresses we dial (``Connecting``/``Reconnecting``)."""
        core = self._core
        tcp = self._tcp(create=False)
        if tcp is not None:
            return self._loop.run_sync(tcp.peers_snapshot)

        def snapshot() -> list[PeerInfo]:
            return [PeerInfo(x.info(), x.flags, PeerStatus.Peered) for x in core.links.values()]

        return self._loop.run_sync(snapshot)

    def peer_subscriptions(self) -> list[Topic]:
        """The union of the filters our peers announced."""
        prefixes: set[str] = set()
        for filt in self._core.peer_filters().values():
            prefixes.update(filt)
        return [Topic(p) for p in sorted(prefixes)]

    def topology(self) -> dict[str, Any]:
        """What this endpoint knows of the network: peers, reachable endpoints, paths
        and filters, as plain data (an extension; see :mod:`broker_spark.introspect`)."""

        # On first use, as _tcp's import: it reads the TCP peering's state.
        from broker_spark.introspect import topology_snapshot

        return topology_snapshot(self)

    def await_peer(self, node_id: str, timeout: float | _dt.timedelta | None = None) -> bool:
        """Block until ``node_id`` is a peer whose filter we know, or reachable over
        version 2 multi-hop routing; False on timeout."""
        if isinstance(timeout, _dt.timedelta):
            timeout = timeout.total_seconds()
        node = str(node_id)
        core = self._core
        tcp = self._tcp(create=False)

        def ready() -> bool:
            # Over version 2 we route by what the router knows, so a neighbour counts once
            # its subscription arrived (it is reachable then), as a peer() waits for it; a
            # version 1 peer (a Zeek) or a WebSocket client stated its filter up front.
            if tcp is not None and node in tcp.fabric.reachable_strs:
                return True
            return any(
                link.peer_str == node and not (link.kind == "broker" and link.version >= 2)  # type: ignore[attr-defined]
                for link in list(core.links.values())
            )

        return core.wait_until(ready, AWAIT_PEER_TIMEOUT if timeout is None else timeout)

    # -- delivery (extensions: what the Spark writers need of an endpoint) -----------------

    def links(self) -> list[Link]:
        """The neighbours as the core sees them now: native peers, WebSocket bridges, a
        ZeroMQ proxy (each a :class:`~broker_spark.core.link.Link`: ``peer_str``, ``kind``,
        ``closed``); what :meth:`flush` may be asked to hear from."""
        return self._loop.run_sync(lambda: list(self._core.links.values()))

    def routes_known(self, links: Sequence[Link]) -> bool:
        """Whether every version 2 peer among ``links`` told us its own subscription.

        Over version 2 a new neighbour's filter arrives as routing messages, one
        endpoint's at a time, and those of endpoints behind it may come first; until
        its own is in, messages meant for it are routed nowhere. Version 1 peers
        (a Zeek) and WebSocket bridges state their filter up front.
        """
        peering = self._tcp(create=False)
        if peering is None:
            return True
        router = peering.fabric.router
        return all(
            router.timestamp_of(link.peer_id) is not None
            for link in links
            if not link.closed and link.kind == "broker" and link.version >= 2  # type: ignore[attr-defined]
        )

    def flush(self, timeout: float = 60.0, links: Sequence[Link] | None = None) -> None:
        """Return once every peer confirmed it took what this endpoint published so far.

        ``links`` (from :meth:`links`) are the neighbours that must confirm, by
        default those up now; each must still be up, and there must be one.
        Raises :class:`~broker_spark.errors.DeliveryError` naming the peer that
        did not confirm within ``timeout`` seconds. Broker peers and WebSocket
        servers stay peered; a ZeroMQ proxy confirms nothing, so its link is
        left once everything is written to it (see :mod:`broker_spark.core.delivery`).
        """
        chosen = self.links() if links is None else list(links)
        self._loop.run_coro(flush(self._publish_src, chosen, timeout))

    def run_in_loop(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` run on this endpoint's event loop, its result returned (an extension:
        for reading the state of a link, which only that loop's thread may touch)."""
        return self._loop.run_sync(fn, *args)

    def transport_host(self) -> TransportHost:
        """What the transports beside the endpoint (Zeek's WebSocket API, a ZeroMQ cluster) use
        of it: its core, loop and configuration (an extension; see
        :mod:`broker_spark.core.transport_host`)."""
        return self._transports

    def _tcp(self, create: bool = True) -> Any:
        """The TCP/TLS peering (``broker_spark.core.peering``), made on first use."""
        # Imported on first use for start-up time (measured, issue 52): TCP, TLS and the
        # listener are 40 ms of CPU on the endpoint's 65; an endpoint that only subscribes
        # in-process, or only uses Zeek's WebSocket API or ZeroMQ, never loads them.
        from broker_spark.core.peering import Peering

        if not create:
            return Peering.existing(self._core)
        return Peering.of(self._core, self._config)

    def listen_admission(self, port: int) -> Any:
        """The slots and refusals (:class:`~broker_spark.admission.Admission`) of the peering
        listener on ``port``; None when nothing listens there."""
        peering = self._tcp(create=False)
        listeners = peering.listeners if peering is not None else []
        return next((x.admission for x in listeners if x.port == port), None)

    def listen(self, address: str = "", port: int = 0) -> int:
        """Accept peers on ``address:port`` (port 0: any free one); the port, 0 on failure."""
        tcp = self._tcp()
        return self._loop.run_sync(tcp.listen, str(address), int(port))

    def peer(self, address: str, port: int, retry: float = 10.0) -> bool:
        """Peer with ``address:port``; blocks until peered (True) or the attempt failed
        (False, with an Error status). With ``retry`` > 0 (seconds), failed or lost
        connections are redialled every ``retry`` seconds until :meth:`unpeer`."""
        tcp = self._tcp()
        return self._loop.run_coro(tcp.peer(str(address), int(port), retry))

    def peer_nosync(self, address: str, port: int, retry: float = 10.0) -> None:
        """Like :meth:`peer`, without waiting; the outcome arrives as a status."""
        tcp = self._tcp()
        self._loop.call_soon(tcp.start_peering, str(address), int(port), retry)

    def unpeer(self, address: str, port: int) -> bool:
        """Stop peering with ``address:port`` (goodbye, no more redials); False if unknown."""
        tcp = self._tcp()
        return self._loop.run_sync(tcp.unpeer, str(address), int(port))

    # -- data stores (broker_spark.store_api) ------------------------------------------------

    def attach_master(
        self, name: str, backend: Any = None, opts: Any = None, **options: Any
    ) -> Store:
        """Master of store ``name`` (memory, or SQLite with ``opts["path"]``); see store_api."""

        # The stores' modules are 28 ms of CPU on the endpoint's 65 (measured, issue 52): on
        # first use.
        from broker_spark.store_api import attach_master

        return attach_master(self, name, backend, opts, **options)

    def attach_clone(self, name: str, **options: Any) -> Store:
        """A clone of store ``name``, following its master wherever it is; see store_api."""

        # On first use, as attach_master's.
        from broker_spark.store_api import attach_clone

        return attach_clone(self, name, **options)

    # -- Zeek's WebSocket API (broker_spark.websocket) ------------------------------------------

    def web_socket_listen(self, address: str = "127.0.0.1", port: int = 0, **options: Any) -> int:
        """Serve Zeek's WebSocket JSON API on ``/v1/messages/json``; the port, 0 on failure.

        ``wss`` with this endpoint's TLS settings, ``ws`` when SSL is disabled.
        Options: see :meth:`broker_spark.websocket.manager.WebSocketManager.listen`.
        """
        return _websocket_manager(self).listen(address, port, **options)

    def web_socket_peer(
        self,
        url: str,
        topics: Any = (),
        retry: float = 10.0,
        publish_topics: Any = None,
        **options: Any,
    ) -> bool:
        """Bridge to a remote WebSocket API (e.g. a Zeek): receive what is published on
        ``topics`` there; send what this endpoint publishes, on any topic (or, with
        ``publish_topics``, what it publishes or forwards on those prefixes), paced so the
        server's queue is never overrun.

        True once the remote acked; reconnects every ``retry`` seconds (0: once).
        Options: see :meth:`broker_spark.websocket.manager.WebSocketManager.peer`.
        """
        return _websocket_manager(self).peer(
            url, topics, retry, publish_topics=publish_topics, **options
        )

    def web_socket_flush(self, url: str, timeout: float = 30.0) -> bool:
        """True once the bridge to ``url`` sent all this endpoint published and the server
        answered that it processed it; False after ``timeout`` seconds or without a bridge."""
        return _websocket_manager(self).flush(url, timeout)

    def web_socket_unpeer(self, url: str) -> bool:
        """Stop the bridge :meth:`web_socket_peer` made to ``url``; False if there is none."""
        return _websocket_manager(self).unpeer(url)

    # -- Zeek's ZeroMQ cluster backend (broker_spark.zeromq) -----------------------------------

    def zeromq_join(
        self,
        xsub_endpoint: str = "tcp://127.0.0.1:5555",
        xpub_endpoint: str = "tcp://127.0.0.1:5556",
        *,
        curve: Any = None,
        timeout: float = 10.0,
        **options: Any,
    ) -> bool:
        """Join a Zeek cluster on the ZeroMQ backend as a node, beside :meth:`peer`.

        Our XSUB connects to the proxy's XPUB at ``xsub_endpoint`` and our XPUB to its
        XSUB at ``xpub_endpoint`` (Zeek's ``connect_xsub_endpoint`` and
        ``connect_xpub_endpoint``, same defaults). Our subscriptions become the
        cluster's, our publications go to whoever subscribes, as Zeek events. True once
        the proxy forwards both ways; False (with an Error status) on a failed CURVE
        handshake or no answer in ``timeout`` s. ``curve``: a
        :class:`~broker_spark.zeromq.curve.CurveKeys` (None: Zeek's environment
        variables, if set). Keys given are used as given: a caller that resolved them
        from the environment itself (the CLI, Spark's options) passes them on, and the
        environment is not read a second time. See :mod:`broker_spark.zeromq.cluster`.
        """
        cluster = _zeromq_cluster()
        # With the cluster, for the same reason as the cluster (it loads pyzmq).
        from broker_spark.zeromq.curve import CurveKeys

        keys = CurveKeys.resolve(None) if curve is None else curve
        keys.check()
        return cluster.join(
            self, xsub_endpoint, xpub_endpoint, curve=keys, timeout=timeout, **options
        )

    def zeromq_leave(self, xsub_endpoint: str | None = None) -> bool:
        """Leave the ZeroMQ cluster(s) :meth:`zeromq_join` joined; False if there was none."""
        return _zeromq_cluster().leave(self, xsub_endpoint)

    # -- lifetime ------------------------------------------------------------------------------

    def replace_tls(self, contexts: Any) -> None:
        """Peerings made from now on (accepted or dialled) use ``contexts`` (a
        :class:`~broker_spark.tls.TLSContexts`, made and checked by the caller); those up
        keep theirs (an extension, for a node's reload on SIGHUP)."""
        tcp = self._tcp(create=False)
        if tcp is not None and contexts is not None:
            self._loop.run_sync(setattr, tcp, "tls", contexts)

    def stop_taking(self) -> None:
        """Take nothing more from the network, keep everything else (an extension, for a
        relay's planned stop): stop listening for peers and end every peering without
        redials, stop the WebSocket bridges and servers and leave ZeroMQ clusters. What
        subscribers already hold is theirs to take; :meth:`shutdown` follows."""
        tcp = self._tcp(create=False)
        if tcp is not None:
            self._loop.run_sync(tcp.close)
        manager = _websocket_manager(self)
        for url in list(manager.peers):
            manager.unpeer(url)
        for server in list(manager.servers.values()):
            self._loop.run_sync(server.abort)
        _zeromq_cluster().leave(self)

    def shutdown(self) -> None:
        """Close everything, wake blocked callers and join the loop thread (idempotent)."""
        self._finalizer()

    @property
    def is_shutdown(self) -> bool:
        return not self._finalizer.alive

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return self._node_str


def _websocket_manager(endpoint: Endpoint) -> Any:
    """The endpoint's WebSocket servers and bridges (:mod:`broker_spark.websocket.manager`)."""
    # Imported on first use for start-up time (measured, issue 52): websockets and the
    # manager take importing the endpoint from 65 ms of CPU to 105; most endpoints never
    # serve or bridge Zeek's WebSocket API.
    from broker_spark.websocket.manager import manager_for

    return manager_for(endpoint)


def _zeromq_cluster() -> Any:
    """:mod:`broker_spark.zeromq.cluster`, the ZeroMQ backend's join and leave."""
    # Imported on first use for start-up time (measured, issue 52): pyzmq and the cluster
    # take importing the endpoint from 65 ms of CPU to 80; few endpoints join a cluster.
    from broker_spark.zeromq import cluster

    return cluster
