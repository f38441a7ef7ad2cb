"""Store commands against Broker's recorded bytes, round trips, and hostile input."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recorded import VECTORS

from broker_spark.data.types import Count, DataType, Timespan
from broker_spark.errors import DecodeError, EncodeError
from broker_spark.store.commands import (
    NIL,
    AckCloneCommand,
    AddCommand,
    AttachWriterCommand,
    ClearCommand,
    CumulativeAckCommand,
    EntityId,
    EraseCommand,
    ExpireCommand,
    InternalCommand,
    KeepaliveCommand,
    NackCommand,
    PutCommand,
    PutUniqueCommand,
    PutUniqueResultCommand,
    RetransmitFailedCommand,
    SubtractCommand,
    clone_topic,
    decode_command,
    encode_command,
    master_topic,
    unicast_target,
    with_publisher,
)

CLONE = EntityId(bytes.fromhex("3169cf5839ef5d9cb880c909a280dce4"), 8)
MASTER = EntityId(bytes.fromhex("da5de73efaa650a7ac2a16fb92f55afd"), 6)


def _frames(path: Path) -> list[bytes]:
    data = path.read_bytes()
    out, pos = [], 0
    while pos < len(data):
        (size,) = struct.unpack_from(">I", data, pos)
        out.append(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return out


def _store_envelopes(direction: str) -> list[tuple[bytes, str, bytes]]:
    """(envelope receiver, topic, command payload) of every command envelope in one file."""
    out = []
    for body in _frames(VECTORS / f"broker-v1-types-and-store.{direction}.bin"):
        if 6 <= body[0] <= 12 and len(body) < 64 and body[1:5] == b"ZEEK":
            continue  # hello, probe, version_select
        if body[0] in (10, 11, 12) and len(body) < 37:
            continue  # originator_syn, responder_syn_ack, originator_ack
        if body[32] != 2:
            continue
        (topic_len,) = struct.unpack_from(">H", body, 35)
        topic = body[37 : 37 + topic_len].decode()
        out.append((body[16:32], topic, body[37 + topic_len :]))
    return out


@pytest.mark.parametrize("direction", ["c2s", "s2c"])
def test_every_recorded_command_decodes_and_reencodes_byte_for_byte(direction: str) -> None:
    envelopes = _store_envelopes(direction)
    assert len(envelopes) == 10
    for _, topic, payload in envelopes:
        assert topic in (master_topic("kv"), clone_topic("kv"))
        cmd = decode_command(payload)
        assert encode_command(cmd) == payload


def test_recorded_clone_to_master_session() -> None:
    cmds = [decode_command(p) for _, _, p in _store_envelopes("c2s")]
    assert [type(c.content) for c in cmds] == [
        NackCommand,
        CumulativeAckCommand,
        AttachWriterCommand,
        PutCommand,
        AddCommand,
        PutCommand,
        CumulativeAckCommand,
        KeepaliveCommand,
        CumulativeAckCommand,
        KeepaliveCommand,
    ]
    assert all(c.sender == CLONE for c in cmds)
    hello = cmds[0]
    assert hello == InternalCommand(0, CLONE, NIL, NackCommand((0,)))
    assert cmds[1] == InternalCommand(0, CLONE, MASTER, CumulativeAckCommand(1))
    assert cmds[2] == InternalCommand(0, CLONE, MASTER, AttachWriterCommand(1, 5))
    assert cmds[3] == InternalCommand(2, CLONE, MASTER, PutCommand("a", 1, None, CLONE))
    add = cmds[4]
    assert add.seq == 3 and add.content == AddCommand("n", 5, DataType.Integer, None, CLONE)
    assert type(add.content.value) is int
    assert cmds[5] == InternalCommand(4, CLONE, MASTER, PutCommand("e", "x", 60 * 10**9, CLONE))
    assert cmds[7] == InternalCommand(0, CLONE, NIL, KeepaliveCommand(4))


def test_recorded_master_to_clone_session() -> None:
    cmds = [decode_command(p) for _, _, p in _store_envelopes("s2c")]
    assert cmds[0] == InternalCommand(1, MASTER, CLONE, AckCloneCommand(1, 5, ()))
    assert cmds[1] == InternalCommand(0, MASTER, CLONE, CumulativeAckCommand(1))
    # The master turned the clone's add into a plain put and kept the publisher.
    assert [c.content for c in cmds[2:5]] == [
        PutCommand("a", 1, None, CLONE),
        PutCommand("n", 5, None, CLONE),
        PutCommand("e", "x", 60 * 10**9, CLONE),
    ]
    assert [c.seq for c in cmds[2:5]] == [2, 3, 4]
    assert all(c.receiver == NIL for c in cmds[2:5])
    assert cmds[5] == InternalCommand(0, MASTER, CLONE, CumulativeAckCommand(4))
    assert cmds[6] == InternalCommand(0, MASTER, NIL, KeepaliveCommand(4))


@pytest.mark.parametrize("direction", ["c2s", "s2c"])
def test_unicast_target_matches_brokers_envelope_receivers(direction: str) -> None:
    for receiver, topic, payload in _store_envelopes(direction):
        expected = None if receiver == bytes(16) else receiver
        assert unicast_target(topic, decode_command(payload)) == expected


def test_known_bytes_of_a_put_with_expiry() -> None:
    cmd = InternalCommand(4, CLONE, MASTER, PutCommand("e", "x", 60 * 10**9, CLONE))
    raw = encode_command(cmd)
    assert raw.hex() == (
        "0000000000000004"
        "3169cf5839ef5d9cb880c909a280dce40000000000000008"
        "da5de73efaa650a7ac2a16fb92f55afd0000000000000006"
        "00" + "050165" + "050178" + "01" + "0000000df8475800"
        "3169cf5839ef5d9cb880c909a280dce40000000000000008"
    )


# -- round trips -------------------------------------------------------------------

entities = st.builds(
    EntityId, st.binary(min_size=16, max_size=16), st.integers(0, 2**64 - 1)
) | st.just(NIL)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(0, 2**64 - 1).map(Count),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.integers(-(2**63), 2**63 - 1).map(Timespan.from_ns),
)
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=4).map(tuple)
        | st.frozensets(st.integers(-5, 5) | st.text(max_size=3), max_size=4).map(set)
        | st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=8,
)
u64 = st.integers(0, 2**64 - 1)
expiries = st.none() | st.integers(-(2**63), 2**63 - 1)
contents = st.one_of(
    st.builds(PutCommand, values, values, expiries, entities),
    st.builds(PutUniqueCommand, values, values, expiries, entities, u64, entities),
    st.builds(PutUniqueResultCommand, st.booleans(), entities, u64, entities),
    st.builds(EraseCommand, values, entities),
    st.builds(ExpireCommand, values, entities),
    st.builds(AddCommand, values, values, st.sampled_from(DataType), expiries, entities),
    st.builds(SubtractCommand, values, values, expiries, entities),
    st.builds(ClearCommand, entities),
    st.builds(AttachWriterCommand, u64, st.integers(0, 0xFFFF)),
    st.builds(KeepaliveCommand, u64),
    st.builds(CumulativeAckCommand, u64),
    st.builds(NackCommand, st.lists(u64, max_size=5).map(tuple)),
    st.builds(
        AckCloneCommand,
        u64,
        st.integers(0, 0xFFFF),
        st.lists(st.tuples(values, values), max_size=4).map(tuple),
    ),
    st.builds(RetransmitFailedCommand, u64),
)
commands = st.builds(InternalCommand, u64, entities, entities, contents)


@settings(max_examples=150, deadline=None)
@given(commands)
def test_round_trip(cmd: InternalCommand) -> None:
    raw = encode_command(cmd)
    back = decode_command(raw)
    assert encode_command(back) == raw
    assert type(back.content) is type(cmd.content)
    assert (back.seq, back.sender, back.receiver) == (cmd.seq, cmd.sender, cmd.receiver)


@settings(max_examples=60, deadline=None)
@given(commands, st.data())
def test_every_truncation_is_a_decode_error(cmd: InternalCommand, data: st.DataObject) -> None:
    raw = encode_command(cmd)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(DecodeError):
        decode_command(raw[:cut])


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=120))
def test_garbage_is_a_decode_error_or_a_command(raw: bytes) -> None:
    try:
        cmd = decode_command(raw)
    except DecodeError:
        return
    again = encode_command(cmd)  # canonical: equal to raw unless a set or table was unordered
    assert encode_command(decode_command(again)) == again


def _header(index: int) -> bytes:
    return bytes(8) + bytes(24) + bytes(24) + bytes([index])


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (_header(14), "unknown variant index 14"),
        (_header(2) + b"\x02" + bytes(24 + 8 + 24), "boolean 2"),
        (_header(0) + b"\x05\x01a\x00\x07" + bytes(24), "optional flag 7"),
        (_header(5) + b"\x00\x00\x0f", "init_type 15"),
        (_header(9) + bytes(8) + b"\x00", "trailing bytes"),
        (_header(11) + b"\xff\xff\xff\x0f", "exceeds"),
        (_header(11) + b"\x10" + bytes(8), "only 8 bytes remain"),
        (_header(12) + bytes(10) + b"\xff\xff\xff\x07", "snapshot"),
        (_header(0) + b"\x63", "bad key"),
    ],
)
def test_malformed_commands_name_the_problem(raw: bytes, fragment: str) -> None:
    with pytest.raises(DecodeError, match=fragment):
        decode_command(raw)


@pytest.mark.parametrize(
    "cmd",
    [
        InternalCommand(-1, NIL, NIL, ClearCommand(NIL)),
        InternalCommand(0, NIL, NIL, AttachWriterCommand(0, 70000)),
        InternalCommand(0, NIL, NIL, NackCommand((2**64,))),
        InternalCommand(0, NIL, NIL, PutCommand("k", 1, 2**63, NIL)),
        InternalCommand(0, NIL, NIL, "not a command"),  # type: ignore[arg-type]
    ],
)
def test_unencodable_commands_raise_encode_error(cmd: InternalCommand) -> None:
    with pytest.raises(EncodeError):
        encode_command(cmd)


def test_entity_ids() -> None:
    assert not NIL and bool(MASTER)
    assert MASTER.endpoint_string() == "da5de73e-faa6-50a7-ac2a-16fb92f55afd"
    with pytest.raises(ValueError):
        EntityId(b"short", 1)
    with pytest.raises(ValueError):
        EntityId(bytes(16), -1)


def test_with_publisher_fills_only_a_nil_publisher() -> None:
    cmd = PutCommand("k", 1, None, NIL)
    assert with_publisher(cmd, CLONE).publisher == CLONE
    mine = PutCommand("k", 1, None, MASTER)
    assert with_publisher(mine, CLONE) is mine


DOC = Path(__file__).resolve().parent.parent / "docs" / "stores.md"


def _doc_examples() -> list[tuple[str, bytes]]:
    out, inside = [], False
    for line in DOC.read_text().splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```hex"
            continue
        if inside and ":" in line:
            label, hexes = line.split(":", 1)
            out.append((label, bytes.fromhex(hexes.replace(" ", ""))))
    return out


def test_the_hex_examples_in_the_docs_are_exact() -> None:
    examples = _doc_examples()
    assert len(examples) == 15
    recorded = {p for d in ("c2s", "s2c") for _, _, p in _store_envelopes(d)}
    for label, raw in examples:
        assert encode_command(decode_command(raw)) == raw, label
        assert raw in recorded, f"{label} is not from the recording"
