"""Byte-level peering: a scripted peer that behaves like a real Zeek, and bad input.

The scripted peer speaks version 1 over a raw socket exactly as Broker does
(WIRE.md): probe first when accepting, hello first when connecting, the
smaller id is the originator. It replays frames of the recorded Broker
session in ``tests/vectors`` where they fit.
"""

from __future__ import annotations

import socket
import struct
from collections import deque
from pathlib import Path

import pytest
from test_peering_support import (
    LOCAL,
    drained_to_eof,
    error_of,
    make_endpoint,
    next_matching,
    raw,
    serving,
    wait_for,
    wants,
)

import broker_spark as broker
from broker_spark import EC, SC
from broker_spark.data.binary import decode, encode
from broker_spark.protocol.framing import FrameDecoder, encode_frame
from broker_spark.protocol.wire_messages import (
    BROADCAST,
    MAGIC,
    MSG_DATA,
    MSG_PING,
    MSG_PONG,
    MSG_ROUTING_UPDATE,
    DropConn,
    Hello,
    OriginatorAck,
    OriginatorSyn,
    Probe,
    ResponderSynAck,
    VersionSelect,
    decode_filter,
    decode_handshake,
    decode_node_message,
    encode_handshake,
    encode_node_message,
    encode_ping,
    encode_pong_for,
    encode_routing_update,
    is_bye_token,
)

pytestmark = pytest.mark.timeout(30)

VECTORS = Path(__file__).resolve().parent / "vectors"
RECORDED = FrameDecoder().feed((VECTORS / "broker-v1-session.c2s.bin").read_bytes())
RECORDED_ID = bytes.fromhex("0d42ef1b361d5ba4a475f534b4b13844")
LOW_ID = bytes(15) + b"\x02"
HIGH_ID = b"\xff" * 16


class ZeekPeer:
    """A raw socket speaking Broker's version 1 as a Zeek process would."""

    def __init__(self, sock: socket.socket, zid: bytes) -> None:
        sock.settimeout(5.0)
        self.sock = sock
        self.id = zid
        self.decoder = FrameDecoder()
        self.pending: deque[bytes] = deque()

    def send(self, body: bytes) -> None:
        self.sock.sendall(encode_frame(body))

    def recv(self) -> bytes:
        while not self.pending:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("connection closed")
            self.pending.extend(self.decoder.feed(data))
        return self.pending.popleft()

    def recv_handshake(self) -> object:
        return decode_handshake(self.recv())

    def recv_node(self, skip_keepalive: bool = True) -> object:
        while True:
            msg = decode_node_message(self.recv())
            if skip_keepalive and msg.msg_type == MSG_PING and not is_bye_token(msg.payload):
                self.send(encode_pong_for(msg, self.id))
                continue
            return msg

    def closed(self) -> bool:
        try:
            while True:
                self.recv()
        except EOFError:
            return True
        except OSError:
            return True

    def handshake(self, own: bytes, role: str, prefixes: tuple[str, ...], version: int = 1) -> None:
        """Run the handshake against endpoint id ``own``; ``role`` is ours (the raw side).

        ``version`` 1 is a Zeek (it offers 1 to 1); 2 is a broker-spark peer (1 to 2).
        """
        if role == "connector":
            if self.id == RECORDED_ID:
                self.sock.sendall(encode_frame(RECORDED[0]))  # the recorded hello, verbatim
            else:
                self.send(encode_handshake(Hello(self.id, 1, version)))
            assert self.recv_handshake() == Probe()  # the acceptor probes first
        else:
            first = self.recv_handshake()
            assert first == Hello(own, 1, 2)  # broker_spark offers versions 1 to 2
            self.send(encode_handshake(Probe()))
        if self.id < own:  # we are the originator
            if role == "connector":
                assert self.recv_handshake() == Hello(own, 1, 2)
            self.send(encode_handshake(VersionSelect(self.id, version)))
            self.send(encode_handshake(OriginatorSyn(prefixes)))
            ack = self.recv_handshake()
            assert isinstance(ack, ResponderSynAck)
            self.send(encode_handshake(OriginatorAck()))
            self.peer_filter = ack.filter
        else:
            if role == "acceptor":
                self.send(encode_handshake(Hello(self.id, 1, version)))
            assert self.recv_handshake() == VersionSelect(own, version)
            syn = self.recv_handshake()
            assert isinstance(syn, OriginatorSyn)
            self.send(encode_handshake(ResponderSynAck(prefixes)))
            assert self.recv_handshake() == OriginatorAck()
            self.peer_filter = syn.filter


