"""Delta's file statistics from a Parquet footer (the Delta fast path's add actions).

Real Parquet files written by Arrow as the tasks write them; the bounds must hold every
row (a reader skips a file by them), in Delta's JSON form.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from broker_spark.spark.tables.delta_stats import file_stats

UTC = dt.timezone.utc
ID = StructType([StructField("orig_h", StringType()), StructField("orig_p", LongType())])
SCHEMA = StructType(
    [
        StructField("ts", TimestampType()),
        StructField("id", ID),
        StructField("uid", StringType()),
        StructField("duration", DoubleType()),
        StructField("local", BooleanType()),
        StructField("tags", ArrayType(StringType())),
        StructField("note", StringType()),
    ]
)


def write(tmp: Path, rows: list[dict], row_group_size: int = 2) -> str:
    arrow = pa.schema(
        [
            ("ts", pa.timestamp("us", tz="UTC")),
            ("id", pa.struct([("orig_h", pa.string()), ("orig_p", pa.int64())])),
            ("uid", pa.string()),
            ("duration", pa.float64()),
            ("local", pa.bool_()),
            ("tags", pa.list_(pa.string())),
            ("note", pa.string()),
        ]
    )
    path = str(tmp / "part.parquet")
    pq.write_table(pa.Table.from_pylist(rows, arrow), path, row_group_size=row_group_size)
    return path


def row(us: int, host: str, port: int | None, uid: str, duration: float | None) -> dict:
    ts = dt.datetime(2026, 11, 28, 12, 0, tzinfo=UTC) + dt.timedelta(microseconds=us)
    orig = {"orig_h": host, "orig_p": port}
    return {"ts": ts, "id": orig, "uid": uid, "duration": duration, "local": True,
            "tags": ["a"], "note": None}  # fmt: skip


def test_bounds_hold_every_row_across_row_groups(tmp_path: Path) -> None:
    long_uid = "C" * 33  # over Delta's 32 characters: no bounds rather than a prefix
    rows = [
        row(1_500, "10.0.0.9", 80, "Cb", 1.0),
        row(250_999, "10.0.0.1", None, "Ca", float("nan")),
        row(7, "10.0.0.5", 443, long_uid, None),
    ]
    stats = file_stats(write(tmp_path, rows), SCHEMA)
    assert stats["numRecords"] == 3
    assert stats["minValues"] == {
        "ts": "2026-11-28T12:00:00.000Z",  # 7 us, rounded down
        "id": {"orig_h": "10.0.0.1", "orig_p": 80},
    }
    assert stats["maxValues"] == {
        "ts": "2026-11-28T12:00:00.251Z",  # 250,999 us, rounded up
        "id": {"orig_h": "10.0.0.9", "orig_p": 443},
    }
    assert stats["nullCount"] == {
        "ts": 0, "id": {"orig_h": 0, "orig_p": 1}, "uid": 0, "duration": 1, "local": 0,
        "note": 3,
    }  # fmt: skip


def test_only_the_first_indexed_leaves_get_statistics(tmp_path: Path) -> None:
    path = write(tmp_path, [row(0, "10.0.0.1", 1, "Ca", 1.0)])
    two = file_stats(path, SCHEMA, indexed=2)  # ts and id.orig_h
    assert two["minValues"] == {"ts": "2026-11-28T12:00:00.000Z", "id": {"orig_h": "10.0.0.1"}}
    assert two["nullCount"] == {"ts": 0, "id": {"orig_h": 0}}
    assert file_stats(path, SCHEMA, indexed=-1)["minValues"]["uid"] == "Ca"


def test_a_column_that_is_null_in_every_row_has_no_bounds(tmp_path: Path) -> None:
    path = write(tmp_path, [row(0, "h", None, "Ca", None)] * 3)
    stats = file_stats(path, SCHEMA)
    assert "orig_p" not in stats["minValues"]["id"]
    assert stats["nullCount"]["id"]["orig_p"] == 3


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10**11), min_size=1, max_size=9), st.integers(1, 4))
def test_timestamp_bounds_enclose_every_microsecond(micros: list[int], group: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        rows = [row(us, "h", 1, "u", 1.0) for us in micros]
        stats = file_stats(write(Path(folder), rows, group), SCHEMA)
    low = dt.datetime.fromisoformat(stats["minValues"]["ts"].replace("Z", "+00:00"))
    high = dt.datetime.fromisoformat(stats["maxValues"]["ts"].replace("Z", "+00:00"))
    for r in rows:
        assert low <= r["ts"] <= high
    assert high - low < dt.timedelta(microseconds=max(micros) - min(micros) + 2000)


@pytest.mark.parametrize("kind", [DoubleType(), BooleanType()])
def test_floats_and_booleans_keep_null_counts_only(tmp_path: Path, kind: object) -> None:
    schema = StructType([StructField("x", kind)])  # type: ignore[arg-type]
    path = str(tmp_path / "x.parquet")
    values = [1.0, None] if isinstance(kind, DoubleType) else [True, None]
    pq.write_table(pa.table({"x": values}), path)
    assert file_stats(path, schema) == {
        "numRecords": 2, "minValues": {}, "maxValues": {}, "nullCount": {"x": 1}
    }  # fmt: skip
