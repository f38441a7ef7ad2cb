"""Zeek script types and event signatures: Zeek's syntax in, the same syntax out.

Hypothesis draws types of every kind nested freely (sets and tables with
composite indexes, vectors, inline records with attributes, enums) and
checks that rendering and parsing are inverse; arbitrary text is either a
signature or a :class:`SignatureError`, never another exception. Then the
typed values: each converter against the Broker value Zeek would send,
and the receiving side's check (``conforms``) against what it accepts.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_spark.data.types import Count, Enum, Port, Timespan, Timestamp
from broker_spark.errors import EncodeError
from broker_spark.zeek.script_types import (
    BASIC_TYPES,
    Basic,
    EnumType,
    EventSignature,
    Field,
    RecordType,
    SetType,
    SignatureError,
    TableType,
    VectorType,
    parse_signature,
    parse_type,
)
from broker_spark.zeek.typed_values import conforms, convert, event_conforms

_WORDS = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True).filter(
    lambda w: (
        w
        not in {
            "set",
            "table",
            "vector",
            "of",
            "record",
            "enum",
            "type",
            "event",
            "global",
            "module",
            "export",
            "file",
            "func",
            "function",
            "opaque",
            "hook",
            *BASIC_TYPES,
        }
    )
)
_NAMES = st.one_of(_WORDS, st.tuples(_WORDS, _WORDS).map(lambda p: f"{p[0].title()}::{p[1]}"))
_LEAVES = st.one_of(
    st.sampled_from(BASIC_TYPES).map(Basic),
    st.just(EnumType()),
    st.lists(_NAMES, min_size=1, max_size=3, unique=True).map(lambda n: EnumType(tuple(n))),
)


def _fields(children: st.SearchStrategy[Any], min_size: int = 0) -> st.SearchStrategy[tuple]:
    field = st.builds(
        Field,
        _WORDS,
        children,
        st.booleans(),
        st.one_of(
            st.none(), st.sampled_from(["7", '"x"', "T", "Holdout::GREEN", "80/tcp", "set()"])
        ),
    )
    return st.lists(field, min_size=min_size, max_size=4, unique_by=lambda f: f.name).map(tuple)


def _composites(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    index = st.lists(children, min_size=1, max_size=3).map(tuple)
    return st.one_of(
        index.map(SetType),
        st.builds(TableType, index, children),
        children.map(VectorType),
        _fields(children, min_size=1).map(RecordType),
    )


TYPES = st.recursive(_LEAVES, _composites, max_leaves=12)
SIGNATURES = st.builds(EventSignature, _NAMES, _fields(TYPES))


@given(TYPES)
def test_every_type_renders_in_zeeks_syntax_and_parses_back(t: Any) -> None:
    assert parse_type(str(t)) == t


@given(SIGNATURES)
def test_every_signature_renders_and_parses_back(sig: EventSignature) -> None:
    assert parse_signature(str(sig)) == sig
    assert parse_signature(f"global {sig.name}: event{str(sig)[len(sig.name) :]};") == sig


@given(
    st.text(
        alphabet=st.sampled_from(list('ab:;,()[]{}&=# \n"set of record enum count')), max_size=60
    )
)
def test_any_text_is_a_signature_or_a_signature_error(text: str) -> None:
    with contextlib.suppress(SignatureError):
        parse_signature(text)


def test_declared_types_modules_and_builtins() -> None:
    sig = parse_signature(
        """
        module Site;                 # declarations scope as in Zeek
        type Color: enum { RED, GREEN };
        type Hit: record { who: addr; tags: string_set &default=string_set(); c: Color; };
        event seen(h: Hit, p: transport_proto, l: Log::ID)
        """
    )
    assert sig.name == "Site::seen"
    hit = sig.params[0].type
    assert isinstance(hit, RecordType) and hit.name == "Site::Hit"
    assert hit.fields[1] == Field("tags", SetType((Basic("string"),)), False, "string_set()")
    assert hit.fields[2].type == EnumType(("Site::RED", "Site::GREEN"))
    assert sig.params[1].type == EnumType(("unknown_transport", "tcp", "udp", "icmp"))
    assert sig.params[2].type == EnumType()
    assert parse_signature("GLOBAL::x(a: count)").name == "GLOBAL::x"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ev(a: Rec)", "unknown type 'Rec'"),
        ("ev(a: count", "expected ')' at the end"),
        ("ev(a: count, a: int)", "'a' is declared twice"),
        ("ev(f: file)", "type 'file' cannot be sent to Zeek"),
        ("event ev(a: count) { print a; }", "a handler body is not a signature"),
        ("ev(a: enum {})", "lists no names"),
        ("type T: record { a: count; }", "no event"),
        ("ev(a: count) ev2(b: count)", "two events given"),
        ("ev(a: count) @", "unexpected '@' at column 14"),
    ],
)
def test_signature_errors_say_what_and_where(text: str, message: str) -> None:
    with pytest.raises(SignatureError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_signature(text)


# --- values -----------------------------------------------------------------------------------

_REC = parse_type("record { a: count; b: string &optional; c: count &default=7; }")


@pytest.mark.parametrize(
    ("value", "zeek_type", "expected"),
    [
        (5, "count", Count(5)),
        ("18446744073709551615", "count", Count(2**64 - 1)),
        (Decimal(2**64 - 1), "count", Count(2**64 - 1)),
        (-5, "int", -5),
        (3, "double", 3.0),
        ("T", "bool", True),
        (1700000000.123456, "time", Timestamp.from_ns(1700000000123456000)),
        ("2023-11-14T22:13:20.123Z", "time", Timestamp.from_ns(1700000000123000000)),
        (1.5, "interval", Timespan.from_ns(1_500_000_000)),
        ("1500ms", "interval", Timespan.from_ns(1_500_000_000)),
        (dt.timedelta(days=-3), "interval", Timespan.from_ns(-3 * 86400 * 10**9)),
        ("[2001:db8::1]", "addr", ipaddress.ip_address("2001:db8::1")),
        ("10.1.2.3/8", "subnet", ipaddress.ip_network("10.0.0.0/8")),
        ("0/unknown", "port", Port(0, 0)),
        ({"port": 53, "proto": "udp"}, "port", Port(53, 2)),
        ("/ab+c/", "pattern", ("^?(ab+c)$?", "^?(.|\\n)*(ab+c)")),
        ("RED", "enum { M::RED, M::GREEN }", Enum("M::RED")),
        (
            [["10.0.0.1", "80/tcp"]],
            "set[addr, port]",
            {(ipaddress.ip_address("10.0.0.1"), Port(80, 1))},
        ),
        ([("k", 1)], "table[string] of count", {"k": Count(1)}),
        (
            [{"key": {"a": 1, "b": "x"}, "value": True}],
            "table[count, string] of bool",
            {(Count(1), "x"): True},
        ),
        ([[1, -2], []], "vector of vector of int", ((1, -2), ())),
        ({"A": 1}, _REC, (Count(1), None, None)),
        ([1, "x", 9], _REC, (Count(1), "x", Count(9))),
        (12345, "any", 12345),
    ],
)
def test_values_become_the_broker_data_zeek_sends(
    value: Any, zeek_type: Any, expected: Any
) -> None:
    t = parse_type(zeek_type) if isinstance(zeek_type, str) else zeek_type
    got = convert(value, t)
    assert got == expected
    assert type(got) is type(expected)
    assert conforms(got, t)


@pytest.mark.parametrize(
    ("value", "zeek_type", "message"),
    [
        (-1, "count", "-1 is out of range for a count"),
        (2**63, "int", "out of range for an int"),
        (True, "count", "True is not a count"),
        ("10.0.0.256", "addr", "'10.0.0.256' is not an addr"),
        (80, "port", "a port needs its protocol, as in 80/tcp"),
        ("BLUE", "enum { M::RED }", "'BLUE' is not one of M::RED"),
        ([1, None], "vector of count", "element 1 is null"),
        ({"b": "x"}, _REC, "field a is null \\(it is not &optional\\)"),
        ({"zz": 1}, _REC, "'zz' is not a field of"),
        ([("k", -1)], "table[string] of count", "\\['k'\\]: -1 is out of range"),
        ([[1]], "set[count, string]", "an index of 1 values"),
        (5, "string", "5 is not a string"),
    ],
)
def test_values_that_do_not_fit_say_where_and_why(value: Any, zeek_type: Any, message: str) -> None:
    t = parse_type(zeek_type) if isinstance(zeek_type, str) else zeek_type
    with pytest.raises(EncodeError, match=message):
        convert(value, t, "argument x")


def test_conforms_is_the_receiving_zeeks_check() -> None:
    sig = parse_signature("ev(c: count, a: addr, r: record { x: count; y: string &optional; })")
    ok = (Count(1), ipaddress.ip_address("10.0.0.1"), (Count(2), None))
    assert event_conforms(sig, "ev", ok)
    assert not event_conforms(sig, "ev", (1, ok[1], ok[2]))  # an integer is no count
    assert not event_conforms(sig, "ev", ok[:2])  # wrong argument count
    assert not event_conforms(sig, "other", ok)  # no such handler
    assert not event_conforms(sig, "ev", (Count(1), "10.0.0.1", ok[2]))  # text is no addr