def exchange_like_zeek(ep: broker.Endpoint, zeek: ZeekPeer) -> None:
    own = ep._core.node_id
    inbox = ep.make_subscriber(["/zeek/in", "/test/pipe"], qsize=10)
    # Our subscription change reaches the peer as a routing_update.
    msg = zeek.recv_node()
    while msg.msg_type != MSG_ROUTING_UPDATE or "/zeek/in" not in decode_filter(msg.payload):
        msg = zeek.recv_node()
    assert msg.sender == own and msg.receiver == zeek.id and msg.topic == "<$>"
    # Zeek -> us: a broadcast data message.
    zeek.send(encode_node_message(zeek.id, BROADCAST, MSG_DATA, 16, "/zeek/in/x", encode("hi")))
    assert inbox.get(5.0) == ("/zeek/in/x", "hi")
    if zeek.id == RECORDED_ID:
        zeek.sock.sendall(encode_frame(RECORDED[4]))  # the recorded "captured-msg"
        assert inbox.get(5.0) == ("/test/pipe", "captured-msg")
    # Us -> Zeek, on the filter from the handshake.
    assert wants(ep, "/zeek/out/1")
    ep.publish("/zeek/out/1", broker.Count(7))
    data = zeek.recv_node()
    assert (data.msg_type, data.sender, data.receiver, data.ttl) == (MSG_DATA, own, BROADCAST, 16)
    assert data.topic == "/zeek/out/1" and decode(data.payload_bytes) == broker.Count(7)
    # A routing_update replaces Zeek's filter.
    zeek.send(encode_routing_update(zeek.id, own, ["/other"]))
    assert wait_for(lambda: [str(t) for t in ep.peer_subscriptions()] == ["/other"])
    ep.publish("/zeek/out/2", 1)  # no longer wanted: not sent
    ep.publish("/other/1", 2)
    data = zeek.recv_node()
    assert data.topic == "/other/1" and decode(data.payload_bytes) == 2
    # Every ping gets a pong with the same payload.
    zeek.send(encode_ping(zeek.id, own, b"are you there"))
    pong = zeek.recv_node()
    assert pong.msg_type == MSG_PONG and pong.payload_bytes == b"are you there"
    assert pong.sender == own and pong.receiver == zeek.id


@pytest.mark.parametrize("zid", [LOW_ID, HIGH_ID, RECORDED_ID], ids=["low", "high", "recorded"])
def test_zeek_dials_us(zid: bytes) -> None:
    ep = make_endpoint()
    try:
        status = ep.make_status_subscriber(True)
        port = ep.listen(LOCAL, 0)
        zeek = ZeekPeer(socket.create_connection((LOCAL, port)), zid)
        try:
            zeek.handshake(ep._core.node_id, "connector", ("/zeek/out",))
            assert zeek.peer_filter == ()
            assert [s.code() for s in (status.get(5.0), status.get(5.0))] == [
                SC.EndpointDiscovered,
                SC.PeerAdded,
            ]
            assert next(iter(ep._core.links.values())).version == 1
            exchange_like_zeek(ep, zeek)
            # Zeek says goodbye: a BYE ping, which we answer, then it closes.
            zeek.send(encode_ping(zid, ep._core.node_id, b"BYE" + bytes(8)))
            pong = zeek.recv_node()
            assert pong.msg_type == MSG_PONG and pong.payload_bytes == b"BYE" + bytes(8)
            assert next_matching(status, lambda s: s.code() == SC.PeerRemoved)
        finally:
            zeek.sock.close()
    finally:
        ep.shutdown()


