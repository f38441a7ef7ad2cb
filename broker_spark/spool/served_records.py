"""What a relay serves one reader of a spool: the records on its topics, of its logs.

A reader's HELLO may name the ``topics`` it reads (prefixes) and, reading Zeek's logs,
the ``logs`` it reads (paths: ``conn``, ``dns``). A relay then sends it only those
records (KEPT frames: the offsets still advance over the others, so a checkpoint and
``failOnDataLoss`` mean what they meant), and a query that reads one log of many no
longer fetches, frames and scans every log's records. A record's logs are told from
its payload's first bytes (:func:`~broker_spark.zeek.log_paths.message_logs`); one that
cannot be told is served. A relay that does not know a field serves everything and
does not echo it in its WELCOME; the reader then leaves the rest out itself
(:func:`served`), so a newer reader reads the same rows from an older relay.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from broker_spark.data.msgpack_records import is_record, record_unpacker
from broker_spark.errors import DecodeError
from broker_spark.zeek.log_paths import message_logs

__all__ = ["hello_fields", "keep_records", "served"]


def keep_records(
    stream: bytes,
    topics: tuple[str, ...] | None = None,
    logs: Collection[str] | None = None,
) -> tuple[bytes, int]:
    """The records of ``stream`` on one of ``topics`` (prefixes; None: any) holding
    records of one of ``logs`` (paths; None: anything), as a record stream (their bytes
    untouched), and how many there are."""
    wanted = frozenset(logs) if logs is not None else None
    unpacker = record_unpacker(stream)
    kept: list[bytes] = []
    start = 0
    for record in unpacker:
        end = unpacker.tell()
        if not is_record(record):
            raise DecodeError(f"record at byte {start} is not a spool record")
        if (topics is None or record[0].startswith(topics)) and (
            wanted is None or _holds(record[1], wanted)
        ):
            kept.append(stream[start:end])
        start = end
    if len(kept) and sum(map(len, kept)) == len(stream):
        return stream, len(kept)
    return b"".join(kept), len(kept)


def _holds(payload: bytes, wanted: frozenset[str]) -> bool:
    found = message_logs(payload)
    return found is None or not found.isdisjoint(wanted)


def hello_fields(topics: tuple[str, ...] | None, logs: tuple[str, ...] | None) -> dict[str, Any]:
    """What a reader of ``topics`` and ``logs`` names in its HELLO (nothing for None)."""
    asked: dict[str, Any] = {}
    if topics:
        asked["topics"] = list(topics)
    if logs:
        asked["logs"] = list(logs)
    return asked


def served(
    welcome: dict[str, Any],
    topics: tuple[str, ...] | None,
    logs: tuple[str, ...] | None,
    data: bytes,
    count: int,
) -> tuple[bytes, int]:
    """``data`` (``count`` records) as served for a reader of ``topics`` and ``logs``: a
    relay that narrows what it serves echoes them in its WELCOME; what one that does not
    (an older relay) sent beyond them is left out here."""
    topics = topics if topics and welcome.get("topics") is None else None
    logs = logs if logs and welcome.get("logs") is None else None
    if topics is None and logs is None:
        return data, count
    return keep_records(data, topics, logs)
