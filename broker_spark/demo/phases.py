"""One run of the demo's query, from its start to the checks (see :mod:`broker_spark.demo`).

:mod:`~broker_spark.demo.launch` starts the node and Spark and hands them
over; this module never imports it back (what both need is in
:mod:`~broker_spark.demo.options`).

The phases, in order: start the query and wait for its endpoint to subscribe
(warming Spark's write path up meanwhile); publish for ``--seconds``,
polling the query's progress and the summaries coming back; let Spark read
what is in flight; close the sink, then stop the query (never in the middle
of a ``foreachBatch`` call); read the store back as a table; check and
summarize. SIGINT/SIGTERM cut this short politely.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from broker_spark.data.json_codec import loads_value
from broker_spark.demo.events import ConnectionLogs, EventPublisher
from broker_spark.demo.options import (
    STORE_NAME,
    SUMMARY_TOPIC,
    DemoError,
    DemoOptions,
    DemoResult,
    Wiring,
)
from broker_spark.demo.spark import SummarySink, read_conn_log, windowed_totals
from broker_spark.zeek import Event

__all__ = ["DemoRun"]

#: Seconds to wait for the query's endpoint to subscribe.
START_TIMEOUT = 90.0
#: After publishing: seconds without a new row read before giving up, and at most in all.
DRAIN_STALL = 60.0
DRAIN_LIMIT = 180.0


class DemoRun:
    """The query's run: :meth:`go` does every phase and fills in ``result``."""

    def __init__(
        self,
        options: DemoOptions,
        spark: Any,
        node: Any,
        node_address: str,
        wiring: Wiring,
        scratch: Path,
        say: Callable[[str], None],
        out: Callable[[str], None],
        result: DemoResult,
    ) -> None:

        self.options = options
        self.spark = spark
        self.node = node
        self.wiring = wiring
        self.scratch = scratch
        self.say = say
        self.out = out
        self.result = result
        self.writer_options = {"peer": node_address, **wiring.ssl_options}
        self.reader_options = {"peer": options.peer or node_address, **wiring.ssl_options}
        self.summaries = node.make_subscriber(SUMMARY_TOPIC, qsize=1 << 16)
        # a Zeek sends its LogCreates to every new peer; the generator does the same
        self.peers_added = node.make_status_subscriber(receive_statuses=True)
        self.master = node.attach_master(STORE_NAME)
        self.sink = SummarySink(
            self.writer_options, SUMMARY_TOPIC, STORE_NAME, None if options.quiet else say
        )
        self.received: dict[tuple[float, str], tuple[int, int]] = {}
        self.progress_seen: set[int] = set()
        self.query: Any = None
        self.publisher: Any = None
        self.warm_up: _Background | None = None
        self.stop = threading.Event()  # set by SIGINT/SIGTERM
        if not options.peer:
            result.published = 0

    def go(self) -> None:
        with _stop_on_signals(self.stop):
            try:
                self._start_query()
                if not self.stop.is_set():
                    self._publish()
                if not self.stop.is_set():
                    self._drain()
            finally:
                if self.publisher is not None:
                    self.publisher.stop()
                self._stop_query()
                self.summaries.reset()
                self.peers_added.reset()
            if not self.stop.is_set():
                self._read_store()
        self.result.interrupted = self.stop.is_set()
        if not self.result.interrupted:
            self._check()
        for line in self._summary():
            self.out(line)

    # --- phases ----------------------------------------------------------------------------

    def _start_query(self) -> None:

        t = time.monotonic()
        events = read_conn_log(
            self.spark, self.reader_options, self.options.topic, learn=bool(self.options.peer)
        )
        checkpoint = self.options.checkpoint or str(self.scratch / "checkpoint")
        self.query = (
            windowed_totals(events)
            .writeStream.outputMode("update")
            .foreachBatch(self.sink)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=f"{self.options.trigger_seconds} seconds")
            .queryName("broker_demo")
            .start()
        )
        # Spark's first write of a session is slow (workers start, modules load): make it
        # now, alongside the query's start, rather than in the first micro-batch.
        self.warm_up = _Background(self.sink.warm_up, self.spark)
        if self.options.peer:
            self.say(f"query reading {self.options.topic} from {self.options.peer}")
            return
        deadline = time.monotonic() + START_TIMEOUT
        while not any(
            str(t).startswith(self.options.topic) for t in self.node.peer_subscriptions()
        ):
            self._check_query()
            if time.monotonic() > deadline:
                raise DemoError(
                    f"the query's endpoint did not subscribe within {START_TIMEOUT:.0f} s"
                )
            if self.stop.wait(0.05):
                return
        self.say(
            f"query reading the conn log on {self.options.topic} (format=zeek-logs, typed "
            f"columns) subscribed after {time.monotonic() - t:.1f} s"
        )

    def _publish(self) -> None:

        o = self.options
        if not o.peer:
            topic = o.topic.rstrip("/") + "/Conn::LOG"
            self.publisher = EventPublisher(
                self.node.publish_batch,
                o.rate,
                topic,
                events=ConnectionLogs(),
                peers_added=self.peers_added,
            ).start()
            self.say(
                f"publishing {o.rate:,.0f} conn records/s on {topic} for {o.seconds:g} s; per "
                f"service and 10-second window: connections/bytes"
            )
        else:
            self.say(
                f"reading for {o.seconds:g} s; per service and 10-second window: connections/bytes"
            )
        t = time.monotonic()
        end = t + o.seconds
        while (now := time.monotonic()) < end and not self.stop.is_set():
            self._poll()
            if self.publisher is not None and self.publisher.error is not None:
                raise DemoError(f"publishing failed: {self.publisher.error}")
            self.stop.wait(min(0.2, end - now))
        if self.publisher is not None:
            self.publisher.stop()
            self.result.published = self.publisher.published
            self.result.publish_seconds = self.publisher.elapsed
        else:
            self.result.publish_seconds = time.monotonic() - t
        error = self.warm_up.result(START_TIMEOUT) if self.warm_up is not None else None
        if error is not None:
            raise DemoError(f"writing to the node at {self.writer_options['peer']} failed: {error}")

    def _drain(self) -> None:
        """Let Spark read what is still in flight (with --peer: until it read something).

        Gives up when Spark has read nothing new for :data:`DRAIN_STALL` seconds
        (a loaded machine makes batches slow, not stuck), or after :data:`DRAIN_LIMIT`.
        """
        published = self.result.published
        if published is None:  # events from --peer: wait for a first batch at least
            published = 1
        started = last_change = time.monotonic()
        seen = self.result.rows_read
        told = False
        while self.result.rows_read < published:
            now = time.monotonic()
            if self.result.rows_read != seen:
                seen, last_change = self.result.rows_read, now
            if now - last_change > DRAIN_STALL or now - started > DRAIN_LIMIT:
                break
            if not told and now - started > 5:
                told = True
                self.say(
                    "waiting for Spark's first micro-batch"
                    if self.result.published is None
                    else f"waiting for Spark to read the last {published - seen:,} records"
                )
            if self.stop.wait(0.1):
                return
            self._poll()

    def _stop_query(self) -> None:
        if self.query is None:
            return
        if not self.sink.close(DRAIN_STALL):
            self.result.problems.append("the last micro-batch did not end; stopped it")
        # Between two triggers, too: stopping interrupts whatever the query's thread is doing
        # (planning, broadcasting), and Spark logs such interruptions as errors.
        deadline = time.monotonic() + 10
        with contextlib.suppress(Exception):  # the query may have ended by itself
            while self.query.status["isTriggerActive"] and time.monotonic() < deadline:
                time.sleep(0.02)
        self.query.stop()
        self._poll(check=False)
        self._drain_summaries(expected=self.sink.written)

    # --- watching ------------------------------------------------------------------------------

    def _check_query(self) -> None:
        error = self.query.exception() if self.query is not None else None
        if error is not None:
            first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            raise DemoError(f"the Spark query failed: {first[:300]}")

    def _poll(self, check: bool = True) -> None:
        if check:
            self._check_query()
        for progress in self.query.recentProgress:
            batch = progress["batchId"]
            if batch not in self.progress_seen:
                self.progress_seen.add(batch)
                rows = progress["numInputRows"]
                self.result.rows_read += rows
                self.result.batches += 1 if rows else 0
        self._take_summaries(self.summaries.poll())

    def _take_summaries(self, messages: list[tuple[str, Any]]) -> None:

        for _topic, value in messages:
            self.result.summaries_received += 1
            try:
                start, _end, service, connections, nbytes = Event(value).args()
            except (ValueError, TypeError):
                continue
            self.received[(_epoch(start), str(service))] = (int(connections), int(nbytes))

    def _drain_summaries(self, expected: int) -> None:
        """Every write was acknowledged before its batch ended; give the queue a moment."""
        deadline = time.monotonic() + 5.0
        while self.result.summaries_received < expected and time.monotonic() < deadline:
            self._take_summaries(self.summaries.get(1024, 0.1))

    # --- the end -------------------------------------------------------------------------------

    def _read_store(self) -> None:

        try:
            rows = (
                self.spark.read.format("broker")
                .options(**self.writer_options)
                .option("store", STORE_NAME)
                .load()
                .select("key", "value")
                .collect()
            )
        except Exception as exc:  # Spark wraps everything; say it on one line
            self.result.problems.append(f"reading store {STORE_NAME} failed: {_first_line(exc)}")
            return
        self.result.store_entries = len(rows)
        latest = self._latest()
        stored = {}
        for row in rows:
            service, start = loads_value(row.key)
            connections, nbytes = loads_value(row.value)
            stored[(_epoch(start), str(service))] = (int(connections), int(nbytes))
        self.result.store_matches = stored == latest

    def _latest(self) -> dict[tuple[float, str], tuple[int, int]]:
        return {
            (_epoch(row.start), row.service): (row.connections, row.bytes)
            for row in self.sink.totals.latest.values()
        }

    def _check(self) -> None:
        r, totals = self.result, self.sink.totals
        r.windows = totals.windows
        r.services = len(totals.services)
        r.window_totals = len(totals.latest)
        r.window_connections = totals.connections
        r.summaries_written = self.sink.written
        r.summary_keys = len(self.received)
        r.summaries_match = self.received == self._latest()
        problems = r.problems
        if r.published is not None and r.published == 0:
            problems.append("no conn records were published")
        if r.rows_read == 0:
            problems.append("Spark read no conn records")
        elif r.published is not None and r.rows_read < r.published:
            problems.append(f"Spark read only {r.rows_read} of {r.published} conn records")
        if r.summaries_written == 0:
            problems.append("the query wrote no summaries")
        elif r.summaries_received < r.summaries_written:
            problems.append(
                f"{r.summaries_received} of {r.summaries_written} summaries came back on {SUMMARY_TOPIC}"
            )
        elif not r.summaries_match:
            problems.append(f"the summaries on {SUMMARY_TOPIC} differ from Spark's last values")
        if r.summaries_written and not r.store_entries:
            problems.append(f"store {STORE_NAME} is empty")
        elif r.summaries_written and not r.store_matches:
            problems.append(f"store {STORE_NAME} differs from Spark's last values")

    def _summary(self) -> list[str]:
        r = self.result
        seconds = max(r.publish_seconds, 1e-9)
        if r.published is None:
            published = f"{'(from ' + str(self.options.peer) + ')':>10}"
        else:
            published = f"{r.published:>10,}  ({r.published / seconds:,.0f}/s for {seconds:.1f} s)"
        same = "all match Spark's last values" if r.store_matches else "NOT matching"
        back = "each ending at Spark's last value" if r.summaries_match else "NOT matching"
        if r.interrupted:
            same = back = "not checked (interrupted)"
        return [
            "summary",
            f"  conn records published     {published}",
            f"  rows read by Spark         {r.rows_read:>10,}  in {r.batches} micro-batches "
            f"({r.rows_read / seconds:,.0f} rows/s)",
            f"  windows x services         {r.windows:>4} x {r.services:<3}  "
            f"{r.window_totals} totals of {r.window_connections:,} connections, "
            f"{r.summaries_written} updates",
            f"  summaries on {SUMMARY_TOPIC}  {r.summaries_received:>9,}  received, "
            f"{r.summary_keys} distinct, {back}",
            f"  store {STORE_NAME:<20} {r.store_entries:>10,}  entries read back with "
            f'spark.read.format("broker"), {same}',
        ]


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT/SIGTERM set ``stop`` (a polite end: queries stopped, endpoints shut down).

    Installed after the SparkSession exists, over PySpark's own SIGINT handler
    (which cancels jobs and raises in the middle of a Py4J call). A second
    signal raises KeyboardInterrupt. Only the main thread can install handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(_signum: int, _frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class _Background:
    """A call in a thread of its own; :meth:`result` waits for it and says how it failed."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self._error: str | None = None
        self._thread = threading.Thread(target=self._run, args=(fn, *args), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # reported by result(), in one line
            self._error = _first_line(exc)

    def result(self, timeout: float) -> str | None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            return f"no answer within {timeout:.0f} s"
        return self._error


def _epoch(value: Any) -> float:
    """Seconds since the epoch of a window start: naive datetimes are local time, as Spark's."""
    if not isinstance(value, dt.datetime):
        raise TypeError(f"not a timestamp: {value!r}")
    return round(value.timestamp(), 3)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]
