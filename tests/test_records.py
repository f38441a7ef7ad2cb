"""Our msgpack records: exact round trips of every Broker type, record streams, hostile input."""

from __future__ import annotations

import datetime as dt
import enum
import ipaddress
import math
import struct
import threading
import types
from collections.abc import Mapping
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_spark.data import msgpack_records as records
from broker_spark.data.msgpack_records import (
    MAX_NESTING,
    Record,
    pack_record,
    pack_records,
    pack_value,
    records_end,
    unpack_records,
    unpack_value,
)
from broker_spark.data.types import (
    INT64_MAX,
    INT64_MIN,
    Count,
    Enum,
    FrozenTable,
    Port,
    Timespan,
    Timestamp,
    sort_key,
    timespan_ns,
    timestamp_ns,
    type_of,
)
from broker_spark.data.value import Data
from broker_spark.errors import DecodeError, EncodeError
from tests.strategies import broker_values, same_value

# Shared strategies (every Broker type, edges included) drive the round trips; ``exactly``
# is stricter than ``same_value``: records also keep set vs frozenset and dict vs FrozenTable.
values = broker_values(max_depth=3, max_size=4)
texts = st.text(max_size=12)


def exactly(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (Count is not int, set is not frozenset)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack(">d", a) == struct.pack(">d", b) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, Timestamp):
        return timestamp_ns(a) == timestamp_ns(b) and b.tzinfo is not None
    if isinstance(a, Timespan):
        return timespan_ns(a) == timespan_ns(b)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(exactly(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (set, frozenset)):
        xs, ys = sorted(a, key=sort_key), sorted(b, key=sort_key)
        return len(xs) == len(ys) and all(exactly(x, y) for x, y in zip(xs, ys, strict=True))
    if isinstance(a, Mapping):
        xs = sorted(a.items(), key=lambda kv: sort_key(kv[0]))
        ys = sorted(b.items(), key=lambda kv: sort_key(kv[0]))
        return len(xs) == len(ys) and all(
            exactly(k1, k2) and exactly(v1, v2) for (k1, v1), (k2, v2) in zip(xs, ys, strict=True)
        )
    return a == b


def assert_broker_value(v: Any) -> None:
    """Every part of a decoded value has a Broker type."""
    type_of(v)
    if isinstance(v, (tuple, set, frozenset)):
        for x in v:
            assert_broker_value(x)
    elif isinstance(v, Mapping):
        for k, x in v.items():
            assert_broker_value(k)
            assert_broker_value(x)


# --- round trips ----------------------------------------------------------------------------


@given(values)
def test_every_value_round_trips_with_exact_types(value: Any) -> None:
    back = unpack_value(pack_value(value))
    assert same_value(back, value)
    assert exactly(back, value)


def test_count_int_and_bool_stay_distinct() -> None:
    back = unpack_value(pack_value((Count(1), 1, True, Count(2**64 - 1), Count(300))))
    assert [type(x) for x in back] == [Count, int, bool, Count, Count]
    assert back[3] == 2**64 - 1


def test_sets_vectors_and_lists() -> None:
    back = unpack_value(pack_value([1, {2}, frozenset({3}), (4,)]))
    assert exactly(back, (1, {2}, frozenset({3}), (4,)))


def test_tables_with_arbitrary_keys_come_back_hashable() -> None:
    table = {
        (1, "a"): None,
        Count(3): b"\xff",
        frozenset({ipaddress.ip_address("::1")}): 1,
        FrozenTable({Port(53, Port.UDP): Enum("x")}): {"nested": {1, 2}},
        Timestamp.from_ns(5): Timespan.from_ns(-7),
    }
    assert exactly(unpack_value(pack_value(table)), table)


def test_nanoseconds_and_times_beyond_int64_nanoseconds() -> None:
    for value in (
        Timestamp.from_ns(1_700_000_000_123_456_789),
        Timestamp.from_ns(-1),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone.utc),
        dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc),
        Timespan.from_ns(-1),
        dt.timedelta.max,
        dt.timedelta.min,
    ):
        back = unpack_value(pack_value(value))
        assert back == value
        assert type(back) is (Timestamp if isinstance(value, dt.datetime) else Timespan)


