"""Finding the log records in received messages, without decoding them.

A Zeek sends its log records as Batches of LogWrites: Broker data whose
every LogWrite starts with the same bytes up to its record (the message
head, the stream and writer enums and the path, all the same within a
batch). :class:`LogScanner` walks a message once and notes, for each
record, where its ``serial_data`` lies in the buffer it was given: no Broker
value and no log value is built. The records are then decoded many at a time
by :mod:`~broker_spark.zeek.columns`.

LogCreate messages, rare by comparison, are decoded and fed to the
scanner's :class:`~broker_spark.zeek.log_schema.SchemaRegistry` on the spot, so
every record is tied to the schema in force when it arrived (a LogCreate that
changes a stream's columns applies to the records after it). Everything
else (events, identifier updates) is skipped and counted.

Log batches of Zeek's ZeroMQ backend (:mod:`~broker_spark.zeek.log_batch`) are the
second kind of message holding records: each carries its columns (learned as a
LogCreate's) and its records' values without a field count before each; their
groups say so (:attr:`LogGroup.fields`), and the column decoder reads them as such.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import numpy as np

from broker_spark.data.binary_decode import decode_from
from broker_spark.data.varbyte import read_varbyte
from broker_spark.errors import DecodeError
from broker_spark.zeek.log_batch import read_header, record_spans, run_spans
from broker_spark.zeek.log_schema import LogSchema, SchemaRegistry
from broker_spark.zeek.logs import LogCreate, LogWrite

__all__ = ["LOG_CREATE_HEAD", "LogGroup", "LogScanner", "is_log_create"]

_COUNT_ONE = b"\x02" + (1).to_bytes(8, "big")


def _head(kind: int) -> bytes:
    """The first bytes of a Zeek message of ``kind``: vector of 3, count 1, count kind, vector."""
    return b"\x0e\x03" + _COUNT_ONE + b"\x02" + kind.to_bytes(8, "big") + b"\x0e"


BATCH_HEAD = _head(5)
LOG_CREATE_HEAD = _head(2) + b"\x04\x0b"
LOG_WRITE_HEAD = _head(3) + b"\x04\x0b"

#: How deep Batches may nest (Broker allows nesting; Zeek never does it).
MAX_DEPTH = 4

#: ZeroMQ log batches read as one run at most (up to 1000 records each).
RUN_BATCHES = 64

#: Messages read as one run at most: their bytes (Batches of 400 records are 150 KB or
#: so) should stay in the processor's caches while numpy passes over them several times.
RUN_MESSAGES = 16

#: Schemas by the bytes of the LogCreate that declared them: a reader scans the same
#: LogCreates again and again (every partition after a peering holds them).
_SCHEMAS: dict[bytes, LogSchema] = {}


def is_log_create(payload: bytes) -> bool:
    """Whether a message is a LogCreate (by its first bytes; cheap)."""
    return payload.startswith(LOG_CREATE_HEAD)


@dataclass
class LogGroup:
    """The records of one stream and path from one sender, under one schema (None: no
    LogCreate seen for it); ``starts``/``ends`` locate their ``serial_data``.

    ``runs`` say where they came from, a run of records at a time: ``(message,
    place of the first among all records found, count)``; :meth:`messages` and
    :meth:`order` spell that out per record.
    """

    sender: str
    stream: str
    path: str
    schema: LogSchema | None
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    runs: list[tuple[int, int, int]] = field(default_factory=list)
    #: None: each record is a LogWrite's ``serial_data`` (its field count, then its
    #: values); a number: values only, that many (records of a ZeroMQ log batch)
    fields: int | None = None

    def record(self, data: bytes, i: int) -> bytes:
        """Record ``i`` of ``data`` as ``serial_data`` (what ``decode_values`` reads)."""
        raw = data[self.starts[i] : self.ends[i]]
        return raw if self.fields is None else self.fields.to_bytes(4, "big") + raw

    def messages(self) -> np.ndarray:
        """The message each record came in."""
        runs = np.asarray(self.runs, dtype=np.int64).reshape(-1, 3)
        return np.repeat(runs[:, 0], runs[:, 2])

    def order(self) -> np.ndarray:
        """Each record's place among all the records found (arrival order)."""
        runs = np.asarray(self.runs, dtype=np.int64).reshape(-1, 3)
        counts = runs[:, 2]
        before = np.cumsum(counts) - counts
        return np.repeat(runs[:, 1] - before, counts) + np.arange(int(counts.sum()))


