"""One local SparkSession for the whole test run, and helpers for the Spark tests.

Import the fixtures into a test module (``from spark_fixtures import spark``);
the session is created once, whichever module asks first, and stopped at the
end of the run. Spark's Python workers run this interpreter, and find
``pyspark_broker`` (so ``format("broker")`` needs no register call) through
``PYTHONPATH``, which gets the project root.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ports import free_port  # noqa: F401 - where the tests have taken it from

import broker_spark as broker
from broker_spark.config import BrokerOptions, Configuration
from broker_spark.errors import SC

ROOT = str(Path(__file__).resolve().parent.parent)

_session: Any = None
# Where the session's catalog keeps managed tables and databases without a LOCATION: a
# directory of its own, removed when the session stops (Spark's default is ./spark-warehouse).
_warehouse: str | None = None


def _start_session(warehouse: str | None = None, conf: dict[str, str] | None = None) -> Any:
    """The local SparkSession; its catalog's warehouse is ``warehouse``, or a temporary
    directory that the ``spark`` fixture removes (a driver process a test may kill passes a
    folder of the test's own); ``conf``: more settings (the table connectors' jars)."""
    global _warehouse
    from broker_spark.spark.java import require_java

    require_java()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    path = os.environ.get("PYTHONPATH", "")
    if ROOT not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, path) if p)
    from pyspark.sql import SparkSession

    if warehouse is None:
        warehouse = _warehouse = tempfile.mkdtemp(prefix="broker-spark-warehouse-")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("broker-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.stopTimeout", "10s")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.warehouse.dir", warehouse)
        .config(map=conf or {})
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The shared local SparkSession (2 cores, no UI, 2 shuffle partitions)."""
    global _session, _warehouse
    if _session is None:
        _session = _start_session()
    yield _session
    if _session is not None:
        _session.stop()
        _session = None
    if _warehouse is not None:
        shutil.rmtree(_warehouse, ignore_errors=True)
        _warehouse = None


def killable_driver_env(folder: Path) -> dict[str, str]:
    """The environment of a Spark driver run as a process of its own that a test may SIGKILL.

    A JVM killed so cannot remove its temporary files (spark-*, blockmgr-*, artifacts-*, lz4's
    native library), so they go to ``folder/jvm-tmp``, inside the test's folder, not /tmp.
    """
    jvm_tmp = folder / "jvm-tmp"
    jvm_tmp.mkdir(exist_ok=True)
    options = f"{os.environ.get('JAVA_TOOL_OPTIONS', '')} -Djava.io.tmpdir={jvm_tmp}".strip()
    return dict(os.environ, PYTHONUNBUFFERED="1", JAVA_TOOL_OPTIONS=options)


def plain_config() -> Configuration:
    """An endpoint configuration without TLS (quicker to peer; TLS has its own tests)."""
    return Configuration(BrokerOptions(disable_ssl=True))


@pytest.fixture
def hub() -> Iterator[broker.Endpoint]:
    """A listening endpoint in the test process for Spark's endpoints to peer with."""
    endpoint = broker.Endpoint(plain_config())
    endpoint.hub_port = endpoint.listen("127.0.0.1", 0)  # type: ignore[attr-defined]
    assert endpoint.hub_port
    try:
        yield endpoint
    finally:
        endpoint.shutdown()


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


class PeerWatch:
    """Counts the peerings a hub sees, to know when a (re)started query's endpoint is up."""

    def __init__(self, endpoint: broker.Endpoint) -> None:
        self.endpoint = endpoint
        self.statuses = endpoint.make_status_subscriber(True)
        self._counted: set[str] = set(endpoint._core.peer_filters())  # peers from before
        self.added = 0
        self.removed = 0

    def _drain(self) -> None:
        for item in self.statuses.poll():
            code = getattr(item, "code", lambda: None)()
            if code == SC.PeerAdded:
                self.added += 1
            elif code in (SC.PeerRemoved, SC.PeerLost):
                self.removed += 1

    def wait_added(self, count: int, timeout: float = 60.0) -> None:
        def done() -> bool:
            self._drain()
            return self.added >= count

        wait_for(done, timeout, f"{count} peerings")

    def wait_subscribed(self, prefix: str, timeout: float = 60.0, peers: int = 1) -> None:
        """Until ``peers`` new peers (not there when the watch began, nor counted by an
        earlier call) announced a filter under ``prefix``: each query's endpoint is one
        peer, and a query stopped just before may still be a peer with the same filter,
        so publishing on the strength of the hub's union of filters could miss the new one."""

        def new_subscribers() -> list[str]:
            filters = self.endpoint._core.peer_filters()
            return [
                peer
                for peer, f in filters.items()
                if peer not in self._counted and any(str(t).startswith(prefix) for t in f)
            ]

        found = wait_for(
            lambda: len(new_subscribers()) >= peers and new_subscribers(),
            timeout,
            f"{peers} new peers subscribed to {prefix}",
        )
        self._counted.update(found)

    def close(self) -> None:
        self.statuses.reset()


@contextlib.contextmanager
def running(query: Any) -> Iterator[Any]:
    """Stop ``query`` however the test ends."""
    try:
        yield query
    finally:
        with contextlib.suppress(Exception):
            query.stop()


def drain_until(query: Any, count: Callable[[], int], expected: int, timeout: float = 60.0) -> int:
    """Let ``query`` process until ``count()`` reaches ``expected``; return the final count."""
    deadline = time.monotonic() + timeout
    while True:
        if query.exception() is not None:
            raise AssertionError(f"the query failed: {query.exception()}")
        query.processAllAvailable()
        n = count()
        if n >= expected:
            return n
        if time.monotonic() > deadline:
            raise AssertionError(f"only {n} of {expected} rows after {timeout} s")
        time.sleep(0.05)


def replay_logs(
    session: Any,
    endpoint: broker.Endpoint,
    messages: list[tuple[str, bytes]],
    queries: dict[str, int],
    before: set[str],
    prefix: str = "zeek/logs",
) -> None:
    """Publish recorded ``(topic, payload)`` messages (a Zeek's log traffic) once each query's
    endpoint subscribed to ``prefix`` (peers not in ``before``: a query stopped just before
    may still be a peer with the same filter), then wait for each memory table of ``queries``
    to hold its expected rows (saying, if not, how many each query's batches read)."""

    def subscribed() -> int:
        return sum(
            peer not in before and any(str(t).startswith(prefix) for t in f)
            for peer, f in endpoint._core.peer_filters().items()
        )

    wait_for(lambda: subscribed() >= len(queries), 60, "the readers' subscriptions")
    # and each query past its first batch: its reader is the one Spark runs from then on
    # (a loaded machine can show a subscription before the query's own reader has one)
    wait_for(lambda: all(q.recentProgress for q in session.streams.active), 60, "the first batches")
    endpoint.publish_encoded(messages)
    for table, expected in queries.items():
        seen = [0]

        def enough(table: str = table, expected: int = expected, seen: list = seen) -> bool:
            seen[0] = session.sql(f"select count(*) from {table}").first()[0]
            return seen[0] >= expected

        try:
            wait_for(enough, 120, f"{expected} rows in {table}")
        except AssertionError:
            progress = [
                (q.name, [p.numInputRows for p in q.recentProgress]) for q in session.streams.active
            ]
            peers = {p: sorted(map(str, f)) for p, f in endpoint._core.peer_filters().items()}
            raise AssertionError(
                f"{seen[0]} of {expected} rows in {table} after 120 s; the queries' batches: "
                f"{progress}; the hub's peers then: {peers} (before: {sorted(before)})"
            ) from None
