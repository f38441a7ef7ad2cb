"""What restarts of a relay node lose: planned stops (SIGTERM) against crashes (SIGKILL), on an
idle host and on a busy one, and what taking only as fast as the spool appends costs.

Usage: ``python bench/relay_restarts.py [--restarts N] [--period S] [--rate R] [--busy N]
[--modes term,kill] [--pacing-seconds S] [--json]``

A Zeek node is played by a sender *process*: a PUSH socket with Zeek's defaults
(``log_sndhwm`` 1000, sends without blocking, as ``DoPublishLogWrites``) sends
the log batches of a real Zeek 9.1 (``tests/vectors``, about 3 records and 2 KB
a batch) at ``--rate`` batches a second (5,000: about 16,000 records a second, a
busy Zeek node); a send the socket refuses at its high-water mark is what Zeek
drops, and is counted. A second sender process is a Broker peer publishing
Zeek's recorded Broker log messages (``--broker-rate`` a second) whenever it has
the node's subscription, redialling every second.

``broker-spark node --zeromq-logs ... --spool ... --relay ...`` runs as its own
process on one spool and is stopped ``--restarts`` times, every ``--period``
seconds, by SIGTERM or SIGKILL, and started again at once on the same spool and
ports. At the end both senders stop, what Zeek's queue still holds for the node
is delivered, and the spool is read. Counted per run:

- **lost after reading** (SIGTERM): what the node says it read from ZeroMQ (each
  planned stop logs it) and is not in the spool: the promise is 0;
- **never read** (the transport's window): batches the PUSH socket accepted that
  the node never read: bytes inside TCP when a connection closed. With SIGKILL
  the two cannot be told apart (the node cannot say what it had read), so the
  total is given;
- **Zeek's drops**: sends refused at Zeek's own high-water mark (the backlog left
  upstream, in Zeek's queue and its counters, not the node's memory);
- for the Broker peer: published while peered and not spooled (Broker keeps
  nothing for a peer that is gone).

Loss is a share of what the senders handed over. ``--busy N`` runs N processes
that spin on a core each for the whole run (the host's two cores busy with other
work). Last, the **pacing cost**: the node's receive path (the ZeroMQ receiver
into the spool, in process) offered batches as fast as a sender can, with
the defaults (a 1 MiB queue, rcvhwm 100, a 64 KiB receive buffer) against the
previous ones (256 MiB, 1000, the kernel's autotuned buffer), in the same run:
the ratio of their rates.

To find when the lost batches were sent, set ``RESTARTS_TRACE=FILE``: the sender
numbers each batch (its last 4 bytes) and writes when it sent it to FILE, and the
bench prints, for each batch the spool lacks, the seconds since the stop before it.
``RESTARTS_BROKER_TRACE=FILE`` does the same for the Broker peer's messages (each is
numbered in its topic, under the node's prefix).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

_STOPPED = re.compile(r"spool ends at offset \d+ \((\d+) ZeroMQ log messages read since start\)")
BROKER_TOPIC = "zeek/logs/bench-broker"


def _free_port() -> int:
    from ports import free_port

    return free_port()


# --- the senders --------------------------------------------------------------------------


def _zmq_sender(endpoint: str, rate: float, conn: Any, trace: str = "") -> None:
    import zmq
    from zeek_recordings import ZMQ_LOGS, zmq_messages

    messages = zmq_messages(ZMQ_LOGS)
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.sndhwm = 1000  # Zeek's log_sndhwm
    push.linger = 60_000  # what Zeek's queue holds is delivered after the stop
    push.connect(endpoint)
    conn.send("ready")
    sent = dropped = 0
    began = time.monotonic()
    times = open(trace, "w") if trace else None  # noqa: SIM115 - closed below
    while not conn.poll(0):
        ahead = began + (sent + dropped) / rate - time.monotonic()
        if ahead > 0:
            time.sleep(min(ahead, 0.05))
            continue
        frames = messages[(sent + dropped) % len(messages)]
        if times is not None:  # each batch's last 4 bytes its number, to find the lost ones
            frames = [frames[0], frames[1], frames[2], frames[3][:-4] + sent.to_bytes(4, "big")]
        try:
            push.send_multipart(frames, zmq.NOBLOCK)
            if times is not None:
                times.write(f"{sent} {time.time():.4f}\n")
            sent += 1
        except zmq.Again:  # Zeek: "Failed to send log write. HWM reached?"
            dropped += 1
    conn.recv()
    push.close()  # lingers: Zeek's queue for a node that is back is delivered
    ctx.term()
    if times is not None:
        times.close()
    conn.send((sent, dropped))


def _broker_sender(port: int, rate: float, conn: Any, trace: str = "") -> None:
    from zeek_recordings import recording

    import broker_spark as broker

    payloads = [p for _t, p in recording("zeek-logs-dns-edns-ecs").data]
    config = broker.Configuration(broker.BrokerOptions(disable_ssl=True))
    published = unpeered = 0
    times = open(trace, "w") if trace else None  # noqa: SIM115 - closed below
    with broker.Endpoint(config) as ep:
        ep.peer_nosync("127.0.0.1", port, 1.0)
        conn.send("ready")
        began = time.monotonic()
        i = 0
        while not conn.poll(0):
            ahead = began + i / rate - time.monotonic()
            if ahead > 0:
                time.sleep(min(ahead, 0.05))
                continue
            i += 1
            if any(str(t).startswith("zeek/logs/") for t in ep.peer_subscriptions()):
                # traced: the message's number in its topic (under the node's prefix)
                topic = f"{BROKER_TOPIC}/{i}" if times else BROKER_TOPIC
                ep.publish_encoded([(topic, payloads[i % len(payloads)])])
                published += 1
                if times:
                    times.write(f"{i} {time.time()}\n")
            else:
                unpeered += 1
        conn.recv()
        time.sleep(1.0)
    if times:
        times.close()
    conn.send((published, unpeered))


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


# --- the node -------------------------------------------------------------------------------


class _Node:
    def __init__(self, spool: Path, zmq_port: int, listen: int, log: Path) -> None:
        self.args = [
            sys.executable, "-m", "broker_spark", "node", "--no-tls",
            "--listen", f"127.0.0.1:{listen}", "--spool", str(spool),
            "--subscribe", "zeek/logs/", "--relay", "127.0.0.1:0",
            "--zeromq-logs", f"tcp://127.0.0.1:{zmq_port}",
        ]  # fmt: skip
        self.log = log
        self.proc: subprocess.Popen | None = None
        self.runs = 0
        self.relay = ""

    def start(self) -> None:
        self.runs += 1
        err = open(self.log.with_suffix(f".{self.runs}.log"), "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )  # fmt: skip
        err.close()
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("relay listening on "):
                self.relay = line.split()[-1]
            if line.strip() == "ready":
                return
        raise RuntimeError(f"the node did not start: {self.stderr()[-2000:]}")

    def stderr(self) -> str:
        return self.log.with_suffix(f".{self.runs}.log").read_text(errors="replace")

    def settle(self, quiet: float = 3.0, timeout: float = 120.0) -> None:
        """Until the spool's end has not moved for ``quiet`` seconds: the node has read what
        the senders' queues and sockets still held (a busy host drains a backlog)."""
        from broker_spark.spool.relay_client import SpoolClient

        host, port = self.relay.rsplit(":", 1)
        deadline = time.monotonic() + timeout
        with SpoolClient.tcp(host, int(port), None) as client:
            client.hello("status", "bench")
            last, since = -1, time.monotonic()
            while time.monotonic() < deadline:
                end = int(client.request("bounds")["end"])
                if end != last:
                    last, since = end, time.monotonic()
                elif time.monotonic() - since >= quiet:
                    return
                time.sleep(0.2)

    def stop(self, sig: int) -> tuple[float, int | None]:
        """Seconds to exit, and (SIGTERM) the ZeroMQ messages it says it read."""
        assert self.proc is not None
        began = time.monotonic()
        self.proc.send_signal(sig)
        code = self.proc.wait(120)
        took = time.monotonic() - began
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if sig == signal.SIGKILL:
            return took, None
        if code != 0:
            raise RuntimeError(f"the node exited {code}: {self.stderr()[-2000:]}")
        found = _STOPPED.search(self.stderr())
        if not found:
            raise RuntimeError(f"no stop line: {self.stderr()[-2000:]}")
        return took, int(found.group(1))


