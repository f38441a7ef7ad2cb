"""Malformed, oversized and out-of-turn frames for a relay's reader port, and how it answered.

What an attacker on the readers' network (or a broken client) sends the relay
protocol's server: garbage, frames beyond the limit, frames out of turn, a
second HELLO, msgpack "bombs" (headers announcing billions of entries or bytes,
nesting thousands deep), a slowloris that sends a byte at a time, and a greedy
reader that asks for everything and never reads. Each must get an ERROR frame
or a close. Shared by tests/test_relay_attacks.py and ``make soak``'s hostile
clients (bench/soak/faults.py), so both send the same cases.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Callable

import msgpack

from broker_spark.protocol.framing import encode_frame
from broker_spark.spool.relay_protocol import PROTOCOL_VERSION, Kind, encode_message

__all__ = ["CASES", "ERROR", "CLOSED", "SILENT", "answer", "attack", "greedy", "slowloris"]

#: What the relay did: sent an ERROR frame, closed without one, or neither in time.
ERROR, CLOSED, SILENT = "error", "closed", "silent"

_HELLO = {"version": PROTOCOL_VERSION, "role": "follow", "name": "hostile"}


def _msg(kind: int, body: bytes) -> bytes:
    return encode_frame(bytes((kind,)) + body)


def _after_hello(*frames: bytes) -> bytes:
    return encode_message(Kind.HELLO, _HELLO) + b"".join(frames)


def _nested(depth: int) -> bytes:
    return b"\x91" * depth + b"\xc0"  # [[[...[nil]...]]]


#: name: the bytes sent at once. Every one must be answered with an ERROR or a close.
CASES: dict[str, bytes] = {
    "garbage": b"\xff\xfe\x00garbage" * 64,
    "http": b"GET / HTTP/1.1\r\nHost: relay\r\n\r\n",
    "tls-hello": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,
    "frame-2gib": struct.pack(">I", 0x7FFFFFFF) + b"\x01" * 64,
    "frame-over-limit": struct.pack(">I", (1 << 20) + 1) + b"\x01" * 64,
    "frame-empty": encode_frame(b""),
    "kind-unknown": _msg(99, msgpack.packb(_HELLO)),
    "kind-zero": _msg(0, msgpack.packb(_HELLO)),
    "server-welcome": _msg(Kind.WELCOME, msgpack.packb({})),
    "server-records": _msg(Kind.RECORDS, struct.pack(">BQI", 0, 0, 0)[1:]),
    "server-error": encode_message(Kind.ERROR, {"code": "x", "message": "y"}),
    "server-compressed": _msg(Kind.RECORDS_COMPRESSED, b"\x00" * 32),
    "follow-first": encode_message(Kind.FOLLOW, {"from": 0, "credit": 1 << 20}),
    "credit-first": encode_message(Kind.CREDIT, {"credit": 1 << 20}),
    "request-first": encode_message(Kind.REQUEST, {"op": "bounds"}),
    "hello-not-msgpack": _msg(Kind.HELLO, b"\xc1\xc1\xc1"),
    "hello-not-a-map": _msg(Kind.HELLO, msgpack.packb([1, 2, 3])),
    "hello-truncated": _msg(Kind.HELLO, msgpack.packb(_HELLO)[:-3]),
    "hello-version-zero": encode_message(Kind.HELLO, {**_HELLO, "version": 0}),
    "hello-version-text": encode_message(Kind.HELLO, {**_HELLO, "version": "1"}),
    "hello-no-role": encode_message(Kind.HELLO, {"version": PROTOCOL_VERSION}),
    "hello-unknown-role": encode_message(Kind.HELLO, {**_HELLO, "role": "root"}),
    "hello-attach-remote": encode_message(Kind.HELLO, {**_HELLO, "role": "attach"}),
    "hello-topics-string": encode_message(Kind.HELLO, {**_HELLO, "topics": "zeek/"}),
    "hello-int-keys": _msg(Kind.HELLO, msgpack.packb({1: 2, 3: 4})),
    "hello-twice": _after_hello(encode_message(Kind.HELLO, _HELLO)),
    "follow-negative": _after_hello(encode_message(Kind.FOLLOW, {"from": -5, "credit": 1})),
    "follow-string": _after_hello(encode_message(Kind.FOLLOW, {"from": "0", "credit": 1})),
    "follow-backwards": _after_hello(
        encode_message(Kind.FOLLOW, {"from": 9, "credit": 1, "until": 2})
    ),
    "stop-remote": _after_hello(encode_message(Kind.REQUEST, {"op": "stop"})),
    "bomb-map32": _msg(Kind.HELLO, b"\xdf\xff\xff\xff\xff"),
    "bomb-array32": _msg(Kind.HELLO, b"\xdd\xff\xff\xff\xff"),
    "bomb-str32": _msg(Kind.HELLO, b"\xdb\xff\xff\xff\xff" + b"a" * 16),
    "bomb-bin32": _msg(Kind.HELLO, b"\xc6\xff\xff\xff\xff" + b"a" * 16),
    "bomb-nested": _msg(Kind.HELLO, _nested(200_000)),
    "bomb-ext": _msg(Kind.HELLO, b"\xc9\xff\xff\xff\xff\x05"),
}


def answer(sock: socket.socket, timeout: float) -> str:
    """Read what the relay sends until it closes or ``timeout`` passes: :data:`ERROR`
    when an ERROR frame came, else :data:`CLOSED` or :data:`SILENT`."""
    got = b""
    deadline = time.monotonic() + timeout
    closed = False
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except OSError:  # reset: closed
            closed = True
            break
        if not chunk:
            closed = True
            break
        got += chunk
        if _has_error(got):
            return ERROR
    if _has_error(got):
        return ERROR
    return CLOSED if closed else SILENT


def _has_error(data: bytes) -> bool:
    at = 0
    while at + 5 <= len(data):
        (size,) = struct.unpack_from(">I", data, at)
        if data[at + 4] == Kind.ERROR:
            return True
        at += 4 + size
    return False


def _connect(port: int, host: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection((host, port), timeout=5)


def attack(port: int, payload: bytes, timeout: float = 5.0, host: str = "127.0.0.1") -> str:
    """Send ``payload`` on a new connection; what the relay did (:func:`answer`)."""
    with _connect(port, host) as sock:
        with contextlib.suppress(OSError):  # it may close before reading all of it
            sock.sendall(payload)
        return answer(sock, timeout)


def slowloris(port: int, every: float, limit: float, host: str = "127.0.0.1") -> str:
    """A HELLO a byte at a time, one each ``every`` seconds, for up to ``limit`` seconds:
    never idle, never done."""
    hello = encode_message(Kind.HELLO, _HELLO)
    with _connect(port, host) as sock:
        deadline = time.monotonic() + limit
        for byte in hello * 1000:
            try:
                sock.sendall(bytes((byte,)))
            except OSError:
                return CLOSED
            outcome = answer(sock, min(every, max(0.0, deadline - time.monotonic())))
            if outcome != SILENT or time.monotonic() >= deadline:
                return outcome
    return SILENT


def greedy(port: int, host: str = "127.0.0.1") -> tuple[socket.socket, Callable[[], None]]:
    """A reader that follows from the start with all the credit there is and never reads:
    the socket (held open) and a function that closes it."""
    sock = _connect(port, host)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.sendall(_after_hello(encode_message(Kind.FOLLOW, {"from": 0, "credit": (1 << 62)})))
    return sock, sock.close
