"""Handshake messages, node message envelopes and filters, byte for byte.

The hex examples of docs/protocol.md are parsed from the page and checked here,
and every frame of the recorded Broker sessions is decoded and re-encoded.
"""

from __future__ import annotations

import contextlib
import re
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recorded import VECTORS

from broker_spark.errors import EC, DecodeError, EncodeError, ProtocolError
from broker_spark.protocol.framing import FrameDecoder, encode_frame
from broker_spark.protocol.wire_messages import (
    BROADCAST,
    DEFAULT_TTL,
    MAGIC,
    MSG_COMMAND,
    MSG_DATA,
    MSG_PING,
    MSG_PONG,
    MSG_ROUTING_UPDATE,
    PING_TOPIC,
    DropConn,
    Hello,
    MessageType,
    NodeMessage,
    OriginatorAck,
    OriginatorSyn,
    Probe,
    ResponderSynAck,
    VersionSelect,
    bye_token,
    decode_filter,
    decode_handshake,
    decode_node_message,
    encode_filter,
    encode_handshake,
    encode_node_message,
    encode_ping,
    encode_pong,
    encode_pong_for,
    encode_routing_update,
    is_bye_token,
    read_filter,
    with_sender_and_ttl,
)
from broker_spark.store.commands import (
    EntityId,
    InternalCommand,
    PutCommand,
    decode_command,
    encode_command,
)

A = bytes.fromhex("0d42ef1b361d5ba4a475f534b4b13844")
B = bytes.fromhex("9679fa7af4b356fa9f995d32671b20c5")
C = bytes.fromhex("3169cf5839ef5d9cb880c909a280dce4")
D = bytes.fromhex("da5de73efaa650a7ac2a16fb92f55afd")
BYE_ID = 0x1000000000000001  # the bye id of the recorded sessions
DOC = Path(__file__).resolve().parent.parent / "docs" / "protocol.md"


def h(text: str) -> bytes:
    return bytes.fromhex(text)


# -- the examples of docs/protocol.md ---------------------------------------------

# Keep identical to the ```hex blocks of docs/protocol.md (checked below).
DOC_EXAMPLES = {
    "frame-probe": "00000005 075a45454b",
    "frame-originator-ack": "00000001 0c",
    "hello": "06 5a45454b 0d42ef1b361d5ba4a475f534b4b13844 01 01",
    "hello-v1-v2": "06 5a45454b 9679fa7af4b356fa9f995d32671b20c5 01 02",
    "probe": "07 5a45454b",
    "version_select": "08 5a45454b 0d42ef1b361d5ba4a475f534b4b13844 01",
    "drop_conn": "09 5a45454b 0d42ef1b361d5ba4a475f534b4b13844 27 14 "
    "726564756e64616e7420636f6e6e656374696f6e",
    "originator_syn": "0a 00",
    "responder_syn_ack": "0b 01 0a 2f746573742f70697065",
    "originator_ack": "0c",
    "data": "0d42ef1b361d5ba4a475f534b4b13844 00000000000000000000000000000000 01 0010 000a "
    "2f746573742f70697065 050c63617074757265642d6d7367",
    "routing_update": "3169cf5839ef5d9cb880c909a280dce4 da5de73efaa650a7ac2a16fb92f55afd 03 0010 "
    "0003 3c243e 02 062f7265706c79 116b762f3c243e2f646174612f636c6f6e65",
    "command": "3169cf5839ef5d9cb880c909a280dce4 00000000000000000000000000000000 02 0010 0012 "
    "6b762f3c243e2f646174612f6d6173746572 0000000000000002 "
    "3169cf5839ef5d9cb880c909a280dce40000000000000008 "
    "da5de73efaa650a7ac2a16fb92f55afd0000000000000006 00 050161 030000000000000001 00 "
    "3169cf5839ef5d9cb880c909a280dce40000000000000008",
    "bye_token": "425945 0100000000000010",
    "ping": "9679fa7af4b356fa9f995d32671b20c5 0d42ef1b361d5ba4a475f534b4b13844 04 0010 0003 "
    "3c243e 4259450100000000000010",
    "pong": "0d42ef1b361d5ba4a475f534b4b13844 9679fa7af4b356fa9f995d32671b20c5 05 0010 0003 "
    "3c243e 4259450100000000000010",
    "forwarded-data": "9679fa7af4b356fa9f995d32671b20c5 00000000000000000000000000000000 01 "
    "0010 000a 2f746573742f70697065 050c63617074757265642d6d7367",
}

