"""When a spool's appends reach the disk: ``fsync`` never, interval or always.

A process that dies loses nothing it had appended (the kernel holds it); what
a power cut loses is what was not synced, so the tests count the syncs each
policy makes (``os.fsync`` wrapped to count: the real one still runs, on real
files). What each costs is measured by ``bench/spool_fsync.py``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from broker_spark.spool import spool as spool_module
from broker_spark.spool.spool import Spool, SpoolError


def _records(n: int, at: int = 0) -> list[tuple[str, bytes, str, int]]:
    return [("zeek/logs/x", b"p%d" % (at + i), "s", time.time_ns()) for i in range(n)]


@pytest.fixture
def syncs(monkeypatch) -> list[int]:
    """Every ``os.fsync`` the spool and its segments make, by descriptor."""
    made: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        made.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return made


def test_always_syncs_every_append(tmp_path: Path, syncs: list[int]) -> None:
    with Spool(tmp_path / "s", fsync="always") as spool:
        before = len(syncs)
        for i in range(5):
            spool.append_batch(_records(3, 3 * i))
        assert len(syncs) - before == 5 * 2  # the log and its index, each append


def test_never_leaves_appends_to_the_kernel(tmp_path: Path, syncs: list[int]) -> None:
    with Spool(tmp_path / "s", fsync="never") as spool:
        for i in range(5):
            spool.append_batch(_records(3, 3 * i))
        assert syncs == []
        spool.sync()  # a planned stop syncs whatever the policy
        assert len(syncs) == 3  # log, index, directory


def test_interval_syncs_at_most_once_an_interval_and_catches_up_when_idle(
    tmp_path: Path, syncs: list[int]
) -> None:
    with Spool(tmp_path / "s", fsync="interval", sync_interval=0.2) as spool:
        start = len(syncs)
        for i in range(50):
            spool.append_batch(_records(2, 2 * i))
        assert len(syncs) - start <= 2  # not one per append
        time.sleep(0.25)
        spool.sync_if_due()  # the pump calls it when idle: the last appends reach the disk
        synced = len(syncs)
        assert synced > start
        spool.sync_if_due()  # nothing new: nothing to sync
        assert len(syncs) == synced
    with Spool(tmp_path / "s", readonly=True) as view:
        assert view.end_offset() == 100


def test_the_policy_is_one_of_three(tmp_path: Path) -> None:
    with Spool(tmp_path / "a", fsync=True) as a, Spool(tmp_path / "b", fsync=False) as b:
        assert (a.fsync_policy, b.fsync_policy) == ("always", "never")
    with pytest.raises(SpoolError, match="fsync must be one of never, interval, always"):
        Spool(tmp_path / "c", fsync="sometimes")
    assert spool_module.FSYNC_POLICIES == ("never", "interval", "always")
