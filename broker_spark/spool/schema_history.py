"""The LogCreates a stream reader received: which columns each log had from which offset.

Zeek sends a log's schema once per peering, and its records for hours after,
so the partition that holds a record rarely holds its LogCreate. (On Zeek's
ZeroMQ backend every log batch carries its columns; they are remembered the same
way, when they change.) The
reader's pump shows every received message to :meth:`LogSchemaHistory.observe`
(a prefix test per message; only LogCreates are decoded), which remembers
each schema with the offset it arrived at; a partition then carries the
schemas in force at its first offset, and executors need nothing but the
partition. With a ``spoolPath`` the history is kept beside the spool
(``zeek-log-schemas.jsonl``, one line per change) so a restarted query knows
them, and ``load()`` can offer a log's columns from an earlier run.

A LogCreate that changes a log's columns is logged as a warning naming
what changed: the running query keeps its columns (old rows keep their
values, the log's new columns are not read, its dropped ones are null).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

from broker_spark.data.binary import decode
from broker_spark.data.varbyte import read_varbyte
from broker_spark.errors import DecodeError
from broker_spark.zeek.log_batch import is_log_batch, read_header, record_count
from broker_spark.zeek.log_scan import BATCH_HEAD, LOG_WRITE_HEAD, is_log_create
from broker_spark.zeek.log_schema import LogSchema
from broker_spark.zeek.logs import LogCreate

__all__ = ["HISTORY_FILE", "LogSchemaHistory", "describe_change", "records_in"]

log = logging.getLogger(__name__)

HISTORY_FILE = "zeek-log-schemas.jsonl"

Key = tuple[str, str, str]  # sender, stream, path


def describe_change(old: LogSchema, new: LogSchema) -> str:
    """What a new LogCreate changed in a log's columns, in words."""
    before = {f.name: f for f in old.fields}
    after = {f.name: f for f in new.fields}
    parts = []
    added = [n for n in after if n not in before]
    removed = [n for n in before if n not in after]
    retyped = [n for n in after if n in before and after[n].zeek_type != before[n].zeek_type]
    if added:
        parts.append("added " + ", ".join(added))
    if removed:
        parts.append("removed " + ", ".join(removed))
    if retyped:
        parts.append(
            "retyped "
            + ", ".join(f"{n} ({before[n].zeek_type} to {after[n].zeek_type})" for n in retyped)
        )
    return "; ".join(parts) or "reordered its columns"


def records_in(payload: bytes) -> int:
    """How many Zeek log records one spooled message holds (0 for what is not a log
    write, or does not decode: that is counted where it is read)."""
    try:
        if payload.startswith(BATCH_HEAD):
            return read_varbyte(payload, len(BATCH_HEAD))[0]
        if payload.startswith(LOG_WRITE_HEAD):
            return 1
        if is_log_batch(payload):
            return record_count(payload, read_header(payload))
    except DecodeError:
        pass
    return 0


