"""The soak's bookkeeping (``bench/soak/ledger.py``): what it calls lost, doubled, recovered.

``make soak`` ends in checks that only mean something if the accounting is
right: a record sent and not in the sink is lost unless a fault's window
explains it, a uid at two positions is doubled, and a fault's recovery is the
first write of a record sent after it. Here with a hand-made ledger and sink.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "soak"))

from ledger import Fault, account  # noqa: E402
from query import SCHEMA, write_batch  # noqa: E402

pytestmark = pytest.mark.timeout(30)


def _ledger(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_missing_doubled_and_recovery(tmp_path: Path) -> None:
    ledger = _ledger(
        tmp_path / "ledger-Z",
        ["start 0 99.0", "0 0 3 100.0", "0 3 3 110.0", "dropped 0 6 3 111.0", "start 1 120.0",
         "1 0 2 130.0"],
    )  # fmt: skip
    sink = tmp_path / "sink.db"
    db = sqlite3.connect(sink)
    db.executescript(SCHEMA)
    db.close()
    # Z0x0..2 and Z1x0 arrive; Z0x2 twice, at two positions (doubled); Z0x3..5 and Z1x1 not.
    assert (
        write_batch(sink, 0, [("r1", 0, 0, "Z0x0"), ("r1", 0, 1, "Z0x1"), ("r1", 0, 2, "Z0x2")])
        == 3
    )
    assert write_batch(sink, 0, [("r1", 0, 0, "Z0x0")]) == 0  # a replayed batch adds nothing
    write_batch(sink, 1, [("r2", 7, 0, "Z0x2"), ("r2", 8, 0, "Z1x0"), ("r2", 8, 1, "ZZx9")])
    fault = Fault("kill-sender", "Z", at=125.0, restarted=126.0)
    windows = [("in a killed sender's socket", "Z", 105.0, 111.0)]
    acc, unexplained = account({"Z": ledger}, sink, [fault], windows, {"B": "r2"})
    assert acc.sent == 8 and acc.dropped_at_hwm == 3
    assert acc.in_sink == 5 and acc.doubled == 1 and acc.unknown_in_sink == 1
    # Z0x3..5 were sent at 110, inside the window; Z1x1 (sent at 130) is lost.
    assert acc.missing == 4
    assert dict(acc.missing_by_cause) == {"in a killed sender's socket": 3, "lost": 1}
    assert unexplained == [{"uid": "Z1x1", "sent": 130.0}]
    assert acc.batch_rows_replayed == 1
    # Recovery: Z1x0, sent at 130 (after the restart), was written with batch 1.
    written = sqlite3.connect(sink).execute("SELECT written FROM rows WHERE uid = 'Z1x0'")
    assert fault.recovered_s == pytest.approx(written.fetchone()[0] - 125.0, abs=0.01)


def test_a_fault_nothing_recovered_from_says_so(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path / "ledger-K", ["start 0 1.0", "0 0 2 10.0"])
    sink = tmp_path / "sink.db"
    db = sqlite3.connect(sink)
    db.executescript(SCHEMA)
    db.close()
    write_batch(sink, 0, [("a", 1, 0, "K0x0"), ("a", 1, 1, "K0x1")])
    fault = Fault("kill-relay", "B", at=20.0, restarted=21.0)
    acc, _ = account({"K": ledger}, sink, [fault], [], {"B": "b"})
    assert acc.missing == 0 and acc.doubled == 0
    assert fault.recovered_s is None  # nothing sent after it reached the sink from B


def test_a_killed_receiver_recovers_when_its_own_rows_arrive(tmp_path: Path) -> None:
    """A ``kill-receiver`` is recovered from by rows of the receiver's query, not the relays';
    each query numbers its batches, so a batch is (query, batch id)."""
    ledger_k = _ledger(tmp_path / "ledger-K", ["start 0 1.0", "0 0 2 30.0"])
    ledger_r = _ledger(tmp_path / "ledger-R", ["start 0 1.0", "0 0 2 10.0", "0 2 2 30.0"])
    sink = tmp_path / "sink.db"
    db = sqlite3.connect(sink)
    db.executescript(SCHEMA)
    db.close()
    write_batch(sink, 0, [("a", 1, 0, "K0x0"), ("a", 1, 1, "K0x1")])  # the relays' query
    write_batch(sink, 0, [("receiver", 0, 0, "R0x0"), ("receiver", 0, 1, "R0x1")], "receiver")
    fault = Fault("kill-receiver", "receiver", at=20.0, restarted=25.0)
    windows = [("in flight to a killed receiver", "R", 15.0, 27.0)]
    acc, unexplained = account(
        {"K": ledger_k, "R": ledger_r}, sink, [fault], windows, {"A": "a", "receiver": "receiver"}
    )
    assert acc.batches == 2
    # R0x2..3 (sent at 30, after the receiver was back) never arrived: lost, not excused.
    assert dict(acc.missing_by_cause) == {"lost": 2} and len(unexplained) == 2
    assert fault.recovered_s is None  # K's rows, sent after it, do not count
    write_batch(sink, 1, [("receiver", 5, 0, "R0x2"), ("receiver", 5, 1, "R0x3")], "receiver")
    acc, _ = account(
        {"K": ledger_k, "R": ledger_r}, sink, [fault], windows, {"A": "a", "receiver": "receiver"}
    )
    assert acc.missing == 0 and acc.doubled == 0 and acc.batches == 3
    written = sqlite3.connect(sink).execute("SELECT written FROM rows WHERE uid = 'R0x2'")
    assert fault.recovered_s == pytest.approx(written.fetchone()[0] - 20.0, abs=0.01)
