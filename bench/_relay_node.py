"""A relay node as a Zeek cluster's logger, as its own process, that a bench can kill and restart.

``broker-spark node --spool DIR --zeromq-logs ENDPOINT --relay HOST:PORT`` on loopback ports
chosen once, so that a node restarted after a SIGKILL takes the same spool and the same
endpoints (Zeek's PUSH sockets reconnect to it, readers find it again), as a supervisor
restarting it would. ``with`` stops it (SIGTERM) and removes its folder.
"""

from __future__ import annotations

import subprocess
import sys
import threading

from _collector_process import CollectorProcess, die_with_parent, free_port, on_disk


class RelayNode(CollectorProcess):
    """One ``broker-spark node`` holding a spool, fed over ZeroMQ, read over the relay."""

    def __init__(self) -> None:
        super().__init__("bench-relay-node-")
        self.spool = self.folder / "spool"
        self.zeromq = f"tcp://127.0.0.1:{free_port()}"
        self.port = free_port()

    def start(self) -> None:
        """Start the node and wait for its ``ready``."""
        command = [
            sys.executable, "-m", "broker_spark", "node", "--no-tls", "--no-listen",
            "--spool", str(self.spool), "--subscribe", "zeek/logs/",
            "--zeromq-logs", self.zeromq, "--relay", f"127.0.0.1:{self.port}",
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
            preexec_fn=die_with_parent,
        )
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip() == "ready":  # then drained, so that the node never blocks on it
                threading.Thread(target=self.process.stdout.read, daemon=True).start()
                return
        raise RuntimeError(f"the relay node exited ({self.process.wait()}) before it was ready")

    def bytes_on_disk(self) -> int:
        return on_disk(self.spool)
