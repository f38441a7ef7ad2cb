"""Writers: whole rows encoded in bulk (``encode_rows_bulk``) equal the per-value path."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_spark import zeek
from broker_spark.columnar.column_encode import encode_rows_bulk
from broker_spark.data.arrow import from_arrow
from broker_spark.data.binary import encode
from broker_spark.reader.options import parse_writer_options
from broker_spark.spark.write.row_messages import RowEncoder

_TYPES = [
    (pa.int8(), st.integers(-128, 127)),
    (pa.int16(), st.integers(-(2**15), 2**15 - 1)),
    (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    (pa.uint8(), st.integers(0, 255)),
    (pa.uint64(), st.integers(0, 2**64 - 1)),
    (pa.float32(), st.floats(width=32)),
    (pa.float64(), st.floats()),
    (pa.string(), st.text(max_size=140)),  # 128 bytes and more: the per-value path
    (pa.binary(), st.binary(max_size=20)),
]


def _encoder(schema: pa.Schema, **options: str) -> RowEncoder:
    return RowEncoder(schema, parse_writer_options({"peer": "127.0.0.1:9", **options}))


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_bulk_rows_equal_encoding_each_row(data: st.DataObject) -> None:
    picked = data.draw(st.lists(st.sampled_from(_TYPES), min_size=1, max_size=5))
    n = data.draw(st.integers(1, 12))
    rows = [[data.draw(values) for t, values in picked] for _ in range(n)]
    columns = [pa.array([r[i] for r in rows], t) for i, (t, _) in enumerate(picked)]
    names = [f"c{i}" for i in range(len(columns))]
    batch = pa.RecordBatch.from_arrays(columns, names=names)
    skip = data.draw(st.integers(0, n - 1))
    batch = batch.slice(skip)  # buffers that start at an offset
    values = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
    typed = [from_arrow(column) for column in batch.columns]  # unsigned: counts
    expected = [encode(tuple(row)) for row in zip(*typed, strict=True)]
    assert [p for _, p in _encoder(batch.schema, topic="t").encode(batch).messages] == expected
    bulk = encode_rows_bulk([b"\x0e" + bytes((batch.num_columns,)), *batch.columns])
    short = all(
        len(v.encode() if isinstance(v, str) else v) < 128
        for column in values
        for v in column
        if isinstance(v, (str, bytes))
    )
    assert bulk == (expected if short else None)


def test_events_in_bulk_and_what_falls_back() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "topic": ["a", "b", "c"],
            "event": ["ping", "pong", "x" * 130],
            "n": pa.array([1, -2, 3], pa.int64()),
            "s": ["one", "two", "three"],
        }
    )
    encoder = _encoder(batch.schema, format="zeek")
    want = [
        (t, encode(zeek.Event(e, n, s).as_data()))
        for t, e, n, s in zip(*batch.to_pydict().values(), strict=True)
    ]
    assert encoder.encode(batch).messages == want  # a long name: the per-value path
    assert encoder.encode(batch.slice(0, 2)).messages == want[:2]  # in bulk
    with_null = batch.slice(0, 2).set_column(2, "n", pa.array([1, None], pa.int64()))
    assert encoder.encode(with_null).messages[1][1] == encode(
        zeek.Event("pong", None, "two").as_data()
    )
    no_topic = batch.slice(0, 2).set_column(0, "topic", pa.array(["a", None]))
    assert [b.position for b in encoder.encode(no_topic).bad] == [1]
