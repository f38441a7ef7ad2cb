"""The compiled fast paths of the binary codec change nothing but speed.

:func:`binary.encode` and :func:`binary.decode` compile a writer and a reader
for each Zeek message layout they see twice (binary_encode_fast,
binary_decode_fast). Whatever those produce must be what the general codec
produces: the same bytes, the same values of the same Python types, the same
errors for malformed or out-of-range input. The general paths are reached
directly here (``encode_into`` never compiles; ``binary_decode.reference_decode_bytes`` is the
general reader) to serve as the reference.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_spark.data import binary_decode, binary_decode_fast, binary_encode_fast, binary_shape
from broker_spark.data.binary import DEFAULT_LIMITS, decode, encode, encode_into
from broker_spark.data.types import Count, Enum, Port, Timespan, Timestamp
from broker_spark.errors import DecodeError, EncodeError
from tests.strategies import broker_values, byte_edits, mutate, real_bits, same_value


def canon(value: Any) -> Any:
    """A comparable form that keeps every Python type, down to set versus frozenset."""
    t = type(value)
    if t in (tuple, list):
        return (t.__name__, tuple(canon(v) for v in value))
    if t in (set, frozenset):
        return (t.__name__, tuple(sorted(repr(canon(v)) for v in value)))
    if isinstance(value, Mapping):
        items = (repr((canon(k), canon(v))) for k, v in value.items())
        return (t.__name__, tuple(sorted(items)))
    if t is float:
        return (t.__name__, real_bits(value))
    return (t.__name__, repr(value))


def general_encode(value: Any) -> bytes:
    out = bytearray()
    encode_into(value, out)
    return bytes(out)


def general_decode(raw: bytes) -> Any:
    return binary_decode.reference_decode_bytes(raw, DEFAULT_LIMITS, 0)


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    """What ``fn(*args)`` gives: the value in canonical form, or the error's type and text."""
    try:
        return ("value", canon(fn(*args)))
    except (DecodeError, EncodeError, TypeError, ValueError) as exc:
        return (type(exc).__name__, str(exc))


def event(name: str, args: tuple, fmt: int = 1, kind: int = 1, meta: Any = None) -> tuple:
    body = (name, args) if meta is None else (name, args, meta)
    return (Count(fmt), Count(kind), body)


def check_round_trip(value: tuple) -> bytes:
    """Encode and decode three times (teach twice, then the compiled code); compare all."""
    expected = general_encode(value)
    for _ in range(3):
        raw = encode(value)
        assert raw == expected
        back = decode(raw)
        assert same_value(back, value)
        assert canon(back) == canon(general_decode(raw))
    return expected


EVENTS = st.builds(
    event,
    st.sampled_from(["conn", "http", "é"]),  # few names: layouts meet and widen
    st.lists(broker_values(max_depth=2, max_size=3), max_size=6).map(tuple),
    st.sampled_from([1, 2, 300]),
    st.just(1),
    st.one_of(st.none(), broker_values(max_depth=1, max_size=2)),
)


@settings(max_examples=150, deadline=None)
@given(EVENTS)
def test_compiled_paths_give_what_the_general_ones_give(value: tuple) -> None:
    check_round_trip(value)


def typical(i: int) -> tuple:
    return event(
        "connection_established",
        (
            Count(1_000_000_000 + i),
            ipaddress.IPv4Address(0x0A000000 + i % 7),
            Port(443 if i % 2 else 53, Port.TCP if i % 3 else Port.UDP),
            f"C{i:017d}",
            Timestamp.from_ns(1_700_000_000_123_456_789 + i * 1_999_999_999),
            {"http", "ssl"} if i % 2 else {f"s{i % 3}"},
            -i,
            i / 3,
            Timespan.from_ns(i * 1_234_567),
            Enum("Conn::LOG"),
        ),
    )


def test_a_typical_event_is_compiled_and_its_values_keep_their_types() -> None:
    for i in range(6):
        check_round_trip(typical(i))
    raw = encode(typical(7))
    head = raw[: 24 + raw[23]]
    assert head in binary_decode_fast.READERS
    assert "connection_established" in binary_encode_fast.WRITERS
    first, second = decode(raw), decode(raw)
    args = first[2][1]
    assert [type(v) for v in args] == [
        Count,
        ipaddress.IPv4Address,
        Port,
        str,
        Timestamp,
        set,
        int,
        float,
        Timespan,
        Enum,
    ]
    assert type(first[0]) is Count and first[2][0] == "connection_established"
    assert args[4].nanosecond == (1_700_000_000_123_456_789 + 7 * 1_999_999_999) % 1000
    # Sets come from a remembered frozenset, but each decode gets its own.
    args[5].add("changed")
    assert second[2][1][5] == {"http", "ssl"}


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 5), byte_edits(200, 3))
def test_malformed_or_different_input_gets_the_general_readers_answer(
    which: int, edits: list[tuple[str, int, int]]
) -> None:
    for i in range(3):
        decode(encode(typical(i)))  # the layout is compiled
    raw = mutate(encode(typical(which)), edits)
    expected = outcome(general_decode, raw)
    assert outcome(decode, raw) == expected
    assert outcome(decode, raw) == expected  # and again, once the reader has learnt from it


