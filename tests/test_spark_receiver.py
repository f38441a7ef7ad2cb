"""The receiver process of a ``spoolPath``: it outlives the reader, and the next one finds it.

The reader's driver side is called directly as Spark would (no SparkSession);
the receiver is a real process of its own session, peering over TCP with a
hub endpoint in the test process. Every test stops the receivers it started.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import spark_fixtures
from spark_fixtures import wait_for
from test_cli_support import run_command

import broker_spark as broker
from broker_spark import zeek
from broker_spark.columnar.record_batches import default_schema
from broker_spark.errors import BrokerError
from broker_spark.reader.options import parse_reader_options
from broker_spark.reader.receiver import IdleTimer, identity_of, identity_problem
from broker_spark.reader.receiver_attach import ReceiverError, read_info, stop_receiver
from broker_spark.spark.compat import ReadAllAvailable
from broker_spark.spark.read.stream import StreamReader, stream_reader
from broker_spark.spool.spool import Spool

hub = spark_fixtures.hub

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def spool(tmp_path: Path) -> Iterator[str]:
    path = str(tmp_path / "spool")
    yield path
    stop_receiver(path) if os.path.isdir(path) else None


def _options(hub: broker.Endpoint, spool: str, **extra: str) -> dict[str, str]:
    return {
        "topics": "zeek/",
        "peer": f"127.0.0.1:{hub.hub_port}",
        "ssl.disable": "true",
        "spoolPath": spool,
        **extra,
    }


def _reader(hub: broker.Endpoint, spool: str, **extra: str) -> StreamReader:
    opts = parse_reader_options(_options(hub, spool, **extra))
    return stream_reader(opts, default_schema(opts.format))


def _publish(hub: broker.Endpoint, first: int, count: int) -> None:
    hub.publish_batch(
        *[
            (f"zeek/events/{i}", zeek.Event("ping", broker.Count(i)))
            for i in range(first, first + count)
        ]
    )


def _held(spool: str) -> int:
    with Spool(spool, readonly=True) as view:
        return view.end_offset()


def _wait_held(spool: str, count: int) -> None:
    wait_for(lambda: _held(spool) >= count, 20, f"{count} messages in the spool")


def _rows(reader: StreamReader, start: int, end: int) -> list[int]:
    """The events' numbers in offsets [start, end), read as executors would."""
    import pickle

    remote = pickle.loads(pickle.dumps(reader))
    numbers = []
    for part in reader.partitions({"offset": start}, {"offset": end}):
        for batch in remote.read(pickle.loads(pickle.dumps(part))):
            for data in batch.column("data").to_pylist():
                numbers.append(json.loads(data)["data"][2]["data"][1]["data"][0]["data"])
    return numbers


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_the_receiver_outlives_the_reader_and_keeps_receiving(
    hub: broker.Endpoint, spool: str
) -> None:
    first = _reader(hub, spool)
    try:
        assert first.initialOffset() == {"offset": 0}
        wait_for(lambda: hub.peer_subscriptions(), 20, "the receiver's subscription")
        _publish(hub, 0, 100)
        _wait_held(spool, 100)
        assert first.latestOffset({"offset": 0}, ReadAllAvailable()) == {"offset": 100}
        assert _rows(first, 0, 100) == list(range(100))
        first.commit({"offset": 100})
    finally:
        first.stop()
    info = read_info(spool)
    assert info is not None and _alive(info["pid"])
    # No query runs: the receiver is still peered and still appends.
    _publish(hub, 100, 50)
    _wait_held(spool, 150)
    # The next run of the query finds the same receiver and misses nothing.
    second = _reader(hub, spool)
    try:
        assert second.latestOffset({"offset": 100}, ReadAllAvailable()) == {"offset": 150}
        assert _rows(second, 100, 150) == list(range(100, 150))
        assert read_info(spool)["pid"] == info["pid"]
    finally:
        second.stop()
    assert stop_receiver(spool) == info["pid"]
    assert not _alive(info["pid"])
    assert read_info(spool) is None  # receiver.json goes with it


