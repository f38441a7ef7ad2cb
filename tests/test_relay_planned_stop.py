"""A planned stop of a relay node loses nothing it has read, and takes nothing more.

A real ``broker-spark node --zeromq-logs ... --spool ... --relay ...`` process,
fed by a real PUSH socket as a Zeek node's (Zeek's ``log_sndhwm``, the
recorded batches of a real Zeek 9.1) without pause, and a Broker peer
publishing beside it, is sent SIGTERM while batches are in flight. It exits 0,
and what it says it read is what its spool holds; started again on the same
spool and port, it goes on from there, and the Zeek side's queue (what the
node left unread) arrives then. The figures of many such restarts, against
crashes, are measured by ``bench/relay_restarts.py`` (never by a timed test).
"""

from __future__ import annotations

import re
import signal
import threading
import time
from pathlib import Path

import pytest
import zmq
from ports import free_port
from test_relay_sources import spooled, start_relay
from zeek_recordings import ZMQ_LOGS, zmq_messages

from broker_spark.spool.spool import Spool

pytestmark = pytest.mark.timeout(180)

_STOPPED = re.compile(
    r"stopped taking in [0-9.]+ s: everything read is appended and synced; spool ends at "
    r"offset (\d+) \((\d+) ZeroMQ log messages read since start\)"
)


class _Pusher:
    """A Zeek node's PUSH socket sending the recording over and over from a thread, with
    blocking sends (so what it could not hand over waits in its queue, as Zeek's would
    until its high-water mark)."""

    def __init__(self, endpoint: str) -> None:
        self.messages = zmq_messages(ZMQ_LOGS)
        self.ctx = zmq.Context()
        self.push = self.ctx.socket(zmq.PUSH)
        self.push.sndhwm = 1000
        self.push.linger = 0
        self.push.sndtimeo = 100
        self.push.connect(endpoint)
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self.push.send_multipart(self.messages[i % len(self.messages)])
            except zmq.Again:
                continue
            self.sent += 1
            i += 1
            if i % 50 == 0:
                time.sleep(0.005)  # about 10,000 batches a second at most

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.push.close(0)
        self.ctx.term()


def _stopped(node) -> tuple[int, int]:
    found = _STOPPED.search(node.stderr())
    assert found, node.stderr()[-2000:]
    return int(found.group(1)), int(found.group(2))


@pytest.mark.slow  # a relay stopped under a paced load, several times (make test-slow)
def test_sigterm_under_load_keeps_everything_read(spawn, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    port = free_port()
    at = ("--zeromq-logs", f"tcp://127.0.0.1:{port}")
    node, said = start_relay(spawn, spool, *at)
    pusher = _Pusher(said["zeromq"])
    try:
        spooled(said["relay"], 500)
        assert node.signal(signal.SIGTERM, timeout=60) == 0  # while batches keep coming
        end, read = _stopped(node)
        assert end == read > 500  # every batch read is in the spool
        with Spool(spool, readonly=True) as view:
            assert view.end_offset() == end  # and synced there, whole
            assert len(view.read(end - 10, end)) == 10
        sent_then = pusher.sent
        again, said = start_relay(spawn, spool, *at)
        # the sender's queue for the stopped node arrives now, and the stream goes on
        spooled(said["relay"], end + 1000)
    finally:
        pusher.stop()
    assert pusher.sent > sent_then
    assert again.signal(signal.SIGINT, timeout=60) == 0
    end2, read2 = _stopped(again)
    assert end2 == end + read2