@pytest.mark.parametrize("zid", [LOW_ID, HIGH_ID], ids=["low", "high"])
def test_we_dial_zeek(zid: bytes) -> None:
    ep = make_endpoint()
    listener = socket.create_server((LOCAL, 0))
    try:
        port = listener.getsockname()[1]
        ep.peer_nosync(LOCAL, port, 0)
        listener.settimeout(5.0)
        conn, _ = listener.accept()
        zeek = ZeekPeer(conn, zid)
        try:
            zeek.handshake(ep._core.node_id, "acceptor", ("/zeek/out",))
            assert ep.await_peer(str(__import__("uuid").UUID(bytes=zid)), 5.0)
            exchange_like_zeek(ep, zeek)
            # We unpeer: a goodbye ping; Zeek answers, and we close.
            assert ep.unpeer(LOCAL, port)
            bye = zeek.recv_node()
            assert bye.msg_type == MSG_PING and is_bye_token(bye.payload)
            zeek.send(encode_pong_for(bye, zid))
            assert zeek.closed()
        finally:
            zeek.sock.close()
    finally:
        listener.close()
        ep.shutdown()


def test_goodbye_closes_after_timeout_without_pong() -> None:
    ep = make_endpoint()
    ep._tcp().bye_timeout = 0.2
    listener = socket.create_server((LOCAL, 0))
    try:
        port = listener.getsockname()[1]
        ep.peer_nosync(LOCAL, port, 0)
        listener.settimeout(5.0)
        conn, _ = listener.accept()
        zeek = ZeekPeer(conn, HIGH_ID)
        try:
            zeek.handshake(ep._core.node_id, "acceptor", ())
            assert ep.await_peer(str(__import__("uuid").UUID(bytes=HIGH_ID)), 5.0)
            assert ep.unpeer(LOCAL, port)
            assert zeek.closed()  # no pong from us: closed after bye_timeout
        finally:
            zeek.sock.close()
    finally:
        listener.close()
        ep.shutdown()


@pytest.mark.parametrize("retry", [0, 0.2])
def test_a_peer_that_hangs_up_during_the_handshake_fails_the_attempt(retry: float) -> None:
    """The dialled peer reads our hello and closes: that attempt failed (``peer()`` says
    False at once rather than waiting forever), it is reported, and with a ``retry`` the
    address is dialled again."""
    ep = make_endpoint()
    errors = ep.make_status_subscriber(False)
    listener = socket.create_server((LOCAL, 0))
    listener.settimeout(5.0)
    try:
        port = listener.getsockname()[1]
        result: list[bool] = []
        caller = __import__("threading").Thread(
            target=lambda: result.append(ep.peer(LOCAL, port, retry))
        )
        caller.start()
        conn, _ = listener.accept()
        conn.recv(4096)  # our hello
        conn.close()
        caller.join(10.0)
        assert result == [False]
        err = error_of(errors)
        assert err.code() == EC.PeerDisconnectDuringHandshake
        if retry:
            again, _ = listener.accept()  # redialled after ``retry``
            again.close()
            ep.unpeer(LOCAL, port)
    finally:
        listener.close()
        ep.shutdown()


# -- bad input ---------------------------------------------------------------------------


@pytest.fixture
def served():
    """Endpoint A (plain, short timeouts) with a healthy peer B publishing to it."""
    with serving(ssl=False) as ctx:
        yield ctx


def test_garbage_is_refused(served) -> None:
    a, b, port, sub, errors = served
    with raw(port) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        err = error_of(errors)
        assert err.code() == EC.PeerInvalid and "exceeds the maximum" in err.message()
        assert drained_to_eof(sock)


