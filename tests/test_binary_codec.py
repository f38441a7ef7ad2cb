"""Broker's binary value encoding: hex vectors from WIRE.md, a real session, properties, fuzzing."""

from __future__ import annotations

import collections
import contextlib
import datetime as _dt
import enum
import ipaddress
import math
import random
import time
import types
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from recorded import VECTORS

from broker_spark.data.binary import (
    DEFAULT_LIMITS,
    DecodeLimits,
    decode,
    decode_from,
    encode,
    encode_into,
    encode_optional,
    encode_timespan_raw,
    encode_variant_header,
    read_optional,
    read_timespan_raw,
    read_variant_header,
)
from broker_spark.data.types import Count, Enum, FrozenTable, Port, Timespan, Timestamp
from broker_spark.data.value import Data
from broker_spark.errors import DecodeError
from broker_spark.protocol.framing import FrameDecoder
from broker_spark.protocol.wire_messages import (
    MSG_COMMAND,
    MSG_DATA,
    MSG_ORIGINATOR_ACK,
    MSG_RESPONDER_SYN_ACK,
    decode_handshake,
    decode_node_message,
)
from tests.strategies import (
    broker_values,
    byte_edits,
    hashable_values,
    mutate,
    real_bits,
    same_value,
    simple_values,
    utc,
)

V4 = ipaddress.IPv4Address
V6 = ipaddress.IPv6Address
U64_1 = "0000000000000001"


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


# -- hex vectors, written from WIRE.md ("Values") ------------------------------------

HEX_VECTORS: list[tuple[str, Any, str]] = [
    ("none", None, "00"),
    ("true", True, "01 01"),
    ("false", False, "01 00"),
    ("count 7", Count(7), "02 0000000000000007"),
    ("count max", Count(2**64 - 1), "02 ffffffffffffffff"),
    ("integer -7", -7, "03 fffffffffffffff9"),
    ("integer min", -(2**63), "03 8000000000000000"),
    ("integer max", 2**63 - 1, "03 7fffffffffffffff"),
    ("real 1.5", 1.5, "04 3ff8000000000000"),
    ("real -0.0", -0.0, "04 8000000000000000"),
    ("real inf", math.inf, "04 7ff0000000000000"),
    ("string s", "s", "05 01 73"),
    ("string empty", "", "05 00"),
    ("string utf-8", "é", "05 02 c3a9"),
    ("string 200 bytes", "a" * 200, "05 c801" + "61" * 200),
    ("string not utf-8", b"\xff\x00", "05 02 ff00"),
    ("address v4", V4("10.0.0.1"), "06 00000000000000000000ffff0a000001"),
    ("address v6", V6("2001:db8::1"), "06 20010db8000000000000000000000001"),
    ("subnet v4", ipaddress.IPv4Network("10.0.0.0/8"), "07 00000000000000000000ffff0a000000 68"),
    ("subnet v4 /0", ipaddress.IPv4Network("0.0.0.0/0"), "07 00000000000000000000ffff00000000 60"),
    ("subnet v6", ipaddress.IPv6Network("2001:db8::/32"), "07 20010db8000000000000000000000000 20"),
    ("port 80/tcp", Port(80, Port.TCP), "08 0050 01"),
    ("port 53/udp", Port(53, Port.UDP), "08 0035 02"),
    ("port 8/icmp", Port(8, Port.ICMP), "08 0008 03"),
    ("port 0/?", Port(0, Port.Unknown), "08 0000 00"),
    ("timestamp", Timestamp.from_ns(1649574000 * 10**9), "09 16e476d02cb86000"),
    ("timestamp ns", Timestamp.from_ns(1), "09 0000000000000001"),
    ("timestamp before epoch", Timestamp.from_ns(-1), "09 ffffffffffffffff"),
    ("timespan 1.5 s", Timespan.from_ns(1_500_000_000), "0a 0000000059682f00"),
    ("timespan -1 ns", Timespan.from_ns(-1), "0a ffffffffffffffff"),
    ("enum", Enum("A::B"), "0b 04 413a3a42"),
    ("set empty", set(), "0c 00"),
    ("set of counts", {Count(2), Count(1)}, "0c 02 02" + U64_1 + "02 0000000000000002"),
    ("set of integers", {2, -1}, "0c 02 03 ffffffffffffffff 03 0000000000000002"),
    ("set of strings", {"b", "a", "ab"}, "0c 03 0501 61 0502 6162 0501 62"),
    # Mixed types go by tag: none 0, count 2, integer 3, string 5.
    ("set mixed", {"a", 1, Count(3), None}, "0c 04 00 02 0000000000000003 03" + U64_1 + "0501 61"),
    ("table empty", {}, "0d 00"),
    ("table", {"k": Count(1)}, "0d 01 0501 6b 02" + U64_1),
    (
        "table key order",
        {"b": 2, "a": 1},
        "0d 02 0501 61 03" + U64_1 + "0501 62 03 0000000000000002",
    ),
    ("vector empty", (), "0e 00"),
    ("vector", (Count(1), "x"), "0e 02 02" + U64_1 + "0501 78"),
    ("vector 200 nones", (None,) * 200, "0e c801" + "00" * 200),
    ("nested", ((), {()}, {(): ()}), "0e 03 0e00 0c01 0e00 0d01 0e00 0e00"),
]


