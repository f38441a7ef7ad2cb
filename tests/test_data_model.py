"""The data model: Python mapping, validation, rendering and Broker's total order."""

from __future__ import annotations

import datetime as dt
import ipaddress

import pytest

from broker_spark.data import (
    Count,
    Data,
    DataType,
    Enum,
    FrozenTable,
    Port,
    Timespan,
    Timestamp,
    freeze,
    from_py,
    sort_key,
    timespan_ns,
    timestamp_ns,
    type_of,
)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "nil"),
        (True, "T"),
        (False, "F"),
        (42, "42"),
        (Count(42), "42"),
        (4.2, "4.200000"),
        ("hi", "hi"),
        (dt.timedelta(milliseconds=-1), "-1000000ns"),
        (Port(65535, Port.TCP), "65535/tcp"),
        (Port(0, Port.Unknown), "0/?"),
        (Port(53, Port.UDP), "53/udp"),
        (Port(8, Port.ICMP), "8/icmp"),
        ({3, 1, 2}, "{1, 2, 3}"),
        ({"b": 2, "a": 1}, "{a -> 1, b -> 2}"),
        ((1, 2, 3), "(1, 2, 3)"),
        ([1, None], "(1, nil)"),
        (Enum("Conn::LOG"), "Conn::LOG"),
        (ipaddress.ip_address("10.0.0.1"), "10.0.0.1"),
        (ipaddress.ip_address("2001:db8::1"), "2001:db8::1"),
        (ipaddress.ip_network("10.0.0.0/8"), "10.0.0.0/8"),
        (Timestamp.from_ns(1649574000123456789), "2022-04-10T07:00:00.123"),
    ],
)
def test_rendering_matches_broker(value: object, text: str) -> None:
    assert str(Data(value)) == text


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (None, Data.Type.None_),
        (True, Data.Type.Boolean),
        (Count(1), Data.Type.Count),
        (-1, Data.Type.Integer),
        (1.0, Data.Type.Real),
        ("s", Data.Type.String),
        (b"\xff", Data.Type.String),
        (ipaddress.ip_address("::1"), Data.Type.Address),
        (ipaddress.ip_network("::/0"), Data.Type.Subnet),
        (Port(1, Port.TCP), Data.Type.Port),
        (dt.datetime.now(dt.timezone.utc), Data.Type.Timestamp),
        (dt.timedelta(1), Data.Type.Timespan),
        (Enum("x"), Data.Type.EnumValue),
        (frozenset(), Data.Type.Set),
        ({}, Data.Type.Table),
        ((), Data.Type.Vector),
    ],
)
def test_get_type(value: object, kind: DataType) -> None:
    assert Data(value).get_type() is kind


def test_data_type_members_print_as_brokers_bindings() -> None:
    assert Data.Type is DataType
    assert str(Data(Count(1)).get_type()) == "Type.Count"
    assert repr(Data.Type.Vector) == "<Type.Vector: 14>"
    assert set(Data.Type.__members__) >= {"None_", "Count", "EnumValue", "Table"}


def test_count_validates_range_and_is_hashable() -> None:
    with pytest.raises(ValueError, match="-1"):
        Count(-1)
    with pytest.raises(ValueError, match="out of range"):
        Count(1 << 64)
    with pytest.raises(ValueError, match="integral"):
        Count(1.5)
    assert Count((1 << 64) - 1) == (1 << 64) - 1
    assert {Count(3): "x"}[Count(3)] == "x"
    assert repr(Count(3)) == "Count(3)"


def test_integer_out_of_int64_range_is_rejected() -> None:
    with pytest.raises(ValueError, match="9223372036854775808"):
        Data(1 << 63)
    with pytest.raises(ValueError, match="int64"):
        from_py([1, -(1 << 63) - 1])
    assert Data(-(1 << 63)).value == -(1 << 63)


