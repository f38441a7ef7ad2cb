"""Every outgoing byte of a peering comes from the session's LinkWriter, without a socket.

The writer frames what the link sends (data and commands, routed copies, routing
updates, pings, pongs, the goodbye) and holds the bounded send buffer; these tests
read its ``data_to_send`` back with the wire decoders.
"""

from __future__ import annotations

from broker_spark.errors import EC
from broker_spark.protocol.framing import FrameDecoder
from broker_spark.protocol.handshake import refusal
from broker_spark.protocol.link_writer import LinkWriter
from broker_spark.protocol.wire_messages import (
    MSG_DATA,
    MSG_PING,
    MSG_PONG,
    MSG_ROUTING_UPDATE,
    DropConn,
    decode_filter,
    decode_handshake,
    decode_node_message,
    encode_ping,
)

A, B = b"a" * 16, b"b" * 16


def frames(data: bytes) -> list[bytes]:
    return FrameDecoder().feed(data)


def test_messages_become_version_1_envelopes_from_us() -> None:
    w = LinkWriter(A, B, capacity=10, policy="disconnect")
    w.messages([("/t", b"p1", MSG_DATA, 16, B), ("/t", b"p2", MSG_DATA, 16, B)])
    assert w.queued == 2 and w.room() == 8
    decoded = [decode_node_message(f) for f in frames(w.data_to_send())]
    assert [(m.sender, m.topic, m.ttl, m.payload_bytes) for m in decoded] == [
        (A, "/t", 16, b"p1"),
        (A, "/t", 16, b"p2"),
    ]
    assert w.queued == 0 and w.data_to_send() == b""


def test_control_messages_in_order() -> None:
    w = LinkWriter(A, B, capacity=10, policy="disconnect")
    w.routing_update(["/x", "/y"])
    w.ping(b"tok")
    w.pong_for(decode_node_message(encode_ping(B, A, b"hi")))
    kinds = [decode_node_message(f) for f in frames(w.data_to_send())]
    assert [m.msg_type for m in kinds] == [MSG_ROUTING_UPDATE, MSG_PING, MSG_PONG]
    assert decode_filter(kinds[0].payload) == ("/x", "/y")
    assert kinds[1].payload_bytes == b"tok" and kinds[2].payload_bytes == b"hi"


def test_runs_frame_a_header_before_each_payload() -> None:
    w = LinkWriter(A, B, capacity=10, policy="disconnect")
    w.runs([(b"H", [b"1", b"2"]), (b"", [b"raw"])], 3)
    assert frames(w.data_to_send()) == [b"H1", b"H2", b"raw"]


def test_the_overflow_policies_once_dropping() -> None:
    newest = LinkWriter(A, B, capacity=2, policy="drop_newest")
    oldest = LinkWriter(A, B, capacity=2, policy="drop_oldest")
    for w in (newest, oldest):
        w.runs([(b"", [b"1", b"2"])], 2)
        w.runs([(b"", [b"3"])], 1)  # not dropping yet: held, beyond the bound
        assert w.queued == 3 and w.room() == -1
        w.dropping = True
        w.runs([(b"", [b"4"])], 1)
    assert frames(newest.data_to_send()) == [b"1", b"2", b"3"] and newest.dropped == 1
    assert frames(oldest.data_to_send()) == [b"3", b"4"] and oldest.dropped == 2


def test_a_peer_reading_again_ends_dropping_at_half_the_bound() -> None:
    w = LinkWriter(A, B, capacity=4, policy="drop_newest")
    w.runs([(b"", [b"1", b"2", b"3"])], 3)
    w.dropping = True
    w.peer_reads_again()  # 3 of 4 wait: still dropping
    assert w.dropping
    w.data_to_send()
    w.runs([(b"", [b"5", b"6"])], 2)
    w.peer_reads_again()  # 2 of 4: the core is held back again
    assert not w.dropping and w.room() == 2


def test_closing_takes_only_the_goodbye() -> None:
    w = LinkWriter(A, B, capacity=10, policy="disconnect")
    w.close()
    w.messages([("/t", b"p", MSG_DATA, 16, B)])
    token = w.bye()
    (bye,) = [decode_node_message(f) for f in frames(w.data_to_send())]
    assert bye.msg_type == MSG_PING and bye.payload_bytes == token and token.startswith(b"BYE")


def test_a_refusal_is_one_framed_drop_conn() -> None:
    (body,) = frames(refusal(A, EC.PeerIncompatible, "TLS only"))
    msg = decode_handshake(body)
    assert isinstance(msg, DropConn) and msg.code == int(EC.PeerIncompatible)