@pytest.mark.parametrize(
    ("value", "hex_"), [v[1:] for v in HEX_VECTORS], ids=[v[0] for v in HEX_VECTORS]
)
def test_hex_vector(value: Any, hex_: str) -> None:
    raw = h(hex_)
    assert encode(value) == raw
    decoded = decode(raw)
    assert same_value(decoded, value), (decoded, value)


def test_nan_encodes_as_a_nan_and_keeps_its_bits() -> None:
    assert encode(math.nan) == h("04 7ff8000000000000")
    assert math.isnan(decode(h("04 7ff8000000000000")))
    odd_nan = h("04 fff0000000000001")  # negative, signalling payload
    value = decode(odd_nan)
    assert math.isnan(value)
    assert real_bits(value) == odd_nan[1:]
    assert encode(value) == odd_nan
    # NaNs in containers round-trip as NaNs.
    assert same_value(decode(encode({math.nan, 1.0})), {math.nan, 1.0})
    assert same_value(decode(encode((math.nan,))), (math.nan,))


def test_accepted_inputs_encode_like_their_canonical_form() -> None:
    stamp = Timestamp.from_ns(1649574000 * 10**9)
    assert encode([Count(1), "x"]) == encode((Count(1), "x"))
    local = _dt.datetime.fromtimestamp(1649574000)  # naive: local time, as in Broker
    assert encode(local) == encode(stamp)
    cest = _dt.timezone(_dt.timedelta(hours=2))
    assert encode(_dt.datetime(2022, 4, 10, 9, tzinfo=cest)) == encode(stamp)
    assert encode(utc(2022, 4, 10, 7)) == encode(stamp)
    assert encode(_dt.timedelta(seconds=1.5)) == h("0a 0000000059682f00")
    assert encode(frozenset({Count(1)})) == encode({Count(1)})
    assert encode(FrozenTable({"k": 1})) == encode({"k": 1})
    assert encode(bytearray(b"ab")) == encode(memoryview(b"ab")) == encode("ab")


class Color(enum.IntEnum):
    RED = 5


class Name(str):
    pass


def test_subclasses_and_abstract_mappings_encode_by_their_base_type() -> None:
    assert encode(Color.RED) == encode(5)
    assert encode(Name("x")) == encode("x")
    assert encode(collections.OrderedDict(b=1, a=2)) == encode({"a": 2, "b": 1})
    assert encode(types.MappingProxyType({"a": 1})) == encode({"a": 1})
    assert encode(Data((1, "x"))) == encode((1, "x"))
    assert encode((Data(Count(3)),)) == encode((Count(3),))


def test_equal_tables_and_sets_encode_to_equal_bytes() -> None:
    a = {"x": 1, "y": {Count(3), Count(1)}, "z": ()}
    b = {"z": (), "y": {Count(1), Count(3)}, "x": 1}
    assert list(a) != list(b)
    assert encode(a) == encode(b)
    # Strings sort by UTF-8 bytes (equal to code point order), not by length.
    assert encode({"é", "z", "aa"}) == h("0c 03 0502 6161 0501 7a 0502 c3a9")


# -- decoding specifics ------------------------------------------------------------


