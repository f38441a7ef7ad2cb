"""What the soak's senders sent, what reached the sink, and how to tell the difference.

The senders' ledgers (``sender.py``) say which uids were handed to a socket and
when; the sink (``query.py``) holds each record once per position with the time
its batch was written. :func:`account` compares them: records missing, doubled
(one uid at two positions), and for each fault how long until records sent after
it reached the sink again (its recovery time).
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Account", "Fault", "account", "read_ledger"]

_UID = re.compile(r"^([A-Z]+)(\d+)x(\d+)$")


@dataclass
class Fault:
    """One injected fault: its kind, what it hit, when (unix time), when it was undone."""

    kind: str
    target: str
    at: float
    restarted: float | None = None  # the component was serving again (its ready line)
    recovered_s: float | None = None  # then records sent after the fault reached the sink
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Account:
    sent: int = 0
    dropped_at_hwm: int = 0  # a ZeroMQ send refused at the high-water mark (Zeek drops it)
    in_sink: int = 0
    missing: int = 0
    missing_by_cause: Counter = field(default_factory=Counter)
    doubled: int = 0
    unknown_in_sink: int = 0  # a uid no ledger holds (the batch a SIGKILL interrupted)
    batches: int = 0
    batch_rows_replayed: int = 0  # rows a retried batch wrote again (ignored by the key)
    latency_s: dict[str, float] = field(default_factory=dict)  # sent to written in the sink


def read_ledger(path: Path) -> tuple[dict[tuple[int, int], float], int]:
    """``(incarnation, seq) -> sent time`` for every record sent, and the records refused
    at the high-water mark."""
    sent: dict[tuple[int, int], float] = {}
    dropped = 0
    if not path.exists():
        return sent, dropped
    for line in path.read_text().splitlines():
        parts = line.split()
        if not parts or parts[0] == "start":
            continue
        if parts[0] == "dropped":
            dropped += int(parts[3])
            continue
        incarnation, first, count, at = int(parts[0]), int(parts[1]), int(parts[2]), float(parts[3])
        for seq in range(first, first + count):
            sent[(incarnation, seq)] = at
    return sent, dropped


def account(
    ledgers: dict[str, Path],
    sink: Path,
    faults: list[Fault],
    windows: list[tuple[str, str, float, float]],
    relay_ids: dict[str, str],
) -> tuple[Account, list[dict[str, Any]]]:
    """Compare what was sent with what is in the sink.

    ``windows`` are ``(cause, tag or "*", start, end)``: a record sent then (by
    that sender) and missing is attributed to ``cause`` (records in flight to a
    relay or in a sender's socket when it was killed: Zeek's transports
    acknowledge nothing, so those are lost upstream of the spool, by design); any
    other missing record counts as ``lost``. ``relay_ids`` maps a source's name (a
    relay's, or the receiver's) to the ``relay`` its rows carry. Fills in each
    fault's recovery time: the first write of a record sent after it, from the
    source a ``kill-relay`` or ``kill-receiver`` hit, by the sender a
    ``kill-sender`` hit; returns the account and the uids that are missing without
    a cause (at most 20, to look at).
    """
    acc = Account()
    sent_at: dict[str, float] = {}
    for tag, path in ledgers.items():
        batches, dropped = read_ledger(path)
        acc.dropped_at_hwm += dropped
        for (incarnation, seq), at in batches.items():
            sent_at[f"{tag}{incarnation}x{seq}"] = at
    acc.sent = len(sent_at)
    db = sqlite3.connect(sink)
    try:
        found = db.execute("SELECT uid, relay, written FROM rows").fetchall()
        acc.batches = db.execute(
            "SELECT COUNT(*) FROM (SELECT DISTINCT source, batch_id FROM batches)"
        ).fetchone()[0]
        replayed = db.execute("SELECT COALESCE(SUM(rows - added), 0) FROM batches").fetchone()[0]
        acc.batch_rows_replayed = int(replayed)
    finally:
        db.close()
    seen: Counter[str] = Counter(uid for uid, _relay, _at in found)
    acc.in_sink = len(seen)
    acc.doubled = sum(1 for n in seen.values() if n > 1)
    acc.unknown_in_sink = sum(1 for uid in seen if uid not in sent_at)
    unexplained: list[str] = []
    for uid, at in sent_at.items():
        if uid in seen:
            continue
        acc.missing += 1
        tag = _UID.match(uid).group(1)  # type: ignore[union-attr]
        cause = next(
            (c for c, t, lo, hi in windows if (t in ("*", tag)) and lo <= at <= hi), "lost"
        )
        acc.missing_by_cause[cause] += 1
        if cause == "lost" and len(unexplained) < 20:
            unexplained.append(uid)
    # Recovery: the first write of a record sent after the fault (through what it hit).
    by_relay = {v: k for k, v in relay_ids.items()}
    arrivals: list[tuple[float, float, str, str]] = []  # (sent, written, tag, relay name)
    for uid, relay, written in found:
        at = sent_at.get(uid)
        if at is not None:
            tag = _UID.match(uid).group(1)  # type: ignore[union-attr]
            arrivals.append((at, written, tag, by_relay.get(relay, relay)))
    delays = sorted(written - at for at, written, _tag, _relay in arrivals)
    if delays:
        acc.latency_s = {
            "median": round(delays[len(delays) // 2], 2),
            "p99": round(delays[int(len(delays) * 0.99)], 2),
        }
    for fault in faults:
        since = fault.restarted or fault.at
        first = None
        for at, written, tag, relay in arrivals:
            if at < since:
                continue
            if (
                fault.kind in ("kill-relay", "kill-receiver", "planned-restart", "full-disk")
                and relay != fault.target
            ):
                continue
            if fault.kind == "kill-sender" and tag != fault.target:
                continue
            first = written if first is None else min(first, written)
        fault.recovered_s = None if first is None else round(first - fault.at, 2)
    return acc, [{"uid": u, "sent": sent_at[u]} for u in unexplained]
