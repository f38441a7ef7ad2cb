"""The envelope reader: frames with learned headers become messages, everything else stays.

The reader is a cache in front of the link's parser, so its one promise is
that it never changes an outcome: for any stream, cut into any chunks, the
items it returns are what parsing every body the slow way would give, in the
same order, and bad framing fails exactly as the plain frame decoder does.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_spark.errors import DecodeError
from broker_spark.protocol.envelope_reader import CACHE_SIZE, EnvelopeReader
from broker_spark.protocol.framing import FrameDecoder, encode_frames

SENDER = b"S" * 16
RECEIVER = bytes(16)
PUBLISHER = b"P" * 16


def v1_header(topic: bytes, kind: int = 1, ttl: int = 16) -> bytes:
    return SENDER + RECEIVER + struct.pack(">BHH", kind, ttl, len(topic)) + topic


def v2_header(topic: bytes, multipath: bytes, ttl: int = 16) -> bytes:
    head = SENDER + RECEIVER + struct.pack(">BHH", 0x10, ttl, len(topic)) + topic
    return head + PUBLISHER + bytes([len(multipath)]) + multipath


class Entry:
    """An opaque relay entry, as a version 2 hop would learn one."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Entry({self.name})"


KNOWN_V1 = v1_header(b"/a/topic")
KNOWN_V2 = v2_header(b"/b", b"R" * 16 + b"\x01\x00")
RELAY = v2_header(b"/c", b"M" * 16 + b"\x00\x01" + b"R" * 16 + b"\x01\x00")
UNKNOWN = v1_header(b"/a/other")
FIELDS = {
    KNOWN_V1: ("/a/topic", 1, 16, SENDER),
    KNOWN_V2: ("/b", 1, 16, PUBLISHER),
    RELAY: Entry("relay"),
}


def learned(max_frame_size: int = 1 << 20) -> EnvelopeReader:
    reader = EnvelopeReader(max_frame_size)
    for head, fields in FIELDS.items():
        reader.learn(head, fields)
    return reader


def expected(bodies: list[bytes]) -> list:
    """What the slow path makes of ``bodies``: one item per frame."""
    out: list = []
    for body in bodies:
        for head, fields in FIELDS.items():
            if body.startswith(head):
                payload = body[len(head) :]
                if isinstance(fields, tuple):
                    out.append((fields[0], payload, fields[1], fields[2], fields[3]))
                else:
                    out.append((fields, payload))
                break
        else:
            out.append(body)
    return out


def flatten(items: list) -> list:
    """One item per frame: ``(entry, [p1, p2])`` runs become ``(entry, p1), (entry, p2)``."""
    out: list = []
    for item in items:
        if isinstance(item, tuple) and len(item) == 2:
            out.extend((item[0], p) for p in item[1])
        else:
            out.append(item)
    return out


def feed_all(reader: EnvelopeReader, stream: bytes, cuts: list[int]) -> list:
    items: list = []
    bounds = [0, *sorted(c % (len(stream) + 1) for c in cuts), len(stream)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        got, raw = reader.feed_messages(stream[a:b])
        assert raw == sum(1 for x in got if not (isinstance(x, tuple) and len(x) == 5))
        items += got
    return items


bodies_st = st.lists(
    st.tuples(
        st.sampled_from([KNOWN_V1, KNOWN_V2, RELAY, UNKNOWN, b"", b"\x00" * 40]),
        st.binary(max_size=12),
    ).map(lambda t: t[0] + t[1]),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(bodies=bodies_st, cuts=st.lists(st.integers(min_value=0), max_size=8))
def test_any_chunking_gives_the_slow_path_outcome(bodies: list[bytes], cuts: list[int]) -> None:
    stream = encode_frames(bodies)
    assert flatten(feed_all(learned(), stream, cuts)) == expected(bodies)
    # Nothing learned: exactly the plain frame decoder.
    assert feed_all(EnvelopeReader(1 << 20), stream, cuts) == FrameDecoder().feed(stream)


def test_runs_of_one_relay_entry_share_a_pair() -> None:
    bodies = [RELAY + b"1", RELAY + b"2", KNOWN_V1 + b"x", RELAY + b"3"]
    items, raw = learned().feed_messages(encode_frames(bodies))
    entry = FIELDS[RELAY]
    assert items == [
        (entry, [b"1", b"2"]),
        ("/a/topic", b"x", 1, 16, SENDER),
        (entry, [b"3"]),
    ]
    assert raw == 2


def test_a_frame_shorter_than_a_known_header_is_not_matched() -> None:
    body = KNOWN_V1[:-1]  # the same bytes, one short: a different (truncated) envelope
    items, raw = learned().feed_messages(encode_frames([KNOWN_V1 + b"p", body]))
    assert items == [("/a/topic", b"p", 1, 16, SENDER), body] and raw == 1


def test_oversized_frames_fail_as_in_the_frame_decoder() -> None:
    reader = learned(max_frame_size=64)
    ok = encode_frames([KNOWN_V1 + b"p"])
    with pytest.raises(DecodeError, match="exceeds the maximum of 64 bytes"):
        reader.feed_messages(ok + struct.pack(">I", 65) + KNOWN_V1 + bytes(65 - len(KNOWN_V1)))
    with pytest.raises(DecodeError):
        reader.feed_messages(ok)  # the stream stays failed
    assert reader.failed


def test_relearning_a_header_replaces_what_it_means() -> None:
    reader = learned()
    body = encode_frames([RELAY + b"1"])
    assert reader.feed_messages(body)[0] == [(FIELDS[RELAY], [b"1"])]  # now the last hit
    newer = Entry("newer")
    reader.learn(RELAY, newer)
    assert reader.feed_messages(body)[0] == [(newer, [b"1"])]
    reader.forget()
    assert reader.feed_messages(body) == ([RELAY + b"1"], 1)


def test_the_cache_stays_bounded() -> None:
    reader = EnvelopeReader(1 << 20)
    for i in range(CACHE_SIZE * 2 + 5):
        reader.learn(v1_header(b"/t/%d" % i), (f"/t/{i}", 1, 16, SENDER))
    assert len(reader._known) <= CACHE_SIZE
    # The newest header still works.
    last = v1_header(b"/t/%d" % (CACHE_SIZE * 2 + 4))
    items, raw = reader.feed_messages(encode_frames([last + b"p"]))
    assert raw == 0 and items[0][:2] == (f"/t/{CACHE_SIZE * 2 + 4}", b"p")