def test_every_byte_of_a_compiled_event_is_checked() -> None:
    for i in range(3):
        decode(encode(typical(i)))
    raw = encode(typical(1))
    for i in range(len(raw)):
        for value in (0x00, 0x7F, 0x80, 0xFF, raw[i] ^ 0x01):
            bad = raw[:i] + bytes((value,)) + raw[i + 1 :]
            assert outcome(decode, bad) == outcome(general_decode, bad), (i, value)
        assert outcome(decode, raw[:i]) == outcome(general_decode, raw[:i])
    assert outcome(decode, raw + b"\x00") == outcome(general_decode, raw + b"\x00")


def test_values_out_of_range_fail_as_before_in_a_compiled_layout() -> None:
    for i in range(3):
        encode(event("ranges", (Count(i), i, Port(80, 1), "x")))
    for args in [
        (int.__new__(Count, -1), 1, Port(80, 1), "x"),
        (Count(1), 2**63, Port(80, 1), "x"),
        (Count(1), 1, Port(80, 1), "\ud800"),
        (Count(1), 1, Port(80, 1), object()),
    ]:
        value = event("ranges", args)
        assert outcome(encode, value) == outcome(general_encode, value)
        with pytest.raises((EncodeError, TypeError)):
            encode(value)


def test_a_layout_that_changes_is_widened_and_stays_exact() -> None:
    shapes = [
        (),
        (Timestamp.from_ns(0),),  # after a message with no arguments
        (Count(1), "a", (1, 2)),
        (Count(1), "a", ()),
        (Count(2), "b", (1, 2, 3)),  # a vector of another length
        (Count(3), b"\xff", ()),  # bytes where a string was
        (Count(4), "d", {"k": 1}),  # a table where a vector was
        (1, "e", (1,)),  # an integer where a count was
    ]
    for _ in range(3):
        for args in shapes:
            check_round_trip(event("widening", args))


def test_timestamps_not_built_from_nanoseconds_still_encode_by_their_instant() -> None:
    stamp = Timestamp.from_ns(1_649_574_000_000_000_001)
    assert stamp._ns == 1_649_574_000_000_000_001 and Timespan.from_ns(5)._ns == 5
    plain = Timestamp(2022, 4, 10, 7, tzinfo=_dt.timezone.utc)  # no nanoseconds kept
    shifted = stamp.astimezone(_dt.timezone(_dt.timedelta(hours=2)))
    naive = _dt.datetime(2022, 4, 10, 7)
    for ts in (stamp, stamp, plain, shifted, naive, stamp, plain):
        value = event("times", (ts, Timespan(seconds=1), Timespan.from_ns(7)))
        assert encode(value) == general_encode(value)
    assert encode(event("times", (plain,))) == encode(
        event("times", (Timestamp.from_ns(1_649_574_000_000_000_000),))
    )


def test_non_events_and_custom_limits_take_the_general_paths() -> None:
    value = (Count(1), Count(1), ("custom", (1, 2, 3)))
    for _ in range(3):
        raw = encode(value)
        decode(raw)
    with pytest.raises(DecodeError, match="above the limit of 2"):
        decode(raw, binary_decode.DecodeLimits(max_container=2))
    for other in [(1, 2, 3), ("a", "b", "c" * 30), (Count(1),) * 30, (b"\xff" * 30, 1, 2)]:
        for _ in range(3):
            assert decode(encode(other)) == other


def test_every_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (binary_decode_fast, binary_encode_fast):
        monkeypatch.setattr(module, "_KEYS_MAX", 8)
    monkeypatch.setattr(binary_shape, "COMPILED_MAX", 4)
    monkeypatch.setattr(binary_decode_fast, "_CACHE_MAX", 16)
    monkeypatch.setattr(binary_encode_fast, "_SETS_MAX", 16)
    for i in range(40):
        args = tuple(range(i % 9)) + (Port(i, 1), {f"s{i}"}, Timestamp.from_ns(i * 61 * 10**9))
        check_round_trip(event(f"name{i}", args))
    assert len(binary_decode_fast._STATE) <= 8 and len(binary_decode_fast.READERS) <= 8
    assert len(binary_encode_fast._STATE) <= 8 and len(binary_encode_fast.WRITERS) <= 8
    assert len(binary_decode_fast._COMPILED) <= 4 and len(binary_encode_fast._COMPILED) <= 4
    for cache in ("_PORTS", "_STRING_SETS", "_BASES"):
        assert len(getattr(binary_decode_fast, cache)) <= 16
    assert len(binary_encode_fast._SETS) <= 16


def test_generated_source_holds_no_input_bytes() -> None:
    name = 'evil"); import os  # '
    for _ in range(3):
        check_round_trip(event(name, ("'''\"\"\"\\", Enum("x\ny"))))
    writer = binary_encode_fast.WRITERS[name]
    raw = encode(event(name, ("a", Enum("b"))))
    reader = binary_decode_fast.READERS[raw[: 24 + raw[23]]]
    for fn in (writer, reader):
        source = fn.__globals__["__source__"]
        assert "evil" not in source and "import" not in source


def test_decoding_a_view_or_at_an_offset_uses_the_same_readers() -> None:
    raw = encode(typical(2))
    for _ in range(3):
        assert canon(decode(memoryview(b"xx" + raw)[2:])) == canon(general_decode(raw))
        assert canon(decode(b"xyz" + raw, offset=3)) == canon(general_decode(raw))
    with pytest.raises(DecodeError):
        decode(raw, offset=-3)
