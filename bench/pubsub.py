"""Publish/subscribe between processes over loopback: throughput, latency, and references.

Usage: ``python bench/pubsub.py [--quick] [--json] [--no-broker14] [--rows ROWS]
[--transport plain,tls] [--repeat N] [--rate R] [--profile DIR]``

``--rows`` picks rows (``baseline,loops,publish,batch,latency,chain,broker14``),
``--transport`` the broker_spark transports, ``--repeat`` the runs per row (the
best is kept and every run's figure printed, the machine being shared).
``--profile DIR`` writes a cProfile file per worker thread (the caller's and
the endpoint loop's) for every broker_spark process. Each throughput row also
reports the CPU time per message of the publisher and subscriber processes,
which varies less with other load on the machine than the rate does.

Rows (each a fresh set of processes; figures are messages per second unless
the column says otherwise):

- ``baseline``: a bare pure-Python loop, no endpoint: one process frames small
  bodies (4-byte length + 40 bytes) in batches of 1,000 and writes them to a
  loopback socket, another reads and cuts them apart. What plain Python can
  move between two processes: the ceiling for the rows below.
- ``loops``: the three ways programs read, with default arguments everywhere
  (``make_subscriber(topic)``: its default queue), 200,000 messages each
  published with one ``publish`` call, TLS off: ``poll()`` sleeping 0.5 ms
  when empty, ``get(1.0)`` one at a time, ``get(1000, 1.0)``; the same
  through Broker 1.4 when installed (ratios printed), then broker_spark
  again with ``qsize=2000``, labelled as tuned.
- ``publish``: a publisher endpoint calls ``publish`` once per message, a
  subscriber endpoint in another process reads with ``get(1000, 1.0)``
  (default queue).
- ``publish_batch``: the same with ``publish_batch`` of 1,000 messages per call.
- ``latency``: about 10,000 messages per second for 5 s (2 s with
  ``--quick``), each carrying its send time, read one at a time with
  ``get(timeout)``; median, p99 and p99.9 of receive minus send time, the
  first half second (``--warmup``) left out. Next to it, ``latency baseline``
  sends the same paced stream over a bare socket between two processes: the
  tail the machine itself adds at that moment.
- ``chain of 3``: publisher -> middle (subscribes to nothing) -> subscriber,
  each in its own process, ``publish_batch`` of 1,000.
- ``broker 1.4``: the ``publish`` and ``publish_batch`` rows through Debian's
  ``python3-broker`` (Broker 1.4's Python bindings, run by ``/usr/bin/python3``)
  when installed, with the ratio broker_spark / Broker 1.4 printed.

broker_spark rows run with TLS off and on (anonymous TLS, the default).
Messages are small: the count ``i`` on topic ``/bench/data``. The clock runs
from the publisher's first call to the subscriber's last message, both read
from the wall clock of the same machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "/bench/data"
SYSTEM_PYTHON = "/usr/bin/python3"

# -- workers (run in child processes; they import the implementation they measure) ----


def _emit(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _wait_stdin(word: str) -> None:
    for line in sys.stdin:
        if line.strip() == word:
            return


def _endpoint(impl: str, tls: bool) -> tuple[Any, Any]:
    if impl == "broker14":
        import broker  # Debian's python3-broker
    else:
        sys.path.insert(0, str(ROOT))
        import broker_spark as broker  # type: ignore[no-redef]
    opts = broker.BrokerOptions()
    opts.disable_ssl = not tls
    return broker, broker.Endpoint(broker.Configuration(opts))


class Profiler:
    """``--profile DIR``: cProfile of the worker's own thread and of its endpoint's loop.

    cProfile follows one thread; an endpoint does its work in two (the
    caller's, which encodes or decodes, and the loop's, which routes and does
    the I/O), so each gets a profiler and a file ``DIR/<role>-<mode>-<thread>.prof``.
    """

    def __init__(self, args: argparse.Namespace, ep: Any) -> None:
        import cProfile

        self.args = args
        self.ep = ep
        self.main = cProfile.Profile()
        self.loop = cProfile.Profile()
        self.loop_thread = getattr(ep, "_loop", None)
        if self.loop_thread is not None:
            self.loop_thread.run_sync(self.loop.enable)
        self.main.enable()

    def dump(self) -> None:
        self.main.disable()
        if self.loop_thread is not None:
            self.loop_thread.run_sync(self.loop.disable)
        out = Path(self.args.profile)
        out.mkdir(parents=True, exist_ok=True)
        name = f"{self.args.worker}-{self.args.mode}{'-tls' if self.args.tls else ''}"
        self.main.dump_stats(str(out / f"{name}-caller.prof"))
        if self.loop_thread is not None:
            self.loop.dump_stats(str(out / f"{name}-loop.prof"))


def _profiler(args: argparse.Namespace, ep: Any) -> Profiler | None:
    return Profiler(args, ep) if args.profile and args.impl != "broker14" else None


def _wait_subscribed(ep: Any, timeout: float = 20.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(TOPIC.startswith(str(t)) for t in ep.peer_subscriptions()):
            return
        time.sleep(0.01)
    raise SystemExit("subscription never arrived")


def worker_sub(args: argparse.Namespace) -> None:
    broker, ep = _endpoint(args.impl, args.tls)
    # Default arguments unless a tuned queue size is asked for.
    sub = ep.make_subscriber(TOPIC, args.qsize) if args.qsize else ep.make_subscriber(TOPIC)
    _emit(port=ep.listen("127.0.0.1", 0))
    prof = _profiler(args, ep)
    cpu0 = time.process_time()
    n, got = args.n, 0
    lat: list[int] = []
    if args.mode == "latency":
        # One at a time: get(n, timeout) would wait for n messages (Broker's semantics).
        while got < n:
            item = sub.get(1.0)
            if item is not None:
                now = time.time_ns()
                lat.append(now - item[1])
                got += 1
    if args.loop == "poll":  # what an event loop's reader does: poll, nap when empty
        while got < n:
            items = sub.poll()
            if items:
                got += len(items)
            else:
                time.sleep(0.0005)
    elif args.loop == "get1":
        while got < n:
            if sub.get(1.0) is not None:
                got += 1
    while got < n:
        items = sub.get(1000, 1.0)
        got += len(items)
    done = time.time()
    if prof is not None:
        prof.dump()
    cpu = time.process_time() - cpu0
    _emit(done=done, count=got, cpu=cpu, lat=_summary(lat[max(args.warmup, 0) :]))
    _wait_stdin("exit")
    ep.shutdown()


def worker_mid(args: argparse.Namespace) -> None:
    broker, ep = _endpoint(args.impl, args.tls)
    port = ep.listen("127.0.0.1", 0)
    if not ep.peer("127.0.0.1", args.port, 0):
        raise SystemExit("middle could not peer")
    prof = _profiler(args, ep)
    _emit(port=port)
    _wait_stdin("exit")
    if prof is not None:
        prof.dump()
    ep.shutdown()


def worker_pub(args: argparse.Namespace) -> None:
    broker, ep = _endpoint(args.impl, args.tls)
    if not ep.peer("127.0.0.1", args.port, 0):
        raise SystemExit("publisher could not peer")
    _wait_subscribed(ep)
    time.sleep(0.2)  # let every hop of a chain learn the subscription too
    prof = _profiler(args, ep)
    _emit(ready=True)
    _wait_stdin("go")
    n = args.n
    start = time.time()
    cpu0 = time.process_time()
    if args.mode == "publish":
        publish = ep.publish
        for i in range(n):
            publish(TOPIC, i)
    elif args.mode == "batch":
        for base in range(0, n, 1000):
            ep.publish_batch(*((TOPIC, i) for i in range(base, min(n, base + 1000))))
    else:  # latency: ``rate`` messages per second, each sent when due
        # Sleep between sends (never spin: a spinning publisher would hold the
        # GIL and starve the endpoint's own thread). Each message is stamped
        # just before its publish call, so a late wake-up here is not counted
        # as latency; it only bunches the next few sends.
        t0 = time.perf_counter()
        publish = ep.publish
        i = 0
        while i < n:
            due = min(n, int((time.perf_counter() - t0) * args.rate) + 1)
            while i < due:
                publish(TOPIC, time.time_ns())
                i += 1
            time.sleep(0.0002)
    end = time.time()
    # The endpoint may still be sending: wait for the subscriber's count before the CPU time.
    _wait_stdin("cpu")
    _emit(start=start, end=end, cpu=time.process_time() - cpu0)
    _wait_stdin("exit")
    if prof is not None:
        prof.dump()
    ep.shutdown()


def _summary(lat: list[int]) -> dict[str, float] | None:
    """Median, p90, p99, p99.9 and max of latencies in ns, in milliseconds."""
    if not lat:
        return None
    lat.sort()
    n = len(lat)

    def pct(q: float) -> float:
        return lat[min(n - 1, int(n * q))] / 1e6

    return {
        "samples": n,
        "median_ms": statistics.median(lat) / 1e6,
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
        "p999_ms": pct(0.999),
        "max_ms": lat[-1] / 1e6,
    }


BODY = b"\x00" * 40


def worker_base_recv(args: argparse.Namespace) -> None:
    srv = socket.create_server(("127.0.0.1", 0))
    _emit(port=srv.getsockname()[1])
    conn, _ = srv.accept()
    n, got, buf = args.n, 0, b""
    unpack = struct.Struct(">I").unpack_from
    stamp = struct.Struct(">q").unpack
    timed = args.mode == "latency"
    lat: list[int] = []
    while got < n:
        data = conn.recv(1 << 18)
        if not data:
            break
        now = time.time_ns()
        buf = buf + data if buf else data
        pos, end = 0, len(buf)
        while end - pos >= 4:
            (size,) = unpack(buf, pos)
            if end - pos - 4 < size:
                break
            body = buf[pos + 4 : pos + 4 + size]
            got += 1 if body else 0
            if timed:
                lat.append(now - stamp(body[:8])[0])
            pos += 4 + size
        buf = buf[pos:]
    summary = _summary(lat[max(args.warmup, 0) :]) if timed else None
    _emit(done=time.time(), count=got, lat=summary)
    conn.close()
    srv.close()


def worker_base_send(args: argparse.Namespace) -> None:
    sock = socket.create_connection(("127.0.0.1", args.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    _emit(ready=True)
    _wait_stdin("go")
    pack = struct.Struct(">I").pack
    start = time.time()
    n = args.n
    if args.mode == "latency":
        # The same pacing as the endpoint's latency row, one frame per message.
        stamp = struct.Struct(">Iq").pack
        t0 = time.perf_counter()
        i = 0
        while i < n:
            due = min(n, int((time.perf_counter() - t0) * args.rate) + 1)
            while i < due:
                sock.sendall(stamp(8, time.time_ns()))
                i += 1
            time.sleep(0.0002)
        _emit(start=start, end=time.time())
        _wait_stdin("exit")
        sock.close()
        return
    for base in range(0, n, 1000):
        parts = []
        for _ in range(min(1000, n - base)):
            parts.append(pack(len(BODY)))
            parts.append(BODY)
        sock.sendall(b"".join(parts))
    _emit(start=start, end=time.time())
    sock.close()


WORKERS = {
    "sub": worker_sub,
    "mid": worker_mid,
    "pub": worker_pub,
    "base-recv": worker_base_recv,
    "base-send": worker_base_send,
}

# -- the coordinator ------------------------------------------------------------------------


class Child:
    def __init__(self, python: str, role: str, **opts: Any) -> None:
        cmd = [python, str(Path(__file__).resolve()), "--worker", role]
        for key, value in opts.items():
            if value is True:
                cmd.append(f"--{key}")
            elif value not in (False, None):
                cmd += [f"--{key}", str(value)]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT
        )

    def read(self, timeout: float = 120.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError("worker did not answer")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker exited with {self.proc.wait()}")
        return json.loads(line)

    def say(self, word: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(word + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass

    def stop(self) -> None:
        self.say("exit")
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()


def run(
    python: str,
    impl: str,
    mode: str,
    n: int,
    tls: bool,
    hops: int = 2,
    rate: int = 0,
    warmup: int = 0,
    profile: str | None = None,
    loop: str = "getn",
    qsize: int = 0,
) -> dict:
    """One measurement: publisher -> (middle ->) subscriber in separate processes."""
    opts = {
        "impl": impl,
        "n": n,
        "mode": mode,
        "tls": tls,
        "rate": rate,
        "warmup": warmup,
        "profile": profile,
        "loop": loop,
        "qsize": qsize,
    }
    children: list[Child] = []
    try:
        sub = Child(python, "sub", **opts)
        children.append(sub)
        port = sub.read()["port"]
        for _ in range(hops - 2):
            mid = Child(python, "mid", port=port, **opts)
            children.append(mid)
            port = mid.read()["port"]
        pub = Child(python, "pub", port=port, **opts)
        children.append(pub)
        pub.read()  # ready
        pub.say("go")
        done = sub.read()
        pub.say("cpu")
        started = pub.read()
        pub_cpu = started["cpu"]
        elapsed = done["done"] - started["start"]
        count = max(done["count"], 1)
        return {
            "rate": done["count"] / elapsed,
            "seconds": elapsed,
            "latency": done["lat"],
            # CPU time per message in each end process (both threads), in microseconds.
            "cpu_us": {"pub": pub_cpu / count * 1e6, "sub": done["cpu"] / count * 1e6},
        }
    finally:
        for child in reversed(children):
            child.stop()


def run_baseline(n: int, mode: str = "batch", rate: int = 0, warmup: int = 0) -> dict:
    opts = {"n": n, "mode": mode, "rate": rate, "warmup": warmup}
    recv = Child(sys.executable, "base-recv", **opts)
    send = None
    try:
        port = recv.read()["port"]
        send = Child(sys.executable, "base-send", port=port, **opts)
        send.read()
        send.say("go")
        started = send.read()
        done = recv.read()
        elapsed = done["done"] - started["start"]
        return {"rate": done["count"] / elapsed, "seconds": elapsed, "latency": done["lat"]}
    finally:
        for child in (send, recv):
            if child is not None:
                child.stop()


def broker14_available() -> bool:
    if not shutil.which(SYSTEM_PYTHON):
        return False
    probe = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import broker"], capture_output=True, cwd="/", check=False
    )
    return probe.returncode == 0


def best(repeat: int, fn: Any, *args: Any, **kwargs: Any) -> dict:
    """The best of ``repeat`` runs (the machine is shared; the best is the least disturbed).

    The rate of every run is kept in ``runs`` so the spread can be reported too.
    """
    results = [fn(*args, **kwargs) for _ in range(repeat)]
    top = dict(max(results, key=lambda r: r["rate"]))
    top["runs"] = [r["rate"] for r in results]
    return top


def best_latency(repeat: int, fn: Any, *args: Any, **kwargs: Any) -> dict:
    """The run with the lowest p99 of ``repeat`` latency runs (every p99 kept in ``runs``)."""
    results = [fn(*args, **kwargs) for _ in range(repeat)]
    top = dict(min(results, key=lambda r: (r["latency"] or {}).get("p99_ms", 1e9)))
    top["runs"] = [(r["latency"] or {}).get("p99_ms") for r in results]
    return top


ROWS = ("baseline", "loops", "publish", "batch", "latency", "chain", "broker14")

#: The consumer loops of the ``loops`` rows: worker ``--loop`` value and label.
LOOPS = (
    ("poll", "poll(), 0.5 ms nap when empty"),
    ("get1", "get(1.0), one at a time"),
    ("getn", "get(1000, 1.0)"),
)
TUNED_QSIZE = 2000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", choices=sorted(WORKERS))
    parser.add_argument("--impl", default="spark")
    parser.add_argument("--mode", default="publish")
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--n", type=int, default=0)
    parser.add_argument("--rate", type=int, default=10_000, help="latency rows: messages/s")
    parser.add_argument("--warmup", type=int, default=-1, help="latency samples dropped first")
    parser.add_argument("--quick", action="store_true", help="fewer messages, one run each")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--no-broker14", action="store_true", help="skip python3-broker")
    parser.add_argument(
        "--rows", default=",".join(ROWS), help=f"comma-separated subset of {','.join(ROWS)}"
    )
    parser.add_argument(
        "--transport", default="plain,tls", help="broker_spark rows over: plain, tls or both"
    )
    parser.add_argument("--repeat", type=int, default=0, help="runs per row (best is kept)")
    parser.add_argument("--profile", help="directory for cProfile files of every worker thread")
    parser.add_argument("--loop", default="getn", help=argparse.SUPPRESS)  # worker option
    parser.add_argument("--qsize", type=int, default=0, help=argparse.SUPPRESS)  # worker option
    args = parser.parse_args()
    if args.worker:
        WORKERS[args.worker](args)
        return

    quick = args.quick
    wanted = set(args.rows.split(","))
    unknown = wanted - set(ROWS)
    if unknown:
        parser.error(f"unknown rows: {', '.join(sorted(unknown))}")
    transports = [t == "tls" for t in args.transport.split(",")]
    n_pub = 50_000 if quick else 200_000
    n_batch = 200_000 if quick else 1_000_000
    n_lat = args.rate * (2 if quick else 5)  # seconds of traffic at the latency rate
    warmup = args.rate // 2 if args.warmup < 0 else args.warmup  # the first half second
    repeat = args.repeat or (1 if quick else 2)
    prof = args.profile
    py = sys.executable
    rows: list[dict[str, Any]] = []

    def add(name: str, result: dict, **extra: Any) -> None:
        row = {"row": name, **result, **extra}
        rows.append(row)
        if not args.json:
            lat = result.get("latency")
            tail = f", p50 {lat['median_ms']:.3f} ms, p99 {lat['p99_ms']:.3f} ms" if lat else ""
            cpu = result.get("cpu_us")
            if cpu:
                tail += f" (CPU/msg: pub {cpu['pub']:.2f} us, sub {cpu['sub']:.2f} us)"
            print(f"  measured {name}: {result['rate']:,.0f}/s{tail}", file=sys.stderr)

    if "baseline" in wanted:
        add("baseline: bare framing loop, 2 processes", best(repeat, run_baseline, n_batch * 2))
    if "loops" in wanted:
        with14 = not args.no_broker14 and broker14_available()
        for loop, label in LOOPS:
            add(
                f"loop {label}: defaults (plain)",
                best(repeat, run, py, "spark", "publish", n_pub, False, loop=loop),
            )
            if with14:
                add(
                    f"Broker 1.4: loop {label}: defaults (plain)",
                    best(
                        repeat, run, SYSTEM_PYTHON, "broker14", "publish", n_pub, False, loop=loop
                    ),
                )
        for loop, label in LOOPS:
            add(
                f"loop {label}: tuned, qsize={TUNED_QSIZE} (plain)",
                best(
                    repeat, run, py, "spark", "publish", n_pub, False, loop=loop, qsize=TUNED_QSIZE
                ),
            )
    for tls in transports:
        t = "TLS" if tls else "plain"
        if "publish" in wanted:
            add(
                f"publish, 1 call per message ({t})",
                best(repeat, run, py, "spark", "publish", n_pub, tls, profile=prof),
            )
        if "batch" in wanted:
            add(
                f"publish_batch of 1,000 ({t})",
                best(repeat, run, py, "spark", "batch", n_batch, tls, profile=prof),
            )
        if "latency" in wanted:
            if not tls:
                # The machine's own floor at this moment: the same pacing over a bare socket.
                add(
                    f"latency baseline: bare socket at {args.rate:,} msg/s",
                    best_latency(
                        repeat, run_baseline, n_lat, "latency", rate=args.rate, warmup=warmup
                    ),
                )
            lat = best_latency(
                repeat,
                run,
                py,
                "spark",
                "latency",
                n_lat,
                tls,
                rate=args.rate,
                warmup=warmup,
                profile=prof,
            )
            add(f"latency at {args.rate:,} msg/s ({t})", lat)
    if "chain" in wanted:
        add(
            "chain of 3 processes, publish_batch (plain)",
            best(repeat, run, py, "spark", "batch", n_batch, False, hops=3, profile=prof),
        )
    if "broker14" in wanted and not args.no_broker14 and broker14_available():
        add(
            "Broker 1.4: publish, 1 call per message (plain)",
            best(repeat, run, SYSTEM_PYTHON, "broker14", "publish", n_pub // 2, False),
        )
        add(
            "Broker 1.4: publish_batch of 1,000 (plain)",
            best(repeat, run, SYSTEM_PYTHON, "broker14", "batch", n_pub, False),
        )
    report(rows, args.json)


def report(rows: list[dict[str, Any]], as_json: bool) -> None:
    by = {r["row"]: r for r in rows}
    ratios = {}
    for kind in ("publish, 1 call per message", "publish_batch of 1,000"):
        ours = by.get(f"{kind} (plain)")
        theirs = by.get(f"Broker 1.4: {kind} (plain)")
        if ours and theirs:
            ratios[kind] = ours["rate"] / theirs["rate"]
    for _, label in LOOPS:
        ours = by.get(f"loop {label}: defaults (plain)")
        theirs = by.get(f"Broker 1.4: loop {label}: defaults (plain)")
        if ours and theirs:
            ratios[f"loop {label}, defaults"] = ours["rate"] / theirs["rate"]
    tls_cost = {}
    for kind in ("publish, 1 call per message", "publish_batch of 1,000"):
        plain, tls = by.get(f"{kind} (plain)"), by.get(f"{kind} (TLS)")
        if plain and tls:
            tls_cost[kind] = 1 - tls["rate"] / plain["rate"]
    base = by.get("baseline: bare framing loop, 2 processes")
    of_base = {}
    if base:
        for r in rows:
            if r is not base and not (r.get("latency")):
                of_base[r["row"]] = r["rate"] / base["rate"]
    if as_json:
        print(
            json.dumps(
                {
                    "rows": rows,
                    "ratio_vs_broker14": ratios,
                    "tls_cost": tls_cost,
                    "fraction_of_baseline": of_base,
                },
                indent=2,
            )
        )
        return
    print("| row | messages/s | runs | median latency | p99 latency | p99.9 latency |")
    print("|---|---:|---|---:|---:|---:|")
    for r in rows:
        lat = r.get("latency") or {}
        med = f"{lat['median_ms']:.3f} ms" if lat else ""
        p99 = f"{lat['p99_ms']:.3f} ms" if lat else ""
        p999 = f"{lat['p999_ms']:.3f} ms" if lat else ""
        if lat:
            runs = ", ".join(f"p99 {x:.2f}" for x in r.get("runs", []) if x is not None)
        else:
            runs = ", ".join(f"{x / 1000:,.0f}k" for x in r.get("runs", []))
        print(f"| {r['row']} | {r['rate']:,.0f} | {runs} | {med} | {p99} | {p999} |")
    for kind, ratio in ratios.items():
        print(f"\nbroker_spark / Broker 1.4, {kind}: {ratio:.1f}x")
    for kind, cost in tls_cost.items():
        print(f"TLS cost, {kind}: {cost:.0%}")
    for name, frac in of_base.items():
        print(f"{name}: {frac:.0%} of the bare framing loop")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
