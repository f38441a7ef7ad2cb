"""Ids of Zeek log schemas, and texts repeated down a column without per-row work.

A row of a ``_path``/``log`` stream names the columns its record was read with
(``log_schema_id`` on every row, ``log_schema`` the columns' JSON on the first
row of each id in a partition): the reader sets them, the tables writer groups
by them. The id is the JSON's, so two schemas equal as types but not in their
JSON (an enum's name) keep two ids wherever they are computed.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache

import numpy as np
import pyarrow as pa

from broker_spark.zeek.schema import LogSchema

__all__ = ["repeated_text", "schema_id", "schema_texts"]


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
