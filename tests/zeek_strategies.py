"""Hypothesis strategies for Zeek log records: schemas of loggable types, and their values.

Values are drawn in the form the record codec decodes them to (``ZeekTime``,
``ZeekInterval``, ``ZeekSet``, tuples, ``Count``, ``bytes`` for strings that
are not UTF-8), so a round trip compares exactly.
"""

from __future__ import annotations

import ipaddress
import math
from typing import Any

from hypothesis import strategies as st

from broker_spark.data.types import INT64_MAX, INT64_MIN, UINT64_MAX, Count, Enum, Port
from broker_spark.zeek.log_schema import LogField, LogSchema
from broker_spark.zeek.types import TypeTag, ZeekSet, ZeekType, zeek_interval, zeek_time

ATOMIC = [
    TypeTag.BOOL,
    TypeTag.INT,
    TypeTag.COUNT,
    TypeTag.DOUBLE,
    TypeTag.TIME,
    TypeTag.INTERVAL,
    TypeTag.STRING,
    TypeTag.ENUM,
    TypeTag.PORT,
    TypeTag.ADDR,
    TypeTag.SUBNET,
]

_DOUBLE_EDGES = [0.0, -0.0, 1e21, 1e-7, 3600.0, 1354328870.172701, 5e-324, math.nan, math.inf]


def doubles() -> st.SearchStrategy[float]:
    return st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(_DOUBLE_EDGES))


def _texts() -> st.SearchStrategy[str | bytes]:
    printable = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12)
    anything = st.binary(max_size=12).map(_as_decoded)
    unicode = st.text(max_size=6)
    return st.one_of(printable, printable, anything, unicode)


def _as_decoded(raw: bytes) -> str | bytes:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _addresses() -> st.SearchStrategy[Any]:
    v4 = st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address)
    words = st.lists(st.sampled_from([0, 0, 1, 0xFFFF, 0x2001, 0xDB8]), min_size=8, max_size=8)
    v6 = st.one_of(
        st.integers(0, 2**128 - 1).map(ipaddress.IPv6Address),
        words.map(lambda w: ipaddress.IPv6Address(b"".join(x.to_bytes(2, "big") for x in w))),
    )
    return st.one_of(v4, v6)


def _subnets() -> st.SearchStrategy[Any]:
    return st.builds(
        lambda a, p: ipaddress.ip_network((a, p % (33 if a.version == 4 else 129)), strict=False),
        _addresses(),
        st.integers(0, 128),
    )


def atomic_values(tag: TypeTag) -> st.SearchStrategy[Any]:
    """Values of one atomic Zeek type, as the decoder returns them."""
    if tag is TypeTag.BOOL:
        return st.booleans()
    if tag is TypeTag.INT:
        return st.one_of(st.integers(INT64_MIN, INT64_MAX), st.sampled_from([0, -1, INT64_MAX]))
    if tag is TypeTag.COUNT:
        return st.one_of(st.integers(0, UINT64_MAX), st.sampled_from([0, INT64_MAX + 1])).map(Count)
    if tag is TypeTag.DOUBLE:
        return doubles()
    if tag is TypeTag.TIME:
        return doubles().map(zeek_time)
    if tag is TypeTag.INTERVAL:
        return doubles().map(zeek_interval)
    if tag is TypeTag.STRING:
        return _texts()
    if tag is TypeTag.ENUM:
        return st.sampled_from(["Conn::LOG", "tcp", "Notice::Weird", "x"]).map(Enum)
    if tag is TypeTag.PORT:
        return st.builds(Port, st.integers(0, 65535), st.integers(0, 3))
    if tag is TypeTag.ADDR:
        return _addresses()
    if tag is TypeTag.SUBNET:
        return _subnets()
    raise ValueError(tag)


def column_types() -> st.SearchStrategy[ZeekType]:
    atomic = st.sampled_from(ATOMIC)
    container = st.builds(
        lambda kind, element: ZeekType(kind, element),
        st.sampled_from([TypeTag.TABLE, TypeTag.VECTOR]),
        st.sampled_from([t for t in ATOMIC if t not in (TypeTag.DOUBLE,)]),
    )
    return st.one_of(atomic.map(ZeekType), atomic.map(ZeekType), container)


def column_values(zeek_type: ZeekType, optional: bool = True) -> st.SearchStrategy[Any]:
    if zeek_type.tag is TypeTag.VECTOR:
        inner = atomic_values(zeek_type.subtag)
        value: st.SearchStrategy[Any] = st.lists(inner, max_size=4).map(tuple)
    elif zeek_type.tag is TypeTag.TABLE:
        inner = atomic_values(zeek_type.subtag)
        value = st.lists(inner, max_size=4).map(_zeek_set)
    else:
        value = atomic_values(zeek_type.tag)
    return st.one_of(st.none(), value) if optional else value


def _zeek_set(items: list[Any]) -> ZeekSet:
    # NaN-holding values would make a set that never equals itself: keep one of each by repr
    seen: dict[str, Any] = {}
    for item in items:
        seen.setdefault(repr(item), item)
    return ZeekSet(seen.values())


@st.composite
def schemas(draw: st.DrawFn, max_columns: int = 8) -> LogSchema:
    n = draw(st.integers(0, max_columns))
    fields = tuple(
        LogField(f"c{i}" + draw(st.sampled_from(["", ".x", ".y"])), draw(column_types()), True)
        for i in range(n)
    )
    return LogSchema("Test::LOG", "test", fields)


@st.composite
def records(draw: st.DrawFn, schema: LogSchema) -> list[Any]:
    return [draw(column_values(f.zeek_type)) for f in schema.fields]


@st.composite
def schema_and_records(draw: st.DrawFn, max_records: int = 6) -> tuple[LogSchema, list[list[Any]]]:
    schema = draw(schemas())
    rows = draw(st.lists(records(schema), min_size=1, max_size=max_records))
    return schema, rows


def same_record(a: list[Any], b: list[Any]) -> bool:
    """Equal values with equal types (NaN equals NaN; a ZeekTime keeps its double)."""
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))


def _same(x: Any, y: Any) -> bool:
    if type(x) is not type(y):
        return False
    if isinstance(x, float):
        return (math.isnan(x) and math.isnan(y)) or (
            x == y and math.copysign(1, x) == math.copysign(1, y)
        )
    seconds = getattr(x, "seconds", None)
    if seconds is not None and not callable(seconds):
        return _same(seconds, y.seconds)
    if isinstance(x, (tuple, ZeekSet)):
        return len(x) == len(y) and all(_same(a, b) for a, b in zip(x, y, strict=True))
    return x == y
