"""Runs of Zeek JSON lines: a message's records of one log as one row, and back.

A Zeek Batch holds up to hundreds of records of one log. Handed from the
reader to a Spark job one row a record, each record crosses the JVM twice
(into Spark's rows, and out again to the next Python task): about 3 us of
the JVM's CPU a record, more than Arrow takes to parse the line. A
``_path``/``log`` schema that asks for a ``records`` column
(:data:`~broker_spark.spark.zeek_schema.RECORDS`) gets one row per *run*
instead: the records of one log that follow each other in one message, ``log``
their lines joined by newlines (as in Zeek's own JSON log files: a JSON line
holds no raw newline), ``record`` the first one's index, ``records`` how many.
A record that did not decode (a null line) is a run of its own.

:func:`join_runs` makes the runs (the reader); :func:`run_positions` gives each
record of a run its row and index back (the tables writer), so every record
keeps its position ``(offset, record)``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["join_runs", "run_positions", "run_starts"]


def run_starts(messages: np.ndarray, groups: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """The first row of each run of rows in arrival order: a run is rows of one message
    (``messages``) and one group (``groups``: a log and its columns), each with a line
    (``valid``); a row without a line is a run of its own."""
    n = len(messages)
    if n == 0:
        return np.zeros(0, np.int64)
    apart = np.ones(n, dtype=bool)
    apart[1:] = (
        (messages[1:] != messages[:-1]) | (groups[1:] != groups[:-1]) | ~valid[1:] | ~valid[:-1]
    )
    return np.flatnonzero(apart)


def join_runs(lines: pa.Array, starts: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """The lines of each run joined by newlines (null for a run of one null line), and
    how many records each run holds."""
    n = len(lines)
    bounds = np.append(starts, n).astype(np.int32)
    counts = np.diff(bounds).astype(np.int64)
    if len(starts) == n:  # every record a run of its own (one record a message)
        return lines, counts
    lists = pa.ListArray.from_arrays(pa.array(bounds), lines)
    joined = pc.binary_join(lists, "\n")
    return (joined if joined.type == lines.type else joined.cast(lines.type)), counts


def run_positions(records: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For runs of ``records`` records each: every record's row (its run) and its index
    within the run, in order."""
    counts = np.asarray(records, dtype=np.int64)
    rows = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    firsts = np.cumsum(counts) - counts
    index = np.arange(len(rows), dtype=np.int64) - np.repeat(firsts, counts)
    return rows, index