@dataclass
class _Head:
    """What the bytes before a record tell: the group it belongs to (None: not kept)."""

    stream: str
    path: str
    group: LogGroup | None
    size: int


class LogScanner:
    """Notes where the log records of each message are; keeps the schema registry current.

    ``paths`` keeps only those logs (None: all). ``on_schema`` is told of every
    LogCreate (its sender, schema, and whether it changed the registry).
    """

    def __init__(
        self,
        registry: SchemaRegistry | None = None,
        paths: Collection[str] | None = None,
        on_schema: Callable[[str, LogSchema, bool], None] | None = None,
    ) -> None:
        self.registry = registry if registry is not None else SchemaRegistry()
        self.paths = frozenset(paths) if paths is not None else None
        self.on_schema = on_schema
        self.groups: list[LogGroup] = []
        self._group_by: dict[tuple[str, str, str, int], LogGroup] = {}
        self._heads: dict[tuple[str, bytes], _Head] = {}
        self._last: tuple[bytes, _Head, str] | None = None
        self.records = 0
        self.skipped = 0  # records of logs not kept
        self.others = 0  # messages that are not log messages
        self.undecodable = 0  # messages that are not valid Broker data

    def take_groups(self) -> list[LogGroup]:
        """The groups found so far, and a fresh start for the next ones."""
        groups = self.groups
        self.groups = []
        self._group_by = {}
        self._heads = {}
        self._last = None
        return groups

    def scan_all(
        self,
        buf: bytes,
        starts: Sequence[int],
        ends: Sequence[int],
        senders: Sequence[str],
        fail: Callable[[int], None] | None = None,
    ) -> None:
        """:meth:`scan` every message ``i`` in ``buf[starts[i]:ends[i]]``; ``fail(i)`` is
        called for one that is not valid Broker data.

        Runs of messages that are Batches of LogWrites of one head, from one sender
        (a Zeek's traffic of one log: the usual partition), are read all at once
        (:meth:`_uniform_run`); the others one by one.
        """
        i = 0
        n = len(starts)
        while i < n:
            taken = self._uniform_run(buf, starts, ends, senders, i) or self._batch_run(
                buf, starts, ends, senders, i, fail
            )
            if taken:
                i += taken
                continue
            before = self.undecodable
            self.scan(buf, starts[i], ends[i], senders[i], i)
            if fail is not None and self.undecodable != before:
                fail(i)
            i += 1

    def _uniform_run(
        self,
        buf: bytes,
        starts: Sequence[int],
        ends: Sequence[int],
        senders: Sequence[str],
        first: int,
    ) -> int:
        """How many messages from ``first`` on were read as one run (0: none).

        The run is the messages that are Batches whose first item starts with the
        head of message ``first``'s first LogWrite, from the same sender. In the
        whole run's bytes at once, numpy finds the head's occurrences and reads
        each record's length; the run is taken only if every Batch then holds
        exactly its count of records, each ending where the next head starts and
        the last at the message's end (else nothing is noted, and messages go one
        by one).
        """
        sender = senders[first]
        pos0 = starts[first]
        if not buf.startswith(BATCH_HEAD, pos0):
            return 0
        try:
            count0, at0 = read_varbyte(buf, pos0 + len(BATCH_HEAD))
        except DecodeError:
            return 0
        if count0 < 2 or not buf.startswith(LOG_WRITE_HEAD, at0):
            return 0
        head = self._new_head(buf, at0, sender)
        if head is None:
            return 0
        head_bytes = buf[at0 : at0 + head.size]
        firsts: list[int] = []
        counts: list[int] = []
        last = first
        while last < len(starts) and last - first < RUN_MESSAGES and senders[last] == sender:
            pos = starts[last]
            if not buf.startswith(BATCH_HEAD, pos):
                break
            try:
                count, at = read_varbyte(buf, pos + len(BATCH_HEAD))
            except DecodeError:
                break
            if count < 1 or not buf.startswith(head_bytes, at):
                break
            firsts.append(at)
            counts.append(count)
            last += 1
        taken = last - first
        if taken < 2:
            return 0  # one message: the one-Batch path costs less
        lo, hi = firsts[0], ends[last - 1]
        size = len(head_bytes)
        if len(buf) < 8 or hi - lo < size:
            return 0
        view = np.frombuffer(buf, dtype=np.uint8)
        words = np.ndarray(shape=(len(buf) - 7,), dtype=">u8", buffer=buf, strides=(1,))
        found = np.flatnonzero(view[lo : hi - size + 1] == head_bytes[0]) + lo
        for k in range(0, size, 8):
            k = min(k, size - 8)
            found = found[words[found + k] == int.from_bytes(head_bytes[k : k + 8], "big")]
        total = sum(counts)
        if len(found) != total:
            return 0
        at = found + size
        one = view[at].astype(np.int64)
        two = view[np.minimum(at + 1, len(buf) - 1)].astype(np.int64)
        short = one < 0x80
        if not (short | (two < 0x80)).all():
            return 0
        width = np.where(short, 1, 2)
        record = np.where(short, one, (one & 0x7F) | (two << 7))
        begins = at + width
        stops = begins + record
        # each record ends where the next head starts, a Batch's last where its message ends
        bounds = np.cumsum(counts)
        lasts = bounds - 1
        heads = bounds - np.asarray(counts)
        follows = np.ones(total, dtype=bool)
        follows[lasts] = False
        if not (stops[:-1][follows[:-1]] == found[1:][follows[:-1]]).all():
            return 0
        if not (stops[lasts] == np.asarray(ends[first:last])).all():
            return 0
        if not (found[heads] == np.asarray(firsts)).all():
            return 0
        self.records += total
        group = head.group
        if group is None:
            self.skipped += total
            return taken
        group.starts.extend(begins.tolist())
        group.ends.extend(stops.tolist())
        records = self.records - total
        for offset, count in enumerate(counts):
            group.runs.append((first + offset, records, count))
            records += count
        return taken

    def scan(self, buf: bytes, start: int, end: int, sender: str, message: int) -> None:
        """Note the log records of the message in ``buf[start:end]``; a message that is not
        valid Broker data (nor a ZeroMQ log batch) is counted in :attr:`undecodable` (and
        raises nothing)."""
        try:
            if end - start > 16 and buf[start] == 0:
                self._log_batch(buf, start, end, sender, message)
                return
            pos = self._value(buf, start, end, sender, message, 0)
        except (DecodeError, IndexError, ValueError):
            self.undecodable += 1
            return
        if pos != end:
            self.undecodable += 1

    def _value(self, buf: bytes, pos: int, end: int, sender: str, message: int, depth: int) -> int:
        if buf.startswith(LOG_WRITE_HEAD, pos):
            return self._writes(buf, pos, end, sender, message, 1)[0]
        if buf.startswith(BATCH_HEAD, pos) and depth < MAX_DEPTH:
            count, pos = read_varbyte(buf, pos + len(BATCH_HEAD))
            uniform = count > 1 and buf.startswith(LOG_WRITE_HEAD, pos)
            if uniform and self._uniform_batch(buf, pos, end, count, sender, message):
                return end
            done = 0
            while done < count:
                if pos >= end:
                    raise DecodeError("truncated batch")
                if buf.startswith(LOG_WRITE_HEAD, pos):
                    pos, taken = self._writes(buf, pos, end, sender, message, count - done)
                    done += taken
                else:
                    pos = self._value(buf, pos, end, sender, message, depth + 1)
                    done += 1
            return pos
        value, after = decode_from(buf, pos)
        if after > end:
            raise DecodeError("message runs past its end")
        if buf.startswith(LOG_CREATE_HEAD, pos):
            self._learn(sender, buf[pos:after], value)
        else:
            self.others += 1
        return after

    def _learn(self, sender: str, raw: bytes, value: object) -> None:
        schema = _SCHEMAS.get(raw)
        if schema is None:
            try:
                schema = LogCreate(value).schema()
            except DecodeError:
                self.others += 1
                return
            if len(_SCHEMAS) >= 1024:
                _SCHEMAS.clear()
            _SCHEMAS[raw] = schema
        changed = self.registry.learn(sender, schema)
        if changed:  # heads point at groups of the old schema
            self._heads.clear()
            self._last = None
        if self.on_schema is not None:
            self.on_schema(sender, schema, changed)

    def _uniform_batch(
        self, buf: bytes, pos: int, end: int, count: int, sender: str, message: int
    ) -> bool:
        """A Batch that is ``count`` LogWrites of one head filling the message to its end,
        as Zeek sends them: all found at once (False, and nothing noted, for any other
        Batch; the record-by-record walk takes those).

        The head's occurrences are searched with numpy (its first byte, then 8 bytes at
        a time); they are the records only if there are exactly ``count`` of them and
        each record, by its length, ends exactly where the next head starts (a head
        inside a record's bytes would break that).
        """
        last = self._last
        if last is None or last[2] is not sender or not buf.startswith(last[0], pos):
            head = self._new_head(buf, pos, sender)
            if head is None:
                return False
            last = self._last = (buf[pos : pos + head.size], head, sender)
        head_bytes, head, _sender = last
        size = len(head_bytes)
        if end - pos < count * (size + 1) or len(buf) < 8:
            return False
        view = np.frombuffer(buf, dtype=np.uint8)
        words = np.ndarray(shape=(len(buf) - 7,), dtype=">u8", buffer=buf, strides=(1,))
        # where the head could start: its first byte, then 8 bytes at a time
        found = np.flatnonzero(view[pos : end - size + 1] == head_bytes[0]) + pos
        for k in range(0, size, 8):
            k = min(k, size - 8)
            found = found[words[found + k] == int.from_bytes(head_bytes[k : k + 8], "big")]
        if len(found) != count or found[0] != pos:
            return False
        at = found + size
        first = view[at].astype(np.int64)
        second = view[np.minimum(at + 1, len(buf) - 1)].astype(np.int64)
        short = first < 0x80
        if not (short | (second < 0x80)).all():
            return False  # a record of 16 KiB or more: the walk reads its length
        width = np.where(short, 1, 2)
        record = np.where(short, first, (first & 0x7F) | (second << 7))
        starts = at + width
        stops = starts + record
        # each record ends where the next head starts, and the last where the message ends
        if stops[-1] != end or not (stops[:-1] == found[1:]).all():
            return False
        group = head.group
        self.records += count
        if group is None:
            self.skipped += count
            return True
        group.starts.extend(starts.tolist())
        group.ends.extend(stops.tolist())
        group.runs.append((message, self.records - count, count))
        return True

    def _writes(
        self, buf: bytes, pos: int, end: int, sender: str, message: int, most: int
    ) -> tuple[int, int]:
        """The LogWrite at ``pos`` and those right after it with the same head, ``most`` in
        all at most; returns the position after the last one and how many were read.

        This loop runs once per record of every log, so it does as little as it can:
        the head is compared as bytes, a record's length (a varbyte of one or two
        bytes, almost always) is read inline, and where the records came from is
        noted once per run.
        """
        last = self._last
        if last is None or last[2] is not sender or not buf.startswith(last[0], pos):
            head = self._new_head(buf, pos, sender)
            if head is None:
                return self._slow_write(buf, pos, end, sender, message), 1
            last = self._last = (buf[pos : pos + head.size], head, sender)
        head_bytes, head, _sender = last
        size_of_head = head.size
        group = head.group
        starts = group.starts if group is not None else []
        ends = group.ends if group is not None else []
        startswith = buf.startswith
        taken = 0
        while True:
            at = pos + size_of_head
            size = buf[at]
            if size < 0x80:
                at += 1
            else:
                more = buf[at + 1]
                if more < 0x80:
                    size = (size & 0x7F) | (more << 7)
                    at += 2
                else:
                    size, at = read_varbyte(buf, at)
            stop = at + size
            if stop > end:
                raise DecodeError("log record runs past the message's end")
            starts.append(at)
            ends.append(stop)
            taken += 1
            if taken >= most or stop >= end or not startswith(head_bytes, stop):
                break
            pos = stop
        if group is None:
            self.skipped += taken
        else:
            group.runs.append((message, self.records, taken))
        self.records += taken
        return stop, taken

    def _new_head(self, buf: bytes, pos: int, sender: str) -> _Head | None:
        """Parse a LogWrite's head (None when it is not the plain layout)."""
        at = pos + len(LOG_WRITE_HEAD)
        n, at = read_varbyte(buf, at)
        stream = buf[at : at + n].decode("utf-8")
        at += n
        if buf[at] != 0x0B:
            return None
        n, at = read_varbyte(buf, at + 1)
        at += n
        if buf[at] != 0x05:
            return None
        n, at = read_varbyte(buf, at + 1)
        path = buf[at : at + n].decode("utf-8")
        at += n
        if buf[at] != 0x05:
            return None
        size = at + 1 - pos
        key = (sender, buf[pos : pos + size])
        head = self._heads.get(key)
        if head is None:
            head = self._heads[key] = _Head(stream, path, self._group(sender, stream, path), size)
        return head

    def _slow_write(self, buf: bytes, pos: int, end: int, sender: str, message: int) -> int:
        """A LogWrite whose head is not cached (unusually long names): decoded in full."""

        value, after = decode_from(buf, pos)
        write = LogWrite(value)
        if not write.valid():
            self.others += 1
            return after
        serial = write.serial_data()
        stop = after
        start = stop - len(serial)
        if buf[start:stop] != serial:
            raise DecodeError("log record not at the end of its LogWrite")
        group = self._group(sender, write.stream_id(), write.path())
        if group is None:
            self.skipped += 1
        else:
            group.starts.append(start)
            group.ends.append(stop)
            group.runs.append((message, self.records, 1))
        self.records += 1
        return after

    def _batch_run(
        self,
        buf: bytes,
        starts: Sequence[int],
        ends: Sequence[int],
        senders: Sequence[str],
        first: int,
        fail: Callable[[int], None] | None = None,
    ) -> int:
        """How many ZeroMQ log batches from ``first`` on were read as one run (0: none): the
        batches of one log and columns from one sender, their records found all at once
        (:func:`~broker_spark.zeek.log_batch.run_spans`)."""
        pos, end = starts[first], ends[first]
        if end - pos <= 16 or buf[pos] != 0:
            return 0
        try:
            header = read_header(memoryview(buf)[pos:end])
        except DecodeError:
            return 0
        head = buf[pos : pos + header.size]
        sender = senders[first]
        last = first + 1
        while (
            last < len(starts)
            and last - first < RUN_BATCHES
            and senders[last] == sender
            and buf.startswith(head, starts[last])
        ):
            last += 1
        if last - first < 2:
            return 0  # one batch: the one-batch path costs less
        found = run_spans(buf, starts[first:last], ends[first:last], header)
        if found is None:  # a malformed batch among them: one by one, each on its own
            for k in range(first, last):
                before = self.undecodable
                self.scan(buf, starts[k], ends[k], senders[k], k)
                if fail is not None and self.undecodable != before:
                    fail(k)
            return last - first
        begins, stops, counts = found
        self._learn_batch(sender, header.schema)
        total = int(counts.sum())
        group = self._group(sender, header.stream, header.path, len(header.schema.fields))
        if group is None:
            self.skipped += total
        else:
            group.starts.extend(begins.tolist())
            group.ends.extend(stops.tolist())
            records = self.records
            for k, count in enumerate(counts.tolist()):
                if count:
                    group.runs.append((first + k, records, count))
                    records += count
        self.records += total
        return last - first

    def _learn_batch(self, sender: str, schema: LogSchema) -> None:
        if self.registry.learn(sender, schema):
            self._heads.clear()
            self._last = None
            if self.on_schema is not None:
                self.on_schema(sender, schema, True)

    def _log_batch(self, buf: bytes, start: int, end: int, sender: str, message: int) -> None:
        """A ZeroMQ log batch (:mod:`~broker_spark.zeek.log_batch`): its own columns, learned
        as a LogCreate's would be, and its records, values only, found all at once."""
        header, starts, ends = record_spans(buf[start:end])
        schema = header.schema
        self._learn_batch(sender, schema)
        count = len(starts)
        group = self._group(sender, header.stream, header.path, len(schema.fields))
        if group is None:
            self.skipped += count
        elif count:
            group.starts.extend((starts + start).tolist())
            group.ends.extend((ends + start).tolist())
            group.runs.append((message, self.records, count))
        self.records += count

    def _group(
        self, sender: str, stream: str, path: str, fields: int | None = None
    ) -> LogGroup | None:
        if self.paths is not None and path not in self.paths:
            return None
        schema = self.registry.lookup(sender, stream, path)
        key = (sender, stream, path, id(schema), fields)
        group = self._group_by.get(key)
        if group is None:
            group = self._group_by[key] = LogGroup(sender, stream, path, schema, fields=fields)
            self.groups.append(group)
        return group
