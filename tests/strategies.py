"""Hypothesis strategies for Broker values, and a strict, type-aware equality.

Shared by the codec tests (binary, JSON, Arrow, msgpack records): every codec
must round-trip what these strategies draw, with types preserved.

The strategies draw values in the form decoders return them, so a round trip
can be compared exactly: timestamps and timespans as :class:`Timestamp` and
:class:`Timespan` (nanoseconds included), vectors as tuples, strings as ``str``
or, when not valid UTF-8, ``bytes``. They avoid values Broker itself cannot
tell apart: an IPv6 address or subnet inside ``::ffff:0:0/96`` *is* IPv4 in
Broker, so IPv6 values are drawn outside that range.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import math
import struct
from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

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
    type_of,
)

__all__ = [
    "broker_values",
    "hashable_values",
    "real_bits",
    "same_value",
    "simple_values",
    "utc",
]

_COUNT_EDGES = [0, 1, 127, 128, 255, 256, 2**32 - 1, 2**32, INT64_MAX, INT64_MAX + 1, UINT64_MAX]
_INT_EDGES = [0, 1, -1, 127, -128, 2**31, -(2**31), INT64_MAX, INT64_MIN, INT64_MAX - 1]
_REAL_EDGES = [0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324, 1.7976931348623157e308]


def _not_v4_mapped(addr: ipaddress.IPv6Address) -> bool:
    return addr.ipv4_mapped is None


def _network(addr: Any, prefix: int) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    bits = 32 if addr.version == 4 else 128
    return ipaddress.ip_network((addr, prefix % (bits + 1)), strict=False)


def _not_v4_mapped_net(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    return net.version == 4 or net.network_address.ipv4_mapped is None


def counts() -> st.SearchStrategy[Count]:
    return st.one_of(st.integers(0, UINT64_MAX), st.sampled_from(_COUNT_EDGES)).map(Count)


def integers() -> st.SearchStrategy[int]:
    return st.one_of(st.integers(INT64_MIN, INT64_MAX), st.sampled_from(_INT_EDGES))


def reals() -> st.SearchStrategy[float]:
    return st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(_REAL_EDGES))


def strings() -> st.SearchStrategy[str | bytes]:
    """Text (short, and sometimes longer than a one-byte length), or non-UTF-8 bytes."""
    return st.one_of(
        st.text(max_size=12),
        st.builds(
            lambda c, n: c * n, st.characters(exclude_categories=["Cs"]), st.integers(40, 200)
        ),
        st.binary(max_size=8).map(lambda b: b + b"\xff"),
    )


def addresses() -> st.SearchStrategy[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    return st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6).filter(_not_v4_mapped))


def subnets() -> st.SearchStrategy[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return st.builds(_network, addresses(), st.integers(0, 128)).filter(_not_v4_mapped_net)


def ports() -> st.SearchStrategy[Port]:
    return st.builds(
        Port,
        st.one_of(st.integers(0, 65535), st.sampled_from([0, 80, 65535])),
        st.integers(0, 3),
    )


def _ns() -> st.SearchStrategy[int]:
    return st.one_of(
        st.integers(INT64_MIN, INT64_MAX),
        st.integers(-(10**12), 10**12),
        st.sampled_from([0, 1, -1, 999, 1000, 1001, INT64_MIN, INT64_MAX]),
    )


def simple_values() -> st.SearchStrategy[Any]:
    """Every non-container Broker type, edges included."""
    return st.one_of(
        st.none(),
        st.booleans(),
        counts(),
        integers(),
        reals(),
        strings(),
        addresses(),
        subnets(),
        ports(),
        _ns().map(Timestamp.from_ns),
        _ns().map(Timespan.from_ns),
        st.text(max_size=12).map(Enum),
    )


def hashable_values(max_depth: int = 2, max_size: int = 4) -> st.SearchStrategy[Any]:
    """Values that can be set elements or table keys: containers in frozen form."""
    if max_depth <= 0:
        return simple_values()
    inner = hashable_values(max_depth - 1, max_size)
    return st.one_of(
        simple_values(),
        st.lists(inner, max_size=max_size).map(tuple),
        st.frozensets(inner, max_size=max_size),
        st.dictionaries(inner, inner, max_size=max_size).map(FrozenTable),
    )


def broker_values(max_depth: int = 3, max_size: int = 5) -> st.SearchStrategy[Any]:
    """Any Broker value: all 15 types, containers nested up to ``max_depth``."""
    if max_depth <= 0:
        return simple_values()
    inner = broker_values(max_depth - 1, max_size)
    keys = hashable_values(max_depth - 1, max_size)
    return st.one_of(
        simple_values(),
        st.lists(inner, max_size=max_size).map(tuple),
        st.sets(keys, max_size=max_size),
        st.dictionaries(keys, inner, max_size=max_size),
    )


# -- strict equality -------------------------------------------------------------


def _same_real(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def _match_all(a: Any, b: Any, same: Any) -> bool:
    """Pair every element of ``a`` with a distinct element of ``b`` such that ``same`` holds."""
    pool = list(b)
    for x in a:
        for i, y in enumerate(pool):
            if same(x, y):
                del pool[i]
                break
        else:
            return False
    return not pool


def same_value(a: Any, b: Any) -> bool:
    """Equality that also compares Broker types, recursively.

    ``bool``, ``int`` (integer) and :class:`Count` are distinct; so are ``str``
    and ``bytes``, and IPv4 and IPv6. Set and frozenset are both sets, any
    mapping is a table, tuple and list are both vectors. NaN equals NaN and
    ``-0.0`` differs from ``0.0``. Timestamps compare by nanoseconds since the
    epoch, so an aware ``datetime`` equals the :class:`Timestamp` it decodes to.
    """
    try:
        ta, tb = type_of(a), type_of(b)
    except TypeError:
        return False
    if ta is not tb:
        return False
    if ta is DataType.Real:
        return _same_real(a, b)
    if ta in (DataType.String, DataType.Address, DataType.Subnet):
        return type(a) is type(b) and a == b
    if ta is DataType.Timestamp:
        return timestamp_ns(a) == timestamp_ns(b)
    if ta is DataType.Timespan:
        return timespan_ns(a) == timespan_ns(b)
    if ta is DataType.Vector:
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if ta is DataType.Set:
        return len(a) == len(b) and _match_all(a, b, same_value)
    if ta is DataType.Table:
        assert isinstance(a, Mapping) and isinstance(b, Mapping)
        return len(a) == len(b) and _match_all(
            a.items(),
            b.items(),
            lambda x, y: same_value(x[0], y[0]) and same_value(x[1], y[1]),
        )
    return a == b


def real_bits(x: float) -> bytes:
    """The IEEE-754 bits of a float (to compare NaN payloads and signed zeros)."""
    return struct.pack(">d", x)


def utc(*args: int) -> _dt.datetime:
    """A UTC-aware datetime, for readable test vectors."""
    return _dt.datetime(*args, tzinfo=_dt.timezone.utc)


def byte_edits(max_where: int, max_size: int) -> st.SearchStrategy[list[tuple[str, int, int]]]:
    """Edits for :func:`mutate`: flip a bit, cut the tail, insert or drop a byte."""
    return st.lists(
        st.tuples(
            st.sampled_from(["flip", "cut", "insert", "drop"]),
            st.integers(0, max_where),
            st.integers(0, 255),
        ),
        min_size=1,
        max_size=max_size,
    )


def mutate(data: bytes, edits: list[tuple[str, int, int]]) -> bytes:
    """``data`` with ``edits`` applied in order (positions wrap around the current length)."""
    raw = bytearray(data)
    for op, where, byte in edits:
        i = where % (len(raw) + 1)
        if op == "flip" and i < len(raw):
            raw[i] ^= 1 << (byte % 8)
        elif op == "cut":
            del raw[i:]
        elif op == "insert":
            raw.insert(i, byte)
        elif op == "drop" and i < len(raw):
            del raw[i]
    return bytes(raw)