def test_v4_mapped_ipv6_values_decode_as_ipv4_as_in_broker() -> None:
    assert decode(encode(V6("::ffff:10.0.0.1"))) == V4("10.0.0.1")
    assert type(decode(encode(V6("::ffff:10.0.0.1")))) is V4
    # An IPv4-compatible (not mapped) address stays IPv6.
    assert type(decode(encode(V6("::10.0.0.1")))) is V6
    net = decode(encode(ipaddress.IPv6Network("::ffff:10.0.0.0/104")))
    assert net == ipaddress.IPv4Network("10.0.0.0/8")


def test_subnet_with_host_bits_is_masked() -> None:
    raw = h("07 00000000000000000000ffff0a000001 68")  # 10.0.0.1/8
    assert decode(raw) == ipaddress.IPv4Network("10.0.0.0/8")
    raw6 = h("07 20010db8000000000000000000000001 20")  # 2001:db8::1/32
    assert decode(raw6) == ipaddress.IPv6Network("2001:db8::/32")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("07 00000000000000000000ffff0a000000 5f", "IPv4 subnet length 95"),
        ("07 00000000000000000000ffff0a000000 81", "IPv4 subnet length 129"),
        ("07 20010db8000000000000000000000000 81", "IPv6 subnet length 129"),
        ("08 0050 04", "unknown port protocol 4 at offset 3"),
        ("01 02", "boolean byte 2 at offset 1"),
        ("0f", "unknown value tag 15 at offset 0"),
        ("0e 02 00 ff", "unknown value tag 255 at offset 3"),
        ("0b 01 ff", "not valid UTF-8"),
        ("00 00", "trailing bytes at offset 1"),
        ("0e 01 00 00", "trailing bytes at offset 3"),
        ("", "no value at offset 0"),
        ("02 0000", "truncated"),
        ("05 05 6162", "truncated string at offset 2"),
        ("05 80", "truncated varbyte"),
        ("05 ffffffffff", "varbyte"),
        ("0e 03 00 00", "vector at offset 0 declares 3 elements but only 2 bytes remain"),
        ("0d 02 00 00 00", "table at offset 0 declares 2 elements but only 3 bytes remain"),
        ("0c ffffffff0f", "declares 4294967295 elements"),
    ],
)
def test_malformed_input_raises_decode_error_naming_the_problem(raw: str, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        decode(h(raw))


def test_strings_that_are_not_utf8_decode_as_bytes() -> None:
    assert decode(h("05 02 ff61")) == b"\xffa"
    assert decode(h("0e 01 05 01 80")) == (b"\x80",)
    assert decode(h("05 80 01" + "ff" * 128)) == b"\xff" * 128


def test_decoded_types() -> None:
    value = decode(encode((Count(1), 1, True, {1}, {"a": (1,)}, [2])))
    assert [type(v) for v in value] == [Count, int, bool, set, dict, tuple]
    assert type(value[4]["a"]) is tuple


def test_elements_of_sets_and_table_keys_come_back_hashable() -> None:
    value = decode(encode({frozenset({1}), FrozenTable({"k": frozenset({2})}), (frozenset(),)}))
    assert type(value) is set
    kinds = {type(v) for v in value}
    assert kinds == {frozenset, FrozenTable, tuple}
    table = next(v for v in value if isinstance(v, FrozenTable))
    assert type(table["k"]) is frozenset
    keyed = decode(encode({(frozenset({1}), "a"): {2}, FrozenTable({1: 2}): 3}))
    assert type(keyed) is dict
    assert keyed[(frozenset({1}), "a")] == {2}
    assert type(keyed[(frozenset({1}), "a")]) is set  # values stay mutable
    assert keyed[FrozenTable({1: 2})] == 3
    hash(frozenset(value))


def test_decode_from_walks_a_buffer_and_accepts_views() -> None:
    buf = encode("ab") + encode(Count(3)) + encode(())
    value, pos = decode_from(buf)
    assert (value, pos) == ("ab", 4)
    value, pos = decode_from(memoryview(buf), pos)
    assert (value, pos) == (Count(3), 13)
    assert decode_from(bytearray(buf), pos) == ((), 15)
    assert decode(memoryview(b"xx" + encode("ab")), offset=2) == "ab"
    with pytest.raises(DecodeError, match="no value at offset 15"):
        decode_from(buf, 15)


def test_decoded_small_counts_and_ports_are_shared_but_equal() -> None:
    assert decode(encode(Count(5))) is decode(encode(Count(5)))
    assert decode(encode(Count(2**40))) == Count(2**40)
    assert decode(encode(Port(443, 1))) == Port(443, 1)


# -- limits ------------------------------------------------------------------------


def nested_vectors(depth: int) -> bytes:
    return b"\x0e\x01" * depth + b"\x00"


def test_depth_limit() -> None:
    assert decode(nested_vectors(DEFAULT_LIMITS.max_depth)) is not None
    with pytest.raises(DecodeError, match="nested deeper than 64"):
        decode(nested_vectors(DEFAULT_LIMITS.max_depth + 1))
    with pytest.raises(DecodeError, match="nested deeper than 2"):
        decode(nested_vectors(3), DecodeLimits(max_depth=2))


def test_bombs_are_rejected_fast() -> None:
    start = time.perf_counter()
    for bomb in (
        b"\x0e\x01" * 10_000,
        nested_vectors(100_000),
        b"\x0c\x01" * 10_000,
        b"\x0d\x01\x00" * 10_000,
        h("0e ffffffff0f") + b"\x00" * 100,
        h("0d ffffffff0f") + b"\x00" * 100,
        h("05 ffffffff0f") + b"a" * 100,
    ):
        with pytest.raises(DecodeError):
            decode(bomb)
    assert time.perf_counter() - start < 1.0


def test_container_string_and_total_limits() -> None:
    limits = DecodeLimits(max_container=3, max_string=4, max_items=5)
    assert decode(encode((1, 2, 3)), limits) == (1, 2, 3)
    with pytest.raises(DecodeError, match="above the limit of 3"):
        decode(encode((1, 2, 3, 4)), limits)
    with pytest.raises(DecodeError, match="above the limit of 3"):
        decode(encode({1: 1, 2: 2, 3: 3, 4: 4}), limits)
    assert decode(encode("abcd"), limits) == "abcd"
    with pytest.raises(DecodeError, match="exceeds the limit of 4"):
        decode(encode("abcde"), limits)
    with pytest.raises(DecodeError, match="exceeds the limit of 4"):
        decode(encode(("abcde",)), limits)
    with pytest.raises(DecodeError, match="exceeds the limit of 4"):
        decode(encode(Enum("abcde")), limits)
    # Six elements in all: (a, b, c) holds three plus three inside the inner vectors.
    with pytest.raises(DecodeError, match="limit of 5 elements in one value"):
        decode(encode(((1,), (2,), (3,))), limits)


# -- encode errors -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (2**63, ValueError, "9223372036854775808"),
        (-(2**63) - 1, ValueError, "-9223372036854775809"),
        ((1, 2**64), ValueError, "18446744073709551616"),
        ({"k": 2**70}, ValueError, "1180591620717411303424"),
        (int.__new__(Count, -1), ValueError, "-1"),
        ((int.__new__(Count, 2**64),), ValueError, "18446744073709551616"),
        (_dt.datetime(9999, 1, 1), ValueError, "timestamp out of"),
        (_dt.timedelta.max, ValueError, "timespan out of"),
        ("\ud800", ValueError, "UTF-8"),
        (("\ud800",), ValueError, "UTF-8"),
        (Enum("\ud800"), ValueError, "UTF-8"),
        (object(), TypeError, "object"),
        ((1, 1j), TypeError, "complex value 1j"),
        ({1j}, TypeError, "complex"),
    ],
)
def test_encode_rejects_values_out_of_range(value: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        encode(value)


def test_encode_into_appends_and_leaves_output_intact_on_error() -> None:
    out = bytearray(b"\xaa")
    encode_into(Count(1), out)
    assert out == h("aa 02" + U64_1)
    with pytest.raises(ValueError):
        encode_into(("ok", 2**64), out)
    assert out == h("aa 02" + U64_1)
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="nested too deeply"):
        encode_into(cycle, out)
    assert out == h("aa 02" + U64_1)