def test_a_reader_with_other_options_is_refused_naming_them(
    hub: broker.Endpoint, spool: str
) -> None:
    first = _reader(hub, spool)
    try:
        first.initialOffset()
        other = _reader(hub, spool, topics="zeek/logs/", **{"spool.retentionBytes": "1g"})
        with pytest.raises(
            ReceiverError, match=r"topics: receiver 'zeek/', this query 'zeek/logs/'"
        ):
            other.initialOffset()
        other.stop()
    finally:
        first.stop()


def test_identity_names_every_difference_and_hides_passphrases() -> None:
    a = identity_of(parse_reader_options({"topics": "a", "peer": "h:1"}), logs=False)
    other = parse_reader_options({"topics": "a", "peer": "h:2", "format": "zeek-logs"})
    secret = replace(other.connection.ssl, passphrase="hunter2")
    b = identity_of(replace(other, connection=replace(other.connection, ssl=secret)), logs=True)
    problem = identity_problem(a, b)
    assert problem is not None
    assert "peer: receiver 'h:1', this query 'h:2'" in problem
    assert "format: receiver 'messages', this query 'zeek-logs'" in problem
    assert (
        "hunter2" not in problem
        and "ssl.passphrase: receiver (none), this query (other secrets)" in problem
    )
    assert identity_problem(a, dict(a)) is None


def test_a_killed_receiver_is_started_again_from_its_spool(
    hub: broker.Endpoint, spool: str
) -> None:
    reader = _reader(hub, spool)
    try:
        reader.initialOffset()
        wait_for(lambda: hub.peer_subscriptions(), 20, "the receiver's subscription")
        _publish(hub, 0, 40)
        _wait_held(spool, 40)
        pid = read_info(spool)["pid"]
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not _alive(pid), 10, "the receiver to die")
        # A torn record at the end of the active segment, as a kill mid-append leaves it.
        logs = sorted(n for n in os.listdir(spool) if n.endswith(".log") and n[0].isdigit())
        with open(os.path.join(spool, logs[-1]), "ab") as f:
            f.write(b"\x95\xa6zeek/e")
        # The reader's next call finds it gone and starts another, which cuts the tail.
        assert reader.latestOffset({"offset": 0}, ReadAllAvailable()) == {"offset": 40}
        assert read_info(spool)["pid"] != pid
        wait_for(lambda: hub.peer_subscriptions(), 20, "the new receiver's subscription")
        _publish(hub, 40, 10)
        _wait_held(spool, 50)
        assert _rows(reader, 0, 50) == list(range(50))
    finally:
        reader.stop()


def test_one_spool_has_one_owner(hub: broker.Endpoint, spool: str) -> None:
    reader = _reader(hub, spool)
    try:
        reader.initialOffset()
        request = {"options": _options(hub, spool), "logs": False}
        second = subprocess.run(
            [sys.executable, "-m", "broker_spark.reader.receiver", spool],
            input=json.dumps(request) + "\n",
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 3
        answer = json.loads(second.stdout.splitlines()[0])
        assert answer["busy"] and "in use by another writer" in answer["error"]
        assert _alive(read_info(spool)["pid"])  # the first one goes on
    finally:
        reader.stop()


@pytest.mark.slow  # 2.6 s of an idle timeout: make test-slow (make test stays under 5 minutes)
def test_the_receiver_stops_after_its_idle_timeout(hub: broker.Endpoint, spool: str) -> None:
    reader = _reader(hub, spool, **{"receiver.idleTimeout": "500ms"})
    reader.initialOffset()
    pid = read_info(spool)["pid"]
    time.sleep(1.0)
    assert _alive(pid)  # a reader is attached: no timeout
    reader.stop()
    wait_for(lambda: not _alive(pid), 20, "the idle receiver to stop")
    assert read_info(spool) is None


def test_idle_timer() -> None:
    timer = IdleTimer(10.0, now=0.0)
    assert not timer.expired(9.9) and timer.expired(10.0)  # nobody came
    timer.attached(1, now=5.0)
    assert not timer.expired(100.0)
    timer.attached(2, now=6.0)
    timer.attached(1, now=7.0)
    assert not timer.expired(100.0)
    timer.attached(0, now=50.0)
    assert not timer.expired(59.9) and timer.expired(60.0)


def test_a_full_disk_is_reported_to_the_reader(hub: broker.Endpoint, spool: str) -> None:
    """Fault injected, and said so: the receiver runs with a file size limit (RLIMIT_FSIZE),
    so the kernel refuses its appends past 64 KiB as a full disk would."""
    os.makedirs(spool)
    request = {"options": _options(hub, spool), "logs": False}

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))

    proc = subprocess.Popen(
        [sys.executable, "-m", "broker_spark.reader.receiver", spool],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=limited,
    )
    try:
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.close()
        assert json.loads(proc.stdout.readline())["ready"]
        reader = _reader(hub, spool)
        try:
            reader.initialOffset()
            wait_for(lambda: hub.peer_subscriptions(), 20, "the receiver's subscription")
            _publish(hub, 0, 2000)  # about 150 KiB of records

            def refused() -> bool:
                try:
                    reader.latestOffset({"offset": 0}, ReadAllAvailable())
                except BrokerError as exc:
                    assert "File too large" in str(exc)
                    return True
                return False

            wait_for(refused, 20, "the failed append to reach the reader")
        finally:
            reader.stop()
    finally:
        stop_receiver(spool)
        proc.wait(10)