HANDSHAKE_EXAMPLES = {
    "hello": Hello(A, 1, 1),
    "hello-v1-v2": Hello(B, 1, 2),
    "probe": Probe(),
    "version_select": VersionSelect(A, 1),
    "drop_conn": DropConn(A, EC.RedundantConnection, "redundant connection"),
    "originator_syn": OriginatorSyn(()),
    "responder_syn_ack": ResponderSynAck(("/test/pipe",)),
    "originator_ack": OriginatorAck(),
}

DATA_PAYLOAD = h("050c63617074757265642d6d7367")  # string "captured-msg"


def doc_examples() -> dict[str, str]:
    """Parse ``label: hex`` lines out of the ```hex blocks of docs/protocol.md."""
    text = DOC.read_text(encoding="utf-8")
    out: dict[str, str] = {}
    for block in re.findall(r"^```hex\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.splitlines():
            label, _, value = line.partition(":")
            assert label.strip() not in out, f"duplicate example {label}"
            out[label.strip()] = value.strip()
    return out


def test_doc_examples_are_the_tested_ones() -> None:
    assert doc_examples() == DOC_EXAMPLES


@pytest.mark.parametrize("label", sorted(HANDSHAKE_EXAMPLES))
def test_doc_handshake_examples(label: str) -> None:
    body, msg = h(DOC_EXAMPLES[label]), HANDSHAKE_EXAMPLES[label]
    assert encode_handshake(msg) == body
    assert decode_handshake(body) == msg
    assert decode_handshake(memoryview(body)) == msg


def test_doc_frame_examples() -> None:
    assert encode_frame(h(DOC_EXAMPLES["probe"])) == h(DOC_EXAMPLES["frame-probe"])
    assert encode_frame(h(DOC_EXAMPLES["originator_ack"])) == h(
        DOC_EXAMPLES["frame-originator-ack"]
    )


def test_doc_envelope_examples() -> None:
    data = h(DOC_EXAMPLES["data"])
    assert encode_node_message(A, BROADCAST, MSG_DATA, 16, "/test/pipe", DATA_PAYLOAD) == data
    msg = decode_node_message(data)
    assert (msg.sender, msg.receiver, msg.msg_type, msg.ttl, msg.topic) == (
        A,
        BROADCAST,
        MSG_DATA,
        16,
        "/test/pipe",
    )
    assert msg.is_broadcast and msg.payload == DATA_PAYLOAD

    update = h(DOC_EXAMPLES["routing_update"])
    assert encode_routing_update(C, D, ["/reply", "kv/<$>/data/clone"]) == update
    assert decode_filter(decode_node_message(update).payload) == ("/reply", "kv/<$>/data/clone")

    command = h(DOC_EXAMPLES["command"])
    put = InternalCommand(
        2, EntityId(C, 8), EntityId(D, 6), PutCommand("a", 1, None, EntityId(C, 8))
    )
    assert (
        encode_node_message(
            C, BROADCAST, MSG_COMMAND, 16, "kv/<$>/data/master", encode_command(put)
        )
        == command
    )
    cmd = decode_node_message(command)
    assert (cmd.sender, cmd.receiver, cmd.msg_type, cmd.ttl, cmd.topic) == (
        C,
        BROADCAST,
        MSG_COMMAND,
        16,
        "kv/<$>/data/master",
    )
    assert decode_command(cmd.payload) == put

    token = h(DOC_EXAMPLES["bye_token"])
    assert bye_token(BYE_ID) == token and is_bye_token(token)
    ping = h(DOC_EXAMPLES["ping"])
    assert encode_ping(B, A, token) == ping
    assert encode_pong_for(decode_node_message(ping), A) == h(DOC_EXAMPLES["pong"])
    assert encode_pong(A, B, token) == h(DOC_EXAMPLES["pong"])

    forwarded = h(DOC_EXAMPLES["forwarded-data"])
    assert with_sender_and_ttl(data, B, 16) == forwarded
    assert msg.with_sender_and_ttl(B, DEFAULT_TTL) == forwarded


# -- handshake messages: encoding and decoding errors -----------------------------------


def test_message_type_numbers() -> None:
    assert [int(t) for t in MessageType] == list(range(1, 13))
    assert MessageType.ORIGINATOR_ACK == 12 and MessageType.HELLO == 6
    assert MAGIC == 0x5A45454B and bytes.fromhex("5a45454b") == b"ZEEK"


@pytest.mark.parametrize("label", ["hello", "probe", "version_select", "drop_conn"])
def test_wrong_magic_is_a_protocol_error(label: str) -> None:
    body = bytearray(h(DOC_EXAMPLES[label]))
    body[1:5] = b"KEEZ"
    with pytest.raises(ProtocolError) as info:
        decode_handshake(bytes(body))
    assert info.value.code == EC.WrongMagicNumber
    assert "magic" in str(info.value)


@pytest.mark.parametrize("label", sorted(HANDSHAKE_EXAMPLES))
def test_every_truncation_is_a_decode_error(label: str) -> None:
    body = h(DOC_EXAMPLES[label])
    for n in range(len(body)):
        with pytest.raises(DecodeError):
            decode_handshake(body[:n])


@pytest.mark.parametrize("label", sorted(HANDSHAKE_EXAMPLES))
def test_trailing_bytes_are_a_decode_error(label: str) -> None:
    with pytest.raises(DecodeError, match="trailing"):
        decode_handshake(h(DOC_EXAMPLES[label]) + b"\x00")


@pytest.mark.parametrize("kind", [0, 1, 2, 3, 4, 5, 13, 200, 255])
def test_unknown_handshake_type_is_a_decode_error(kind: int) -> None:
    with pytest.raises(DecodeError, match="type"):
        decode_handshake(bytes([kind]) + h("5a45454b") + A + b"\x01\x01")


def test_drop_conn_keeps_code_of_bad_utf8_description() -> None:
    body = h("09 5a45454b") + A + b"\x02\x02\xff\xfe"
    msg = decode_handshake(body)
    assert isinstance(msg, DropConn) and msg.code == 2 and msg.sender == A
    assert msg.description == "\ufffd\ufffd"


def test_drop_conn_with_unknown_code_decodes() -> None:
    msg = DropConn(B, 250, "")
    assert decode_handshake(encode_handshake(msg)) == msg


@pytest.mark.parametrize(
    "msg",
    [
        Hello(b"short", 1, 1),
        Hello(A, 0, 256),
        Hello(A, -1, 1),
        VersionSelect(A + b"x", 1),
        VersionSelect(A, 300),
        DropConn(A, 256, "x"),
        DropConn(b"", 2, "x"),
        OriginatorSyn(("x" * 70_000,)),
    ],
)
def test_invalid_fields_are_encode_errors(msg: object) -> None:
    with pytest.raises(EncodeError):
        encode_handshake(msg)  # type: ignore[arg-type]


def test_not_a_message_is_an_encode_error() -> None:
    with pytest.raises(EncodeError):
        encode_handshake("hello")  # type: ignore[arg-type]


def test_filter_messages_normalise_to_tuples() -> None:
    syn = OriginatorSyn(["/a", "/b"])  # type: ignore[arg-type]
    assert syn.filter == ("/a", "/b")
    assert hash(syn) == hash(OriginatorSyn(("/a", "/b")))
    assert ResponderSynAck(iter(["/x"])).filter == ("/x",)  # type: ignore[arg-type]


# -- filters ---------------------------------------------------------------------------


@given(st.lists(st.text(max_size=40), max_size=20))
@settings(max_examples=100, deadline=None)
def test_filter_roundtrip(prefixes: list[str]) -> None:
    raw = encode_filter(prefixes)
    assert decode_filter(raw) == tuple(prefixes)
    assert read_filter(b"\xaa" + raw + b"\xbb", 1) == (tuple(prefixes), len(raw) + 1)


def test_filter_encoding_bytes() -> None:
    assert encode_filter([]) == b"\x00"
    assert encode_filter(["/reply", "kv/<$>/data/clone"]) == h(
        "02 062f7265706c79 116b762f3c243e2f646174612f636c6f6e65"
    )
    long_prefix = "p" * 200  # a two-byte varbyte length
    assert encode_filter([long_prefix]) == b"\x01\xc8\x01" + long_prefix.encode()


def test_filter_limits() -> None:
    with pytest.raises(DecodeError, match="limit"):
        decode_filter(encode_filter(["a", "b", "c"]), max_count=2)
    # Announced counts are checked before anything is allocated.
    with pytest.raises(DecodeError, match="limit"):
        decode_filter(b"\xff\xff\xff\x0f\x00")
    with pytest.raises(DecodeError, match="truncated filter"):
        decode_filter(b"\xe8\x07\x00\x00")
    with pytest.raises(DecodeError):
        decode_filter(b"\x02\x01a")
    with pytest.raises(DecodeError, match="UTF-8"):
        decode_filter(b"\x01\x01\xff")
    with pytest.raises(DecodeError, match="trailing"):
        decode_filter(b"\x00\x00")
    with pytest.raises(DecodeError):
        decode_filter(b"")


# -- node message envelopes -----------------------------------------------------------


def test_envelope_fields_and_payload_views() -> None:
    body = encode_node_message(A, B, MSG_COMMAND, 300, "kv/<$>/data/master", b"\x01\x02\x03")
    msg = decode_node_message(body)
    assert isinstance(msg, NodeMessage)
    assert msg.body is body
    assert msg.sender == A and msg.receiver == B and not msg.is_broadcast
    assert msg.msg_type == MSG_COMMAND == MessageType.COMMAND
    assert msg.ttl == 300
    assert msg.topic == "kv/<$>/data/master"
    assert msg.payload_offset == 37 + len("kv/<$>/data/master")
    assert isinstance(msg.payload, memoryview) and msg.payload == b"\x01\x02\x03"
    assert msg.payload_bytes == b"\x01\x02\x03" and type(msg.payload_bytes) is bytes
    assert msg == decode_node_message(bytearray(body)) and hash(msg) == hash(body)
    assert "ttl=300" in repr(msg) and "kv/<$>/data/master" in repr(msg)
    assert not hasattr(msg, "__dict__")


def test_envelope_empty_topic_and_payload() -> None:
    body = encode_node_message(A, BROADCAST, MSG_PING, 0, "", b"")
    assert len(body) == 37
    msg = decode_node_message(body)
    assert msg.topic == "" and msg.payload == b"" and msg.ttl == 0 and msg.is_broadcast


def test_envelope_decode_errors() -> None:
    good = encode_node_message(A, B, MSG_DATA, 16, "/t", b"xy")
    for n in range(37):
        with pytest.raises(DecodeError, match="truncated envelope"):
            decode_node_message(good[:n])
    with pytest.raises(DecodeError, match="topic"):
        decode_node_message(good[:38])  # topic announced as 2 bytes, 1 present
    for kind in (0, 6, 12, 255):
        bad = bytearray(good)
        bad[32] = kind
        with pytest.raises(DecodeError, match="message type"):
            decode_node_message(bytes(bad))
    bad = bytearray(good)
    bad[35:37] = b"\xff\xff"
    with pytest.raises(DecodeError, match="topic"):
        decode_node_message(bytes(bad))
    bad = bytearray(good)
    bad[37] = 0xFF
    with pytest.raises(DecodeError, match="UTF-8"):
        decode_node_message(bytes(bad))


@pytest.mark.parametrize(
    "args",
    [
        (A[:15], B, MSG_DATA, 16, "/t"),
        (A, B + b"!", MSG_DATA, 16, "/t"),
        (A, B, 0, 16, "/t"),
        (A, B, 6, 16, "/t"),
        (A, B, MSG_DATA, -1, "/t"),
        (A, B, MSG_DATA, 65536, "/t"),
        (A, B, MSG_DATA, 16, "t" * 65536),
        ("not bytes", B, MSG_DATA, 16, "/t"),
    ],
)
def test_envelope_encode_errors(args: tuple) -> None:
    with pytest.raises(EncodeError):
        encode_node_message(*args, b"")


def test_forwarding_patches_only_sender_and_ttl() -> None:
    payload = bytes(range(256)) * 4
    body = encode_node_message(A, BROADCAST, MSG_DATA, 16, "/x/y", payload)
    out = with_sender_and_ttl(body, B, 7)
    assert type(out) is bytes and len(out) == len(body)
    assert out[:16] == B and out[33:35] == b"\x00\x07"
    assert out[16:33] == body[16:33] and out[35:] == body[35:]
    msg = decode_node_message(out)
    assert (msg.sender, msg.ttl, msg.topic, msg.payload_bytes) == (B, 7, "/x/y", payload)
    assert with_sender_and_ttl(bytearray(body), B, 7) == out
    assert with_sender_and_ttl(memoryview(body), B, 7) == out


def test_forwarding_errors() -> None:
    body = encode_node_message(A, B, MSG_DATA, 16, "/t", b"")
    with pytest.raises(DecodeError):
        with_sender_and_ttl(body[:36], B, 1)
    with pytest.raises(EncodeError):
        with_sender_and_ttl(body, B[:4], 1)
    with pytest.raises(EncodeError):
        with_sender_and_ttl(body, B, 1 << 16)


def test_bye_token_shape() -> None:
    assert bye_token(0) == b"BYE" + bytes(8)
    assert bye_token(1) == b"BYE\x01" + bytes(7)
    assert is_bye_token(memoryview(bye_token(99)))
    assert not is_bye_token(b"BYE")
    assert not is_bye_token(b"BYX" + bytes(8))
    assert not is_bye_token(b"hello world")


@given(
    st.binary(min_size=16, max_size=16),
    st.binary(min_size=16, max_size=16),
    st.integers(1, 5),
    st.integers(0, 0xFFFF),
    st.text(max_size=50),
    st.binary(max_size=100),
)
@settings(max_examples=100, deadline=None)
def test_envelope_roundtrip(
    sender: bytes, receiver: bytes, kind: int, ttl: int, topic: str, payload: bytes
) -> None:
    body = encode_node_message(sender, receiver, kind, ttl, topic, payload)
    msg = decode_node_message(body)
    assert (msg.sender, msg.receiver, msg.msg_type, msg.ttl, msg.topic) == (
        sender,
        receiver,
        kind,
        ttl,
        topic,
    )
    assert msg.payload == payload
    assert msg.is_broadcast == (receiver == BROADCAST)


# -- garbage -----------------------------------------------------------------------------


@given(st.binary(max_size=80))
@settings(max_examples=300, deadline=None)
def test_garbage_raises_only_our_errors(data: bytes) -> None:
    for decode in (decode_handshake, decode_node_message, decode_filter):
        with contextlib.suppress(DecodeError, ProtocolError):
            decode(data)


@given(st.sampled_from(sorted(HANDSHAKE_EXAMPLES)), st.binary(max_size=8), st.integers(0, 40))
@settings(max_examples=200, deadline=None)
def test_mutated_handshake_messages_raise_only_our_errors(
    label: str, noise: bytes, at: int
) -> None:
    body = bytearray(h(DOC_EXAMPLES[label]))
    at %= len(body) + 1
    body[at : at + len(noise)] = noise
    try:
        msg = decode_handshake(bytes(body))
    except (DecodeError, ProtocolError):
        return
    assert decode_handshake(encode_handshake(msg)) == msg


@given(
    st.sampled_from(["data", "routing_update", "ping", "pong"]),
    st.binary(max_size=8),
    st.integers(0, 120),
)
@settings(max_examples=200, deadline=None)
def test_mutated_envelopes_raise_only_decode_errors(label: str, noise: bytes, at: int) -> None:
    body = bytearray(h(DOC_EXAMPLES[label]))
    at %= len(body) + 1
    body[at : at + len(noise)] = noise
    try:
        msg = decode_node_message(bytes(body))
    except DecodeError:
        return
    again = encode_node_message(
        msg.sender, msg.receiver, msg.msg_type, msg.ttl, msg.topic, msg.payload
    )
    assert again == bytes(body)


# -- the recorded sessions ------------------------------------------------------------


TYPES = "/types"
MASTER = "kv/<$>/data/master"
CLONE = "kv/<$>/data/clone"
BCAST = "*"
# file -> (handshake messages, node messages as (type, topic, receiver, first payload byte
# or, for commands, the command variant index)). Receiver "*" is a broadcast.
RECORDED = {
    "broker-v1-session.c2s.bin": (
        [Hello(A, 1, 1), VersionSelect(A, 1), OriginatorSyn(()), OriginatorAck()],
        [(MSG_DATA, "/test/pipe", BCAST, 0x05), (MSG_PONG, PING_TOPIC, B, ord("B"))],
    ),
    "broker-v1-session.s2c.bin": (
        [Probe(), Hello(B, 1, 1), ResponderSynAck(("/test/pipe",))],
        [(MSG_PING, PING_TOPIC, A, ord("B"))],
    ),
    "broker-v1-types-and-store.c2s.bin": (
        [Hello(C, 1, 1), VersionSelect(C, 1), OriginatorSyn(("/reply",)), OriginatorAck()],
        [
            (MSG_DATA, TYPES, BCAST, 0x0E),
            (MSG_ROUTING_UPDATE, PING_TOPIC, D, 0x02),
            (MSG_COMMAND, MASTER, BCAST, 11),  # nack 0: ask the master for a handshake
            (MSG_COMMAND, MASTER, D, 10),  # cumulative_ack
            (MSG_COMMAND, MASTER, BCAST, 8),  # attach_writer
            (MSG_COMMAND, MASTER, BCAST, 0),  # put "a"
            (MSG_COMMAND, MASTER, BCAST, 5),  # add "n"
            (MSG_COMMAND, MASTER, BCAST, 0),  # put "e" with expiry
            (MSG_COMMAND, MASTER, D, 10),
            (MSG_COMMAND, MASTER, BCAST, 9),  # keepalive
            (MSG_COMMAND, MASTER, D, 10),
            (MSG_COMMAND, MASTER, BCAST, 9),
            (MSG_PING, PING_TOPIC, D, ord("B")),
        ],
    ),
    "broker-v1-types-and-store.s2c.bin": (
        [Probe(), Hello(D, 1, 1), ResponderSynAck((TYPES, MASTER))],
        [
            (MSG_DATA, "/reply", BCAST, 0x0E),
            (MSG_COMMAND, CLONE, C, 12),  # ack_clone
            (MSG_COMMAND, CLONE, C, 10),
            (MSG_COMMAND, CLONE, BCAST, 0),
            (MSG_COMMAND, CLONE, BCAST, 0),  # the add, broadcast as a put
            (MSG_COMMAND, CLONE, BCAST, 0),
            (MSG_COMMAND, CLONE, C, 10),
            (MSG_COMMAND, CLONE, BCAST, 9),
            (MSG_COMMAND, CLONE, C, 10),
            (MSG_COMMAND, CLONE, BCAST, 9),
            (MSG_COMMAND, CLONE, C, 10),
            (MSG_PONG, PING_TOPIC, C, ord("B")),
        ],
    ),
}


def recorded_frames(name: str) -> list[bytes]:
    return FrameDecoder(max_frame_size=4096).feed((VECTORS / name).read_bytes())


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_recorded_session_every_frame(name: str) -> None:
    handshake, envelopes = RECORDED[name]
    frames = recorded_frames(name)
    assert len(frames) == len(handshake) + len(envelopes)
    for body, expected in zip(frames[: len(handshake)], handshake, strict=True):
        assert decode_handshake(body) == expected
        assert encode_handshake(expected) == body
    for body, (kind, topic, receiver, marker) in zip(
        frames[len(handshake) :], envelopes, strict=True
    ):
        msg = decode_node_message(body)
        assert msg.msg_type == kind and msg.topic == topic and msg.ttl == DEFAULT_TTL
        assert msg.sender in (A, B, C, D)
        if receiver == BCAST:
            assert msg.is_broadcast and msg.receiver == BROADCAST
        else:
            assert msg.receiver == receiver and not msg.is_broadcast
        payload = msg.payload_bytes
        if kind == MSG_COMMAND:
            # u64 seq, sender entity (id + u64), receiver entity, variant index.
            assert payload[8:24] == msg.sender
            if not msg.is_broadcast:
                assert payload[32:48] == msg.receiver
            assert payload[56] == marker
        else:
            assert payload[0] == marker
        # Every envelope re-encodes identically from its decoded fields.
        assert (
            encode_node_message(msg.sender, msg.receiver, kind, msg.ttl, msg.topic, msg.payload)
            == body
        )
        # Forwarding by the same sender with the same TTL is the identity.
        assert with_sender_and_ttl(body, msg.sender, msg.ttl) == body


def test_recorded_goodbye_and_routing_update_rebuilt_from_fields() -> None:
    token = bye_token(BYE_ID)
    c2s = recorded_frames("broker-v1-session.c2s.bin")
    s2c = recorded_frames("broker-v1-session.s2c.bin")
    assert s2c[-1] == encode_ping(B, A, token)
    assert c2s[-1] == encode_pong_for(decode_node_message(s2c[-1]), A)
    assert c2s[-2] == encode_node_message(A, BROADCAST, MSG_DATA, 16, "/test/pipe", DATA_PAYLOAD)

    c2s = recorded_frames("broker-v1-types-and-store.c2s.bin")
    s2c = recorded_frames("broker-v1-types-and-store.s2c.bin")
    assert c2s[-1] == encode_ping(C, D, token)
    assert s2c[-1] == encode_pong_for(decode_node_message(c2s[-1]), D)
    assert c2s[9] == h(DOC_EXAMPLES["command"])  # the doc's command example, as recorded
    update = decode_node_message(c2s[5])
    assert decode_filter(update.payload) == ("/reply", CLONE)
    assert c2s[5] == encode_routing_update(C, D, ["/reply", CLONE])


def test_recorded_command_sequence_numbers() -> None:
    """The writer's commands count up from the handshake: proves the payload boundaries."""
    seqs = [
        struct.unpack_from(">Q", decode_node_message(b).payload, 0)[0]
        for b in recorded_frames("broker-v1-types-and-store.c2s.bin")[4:]
        if decode_node_message(b).msg_type == MSG_COMMAND
    ]
    assert seqs == [0, 0, 0, 2, 3, 4, 0, 0, 0, 0]