# -- store command helpers -----------------------------------------------------------


def test_optional_and_variant_helpers() -> None:
    out = bytearray()
    encode_optional(None, out)
    encode_optional("x", out)
    encode_optional(_dt.timedelta(seconds=60), out, encode_timespan_raw)
    encode_variant_header(3, out)
    assert out == h("00 01 0501 78 01 0000000df8475800 03")
    value, pos = read_optional(bytes(out), 0, decode_from)
    assert (value, pos) == (None, 1)
    value, pos = read_optional(bytes(out), pos, decode_from)
    assert (value, pos) == ("x", 5)
    value, pos = read_optional(bytes(out), pos, read_timespan_raw)
    assert (value, pos) == (_dt.timedelta(seconds=60), 14)
    assert read_variant_header(bytes(out), pos, 14) == (3, 15)
    with pytest.raises(DecodeError, match="variant index 3 at offset 14"):
        read_variant_header(bytes(out), pos, 3)
    with pytest.raises(DecodeError, match="optional flag 2 at offset 0"):
        read_optional(b"\x02", 0, decode_from)
    with pytest.raises(DecodeError, match="truncated"):
        read_timespan_raw(b"\x00" * 7, 0)
    with pytest.raises(ValueError):
        encode_variant_header(256, out)


# -- the recorded real sessions -----------------------------------------------------


