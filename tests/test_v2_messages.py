"""Version 2 message encodings: the documented examples, round trips, and a fuzzed decoder."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_spark.errors import DecodeError, EncodeError
from broker_spark.protocol.multipath import Multipath
from broker_spark.protocol.v2_messages import (
    COMMAND_V2,
    DATA_V2,
    HEADER_SIZE,
    MAX_PATH_LEN,
    REVOCATION,
    SUBSCRIPTION,
    PathRevocation,
    RoutedMessage,
    SubscriptionUpdate,
    decode_v2,
    encode_v2,
    encode_v2_parts,
    is_v2_body,
)

A = b"\xaa" * 16
B = b"\xbb" * 16
C = b"\xcc" * 16
HI = bytes.fromhex("05026869")  # the value: string "hi"
MP_B_C = Multipath(B, False, (Multipath(C, True),)).encode()
MP_C = Multipath(C, True).encode()

DOC = Path(__file__).resolve().parent.parent / "docs" / "protocol-v2.md"

#: name in docs/protocol-v2.md -> (sender, receiver, message)
EXAMPLES = {
    "subscription-from-origin": (A, B, SubscriptionUpdate((A,), (1,), ("/zeek",))),
    "subscription-forwarded": (B, C, SubscriptionUpdate((A, B), (1, 2), ("/zeek",))),
    "revocation": (B, A, PathRevocation(B, 3, C, (A,))),
    "data-from-publisher": (A, B, RoutedMessage(DATA_V2, 16, "/zeek/x", A, MP_B_C, HI)),
    "data-forwarded": (B, C, RoutedMessage(DATA_V2, 15, "/zeek/x", A, MP_C, HI)),
}


def doc_examples() -> dict[str, bytes]:
    """The ``example NAME`` code blocks of the doc, first token of each line joined as hex."""
    out = {}
    for block in re.findall(r"```\n(example [^\n]+\n.*?)```", DOC.read_text(), re.S):
        head, *lines = block.strip().splitlines()
        out[head.split()[1]] = bytes.fromhex("".join(line.split()[0] for line in lines))
    return out


def test_doc_lists_every_example() -> None:
    assert set(doc_examples()) == set(EXAMPLES) | {"multipath"}


def test_doc_multipath_example() -> None:
    assert doc_examples()["multipath"] == MP_B_C
    assert Multipath.decode(MP_B_C) == Multipath(B, False, (Multipath(C, True),))


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_doc_examples_encode_and_decode(name: str) -> None:
    sender, receiver, msg = EXAMPLES[name]
    expected = doc_examples()[name]
    assert encode_v2(sender, receiver, msg) == expected
    assert decode_v2(expected) == (sender, receiver, msg)
    assert is_v2_body(expected)


def test_forwarded_example_keeps_payload_and_header_parts() -> None:
    sender, receiver, msg = EXAMPLES["data-forwarded"]
    header, payload = encode_v2_parts(sender, receiver, msg)
    assert payload is msg.payload
    assert header + payload == doc_examples()["data-forwarded"]


def test_v1_envelopes_are_not_v2() -> None:
    for v1_type in range(1, 6):
        assert not is_v2_body(A + B + bytes((v1_type,)) + b"\x00\x10\x00\x00")
    assert not is_v2_body(A + B)


# -- strategies ----------------------------------------------------------------

ids = st.binary(min_size=16, max_size=16)
u64 = st.integers(0, (1 << 64) - 1)
prefixes = st.lists(st.text(max_size=12), max_size=4).map(tuple)


@st.composite
def subscriptions(draw: st.DrawFn) -> SubscriptionUpdate:
    path = draw(st.lists(ids, min_size=1, max_size=8, unique=True))
    stamps = draw(st.lists(u64, min_size=len(path), max_size=len(path)))
    return SubscriptionUpdate(tuple(path), tuple(stamps), draw(prefixes))


revocations = st.builds(PathRevocation, ids, u64, ids, st.lists(ids, max_size=5).map(tuple))
routed = st.builds(
    RoutedMessage,
    st.sampled_from((DATA_V2, COMMAND_V2)),
    st.integers(0, 0xFFFF),
    st.text(max_size=20),
    ids,
    st.binary(max_size=60),
    st.binary(max_size=60),
)
messages = st.one_of(subscriptions(), revocations, routed)


@given(ids, ids, messages)
def test_round_trip(sender: bytes, receiver: bytes, msg) -> None:
    body = encode_v2(sender, receiver, msg)
    assert body[:32] == sender + receiver
    assert is_v2_body(body)
    assert decode_v2(body) == (sender, receiver, msg)
    assert decode_v2(memoryview(body)) == (sender, receiver, msg)


@given(ids, ids, st.one_of(subscriptions(), revocations))
def test_every_truncation_is_a_decode_error(sender: bytes, receiver: bytes, msg) -> None:
    body = encode_v2(sender, receiver, msg)
    for cut in range(len(body)):
        with pytest.raises(DecodeError):
            decode_v2(body[:cut])
    with pytest.raises(DecodeError):
        decode_v2(body + b"\x00")


def _decode_or_decode_error(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode_v2(data)


@settings(max_examples=200)
@given(st.binary(max_size=120))
def test_fuzz_random_bytes(data: bytes) -> None:
    _decode_or_decode_error(data)


@settings(max_examples=150)
@given(
    ids,
    ids,
    messages,
    st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, 400),
)
def test_fuzz_mutated_messages(sender, receiver, msg, flips, cut) -> None:
    body = bytearray(encode_v2(sender, receiver, msg))
    for where, value in flips:
        body[where % len(body)] = value
    _decode_or_decode_error(bytes(body))
    _decode_or_decode_error(bytes(body[:cut]))


@pytest.mark.parametrize("kind", [SUBSCRIPTION, REVOCATION, DATA_V2, COMMAND_V2])
def test_prefix_of_each_type_with_huge_counts(kind: int) -> None:
    # A count announcing far more than follows must fail fast, not allocate.
    body = A + B + bytes((kind,)) + b"\xff\xff\xff\xff\x0f" + b"\x00" * 40
    with pytest.raises(DecodeError):
        decode_v2(body)


def test_decode_errors_name_the_problem() -> None:
    with pytest.raises(DecodeError, match="unknown v2 message type 0x14"):
        decode_v2(A + B + b"\x14")
    with pytest.raises(DecodeError, match="header needs"):
        decode_v2(A + B)
    zero_hops = A + B + bytes((SUBSCRIPTION,)) + b"\x00\x00"
    with pytest.raises(DecodeError, match="1..255"):
        decode_v2(zero_hops)
    bad_topic = A + B + bytes((DATA_V2,)) + b"\x00\x10\x00\x01\xff" + A + b"\x00"
    with pytest.raises(DecodeError, match="UTF-8"):
        decode_v2(bad_topic)


def test_longest_path_round_trips_and_longer_is_refused() -> None:
    path = tuple(i.to_bytes(16, "big") for i in range(MAX_PATH_LEN))
    msg = SubscriptionUpdate(path, (7,) * MAX_PATH_LEN, ())
    assert decode_v2(encode_v2(A, B, msg))[2] == msg
    with pytest.raises(EncodeError):
        encode_v2(A, B, SubscriptionUpdate((*path, A), (7,) * (MAX_PATH_LEN + 1), ()))


@pytest.mark.parametrize(
    ("sender", "receiver", "msg"),
    [
        (b"short", B, PathRevocation(A, 1, B)),
        (A, B, SubscriptionUpdate((), (), ())),
        (A, B, SubscriptionUpdate((A,), (1, 2), ())),
        (A, B, SubscriptionUpdate((A,), (-1,), ())),
        (A, B, SubscriptionUpdate((b"x",), (1,), ())),
        (A, B, PathRevocation(A, 1 << 64, B)),
        (A, B, PathRevocation(A, 1, B, (b"x",))),
        (A, B, RoutedMessage(DATA_V2, 1 << 16, "/t", A, b"", b"")),
        (A, B, RoutedMessage(0x05, 16, "/t", A, b"", b"")),
        (A, B, RoutedMessage(DATA_V2, 16, "x" * 70000, A, b"", b"")),
        (A, B, "not a message"),
    ],
)
def test_encode_rejects_bad_fields(sender, receiver, msg) -> None:
    with pytest.raises(EncodeError):
        encode_v2(sender, receiver, msg)


def test_header_size_matches_v1_prefix() -> None:
    assert HEADER_SIZE == 33
    body = encode_v2(A, B, PathRevocation(A, 1, B))
    assert body[32] == REVOCATION