def test_naive_and_other_zone_datetimes_are_instants() -> None:
    naive = dt.datetime(2024, 5, 1, 12, 0, 0, 7)
    back = unpack_value(pack_value(naive))
    assert back.tzinfo is not None and timestamp_ns(back) == timestamp_ns(naive)
    plus2 = dt.datetime(2024, 5, 1, 14, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert timestamp_ns(unpack_value(pack_value(plus2))) == timestamp_ns(plus2)


def test_subclasses_wrappers_and_mappings_reduce_to_broker_types() -> None:
    class Level(enum.IntEnum):
        HIGH = 3

    class Name(str):
        pass

    value = (
        Level.HIGH,
        Name("x"),
        bytearray(b"ab"),
        memoryview(b"cd"),
        Data(Count(4)),
        Data((1, 2)),
        types.MappingProxyType({1: 2}),
    )
    back = unpack_value(pack_value(value))
    assert exactly(back, (3, "x", b"ab", b"cd", Count(4), (1, 2), FrozenTable({1: 2})))


@pytest.mark.parametrize(
    "value",
    [
        object(),
        2**64,
        2**63,
        (1, {"k": frozenset({2**63})}),
        -(2**63) - 1,
        "\ud800",
        Enum("\udcff"),
        (1, object()),
        {1: {object()}},
    ],
    ids=[
        "object",
        "too-big",
        "beyond-int64",
        "beyond-int64-nested",
        "too-small",
        "surrogate",
        "enum-surrogate",
        "nested",
        "in-set",
    ],
)
def test_unpackable_values_raise_encode_error(value: Any) -> None:
    with pytest.raises(EncodeError):
        pack_value(value)


def test_integers_beyond_int64_are_refused_both_ways_counts_are_not() -> None:
    assert unpack_value(pack_value(Count(2**64 - 1))) == Count(2**64 - 1)
    assert unpack_value(pack_value((2**63 - 1, b"\xcf"))) == (2**63 - 1, b"\xcf")
    with pytest.raises(EncodeError, match="9223372036854775808"):
        pack_value(2**63)
    with pytest.raises(DecodeError, match="int64"):
        unpack_value(msgpack.packb([1, {"k": 2**63}]))


def _nested(levels: int) -> frozenset:
    value: frozenset = frozenset()
    for _ in range(levels - 1):
        value = frozenset({value})
    return value


def test_nesting_of_extension_containers_is_bounded_both_ways() -> None:
    deepest = _nested(MAX_NESTING)
    assert unpack_value(pack_value(deepest)) == deepest
    with pytest.raises(EncodeError, match="nested deeper"):
        pack_value(_nested(MAX_NESTING + 1))
    payload = msgpack.packb([])
    for _ in range(MAX_NESTING + 1):
        payload = msgpack.packb([msgpack.ExtType(records.EXT_FROZENSET, payload)])
    with pytest.raises(DecodeError, match="nested deeper"):
        unpack_value(payload)


def test_concurrent_use_from_threads() -> None:
    work = [(Count(i), {str(i), "x"}, Timestamp.from_ns(i), frozenset({(i,)})) for i in range(300)]
    failures: list[Any] = []

    def run() -> None:
        for v in work:
            if not exactly(unpack_value(pack_value(v)), v):
                failures.append(v)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


# --- hostile input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code, data",
    [
        (99, b""),
        (records.EXT_COUNT, b""),
        (records.EXT_COUNT, bytes(9)),
        (records.EXT_ADDRESS, bytes(5)),
        (records.EXT_SUBNET, bytes(4) + b"\x21"),
        (records.EXT_SUBNET, b"\x01\x02\x03\x04\x08"),
        (records.EXT_PORT, b"\x00\x50\x04"),
        (records.EXT_PORT, b"\x00"),
        (records.EXT_TIMESTAMP, bytes(8)),
        (records.EXT_TIMESTAMP, struct.pack(">qH", 0, 1000)),
        (records.EXT_TIMESTAMP, (2**94).to_bytes(12, "big")),
        (records.EXT_TIMESPAN, b"\x7f" + bytes(11)),
        (records.EXT_ENUM, b"\xff"),
        (records.EXT_SET, msgpack.packb({})),
        (records.EXT_SET, msgpack.packb([[1], {}])),
        (records.EXT_FROZEN_TABLE, msgpack.packb([1])),
        (records.EXT_FROZENSET, b"\x93\x01"),
    ],
)
def test_malformed_extensions_raise_decode_error(code: int, data: bytes) -> None:
    with pytest.raises(DecodeError):
        unpack_value(msgpack.packb(msgpack.ExtType(code, data)))


