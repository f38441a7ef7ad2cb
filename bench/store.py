"""Data store throughput: puts on a master, and how fast two clones catch up.

Usage: ``python bench/store.py [--puts N] [--repeat R] [--quick] [--json] [--no-debian]``

Figures (each the best of ``--repeat`` runs, as the machine is shared):

- **master alone** (memory, SQLite): ``put(key, int)`` from one thread into a
  master with no clones. *submitted/s* is the caller's rate (puts are queued and
  applied in batches of up to 1,024 on the endpoint's loop); *applied/s* counts
  until the master has applied the last one (a read after the loop, which
  drains the queue first), so it is the master's real throughput.
- **master + 2 clones, in-process**: three endpoints in this process, peered
  in memory (``core.memory_link``), the clones on the other two. All three
  loops share one interpreter (and its GIL), so this measures the total work
  per put: master, routing, two decodes and two applies.
- **master + 2 clones, 2 processes over TCP** (once ``Endpoint.listen`` works):
  each clone runs in its own Python process and peers with the master over
  loopback, as in a real deployment.
- **Debian's python3-broker** (``/usr/bin/python3``, C++ Broker with pybind11
  bindings), the same scenarios in one process, clones peered over loopback TCP.

*converged after last put* is the time from the last ``put`` call returning to
both clones answering ``get(last key)`` with its value (each clone polled every
2 ms by a watcher; updates apply in order, so the last key means all of them).
The targets: at least 100,000 memory puts/s on a master, clones converged
within 2 s of the last put.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import broker_spark as broker  # noqa: E402
from broker_spark.core import memory_link  # noqa: E402

DEBIAN_PYTHON = "/usr/bin/python3"
#: Broker 1.4's SQLite backend commits every put (a few hundred per second here).
DEBIAN_SQLITE_PUTS = 2_000
PUTS_TARGET = 100_000
CONVERGE_TARGET = 2.0


def _watch(store: Any, key: str, out: list[float], stop: threading.Event) -> threading.Thread:
    """Poll ``store.get(key)`` every 2 ms until it answers; record the time."""

    def run() -> None:
        while not stop.is_set():
            if store.get(key) is not None:
                out.append(time.perf_counter())
                return
            time.sleep(0.002)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _opts() -> broker.Configuration:
    return broker.Configuration(broker.BrokerOptions(disable_ssl=True))


def _put_loop(store: Any, n: int) -> tuple[float, float, float]:
    """(start, last put returned, last put applied) for ``n`` puts of ``k<i> -> i``."""
    put = store.put
    t0 = time.perf_counter()
    for i in range(n):
        put(f"k{i}", i)
    t1 = time.perf_counter()
    store.get(f"k{n - 1}")  # a read: the master drained and applied everything before it
    return t0, t1, time.perf_counter()


def bench_master(n: int, sqlite_dir: str | None) -> dict[str, Any]:
    with broker.Endpoint(_opts()) as ep:
        if sqlite_dir is None:
            m = ep.attach_master("bench")
        else:
            path = os.path.join(sqlite_dir, f"master-{time.monotonic_ns()}.sqlite")
            m = ep.attach_master("bench", broker.Backend.SQLite, {"path": path})
        t0, t1, t2 = _put_loop(m, n)
    return {"submitted": n / (t1 - t0), "applied": n / (t2 - t0), "converged": None}


def _with_clones(m: Any, clones: list[Any], n: int) -> dict[str, Any]:
    for c in clones:
        assert c.await_idle(10.0), "clone did not sync"
    assert m.await_idle(10.0)
    seen: list[float] = []
    stop = threading.Event()
    watchers = [_watch(c, f"k{n - 1}", seen, stop) for c in clones]
    t0, t1, t2 = _put_loop(m, n)
    for w in watchers:
        w.join(120)
    stop.set()
    if len(seen) < len(clones):
        raise RuntimeError("clones did not converge within 120 s")
    return {
        "submitted": n / (t1 - t0),
        "applied": n / (t2 - t0),
        "converged": max(seen) - t1,
    }


def bench_memory_links(n: int, sqlite_dir: str | None) -> dict[str, Any]:
    a, b, c = (broker.Endpoint(_opts()) for _ in range(3))
    try:
        if sqlite_dir is None:
            m = a.attach_master("bench")
        else:
            path = os.path.join(sqlite_dir, f"clones-{time.monotonic_ns()}.sqlite")
            m = a.attach_master("bench", broker.Backend.SQLite, {"path": path})
        memory_link.connect(a, b)
        memory_link.connect(a, c)
        return _with_clones(m, [b.attach_clone("bench"), c.attach_clone("bench")], n)
    finally:
        for ep in (a, b, c):
            ep.shutdown()


_CLONE_PROCESS = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, sys.argv[1])
    import broker_spark as broker
    port, last = int(sys.argv[2]), sys.argv[3]
    ep = broker.Endpoint(broker.Configuration(broker.BrokerOptions(disable_ssl=True)))
    c = ep.attach_clone("bench")
    assert ep.peer("127.0.0.1", port, 1.0)
    assert c.await_idle(20.0)
    print("ready", flush=True)
    while c.get(last) is None:
        time.sleep(0.002)
    print(time.time(), flush=True)
    ep.shutdown()
    """
)


