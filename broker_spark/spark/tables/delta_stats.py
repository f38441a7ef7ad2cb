"""Delta's per-file statistics of a Parquet file the tasks wrote, from the file's footer.

Delta readers skip files by each add action's ``stats`` (``numRecords``,
``minValues``, ``maxValues``, ``nullCount``): Spark's Delta writer collects them
for the first 32 leaf columns (``delta.dataSkippingNumIndexedCols``), and a query
such as ``WHERE ts > ...`` or ``WHERE id.orig_h = ...`` on a table without them
reads every file of its days. The fast path's files already carry Parquet's
row-group statistics, so the driver folds those into Delta's, reading only the
footer, never the rows.

Every bound is one every reader may trust, even where Delta's writers are looser:

* timestamps are kept in milliseconds (Delta's precision): a minimum rounded down,
  a maximum rounded up, so a row's microseconds never fall outside them;
* strings over 32 characters (Delta's prefix length) keep no bounds, rather than a
  prefix that would be no upper bound;
* floating-point and boolean columns keep only their null counts (a NaN is in no
  Parquet bound), as do lists, maps and any column a row group has no bounds for.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pyarrow.parquet as pq

__all__ = ["INDEXED_COLUMNS", "file_stats"]

#: Delta's default number of leaf columns with statistics (dataSkippingNumIndexedCols).
INDEXED_COLUMNS = 32
#: Delta's length of the strings in its statistics.
_STRING_PREFIX = 32
_BOUNDED = ("long", "integer", "short", "byte", "string", "timestamp", "timestamp_ntz", "date")


def _leaves(schema: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    """Each leaf column of a Spark StructType in order, with Spark's name of its type
    (``array``/``map`` for collections, whose elements are no leaf of Delta's)."""
    for field in schema.fields:
        kind = field.dataType.typeName()
        if kind == "struct":
            yield from _leaves(field.dataType, (*prefix, field.name))
        else:
            yield (*prefix, field.name), kind


def _millis(value: dt.datetime, up: bool) -> str:
    """A timestamp bound in milliseconds, ISO 8601 in UTC (rounded outwards)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    value = value.astimezone(dt.timezone.utc)
    extra = value.microsecond % 1000
    if extra:
        value -= dt.timedelta(microseconds=extra)
        if up:
            value += dt.timedelta(milliseconds=1)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def _bound(kind: str, value: Any, up: bool) -> Any:
    """Delta's JSON form of a bound, None when it keeps none."""
    if kind in ("timestamp", "timestamp_ntz") and isinstance(value, dt.datetime):
        return _millis(value, up)
    if kind == "date" and isinstance(value, dt.date):
        return value.isoformat()
    if kind == "string":
        if isinstance(value, bytes):
            try:
                value = value.decode()
            except UnicodeDecodeError:
                return None
        return value if isinstance(value, str) and len(value) <= _STRING_PREFIX else None
    if kind in ("long", "integer", "short", "byte") and isinstance(value, int):
        return value
    return None


def _put(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for name in path[:-1]:
        tree = tree.setdefault(name, {})
    tree[path[-1]] = value


def file_stats(path: str, schema: Any, indexed: int = INDEXED_COLUMNS) -> dict[str, Any]:
    """Delta's ``stats`` of the Parquet file at ``path`` for a table of columns ``schema``
    (a Spark StructType: the partition column is in no file and gets none); the first
    ``indexed`` leaf columns get bounds and null counts (-1: all)."""
    meta = pq.read_metadata(path)
    chunks: dict[tuple[str, ...], list[Any]] = {}
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            column = group.column(c)
            chunks.setdefault(tuple(column.path_in_schema.split(".")), []).append(column.statistics)
    stats: dict[str, Any] = {"numRecords": meta.num_rows}
    lows: dict[str, Any] = {}
    highs: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    leaves = list(_leaves(schema))
    for leaf, kind in leaves if indexed < 0 else leaves[:indexed]:
        found = chunks.get(leaf)  # a list's or map's values are under longer paths: none
        if found is None:
            continue
        if all(s is not None and s.has_null_count for s in found):
            _put(nulls, leaf, sum(s.null_count for s in found))
        if kind not in _BOUNDED or any(s is None for s in found):
            continue
        found = [s for s in found if s.num_values > 0]  # a group of nulls only has no bounds
        if not found or not all(s.has_min_max for s in found):
            continue
        low = _bound(kind, min(s.min for s in found), up=False)
        high = _bound(kind, max(s.max for s in found), up=True)
        if low is not None and high is not None:
            _put(lows, leaf, low)
            _put(highs, leaf, high)
    stats["minValues"] = lows
    stats["maxValues"] = highs
    stats["nullCount"] = nulls
    return stats
