"""The parts of Broker's Python bindings around ``Data``: typed accessors, container views,
``Timespan``/``Timestamp`` constructors, ``Data.Type`` aliases, naive datetimes."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import time
from collections.abc import Iterator

import pytest

import broker_spark as broker
from broker_spark.data import Count, Data, DataType, Port, RawData, Timespan, Timestamp


def test_timespan_takes_nanoseconds_or_seconds_as_brokers_bindings() -> None:
    assert Timespan(1000) == dt.timedelta(microseconds=1)
    assert Timespan(-42 * 10**9) == dt.timedelta(seconds=-42)
    assert Timespan(1.5) == dt.timedelta(seconds=1.5)
    assert Timespan(7).nanoseconds == 7
    assert Timespan(0, 5) == dt.timedelta(seconds=5)  # several arguments: timedelta's
    with pytest.raises(ValueError, match="finite"):
        Timespan(float("nan"))


def test_timestamp_takes_seconds_since_the_epoch() -> None:
    assert Timestamp(1.5) == dt.datetime(1970, 1, 1, 0, 0, 1, 500000, tzinfo=dt.timezone.utc)
    assert Timestamp(86400) == dt.datetime(1970, 1, 2, tzinfo=dt.timezone.utc)
    assert Timestamp(2024, 1, 1, tzinfo=broker.utc).year == 2024  # datetime's arguments


def test_count_value_and_utc() -> None:
    assert Count(5).value == 5 and type(Count(5).value) is int
    assert broker.utc is dt.timezone.utc


def test_data_type_nil_and_none_name_none() -> None:
    assert Data(None).get_type() == Data.Type.Nil
    assert getattr(Data.Type, "None") is DataType.None_
    assert {"Nil", "None", "None_"} <= set(Data.Type.__members__)


@pytest.mark.parametrize(
    ("value", "accessor"),
    [
        (True, "as_boolean"),
        (Count(3), "as_count"),
        (-3, "as_integer"),
        (1.5, "as_real"),
        ("s", "as_string"),
        (ipaddress.ip_address("::1"), "as_address"),
        (ipaddress.ip_network("10.0.0.0/8"), "as_subnet"),
        (Port(80, Port.TCP), "as_port"),
        (dt.timedelta(seconds=1), "as_timespan"),
        (broker.Enum("x"), "as_enum_value"),
    ],
)
def test_typed_accessors(value: object, accessor: str) -> None:
    assert getattr(Data(value), accessor)() == value
    with pytest.raises(TypeError, match="holds a"):
        getattr(Data(None if value is not None else 1), accessor)()


def test_set_view_iterates_in_brokers_order_and_edits_the_data() -> None:
    d = Data({3, 1, 2})
    elements = list(d.as_set())
    assert [str(x) for x in elements] == ["1", "2", "3"]
    assert all(type(x) is RawData for x in elements)  # not broker.Data, as in the bindings
    assert [Data.to_py(x) for x in elements] == [1, 2, 3]
    view = d.as_set()
    assert str(view) == "Set{1, 2, 3}"
    view.remove(Data(2))
    assert str(view) == "Set{1, 3}" and str(d) == "{1, 3}"
    with pytest.raises(KeyError):
        view.remove(Data(7))
    view.clear()
    assert str(view) == "Set{}" and Data.to_py(d) == set()


def test_table_view_looks_up_by_data_keys() -> None:
    d = Data({True: 42, Port(22, Port.TCP): False, (1, 2, 3): [4, 5, 6], Count(13): "test"})
    t = d.as_table()
    assert str(t[Data((1, 2, 3))]) == "(4, 5, 6)"
    assert Data.to_py(t[Data(Count(13))]) == "test"
    assert [(str(k), str(v)) for k, v in Data({"b": 2, "a": 1}).as_table().items()] == [
        ("a", "1"),
        ("b", "2"),
    ]
    t[Data("new")] = 1
    assert Data.to_py(d)["new"] == 1


def test_vector_view_nests_and_converts_back() -> None:
    d = Data(["foo", [[True]], ipaddress.IPv6Address("::1"), None])
    v = d.as_vector()
    inner = v[1].as_vector()
    assert str(Data(inner)) == "((T))"
    assert Data.to_py(v[1]) == ((True,),)
    assert v[3].get_type() == Data.Type.Nil
    v.append(5)
    assert Data.to_py(d)[-1] == 5


@pytest.fixture
def new_york() -> Iterator[None]:
    old = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    try:
        yield
    finally:
        if old is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = old
        time.tzset()


def test_a_naive_datetime_is_local_time(new_york: None) -> None:
    from broker_spark.data import binary
    from broker_spark.data.json_codec import dumps_value
    from broker_spark.data.msgpack_records import pack_value, unpack_value

    naive = dt.datetime(2024, 1, 1, 12)  # noon in New York is 17:00 UTC
    utc = dt.datetime(2024, 1, 1, 17, tzinfo=dt.timezone.utc)
    assert Data.to_py(Data(naive)) == utc
    assert binary.decode(binary.encode(naive)) == utc
    assert unpack_value(pack_value(naive)) == utc
    assert '"2024-01-01T17:00:00.000"' in dumps_value(naive)