def tcp_available() -> bool:
    with broker.Endpoint(_opts()) as ep:
        try:
            return ep.listen("127.0.0.1", 0) > 0
        except NotImplementedError:
            return False


def bench_tcp_processes(n: int) -> dict[str, Any]:
    root = str(Path(__file__).resolve().parent.parent)
    with broker.Endpoint(_opts()) as a:
        m = a.attach_master("bench")
        port = a.listen("127.0.0.1", 0)
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _CLONE_PROCESS, root, str(port), f"k{n - 1}"],
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        try:
            for p in procs:
                assert p.stdout is not None and p.stdout.readline().strip() == "ready"
            assert m.await_idle(10.0)
            wall0, t0 = time.time(), time.perf_counter()
            _, t1, t2 = _put_loop(m, n)
            last_put_wall = wall0 + (t1 - t0)
            seen = []
            for p in procs:
                out, _ = p.communicate(timeout=120)
                seen.append(float(out.split()[-1]))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    return {
        "submitted": n / (t1 - t0),
        "applied": n / (t2 - t0),
        "converged": max(seen) - last_put_wall,
    }


_DEBIAN_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, threading, time
    import broker
    n_memory, n_sqlite, tmp = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

    def put_loop(store, n):
        t0 = time.perf_counter()
        for i in range(n):
            store.put("k%d" % i, i)
        t1 = time.perf_counter()
        store.get("k%d" % (n - 1))
        return t0, t1, time.perf_counter()

    def master(ep, backend, tag):
        if backend == "sqlite":
            path = os.path.join(tmp, "debian-%s-%d.sqlite" % (tag, time.monotonic_ns()))
            return ep.attach_master("bench", broker.Backend.SQLite, {"path": path})
        return ep.attach_master("bench", broker.Backend.Memory, {})

    out = {}
    for backend in ("memory", "sqlite"):
        n = n_memory if backend == "memory" else n_sqlite
        ep = broker.Endpoint()
        t0, t1, t2 = put_loop(master(ep, backend, "alone"), n)
        out["alone-" + backend] = {"submitted": n / (t1 - t0), "applied": n / (t2 - t0),
                                   "converged": None, "puts": n}
        ep.shutdown()
        a, b, c = broker.Endpoint(), broker.Endpoint(), broker.Endpoint()
        m = master(a, backend, "clones")
        port = a.listen("127.0.0.1", 0)
        assert b.peer("127.0.0.1", port, 1) and c.peer("127.0.0.1", port, 1)
        clones = [b.attach_clone("bench"), c.attach_clone("bench")]
        m.put("warm", 1)
        for cl in clones:
            while cl.get("warm") is None:
                time.sleep(0.002)
        seen = []
        def watch(cl):
            while cl.get("k%d" % (n - 1)) is None:
                time.sleep(0.002)
            seen.append(time.perf_counter())
        ws = [threading.Thread(target=watch, args=(cl,), daemon=True) for cl in clones]
        for w in ws:
            w.start()
        t0, t1, t2 = put_loop(m, n)
        for w in ws:
            w.join(120)
        out["clones-" + backend] = {"submitted": n / (t1 - t0), "applied": n / (t2 - t0),
                                    "converged": (max(seen) - t1) if len(seen) == 2 else None,
                                    "puts": n}
        for ep in (c, b, a):  # Broker 1.4 can hang when the master's endpoint goes first
            ep.shutdown()
    out["version"] = broker.Version.string()
    print(json.dumps(out))
    """
)


def debian_available() -> bool:
    if not os.path.exists(DEBIAN_PYTHON):
        return False
    probe = subprocess.run(
        [DEBIAN_PYTHON, "-c", "import broker"], capture_output=True, timeout=60, check=False
    )
    return probe.returncode == 0


def bench_debian(n: int, n_sqlite: int, tmp: str) -> dict[str, Any]:
    proc = subprocess.run(
        [DEBIAN_PYTHON, "-c", _DEBIAN_SCRIPT, str(n), str(n_sqlite), tmp],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"python3-broker run failed: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    best = max(runs, key=lambda r: r["applied"])
    converged = [r["converged"] for r in runs if r["converged"] is not None]
    return {**best, "converged": min(converged) if converged else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puts", type=int, default=100_000, help="puts per run")
    parser.add_argument("--repeat", type=int, default=2, help="runs per figure (best is kept)")
    parser.add_argument("--quick", action="store_true", help="20,000 puts, one run each")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--no-debian", action="store_true", help="skip python3-broker")
    args = parser.parse_args(argv)
    n, repeat = args.puts, args.repeat
    if args.quick:
        n, repeat = min(n, 20_000), 1

    rows: list[dict[str, Any]] = []
    tmp = tempfile.mkdtemp(prefix="bench-store-")

    def add(impl: str, scenario: str, backend: str, result: dict[str, Any]) -> None:
        applied, conv = result["applied"], result["converged"]
        puts = result.get("puts", n)
        met: bool | None = None
        if backend == "memory" and impl == "broker_spark" and scenario == "master alone":
            met = applied >= PUTS_TARGET
        elif impl == "broker_spark" and conv is not None:
            met = conv <= CONVERGE_TARGET
        rows.append(
            {
                "implementation": impl,
                "scenario": scenario,
                "backend": backend,
                "puts": puts,
                "submitted_per_s": round(result["submitted"]),
                "applied_per_s": round(applied),
                "converged_after_last_put_s": None if conv is None else round(conv, 3),
                "meets_target": met,
            }
        )

    try:
        for backend, directory in (("memory", None), ("sqlite", tmp)):
            runs = [bench_master(n, directory) for _ in range(repeat)]
            add("broker_spark", "master alone", backend, _best(runs))
            runs = [bench_memory_links(n, directory) for _ in range(repeat)]
            add("broker_spark", "master + 2 clones, in-process", backend, _best(runs))
        if tcp_available():
            runs = [bench_tcp_processes(n) for _ in range(repeat)]
            add("broker_spark", "master + 2 clones, 2 processes over TCP", "memory", _best(runs))
        debian_version = None
        if not args.no_debian and debian_available():
            result = bench_debian(n, min(n, DEBIAN_SQLITE_PUTS), tmp)
            debian_version = result.pop("version")
            impl = f"python3-broker {debian_version}"
            for key, res in result.items():
                scenario, backend = key.split("-")
                name = "master alone" if scenario == "alone" else "master + 2 clones, TCP"
                add(impl, name, backend, res)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    if args.json:
        print(json.dumps({"puts": n, "repeat": repeat, "rows": rows}, indent=2))
        return 0
    print(f"puts of (string key, integer value); best of {repeat} for broker_spark\n")
    print(
        "| implementation | scenario | backend | puts | submitted/s | applied/s "
        "| clones converged after last put | target |"
    )
    print("|---|---|---|---:|---:|---:|---:|---|")
    for r in rows:
        conv = r["converged_after_last_put_s"]
        target = {True: "met", False: "missed", None: ""}[r["meets_target"]]
        print(
            f"| {r['implementation']} | {r['scenario']} | {r['backend']} | {r['puts']:,} "
            f"| {r['submitted_per_s']:,} | {r['applied_per_s']:,} "
            f"| {'' if conv is None else f'{conv:.3f} s'} | {target} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