def test_unknown_handshake_message_is_refused(served) -> None:
    a, b, port, sub, errors = served
    with raw(port) as sock:
        sock.sendall(encode_frame(b"hello there"))
        err = error_of(errors)
        assert err.code() == EC.PeerInvalid and "unknown handshake message" in err.message()


def test_oversized_frame_is_refused(served) -> None:
    a, b, port, sub, errors = served
    with raw(port) as sock:
        sock.sendall(struct.pack(">I", 16 * 1024 * 1024 + 1) + b"\x06")
        err = error_of(errors)
        assert "16777217 bytes" in err.message() and "exceeds" in err.message()
        assert drained_to_eof(sock)


def test_wrong_magic_is_refused(served) -> None:
    a, b, port, sub, errors = served
    with raw(port) as sock:
        sock.sendall(encode_frame(struct.pack(">BI16sBB", 6, 0xDEADBEEF, HIGH_ID, 1, 1)))
        err = error_of(errors)
        assert err.code() == EC.PeerInvalid and "wrong magic" in err.message()
        assert MAGIC  # the expected one is named in the message
        assert "0x5a45454b" in err.message()


def test_unsupported_version_gets_drop_conn(served) -> None:
    a, b, port, sub, errors = served
    with raw(port) as sock:
        zeek = ZeekPeer(sock, HIGH_ID)
        zeek.send(encode_handshake(Hello(HIGH_ID, 3, 4)))
        assert zeek.recv_handshake() == Probe()
        drop = zeek.recv_handshake()
        assert isinstance(drop, DropConn) and drop.code == EC.PeerIncompatible
        err = error_of(errors)
        assert err.code() == EC.PeerIncompatible and "version" in err.message()


def test_truncated_frame_is_reported(served) -> None:
    a, b, port, sub, errors = served
    with raw(port) as sock:
        sock.sendall(struct.pack(">I", 100) + b"\x06" * 10)
    err = error_of(errors)
    assert err.code() == EC.PeerDisconnectDuringHandshake
    assert "middle of a frame" in err.message()


def test_truncated_frame_after_the_handshake_is_reported(served) -> None:
    a, b, port, sub, errors = served
    status = a.make_status_subscriber(True)
    with raw(port) as sock:
        zeek = ZeekPeer(sock, HIGH_ID)
        zeek.handshake(a._core.node_id, "connector", ())
        assert next_matching(status, lambda s: s.code() == SC.PeerAdded) is not None
        sock.sendall(struct.pack(">I", 100) + b"\x06" * 10)  # 90 bytes short, then gone
    err = error_of(errors)
    assert err.code() == EC.InvalidMessage
    assert "middle of a frame (14 bytes pending)" in err.message()
    assert next_matching(status, lambda s: s.code() == SC.PeerLost) is not None


def test_stalled_handshake_times_out(served) -> None:
    a, b, port, sub, errors = served
    with raw(port) as sock:
        sock.sendall(encode_frame(encode_handshake(Probe())))  # trickle, never a hello
        err = error_of(errors)
        assert err.code() == EC.PeerTimeout and "handshake" in err.message()
        assert drained_to_eof(sock)


