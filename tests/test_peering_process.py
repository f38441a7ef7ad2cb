"""A peer in another process, killed with SIGKILL and restarted on the same port."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_peering_support import LOCAL, make_endpoint, next_matching, wants

from broker_spark import SC

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import sys
import broker_spark as broker
opts = broker.BrokerOptions()
opts.disable_ssl = True
ep = broker.Endpoint(broker.Configuration(opts))
sub = ep.make_subscriber("/proc")
print(ep.listen("127.0.0.1", int(sys.argv[1])), flush=True)
while True:
    item = sub.get(10.0)
    if item is not None:
        print(item[1], flush=True)
"""


def start_child(port: int) -> tuple[subprocess.Popen, int]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(port)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    line = read_line(proc)
    return proc, int(line)


def read_line(proc: subprocess.Popen, timeout: float = 20.0) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "the child printed nothing"
    return proc.stdout.readline().strip()


def kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    if proc.stdout is not None:
        proc.stdout.close()


def test_killed_peer_is_lost_then_reconnected() -> None:
    ep = make_endpoint()
    child, port = start_child(0)
    try:
        assert port > 0
        status = ep.make_status_subscriber(True)
        assert ep.peer(LOCAL, port, 0.1)
        assert wants(ep, "/proc/x", 10.0)
        ep.publish("/proc/x", "first")
        assert read_line(child) == "first"
        kill(child)
        lost = next_matching(status, lambda s: s.code() == SC.PeerLost, 10.0)
        assert lost is not None and lost.context().network.port == port
        # Restarted on the same port, it is redialled every 0.1 s until it answers.
        child, again = start_child(port)
        assert again == port
        added = next_matching(status, lambda s: s.code() == SC.PeerAdded, 15.0)
        assert added is not None
        assert wants(ep, "/proc/x", 10.0)
        ep.publish("/proc/x", "second")
        assert read_line(child) == "second"
    finally:
        kill(child)
        ep.shutdown()
