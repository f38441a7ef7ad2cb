"""Broker's binary codec on its fast paths (compiled per-layout readers and writers,
remembered leaves, the dispatch above the reference): values come back exact, limits hold.

Split from ``test_binary_codec.py``, which keeps the vectors, recorded sessions,
properties and fuzzing of the codec as a whole.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_spark.data.binary import DecodeLimits, decode, encode
from broker_spark.data.types import Count, Enum, FrozenTable, Port, Timespan, Timestamp
from broker_spark.errors import DecodeError
from tests.strategies import broker_values, same_value

V4 = ipaddress.IPv4Address


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


class Name(str):
    pass


def test_the_facade_re_exports_the_split_modules() -> None:
    from broker_spark.data import (
        binary,
        binary_decode,
        binary_encode,
        binary_fields,
        binary_read,
        binary_write,
    )

    assert binary.encode is binary_write.encode and binary.encode_into is binary_encode.encode_into
    assert binary.decode is binary_read.decode and binary.decode_from is binary_decode.decode_from
    assert binary.DecodeLimits is binary_decode.DecodeLimits
    assert binary.read_timespan_raw is binary_fields.read_timespan_raw


@pytest.mark.parametrize(
    "ns",
    [
        -(2**63),
        -60_000_000_001,
        -1,
        0,
        999,
        59_999_999_999,
        60_000_000_000,
        1_700_000_000_123_456_789,
        2**63 - 1,
    ],
)
def test_timestamps_and_timespans_keep_every_nanosecond(ns: int) -> None:
    (ts, span) = decode(encode((Timestamp.from_ns(ns), Timespan.from_ns(ns))))
    assert type(ts) is Timestamp and ts.tzinfo is not None and ts == Timestamp.from_ns(ns)
    assert encode(ts) == h("09") + ns.to_bytes(8, "big", signed=True)
    assert type(span) is Timespan and encode(span) == h("0a") + ns.to_bytes(8, "big", signed=True)


def test_timestamps_built_other_ways_encode_by_their_instant() -> None:
    stamp = Timestamp.from_ns(1_649_574_000_000_000_000)
    plain = Timestamp(2022, 4, 10, 7, tzinfo=_dt.timezone.utc)  # no nanosecond slot set
    shifted = stamp.astimezone(_dt.timezone(_dt.timedelta(hours=2)))
    assert encode((plain, shifted, stamp)) == encode((stamp, stamp, stamp))
    assert encode((Timespan(seconds=1),)) == encode((Timespan.from_ns(10**9),))


def test_remembered_leaves_never_mix_up_values() -> None:
    # More distinct strings, addresses and enum names than the memos hold, twice over.
    strings = [f"s{i}" for i in range(5000)] + ["x" * 200, "é" * 30]
    addrs = [V4(i) for i in range(5000)]
    enums = [Enum(f"E::{i}") for i in range(1500)]
    for _ in range(2):
        for chunk in (strings, addrs, enums):
            value = tuple(chunk)
            back = decode(encode(value))
            assert back == value and [type(v) for v in back] == [type(v) for v in value]
    assert decode(encode(Enum("Conn::LOG"))) is decode(encode(Enum("Conn::LOG")))


def test_sets_of_strings_are_ordered_like_any_other_set() -> None:
    assert (
        encode({Name("b"), "a", "ab"})
        == encode({"b", "a", "ab"})
        == h("0c 03 0501 61 0502 6162 0501 62")
    )
    assert encode({"é", "z", "a"}) == h("0c 03 0501 61 0501 7a 0502 c3a9")
    mixed = {"a", b"\xff", 2, Count(3), Enum("x"), Port(1, 1)}
    assert decode(encode(mixed)) == mixed
    assert encode(mixed) == encode(set(reversed(list(mixed))))


def count_container_elements(value: Any) -> int:
    if isinstance(value, (tuple, list, set, frozenset)):
        return len(value) + sum(count_container_elements(v) for v in value)
    if isinstance(value, (dict, FrozenTable)):
        return len(value) + sum(
            count_container_elements(k) + count_container_elements(v) for k, v in value.items()
        )
    return 0


@settings(max_examples=60, deadline=None)
@given(st.lists(broker_values(max_depth=2, max_size=4), min_size=1, max_size=4).map(tuple))
def test_the_element_budget_is_exact_for_small_and_large_inputs(value: Any) -> None:
    # Exactly max_items container elements pass and one more fails. The decoder skips
    # counting when len(raw) ** 2 <= max_items, on the grounds that no input can hold
    # that many elements: check that premise too.
    raw = encode(value)
    n = count_container_elements(value)
    assert n < len(raw) ** 2
    assert same_value(decode(raw, DecodeLimits(max_items=n)), value)
    with pytest.raises(DecodeError, match="elements in one value"):
        decode(raw, DecodeLimits(max_items=n - 1))


def test_a_short_root_vector_obeys_every_limit() -> None:
    raw = encode((1, 2, 3))
    with pytest.raises(DecodeError, match="nested deeper than 0"):
        decode(raw, DecodeLimits(max_depth=0))
    with pytest.raises(DecodeError, match="above the limit of 2"):
        decode(raw, DecodeLimits(max_container=2))
    with pytest.raises(DecodeError, match="limit of 2 elements in one value"):
        decode(raw, DecodeLimits(max_items=2))
    with pytest.raises(DecodeError, match="declares 3 elements but only 2 bytes remain"):
        decode(h("0e 03 00 00"))
    assert decode(raw, DecodeLimits(max_depth=1, max_container=3, max_items=3)) == (1, 2, 3)


def test_caches_hold_only_short_keys() -> None:
    from broker_spark.data import binary_decode, binary_encode

    names = [Enum(f"{i}" + "n" * 300) for i in range(20)]
    texts = [f"{i}" + "t" * 300 for i in range(20)]
    assert decode(encode((tuple(names), tuple(texts)))) == (tuple(names), tuple(texts))
    assert all(len(k) <= 128 for k in binary_decode._ENUMS)
    assert all(len(k) <= 128 for k in binary_encode._ENUM_BYTES)
    assert all(len(k) <= 48 for k in binary_encode._STR_BYTES)
