"""Store value operations: Broker's add, subtract and index semantics, with type checks."""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
from collections.abc import Iterator

import pytest

from broker_spark.data.types import Count, DataType, Timespan, Timestamp
from broker_spark.errors import EC, StoreError
from broker_spark.store import ops
from broker_spark.store.commands import NIL, AddCommand, SubtractCommand
from broker_spark.store.ops import MISSING, add_value, index_value, subtract_value

SEC = 10**9


@contextlib.contextmanager
def _raises(code: EC) -> Iterator[None]:
    """Expect a StoreError with exactly this code."""
    with pytest.raises(StoreError) as info:
        yield
    assert info.value.code is code, f"expected {code.name}, got {info.value.code.name}"


# -- increment / decrement -----------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "amount", "expected"),
    [
        (Count(1), Count(2), Count(3)),
        (5, 3, 8),
        (1.5, 0.25, 1.75),
        (Timespan.from_ns(5), Timespan.from_ns(7), Timespan.from_ns(12)),
        (Timestamp.from_ns(SEC), Timespan.from_ns(SEC), Timestamp.from_ns(2 * SEC)),
    ],
)
def test_increment_and_decrement_numbers(start, amount, expected) -> None:
    cmd = ops.increment("k", amount)
    got = add_value(start, cmd.value, cmd.init_type)
    assert got == expected and type(got) is type(expected)
    back = subtract_value(got, ops.decrement("k", amount).value)
    assert back == start and type(back) is type(start)


def test_increment_on_a_missing_key_starts_from_the_init_type() -> None:
    assert add_value(MISSING, Count(5), ops.increment("k", Count(5)).init_type) == Count(5)
    assert type(add_value(MISSING, 5, DataType.Integer)) is int
    assert add_value(MISSING, 2.5, DataType.Real) == 2.5
    span = Timespan.from_ns(SEC)
    cmd = ops.increment("k", span)
    assert cmd.init_type is DataType.Timestamp  # as Broker: a timespan amount starts a timestamp
    assert add_value(MISSING, span, cmd.init_type) == Timestamp.from_ns(SEC)


def test_count_and_integer_arithmetic_wrap_like_cpp() -> None:
    assert subtract_value(Count(0), Count(1)) == Count(2**64 - 1)
    assert add_value(Count(2**64 - 1), Count(2), DataType.Count) == Count(1)
    assert add_value(2**63 - 1, 1, DataType.Integer) == -(2**63)


@pytest.mark.parametrize(
    ("start", "amount"),
    [
        ("text", 1),  # increment on a string
        (Count(1), 1),  # integer amount on a count
        (1, Count(1)),
        (1, 1.0),
        (True, 1),
        (1.0, Timespan.from_ns(1)),
        (Timestamp.from_ns(0), 5),
    ],
)
def test_increment_with_the_wrong_type_is_a_type_clash(start, amount) -> None:
    init = ops.increment_init_type(amount)
    with _raises(EC.TypeClash):
        add_value(start, amount, init)
    with _raises(EC.TypeClash):
        subtract_value(start, amount)


def test_increment_builders_refuse_non_numeric_amounts() -> None:
    with _raises(EC.TypeClash):
        ops.increment("k", "x")
    with _raises(EC.TypeClash):
        ops.decrement("k", (1,))
    with _raises(EC.TypeClash):
        add_value(MISSING, "x", DataType.None_)  # Broker: no init type, no new key


def test_decrement_on_a_missing_key_is_no_such_key() -> None:
    with _raises(EC.NoSuchKey):
        subtract_value(MISSING, 1)


# -- strings ------------------------------------------------------------------------


def test_append() -> None:
    cmd = ops.append("k", "bar")
    assert cmd == AddCommand("k", "bar", DataType.String, None, NIL)
    assert add_value("foo", "bar", DataType.String) == "foobar"
    assert add_value(MISSING, "bar", DataType.String) == "bar"
    assert add_value(b"\xff", "a", DataType.String) == b"\xffa"
    with _raises(EC.TypeClash):
        ops.append("k", 5)
    with _raises(EC.TypeClash):
        add_value(5, "x", DataType.String)  # append to a number
    with _raises(EC.TypeClash):
        add_value((1,), "x", DataType.String)  # append to a vector: stricter than Broker
    with _raises(EC.TypeClash):
        subtract_value("abc", "c")


# -- sets and tables ---------------------------------------------------------------------