def recorded_envelopes(name: str) -> list[tuple[int, str, bytes, int]]:
    """(type, topic, body, payload offset) of every envelope in a recorded direction.

    Frames are cut by the project's FrameDecoder; handshake bodies come first
    and end with originator_ack (connecting side) or responder_syn_ack
    (accepting side), after which every body is an envelope.
    """
    frames = FrameDecoder().feed((VECTORS / name).read_bytes())
    envelopes = []
    in_handshake = True
    for body in frames:
        if in_handshake:
            msg_type = body[0]
            decode_handshake(body)
            in_handshake = msg_type not in (MSG_ORIGINATOR_ACK, MSG_RESPONDER_SYN_ACK)
            continue
        msg = decode_node_message(body)
        envelopes.append((msg.msg_type, msg.topic, msg.body, msg.payload_offset))
    return envelopes


def recorded_payloads(name: str, msg_type: int) -> list[tuple[str, bytes]]:
    return [
        (topic, body[offset:])
        for kind, topic, body, offset in recorded_envelopes(name)
        if kind == msg_type
    ]


ALL_TYPES_ARGS: list[Any] = [
    None,
    True,
    Count(7),
    -7,
    1.5,
    "s",
    V4("10.0.0.1"),
    V6("2001:db8::1"),
    ipaddress.IPv4Network("10.0.0.0/8"),
    Port(80, Port.TCP),
    utc(2022, 4, 10, 7),
    _dt.timedelta(seconds=1.5),
    Enum("A::B"),
    {1, 2},  # Broker's Python bindings sent integers here (tag 3), not counts
    {"k": 1},
    (1, "x"),
]


def test_recorded_all_types_event() -> None:
    (topic, payload), *rest = recorded_payloads("broker-v1-types-and-store.c2s.bin", MSG_DATA)
    assert topic == "/types"
    assert rest == []
    assert payload.startswith(h("0e 03 02" + U64_1 + "02" + U64_1 + "0e 02 05 09") + b"all_types")
    event = decode(payload)
    assert same_value(event[:2], (Count(1), Count(1)))
    name, args = event[2]
    assert name == "all_types"
    assert len(args) == 16
    for got, want in zip(args, ALL_TYPES_ARGS, strict=True):
        assert same_value(got, want), (got, want)
    assert [type(a) for a in args] == [
        type(None),
        bool,
        Count,
        int,
        float,
        str,
        V4,
        V6,
        ipaddress.IPv4Network,
        Port,
        Timestamp,
        Timespan,
        Enum,
        set,
        dict,
        tuple,
    ]
    assert args[10] == utc(2022, 4, 10, 7)
    assert args[10].tzinfo is not None
    assert encode(event) == payload
    # The same event built from plain Python values encodes to the recorded bytes.
    assert encode([Count(1), Count(1), ["all_types", ALL_TYPES_ARGS]]) == payload


def test_recorded_reply_and_captured_message() -> None:
    assert recorded_payloads("broker-v1-types-and-store.s2c.bin", MSG_DATA) == [
        ("/reply", h("0e 02 0502 6f6b 02" + U64_1))
    ]
    reply = decode(h("0e 02 0502 6f6b 02" + U64_1))
    assert same_value(reply, ("ok", Count(1)))
    assert recorded_payloads("broker-v1-session.c2s.bin", MSG_DATA) == [
        ("/test/pipe", b"\x05\x0ccaptured-msg")
    ]
    assert recorded_payloads("broker-v1-session.s2c.bin", MSG_DATA) == []