def test_malformed_msgpack_raises_decode_error() -> None:
    negative_ext = b"\xd4\xfbx"
    for bad in (
        negative_ext,
        b"",
        b"\xc1",
        b"\x92\x01",
        b"\x01\x02",
        b"\x81\x91\x80\x01",
        b"\xa2\xff\xfe",
    ):
        with pytest.raises(DecodeError):
            unpack_value(bad)


def test_msgpacks_own_timestamp_extension_reads_as_a_timestamp() -> None:
    back = unpack_value(msgpack.packb(msgpack.Timestamp(5, 0)))
    assert back == Timestamp.from_ns(5_000_000_000)


def _decodes_or_rejects(data: bytes) -> None:
    try:
        value = unpack_value(data)
    except DecodeError:
        return
    assert_broker_value(value)


@settings(max_examples=300)
@given(st.binary(max_size=64))
def test_random_bytes_only_raise_decode_error(data: bytes) -> None:
    _decodes_or_rejects(data)


@given(values, st.data())
def test_mutated_values_only_raise_decode_error(value: Any, data: st.DataObject) -> None:
    packed = bytearray(pack_value(value))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(packed)))
        op = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        if op == "flip" and i < len(packed):
            packed[i] ^= data.draw(st.integers(1, 255))
        elif op == "insert":
            packed[i:i] = bytes([data.draw(st.integers(0, 255))])
        elif op == "delete":
            del packed[i : i + 1]
        else:
            del packed[i:]
    _decodes_or_rejects(bytes(packed))


# --- records ----------------------------------------------------------------------------------

record_lists = st.lists(
    st.builds(
        Record,
        texts,
        st.binary(max_size=40),
        texts,
        st.integers(INT64_MIN, INT64_MAX),
        st.integers(0, 2**64 - 1),
    ),
    max_size=8,
)


@given(record_lists)
def test_records_round_trip_singly_and_in_batches(recs: list[Record]) -> None:
    stream = pack_records(recs)
    assert stream == b"".join(pack_record(*r) for r in recs)
    assert list(unpack_records(stream)) == recs
    assert records_end(stream) == len(stream)


@given(record_lists)
def test_record_fields_read_from_the_headers_agree_with_unpacking(recs: list[Record]) -> None:
    stream = pack_records(recs)
    pos = 0
    for rec in recs:
        fields = records.record_fields(stream, pos)
        end = pos + len(pack_record(*rec))
        if rec.received_at_ns < 0:  # a signed integer: not the layout it reads
            assert fields is None
        else:
            assert fields is not None and sum(fields[-1]) == end
            topic, payload, sender, received, offset = (stream[p : p + n] for p, n in fields)
            assert (topic.decode(), payload, sender.decode()) == rec[:3]
            assert int.from_bytes(received, "big") == rec.received_at_ns
            assert int.from_bytes(offset, "big") == rec.offset
            assert records.record_fields(stream[: end - 1], pos) is None  # torn: not whole
            small = rec.received_at_ns < 128 or rec.offset < 128  # a fixint
            assert (records.record_fields(stream, pos, fixints=False) is None) == small
        pos = end


def test_record_payload_is_kept_as_given() -> None:
    payload = bytes(range(256))
    (rec,) = unpack_records(pack_record("/zeek/event", payload, "peer-1", 1_700_000_000, 42))
    assert rec == Record("/zeek/event", payload, "peer-1", 1_700_000_000, 42)
    assert type(rec.payload) is bytes


