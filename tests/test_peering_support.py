"""Helpers shared by the peering tests (this module holds no tests itself)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import broker_spark as broker
from broker_spark.core.peering import Peering

LOCAL = "127.0.0.1"


def make_endpoint(
    *,
    ssl: bool = False,
    versions: tuple[int, int] = (1, 2),
    config: broker.Configuration | None = None,
    **options: Any,
) -> broker.Endpoint:
    """An endpoint with SSL off unless asked, speaking ``versions``."""
    if config is None:
        opts = broker.BrokerOptions(**options)
        opts.disable_ssl = not ssl
        config = broker.Configuration(opts)
    ep = broker.Endpoint(config)
    tcp = peering(ep)
    tcp.versions = versions
    tcp.handshake_timeout = 3.0
    return ep


def peering(ep: broker.Endpoint) -> Peering:
    return ep._tcp()


@contextmanager
def endpoints(n: int, **kwargs: Any) -> Iterator[list[broker.Endpoint]]:
    eps = [make_endpoint(**kwargs) for _ in range(n)]
    try:
        yield eps
    finally:
        for ep in eps:
            ep.shutdown()


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Poll ``predicate`` until it holds (for state that has no event to wait on)."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.005)
    return True


def wants(ep: broker.Endpoint, topic: str, timeout: float = 5.0) -> bool:
    """Block until some peer of ``ep`` asks for ``topic`` (re-checked on filter changes)."""
    core = ep._core

    def ready() -> bool:
        return any(topic.startswith(tuple(f)) for f in core.peer_filters().values())

    return core.wait_until(ready, timeout)


def chain(eps: list[broker.Endpoint], retry: float = 0.0) -> list[int]:
    """Peer eps[i] with eps[i+1]; return the listening ports."""
    ports = [ep.listen(LOCAL, 0) for ep in eps]
    for i in range(len(eps) - 1):
        assert eps[i].peer(LOCAL, ports[i + 1], retry)
    return ports


def statuses(sub: Any, n: int, timeout: float = 5.0) -> list[Any]:
    """The next ``n`` statuses or errors (fewer on timeout)."""
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        item = sub.get(left)
        if item is not None:
            out.append(item)
    return out


def next_matching(sub: Any, pred: Callable[[Any], bool], timeout: float = 5.0) -> Any:
    """The first status or error satisfying ``pred`` (None on timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        item = sub.get(left)
        if item is not None and pred(item):
            return item


def codes(items: list[Any]) -> list[Any]:
    return [i.code() for i in items]


def link_count(ep: broker.Endpoint) -> int:
    return len(ep._core.links)


def routes_to(ep: broker.Endpoint, other: broker.Endpoint, topic: str) -> bool:
    """True once ``ep``'s version 2 router knows that ``other`` subscribes to ``topic``."""
    target = other._core.node_id
    router = peering(ep).fabric.router
    return ep._loop.run_sync(lambda: target in router.subscribers(topic))


@contextmanager
def serving(*, ssl: bool = False) -> Iterator[tuple[Any, ...]]:
    """Endpoint A (short handshake timeout) with a healthy peer B publishing to it.

    Yields ``(a, b, port, sub, errors)``; on exit checks that the healthy
    peering survived whatever the test threw at A, with nothing accepted lost.
    """
    a = make_endpoint(ssl=ssl)
    b = make_endpoint(ssl=ssl)
    tcp = a._tcp()
    tcp.handshake_timeout = 0.5
    port = a.listen(LOCAL, 0)
    assert b.peer(LOCAL, port, 0)
    sub = a.make_subscriber("/healthy", qsize=100)
    errors = a.make_status_subscriber(False)
    assert wants(b, "/healthy")
    b.publish("/healthy", "before")
    try:
        yield a, b, port, sub, errors
        b.publish("/healthy", "after")
        assert sub.get(2, 5.0) == [("/healthy", "before"), ("/healthy", "after")]
        assert len(a._core.links) == 1
    finally:
        a.shutdown()
        b.shutdown()


def raw(port: int) -> socket.socket:
    """A plain client socket to ``port`` (5 s timeout)."""
    sock = socket.create_connection((LOCAL, port))
    sock.settimeout(5.0)
    return sock


def error_of(errors: Any) -> broker.Error:
    """The next item of an errors-only status subscriber, which must be an Error."""
    err = errors.get(5.0)
    assert isinstance(err, broker.Error), err
    return err


def drained_to_eof(sock: socket.socket) -> bool:
    """Read until the peer closes (an error counts as closed too); a timeout fails."""
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except OSError:
        pass
    return True