def test_bad_envelope_after_handshake_is_dropped(served) -> None:
    a, b, port, sub, errors = served
    with raw(port) as sock:
        zeek = ZeekPeer(sock, HIGH_ID)
        zeek.handshake(a._core.node_id, "connector", ())
        own = a._core.node_id
        zeek.send(HIGH_ID + BROADCAST + b"\x09\x00\x10\x00\x00")  # type 9 is no envelope
        err = error_of(errors)
        assert err.code() == EC.InvalidMessage and "invalid envelope message type" in err.message()
        zeek.send(HIGH_ID + BROADCAST + b"\x01\x00\x10\x00\x09/healthy")  # topic runs past end
        assert error_of(errors).code() == EC.InvalidMessage
        # The connection is still usable.
        zeek.send(encode_node_message(HIGH_ID, BROADCAST, MSG_DATA, 16, "/healthy", encode("z")))
        assert sub.get(5.0) == ("/healthy", "before")
        assert sub.get(5.0) == ("/healthy", "z")
        sub_ok = encode_ping(HIGH_ID, own, b"x")
        zeek.send(sub_ok)
        assert zeek.recv_node().msg_type in (MSG_PONG, MSG_ROUTING_UPDATE)
    # The raw peer went away without a goodbye: lost.
    assert wait_for(lambda: len(a._core.links) == 1)
    sub.get(0.01)  # nothing else is pending
    b.publish("/healthy", "before")  # the fixture expects "before" then "after"


def test_oversized_frame_after_handshake_drops_the_peer(served) -> None:
    a, b, port, sub, errors = served
    status = a.make_status_subscriber(True)
    with raw(port) as sock:
        zeek = ZeekPeer(sock, LOW_ID)
        zeek.handshake(a._core.node_id, "connector", ())
        next_matching(status, lambda s: s.code() == SC.PeerAdded)
        sock.sendall(struct.pack(">I", 1 << 30))
        err = error_of(errors)
        assert err.code() == EC.InvalidMessage and "exceeds" in err.message()
        lost = next_matching(status, lambda s: s.code() == SC.PeerLost)
        assert lost is not None
        assert drained_to_eof(sock)


def test_silent_peer_is_lost_after_the_liveness_timeout() -> None:
    ep = make_endpoint()
    tcp = ep._tcp()
    tcp.ping_interval = 0.1
    tcp.liveness_timeout = 0.4
    try:
        status = ep.make_status_subscriber(True)
        port = ep.listen(LOCAL, 0)
        with raw(port) as sock:
            zeek = ZeekPeer(sock, HIGH_ID)
            zeek.handshake(ep._core.node_id, "connector", ())
            # It answers nothing, not even our keep-alive pings.
            err = next_matching(status, lambda s: isinstance(s, broker.Error))
            assert err.code() == EC.PeerTimeout and "liveness" in err.message()
            assert next_matching(status, lambda s: s.code() == SC.PeerLost) is not None
    finally:
        ep.shutdown()


@pytest.mark.parametrize("versions", [(1, 1), (1, 2)], ids=["v1-neighbour", "v2-neighbour"])
def test_unicast_to_a_neighbour_is_forwarded_not_delivered(versions: tuple[int, int]) -> None:
    ep = make_endpoint()
    other = make_endpoint(versions=versions)
    try:
        port = ep.listen(LOCAL, 0)
        here = ep.make_subscriber("/u", qsize=10)
        there = other.make_subscriber("/u", qsize=10)
        assert other.peer(LOCAL, port, retry=0)
        with raw(port) as sock:
            zeek = ZeekPeer(sock, HIGH_ID)
            zeek.handshake(ep._core.node_id, "connector", ())
            assert wants(ep, "/u/y")
            dest = other._core.node_id
            zeek.send(encode_node_message(zeek.id, dest, MSG_DATA, 1, "/u/ttl1", encode(0)))
            zeek.send(encode_node_message(zeek.id, dest, MSG_DATA, 16, "/u/x", encode(1)))
            zeek.send(encode_node_message(zeek.id, BROADCAST, MSG_DATA, 16, "/u/y", encode(2)))
            # The unicasts came first: had ep delivered one, it would be here before /u/y.
            assert here.get(5.0) == ("/u/y", 2)
            # The neighbour got the live unicast (not the one without TTL) and the broadcast.
            got = [there.get(5.0), there.get(5.0)]
            assert sorted(got) == [("/u/x", 1), ("/u/y", 2)]
    finally:
        other.shutdown()
        ep.shutdown()
