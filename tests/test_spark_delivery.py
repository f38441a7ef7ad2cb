"""A writer task returns only once its peer has taken every message (at-least-once).

These tests put a fault-injecting TCP proxy between a writer task's endpoint
and the hub: it delays every byte, or cuts the connection mid-task. The proxy
only injects faults; both ends are real endpoints over real loopback sockets.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest
import spark_fixtures

import broker_spark as broker
from broker_spark.errors import DeliveryError
from broker_spark.reader.options import parse_writer_options
from broker_spark.spark.write.row_messages import RowEncoder
from broker_spark.spark.write.writers import publish_batches

hub = spark_fixtures.hub

pytestmark = pytest.mark.timeout(60)


class FaultProxy:
    """A one-connection TCP proxy on loopback that delays bytes by ``delay`` seconds each way,
    and can cut the connection (``cut()``). Fault injection only."""

    def __init__(self, upstream_port: int, delay: float = 0.0) -> None:
        self.delay = delay
        self.upstream_port = upstream_port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.sockets: list[socket.socket] = [self.server]
        self.threads: list[threading.Thread] = []
        self.connected = threading.Event()
        self._spawn(self._accept)

    def _spawn(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self.threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        try:
            client, _ = self.server.accept()
        except OSError:
            return
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        self.sockets += [client, upstream]
        self._spawn(self._pump, client, upstream)
        self._spawn(self._pump, upstream, client)
        self.connected.set()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                if self.delay:
                    time.sleep(self.delay)  # each chunk waits: the stream is delayed, in order
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Drop the connection in both directions, as a crashed peer would."""
        for s in self.sockets[1:]:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.cut()  # wakes a pump blocked in recv (closing the socket alone would not)
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.close()
        for thread in self.threads:
            thread.join(5)


@pytest.fixture
def proxy_to(hub: broker.Endpoint) -> Iterator:
    made: list[FaultProxy] = []

    def make(delay: float = 0.0) -> FaultProxy:
        proxy = FaultProxy(hub.hub_port, delay)
        made.append(proxy)
        return proxy

    yield make
    for proxy in made:
        proxy.close()


def _options(port: int):
    return parse_writer_options(
        {"peer": f"127.0.0.1:{port}", "ssl.disable": "true", "topic": "out/x"}
    )


def _batch(start: int, n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"n": list(range(start, start + n))})


@pytest.mark.slow  # 3.5 s of a slow peer: make test-slow (make test stays under 5 minutes)
def test_write_returns_only_after_a_slow_peer_took_everything(
    hub: broker.Endpoint, proxy_to
) -> None:
    # Every byte takes 0.3 s each way: a task that returned before the peer's acknowledgement
    # would find the hub still empty.
    sub = hub.make_subscriber("out/", qsize=10_000)
    proxy = proxy_to(delay=0.3)
    options = _options(proxy.port)
    batch = _batch(0, 2000)
    result = publish_batches(iter([batch]), RowEncoder(batch.schema, options), options)
    assert result.published == 2000
    got = sub.poll()  # no waiting: acknowledged means the hub has read them all
    deadline = time.monotonic() + 0.2  # (the hub's core hands them to the subscriber)
    while len(got) < 2000 and time.monotonic() < deadline:
        got += sub.poll()
        time.sleep(0.01)
    assert [v for _, v in got] == [(i,) for i in range(2000)]


@pytest.mark.slow  # long (5 s and more): make test-slow, and every PySpark (versions)
@pytest.mark.versions
def test_a_peer_lost_mid_task_fails_the_task(hub: broker.Endpoint, proxy_to) -> None:
    proxy = proxy_to()
    options = _options(proxy.port)

    def batches() -> Iterator[pa.RecordBatch]:
        yield _batch(0, 100)
        proxy.cut()  # the peer goes away between two batches of the task
        time.sleep(0.3)
        yield _batch(100, 100)

    with pytest.raises(DeliveryError, match="ended before the ack|never came up"):
        publish_batches(batches(), RowEncoder(_batch(0, 1).schema, options), options)


def test_a_task_waits_for_a_subscription_to_its_topics_not_just_any() -> None:
    """Over version 2 the subscriptions of endpoints behind a peer can arrive before the
    peer's own; a task that published as soon as it knew *a* subscription would route its
    messages nowhere. It waits until one matches the topics it is about to publish."""
    from broker_spark.spark.write.writers import _await_peer_filters

    def plain() -> broker.Endpoint:
        opts = broker.BrokerOptions()
        opts.disable_ssl = True
        return broker.Endpoint(broker.Configuration(opts))

    node, task = plain(), plain()
    try:
        others = node.make_subscriber("/other")
        port = node.listen("127.0.0.1", 0)
        assert task.peer("127.0.0.1", port, 0)
        assert task.routes_known(task.links())
        subscribing = threading.Event()

        def subscribe_later() -> None:
            time.sleep(0.3)
            subscribing.set()
            wanted.append(node.make_subscriber("/out"))

        wanted: list = []
        later = threading.Thread(target=subscribe_later)
        later.start()
        assert _await_peer_filters(task, 20.0, ["/out/x"], task.links())
        assert subscribing.is_set()  # not before the matching subscription was made
        later.join()
        # With nothing matching, it gives up after the timeout and says so.
        assert not _await_peer_filters(task, 0.2, ["/nobody/x"], task.links())
        others.reset()
    finally:
        task.shutdown()
        node.shutdown()