def _lost_after_stops(trace: str, seen: set[int], marks: list[float]) -> list[float | None]:
    """For each message of ``trace`` (``number time`` lines) the spool lacks: seconds from
    the stop before it was sent (None: sent before the first stop)."""
    lost_at: list[float | None] = []
    with open(trace) as lines:
        for line in lines:
            n, at = line.split()
            if int(n) not in seen:
                before = max((m for m in marks if m <= float(at)), default=None)
                lost_at.append(round(float(at) - before, 3) if before else None)
    return lost_at


def run_restarts(mode: str, restarts: int, period: float, rate: float, broker_rate: float,
                 busy: int) -> dict[str, Any]:  # fmt: skip
    from broker_spark.spool.spool import Spool

    sig = signal.SIGTERM if mode == "term" else signal.SIGKILL
    work = Path(tempfile.mkdtemp(prefix="broker-spark-restarts-"))
    spinners = [
        mp.Process(target=_spin, args=(restarts * period + 120,), daemon=True) for _ in range(busy)
    ]
    for p in spinners:
        p.start()
    zmq_port, listen = _free_port(), _free_port()
    node = _Node(work / "spool", zmq_port, listen, work / "node")
    zmq_conn, zmq_far = mp.Pipe()
    broker_conn, broker_far = mp.Pipe()
    senders = [
        mp.Process(
            target=_zmq_sender,
            args=(
                f"tcp://127.0.0.1:{zmq_port}",
                rate,
                zmq_far,
                os.environ.get("RESTARTS_TRACE", ""),
            ),
        ),
        mp.Process(
            target=_broker_sender,
            args=(listen, broker_rate, broker_far, os.environ.get("RESTARTS_BROKER_TRACE", "")),
        ),
    ]
    stop_times: list[float] = []
    marks: list[float] = []
    read_total = 0
    try:
        node.start()
        for p in senders:
            p.start()
        zmq_conn.recv()
        broker_conn.recv()
        for _ in range(restarts):
            time.sleep(period)
            marks.append(time.time())  # when each stop began
            took, read = node.stop(sig)
            stop_times.append(took)
            if read is not None:
                read_total += read
            node.start()
        time.sleep(period)
        zmq_conn.send("stop")
        broker_conn.send("stop")
        sent, dropped = zmq_conn.recv()
        published, unpeered = broker_conn.recv()
        node.settle()  # what Zeek's queue and sockets held is delivered and appended
        took, read = node.stop(signal.SIGTERM)
        if read is not None and sig == signal.SIGTERM:
            read_total += read
        with Spool(work / "spool", readonly=True) as view:
            zmq_spooled = broker_spooled = 0
            seen: set[int] = set()
            broker_seen: set[int] = set()
            for record in view.iter_records(view.start_offset(), view.end_offset()):
                if record.topic.startswith(BROKER_TOPIC):
                    broker_spooled += 1
                    if record.topic != BROKER_TOPIC:
                        broker_seen.add(int(record.topic.rsplit("/", 1)[1]))
                else:
                    zmq_spooled += 1
                    seen.add(int.from_bytes(bytes(record.payload[-4:]), "big"))
    finally:
        for p in senders + spinners:
            if p.is_alive():
                p.terminate()
            p.join(10)
        if node.proc is not None and node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    trace = os.environ.get("RESTARTS_TRACE")
    if trace:  # each lost batch: when it was sent, against the stop before it
        lost_at = _lost_after_stops(trace, seen, marks)
        print("lost, seconds after the last stop began:", lost_at[:400], file=sys.stderr)
    broker_trace = os.environ.get("RESTARTS_BROKER_TRACE")
    if broker_trace:  # each lost Broker message: when it was published, against the stop
        lost_at = _lost_after_stops(broker_trace, broker_seen, marks)
        print("Broker lost, s after the last stop began:", lost_at[:400], file=sys.stderr)
        print(
            "stops began at (s after the first):",
            [round(m - marks[0], 2) for m in marks],
            "restarted after (s):",
            [round(t, 2) for t in stop_times],
            file=sys.stderr,
        )
    out: dict[str, Any] = {
        "mode": "SIGTERM" if sig == signal.SIGTERM else "SIGKILL",
        "restarts": restarts,
        "period_s": period,
        "busy_spinners": busy,
        "rate_batches_s": rate,
        "zmq_sent": sent,
        "zmq_dropped_at_zeek_hwm": dropped,
        "zmq_spooled": zmq_spooled,
        "zmq_lost": sent - zmq_spooled,
        "zmq_lost_pct": round(100.0 * (sent - zmq_spooled) / max(1, sent), 4),
        "broker_published": published,
        "broker_unpeered_not_sent": unpeered,
        "broker_spooled": broker_spooled,
        "broker_lost": published - broker_spooled,
        "broker_lost_pct": round(100.0 * (published - broker_spooled) / max(1, published), 4),
        "stop_seconds_max": round(max(stop_times), 2) if stop_times else None,
        "stop_seconds_median": round(sorted(stop_times)[len(stop_times) // 2], 2)
        if stop_times
        else None,
    }
    if sig == signal.SIGTERM:
        out["zmq_read"] = read_total
        out["zmq_lost_after_read"] = read_total - zmq_spooled
        out["zmq_never_read_transport"] = sent - read_total
    return out


# --- the pacing cost --------------------------------------------------------------------------


def _fast_sender(endpoint: str, seconds: float, conn: Any) -> None:
    import zmq
    from zeek_recordings import ZMQ_LOGS, zmq_messages

    messages = zmq_messages(ZMQ_LOGS)
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.sndhwm = 1000
    push.linger = 0
    push.connect(endpoint)
    conn.send("ready")
    conn.recv()
    end = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < end:
        try:
            push.send_multipart(messages[sent % len(messages)], zmq.NOBLOCK)
            sent += 1
        except zmq.Again:
            time.sleep(0.0001)
    push.close()
    ctx.term()
    conn.send(sent)


def pacing_rate(settings: dict[str, int], seconds: float) -> float:
    """Batches a second the receive path spools with these receiver settings."""
    from broker_spark.spool.pump import SpoolPump
    from broker_spark.spool.spool import Spool
    from broker_spark.zeromq.log_receiver import ZeroMQLogReceiver

    work = tempfile.mkdtemp(prefix="broker-spark-pacing-")
    try:
        spool = Spool(work)
        receiver = ZeroMQLogReceiver("tcp://127.0.0.1:0", **settings)
        pump = SpoolPump(receiver, spool)
        pump.start()
        conn, far = mp.Pipe()
        sender = mp.Process(target=_fast_sender, args=(receiver.endpoint, seconds, far))
        sender.start()
        conn.recv()
        time.sleep(0.5)
        start = pump.appended
        began = time.monotonic()
        conn.send("go")
        conn.recv()
        took = time.monotonic() - began
        rate = (pump.appended - start) / took
        sender.join(10)
        pump.stop()
        spool.close()
        return rate
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--restarts", type=int, default=6)
    parser.add_argument("--period", type=float, default=4.0, help="seconds between restarts")
    parser.add_argument("--rate", type=float, default=5000.0, help="ZeroMQ batches a second")
    parser.add_argument("--broker-rate", type=float, default=500.0, help="Broker messages/s")
    parser.add_argument("--busy", type=int, default=0, help="processes spinning meanwhile")
    parser.add_argument("--modes", default="term,kill")
    parser.add_argument("--pacing-seconds", type=float, default=5.0, help="0: skip")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {"restarts": []}
    for mode in args.modes.split(","):
        found = run_restarts(
            mode, args.restarts, args.period, args.rate, args.broker_rate, args.busy
        )
        results["restarts"].append(found)
        if not args.json:
            print(json.dumps(found))
    if args.pacing_seconds:
        from broker_spark.zeromq.log_receiver import (
            DEFAULT_MAX_QUEUED_BYTES,
            DEFAULT_RCVBUF,
            DEFAULT_RCVHWM,
        )

        before = {"rcvhwm": 1000, "rcvbuf": -1, "max_queued_bytes": 256 << 20}
        now = {
            "rcvhwm": DEFAULT_RCVHWM,
            "rcvbuf": DEFAULT_RCVBUF,
            "max_queued_bytes": DEFAULT_MAX_QUEUED_BYTES,
        }
        rates = {"previous": [], "paced": []}
        for _ in range(2):  # alternated, in the same run
            rates["previous"].append(pacing_rate(before, args.pacing_seconds))
            rates["paced"].append(pacing_rate(now, args.pacing_seconds))
        best = {k: max(v) for k, v in rates.items()}
        results["pacing"] = {
            "batches_s": {k: round(v) for k, v in best.items()},
            "ratio_paced_to_previous": round(best["paced"] / best["previous"], 3),
        }
        if not args.json:
            print(json.dumps(results["pacing"]))
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
