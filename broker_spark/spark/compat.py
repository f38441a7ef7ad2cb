"""What the running PySpark offers the data source, found by looking, never by version.

Databricks' long-term runtimes run older Spark than open source's newest:
17.3 LTS runs Spark 4.0, 18 LTS Spark 4.1. Their Python data source API lacks
pieces 4.2 added, so each is imported where it exists and replaced where not:

* ``DataSourceStreamArrowWriter`` (streaming writes of Arrow batches; Spark
  4.1 and later). Without it, streaming writers take Spark's rows and make the
  Arrow batches themselves (:func:`rows_to_batches`).
* Admission control (``pyspark.sql.streaming.datasource``: ``ReadLimit``,
  ``ReadMaxRows``, ``ReadAllAvailable``, ``getDefaultReadLimit``; Spark 4.2 and
  later). Without it Spark calls ``latestOffset()`` with no arguments, and the
  reader applies ``maxRecordsPerTrigger`` itself. The stand-ins below only let
  the reader's code read the same on every Spark; old Spark never sees them.
* ``SupportsTriggerAvailableNow`` (same module). Without it Spark 4.0 and 4.1
  still run ``trigger(availableNow=True)``: they ask the source for its end once
  and read up to it in one batch (``maxRecordsPerTrigger`` does not split it).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import datasource as _datasource

__all__ = [
    "HAS_ADMISSION_CONTROL",
    "HAS_ARROW_STREAM_WRITER",
    "ArrowStreamWriterBase",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxRows",
    "SupportsTriggerAvailableNow",
    "arrow_batches",
    "arrow_schema",
    "rows_to_batches",
]

try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    HAS_ADMISSION_CONTROL = True
except ImportError:  # Spark 4.0 and 4.1
    HAS_ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        """Stand-in: Spark before 4.2 has no read limits (it never calls for one)."""

    @dataclass
    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        pass

    @dataclass
    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        max_rows: int

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: Spark before 4.2 never asks a Python source to prepare for it."""

        def prepareForTriggerAvailableNow(self) -> None:
            raise NotImplementedError


ArrowStreamWriterBase: Any = getattr(_datasource, "DataSourceStreamArrowWriter", None)
HAS_ARROW_STREAM_WRITER = ArrowStreamWriterBase is not None
if ArrowStreamWriterBase is None:  # Spark 4.0: streaming writers get rows
    ArrowStreamWriterBase = _datasource.DataSourceStreamWriter


def arrow_schema(schema: Any) -> pa.Schema:
    """Spark's Arrow form of a Spark schema, with timestamps in UTC: newer PySpark names
    the zone (``timezone``), 4.0 and 4.1 take ``timestamp_utc``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema, timestamp_utc=True)


#: Rows turned into one Arrow batch at a time, where Spark hands rows.
ROWS_PER_BATCH = 10_000


def rows_to_batches(rows: Iterator[Any], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Spark's ``Row`` objects as Arrow batches of ``schema`` (for a Spark that hands a
    streaming writer rows, not Arrow)."""
    names = schema.names
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(dict(zip(names, _plain(tuple(row)), strict=False)))
        if len(chunk) >= ROWS_PER_BATCH:
            yield pa.RecordBatch.from_pylist(chunk, schema=schema)
            chunk = []
    if chunk:
        yield pa.RecordBatch.from_pylist(chunk, schema=schema)


def arrow_batches(given: Iterator[Any], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """What Spark hands a streaming writer, as Arrow batches: as they are where Spark has
    the Arrow stream writer, else its rows made into batches."""
    return given if HAS_ARROW_STREAM_WRITER else rows_to_batches(given, schema)


def _plain(value: Any) -> Any:
    """A Row's values as Arrow takes them: nested Rows as dicts of their fields."""
    if isinstance(value, tuple) and hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
