"""``bench/_null_source.py``'s ``rows=bench``: the limit ``bench/spark_stream.py`` gives its
events read as a share of must hold the rows that read gives (issue 51's "the same rows'
limit"), so these compare them with what the reader's converter makes of the bench
publisher's own events."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest

from broker_spark.columnar.record_batches import DEFAULT_SCHEMA, records_to_arrow

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench_modules():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import _null_source
        import spark_stream

        yield _null_source, spark_stream
    finally:
        sys.path.remove(str(ROOT / "bench"))


def test_the_same_rows_are_the_rows_the_read_gives(bench_modules) -> None:
    null_source, spark_stream = bench_modules
    first = 1_000_000
    sent = spark_stream._preencoded(first, 50)  # the publisher's events, as it sends them
    read = records_to_arrow(
        [(t, p, null_source.BENCH_SENDER, 0, i) for i, (t, p) in enumerate(sent)]
    )
    made = null_source._batch("bench", 50)
    assert made.schema == DEFAULT_SCHEMA
    for name in ("topic", "data", "sender"):
        assert made.column(name).to_pylist() == read.column(name).to_pylist(), name
    with spark_stream.broker.Endpoint() as ep:
        assert len(null_source.BENCH_SENDER) == len(ep.node_id())


def test_a_tiny_event_stays_the_default_and_others_are_refused(bench_modules) -> None:
    null_source, _ = bench_modules
    small = null_source._batch("small", 3)
    assert small.column("data").to_pylist() == [null_source.SMALL_TEXT] * 3
    assert pc.sum(small.column("offset")).as_py() == 3
    source = null_source.NullSource({"rows": "huge"})
    with pytest.raises(ValueError, match="rows must be small or bench"):
        source.streamReader(None)
