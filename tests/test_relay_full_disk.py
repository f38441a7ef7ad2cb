"""A full disk: the relay stops taking before the file system is full, says so, serves its
readers throughout, and takes again by itself when there is room, with no corrupt segment.

Where the machine allows it (root: CI's and the developers' machines), on a
real file system that fills: a small tmpfs mounted for the test, with a real
relay node process fed by a real PUSH socket. Everywhere, the guard's decision
with its free-space reading injected (a fake only to inject the fault: a disk
whose free space the test says).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
from spark_fixtures import wait_for
from test_relay_sources import push_socket, spooled, start_relay, status
from zeek_recordings import ZMQ_LOGS, zmq_messages

from broker_spark.spool.disk_guard import DiskGuard
from broker_spark.spool.service import SpoolService
from broker_spark.spool.spool import Spool
from broker_spark.zeromq.log_receiver import ZeroMQLogReceiver

pytestmark = pytest.mark.timeout(180)

MESSAGES = zmq_messages(ZMQ_LOGS)


@contextlib.contextmanager
def small_file_system(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where`` for the block (root only), unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root (the injected test still runs)")
    where.mkdir(parents=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"this machine allows no mount: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(path: Path, leave: int) -> None:
    """Write a file that leaves about ``leave`` bytes free on ``path``'s file system."""
    st = os.statvfs(path.parent)
    size = max(0, st.f_bavail * st.f_frsize - leave)
    with open(path, "wb") as f:
        f.write(b"\0" * size)


def send_all(push: zmq.Socket, count: int, timeout: float) -> int:
    """Send ``count`` recorded batches with blocking sends (waiting at the high-water mark,
    as a Zeek's queue holds them); how many went within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    sent = 0
    push.sndtimeo = 100
    while sent < count and time.monotonic() < deadline:
        try:
            push.send_multipart(MESSAGES[sent % len(MESSAGES)])
        except zmq.Again:
            continue
        sent += 1
    return sent


@pytest.mark.slow  # a real tmpfs filled by a real relay: a minute (make test-slow)
def test_a_relay_on_a_filling_disk_pauses_serves_and_resumes(spawn, tmp_path: Path) -> None:
    with small_file_system(tmp_path / "small", "32m") as disk:
        filler = disk / "filler"
        fill(filler, leave=6 << 20)  # the guard keeps 5% (1.6 MiB) free
        # files kept as written: compressed, 40 MiB of batches would fit in the disk
        node, said = start_relay(
            spawn, disk / "spool", "--spool-segment", "1m", "--spool-compression", "none"
        )
        ctx, push = push_socket(said["zeromq"])
        try:
            sent = send_all(push, 20000, 60)  # about 40 MiB: more than the disk has
            paused = wait_for(
                lambda: (st := status(said["relay"])).get("paused") and st, 30, "paused"
            )
            assert paused["paused"].startswith("disk: ")
            assert "taking nothing more until there is room" in node.stderr()
            text = urllib.request.urlopen(f"http://{said['metrics']}/metrics", timeout=10).read()
            assert b"broker_spark_spool_paused 1.0" in text
            held = int(paused["end"])
            assert 0 < held < sent
            assert len(spooled(said["relay"], held)) == held  # readers are served meanwhile
            # stopped before the disk was full: at most the take in flight when the guard
            # looked (up to 1 MiB) lands under the 1.6 MiB kept free, and no write failed
            st = os.statvfs(disk)
            assert st.f_bavail * st.f_frsize > 256 << 10
            assert "the disk is full" not in node.stderr()
            filler.unlink()  # room again: it takes by itself, every batch sent arrives
            wait_for(lambda: int(status(said["relay"])["end"]) >= sent, 60, "all spooled")
            assert not status(said["relay"])["paused"]
            assert "taking again" in node.stderr()
        finally:
            push.close(0)
            ctx.term()
        assert node.signal() == 0
        with Spool(disk / "spool", readonly=True) as view:  # whole, every segment
            records = list(view.iter_records(view.start_offset(), view.end_offset()))
        assert len(records) == sent
        assert [r.payload for r in records[: len(MESSAGES)]] == [m[3] for m in MESSAGES]


def test_an_append_that_finds_the_disk_full_is_kept_and_retried(tmp_path: Path) -> None:
    """Without the guard (``min_free_bytes=0``) a write fails with ENOSPC: the batch taken
    is kept and appended once there is room, the torn write is cut, nothing is lost."""
    with small_file_system(tmp_path / "small", "8m") as disk:
        filler = disk / "filler"
        spool = Spool(disk / "spool", segment_bytes=1 << 20)
        receiver = ZeroMQLogReceiver("tcp://127.0.0.1:0")
        service = SpoolService(spool, ["zeek/logs/"], min_free_bytes=0)
        service.take_from(receiver)
        service.start()
        ctx, push = push_socket(receiver.endpoint)
        try:
            fill(filler, leave=256 << 10)
            sent = send_all(push, 2000, 30)  # about 4 MiB
            wait_for(lambda: service.guard.full is not None, 30, "the disk full")
            assert service.state()["paused"] and service.error is None
            filler.unlink()
            wait_for(lambda: spool.end_offset() >= sent, 60, "all appended")
            assert service.guard.full is None and service.error is None
        finally:
            push.close(0)
            ctx.term()
            assert service.finish(10)
            spool.close()
        with Spool(disk / "spool", readonly=True) as view:
            records = list(view.iter_records(0, view.end_offset()))
        assert [r.payload for r in records] == [MESSAGES[i % len(MESSAGES)][3] for i in range(sent)]


def test_the_guard_holds_below_its_floor_and_lets_go_above(tmp_path: Path) -> None:
    """The guard's reading injected (the disk's free bytes are what the test says): below
    the floor a relay's pump takes nothing (the sender's queue fills, as Zeek's would), and
    everything arrives once the floor is cleared."""
    free = {"bytes": 10 << 30}
    guard_floor = 1 << 30
    spool = Spool(tmp_path / "spool")
    receiver = ZeroMQLogReceiver("tcp://127.0.0.1:0")
    service = SpoolService(spool, ["zeek/logs/"], min_free_bytes=guard_floor)
    service.guard = DiskGuard(
        spool.path, guard_floor, check_every=0.05, statvfs=lambda _p: (free["bytes"], 100 << 30)
    )
    service.take_from(receiver)
    service.start()
    ctx, push = push_socket(receiver.endpoint)
    try:
        first = send_all(push, 100, 30)
        wait_for(lambda: spool.end_offset() >= first, 30, "the first batches")
        free["bytes"] = guard_floor - 1
        wait_for(lambda: service.state()["paused"], 10, "paused")
        held = spool.end_offset()
        push.sndhwm = 100
        blocked_at = send_all(push, 100000, 1.5)  # until the sender's queue is full
        assert blocked_at < 100000  # the backlog is upstream: the sender could not send
        time.sleep(0.5)
        assert spool.end_offset() == held
        assert receiver.queued * 2000 <= 2 << 20  # the node holds at most its small queue
        status_ = service.status()
        assert status_["paused"].startswith("disk: ") and status_["disk_min_free_bytes"]
        free["bytes"] = 10 << 30
        wait_for(lambda: spool.end_offset() >= first + blocked_at, 30, "resumed")
        assert not service.state()["paused"] and service.guard.pauses == 1
    finally:
        push.close(0)
        ctx.term()
        service.finish(10)
        spool.close()
    assert json.dumps(status_)  # a status a person or a scraper reads
