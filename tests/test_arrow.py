"""The Arrow mapping: JSON text columns, typed columns both ways, misfits, and the codec bench."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_spark.data.arrow import (
    from_arrow,
    json_array_to_values,
    to_arrow,
    values_to_json_array,
)
from broker_spark.data.json_codec import dumps_value, loads_value
from broker_spark.data.types import (
    INT64_MAX,
    INT64_MIN,
    UINT64_MAX,
    Count,
    DataType,
    Enum,
    FrozenTable,
    Port,
    Timespan,
    Timestamp,
    timespan_ns,
    timestamp_ns,
)
from broker_spark.errors import DecodeError, EncodeError
from tests import strategies as shared
from tests.strategies import broker_values, same_value

ROOT = Path(__file__).resolve().parent.parent

texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=10)
int64s = st.integers(INT64_MIN, INT64_MAX)
counts = st.integers(0, UINT64_MAX).map(Count)
timestamps = int64s.map(Timestamp.from_ns)
timespans = int64s.map(Timespan.from_ns)
addresses = st.one_of(
    st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address),
    st.integers(0, 2**128 - 1).map(ipaddress.IPv6Address),
)


def nullable(strategy: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(st.one_of(st.none(), strategy), max_size=12)


def round_trip(values: list[Any], arrow_type: pa.DataType, hint: DataType | None = None) -> list:
    array, misfits = to_arrow(values, arrow_type, strict=True)
    assert misfits == 0
    assert array.type == arrow_type and len(array) == len(values)
    return from_arrow(array, hint)


# --- JSON text columns ------------------------------------------------------------------------


def same_values(xs: list[Any], ys: list[Any]) -> bool:
    return len(xs) == len(ys) and all(same_value(x, y) for x, y in zip(xs, ys, strict=True))


@given(st.lists(broker_values(max_depth=2, max_size=4), max_size=6))
def test_json_text_column_holds_any_value(values: list[Any]) -> None:
    array = values_to_json_array(values)
    assert array.type == pa.string() and array.null_count == 0
    assert array.to_pylist() == [dumps_value(v) for v in values]
    # Lossless except where Zeek's JSON is (timestamps to the millisecond, say).
    expected = [loads_value(dumps_value(v)) for v in values]
    assert same_values(json_array_to_values(array), expected)
    assert same_values(json_array_to_values(pa.chunked_array([array, array])), expected * 2)


def test_json_text_column_nulls_and_errors() -> None:
    assert json_array_to_values(pa.array([None, '{"@data-type":"count","data":3}'])) == [
        None,
        Count(3),
    ]
    with pytest.raises(DecodeError, match="row 1"):
        json_array_to_values(pa.array(['{"@data-type":"none","data":{}}', "{bad"]))
    with pytest.raises(EncodeError, match="row 0"):
        values_to_json_array([object()])


# --- typed columns: every type both ways -------------------------------------------------------


NATURAL_COLUMNS = {
    "boolean": (st.booleans(), pa.bool_(), None),
    "count": (shared.counts(), pa.uint64(), None),
    "integer": (shared.integers(), pa.int64(), None),
    "real": (shared.reals(), pa.float64(), None),
    "string": (shared.strings(), pa.binary(), None),
    "address": (shared.addresses(), pa.string(), DataType.Address),
    "subnet": (shared.subnets(), pa.string(), DataType.Subnet),
    "port": (shared.ports(), pa.string(), DataType.Port),
    "timestamp": (timestamps, pa.timestamp("ns", tz="UTC"), None),
    "timespan": (timespans, pa.duration("ns"), None),
    "enum": (texts.map(Enum), pa.string(), DataType.EnumValue),
    "none": (st.none(), pa.null(), None),
}


@pytest.mark.parametrize("kind", NATURAL_COLUMNS)
@settings(max_examples=40)
@given(data=st.data())
def test_every_simple_type_round_trips_through_its_natural_column(
    kind: str, data: st.DataObject
) -> None:
    strategy, arrow_type, hint = NATURAL_COLUMNS[kind]
    values = data.draw(nullable(strategy))
    assert same_values(round_trip(values, arrow_type, hint), values)


@settings(max_examples=40)
@given(nullable(st.one_of(int64s, st.integers(0, INT64_MAX).map(Count))))
def test_int64_takes_integers_and_counts_in_range(values: list[Any]) -> None:
    back = round_trip(values, pa.int64())
    assert back == values and all(type(v) in (int, type(None)) for v in back)


@settings(max_examples=40)
@given(nullable(counts))
def test_uint64_is_count(values: list[Any]) -> None:
    back = round_trip(values, pa.uint64())
    assert back == values and all(type(v) in (Count, type(None)) for v in back)


@settings(max_examples=40)
@given(nullable(st.one_of(st.floats(allow_nan=False), int64s, counts)))
def test_float64_takes_reals_and_integers(values: list[Any]) -> None:
    back = round_trip(values, pa.float64())
    assert back == [None if v is None else float(v) for v in values]


def test_float64_keeps_nan_and_infinities() -> None:
    back = round_trip([math.nan, math.inf, -math.inf, -0.0], pa.float64())
    assert math.isnan(back[0]) and back[1:3] == [math.inf, -math.inf]
    assert math.copysign(1, back[3]) == -1


@settings(max_examples=40)
@given(nullable(st.booleans()))
def test_bool(values: list[Any]) -> None:
    assert round_trip(values, pa.bool_()) == values


@settings(max_examples=40)
@given(nullable(texts))
def test_string(values: list[Any]) -> None:
    assert round_trip(values, pa.string()) == values
    assert round_trip(values, pa.large_string()) == values


def test_string_columns_carry_enums_addresses_subnets_and_ports_with_hints() -> None:
    cases = [
        ([Enum("Conn::LOG"), None], DataType.EnumValue),
        ([ipaddress.ip_address("10.0.0.1"), ipaddress.ip_address("2001:db8::1")], DataType.Address),
        ([ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("::/0")], DataType.Subnet),
        ([Port(80, Port.TCP), Port(53, Port.UDP), Port(0, Port.Unknown)], DataType.Port),
    ]
    for values, hint in cases:
        array, _ = to_arrow(values, pa.string(), strict=True)
        assert array.to_pylist() == [None if v is None else str(v) for v in values]
        assert from_arrow(array, hint) == values
    with pytest.raises(DecodeError, match="row 1"):
        from_arrow(pa.array(["1.2.3.4", "nope"]), DataType.Address)


def test_strings_that_are_not_utf8() -> None:
    array, misfits = to_arrow([b"ok", b"\xff"], pa.string())
    assert array.to_pylist() == ["ok", None] and misfits == 1
    assert round_trip([b"\xff\x00", "text"], pa.binary()) == [b"\xff\x00", "text"]


@settings(max_examples=40)
@given(nullable(timestamps))
def test_timestamp_ns_keeps_nanoseconds(values: list[Any]) -> None:
    back = round_trip(values, pa.timestamp("ns", tz="UTC"))
    assert [None if v is None else timestamp_ns(v) for v in back] == [
        None if v is None else timestamp_ns(v) for v in values
    ]
    assert all(v is None or type(v) is Timestamp for v in back)


@settings(max_examples=40)
@given(nullable(timestamps))
def test_timestamp_us_floors_to_microseconds(values: list[Any]) -> None:
    back = round_trip(values, pa.timestamp("us", tz="UTC"))
    assert [None if v is None else timestamp_ns(v) for v in back] == [
        None if v is None else timestamp_ns(v) // 1000 * 1000 for v in values
    ]


def test_timestamps_accept_plain_datetimes() -> None:
    naive = dt.datetime(2024, 1, 2, 3, 4, 5, 6)
    back = round_trip([naive], pa.timestamp("us"))
    assert back == [naive.replace(tzinfo=dt.timezone.utc)]


@settings(max_examples=40)
@given(nullable(timespans))
def test_duration_ns_is_timespan(values: list[Any]) -> None:
    back = round_trip(values, pa.duration("ns"))
    assert [None if v is None else timespan_ns(v) for v in back] == [
        None if v is None else timespan_ns(v) for v in values
    ]
    assert all(v is None or type(v) is Timespan for v in back)


@settings(max_examples=40)
@given(nullable(st.lists(st.one_of(st.none(), int64s), max_size=4).map(tuple)))
def test_list_is_vector(values: list[Any]) -> None:
    assert round_trip(values, pa.list_(pa.int64())) == values
    assert round_trip(values, pa.large_list(pa.int64())) == values


def test_sets_become_sorted_lists_and_come_back_as_sets_with_a_hint() -> None:
    values = [{"b", "a", "c"}, frozenset(), None]
    array, _ = to_arrow(values, pa.list_(pa.string()), strict=True)
    assert array.to_pylist() == [["a", "b", "c"], [], None]
    assert from_arrow(array, DataType.Set) == values


def test_fixed_size_lists() -> None:
    assert round_trip([(1, 2), None, (3, 4)], pa.list_(pa.int64(), 2)) == [(1, 2), None, (3, 4)]
    _, misfits = to_arrow([(1, 2, 3)], pa.list_(pa.int64(), 2))
    assert misfits == 1


@settings(max_examples=40)
@given(nullable(st.dictionaries(texts, st.one_of(st.none(), int64s), max_size=4)))
def test_map_is_table(values: list[Any]) -> None:
    assert round_trip(values, pa.map_(pa.string(), pa.int64())) == values


def test_map_keys_of_any_type_come_back_hashable() -> None:
    t = pa.map_(pa.list_(pa.int64()), pa.uint64())
    assert round_trip([{(1, 2): Count(3)}, FrozenTable({(): Count(0)})], t) == [
        {(1, 2): Count(3)},
        {(): Count(0)},
    ]


EVENT = pa.struct(
    [
        ("orig_h", pa.string()),
        ("resp_p", pa.string()),
        ("ts", pa.timestamp("ns", tz="UTC")),
        ("bytes", pa.uint64()),
        ("tags", pa.list_(pa.string())),
        ("extra", pa.struct([("n", pa.int64())])),
    ]
)


def test_struct_maps_a_vector_by_position() -> None:
    ts = Timestamp.from_ns(1_700_000_000_123_456_789)
    rows = [
        (ipaddress.ip_address("10.1.1.1"), Port(443, Port.TCP), ts, Count(10), {"x"}, (5,)),
        None,
        ("10.2.2.2", "80/tcp", None, None, (), None),
    ]
    array, misfits = to_arrow(rows, EVENT, strict=True)
    assert misfits == 0
    assert from_arrow(array) == [
        ("10.1.1.1", "443/tcp", ts, Count(10), ("x",), (5,)),
        None,
        ("10.2.2.2", "80/tcp", None, None, (), None),
    ]
    by_name = {"orig_h": "1.1.1.1", "bytes": Count(1)}
    assert from_arrow(to_arrow([by_name], EVENT, strict=True)[0]) == [
        ("1.1.1.1", None, None, Count(1), None, None)
    ]


def test_from_arrow_handles_slices_chunks_and_dictionaries() -> None:
    values = [(1, (2,)), None, (3, ()), (4, (5, 6))]
    t = pa.struct([("a", pa.int64()), ("b", pa.list_(pa.int64()))])
    array, _ = to_arrow(values, t, strict=True)
    assert from_arrow(array.slice(1, 2)) == values[1:3]
    lists = to_arrow([(1,), None, (2, 3)], pa.list_(pa.int64()))[0]
    assert from_arrow(lists.slice(1)) == [None, (2, 3)]
    maps = to_arrow([{"a": 1}, {"b": 2}, {"c": 3}], pa.map_(pa.string(), pa.int64()))[0]
    assert from_arrow(maps.slice(1, 1)) == [{"b": 2}]
    assert from_arrow(pa.chunked_array([lists, lists])) == [(1,), None, (2, 3)] * 2
    assert from_arrow(pa.array(["a", "b", "a"]).dictionary_encode()) == ["a", "b", "a"]
    assert from_arrow(pa.array([None, None])) == [None, None]
    assert from_arrow(pa.array([1, 2], pa.int8()), DataType.Count) == [Count(1), Count(2)]
    assert from_arrow(pa.array([1, 2], pa.uint16()), DataType.Integer) == [1, 2]
    assert from_arrow(pa.array([1, None], pa.int32()), DataType.Real) == [1.0, None]
    with pytest.raises(DecodeError, match="count"):
        from_arrow(pa.array([-1]), DataType.Count)


# --- misfits and strict mode ---------------------------------------------------------------------

MISFITS = [
    (pa.int64(), [Count(INT64_MAX + 1), "1", True, 1.5]),
    (pa.int8(), [128, -129]),
    (pa.uint64(), [-1, "1", False]),
    (pa.float64(), ["1.0", True, Enum("x")]),
    (pa.bool_(), [1, "T"]),
    (pa.string(), [1, Count(1), Timestamp.from_ns(0), (1,), "\ud800"]),
    (pa.timestamp("ns"), [Timespan.from_ns(1), 5, dt.datetime(9999, 1, 1)]),
    (pa.duration("us"), [Timestamp.from_ns(1), 1]),
    (pa.list_(pa.int64()), ["ab", 1, {1: 2}]),
    (pa.map_(pa.string(), pa.int64()), [(1,), {1: 2}, {None: 1}]),
    (EVENT, [(1, 2), "x"]),
]


@pytest.mark.parametrize("arrow_type, bad", MISFITS, ids=[str(t) for t, _ in MISFITS])
def test_misfits_become_null_and_are_counted(arrow_type: pa.DataType, bad: list[Any]) -> None:
    array, misfits = to_arrow([None, *bad], arrow_type)
    assert misfits == len(bad)
    assert array.null_count == len(bad) + 1


def test_nested_misfits_null_the_innermost_part_only() -> None:
    row = ("10.0.0.1", "80/tcp", "not a time", Count(1), ("a", 7), (Count(2**64 - 1),))
    array, misfits = to_arrow([row], EVENT)
    assert misfits == 3
    assert from_arrow(array) == [("10.0.0.1", "80/tcp", None, Count(1), ("a", None), (None,))]
    array, misfits = to_arrow([{"a": 1, "b": "x"}], pa.map_(pa.string(), pa.int64()))
    assert (array.to_pylist(), misfits) == ([[("a", 1), ("b", None)]], 1)


def test_strict_mode_names_row_and_field() -> None:
    rows = [None, ("10.0.0.1", "80/tcp", None, Count(1), ("a", 7), None)]
    with pytest.raises(EncodeError, match=r"row 1, field 'conn\.tags\[\]'") as info:
        to_arrow(rows, EVENT, strict=True, name="conn")
    assert isinstance(info.value, ValueError)
    with pytest.raises(ValueError, match=r"row 2, field 'value'"):
        to_arrow([1, 2, "x"], pa.int64(), strict=True)


def test_unsupported_arrow_types() -> None:
    with pytest.raises(EncodeError, match="decimal"):
        to_arrow([1], pa.decimal128(5, 2))
    with pytest.raises(DecodeError, match="date32"):
        from_arrow(pa.array([dt.date(2024, 1, 1)]))


# --- the codec benchmark ------------------------------------------------------------------------


def test_codec_bench_runs_and_prints_its_table() -> None:
    script = str(ROOT / "bench" / "codec.py")
    out = subprocess.run(
        [sys.executable, script, "--seconds", "0.01"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "| codec | msgs/s | ratio to plain msgpack | target |" in out
    for name in ("plain msgpack", "broker binary", "msgpack records", "Zeek JSON", "Arrow"):
        assert f"| {name}" in out
    report = json.loads(
        subprocess.run(
            [sys.executable, script, "--seconds", "0.01", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    )
    rates = {row["codec"]: row["msgs_per_s"] for row in report["rows"]}
    assert len(rates) >= 5 and all(rate > 0 for rate in rates.values())
