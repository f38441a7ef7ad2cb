"""A message's records of one log as one row holding the message's own bytes.

The tables writer (:mod:`~broker_spark.spark.zeek_tables`) wants each log's
records typed. Handed over as Zeek's JSON lines, every record is rendered by
the reader (about 4 us) and parsed again by the writer's task (about 2 us);
handed over as the Broker bytes Zeek sent, the task decodes them straight into
the log's typed columns, as a typed stream does, in less than both. A
``_path``/``log``/``records`` schema that also asks for a ``message`` column
(:data:`~broker_spark.spark.zeek_schema.MESSAGE`, binary) gets a row per log of
each message: ``message`` the message's payload, ``log`` null, ``record`` 0 and
``records`` how many records of that log the message holds, with the columns in
force for them (``log_schema_id``, ``log_schema``). The reader only scans the
message to count them: it decodes nothing.

A message may hold records of one log read with two schemas (two of Zeek's
streams writing one path): a row could not say which of its records are
whose, so such a partition is read as runs of JSON lines instead (``message``
null), which every consumer of these rows also takes. A message a relay kept
undecodable is a row of its own as well: ``message`` null and ``log`` its
JSON object (:mod:`~broker_spark.columnar.log_converter`'s undecodable row), so
the tables writer can put it in its quarantine.
:mod:`~broker_spark.spark.tables.message_decode` decodes the rows (typed, or back
into runs of JSON lines for Spark's own parse).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_spark.columnar.log_metadata import (
    per_message_text,
    received_times,
    repeated_text,
    schema_texts,
)
from broker_spark.zeek.log_scan import LogGroup
from broker_spark.zeek.log_schema import LogSchema

__all__ = ["message_rows"]


def message_rows(
    groups: Sequence[LogGroup],
    schemas: Sequence[LogSchema | None],
    data: bytes,
    spans: tuple[Sequence[int], Sequence[int]],
    fields: dict[str, Sequence],
    schema: pa.Schema,
    roles: dict[str, str],
    relay: str | None,
    kept: Sequence[tuple[int, str, str]] = (),
) -> pa.RecordBatch | None:
    """The rows of ``groups`` (a scan's groups of records, each read with ``schemas[i]``), a
    row per message and log; None when a message holds one log under two schemas.
    ``spans`` are the messages' payload starts and ends in ``data``, ``fields`` their
    ``topic``, ``sender``, ``received`` (ns) and ``offset``; ``roles`` maps the output's
    roles to its column names. ``kept``: rows of their own after those, ``(message, path,
    line)`` with no message bytes (a message a relay kept undecodable)."""
    rows: dict[tuple[int, str], list] = {}  # (message, path): [first place, count, schema]
    for group, read_as in zip(groups, schemas, strict=True):
        sid = schema_texts(read_as) if read_as is not None else ("", None)
        for message, place, count in group.runs:
            row = rows.get((message, group.path))
            if row is None:
                rows[(message, group.path)] = [place, count, sid]
            elif row[2][0] != sid[0]:
                return None
            else:
                row[0], row[1] = min(row[0], place), row[1] + count
    keys = sorted(rows, key=lambda k: (k[0], rows[k][0]))
    for message, path, _line in kept:
        rows[(message, path)] = [0, 1, (None, None)]
        keys.append((message, path))
    n = len(keys)
    messages = np.fromiter((m for m, _p in keys), dtype=np.int64, count=n)
    ids = [rows[k][2] for k in keys]
    seen: set[str] = set()
    first_texts = []
    for sid, text in ids:
        first_texts.append(text if sid not in seen else None)
        seen.add(sid)
    starts, ends = spans
    taken = pa.array(messages)
    made = {
        "_path": lambda: pa.array([p for _m, p in keys], pa.string()),
        "log": lambda: pa.concat_arrays(
            [pa.nulls(n - len(kept), pa.string()), pa.array([k[2] for k in kept], pa.string())]
        ),
        "message": lambda: pa.array(
            [data[starts[m] : ends[m]] for m in messages[: n - len(kept)]] + [None] * len(kept),
            pa.binary(),
        ),
        "topic": lambda: per_message_text(fields["topic"], taken),
        "sender": lambda: per_message_text(fields["sender"], taken),
        "received_at": lambda: received_times(fields["received"], taken),
        "offset": lambda: pc.take(pa.array(fields["offset"], pa.int64()), taken),
        "record": lambda: pa.array(np.zeros(n, dtype=np.int64)),
        "records": lambda: pa.array([rows[k][1] for k in keys], pa.int64()),
        "log_schema_id": lambda: pa.array([sid for sid, _t in ids], pa.string()),
        "log_schema": lambda: pa.array(first_texts, pa.string()),
        "relay": lambda: repeated_text(relay, n) if relay is not None else pa.nulls(n),
    }
    by_name = {name: role for role, name in roles.items()}
    arrays = []
    for f in schema:
        values = made[by_name[f.name]]()
        arrays.append(values if values.type == f.type else values.cast(f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
