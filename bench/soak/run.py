"""``make soak``: the whole path under load for a while, with faults, then checked.

Usage: ``python bench/soak/run.py [--seconds S] [--seed N] [--json FILE] [--keep]``
(``SOAK_SECONDS`` sets the default of ``--seconds``: 600, ten minutes; an hour on
demand: ``SOAK_SECONDS=3600 make soak``).

The path, each part a real process on loopback:

* two relay nodes (``broker-spark node --spool``) as a Zeek cluster's loggers:
  ``A`` also listens for Broker peers, serves the WebSocket API, masters the
  store ``soak`` and serves metrics; ``B`` keeps small files and a small
  retention, so retention runs all along;
* a ZeroMQ sender PUSHing a real Zeek's conn records (fresh uids and times)
  to both (ZeroMQ deals them round-robin, as Zeek's nodes do to its loggers),
  and a Broker sender (``K``) peered with ``A``;
* a Spark driver (its own process) running two queries into one SQLite sink
  keyed by position: one reads both relays as one stream, through cutting
  proxies; the other listens for Broker peers (``listen`` with a
  ``spoolPath``), so its reader starts the receiver of that spool, a process of
  its own session that owns the endpoint and the spool and outlives the
  driver; a third sender (``R``, Broker) peers with that receiver. Both Broker
  senders peer through cutting proxies too;
* a WebSocket client and a store writer on the side.

A seeded chaos loop meanwhile SIGKILLs and restarts relay ``B``, stops it with
SIGTERM and starts it again (a planned restart), fills the small file system its
spool lives on (a tmpfs mounted for the run, as root) until it stops taking, then
frees it, sends relay ``A`` batches it cannot decode (another serializer's, and
real batches cut in half) among the good ones, SIGKILLs the driver
(never its receiver, which the restarted driver finds again through the spool
folder) and each sender in turn; SIGKILLs the receiver alone, which the query
starts again from its spool at its next trigger; cuts the query's relay
connections and the Broker senders' peerings mid-frame; sends hostile clients to
every listening port (the receiver's too); and once kills the driver and fills
``B`` past its retention so records are dropped unread (``failOnDataLoss=false``).

At the end the senders stop, the queries catch up and stop, the receiver is
stopped (``broker-spark receiver stop``'s way), and the checks run (the exit
code says whether all passed):

* every record sent is in the sink exactly once, with none missing around a
  planned restart of a relay or a full disk (no cause is allowed there). Missing
  records are allowed only where the design loses them, each counted by cause:
  in flight to a relay
  or to the receiver or in a sender's socket when it was SIGKILLed, or on a
  Broker peering when it was cut (Zeek's transports acknowledge nothing: the
  same loss a real Zeek has), or dropped unread by retention while the driver
  was down (and the reader said so). What the receiver took while its driver
  was down is not among them;
* no record is doubled;
* relay ``A`` (never killed) does not grow in memory, descriptors or threads
  between the middle and the end of the run beyond stated bounds, and relay
  ``B``'s spool stays within its retention plus one file;
* every hostile connection was refused or closed and every process survived it;
* every fault was recovered from, with the time it took (a killed receiver:
  until records sent after the query started another reached the sink);
* the receiver ran once, plus once per kill of it, and each restarted driver
  attached to the one that ran on (the same pid, a reader of the new driver's
  attached);
* each planned restart exited 0 having appended and synced all it read; the full
  disk paused relay ``B`` (its log and status said so) and it took again by itself;
  every undecodable batch sent is kept in relay ``A``'s spool;
* the receiver stopped cleanly, and nothing of the run is left running or in
  the temporary folder.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from statistics import median
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from checks import (  # noqa: E402
    A_SEGMENT,
    B_RETENTION,
    B_SEGMENT,
    checks,
    data_loss_warnings,
)
from disk import SmallDisk, tree_size, undecodable_kept  # noqa: E402
from fault_actions import RECEIVER_RESTART_TIMEOUT, FaultActions  # noqa: E402
from faults import CuttingProxy, HostileClients  # noqa: E402
from ledger import Fault, account  # noqa: E402
from ports import free_port  # noqa: E402
from procs import Component, Usage, stray, usage_of  # noqa: E402
from query import RECEIVER_SOURCE  # noqa: E402
from receiver_watch import ReceiverWatch  # noqa: E402

PY = sys.executable
NODE = [PY, "-m", "broker_spark", "node", "--no-tls"]


class Soak(FaultActions):
    def __init__(self, seconds: float, seed: int, work: Path) -> None:
        self.seconds = seconds
        self.rng = random.Random(seed)
        self.seed = seed
        self.work = work
        self.ports = {name: free_port() for name in ("A", "rA", "zA", "wA", "mA", "rB", "zB", "L")}
        self.faults: list[Fault] = []
        self.windows: list[tuple[str, str, float, float]] = []
        self.samples: dict[str, list[tuple[float, Usage]]] = {}
        self.hostile_checks: list[dict[str, Any]] = []
        p = self.ports
        log = work / "logs"
        log.mkdir()
        # Relay B's spool on a small file system of its own (a tmpfs, as root), which a
        # fault fills; elsewhere in the run's folder, and that fault is left out.
        self.small_disk = SmallDisk.mount(work / "disk-B", "64m")
        self.spool_b = (self.small_disk.path if self.small_disk else work) / "spool-B"
        self.undecodable_sent: list[list[bytes]] = []
        self.relay_a = Component(
            "relay-A",
            [*NODE, "--listen", f"127.0.0.1:{p['A']}", "--spool", str(work / "spool-A"),
             "--subscribe", "zeek/logs/", "--relay", f"127.0.0.1:{p['rA']}",
             "--zeromq-logs", f"tcp://127.0.0.1:{p['zA']}", "--websocket", f"127.0.0.1:{p['wA']}",
             "--master", "soak", "--metrics", f"127.0.0.1:{p['mA']}",
             # small files, so the files it fills are compressed (the default) during the
             # run, and readers that go back (a restarted query) read compressed ones
             "--spool-segment", str(A_SEGMENT)],
            log / "relay-A.log", "^ready$",
        )  # fmt: skip
        self.relay_b = Component(
            "relay-B",
            [*NODE, "--no-listen", "--spool", str(self.spool_b), "--subscribe", "zeek/logs/",
             "--relay", f"127.0.0.1:{p['rB']}", "--zeromq-logs", f"tcp://127.0.0.1:{p['zB']}",
             "--spool-segment", str(B_SEGMENT), "--spool-retention", str(B_RETENTION),
             # files as written: retention by size drops them all along at this scale
             "--spool-compression", "none"],
            log / "relay-B.log", "^ready$",
        )  # fmt: skip
        self.ledgers = {t: work / f"ledger-{t}" for t in ("Z", "K", "R", "F")}
        self.proxies = {
            "A": CuttingProxy(("127.0.0.1", p["rA"]), self.rng),
            "B": CuttingProxy(("127.0.0.1", p["rB"]), self.rng),
        }
        # The Broker sender peers through a cutting proxy too (Broker redials; what was in
        # flight on a cut connection is lost, as with Zeek).
        self.peering_proxy = CuttingProxy(("127.0.0.1", p["A"]), self.rng)
        # The receiver of the second query's spoolPath listens on L; its sender peers through
        # a cutting proxy as well.
        self.receiver_spool = work / "spool-R"
        self.receiver = ReceiverWatch(self.receiver_spool, self._wait_until)
        self.receiver_proxy = CuttingProxy(("127.0.0.1", p["L"]), self.rng)
        self.receiver_pid: int | None = None  # the receiver the soak knows of
        self.receiver_unexpected: list[dict[str, Any]] = []  # a receiver gone on its own
        sender = [PY, str(HERE / "sender.py")]
        zeromq = [f"tcp://127.0.0.1:{p['zA']}", f"tcp://127.0.0.1:{p['zB']}"]
        self.zeromq = Component(
            "sender-Z",
            [*sender, "zeromq", str(self.ledgers["Z"]), "Z", *zeromq, "--rate", "300",
             "--batch", "100"],
            log / "sender-Z.log", "",
        )  # fmt: skip
        self.broker = Component(
            "sender-K",
            [*sender, "broker", str(self.ledgers["K"]), "K",
             f"127.0.0.1:{self.peering_proxy.port}",
             "--rate", "150", "--batch", "50"],
            log / "sender-K.log", "",
        )  # fmt: skip
        self.receiving = Component(
            "sender-R",
            [*sender, "broker", str(self.ledgers["R"]), "R",
             f"127.0.0.1:{self.receiver_proxy.port}", "--rate", "100", "--batch", "50"],
            log / "sender-R.log", "",
        )  # fmt: skip
        self.filler = Component(
            "sender-F",
            [*sender, "zeromq", str(self.ledgers["F"]), "F", f"tcp://127.0.0.1:{p['zB']}",
             "--rate", "4000", "--batch", "500"],
            log / "sender-F.log", "",
        )  # fmt: skip
        relays = ",".join(f"127.0.0.1:{x.port}" for x in self.proxies.values())
        self.sink = work / "sink.db"
        self.query = Component(
            "driver",
            [
                PY,
                str(HERE / "query.py"),
                relays,
                str(work / "checkpoint"),
                str(self.sink),
                f"127.0.0.1:{p['L']}",
                str(self.receiver_spool),
                str(work / "checkpoint-R"),
            ],
            log / "driver.log",
            "^started$",
            # A SIGKILLed driver cannot clean up: its Spark folders stay in the run's folder.
            # (and Spark's launcher JVM keeps no perf data in /tmp/hsperfdata_$USER).
            env={
                "TMPDIR": str(work / "driver-tmp"),
                "SPARK_LOCAL_DIRS": str(work / "driver-tmp"),
                "SPARK_LAUNCHER_OPTS": "-XX:-UsePerfData",
            },
        )
        (work / "driver-tmp").mkdir()
        self.side_report = work / "side.json"
        self.side = Component(
            "side",
            [PY, str(HERE / "side.py"), f"ws://127.0.0.1:{p['wA']}/v1/messages/json",
             f"127.0.0.1:{p['A']}", str(self.side_report)],
            log / "side.log", "",
        )  # fmt: skip
        self.hostile = HostileClients(
            {"peering": p["A"], "relay-A": p["rA"], "relay-B": p["rB"], "websocket": p["wA"],
             "metrics": p["mA"], "zeromq-A": p["zA"], "zeromq-B": p["zB"], "receiver": p["L"]},
            self.rng,
        )  # fmt: skip
        self.long_lived = [self.relay_a, self.relay_b, self.query]
        self.tmp_before = set(os.listdir(tempfile.gettempdir()))

    # -- the run ------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        began = time.time()
        startup = {c.name: c.start() for c in (self.relay_a, self.relay_b)}
        startup[self.query.name] = self.query.start(240)
        # The receiver query's reader starts the receiver of its spoolPath.
        began_receiver = time.time()
        self.receiver_pid = self.receiver.await_new(None, RECEIVER_RESTART_TIMEOUT)
        if self.receiver_pid is None:
            raise RuntimeError(f"the query started no receiver: see {self.query.log}")
        startup["receiver"] = time.time() - began_receiver
        for c in (self.zeromq, self.broker, self.receiving, self.side):
            c.start()
        self.relay_ids = {name: self._relay_id(port) for name, port in
                          (("A", self.ports["rA"]), ("B", self.ports["rB"]))}  # fmt: skip
        self.relay_ids["receiver"] = RECEIVER_SOURCE
        end = began + self.seconds
        kinds = [self.kill_relay, self.kill_receiver, self.kill_driver, self.kill_zeromq_sender,
                 self.kill_broker_sender, self.kill_receiver_sender, self.cut_connections,
                 self.hostile_burst, self.restart_relay, self.restart_relay,
                 self.undecodable_burst]  # fmt: skip
        if self.small_disk is not None:
            kinds.append(self.fill_disk)
        todo: list[Any] = []
        filled = middle_sampled = False
        self._sample()
        next_at = time.time() + 20
        while True:
            self._wait_until(next_at)
            if not middle_sampled and time.time() >= began + self.seconds / 2:
                self._sample()
                middle_sampled = True
            if time.time() > end - 60:  # the last minute is left to settle
                break
            self._check_alive()
            if not filled and time.time() >= began + self.seconds / 2:
                action, filled = self.fill_past_retention, True
            else:
                if not todo:  # a round of every kind, in a seeded order
                    todo = kinds[:]
                    self.rng.shuffle(todo)
                action = todo.pop()
            action()
            self._await_recovery(self.faults[-1], 120)
            next_at = time.time() + self.rng.uniform(5, 15)
        self._wait_until(end)
        if not middle_sampled:
            self._sample()
        self._sample()
        return self._finish(began, startup)

    # -- watching -----------------------------------------------------------------------

    def _longest_pause(self, lo: float, hi: float) -> dict[str, float]:
        """The longest time without a batch that added rows between ``lo`` and ``hi``, by
        query."""
        import sqlite3

        out = {}
        db = sqlite3.connect(self.sink, timeout=60)
        try:
            for source in ("relays", RECEIVER_SOURCE):
                times = [lo] + [
                    t for (t,) in db.execute(
                        "SELECT at FROM batches WHERE added > 0 AND source = ?"
                        " AND at BETWEEN ? AND ? ORDER BY at",
                        (source, lo, hi),
                    )
                ] + [hi]  # fmt: skip
                out[source] = round(max(b - a for a, b in zip(times, times[1:], strict=False)), 2)
        finally:
            db.close()
        return out

    def _wait_until(self, at: float) -> None:
        """Sleep until ``at``, sampling relay A each second."""
        while time.time() < at:
            time.sleep(min(1.0, max(0.0, at - time.time())))
            self._sample_relay_a()

    def _await_recovery(self, fault: Fault, timeout: float) -> None:
        """Until the sink took new records after ``fault`` (from relay B after a kill of B,
        from the receiver after a kill of it), so that faults do not overlap; the exact
        recovery time is measured at the end."""
        import sqlite3

        since = fault.restarted or fault.at
        if fault.kind in ("kill-relay", "planned-restart", "full-disk"):
            sql, args = "SELECT MAX(written) FROM rows WHERE relay = ?", (self.relay_ids["B"],)
        elif fault.kind == "kill-receiver":
            sql, args = "SELECT MAX(written) FROM rows WHERE relay = ?", (RECEIVER_SOURCE,)
        else:
            sql, args = "SELECT MAX(at) FROM batches WHERE added > 0", ()
        deadline = time.time() + timeout
        while time.time() < deadline:
            db = sqlite3.connect(self.sink, timeout=60)
            try:
                latest = db.execute(sql, args).fetchone()[0]
            finally:
                db.close()
            if latest is not None and latest > since + 1:
                return
            self._wait_until(time.time() + 1.0)

    def _relay_id(self, port: int) -> str:
        from broker_spark.spool.relay_client import SpoolClient

        client = SpoolClient.tcp("127.0.0.1", port, None)
        try:
            return str(client.hello("status", "soak")["relay"])
        finally:
            client.close()

    def _listeners(self) -> dict[str, Any]:
        try:
            text = urllib.request.urlopen(
                f"http://127.0.0.1:{self.ports['mA']}/metrics", timeout=10
            ).read()
        except OSError as exc:
            return {"error": repr(exc)}
        out = {}
        for line in text.decode().splitlines():
            if line.startswith("broker_spark_listener_refused_total"):
                name, _, value = line.rpartition(" ")
                out[name.partition("{")[2].rstrip("}")] = float(value)
        return out

    def _sample(self) -> None:
        for c in self.long_lived:
            usage = c.usage()
            if usage is not None:
                self.samples.setdefault(c.name, []).append((time.time(), usage))
        pid = self.receiver.pid()
        usage = usage_of(pid) if pid is not None else None
        if usage is not None:
            self.samples.setdefault("receiver", []).append((time.time(), usage))

    def _sample_relay_a(self) -> None:
        usage = self.relay_a.usage()
        if usage is not None:
            self.samples.setdefault("relay-A (each second)", []).append((time.time(), usage))

    def _check_alive(self) -> None:
        for c in (self.relay_a, self.relay_b, self.query, self.zeromq, self.broker,
                  self.receiving):  # fmt: skip
            if not c.alive:
                raise RuntimeError(f"{c.name} died on its own: see {c.log}")
        pid = self.receiver.pid()
        if pid != self.receiver_pid:  # gone on its own (or replaced): noted, and checked
            self.receiver_unexpected.append(
                {"at": round(time.time(), 1), "known": self.receiver_pid, "found": pid}
            )
            found = self.receiver.await_new(self.receiver_pid, RECEIVER_RESTART_TIMEOUT)
            if found is None:
                raise RuntimeError(f"the receiver is gone: see {self.receiver_spool}")
            self.receiver_pid = found

    # -- the end ------------------------------------------------------------------------

    def _finish(self, began: float, startup: dict[str, float]) -> dict[str, Any]:
        for c in (self.zeromq, self.broker, self.receiving):
            c.stop()
        self.side.stop(90)
        sent_end = time.time()
        caught_up = self._wait_caught_up(240)
        self._sample()
        # Relay A (never killed), sampled each second: its middle against its end.
        a_samples = self.samples.get("relay-A (each second)", [])
        listeners = self._listeners()
        receiver_starts = self.receiver.starts()
        self.query.stop(90)
        # The receiver outlives its query: stopped here as one would by hand.
        receiver_stop = self.receiver.stop(self.receiver_pid)
        for c in (self.relay_a, self.relay_b):
            c.stop(60)
        kept = undecodable_kept(self.work / "spool-A", self.undecodable_sent)
        compressed_a = sum(1 for f in (self.work / "spool-A").iterdir() if f.suffix == ".zlog")
        spool_b_mb = round(tree_size(self.spool_b) / 2**20, 2)
        if self.small_disk is not None:
            self.small_disk.unmount()
        for proxy in self._all_proxies():
            proxy.close()
        self.hostile.release()
        left_running = stray(str(self.work))
        ledgers = {t: p for t, p in self.ledgers.items()}
        acc, unexplained = account(ledgers, self.sink, self.faults, self.windows, self.relay_ids)
        skipped = data_loss_warnings(self.query.log)
        side = json.loads(self.side_report.read_text()) if self.side_report.exists() else {}
        recoveries = [
            f.recovered_s
            for f in self.faults
            if f.recovered_s is not None and f.kind != "hostile-clients"
        ]
        result: dict[str, Any] = {
            "seconds": round(sent_end - began, 1),
            "seed": self.seed,
            "load_records_per_s": round(acc.sent / max(1.0, sent_end - began), 1),
            "sent": acc.sent,
            "in_sink": acc.in_sink,
            "missing": acc.missing,
            "missing_by_cause": dict(acc.missing_by_cause),
            "doubled": acc.doubled,
            "unknown_in_sink": acc.unknown_in_sink,
            "dropped_at_hwm": acc.dropped_at_hwm,
            "batches": acc.batches,
            "batch_rows_replayed": acc.batch_rows_replayed,
            "latency_s": acc.latency_s,
            "checkpoint_files": sum(1 for f in (self.work / "checkpoint").rglob("*") if f.is_file()),
            # hsperfdata_$USER is every JVM's of this user, made by whichever runs first.
            "tmp_left": sorted(
                name
                for name in set(os.listdir(tempfile.gettempdir())) - self.tmp_before
                if name != self.work.name and not name.startswith("hsperfdata_")
            ),
            "left_running": left_running,
            "retention_warnings": skipped,
            "caught_up": caught_up,
            "startup_s": {k: round(v, 1) for k, v in startup.items()},
            "faults": [
                {"kind": f.kind, "target": f.target, "at_s": round(f.at - began, 1),
                 "recovered_s": f.recovered_s, **f.detail}
                for f in self.faults
            ],  # fmt: skip
            "faults_by_kind": _count(f.kind for f in self.faults),
            "recovery_s": {
                "median": round(median(recoveries), 2) if recoveries else None,
                "worst": max(recoveries) if recoveries else None,
            },
            "usage": {
                name: {
                    "start": vars(s[0][1]),
                    "middle": vars(s[len(s) // 2][1]),
                    "end": vars(s[-1][1]),
                }
                for name, s in self.samples.items()
                if s
            },
            "listeners_refused": listeners,
            "hostile_connections": self.hostile.connections,
            "hostile_unanswered": self.hostile.unanswered,
            "hostile": self.hostile_checks,
            "side": side,
            "spool_B_mb": spool_b_mb,
            "spool_A_compressed_files": compressed_a,
            "undecodable": {"sent": len(self.undecodable_sent), "kept": kept},
            "small_disk": self.small_disk is not None or SmallDisk.why_not,
            "receiver": {
                "starts": receiver_starts,
                "gone_on_its_own": self.receiver_unexpected,
                "stop": receiver_stop,
                "spool_mb": round(tree_size(self.receiver_spool) / 2**20, 2),
            },
            "unexplained_missing": unexplained,
            "components": [c.describe() for c in
                           (self.relay_a, self.relay_b, self.query, self.zeromq, self.broker,
                            self.receiving)],
        }  # fmt: skip
        result["checks"] = checks(result, a_samples)
        return result

    def _wait_caught_up(self, timeout: float) -> bool:
        """Until the sink stops growing for 15 s (the query read all the relays hold)."""
        import sqlite3

        deadline = time.time() + timeout
        last, still = -1, time.time()
        while time.time() < deadline:
            db = sqlite3.connect(self.sink, timeout=60)
            try:
                n = db.execute("SELECT COUNT(*) FROM rows").fetchone()[0]
            finally:
                db.close()
            if n != last:
                last, still = n, time.time()
            elif time.time() - still > 15:
                return True
            time.sleep(2.0)
        return False

    def _all_proxies(self) -> list[CuttingProxy]:
        return [*self.proxies.values(), self.peering_proxy, self.receiver_proxy]

    def close(self) -> None:
        for c in (self.zeromq, self.broker, self.receiving, self.filler, self.side, self.query,
                  self.relay_a, self.relay_b):  # fmt: skip
            if c.alive:
                c.kill()
        pid = self.receiver.pid()
        if pid is not None:
            try:
                from broker_spark.reader.receiver_attach import stop_receiver

                stop_receiver(str(self.receiver_spool), 30)
            except Exception:  # noqa: BLE001 - a failed run: kill it rather
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for proxy in self._all_proxies():
            proxy.close()
        self.hostile.release()
        if self.small_disk is not None:
            self.small_disk.unmount()


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", 600)))
    p.add_argument("--seed", type=int, default=int(os.environ.get("SOAK_SEED", 1)))
    p.add_argument("--json", type=Path, help="write the report here too")
    p.add_argument("--keep", action="store_true", help="keep the run's folder (logs, spools)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="broker-spark-soak-"))
    soak = Soak(args.seconds, args.seed, work)
    try:
        result = soak.run()
    except BaseException:
        print(f"the soak failed; its logs are in {work}", file=sys.stderr)
        soak.close()
        raise
    finally:
        soak.close()
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text)
    failed = [name for name, ok in result["checks"].items() if not ok]
    for name, ok in result["checks"].items():
        print(f"{'ok  ' if ok else 'FAIL'} {name}", file=sys.stderr)
    if failed or args.keep:
        print(f"the run's folder: {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
