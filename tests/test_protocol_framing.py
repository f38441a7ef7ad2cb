"""Length-prefixed framing: chunking, limits, batching, and the recorded sessions."""

from __future__ import annotations

import random
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recorded import VECTORS

from broker_spark.errors import DecodeError
from broker_spark.protocol.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameDecoder,
    encode_frame,
    encode_frames,
)

VECTOR_FILES = [
    "broker-v1-session.c2s.bin",
    "broker-v1-session.s2c.bin",
    "broker-v1-types-and-store.c2s.bin",
    "broker-v1-types-and-store.s2c.bin",
]
# Frames per recorded file (handshake frames plus node messages).
VECTOR_FRAME_COUNTS = [6, 4, 17, 15]


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    """Split ``data`` at the given (unsorted, possibly repeated) offsets."""
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in pairwise(points)] or [b""]


# -- encoding -------------------------------------------------------------------


def test_encode_frame_prefixes_big_endian_length() -> None:
    assert encode_frame(b"\x0c") == bytes.fromhex("00000001 0c")
    assert encode_frame(bytes.fromhex("075a45454b")) == bytes.fromhex("00000005 075a45454b")
    assert encode_frame(b"") == bytes(4)
    assert encode_frame(b"x" * 300) == b"\x00\x00\x01\x2c" + b"x" * 300


def test_encode_frame_accepts_bytes_like() -> None:
    assert encode_frame(bytearray(b"ab")) == b"\x00\x00\x00\x02ab"
    assert encode_frame(memoryview(b"abc")[1:]) == b"\x00\x00\x00\x02bc"


def test_encode_frames_concatenates_frames() -> None:
    bodies = [b"a", b"", b"bcd", bytearray(b"ef")]
    assert encode_frames(bodies) == b"".join(encode_frame(b) for b in bodies)
    assert encode_frames([]) == b""
    assert encode_frames(iter([b"x"])) == b"\x00\x00\x00\x01x"


# -- decoding -------------------------------------------------------------------


def test_feed_whole_stream_returns_all_bodies() -> None:
    bodies = [b"hello", b"", b"\x00" * 70, b"z"]
    dec = FrameDecoder()
    assert dec.feed(encode_frames(bodies)) == bodies
    assert dec.pending == 0


def test_feed_returns_bytes_for_every_input_type() -> None:
    stream = encode_frames([b"abc", b"de"])
    for make in (bytes, bytearray, memoryview):
        out = FrameDecoder().feed(make(stream))
        assert out == [b"abc", b"de"]
        assert all(type(b) is bytes for b in out)


def test_feed_byte_by_byte() -> None:
    bodies = [bytes([i]) * i for i in range(20)]
    stream = encode_frames(bodies)
    dec = FrameDecoder()
    out: list[bytes] = []
    for i in range(len(stream)):
        got = dec.feed(stream[i : i + 1])
        out += got
        assert all(type(b) is bytes for b in got)
    assert out == bodies
    assert dec.pending == 0


def test_partial_frame_is_kept_and_counted() -> None:
    dec = FrameDecoder()
    assert dec.feed(b"\x00\x00") == []
    assert dec.pending == 2
    assert dec.feed(b"\x00\x03ab") == []
    assert dec.pending == 6
    assert dec.feed(b"c\x00\x00") == [b"abc"]
    assert dec.pending == 2
    assert dec.feed(b"\x00\x01Q\x00\x00\x00\x00") == [b"Q", b""]
    assert dec.pending == 0


def test_empty_feed_is_harmless() -> None:
    dec = FrameDecoder()
    assert dec.feed(b"") == []
    dec.feed(b"\x00")
    assert dec.feed(b"") == []
    assert dec.feed(b"\x00\x00\x01!") == [b"!"]


def test_large_body_in_tiny_chunks() -> None:
    body = bytes(random.Random(1).randbytes(65536))
    stream = encode_frame(body) + encode_frame(b"tail")
    dec = FrameDecoder()
    out: list[bytes] = []
    for i in range(0, len(stream), 7):
        out += dec.feed(stream[i : i + 7])
    assert out == [body, b"tail"]


