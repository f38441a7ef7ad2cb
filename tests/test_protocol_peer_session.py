"""The sans-I/O peer session: a Broker peer connection driven without sockets or asyncio.

Two sessions talk to each other through their ``data_to_send``; the recorded
session of a real Broker is fed to one in arbitrary splits; arbitrary bytes are
fed to one in arbitrary splits (a fuzzer's run): it never raises, ends at most
once, and takes nothing after it ended.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from recorded import VECTORS

from broker_spark.errors import EC
from broker_spark.protocol.framing import FrameDecoder, encode_frame
from broker_spark.protocol.peer_session import (
    KEEPALIVE,
    Failed,
    Peered,
    PeerSession,
    Received,
    Redundant,
    Stalled,
)
from broker_spark.protocol.wire_messages import (
    MSG_DATA,
    MSG_PING,
    decode_node_message,
    encode_node_message,
)

pytestmark = pytest.mark.timeout(60)

A = bytes(range(16))
B = bytes(range(1, 17))
C2S = (VECTORS / "broker-v1-session.c2s.bin").read_bytes()
S2C = (VECTORS / "broker-v1-session.s2c.bin").read_bytes()
ACCEPTOR_ID = uuid.UUID("9679fa7a-f4b3-56fa-9f99-5d32671b20c5").bytes
CONNECTOR_ID = bytes.fromhex("0d42ef1b361d5ba4a475f534b4b13844")


def session(
    node: bytes, role: str, *, now: float = 0.0, versions=(1, 2), tls=False, **kw
) -> PeerSession:
    kw.setdefault("max_frame_size", 1 << 20)
    kw.setdefault("handshake_timeout", 5.0)
    return PeerSession(node, kw.pop("filter", ("/a",)), role, versions, now, tls=tls, **kw)


def pump(a: PeerSession, b: PeerSession, now: float = 1.0) -> tuple[list, list]:
    """Exchange what each wants sent until both are quiet; the events each saw."""
    seen_a: list = []
    seen_b: list = []
    for _ in range(20):
        to_b, to_a = a.data_to_send(), b.data_to_send()
        if not to_a and not to_b:
            break
        if to_b:
            seen_b += b.receive_data(to_b, now)
        if to_a:
            seen_a += a.receive_data(to_a, now)
    return seen_a, seen_b


def frames(data: bytes) -> list[bytes]:
    return FrameDecoder().feed(data)


@pytest.mark.parametrize("versions", [(1, 1), (1, 2), (2, 2)])
def test_two_sessions_peer_and_learn_each_others_filter(versions: tuple[int, int]) -> None:
    dialer = session(A, "connector", versions=versions, filter=("/x", "/y"))
    listener = session(B, "acceptor", versions=versions, filter=("/z",))
    seen_a, seen_b = pump(dialer, listener)
    assert seen_a == [Peered(B, versions[1], ("/z",), ("/x", "/y"))]
    assert seen_b == [Peered(A, versions[1], ("/x", "/y"), ("/z",))]
    assert dialer.peered and listener.peered and dialer.deadline is None
    # Peered: envelopes come back as bodies (no header is known yet).
    body = encode_node_message(A, bytes(16), MSG_DATA, 16, "/z/1", b"\x01\x02")
    (event,) = listener.receive_data(encode_frame(body) * 2, 2.0)
    assert event == Received([body, body], 2)


def test_the_recorded_broker_handshake_in_any_split() -> None:
    @given(st.lists(st.integers(1, len(C2S)), max_size=12))
    def check(cuts: list[int]) -> None:
        s = session(ACCEPTOR_ID, "acceptor", versions=(1, 1), filter=("/test/pipe",))
        out = [s.data_to_send()]
        events: list = []
        points = sorted({0, *cuts, len(C2S)})
        for lo, hi in zip(points, points[1:], strict=False):
            events += s.receive_data(C2S[lo:hi], 1.0)
            out.append(s.data_to_send())
        peered = [e for e in events if isinstance(e, Peered)]
        assert peered == [Peered(CONNECTOR_ID, 1, peered[0].peer_filter, ("/test/pipe",))]
        assert not any(isinstance(e, (Failed, Redundant)) for e in events)
        # What the session wrote is what the real Broker wrote, frame for frame, up to
        # where the core would take over (the handshake's frames).
        sent = frames(b"".join(out))
        assert sent == frames(S2C)[: len(sent)] and sent
        received = sum(e.raw for e in events if isinstance(e, Received))
        handshake = len(frames(C2S)) - received
        assert received > 0 and handshake >= 2

    check()


def test_tls_on_a_plain_endpoint_is_named() -> None:
    s = session(A, "acceptor")
    (event,) = s.receive_data(b"\x16\x03\x01\x02\x00", 1.0)
    assert isinstance(event, Failed) and event.code is EC.PeerIncompatible
    assert "disable_ssl differs" in event.message
    assert s.receive_data(b"more", 1.0) == [] and s.ended
    assert s.lost_during_handshake("reset") is None  # it said why already
    # A TLS endpoint reads its plaintext after TLS: the byte is no sign there.
    assert session(A, "acceptor", tls=True).receive_data(b"\x16", 1.0) == []


def test_an_oversized_frame_ends_the_handshake_and_the_connection() -> None:
    s = session(A, "acceptor", max_frame_size=64)
    (event,) = s.receive_data((1000).to_bytes(4, "big") + b"x", 1.0)
    assert isinstance(event, Failed) and event.code is EC.PeerInvalid
    assert "during the handshake" in event.message
    dialer, listener = session(A, "connector"), session(B, "acceptor", max_frame_size=64)
    pump(dialer, listener)
    (event,) = listener.receive_data((1000).to_bytes(4, "big"), 2.0)
    assert isinstance(event, Failed) and event.code is EC.InvalidMessage


def test_the_handshake_deadline() -> None:
    s = session(A, "connector", now=10.0, handshake_timeout=2.0)
    assert s.deadline == 12.0
    assert s.tick(11.0) == []
    (event,) = s.tick(12.5)
    assert isinstance(event, Failed) and event.code is EC.PeerTimeout
    assert s.deadline is None and s.tick(20.0) == []


def test_a_loss_mid_handshake_says_where() -> None:
    s = session(A, "acceptor")
    s.receive_data(b"\x00\x00\x00\x10abc", 1.0)
    failed = s.lost_during_handshake("reset by peer")
    assert failed is not None and failed.code is EC.PeerDisconnectDuringHandshake
    assert "in the middle of a frame (7 bytes pending)" in failed.message
    assert failed.message.endswith(": reset by peer")


def test_health_pings_an_idle_peer_and_loses_a_silent_one() -> None:
    dialer, listener = session(A, "connector"), session(B, "acceptor")
    pump(dialer, listener, now=0.0)
    health = {"ping_interval": 1.0, "liveness_timeout": 5.0, "stall_timeout": 2.0}
    assert dialer.check_health(0.5, policy="disconnect", **health) == []
    assert dialer.check_health(1.5, policy="disconnect", **health) == []
    (ping,) = frames(dialer.data_to_send())
    msg = decode_node_message(ping)
    assert (msg.msg_type, msg.sender, msg.receiver, msg.payload_bytes) == (
        MSG_PING,
        A,
        B,
        KEEPALIVE,
    )
    assert dialer.check_health(1.8, policy="disconnect", **health) == []  # one per interval
    assert dialer.data_to_send() == b""
    (event,) = dialer.check_health(6.0, policy="disconnect", **health)
    assert isinstance(event, Failed) and event.code is EC.PeerTimeout
    # A stalled reader under a drop policy is reported and kept.
    listener.receive_data(b"", 6.0)
    stall = {"paused": True, "paused_at": 3.0, "queued": 10, "capacity": 10}
    (event,) = listener.check_health(6.0, policy="drop_oldest", **health, **stall)
    assert isinstance(event, Stalled) and not listener.ended


@given(st.binary(max_size=600), st.lists(st.integers(0, 600), max_size=8), st.booleans())
def test_any_bytes_in_any_split_never_raise_and_end_once(
    data: bytes, cuts: list[int], handshaken: bool
) -> None:
    listener = session(B, "acceptor", max_frame_size=256)
    if handshaken:
        pump(session(A, "connector"), listener)
    events: list = []
    points = sorted({0, *(c for c in cuts if c <= len(data)), len(data)})
    for lo, hi in zip(points, points[1:], strict=False):
        events += listener.receive_data(data[lo:hi], 2.0)
        listener.data_to_send()
    ends = [e for e in events if isinstance(e, (Failed, Redundant))]
    assert len(ends) <= 1
    if ends:
        assert events[-1] is ends[0] and listener.ended
        assert listener.receive_data(b"\x00" * 8, 3.0) == []
    for e in events:
        if isinstance(e, Received):
            assert len(e.items) >= e.raw >= 0
