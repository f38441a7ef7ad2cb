"""The metadata columns of Zeek log rows, shared by the reader's row builders and
their readers: schema ids, and per-message values spread over a message's rows.

A row of a ``_path``/``log`` stream names the columns its record was read with
(``log_schema_id`` on every row, ``log_schema`` the columns' JSON on the first
row of each id in a partition): the reader sets them, the tables writer groups
by them and learns each id's columns from those first rows. The id is the
JSON's, so two schemas equal as types but not in their JSON (an enum's name)
keep two ids wherever they are computed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_spark.zeek.log_schema import LogSchema

__all__ = [
    "learn_schema_texts",
    "per_message_text",
    "received_times",
    "repeated_text",
    "schema_id",
    "schema_texts",
]

_TIMESTAMP = pa.timestamp("us", tz="UTC")


def schema_id(schema: LogSchema | None) -> str:
    """A short id of a log's columns (``""`` when none is known): rows of one id were read
    with one schema (:data:`~broker_spark.spark.zeek_schema.OPTIONAL_METADATA`)."""
    if schema is None:
        return ""
    return schema_texts(schema)[0]


def schema_texts(schema: LogSchema) -> tuple[str, str]:
    """The schema's id and JSON. Not cached by the schema: two schemas can be equal and
    still differ in their JSON (an enum's name, ``enum HTTP::Tags``, is not part of a type's
    equality), and a cache by equality would give whichever came first in this process
    (a Python worker's history), so one batch read twice could give two ids."""
    text = json.dumps(schema.to_json(), sort_keys=True, separators=(",", ":"))
    return _text_id(text), text


@lru_cache(maxsize=256)
def _text_id(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def repeated_text(text: str, n: int) -> pa.Array:
    """``n`` copies of ``text`` as a string array, built from its buffers (no per-row work)."""
    raw = text.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int64) * len(raw)
    if n * len(raw) >= (1 << 31) - 1:
        return pa.array([text] * n, pa.string())
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(raw * n)]
    )


def per_message_text(texts: Sequence[str], messages: pa.Array) -> pa.Array:
    """Each row's message's text (its topic or sender): one text repeated, when the messages
    all have the same (the usual partition), else picked per row."""
    first = texts[0] if texts else ""
    if all(t == first for t in texts):
        return repeated_text(first, len(messages))
    return pc.take(pa.array(texts, pa.string()), messages)


def received_times(received: Sequence[int], messages: pa.Array) -> pa.Array:
    """Each row's message's arrival (``received``: nanoseconds) as Spark's microseconds."""
    times = pa.array(received, pa.int64()).cast(pa.timestamp("ns", tz="UTC"))
    return pc.take(times, messages).cast(_TIMESTAMP, safe=False)


def learn_schema_texts(rows: pa.RecordBatch, texts: dict[str, str]) -> None:
    """Add to ``texts`` the columns (JSON) of the schema ids whose first rows ``rows``
    hold (``log_schema`` is set on an id's first row in a partition only)."""
    column = rows.column("log_schema")
    if column.null_count == len(column):
        return
    where = pc.is_valid(column)
    ids = rows.column("log_schema_id").filter(where).to_pylist()
    for sid, text in zip(ids, column.filter(where).to_pylist(), strict=True):
        texts.setdefault(sid or "", text)
