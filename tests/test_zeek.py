"""Zeek events: the vector Zeek sends, Broker's Python ``broker.zeek`` API, JSON and binary."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_spark.data import Count, Data, Enum, Port, from_py
from broker_spark.data.json_codec import (
    decode_client_message,
    dumps_value,
    encode_data_message,
    loads_value,
)
from broker_spark.errors import DecodeError
from broker_spark.zeek import (
    PROTOCOL_VERSION,
    Event,
    Message,
    MessageType,
    MetadataType,
    SafeEvent,
    event_name_and_args,
    is_event,
    message_type,
)

TS = dt.datetime(2022, 4, 10, 7, 0, tzinfo=dt.timezone.utc)


def test_an_event_is_the_vector_zeek_sends() -> None:
    ev = Event("ping", "hello", 42, [Count(1), {"k": 1}])
    assert ev.as_data() == (Count(1), Count(1), ("ping", ("hello", 42, (Count(1), {"k": 1}))))
    assert [type(x) for x in ev.as_data()[:2]] == [Count, Count]
    assert ev.valid()
    assert ev.type() is MessageType.Event
    assert ev.name() == "ping"
    assert ev.args() == ["hello", 42, (Count(1), {"k": 1})]
    assert ev.metadata() is None
    assert ev.ts() is None
    assert PROTOCOL_VERSION == 1


def test_an_event_without_arguments() -> None:
    ev = Event("zeek_init")
    assert ev.as_data() == (Count(1), Count(1), ("zeek_init", ()))
    assert ev.args() == []


def test_metadata_as_mapping_or_pairs_with_int_keys_made_counts() -> None:
    ev = Event("e", 1, metadata={MetadataType.NetworkTimestamp: TS, 200: "user"})
    assert ev.as_data()[2][2] == ((Count(1), TS), (Count(200), "user"))
    assert all(type(k) is Count for k, _ in ev.metadata())
    assert ev.metadata() == [(Count(1), TS), (Count(200), "user")]
    assert ev.ts() == TS
    assert Event("e", metadata=[(1, TS)]).metadata() == [(Count(1), TS)]
    # An empty metadata vector (what Zeek 8 sends) reads as no metadata.
    assert Event("e", metadata=[]).metadata() is None
    assert Event("e", metadata=[]).valid()


def test_the_network_timestamp_must_be_a_timestamp() -> None:
    assert not Event("e", metadata={1: "not a time"}).valid()
    assert Event("e", metadata={2: "anything"}).valid()


def test_wrapping_received_data() -> None:
    raw = [Count(1), Count(1), ["hello", [Count(3)], []]]
    ev = Event(raw)
    assert ev.valid()
    assert (ev.name(), ev.args(), ev.metadata()) == ("hello", [Count(3)], None)
    assert Event(Data(raw)) == ev
    assert Event(ev) == ev


@pytest.mark.parametrize(
    "data",
    [
        (Count(1), Count(2), ("stream", "writer")),  # a log-create, not an event
        (1, 1, ("e", ())),  # integers, not counts
        (Count(2), Count(1), ("e", ())),  # unknown format
        (Count(1), Count(1), ("e",)),  # no arguments
        (Count(1), Count(1), (42, ())),  # name not a string
        (Count(1), Count(1), ("e", "args")),  # arguments not a vector
        (Count(1), Count(1), ("e", (), "meta")),  # metadata not a vector
        (Count(1), Count(1), ("e", (), ((1, TS),))),  # metadata key not a count
        (Count(1), Count(1), ("e", (), ((Count(1), TS, 3),))),  # not a pair
        (Count(1), Count(1)),
        (Count(1), Count(1), "e"),
        "e",
        None,
    ],
)
def test_invalid_events_are_recognised(data: Any) -> None:
    ev = Event(Data(data))  # Data, so that a plain string is data and not a name
    assert not ev.valid()
    assert not is_event(data)
    assert event_name_and_args(data) is None
    for getter in (ev.name, ev.args, ev.metadata):
        with pytest.raises(DecodeError, match="invalid Event"):
            getter()
    with pytest.raises(ValueError):  # what the real bindings raise
        ev.name()


def test_message_types() -> None:
    assert message_type(Event("e")) is MessageType.Event
    assert message_type((Count(1), Count(3), ())) is MessageType.LogWrite
    assert message_type((Count(1), Count(5), ())) is MessageType.Batch
    assert message_type((Count(1), Count(6), ())) is MessageType.Invalid
    assert message_type((Count(1), 1, ())) is MessageType.Invalid
    assert message_type("x") is MessageType.Invalid
    assert [m.value for m in MessageType] == [0, 1, 2, 3, 4, 5]
    assert Message((Count(1), Count(4), ("id", 1))).type() is MessageType.IdentifierUpdate
    assert MetadataType.UserMetadataStart == 200


def test_helpers_accept_plain_values_data_and_events() -> None:
    ev = Event("conn", Port(80, Port.TCP), Enum("T"))
    for form in (ev, ev.as_data(), Data(ev.as_data()), list(ev.as_data())):
        assert is_event(form)
        assert event_name_and_args(form) == ("conn", (Port(80, Port.TCP), Enum("T")))
    assert event_name_and_args((Count(1), Count(1), (b"\xffx", ()))) == ("\\xffx", ())


def test_an_event_converts_like_its_vector() -> None:
    ev = Event("e", 1, {2})
    assert from_py(ev) == ev.as_data()
    assert Data(ev).value == ev.as_data()
    assert str(Data(ev)) == "(1, 1, (e, (1, {2})))"
    assert dumps_value(ev) == dumps_value(ev.as_data())
    assert list(ev) == list(ev.as_data())
    assert len(ev) == 3


def test_event_json_matches_the_documented_example() -> None:
    text = encode_data_message("/foo/bar", Event("event_1", 42, "test"))
    assert json.loads(text) == {
        "type": "data-message",
        "topic": "/foo/bar",
        "@data-type": "vector",
        "data": [
            {"@data-type": "count", "data": 1},
            {"@data-type": "count", "data": 1},
            {
                "@data-type": "vector",
                "data": [
                    {"@data-type": "string", "data": "event_1"},
                    {
                        "@data-type": "vector",
                        "data": [
                            {"@data-type": "integer", "data": 42},
                            {"@data-type": "string", "data": "test"},
                        ],
                    },
                ],
            },
        ],
    }


def test_an_event_from_zeek_8s_websocket_reads_back() -> None:
    text = (
        '{"type":"data-message","topic":"zeek.test","@data-type":"vector","data":['
        '{"@data-type":"count","data":1},{"@data-type":"count","data":1},'
        '{"@data-type":"vector","data":[{"@data-type":"string","data":"hello"},'
        '{"@data-type":"vector","data":[{"@data-type":"count","data":374}]},'
        '{"@data-type":"vector","data":[]}]}]}'
    )
    topic, value = decode_client_message(text)
    ev = Event(value)
    assert (topic, ev.name(), ev.args(), ev.metadata()) == (
        "zeek.test",
        "hello",
        [Count(374)],
        None,
    )
    assert json.loads(encode_data_message(topic, ev)) == json.loads(text)


def test_nested_arguments_and_metadata_survive_json() -> None:
    ev = Event(
        "nested",
        {"a": (Count(1), [2.5, None])},
        {frozenset({1, 2})},
        (),
        metadata={1: TS, 250: {"x": Enum("Y")}},
    )
    back = Event(loads_value(dumps_value(ev)))
    assert back == ev
    assert back.valid()
    assert back.ts() == TS


def test_event_binary_encoding_has_count_tags() -> None:
    binary = pytest.importorskip("broker_spark.data.binary")
    raw = binary.encode(Event("all_types", None))
    count_1 = bytes.fromhex("02 0000000000000001")
    assert raw.startswith(bytes.fromhex("0e03") + count_1 + count_1 + bytes.fromhex("0e02"))
    assert raw[22:33] == b"\x05\x09all_types"
    assert Event(binary.decode(raw)) == Event("all_types", None)


def test_safe_event_arguments_are_hashable() -> None:
    ev = SafeEvent("e", {1: {2}}, [{3}])
    args = ev.args()
    assert hash(tuple(args)) is not None
    assert args[0] == {1: frozenset({2})}


def test_construction_errors() -> None:
    with pytest.raises(TypeError):
        Event()
    with pytest.raises(TypeError):
        Event(b"name", 1)
    with pytest.raises(ValueError):
        Event("e", Count(1), metadata={-1: 2})
    with pytest.raises(TypeError):
        Event("e", object())


def test_repr_and_equality() -> None:
    ev = Event("e", 1, metadata={1: TS})
    assert repr(ev).startswith("Event('e', 1, metadata=[(Count(1), ")
    assert ev == Event("e", 1, metadata={1: TS})
    assert ev != Event("e", 2)
    assert repr(Event("x")) == "Event('x')"
    assert repr(Event((Count(1),))) == "Event((Count(1),))"


_args = st.lists(
    st.one_of(
        st.integers(-(2**63), 2**63 - 1),
        st.integers(0, 2**64 - 1).map(Count),
        st.text(max_size=8),
        st.none(),
        st.booleans(),
        st.lists(st.integers(0, 9), max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=3), st.integers(0, 9), max_size=3),
        st.sets(st.text(max_size=3), max_size=3),
    ),
    max_size=6,
)


@given(st.text(min_size=1, max_size=20), _args)
def test_events_round_trip_through_json(name: str, args: list) -> None:
    ev = Event(name, *args)
    topic, value = decode_client_message(encode_data_message("/t", ev))
    back = Event(value)
    assert back.valid()
    assert back.name() == name
    assert back.args() == ev.args()
    assert [type(a) for a in back.args()] == [type(a) for a in ev.args()]
    assert event_name_and_args(value) == (name, tuple(ev.args()))