@pytest.mark.parametrize(
    "name",
    [
        "broker-v1-session.c2s.bin",
        "broker-v1-session.s2c.bin",
        "broker-v1-types-and-store.c2s.bin",
        "broker-v1-types-and-store.s2c.bin",
    ],
)
def test_every_recorded_data_payload_round_trips(name: str) -> None:
    for _, _, body, offset in recorded_envelopes(name):
        if body[32] != MSG_DATA:
            continue
        value = decode(body, offset=offset)
        assert encode(value) == body[offset:]
        assert encode(decode(body[offset:])) == body[offset:]


def test_recorded_store_put_carries_a_raw_optional_expiry() -> None:
    """put("e", "x", expiry 60 s): the expiry is an optional bare i64, not a tagged value."""
    commands = recorded_payloads("broker-v1-types-and-store.c2s.bin", MSG_COMMAND)
    payload = next(p for _, p in commands if b"\x05\x01e\x05\x01x" in p)
    pos = payload.index(b"\x05\x01e\x05\x01x")
    key, pos = decode_from(payload, pos)
    value, pos = decode_from(payload, pos)
    expiry, pos = read_optional(payload, pos, read_timespan_raw)
    assert (key, value, expiry) == ("e", "x", _dt.timedelta(seconds=60))
    assert type(expiry) is Timespan


# -- properties ----------------------------------------------------------------------


@settings(max_examples=300)
@given(broker_values())
def test_round_trip_preserves_values_and_types(value: Any) -> None:
    raw = encode(value)
    decoded = decode(raw)
    assert same_value(decoded, value), (decoded, value)
    assert encode(decoded) == raw


@given(simple_values())
def test_round_trip_of_simple_values(value: Any) -> None:
    decoded = decode(encode(value))
    assert same_value(decoded, value)
    assert type(decoded) is type(value) or isinstance(value, _dt.datetime | _dt.timedelta)


def holds_nan(value: Any) -> bool:
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, (tuple, list, set, frozenset)):
        return any(holds_nan(v) for v in value)
    if isinstance(value, (dict, FrozenTable)):
        return any(holds_nan(k) or holds_nan(v) for k, v in value.items())
    return False


@given(st.lists(hashable_values(max_depth=1), max_size=8), st.randoms(use_true_random=False))
def test_equal_sets_and_tables_encode_to_equal_bytes(items: list[Any], rnd: random.Random) -> None:
    shuffled = list(items)
    rnd.shuffle(shuffled)
    a, b = set(items), set(shuffled)
    # Python keeps the first of equal elements (1 == Count(1) == True == 1.0):
    # compare only when both orders kept the same representatives.
    assume(same_value(a, b))
    # NaN != NaN: elements holding a NaN anywhere can be distinct yet encode the same.
    assume(not any(holds_nan(v) for v in items))
    assert encode(a) == encode(b)
    ta = {k: i for i, k in enumerate(items) if k in a}
    tb = {k: ta[k] for k in shuffled if k in b}
    assume(same_value(ta, tb))
    assert encode(ta) == encode(tb)


# -- fuzzing: only DecodeError escapes -----------------------------------------------


def decode_or_reject(raw: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode(raw)


@settings(max_examples=400)
@given(st.binary(max_size=64))
def test_random_bytes_only_raise_decode_error(raw: bytes) -> None:
    decode_or_reject(raw)


@settings(max_examples=300)
@given(broker_values(max_depth=2), byte_edits(1 << 16, 4))
def test_mutated_encodings_only_raise_decode_error(
    value: Any, edits: list[tuple[str, int, int]]
) -> None:
    decode_or_reject(mutate(encode(value), edits))


def test_every_single_byte_corruption_of_the_recorded_event() -> None:
    ((_, payload),) = recorded_payloads("broker-v1-types-and-store.c2s.bin", MSG_DATA)
    for i in range(len(payload)):
        for value in (0x00, 0x0F, 0x80, 0xFF, payload[i] ^ 0x01):
            raw = payload[:i] + bytes((value,)) + payload[i + 1 :]
            decode_or_reject(raw)
        decode_or_reject(payload[:i])
