"""The records bench/kafka_path.py sends both ways: the recordings' conn, dns and http mix.

Both paths carry the same records of a real Zeek (``tests/vectors``' log recordings,
repeated in :data:`zeek_logs.TABLES_MIX`'s proportions), each as its path carries it:

- **ZeroMQ** (ours): Zeek's ``zeek-bin-serializer`` batches of up to 1000 records of one log
  (``Log::write_buffer_size``), made once per log as a template;
- **Kafka**: Zeek's own JSON line of the record (the recordings hold the lines the same Zeek
  wrote), one per message, as Zeek's Kafka plugin sends them.

Each record sent is stamped, the same way on both paths: ``ts`` is the time it is sent
(so that a table's rows say their own latency), and ``uid`` a number unique in the run (so
that a table says which records it lost or holds twice). A ZeroMQ template is stamped by
overwriting the bytes of those two values in place, a JSON line by formatting its head:
neither sender pays for encoding per record what Zeek's C++ pays nothing for in Python.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from _zeek_tables import TABLES_MIX

#: Zeek's ``Log::write_buffer_size``: the most records one ZeroMQ log batch holds.
ZEEK_BATCH = 1000
#: The uid each record gets: 18 characters, as Zeek's, the run's sequence number in hex.
UID = "C{:017x}"
_HEAD = re.compile(r'^\{"ts":[0-9.eE+-]+,"uid":"[^"]*",')


@dataclass(frozen=True)
class Template:
    """One log's ZeroMQ batch of :data:`ZEEK_BATCH` records, and where each record's ``ts``
    and ``uid`` bytes are, to stamp them in place."""

    path: str
    batch: bytes
    ts_at: tuple[int, ...]
    uid_at: tuple[int, ...]
    ts_format: str  # the byte order of a time's double


def _recorded(path: str) -> tuple[Any, list[list[Any]], list[str]]:
    """The schema, every record's values and Zeek's own JSON line of each, for ``path``."""
    from zeek_recordings import LOG_RECORDINGS, recording

    from broker_spark.zeek import standard_schema
    from broker_spark.zeek.record import decode_values

    schema = standard_schema(path)
    values: list[list[Any]] = []
    lines: list[str] = []
    for name in LOG_RECORDINGS:
        rec = recording(name)
        if path in rec.writes:
            values += [decode_values(s, schema.names) for s in rec.writes[path]]
            lines += rec.local_lines(path)
    return schema, values, lines


@cache
def template(path: str) -> Template:
    """The log's batch template: its recorded records cycled to fill a batch, each with a
    ``ts`` and ``uid`` of its own that are then found in the encoded bytes."""
    from broker_spark.zeek.log_batch import encode_batch
    from broker_spark.zeek.types import ZeekTime

    schema, values, _lines = _recorded(path)
    ts, uid = schema.names.index("ts"), schema.names.index("uid")
    records = []
    for i in range(ZEEK_BATCH):
        record = list(values[i % len(values)])
        record[ts] = ZeekTime(1e9 + i + 0.25)
        record[uid] = UID.format(0xABC000000 + i)
        records.append(record)
    batch = encode_batch(schema, records)
    fmt = ">d" if batch.find(struct.pack(">d", 1e9 + 0.25)) >= 0 else "<d"
    ts_at = tuple(batch.index(struct.pack(fmt, 1e9 + i + 0.25)) for i in range(ZEEK_BATCH))
    uid_at = tuple(batch.index(UID.format(0xABC000000 + i).encode()) for i in range(ZEEK_BATCH))
    return Template(path, batch, ts_at, uid_at, fmt)


def stamp_batch(t: Template, count: int, first: int, now: float) -> bytes:
    """A batch of the first ``count`` records of ``t``, sent at ``now``, uids from ``first``."""
    out = bytearray(t.batch)
    for i in range(count):
        struct.pack_into(t.ts_format, out, t.ts_at[i], now)
        out[t.uid_at[i] : t.uid_at[i] + 18] = UID.format(first + i).encode()
    if count < ZEEK_BATCH:  # a batch that holds fewer: re-encoded (once a run at most)
        from broker_spark.zeek.log_batch import decode_batch, encode_batch

        header, records = decode_batch(bytes(out))
        return encode_batch(header.schema, records[:count])
    return bytes(out)


@cache
def json_tails(path: str) -> tuple[str, ...]:
    """Zeek's JSON lines of the log's records, each without its ``ts`` and ``uid`` (the head
    :func:`json_line` writes back)."""
    _schema, _values, lines = _recorded(path)
    tails = []
    for line in lines:
        head = _HEAD.match(line)
        assert head, f"a {path} line that does not start with ts and uid: {line[:80]}"
        tails.append(line[head.end() :])
    return tuple(tails)


def json_line(tail: str, seq: int, now: float) -> bytes:
    """One record as Zeek's JSON writer spells it (``ts`` in epoch seconds, Zeek's default)."""
    return f'{{"ts":{now:.6f},"uid":"{UID.format(seq)}",{tail}'.encode()


def schedule(records: int) -> Iterator[tuple[str, int, int]]:
    """``(path, count, first_seq)`` of each batch of the run, logs taking turns in the mix's
    proportions (conn 5 : dns 3 : http 2 batches a round), ``records`` in all."""
    per_log = {p: records * n // sum(TABLES_MIX.values()) for p, n in TABLES_MIX.items()}
    per_log["conn"] += records - sum(per_log.values())
    made = dict.fromkeys(TABLES_MIX, 0)
    seq = 0
    while any(made[p] < per_log[p] for p in TABLES_MIX):
        for path, weight in TABLES_MIX.items():
            for _ in range(weight):
                n = min(ZEEK_BATCH, per_log[path] - made[path])
                if n > 0:
                    yield path, n, seq
                    made[path] += n
                    seq += n


def per_log(records: int) -> dict[str, int]:
    """How many records of each log a run of ``records`` sends."""
    out = dict.fromkeys(TABLES_MIX, 0)
    for path, n, _ in schedule(records):
        out[path] += n
    return out