class LogSchemaHistory:
    """Schemas by the offset they arrived at, per (sender, stream, path); thread-safe."""

    def __init__(self, directory: str | None = None, *, readonly: bool = False) -> None:
        self._lock = threading.Lock()
        self._entries: dict[Key, list[tuple[int, LogSchema]]] = {}
        self._path = os.path.join(directory, HISTORY_FILE) if directory else None
        self._readonly = readonly
        self._messages = 0  # messages seen by observe, and the log records in them
        self._records = 0
        self._assumed = 1.0  # records per message, as the spool's owner saw them
        self._read_to = 0  # how far the file was read (a read-only view tails it)
        self._lines_read = 0
        if self._path is not None and os.path.exists(self._path):
            self._load(self._path)

    def _load(self, path: str) -> None:
        try:
            with open(path, "rb") as f:
                f.seek(self._read_to)
                raw = f.read()
        except FileNotFoundError:
            return
        end = raw.rfind(b"\n") + 1  # whole lines only: the writer may be mid-line
        self._read_to += end
        for line in raw[:end].splitlines():
            self._lines_read += 1
            try:
                self._merge([json.loads(line)])
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("%s line %d: ignored (%s)", path, self._lines_read, exc)

    def refresh(self) -> None:
        """A read-only view: take the changes the spool's owner wrote since the last look."""
        if self._path is not None and self._readonly:
            with self._lock:
                self._load(self._path)

    def merge(self, entries: Sequence[dict[str, Any]]) -> None:
        """Add changes in the form :meth:`entries` gives them (a relay's, a file's lines).
        Raises ``ValueError``/``KeyError``/``TypeError`` on one that is malformed."""
        with self._lock:
            self._merge(entries)

    def _merge(self, entries: Sequence[dict[str, Any]]) -> None:
        for obj in entries:
            key = (str(obj["sender"]), str(obj["stream"]), str(obj["path"]))
            schema = LogSchema.from_json(obj["schema"], source="LogCreate")
            known = self._entries.setdefault(key, [])
            offset = int(obj["offset"])
            if (offset, schema) not in known:
                known.append((offset, schema))
                known.sort(key=lambda e: e[0])

    def entries(self) -> list[dict[str, Any]]:
        """Every change, as the history file's lines: offset, sender, stream, path, schema."""
        with self._lock:
            return [
                _entry(offset, key[0], schema)
                for key, changes in self._entries.items()
                for offset, schema in changes
            ]

    def observe(self, first_offset: int, items: Sequence[Sequence[Any]]) -> None:
        """Remember the LogCreates among messages appended from ``first_offset`` on (the
        pump's records: topic, payload, sender, ...)."""
        records = 0
        for i, item in enumerate(items):
            payload = item[1]
            if type(payload) is not bytes:
                continue
            if payload.startswith((BATCH_HEAD, LOG_WRITE_HEAD)):
                records += records_in(payload)
            elif is_log_batch(payload):  # Zeek's ZeroMQ backend: every batch has its columns
                try:
                    header = read_header(payload)
                    records += record_count(payload, header)
                except DecodeError:
                    continue  # counted where it is read
                self.add(first_offset + i, str(item[2]), header.schema)
            elif is_log_create(payload):
                try:
                    schema = LogCreate(decode(payload)).schema()
                except DecodeError as exc:
                    log.warning(
                        "offset %d: a LogCreate that does not decode (%s)", first_offset + i, exc
                    )
                    continue
                self.add(first_offset + i, str(item[2]), schema)
        with self._lock:
            self._messages += len(items)
            self._records += records

    def learn_sizes(self, items: Sequence[Sequence[Any]]) -> None:
        """Count the log records in messages already spooled (their schemas are in the
        history file): an owner that opens a spool filled before it started plans by
        records from its first batch instead of by messages until new ones arrive."""
        records = sum(records_in(item[1]) for item in items if type(item[1]) is bytes)
        with self._lock:
            self._messages += len(items)
            self._records += records

    def records_per_message(self) -> float:
        """How many log records a message has held on average (1 before any was seen):
        Zeek's Batches hold up to 400, so a partition is planned by records, not messages.
        A view of a spool another process fills takes that process's figure
        (:meth:`assume_records_per_message`)."""
        with self._lock:
            if not self._messages or not self._records:
                return self._assumed
            return max(1.0, self._records / self._messages)

    def assume_records_per_message(self, ratio: float) -> None:
        """What the spool's owner saw (a receiver's, a relay's history observes, not this)."""
        with self._lock:
            self._assumed = max(1.0, float(ratio))

    def add(self, offset: int, sender: str, schema: LogSchema) -> bool:
        """Remember ``schema`` from ``offset`` on; True when it changed the log's columns."""
        key = (sender, schema.stream, schema.path)
        with self._lock:
            entries = self._entries.setdefault(key, [])
            if entries and entries[-1][1].fields == schema.fields:
                return False  # the same columns again (Zeek resends them on every peering)
            previous = self._latest_for(schema.path)
            entries.append((offset, schema))
            if self._path is not None and not self._readonly:
                with open(self._path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(_entry(offset, sender, schema)) + "\n")
        if previous is not None and previous.fields != schema.fields:
            log.warning(
                "offset %d: a LogCreate from %s changed the columns of log %s: %s. A running "
                "query keeps its columns: rows of the old layout keep their values, columns "
                "the log no longer has are null, new ones are not read until the query restarts",
                offset,
                sender,
                schema.path,
                describe_change(previous, schema),
            )
        return True

    def snapshot(self, offset: int) -> list[tuple[Key, LogSchema]]:
        """The schemas in force just before ``offset``: the last one of each key that
        arrived at a lower offset."""
        out = []
        with self._lock:
            for key, entries in self._entries.items():
                best = None
                for at, schema in entries:
                    if at < offset:
                        best = schema
                if best is not None:
                    out.append((key, best))
        return out

    def latest(self, path: str) -> LogSchema | None:
        """The last schema learned for a log path, from any sender."""
        with self._lock:
            return self._latest_for(path)

    def _latest_for(self, path: str) -> LogSchema | None:
        best: tuple[int, LogSchema] | None = None
        for (_sender, _stream, p), entries in self._entries.items():
            if p == path and entries and (best is None or entries[-1][0] >= best[0]):
                best = entries[-1]
        return best[1] if best is not None else None


def _entry(offset: int, sender: str, schema: LogSchema) -> dict[str, Any]:
    return {
        "offset": offset,
        "sender": sender,
        "stream": schema.stream,
        "path": schema.path,
        "schema": schema.to_json(),
    }
