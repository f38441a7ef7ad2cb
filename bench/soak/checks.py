"""What ``make soak`` checks at the end of a run, and the bounds it checks against.

:func:`checks` takes the run's report (:meth:`run.Soak._finish`) and relay A's
per-second samples, and names each check with whether it passed; the bounds
are here so that the run (which sizes relay ``B`` by them) and the checks
share them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from procs import Usage

__all__ = [
    "A_SEGMENT",
    "B_RETENTION",
    "B_SEGMENT",
    "CHECKPOINT_FILES",
    "HOSTILE_PAUSE",
    "checks",
    "data_loss_warnings",
]

#: Relay B: small files and retention, so retention drops files all along.
B_SEGMENT, B_RETENTION = 1 << 20, 4 << 20
#: Relay A: files small enough that it fills and compresses several during a run.
A_SEGMENT = 2 << 20
#: Growth allowed for relay A between the middle and the end of the run.
RSS_GROWTH_MB, FD_GROWTH, THREAD_GROWTH = 48.0, 16, 8
#: Longest pause of the query's writes allowed while hostile clients hit every port (s):
#: three triggers of 2 s, and a batch's own time.
HOSTILE_PAUSE = 10.0
#: Files a checkpoint may hold: Spark keeps 100 batches (minBatchesToRetain) of offsets and
#: commits, with their checksums, plus metadata and sources.
CHECKPOINT_FILES = 500


def data_loss_warnings(log: Path) -> dict[str, int]:
    """What the reader said it skipped (``failOnDataLoss=false``): warnings, and the
    distinct offsets (spool messages, each a batch of records) they name."""
    import re

    text = log.read_text(errors="replace") if log.exists() else ""
    ranges = set(re.findall(r"offsets (\d+) to (\d+) are no longer in the spool of (\S+)", text))
    offsets = sum(int(hi) - int(lo) + 1 for lo, hi, _where in ranges)
    return {"warnings": text.count("are no longer in the spool"), "offsets_skipped": offsets}


def checks(r: dict[str, Any], a_samples: list[tuple[float, Usage]]) -> dict[str, bool]:
    causes = r["missing_by_cause"]
    checks = {
        "no record lost (outside the causes the design has)": causes.get("lost", 0) == 0,
        "no record doubled": r["doubled"] == 0,
        "the query caught up at the end": r["caught_up"],
        "retention drops were reported by the reader": (
            causes.get("dropped unread by retention", 0) == 0
            or r["retention_warnings"]["offsets_skipped"] > 0
        ),
        "every fault recovered": all(f["recovered_s"] is not None for f in r["faults"]),
        "every process survived the hostile clients, which were refused": (
            all(h["alive"] for h in r["hostile"]) and sum(r["listeners_refused"].values()) > 0
            if r["hostile"]
            else True
        ),
        "every malformed relay frame got an ERROR or a close": not r.get("hostile_unanswered"),
        f"the queries went on during hostile bursts (no pause over {HOSTILE_PAUSE:g} s)": all(
            pause <= HOSTILE_PAUSE
            for f in r["faults"]
            if f["kind"] == "hostile-clients"
            for pause in f["longest_pause_s"].values()
        ),
        "no temporary file or folder left behind": not r["tmp_left"],
        "no process of the run left running": not r["left_running"],
        "each killed receiver was started again by its query, from its spool": all(
            f["pid_after"] is not None and f["pid_after"] != f["pid_before"]
            for f in r["faults"]
            if f["kind"] == "kill-receiver"
        ),
        "the receiver ran once, and once more after each of its kills only": (
            r["receiver"]["starts"] == 1 + r["faults_by_kind"].get("kill-receiver", 0)
            and not r["receiver"]["gone_on_its_own"]
        ),
        "each restarted driver attached to the receiver that ran on": all(
            f["reattached"]
            for f in r["faults"]
            if f["kind"] in ("kill-driver", "fill-past-retention")
        ),
        "the receiver stopped cleanly at the end": r["receiver"]["stop"]["clean"],
        "the checkpoint stays bounded": r["checkpoint_files"] <= CHECKPOINT_FILES,
        "relay B's spool within retention plus one file": (
            r["spool_B_mb"] <= (B_RETENTION + 2 * B_SEGMENT) / 2**20
        ),
        "the store read back as written": r["side"].get("keys_wrong", 1) == 0,
        "relay A compressed the files it filled (read back whole by the checks above)": (
            r["spool_A_compressed_files"] > 0
        ),
        "each planned restart exited 0 having appended and synced all it read": all(
            f["exit"] == 0 and f["kept_all_read"]
            for f in r["faults"]
            if f["kind"] == "planned-restart"
        ),
        "the full disk paused relay B, which said so and took again by itself": all(
            f["paused"] and f["resumed"] and f["said_so"]
            for f in r["faults"]
            if f["kind"] == "full-disk"
        ),
        "every undecodable batch sent is kept in relay A's spool": (
            r["undecodable"]["kept"] == r["undecodable"]["sent"]
        ),
        "the WebSocket client's messages all arrived": (
            r["side"].get("ws_sent", 0) > 0
            and r["side"].get("ws_received") == r["side"].get("ws_sent")
        ),
    }
    if len(a_samples) >= 3:
        mid, end = a_samples[len(a_samples) // 2][1], a_samples[-1][1]
        checks[f"relay A's memory grew less than {RSS_GROWTH_MB:g} MB (middle to end)"] = (
            end.rss_mb - mid.rss_mb <= RSS_GROWTH_MB
        )
        checks[f"relay A's descriptors grew by at most {FD_GROWTH}"] = (
            end.fds - mid.fds <= FD_GROWTH
        )
        checks[f"relay A's threads grew by at most {THREAD_GROWTH}"] = (
            end.threads - mid.threads <= THREAD_GROWTH
        )
    return checks