def test_insert_into_and_remove_from_a_set() -> None:
    cmd = ops.insert_into("s", 3)
    assert cmd.init_type is DataType.Set
    start = {1, 2}
    grown = add_value(start, cmd.value, cmd.init_type)
    assert grown == {1, 2, 3} and start == {1, 2}  # the input is never modified
    assert add_value(MISSING, 3, DataType.Set) == {3}
    assert add_value(set(), (1, 2), DataType.Set) == {(1, 2)}
    assert add_value(set(), {1}, DataType.Set) == {frozenset({1})}  # nested sets become hashable
    shrunk = subtract_value(grown, ops.remove_from("s", 2).value)
    assert shrunk == {1, 3}
    assert subtract_value(shrunk, 99) == {1, 3}  # absent: nothing to do


def test_insert_into_and_remove_from_a_table() -> None:
    cmd = ops.insert_into("t", "k", 1)
    assert cmd.init_type is DataType.Table and cmd.value == ("k", 1)
    table = add_value({"a": 0}, cmd.value, cmd.init_type)
    assert table == {"a": 0, "k": 1}
    assert add_value(table, ("k", 2), DataType.Table)["k"] == 2
    assert add_value(MISSING, ("x", None), DataType.Table) == {"x": None}
    assert subtract_value(table, "a") == {"k": 1}


def test_insert_into_with_the_wrong_shapes() -> None:
    with _raises(EC.TypeClash):
        add_value((1, 2), 3, DataType.Set)  # insert_into on a vector
    with _raises(EC.TypeClash):
        add_value((1, 2), (0, 3), DataType.Table)  # table insert on a vector
    with _raises(EC.TypeClash):
        add_value({1}, ("k", 1), DataType.Table)  # table insert on a set
    with _raises(EC.TypeClash):
        add_value({"a": 1}, "k", DataType.Table)  # not a (key, value) pair
    with _raises(EC.InvalidData):
        add_value({"a": 1}, ("k", 1, 2), DataType.Table)
    with _raises(EC.TypeClash):
        add_value("text", 1, DataType.Set)
    with _raises(EC.TypeClash):
        subtract_value(5, Count(1))  # remove_from on an integer


# -- vectors -----------------------------------------------------------------------------


def test_push_and_pop() -> None:
    cmd = ops.push("v", "x")
    assert cmd.init_type is DataType.Vector
    vec = add_value(MISSING, "x", cmd.init_type)
    assert vec == ("x",)
    vec = add_value(vec, (1, 2), DataType.Vector)
    assert vec == ("x", (1, 2))
    pop = ops.pop("v")
    assert pop == SubtractCommand("v", "v", None, NIL)  # Broker sends the key as operand
    assert subtract_value(vec, pop.value) == ("x",)
    assert subtract_value((), pop.value) == ()  # popping an empty vector does nothing
    with _raises(EC.TypeClash):
        add_value({1}, 2, DataType.Vector)  # push onto a set: stricter than Broker
    with _raises(EC.TypeClash):
        add_value((1,), 1, DataType.Integer)  # increment a vector


# -- get_index_from_value ----------------------------------------------------------------


def test_get_index_from_value() -> None:
    assert index_value({1, 2}, 2) is True
    assert index_value({1, 2}, 3) is False
    assert index_value({(1, 2)}, [1, 2]) is True
    assert index_value({"a": 1}, "a") == 1
    assert index_value(("a", "b"), Count(1)) == "b"
    assert index_value(("a", "b"), 0) == "a"
    assert index_value(42, "anything") == 42  # not a container: the value itself, as Broker
    with _raises(EC.NoSuchKey):
        index_value({"a": 1}, "b")
    with _raises(EC.NoSuchKey):
        index_value(("a",), 1)
    with _raises(EC.TypeClash):
        index_value(("a",), "0")
    with _raises(EC.TypeClash):
        index_value(("a",), -1)
    with _raises(EC.TypeClash):
        index_value(("a",), True)


def test_defaults_follow_brokers_from_type() -> None:
    assert ops.default_value(DataType.Count) == Count(0)
    assert ops.default_value(DataType.String) == ""
    assert ops.default_value(DataType.Address) == ipaddress.IPv6Address(0)
    assert ops.default_value(DataType.Timestamp) == dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    assert ops.default_value(DataType.Vector) == ()
    with _raises(EC.TypeClash):
        ops.default_value(DataType.None_)


def test_values_without_a_broker_type_are_a_type_clash() -> None:
    with _raises(EC.TypeClash):
        add_value((), object(), DataType.Vector)
    with _raises(EC.TypeClash):
        ops.push("v", object())
