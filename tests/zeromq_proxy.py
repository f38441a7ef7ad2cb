"""A Zeek cluster's ZeroMQ proxy in the test process, as Zeek's proxy thread runs it.

Zeek's ``ProxyThread`` (src/cluster/backend/zeromq/ZeroMQ-Proxy.cc) binds an XPUB
(``listen_xpub_endpoint``, XPUB_VERBOSER and XPUB_NODROP) and an XSUB
(``listen_xsub_endpoint``) and joins them with ``zmq::proxy_steerable``; with CURVE
both are CURVE servers whose ZAP handler lets in the one client key. Same here with
pyzmq, on loopback ports chosen by the system.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import zmq

from broker_spark.zeromq.curve import CurveKeys, ZapHandler


@dataclass
class Proxy:
    xpub: str  # where a node's XSUB connects (Zeek's connect_xsub_endpoint)
    xsub: str  # where a node's XPUB connects (connect_xpub_endpoint)
    refused: list


@contextmanager
def zeromq_proxy(curve: CurveKeys | None = None) -> Iterator[Proxy]:
    ctx = zmq.Context()
    xpub = ctx.socket(zmq.XPUB)
    xsub = ctx.socket(zmq.XSUB)
    control = ctx.socket(zmq.PAIR)
    refused: list = []
    zap = None
    for sock in (xpub, xsub, control):
        sock.linger = 0
    xpub.setsockopt(zmq.XPUB_VERBOSER, 1)
    xpub.setsockopt(zmq.XPUB_NODROP, 1)
    if curve is not None:
        zap = ZapHandler(ctx, curve.client_publickey, lambda a, k: refused.append(k))
        curve.configure_server(xpub)
        curve.configure_server(xsub)
    xpub_port = xpub.bind_to_random_port("tcp://127.0.0.1")
    xsub_port = xsub.bind_to_random_port("tcp://127.0.0.1")
    control.bind("inproc://test-proxy-control")
    stop = threading.Event()

    def run() -> None:
        steer = ctx.socket(zmq.PAIR)
        steer.linger = 0
        steer.connect("inproc://test-proxy-control")
        try:
            zmq.proxy_steerable(xpub, xsub, None, steer)
        except zmq.ContextTerminated:
            pass
        finally:
            steer.close(0)

    def serve_zap() -> None:
        assert zap is not None
        while not stop.is_set():
            if zap.socket.poll(50):
                zap.handle()

    threads = [threading.Thread(target=run, daemon=True)]
    if zap is not None:
        threads.append(threading.Thread(target=serve_zap, daemon=True))
    for t in threads:
        t.start()
    try:
        yield Proxy(f"tcp://127.0.0.1:{xpub_port}", f"tcp://127.0.0.1:{xsub_port}", refused)
    finally:
        control.send(b"TERMINATE")
        stop.set()
        for t in threads:
            t.join(5)
        for sock in (xpub, xsub, control):
            sock.close(0)
        if zap is not None:
            zap.close()
        ctx.term()


@dataclass
class ZeekNode:
    """A node as Zeek makes one: its XSUB connected to the proxy's XPUB, its XPUB (verbose)
    to the proxy's XSUB; ``seen`` collects the subscription messages its XPUB received."""

    xsub: zmq.Socket
    xpub: zmq.Socket
    seen: set

    def sees(self, topic: str) -> bool:
        """Whether the node's XPUB has seen a subscription to ``topic`` (reads what waits)."""
        while self.xpub.poll(0):
            self.seen.add(self.xpub.recv())
        return b"\x01" + topic.encode() in self.seen


@contextmanager
def zeek_node(proxy: Proxy, topics: tuple[str, ...] = ()) -> Iterator[ZeekNode]:
    ctx = zmq.Context()
    xsub = ctx.socket(zmq.XSUB)
    xpub = ctx.socket(zmq.XPUB)
    for sock in (xsub, xpub):
        sock.linger = 0
    xpub.setsockopt(zmq.XPUB_VERBOSE, 1)
    xsub.connect(proxy.xpub)
    xpub.connect(proxy.xsub)
    for topic in topics:
        xsub.send(b"\x01" + topic.encode())
    try:
        yield ZeekNode(xsub, xpub, set())
    finally:
        xsub.close(0)
        xpub.close(0)
        ctx.term()