def test_status_and_stop_from_the_command_line(hub: broker.Endpoint, spool: str) -> None:
    reader = _reader(hub, spool)
    try:
        reader.initialOffset()
        wait_for(lambda: hub.peer_subscriptions(), 20, "the receiver's subscription")
        _publish(hub, 0, 30)
        _wait_held(spool, 30)
        reader.latestOffset({"offset": 0}, ReadAllAvailable())
        reader.commit({"offset": 20})
        shown = run_command("status", "--spool", spool, "--json")
        assert shown.returncode == 0, shown.stderr
        status = json.loads(shown.stdout)
        assert status["owner"].startswith(f"receiver pid {read_info(spool)['pid']}")
        assert (status["start"], status["end"], status["topics"]) == (0, 30, ["zeek/"])
        assert [p["status"] for p in status["peers"]] == ["Peered"]
        [attached] = status["readers"]
        assert (attached["role"], attached["committed"]) == ("attach", 20)
        text = run_command("status", "--spool", spool).stdout
        assert "next 30 (30 records held)" in text and "attach" in text
    finally:
        reader.stop()
    stopped = run_command("receiver", "stop", spool)
    assert stopped.returncode == 0 and stopped.stdout.startswith("stopped the receiver")
    offline = json.loads(run_command("status", "--spool", spool, "--json").stdout)
    assert offline["owner"] is None and (offline["start"], offline["end"]) == (0, 30)
    assert offline["oldest_age_s"] is not None and offline["bytes"] > 0
    assert run_command("receiver", "stop", spool).stdout.strip() == "no receiver running"


def test_the_receiver_of_a_zeromq_logger_keeps_its_batches(tmp_path: Path) -> None:
    """Zeek's logger role on the ZeroMQ backend (a bound PULL) in the receiver process."""
    import zmq
    from spark_fixtures import free_port
    from zeek_recordings import ZMQ_LOGS, zmq_messages

    from broker_spark.spark.source import arrow_schema_of
    from broker_spark.spark.zeek_schema import generic_log_schema

    spool = str(tmp_path / "spool")
    where = f"tcp://127.0.0.1:{free_port()}"
    opts = parse_reader_options(
        {
            "format": "zeek-logs",
            "zeromq.logs": where,
            "spoolPath": spool,
            "startingOffsets": "earliest",
        }
    )
    schema = generic_log_schema()
    reader = stream_reader(opts, arrow_schema_of(schema), schema)
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    try:
        reader.initialOffset()
        reader.stop()  # no query runs: the receiver's PULL is still bound
        push.linger = 0
        push.connect(where)
        batches = zmq_messages(ZMQ_LOGS)
        for frames in batches:
            push.send_multipart(frames)
        _wait_held(spool, len(batches))
        again = stream_reader(opts, arrow_schema_of(schema), schema)
        try:
            end = again.latestOffset({"offset": 0}, ReadAllAvailable())
            import pickle

            remote = pickle.loads(pickle.dumps(again))
            rows = sum(
                b.num_rows
                for part in again.partitions({"offset": 0}, end)
                for b in remote.read(pickle.loads(pickle.dumps(part)))
            )
            assert end == {"offset": len(batches)} and rows > len(batches)
        finally:
            again.stop()
    finally:
        push.close(0)
        ctx.term()
        stop_receiver(spool)