def test_port_validation() -> None:
    with pytest.raises(ValueError, match="65536"):
        Port(65536, Port.TCP)
    with pytest.raises(ValueError, match="protocol"):
        Port(1, 9)
    assert Port.parse("80/tcp") == Port(80, Port.TCP)
    with pytest.raises(ValueError, match="not a port"):
        Port.parse("80/sctp")
    assert Port(80, Port.TCP).number() == 80 and Port(80, Port.TCP).type() == Port.TCP


def test_unsupported_type_names_the_value() -> None:
    with pytest.raises(TypeError, match="object"):
        Data(object())


def test_timestamps_keep_nanoseconds() -> None:
    ts = Timestamp.from_ns(1_649_574_000_123_456_789)
    assert timestamp_ns(ts) == 1_649_574_000_123_456_789
    assert ts.nanosecond == 789
    assert ts.tzinfo is not None
    assert ts != Timestamp.from_ns(1_649_574_000_123_456_788)
    assert ts == Timestamp.from_ns(1_649_574_000_123_456_789)
    before_epoch = Timestamp.from_ns(-1)
    assert timestamp_ns(before_epoch) == -1
    naive = dt.datetime.fromtimestamp(1_649_574_000)  # naive: local time, as in Broker
    assert timestamp_ns(naive) == 1_649_574_000_000_000_000


def test_timespans_keep_nanoseconds() -> None:
    span = Timespan.from_ns(-1_500_000_001)
    assert timespan_ns(span) == -1_500_000_001
    assert span.nanoseconds == 999
    assert timespan_ns(dt.timedelta(seconds=1.5)) == 1_500_000_000
    assert Timespan.from_ns(5) != Timespan.from_ns(6)


def test_from_py_normalises_lists_and_nesting() -> None:
    value = from_py([1, [2, {3}], {"k": [4]}])
    assert value == (1, (2, {3}), {"k": (4,)})
    assert isinstance(value[1], tuple)
    nested_set = from_py({(1, 2), frozenset({3})})
    assert (1, 2) in nested_set and frozenset({3}) in nested_set
    table_key = from_py({(1, frozenset({2})): [3]})
    assert table_key == {(1, frozenset({2})): (3,)}


def test_from_py_rejects_deep_nesting() -> None:
    deep: object = 1
    for _ in range(100):
        deep = [deep]
    with pytest.raises(ValueError, match="more than 64 containers"):
        from_py(deep)
    ok: object = 1
    for _ in range(64):
        ok = [ok]
    from_py(ok)
    with pytest.raises(ValueError, match="more than 64"):
        from_py([ok])


def test_freeze_makes_hashable_values() -> None:
    frozen = freeze({"a": {1, 2}, "b": [1, {"c": 2}]})
    assert isinstance(frozen, FrozenTable)
    hash(frozen)
    assert frozen["a"] == frozenset({1, 2})
    assert frozen["b"] == (1, FrozenTable({"c": 2}))
    with pytest.raises(TypeError):
        frozen["x"] = 1  # type: ignore[index]


def test_total_order_by_type_then_value() -> None:
    values = [
        (1, 2),
        {"a": 1},
        frozenset({1}),
        Enum("e"),
        dt.timedelta(0),
        Timestamp.from_ns(0),
        Port(1, Port.TCP),
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_address("10.0.0.1"),
        "a",
        1.5,
        -3,
        Count(2),
        True,
        None,
    ]
    ordered = sorted(values, key=sort_key)
    assert [type_of(v) for v in ordered] == sorted(type_of(v) for v in values)
    assert sorted([Count(3), Count(1), Count(2)], key=sort_key) == [1, 2, 3]
    assert sort_key(float("nan")) > sort_key(float("inf"))
    assert Data({1, 2}) == Data(frozenset({2, 1}))
    assert Data(1) < Data("a")


def test_data_to_py_roundtrip() -> None:
    assert Data.to_py(Data([1, "x"])) == (1, "x")
    assert Data.from_py(5).value == 5
    assert hash(Data({1: 2})) == hash(Data({1: 2}))