def test_many_small_frames_in_one_feed() -> None:
    bodies = [i.to_bytes(3, "big") for i in range(100_000)]
    stream = encode_frames(bodies)
    dec = FrameDecoder()
    assert dec.feed(stream) == bodies
    # And again with a pending partial frame in front of the big feed.
    dec = FrameDecoder()
    assert dec.feed(stream[:5]) == []
    assert dec.feed(stream[5:]) == bodies


@given(
    st.lists(st.binary(max_size=300), max_size=30),
    st.lists(st.integers(min_value=0, max_value=10_000), max_size=40),
)
@settings(max_examples=150, deadline=None)
def test_random_chunk_boundaries(bodies: list[bytes], cuts: list[int]) -> None:
    stream = encode_frames(bodies)
    dec = FrameDecoder(max_frame_size=300)
    out: list[bytes] = []
    for chunk in split_at(stream, cuts):
        out += dec.feed(chunk)
    assert out == bodies
    assert dec.pending == 0
    assert not dec.failed


# -- limits -------------------------------------------------------------------------


def test_frame_at_the_limit_is_accepted() -> None:
    dec = FrameDecoder(max_frame_size=10)
    assert dec.feed(encode_frame(b"x" * 10)) == [b"x" * 10]


def test_oversized_frame_rejected_from_header_alone() -> None:
    dec = FrameDecoder(max_frame_size=10)
    with pytest.raises(DecodeError, match="11 bytes .* exceeds the maximum of 10"):
        dec.feed(b"\x00\x00\x00\x0b")  # no body bytes needed to decide
    assert dec.failed
    assert dec.pending == 0


def test_decoder_stays_failed() -> None:
    dec = FrameDecoder(max_frame_size=4)
    with pytest.raises(DecodeError):
        dec.feed(encode_frame(b"ok") + b"\xff\xff\xff\xff")
    for data in (b"", encode_frame(b"ok"), b"\x00"):
        with pytest.raises(DecodeError):
            dec.feed(data)


def test_oversized_error_names_stream_offset() -> None:
    dec = FrameDecoder(max_frame_size=3)
    dec.feed(encode_frame(b"abc") + b"\x00\x00")  # 7 bytes consumed, 2 pending
    with pytest.raises(DecodeError, match="at stream offset 7 "):
        dec.feed(b"\x00\x04abcd")


def test_oversized_split_header_is_detected() -> None:
    dec = FrameDecoder(max_frame_size=100)
    assert dec.feed(b"\x00") == []
    assert dec.feed(b"\x00") == []
    with pytest.raises(DecodeError):
        dec.feed(b"\x01\x00")


def test_max_frame_size_validation() -> None:
    assert FrameDecoder().max_frame_size == DEFAULT_MAX_FRAME_SIZE
    with pytest.raises(ValueError):
        FrameDecoder(-1)
    with pytest.raises(ValueError):
        FrameDecoder(1 << 32)


@given(st.binary(max_size=400), st.lists(st.integers(0, 500), max_size=10))
@settings(max_examples=150, deadline=None)
def test_garbage_only_raises_decode_error(data: bytes, cuts: list[int]) -> None:
    dec = FrameDecoder(max_frame_size=64)
    total = 0
    try:
        for chunk in split_at(data, cuts):
            for body in dec.feed(chunk):
                assert len(body) <= 64
                total += 4 + len(body)
    except DecodeError:
        assert dec.failed
        return
    assert total + dec.pending == len(data)


# -- recorded sessions ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "count"), list(zip(VECTOR_FILES, VECTOR_FRAME_COUNTS, strict=True))
)
def test_vector_files_frame_and_reframe_exactly(name: str, count: int) -> None:
    stream = (VECTORS / name).read_bytes()
    bodies = FrameDecoder(max_frame_size=4096).feed(stream)
    assert len(bodies) == count
    assert encode_frames(bodies) == stream
    # Any chunking yields the same frames.
    rng = random.Random(name)
    dec = FrameDecoder(max_frame_size=4096)
    out: list[bytes] = []
    for chunk in split_at(stream, [rng.randrange(len(stream)) for _ in range(25)]):
        out += dec.feed(chunk)
    assert out == bodies
