"""What the soak's chaos loop does to the running system, one method a fault.

A mixin of :class:`run.Soak`: each method breaks one part (a relay killed or
restarted, a disk filled, undecodable batches sent, the driver, the receiver or a
sender killed, connections cut, hostile clients), records a :class:`ledger.Fault`
with what it saw, and opens a loss window where the design allows loss (a killed
relay's in-flight batches), none where it allows none (a planned restart, a full
disk). The running parts, the ledgers and the waits it uses are the Soak's own.
"""

from __future__ import annotations

import os
import signal
import time

from disk import tree_size, undecodable_batches
from ledger import Fault
from procs import Component, alive
from query import RECEIVER_SOURCE

#: Seconds the query may take to notice a killed receiver and start another (its next
#: trigger, the start, the spool's recovery).
RECEIVER_RESTART_TIMEOUT = 120.0

__all__ = ["RECEIVER_RESTART_TIMEOUT", "FaultActions"]


class FaultActions:
    """The soak's faults; mixed into :class:`run.Soak`, whose state they act on."""

    def kill_relay(self) -> None:
        fault = Fault("kill-relay", "B", time.time())
        self.relay_b.kill()
        time.sleep(self.rng.uniform(0.5, 3.0))
        self.relay_b.start()
        fault.restarted = time.time()
        self.faults.append(fault)
        # What was in flight to B (its socket buffers, ZeroMQ's queue) is lost upstream.
        self.windows.append(("in flight to a killed relay", "*", fault.at - 5, fault.restarted + 2))

    def restart_relay(self) -> None:
        """A planned restart of relay B (SIGTERM, as systemctl restart): nothing it read may
        be lost, so no window is opened: a record missing around it fails the run."""
        fault = Fault("planned-restart", "B", time.time())
        at = self.relay_b.log_end()
        code = self.relay_b.stop(60)
        said = self.relay_b.said_since(at)
        time.sleep(self.rng.uniform(0.5, 3.0))
        self.relay_b.start()
        fault.restarted = time.time()
        fault.detail = {
            "exit": code,
            "kept_all_read": "everything read is appended and synced" in said,
        }
        self.faults.append(fault)

    def fill_disk(self) -> None:
        """Relay B's file system filled to under its free-space floor: B stops taking (Zeek's
        PUSH sends to A meanwhile), says so, and takes again once the filler is gone. No
        window is opened: nothing may be lost."""
        assert self.small_disk is not None
        fault = Fault("full-disk", "B", time.time())
        at = self.relay_b.log_end()
        self.small_disk.fill(leave=1 << 20)  # the floor: 5% of 64 MiB, 3.2 MiB
        paused = self._relay_b_paused(True, 30)
        time.sleep(self.rng.uniform(5, 10))
        self.small_disk.free()
        resumed = self._relay_b_paused(False, 60)
        fault.restarted = time.time()
        said = self.relay_b.said_since(at)
        fault.detail = {
            "paused": paused,
            "resumed": resumed,
            "said_so": "taking nothing more until there is room" in said and "taking again" in said,
        }
        self.faults.append(fault)

    def _relay_b_paused(self, want: bool, timeout: float) -> bool:
        from broker_spark.spool.relay_client import SpoolClient

        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                with SpoolClient.tcp("127.0.0.1", self.ports["rB"], None) as client:
                    client.hello("status", "soak")
                    if bool(client.request("status")["status"].get("paused")) == want:
                        return True
            except Exception:  # noqa: BLE001 - restarting: ask again
                pass
            self._wait_until(time.time() + 0.5)
        return False

    def undecodable_burst(self) -> None:
        """Batches relay A cannot decode (another serializer's, real batches cut in half)
        among good ones: every one must be kept in its spool."""
        import zmq

        fault = Fault("undecodable", "A", time.time())
        batches = undecodable_batches(self.rng)
        ctx = zmq.Context()
        push = ctx.socket(zmq.PUSH)
        push.linger = 10_000
        push.connect(f"tcp://127.0.0.1:{self.ports['zA']}")
        try:
            for frames in batches:
                push.send_multipart(frames)
        finally:
            push.close()
            ctx.term()
        self.undecodable_sent += batches
        fault.restarted = time.time()
        fault.detail = {"sent": len(batches)}
        self.faults.append(fault)

    def kill_receiver(self) -> None:
        """SIGKILL the receiver of the second query's spoolPath (only it: the driver goes on);
        the query finds it gone at its next trigger and starts another from the spool."""
        fault = Fault("kill-receiver", RECEIVER_SOURCE, time.time())
        log_at = self.query.log_end()
        pid = self.receiver.pid()
        if pid is None or pid != self.receiver_pid:
            raise RuntimeError(f"the receiver is not the one started ({pid}, {self.receiver_pid})")
        os.kill(pid, signal.SIGKILL)
        while alive(pid):
            time.sleep(0.05)
        after = self.receiver.await_new(pid, RECEIVER_RESTART_TIMEOUT)
        said = self.query.said_since(log_at)  # the reader's warning when it starts another
        fault.detail = {
            "pid_before": pid,
            "pid_after": after,
            "query_said_so": f"the receiver of spool {self.receiver_spool}" in said
            and "starting it again" in said,
        }
        if after is not None:
            fault.restarted = time.time()
            fault.detail["restarted_s"] = round(fault.restarted - fault.at, 2)
            self.receiver_pid = after
        else:
            fault.detail["restarted_s"] = None
        self.faults.append(fault)
        # What the killed receiver held unappended, and what its Broker sender published
        # into the dead peering until it noticed, is lost upstream of the spool.
        self.windows.append(
            ("in flight to a killed receiver", "R", fault.at - 5, (fault.restarted or fault.at) + 2)
        )

    def kill_driver(self) -> None:
        fault = Fault("kill-driver", "driver", time.time())
        receiver = self.receiver.pid()
        self.query.kill()
        time.sleep(self.rng.uniform(0.5, 5.0))
        self.query.start(240)
        fault.restarted = time.time()
        fault.detail = self.receiver.reattached(receiver, self.query.pids)
        self.faults.append(fault)

    def _kill_sender(self, sender: Component, tag: str) -> None:
        fault = Fault("kill-sender", tag, time.time())
        sender.kill()
        time.sleep(self.rng.uniform(0.5, 3.0))
        sender.start()
        fault.restarted = time.time()
        self.faults.append(fault)
        # Batches handed to the socket but still in its queue die with the process.
        self.windows.append(("in a killed sender's socket", tag, fault.at - 5, fault.at + 1))

    def kill_zeromq_sender(self) -> None:
        self._kill_sender(self.zeromq, "Z")

    def kill_broker_sender(self) -> None:
        self._kill_sender(self.broker, "K")

    def kill_receiver_sender(self) -> None:
        self._kill_sender(self.receiving, "R")

    def cut_connections(self) -> None:
        """Cut the query's relay connections and the Broker senders' peerings mid-frame."""
        fault = Fault("cut-connections", "readers and peerings", time.time())
        fault.detail["cut"] = sum(
            p.cut() for p in (*self.proxies.values(), self.peering_proxy, self.receiver_proxy)
        )
        for tag in ("K", "R"):
            self.windows.append(("in flight on a cut peering", tag, fault.at - 5, fault.at + 5))
        fault.restarted = fault.at
        self.faults.append(fault)

    def hostile_burst(self) -> None:
        fault = Fault("hostile-clients", "every port", time.time())
        before = self._listeners()
        self.hostile.burst()
        time.sleep(2.0)
        self.hostile.release()
        fault.restarted = time.time()
        time.sleep(4.0)  # a batch or two after it
        fault.detail = {
            "connections": self.hostile.connections,
            "refused_before": before,
            "longest_pause_s": self._longest_pause(fault.at, time.time()),
        }
        self.faults.append(fault)
        receiver = self.receiver.pid()
        self.hostile_checks.append(
            {
                "alive": all(c.alive for c in (self.relay_a, self.relay_b, self.query))
                and receiver == self.receiver_pid
                and alive(receiver)
            }
        )

    def fill_past_retention(self) -> None:
        """Driver down, relay B filled past its retention: records it held are dropped
        before anyone read them, and the restarted query skips them with a warning."""
        fault = Fault("fill-past-retention", "B", time.time())
        receiver = self.receiver.pid()
        self.query.kill()
        self.filler.start()
        time.sleep(8.0)  # 4,000 records a second: several of B's 1 MiB files
        self.filler.stop()
        fill_end = time.time()
        self.query.start(240)
        fault.restarted = time.time()
        fault.detail = self.receiver.reattached(receiver, self.query.pids)
        fault.detail["spool_B_mb"] = round(tree_size(self.spool_b) / 2**20, 2)
        self.faults.append(fault)
        self.windows.append(("dropped unread by retention", "*", fault.at - 5, fill_end + 2))
