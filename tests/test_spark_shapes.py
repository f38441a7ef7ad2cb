"""Zeek JSON of payloads in bulk, by shape (``shape_json``), equals the per-row path."""

from __future__ import annotations

import ipaddress
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_spark import zeek
from broker_spark.columnar import record_batches as schema_module
from broker_spark.columnar.binary_json import binary_to_json, event_to_json
from broker_spark.columnar.record_batches import RecordConversionError, RecordConverter
from broker_spark.columnar.shape_json import MAX_SHAPES, MIN_GROUP, build_shape, json_columns
from broker_spark.data.binary import encode
from broker_spark.data.msgpack_records import Record, pack_records
from broker_spark.data.types import Count, Enum, Port, Timespan, Timestamp
from broker_spark.errors import BrokerError
from tests.strategies import broker_values

TS = Timestamp.from_ns(1_600_000_000_987_654_321)


def event(name: str, *args: Any, **kw: Any) -> tuple:
    return zeek.Event(name, *args, **kw).as_data()


def records(payloads: list[bytes], first: int = 0) -> list[Record]:
    return [Record("/t", p, "node", 1_000 + i, first + i) for i, p in enumerate(payloads)]


def variants(payload: bytes, n: int, rnd: random.Random, want_event: bool = False) -> list[bytes]:
    """``payload`` with the bytes of its holes replaced at random (the same shape)."""
    shape = build_shape(payload, want_event)
    if shape is None:
        return [payload] * n
    out = []
    for _ in range(n):
        b = bytearray(payload)
        for h in shape.holes:
            if h.tag == 5:  # mostly safe text, sometimes quotes, escapes, non-UTF-8 bytes
                pool = b"abcXYZ09 -._" if rnd.random() < 0.7 else bytes(range(256))
                b[h.pos : h.pos + h.size] = bytes(rnd.choice(pool) for _ in range(h.size))
            elif rnd.random() < 0.05:  # anything, valid or not
                b[h.pos : h.pos + h.size] = rnd.randbytes(h.size)
            elif h.tag == 9:  # timestamps near now
                ns = rnd.randrange(0, 4_000_000_000 * 10**9)
                b[h.pos : h.pos + 8] = ns.to_bytes(8, "big")
            elif h.tag == 8:  # a port and a valid protocol
                b[h.pos : h.pos + 3] = rnd.randbytes(2) + bytes((rnd.randrange(4),))
            elif h.tag == 7:  # a subnet with a valid length
                b[h.pos : h.pos + 17] = rnd.randbytes(16) + bytes((rnd.randrange(96, 129),))
            else:
                b[h.pos : h.pos + h.size] = rnd.randbytes(h.size)
        out.append(bytes(b))
    return out


def reference(payloads: list[bytes], want_event: bool) -> list[tuple]:
    out = []
    for p in payloads:
        try:
            out.append(event_to_json(p) if want_event else (binary_to_json(p), None, None))
        except BrokerError:
            out.append((None, None, None))
    return out


def check(payloads: list[bytes], want_event: bool) -> RecordConverter:
    conv = RecordConverter(fmt="zeek" if want_event else "default")
    batch = conv.convert_packed(pack_records(records(payloads)), len(payloads))
    expected = reference(payloads, want_event)
    got = batch.to_pydict()
    assert got["data"] == [e[0] for e in expected]
    if want_event:
        assert got["event"] == [e[1] for e in expected]
        assert got["args"] == [e[2] for e in expected]
    assert got["offset"] == list(range(len(payloads)))
    assert conv.undecodable == sum(e[0] is None for e in expected)
    return conv


CONN = event(
    "connection_state_remove",
    ("CHhAvVGS1DHFjwGM9", ipaddress.ip_address("10.0.0.1"), Port(443, Port.TCP)),
    TS,
    Timespan.from_ns(1_500_000),
    Count(7),
    -3,
    2.5,
    True,
    None,
    Enum("Conn::LOG"),
    ipaddress.ip_network("10.0.0.0/8"),
    {1, 2},
    {"k": "v"},
    "",
)


@pytest.mark.parametrize("want_event", [False, True])
def test_one_shape_in_bulk_equals_per_row(want_event: bool) -> None:
    rnd = random.Random(1)
    payloads = variants(encode(CONN), 300, rnd, want_event)
    bulk = json_columns(payloads, want_event)
    assert len(bulk.groups) >= 1 and len(bulk.rest) < 300  # the bulk path did the work
    check(payloads, want_event)


