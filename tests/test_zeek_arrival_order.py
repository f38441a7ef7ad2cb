"""No arrival order breaks a reader of Zeek's logs.

A live Zeek cluster sends its log batches in any order and grouping: several
nodes, several logs, Broker and ZeroMQ side by side, and whatever a reader
drains at once is one run. Here the recorded streams of three senders (a Zeek
over Broker reading http/methods.pcap, one reading dns/edns-ecs.pcap, a Zeek on
the ZeroMQ backend) are interleaved in any order that keeps each sender's own,
cut into runs anywhere, and read with any choice of logs, by every reader of
the project:

* ``broker-spark logs`` and ``node --log-dir`` (:class:`LogLines`, and the
  :class:`LogDirectory` the node writes);
* a relay and Spark: the messages spooled, a Spark task's partitions cut
  anywhere, each carrying the schemas in force at its start, converted as an
  executor converts them (:class:`LogConverter`).

The expectation is built without any mixing: each message's lines, from its
sender's stream alone, in the order the messages arrived; and each sender's
lines are, in turn, Zeek's own JSON logs of that run.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zeek_recordings import ZMQ_LOGS, recording, zmq_local_lines, zmq_messages

from broker_spark.columnar.log_converter import LogConverter
from broker_spark.node.log_dir import LogDirectory
from broker_spark.spark.source import arrow_schema_of
from broker_spark.spark.zeek_schema import generic_log_schema, log_columns
from broker_spark.spool.schema_history import LogSchemaHistory, records_in
from broker_spark.spool.service import SpoolService, learn_sizes
from broker_spark.spool.spool import Spool
from broker_spark.zeek.log_batch import read_header
from broker_spark.zeek.log_lines import LogLines
from broker_spark.zeromq.log_receiver import LOG_TOPIC_PREFIX

pytestmark = pytest.mark.timeout(300)

HTTP, DNS = "zeek-logs-http-methods", "zeek-logs-dns-edns-ecs"

#: message = (topic, payload, sender)
Message = tuple[str, bytes, str]


def _sender_streams() -> dict[str, list[Message]]:
    streams: dict[str, list[Message]] = {}
    for name in (HTTP, DNS):
        sender = f"broker-{name}"
        streams[sender] = [(topic, payload, sender) for topic, payload in recording(name).data]
    zmq = []
    for frames in zmq_messages(ZMQ_LOGS):
        batch, sender = frames[3], frames[1].decode()
        zmq.append((LOG_TOPIC_PREFIX + read_header(batch).stream, batch, sender))
    streams[zmq[0][2]] = zmq
    return streams


STREAMS = _sender_streams()
SENDERS = sorted(STREAMS)
PATHS = sorted(
    {p for name in (HTTP, DNS) for p in recording(name).writes}
    | {"conn", "http", "files"}  # the ZeroMQ recording's logs
)


def _lines_of_each_message() -> dict[str, list[list[tuple[str, str]]]]:
    """Each message's ``(path, line)`` pairs, read from its sender's stream alone."""
    out = {}
    for sender, stream in STREAMS.items():
        reader = LogLines()
        out[sender] = [reader.lines([(payload, sender)]) for _t, payload, _s in stream]
    return out


LINES = _lines_of_each_message()


def test_each_senders_lines_are_zeeks_own_logs() -> None:
    """The expectation itself, held against Zeek's JSON logs of each recorded run."""
    for name in (HTTP, DNS):
        rec = recording(name)
        got: dict[str, list[str]] = {}
        for lines in LINES[f"broker-{name}"]:
            for path, line in lines:
                got.setdefault(path, []).append(line)
        assert got == {p: rec.local_lines(p) for p in rec.writes}
    zmq_sender = next(s for s in SENDERS if not s.startswith("broker-"))
    got = {}
    for lines in LINES[zmq_sender]:
        for path, line in lines:
            got.setdefault(path, []).append(line)
    assert got == {p: zmq_local_lines(ZMQ_LOGS, p) for p in got}
    assert set(got) >= {"conn", "http"}


@st.composite
def arrivals(draw: st.DrawFn) -> tuple[list[tuple[str, int]], list[int], frozenset[str] | None]:
    """An interleaving (sender, index) keeping each sender's order, cuts into runs, and the
    logs asked for (None: all)."""
    remaining = {s: len(STREAMS[s]) for s in SENDERS}
    taken = dict.fromkeys(SENDERS, 0)
    order: list[tuple[str, int]] = []
    choices = draw(st.lists(st.integers(0, 2), min_size=sum(remaining.values())))
    for pick in choices:
        live = [s for s in SENDERS if taken[s] < remaining[s]]
        if not live:
            break
        sender = live[pick % len(live)]
        order.append((sender, taken[sender]))
        taken[sender] += 1
    for s in SENDERS:  # whatever the draw left: at the end, in order
        order += [(s, i) for i in range(taken[s], remaining[s])]
    cuts = sorted(set(draw(st.lists(st.integers(1, len(order) - 1), max_size=40))))
    paths = draw(
        st.one_of(st.none(), st.frozensets(st.sampled_from(PATHS), min_size=1, max_size=4))
    )
    return order, cuts, paths


