"""A live endpoint answers the recorded Zeek session with the recorded bytes.

``tests/vectors/broker-v1-session.*.bin`` are both directions of a session
between two real Broker processes (see the README there). Here a live
endpoint plays the accepting side: same node id, version 1 only, subscribed to
``/test/pipe``. The connecting side's recorded frames are replayed over a real
socket in their recorded order, and everything the endpoint writes back must
equal the recorded answer byte for byte, except the 8 random bytes of the
goodbye token (Broker's were ``0x1000000000000001``, ours are fresh).
"""

from __future__ import annotations

import socket
import uuid

import pytest
from recorded import VECTORS
from test_peering_support import LOCAL, make_endpoint, next_matching, peering

import broker_spark as broker
import broker_spark.endpoint as endpoint_module
from broker_spark import SC
from broker_spark.protocol.framing import FrameDecoder, encode_frame
from broker_spark.protocol.wire_messages import decode_node_message, encode_pong_for, is_bye_token

pytestmark = pytest.mark.timeout(30)

C2S = (VECTORS / "broker-v1-session.c2s.bin").read_bytes()
S2C = (VECTORS / "broker-v1-session.s2c.bin").read_bytes()
ACCEPTOR_ID = uuid.UUID("9679fa7a-f4b3-56fa-9f99-5d32671b20c5")
CONNECTOR_ID = bytes.fromhex("0d42ef1b361d5ba4a475f534b4b13844")


def recorded_acceptor(monkeypatch: pytest.MonkeyPatch) -> broker.Endpoint:
    """An endpoint with the recorded accepting side's id, speaking version 1 only.

    The id is pinned by patching the ``uuid4`` that ``Endpoint`` draws it from,
    for its construction only (no fault: only the id is fixed).
    """
    with monkeypatch.context() as patch:
        patch.setattr(endpoint_module.uuid, "uuid4", lambda: ACCEPTOR_ID)
        ep = make_endpoint(versions=(1, 1))
    assert ep.node_id() == str(ACCEPTOR_ID)
    peering(ep).ping_interval = 60.0  # no keep-alive ping may slip into the comparison
    return ep


def read_frames(sock: socket.socket, decoder: FrameDecoder, n: int) -> bytes:
    """Read until ``n`` whole frames arrived; return their bytes as received."""
    got: list[bytes] = []
    while len(got) < n:
        data = sock.recv(65536)
        assert data, f"closed after {len(got)} of {n} frames"
        got += decoder.feed(data)
    assert len(got) == n, f"{len(got) - n} unexpected frames"
    return b"".join(encode_frame(body) for body in got)


def test_live_endpoint_reproduces_the_recorded_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    c2s = FrameDecoder().feed(C2S)
    assert len(c2s) == 6  # hello, version_select, originator_syn, originator_ack, data, pong
    ep = recorded_acceptor(monkeypatch)
    try:
        sub = ep.make_subscriber("/test/pipe")
        status = ep.make_status_subscriber(True)
        port = ep.listen(LOCAL, 0)
        decoder = FrameDecoder()
        answer = b""
        with socket.create_connection((LOCAL, port)) as sock:
            sock.settimeout(5.0)
            # Recorded order: hello -> probe, hello; version_select + originator_syn ->
            # responder_syn_ack; originator_ack + data; then the acceptor leaves.
            sock.sendall(encode_frame(c2s[0]))
            answer += read_frames(sock, decoder, 2)
            sock.sendall(encode_frame(c2s[1]) + encode_frame(c2s[2]))
            answer += read_frames(sock, decoder, 1)
            sock.sendall(encode_frame(c2s[3]) + encode_frame(c2s[4]))
            assert sub.get(5.0) == ("/test/pipe", "captured-msg")
            assert next_matching(status, lambda s: s.code() == SC.PeerAdded) is not None
            assert ep.unpeer(LOCAL, sock.getsockname()[1])  # the goodbye ping
            answer += read_frames(sock, decoder, 1)
            ping = decode_node_message(FrameDecoder().feed(answer)[-1])
            assert is_bye_token(ping.payload_bytes)
            # The recorded pong, with our token in place of Broker's.
            pong = encode_pong_for(ping, CONNECTOR_ID)
            assert pong[:-8] == c2s[5][:-8]
            sock.sendall(encode_frame(pong))
            assert sock.recv(65536) == b""  # the pong closes the session, with nothing else
        assert len(answer) == len(S2C)
        token_at = len(S2C) - 8
        assert answer[:token_at] == S2C[:token_at]
    finally:
        ep.shutdown()