@pytest.mark.parametrize("want_event", [False, True])
def test_mixed_shapes_lengths_and_bad_rows(want_event: bool) -> None:
    rnd = random.Random(2)
    shapes = [
        encode(CONN),
        encode(event("ping", "hello", Count(3))),
        encode(event("pong", "hello", Count(3))),  # same length as ping: another name
        encode(event("meta", 1, metadata={zeek.MetadataType.NetworkTimestamp: TS})),
        encode(event("flag", True)),
        encode(event("flag", False)),  # differs in a boolean: another shape, same length
        encode((Count(1), Count(1), ("four", (1,)), "extra")),  # not the usual event layout
        encode((Count(2), Count(1), ("x", (1,)))),  # looks like an event head, is not one
        encode(("a record", 1, 2.0)),
        encode(Count(5)),
        encode("x" * 300),
    ]
    payloads: list[bytes] = []
    for p in shapes:
        payloads += variants(p, rnd.randrange(1, 60), rnd, want_event)
    payloads += [b"\x63", encode(event("ping", "x"))[:-1]]  # undecodable
    rnd.shuffle(payloads)
    conv = check(payloads, want_event)
    assert conv.undecodable >= 2


def test_many_shapes_of_one_length_leave_the_rest_to_the_per_row_path() -> None:
    payloads = [encode((Enum(f"E{i:02d}"), Count(i))) for i in range(MAX_SHAPES + 4)] * MIN_GROUP
    bulk = json_columns(payloads)
    assert len(bulk.groups) == MAX_SHAPES and bulk.rest
    check(payloads, False)


def test_small_groups_and_refused_shapes_go_per_row() -> None:
    deep: Any = 1
    for _ in range(40):
        deep = (deep,)
    payloads = [encode(Count(i)) for i in range(MIN_GROUP - 1)] + [encode(deep)] * MIN_GROUP
    bulk = json_columns(payloads)
    assert not bulk.groups and bulk.rest == list(range(len(payloads)))
    check(payloads, False)


def test_failfast_names_the_first_bad_offset() -> None:
    payloads = [encode(event("ping", "a", Count(i))) for i in range(40)]
    payloads[17] = b"\x63"
    payloads[30] = b"\x0e\x80"
    conv = RecordConverter(mode="FAILFAST")
    with pytest.raises(RecordConversionError, match="offset 117"):
        conv.convert_packed(pack_records(records(payloads, first=100)), 40)


def test_chunks_give_the_same_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    rnd = random.Random(3)
    payloads = variants(encode(CONN), 50, rnd) + variants(encode(event("e", 1)), 50, rnd)
    monkeypatch.setattr(schema_module, "_CHUNK_BYTES", 1000)
    assert len(schema_module._chunk_bounds(payloads)) > 5
    check(payloads, True)
    check(payloads, False)


def test_a_record_count_that_does_not_match_is_malformed() -> None:
    packed = pack_records(records([encode(1), encode(2)]))
    conv = RecordConverter()
    assert conv.convert_packed(packed, 2).num_rows == 2
    for count in (1, 3, 0):
        with pytest.raises(BrokerError):
            conv.convert_packed(packed, count)


@settings(max_examples=60, deadline=None)
@given(value=broker_values(max_depth=3, max_size=4), seed=st.integers(0, 2**32))
def test_generated_values_in_bulk_equal_per_row(value: Any, seed: int) -> None:
    rnd = random.Random(seed)
    payload = encode(value)
    payloads = variants(payload, MIN_GROUP + 4, rnd) + [payload]
    check(payloads, False)


@settings(max_examples=60, deadline=None)
@given(
    name=st.text(max_size=10),
    args=st.lists(broker_values(max_depth=2, max_size=3), max_size=4),
    stamp=st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    seed=st.integers(0, 2**32),
)
def test_generated_events_in_bulk_equal_per_row(
    name: str, args: list, stamp: int | None, seed: int
) -> None:
    metadata = None if stamp is None else {Count(1): Timestamp.from_ns(stamp), Count(200): "x"}
    payload = encode(event(name, *args, metadata=metadata))
    payloads = variants(payload, MIN_GROUP + 4, random.Random(seed), True)
    check(payloads, True)
