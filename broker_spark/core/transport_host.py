"""What an endpoint hands the transports beside it: :class:`TransportHost`.

Zeek's WebSocket API (:mod:`broker_spark.websocket.manager`) and Zeek's ZeroMQ
cluster (:mod:`broker_spark.zeromq.cluster`) add links to an endpoint's core
from the caller's thread. They use this object, never the endpoint's own
attributes: the core their links are made for (touched on its loop only), the
endpoint's configuration and id, the calls they make from outside the loop (run
a call or a coroutine on it, report a status, remove a link), and a place for
what they keep per endpoint, which lives exactly as long as the endpoint.

An :class:`~broker_spark.endpoint.Endpoint` makes one with its core and hands it
out with ``transport_host()`` (a :class:`TransportOwner`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from broker_spark.config import Configuration
    from broker_spark.core.actor import Core
    from broker_spark.core.link import Link
    from broker_spark.core.loop_thread import LoopThread
    from broker_spark.errors import SC
    from broker_spark.status import Error, Status

T = TypeVar("T")

__all__ = ["TransportHost", "TransportOwner"]


class TransportOwner(Protocol):
    """Whoever holds a :class:`TransportHost` (an endpoint)."""

    def transport_host(self) -> TransportHost: ...


class TransportHost:
    """An endpoint's core, loop and configuration as its transports use them (any thread)."""

    def __init__(self, core: Core, loop: LoopThread, config: Configuration) -> None:
        #: The core the transports' links are made for and join; touch it on its loop only.
        self.core = core
        self.config = config
        self._loop = loop
        self._lock = threading.Lock()
        self._kept: dict[str, Any] = {}

    def node_id(self) -> str:
        """The endpoint's id (a UUID string, as ``Endpoint.node_id``)."""
        return self.core.node_str

    def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` run on the loop, its result returned."""
        return self._loop.run_sync(fn, *args)

    def run_coro(self, coro: Coroutine[Any, Any, T]) -> T:
        """A coroutine run on the loop, its result returned."""
        return self._loop.run_coro(coro)

    def emit(self, status: Status | Error) -> None:
        """Hand a status or error to the endpoint's status subscribers."""
        self._loop.run_sync(self.core.emit, status)

    def remove_link(self, link: Link, reason: SC) -> bool:
        """Forget a link (closing it) and report ``reason``; False if the core did not know it."""
        return self._loop.run_sync(self.core.remove_link, link, reason)

    def kept(self, key: str, make: Callable[[], T]) -> T:
        """What a transport keeps for this endpoint under ``key``, made by ``make`` on first
        use (once, whichever thread asks first)."""
        with self._lock:
            if key not in self._kept:
                self._kept[key] = make()
            return self._kept[key]
