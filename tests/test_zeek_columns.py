"""Many records at once: the column decoder and renderer agree with the one-record reference."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from zeek_recordings import LOG_RECORDINGS, recording
from zeek_strategies import doubles, schema_and_records

from broker_spark.data.types import Port
from broker_spark.zeek import (
    LogField,
    TypeTag,
    compiled,
    decode_values,
    encode_record,
    render_line,
)
from broker_spark.zeek.arrow_columns import MAX_MICROS, MIN_MICROS, ipv6_strings, sql_array
from broker_spark.zeek.columns import Block, decode_block
from broker_spark.zeek.json_columns import Texts, _join, double_texts, render_block
from broker_spark.zeek.logs import _field_from_data
from broker_spark.zeek.text import addr_text, format_double

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["compiled", "pure"], autouse=True)
def _accelerators(request):
    """Every test here runs both ways: with the C accelerators where they were built, and
    with the numpy and Arrow code (the fallback everywhere else), so the two stay equal."""
    if request.param == "compiled":
        if not compiled.built():
            pytest.skip("the C accelerators were not built here")
        yield
        return
    with compiled.turned_off():
        yield


def _lines(schema, rows, **kw) -> tuple[list[str], list[str]]:
    block = Block.from_records([encode_record(r, schema.fields) for r in rows])
    decoded = decode_block(block, schema.types)
    assert decoded.ok.all()
    names = list(schema.names)
    bulk = render_block(decoded, names, **kw).to_pylist()
    one = [render_line(r, names, types=schema.types, **kw) for r in rows]
    return bulk, one


@given(schema_and_records(max_records=8))
def test_bulk_lines_equal_one_record_lines(case) -> None:
    schema, rows = case
    bulk, one = _lines(schema, rows)
    assert bulk == one


@given(schema_and_records(max_records=4), st.sampled_from(["iso8601", "millis"]), st.booleans())
def test_bulk_lines_follow_timestamp_formats_and_unset_fields(case, fmt, unset) -> None:
    schema, rows = case
    bulk, one = _lines(schema, rows, timestamps=fmt, include_unset=unset)
    assert bulk == one


def test_joints_the_same_in_every_row_are_joined_once() -> None:
    """Where every row has the same joints (all columns present, or none), they are one
    string each run; a line of no columns is still a line a row."""
    strings = pa.array(["a", "b", "c"])
    ints = pa.array(["1", "2", "3"])
    present = np.ones(3, dtype=bool)
    got = _join([(Texts([(strings, None)], '"', '"'), present), (Texts([(ints, None)]), present)],
                3, ['"s"', '"n"'])  # fmt: skip
    assert got.to_pylist() == ['{"s":"a","n":1}', '{"s":"b","n":2}', '{"s":"c","n":3}']
    assert _join([], 3, []).to_pylist() == ["{}"] * 3
    absent = np.zeros(3, dtype=bool)
    assert _join([(Texts([(ints, None)]), absent)], 3, ['"n"']).to_pylist() == ["{}"] * 3


@pytest.mark.parametrize("name", LOG_RECORDINGS)
def test_recorded_records_in_bulk_are_zeeks_lines(name: str) -> None:
    rec = recording(name)
    for path, serials in rec.writes.items():
        fields = [_field_from_data(f) for f in rec.creates[path][3]]
        decoded = decode_block(Block.from_records(serials), [f.zeek_type for f in fields])
        assert decoded.ok.all()
        assert render_block(decoded, [f.name for f in fields]).to_pylist() == rec.local_lines(path)


@given(schema_and_records(max_records=6), st.data())
def test_records_of_another_layout_or_broken_are_flagged_not_decoded(case, data) -> None:
    schema, rows = case
    serials = [encode_record(r, schema.fields) for r in rows]
    other = encode_record([1], [LogField.of("x", "int")])
    broken = [s[: data.draw(st.integers(0, len(s) - 1))] for s in serials[:1]]
    mixed = serials + [other] + broken
    order = data.draw(st.permutations(range(len(mixed))))
    decoded = decode_block(Block.from_records([mixed[i] for i in order]), schema.types)
    for at, i in enumerate(order):
        expected = i < len(serials) or (not schema.fields and i == len(serials) + 1 and False)
        if i >= len(serials):
            # another layout fits only when it happens to have the same single int column
            expected = schema.tags() == (TypeTag.INT,) and i == len(serials)
        assert bool(decoded.ok[at]) == expected, (at, i)
    good = np.flatnonzero(decoded.ok)
    lines = render_block(decoded, list(schema.names)).to_pylist()
    for at in good:
        row = decode_values(mixed[order[at]])
        assert lines[at] == render_line(row, list(schema.names), types=schema.types)


@given(st.lists(doubles(), min_size=1, max_size=20))
def test_bulk_doubles_are_spelt_as_rapidjson(values) -> None:
    texts = double_texts(np.array(values, dtype=np.float64))
    array, _ = texts.parts[0]
    bulk = []
    suffix_pool, suffix = texts.parts[1]
    for i, _v in enumerate(values):
        text = array[i].as_py() + (suffix_pool[int(suffix[i])].as_py() if suffix[i] >= 0 else "")
        bulk.append(text)
    assert bulk == [format_double(v) for v in values]


def test_ipv6_texts_in_bulk_equal_zeeks_rules() -> None:
    rows = [bytes(16), bytes(15) + b"\x01", bytes(12) + b"\x01\x02\x03\x04"]
    rows += [
        bytes(10) + b"\xff\xff\x01\x02\x03\x04",
        bytes(8) + b"\xff\xff\x00\x00\x01\x02\x03\x04",
    ]
    rows += [
        b"\x20\x01\x0d\xb8" + bytes(11) + b"\x01",
        b"\x00\x01" + bytes(4) + b"\x00\x01" + bytes(7) + b"\x01",
    ]
    rng = np.random.default_rng(7)
    for _ in range(500):
        words = rng.choice([0, 0, 0, 1, 0xFFFF, 0x2001], size=8)
        rows.append(b"".join(int(w).to_bytes(2, "big") for w in words))
    raw = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(-1, 16)
    assert ipv6_strings(raw).to_pylist() == [addr_text(r) for r in rows]


@given(schema_and_records(max_records=6))
def test_sql_arrays_hold_the_values_of_the_reference_decoder(case) -> None:
    schema, rows = case
    block = Block.from_records([encode_record(r, schema.fields) for r in rows])
    decoded = decode_block(block, schema.types)
    for c, (field, col) in enumerate(zip(schema.fields, decoded.columns, strict=True)):
        arr, misfits = sql_array(block.buf, col)
        got = arr.to_pylist()
        expected_misfits = 0
        for r, row in enumerate(rows):
            expected, unfit = _spark_value(field, row[c])
            expected_misfits += unfit
            assert _same(got[r], expected), (field, row[c], got[r])
        assert misfits == expected_misfits


def _same(a, b) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def _spark_value(field: LogField, value):
    """What Spark's column should hold for one value, and how many misfits it makes
    (a value Spark's type cannot hold is null; inside a set or vector, that element)."""
    from broker_spark.zeek.text import addr_text, zeek_text

    if value is None:
        return None, 0
    tag = field.type
    if tag in (TypeTag.TABLE, TypeTag.VECTOR):
        inner = LogField("e", field.zeek_type.element)
        items = [_spark_value(inner, v) for v in value]
        return [v for v, _ in items], sum(unfit for _, unfit in items)
    if tag is TypeTag.COUNT:
        return (int(value), 0) if value < 2**63 else (None, 1)
    if tag is TypeTag.TIME:
        seconds = value.seconds if hasattr(value, "seconds") else value
        scaled = seconds * 1e6
        if not math.isfinite(scaled):
            return None, 1
        micros = math.trunc(scaled + math.copysign(0.5, scaled))
        if not MIN_MICROS <= micros <= MAX_MICROS:
            return None, 1
        return pa.scalar(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC")).as_py(), 0
    if tag is TypeTag.INTERVAL:
        return (value.seconds if hasattr(value, "seconds") else value), 0
    if tag is TypeTag.PORT:
        assert isinstance(value, Port)
        return value.number(), 0
    if tag is TypeTag.ENUM:
        return zeek_text(value.name), 0
    if tag is TypeTag.STRING:
        return zeek_text(value), 0
    if tag is TypeTag.ADDR:
        return addr_text(value.packed), 0
    if tag is TypeTag.SUBNET:
        return f"{addr_text(value.network_address.packed)}/{value.prefixlen}", 0
    return value, 0


@given(st.data())
def test_broken_records_never_raise_in_bulk_and_are_flagged(data) -> None:
    rec = recording(data.draw(st.sampled_from(LOG_RECORDINGS)))
    path = data.draw(st.sampled_from(sorted(rec.writes)))
    fields = [_field_from_data(f) for f in rec.creates[path][3]]
    records = []
    for serial in data.draw(st.lists(st.sampled_from(rec.writes[path]), min_size=1, max_size=5)):
        raw = bytearray(serial)
        if data.draw(st.booleans()):
            at = data.draw(st.integers(0, len(raw) - 1))
            if data.draw(st.booleans()):
                raw[at] ^= data.draw(st.integers(1, 255))
            else:
                del raw[at:]
        records.append(bytes(raw))
    records.append(data.draw(st.binary(max_size=64)))
    decoded = decode_block(Block.from_records(records), [f.zeek_type for f in fields])
    names = [f.name for f in fields]
    lines = render_block(decoded, names).to_pylist()
    for i, raw in enumerate(records):
        try:
            values = decode_values(raw)
        except Exception:
            assert not decoded.ok[i]  # what the reference rejects is never taken in bulk
            continue
        if decoded.ok[i]:
            assert lines[i] == render_line(values, names, types=[f.zeek_type for f in fields])
