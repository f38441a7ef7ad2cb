"""No gap when a query restarts: the driver killed with SIGKILL mid-stream, started again.

A publisher sends numbered events at 2,000 a second, as a Zeek would, the
whole time. The query runs in a driver process of its own (its JVM, Python
workers and reader process in one process group), which the test kills with
SIGKILL mid-stream and starts again with the same options and checkpoint.
Every number the publisher sent must be in the sink exactly once per offset:
what arrived while no driver ran was kept by the receiver of the
``spoolPath`` (or, in the second test, by a relay), and the restarted query
caught up.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from spark_fixtures import killable_driver_env, plain_config, wait_for
from test_spark_relay import Relay

import broker_spark as broker
from broker_spark import zeek
from broker_spark.reader.receiver_attach import stop_receiver

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(300)]

DRIVER = str(Path(__file__).with_name("no_gap_driver.py"))
RATE = 2000.0


class Publisher:
    """Numbered events at ``RATE`` a second from a thread, until stopped."""

    def __init__(self, endpoint: broker.Endpoint) -> None:
        self.endpoint = endpoint
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        began = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - began) * RATE)
            if due > self.sent:
                self.endpoint.publish_batch(
                    *[
                        ("zeek/events/n", zeek.Event("n", broker.Count(i)))
                        for i in range(self.sent, due)
                    ]
                )
                self.sent = due
            time.sleep(0.01)

    def stop(self) -> int:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        return self.sent


class Driver:
    """The query's driver, a process group of its own."""

    def __init__(self, options: dict[str, str], out: Path, checkpoint: Path, log: Path) -> None:
        self.out = out
        env = killable_driver_env(checkpoint.parent)
        self._log = open(log, "ab")  # noqa: SIM115 - closed in kill()
        self.proc = subprocess.Popen(
            [sys.executable, DRIVER, json.dumps(options), str(out), str(checkpoint)],
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip() == "started", f"the driver did not start: {line!r}; see {log}"

    def batches(self) -> int:
        return sum(1 for n in os.listdir(self.out) if n.startswith("batch-"))

    def kill(self) -> None:
        """SIGKILL to the whole group: the JVM, its Python workers, the reader process."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self._log.close()


def _sink(out: Path) -> dict[int, int]:
    """The sink keyed by offset: the number at each offset (one number per offset)."""
    by_offset: dict[int, int] = {}
    for name in os.listdir(out):
        if not name.startswith("batch-"):
            continue
        with open(out / name, encoding="utf-8") as f:
            for offset, number in json.load(f):
                assert by_offset.setdefault(offset, number) == number, f"offset {offset} changed"
    return by_offset


def _killed_and_restarted(options: dict[str, str], tmp: Path, publisher: Publisher) -> None:
    """Run the query, kill its driver mid-stream, start it again, stop the publisher; then
    every number it sent must be in the sink once."""
    out, checkpoint = tmp / "out", tmp / "checkpoint"
    out.mkdir()
    first = None
    try:
        first = Driver(options, out, checkpoint, tmp / "driver-1.log")
        # from the moment someone receives (Broker drops what nobody is subscribed to)
        wait_for(publisher.endpoint.peer_subscriptions, 120, "a subscription to publish to")
        publisher.start()
        try:
            wait_for(lambda: first.batches() >= 3, 120, "the first driver's batches")
        finally:
            first.kill()
        before = first.batches()  # the sink's files so far (the second adds to the same folder)
        time.sleep(2.0)  # the publisher goes on while no driver runs: 4,000 events
        second = Driver(options, out, checkpoint, tmp / "driver-2.log")
    except BaseException:
        publisher.stop()
        if first is not None:
            first.kill()
        raise
    try:
        wait_for(lambda: second.batches() >= before + 3, 120, "the second driver's batches")
        sent = publisher.stop()
        deadline = time.monotonic() + 90
        while len(_sink(out)) < sent and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        publisher.stop()
        second.kill()
    numbers = sorted(_sink(out).values())
    assert len(numbers) == len(set(numbers)), "a message doubled"
    missing = sorted(set(range(sent)) - set(numbers))
    assert not missing, f"{len(missing)} of {sent} lost, from {missing[0]}"
    assert numbers == list(range(sent))


@pytest.fixture
def hub() -> Iterator[broker.Endpoint]:
    endpoint = broker.Endpoint(plain_config())
    endpoint.hub_port = endpoint.listen("127.0.0.1", 0)  # type: ignore[attr-defined]
    try:
        yield endpoint
    finally:
        endpoint.shutdown()


def test_a_killed_driver_loses_nothing_with_a_spool_path(
    hub: broker.Endpoint, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    options = {
        "topics": "zeek/events/",
        "peer": f"127.0.0.1:{hub.hub_port}",
        "ssl.disable": "true",
        "spoolPath": str(spool),
        "startingOffsets": "earliest",
    }
    try:
        _killed_and_restarted(options, tmp_path, Publisher(hub))
    finally:
        stop_receiver(str(spool))


def test_a_killed_driver_loses_nothing_through_a_relay(tmp_path: Path) -> None:
    relay = Relay(tmp_path / "relay")
    try:
        options = {
            "topics": "zeek/events/",
            "relay": f"127.0.0.1:{relay.port}",
            "ssl.disable": "true",
            "startingOffsets": "earliest",
        }
        _killed_and_restarted(options, tmp_path, Publisher(relay.publisher))
    finally:
        relay.close()