def test_torn_streams() -> None:
    recs = [Record("t", b"x" * i, "s", i, i) for i in range(4)]
    stream = pack_records(recs)
    first_three = len(pack_records(recs[:3]))
    torn = stream[:-2]
    with pytest.raises(DecodeError, match=f"truncated record at byte {first_three}"):
        list(unpack_records(torn))
    assert list(unpack_records(torn, allow_truncated=True)) == recs[:3]
    assert records_end(torn) == first_three
    assert records_end(b"") == 0


@pytest.mark.parametrize(
    "obj",
    [[1, 2], ["t", b"p", "s", 1], ["t", "p", "s", 1, 2], ["t", b"p", "s", 1, -1], {"t": 1}, 7],
)
def test_records_of_the_wrong_shape_raise_decode_error(obj: Any) -> None:
    with pytest.raises(DecodeError, match="record at byte 0"):
        list(unpack_records(msgpack.packb(obj)))
    with pytest.raises(DecodeError):
        records_end(msgpack.packb(obj))


def test_record_sizes_are_bounded() -> None:
    stream = pack_record("t", b"x" * 1000, "s", 0, 0)
    with pytest.raises(DecodeError):
        list(unpack_records(stream, max_record_size=100))
    assert len(list(unpack_records(stream, max_record_size=1000))) == 1


@pytest.mark.parametrize(
    "args",
    [(1, b"", "s", 0, 0), ("t", "p", "s", 0, 0), ("t", b"", "s", 1.0, 0), ("t", b"", "s", 0, -1)],
)
def test_bad_record_fields_raise_encode_error(args: tuple) -> None:
    with pytest.raises(EncodeError):
        pack_record(*args)
    with pytest.raises(EncodeError):
        pack_records([args])


@settings(max_examples=200)
@given(record_lists, st.binary(max_size=16), st.integers(0, 200))
def test_mangled_record_streams_only_raise_decode_error(
    recs: list[Record], junk: bytes, at: int
) -> None:
    stream = pack_records(recs)
    at = min(at, len(stream))
    mangled = stream[:at] + junk + stream[at + len(junk) :]
    try:
        out = list(unpack_records(mangled, allow_truncated=True))
    except DecodeError:
        return
    assert all(type(r) is Record and type(r.payload) is bytes for r in out)


# --- the split modules and the fast paths -----------------------------------------------


def test_the_facade_re_exports_the_split_modules() -> None:
    from broker_spark.data import msgpack_ext as records_ext
    from broker_spark.data import msgpack_pack as records_pack
    from broker_spark.data import msgpack_unpack as records_unpack

    assert records.pack_value is records_pack.pack_value
    assert records.unpack_value is records_unpack.unpack_value
    assert records.EXT_FROZEN_TABLE == records_ext.EXT_FROZEN_TABLE
    assert records.MAX_NESTING == records_ext.MAX_NESTING


def test_records_accept_str_subclasses_and_byte_buffers() -> None:
    class Topic(str):
        pass

    packed = pack_record(Topic("/t"), bytearray(b"\x01\x02"), "s", -5, 0)
    assert packed == pack_record("/t", b"\x01\x02", "s", -5, 0)
    assert pack_record("/u", memoryview(b"x"), "s", 1, 1) == pack_record("/u", b"x", "s", 1, 1)
    (rec,) = unpack_records(packed)
    assert rec == Record("/t", b"\x01\x02", "s", -5, 0)
    assert [type(f) for f in rec] == [str, bytes, str, int, int]


def test_remembered_leaves_never_mix_up_values() -> None:
    # More distinct addresses, ports and enum names than the memos hold, twice over.
    leaves = (
        [ipaddress.IPv4Address(i) for i in range(5000)]
        + [Port(i, i % 4) for i in range(5000)]
        + [Enum(f"E::{i}") for i in range(5000)]
        + [Count(i) for i in range(250, 260)]
    )
    for _ in range(2):
        back = unpack_value(pack_value(tuple(leaves)))
        assert exactly(back, tuple(leaves))


def test_negative_counts_are_refused() -> None:
    with pytest.raises(EncodeError):
        pack_value(int.__new__(Count, -1))
    with pytest.raises(EncodeError):
        pack_value(int.__new__(Count, 2**64))