def _runs(order: list, cuts: list[int]) -> list[list]:
    points = [0, *cuts, len(order)]
    return [order[a:b] for a, b in zip(points, points[1:], strict=False)]


def _expected(order: list[tuple[str, int]], paths: frozenset[str] | None) -> list[tuple[str, str]]:
    return [
        (path, line)
        for sender, i in order
        for path, line in LINES[sender][i]
        if paths is None or path in paths
    ]


QUICK = settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow], deadline=None)
#: The spool and the converter cost more per example (a spool on disk, a converter per cut).
SLOWER = settings(QUICK, max_examples=12)


@QUICK
@given(arrival=arrivals())
def test_logs_and_the_log_directory_take_any_arrival(arrival, tmp_path_factory) -> None:
    order, cuts, paths = arrival
    reader = LogLines(paths)
    got: list[tuple[str, str]] = []
    directory = LogDirectory(str(tmp_path_factory.mktemp("logs")), interval=0)
    for run in _runs(order, cuts):
        messages = [(STREAMS[s][i][1], s) for s, i in run]
        found = reader.lines(messages)  # never raises, whatever the run holds
        got += found
        directory.write(found)
    directory.close()
    expected = _expected(order, paths)
    assert got == expected
    written = {
        f.name.removesuffix(".log"): f.read_text().splitlines()
        for f in Path(directory.directory).iterdir()
    }
    by_path: dict[str, list[str]] = {}
    for path, line in expected:
        by_path.setdefault(path, []).append(line)
    assert written == by_path


@SLOWER
@given(arrival=arrivals(), partition_cuts=st.lists(st.integers(1, 10_000), max_size=6))
def test_a_relay_and_spark_take_any_arrival(arrival, partition_cuts, tmp_path_factory) -> None:
    """Spooled as a relay spools them, read back by partitions cut anywhere, each converted
    with the schemas in force at its start: the rows are the lines, in arrival order, each at
    its position: the message's offset and the record's index among its log's records in
    that message, whichever partition read it and whichever logs were kept."""
    order, cuts, paths = arrival
    folder = tmp_path_factory.mktemp("spool")
    history = LogSchemaHistory(str(folder))
    with Spool(str(folder)) as spool:
        for run in _runs(order, cuts):  # one append per run, as the pump takes them
            items = [(*STREAMS[s][i], 1_700_000_000_000_000_000) for s, i in run]
            last = spool.append_batch(items)
            history.observe(last - len(items) + 1, items)
        end = spool.end_offset()
        bounds = sorted({0, end, *(c % end for c in partition_cuts)})
        schema = generic_log_schema()
        rows: list[tuple[str, str]] = []
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            converter = LogConverter(
                arrow_schema_of(schema),
                log_columns(schema, ()),
                "PERMISSIVE",
                sorted(paths) if paths is not None else None,
                None,
                history.snapshot(lo),
            )
            batch = converter.convert_packed(spool.read_packed(lo, hi), hi - lo)
            rows += [(r["_path"], r["log"], r["offset"], r["record"]) for r in batch.to_pylist()]
    assert rows == _positioned(order, paths)


def test_an_owner_opening_a_filled_spool_plans_by_records(tmp_path) -> None:
    """A relay or receiver started over a spool filled before (a restart over a backlog)
    learns how many records a message holds from the spool's last messages, as observing
    them arrive taught its predecessor: readers plan partitions by records from the first
    batch, not one partition for thousands of Zeek Batches."""
    items = [(*m, 1_700_000_000_000_000_000) for s in SENDERS for m in STREAMS[s]]
    history = LogSchemaHistory(str(tmp_path))
    with Spool(str(tmp_path)) as spool:
        history.observe(spool.append_batch(items) - len(items) + 1, items)
    seen = history.records_per_message()
    assert seen > 2  # Batches of several records, LogCreates and ZeroMQ batches among them
    with Spool(str(tmp_path)) as spool:
        service = SpoolService(spool, ["zeek/logs/"], history=LogSchemaHistory(str(tmp_path)))
        assert service.bounds()["records_per_message"] == pytest.approx(seen)
        few = LogSchemaHistory()
        learn_sizes(few, spool, sample=10)  # only the last ten: the ZeroMQ sender's
        last = sum(records_in(m[1]) for m in items[-10:]) / 10
        assert few.records_per_message() == pytest.approx(max(1.0, last))
    with Spool(str(tmp_path / "empty")) as spool:
        assert SpoolService(spool, ["zeek/"], history=LogSchemaHistory()).bounds()[
            "records_per_message"
        ] == pytest.approx(1.0)


def _positioned(order: list[tuple[str, int]], paths: frozenset[str] | None) -> list[tuple]:
    out = []
    for offset, (sender, i) in enumerate(order):
        seen: Counter[str] = Counter()
        for path, line in LINES[sender][i]:
            if paths is None or path in paths:
                out.append((path, line, offset, seen[path]))
            seen[path] += 1
    return out


def test_every_recorded_log_is_in_the_mix() -> None:
    counts = Counter(path for lines in LINES.values() for msg in lines for path, _ in msg)
    assert counts["http"] >= 2 * 49 and counts["dns"] > 0 and counts["conn"] > 0
