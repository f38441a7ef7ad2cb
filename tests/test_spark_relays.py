"""One stream over several relays (``relay=h1:p1,h2:p2``): a position per relay.

Relays run in the test process (their spools, endpoints and servers over real
sockets); the reader's driver side is called as Spark calls it, and its
partitions are read as executors read them (pickled). The offsets' arithmetic
(:func:`fair_shares`, :class:`RelayOffsets`) is checked on its own.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_spark_relay import Relay

from broker_spark.columnar.record_batches import default_schema
from broker_spark.reader.in_process import BrokerDataLossError
from broker_spark.reader.offsets import OffsetError, RelayOffsets, fair_shares
from broker_spark.reader.options import BrokerOptionError, parse_reader_options
from broker_spark.spark.compat import ReadAllAvailable, ReadMaxRows
from broker_spark.spark.read.offered_columns import default_ddl
from broker_spark.spark.read.stream import StreamReader, stream_reader

pytestmark = pytest.mark.timeout(120)


# --- the arithmetic -----------------------------------------------------------------------


@given(st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 10_000)), st.integers(1, 30_000))
def test_fair_shares_share_the_limit(available: dict[str, int], limit: int) -> None:
    shares = fair_shares(available, limit)
    assert set(shares) == set(available)
    assert all(0 <= shares[k] <= available[k] for k in available)
    wanting = [k for k, n in available.items() if n > 0]
    assert all(shares[k] >= 1 for k in wanting)  # nobody with records is starved
    total = sum(shares.values())
    assert total == min(sum(available.values()), max(limit, len(wanting)))
    # equal shares: a source that got less than another was given all it had
    for a in wanting:
        for b in wanting:
            if shares[a] + 1 < shares[b]:
                assert shares[a] == available[a]
    assert fair_shares(available, limit) == shares  # the same arguments, the same answer


def test_relay_offsets_round_trip_in_one_spelling() -> None:
    offsets = RelayOffsets({"b": 7, "a": 3}, {"a": "h1:1", "b": "h2:2"})
    text = json.dumps(offsets.to_dict())
    assert text == (
        '{"relays": {"a": {"at": "h1:1", "offset": 3}, "b": {"at": "h2:2", "offset": 7}}}'
    )
    back = RelayOffsets.from_dict(text)
    assert (dict(back.positions), dict(back.addresses)) == ({"a": 3, "b": 7}, offsets.addresses)
    assert RelayOffsets.from_dict({"offset": 5}).legacy == 5  # one relay, an earlier release
    for bad in ('{"relays": 3}', '{"relays": {"a": {"offset": "x"}}}', "[]", '{"x": 1}'):
        with pytest.raises(OffsetError):
            RelayOffsets.from_dict(bad)


def test_the_relay_option_takes_a_list() -> None:
    opts = parse_reader_options({"topics": "zeek/", "relay": "a:1, b:2,[::1]:3"})
    assert [str(r) for r in opts.relays] == ["a:1", "b:2", "[::1]:3"]
    for bad, why in (("a:1,,b:2", "empty relay"), ("a:1,a:1", "names a:1 twice")):
        with pytest.raises(BrokerOptionError, match=why):
            parse_reader_options({"topics": "zeek/", "relay": bad})
    assert default_ddl("default", relay=True).endswith(", relay STRING")


# --- a reader over two relays -----------------------------------------------------------------


@pytest.fixture
def relays(tmp_path: Path) -> Iterator[list[Relay]]:
    made = [Relay(tmp_path / "one"), Relay(tmp_path / "two")]
    try:
        yield made
    finally:
        for r in made:
            r.close()


def reader_of(ports: list[int], **extra: str) -> StreamReader:
    opts = parse_reader_options(
        {
            "topics": "zeek/",
            "relay": ",".join(f"127.0.0.1:{p}" for p in ports),
            "ssl.disable": "true",
            **extra,
        }
    )
    return stream_reader(opts, default_schema(opts.format, relay=True))


def positions(offsets: dict) -> dict[str, int]:
    return {k: v["offset"] for k, v in offsets["relays"].items()}


def rows(reader: StreamReader, start: dict, end: dict) -> list[tuple[str, int]]:
    """``(relay id, event number)`` of every row, as executors read the partitions."""
    remote = pickle.loads(pickle.dumps(reader))
    out = []
    for part in reader.partitions(start, end):
        for batch in remote.read(pickle.loads(pickle.dumps(part))):
            for relay, data in zip(
                batch.column("relay").to_pylist(), batch.column("data").to_pylist(), strict=True
            ):
                out.append((relay, json.loads(data)["data"][2]["data"][1]["data"][0]["data"]))
    return out


def ids(relays: list[Relay]) -> list[str]:
    return [r.node.service.id for r in relays]


def test_one_stream_reads_every_record_of_both_relays_once(relays: list[Relay]) -> None:
    one, two = relays
    one.publish(0, 120)
    two.publish(0, 80)
    reader = reader_of([one.port, two.port], startingOffsets="earliest")
    try:
        start = reader.initialOffset()
        assert positions(start) == dict.fromkeys(ids(relays), 0)
        end = reader.latestOffset(start, ReadAllAvailable())
        assert positions(end) == {ids(relays)[0]: 120, ids(relays)[1]: 80}
        got = rows(reader, start, end)
        assert sorted(got) == sorted(
            [(ids(relays)[0], i) for i in range(120)] + [(ids(relays)[1], i) for i in range(80)]
        )
        reader.commit(end)
        # maxRecordsPerTrigger is shared: 50 a batch over two relays with plenty
        one.publish(120, 100)
        two.publish(80, 10)
        limited = reader.latestOffset(end, ReadMaxRows(50))
        step = {k: positions(limited)[k] - positions(end)[k] for k in positions(end)}
        assert step == {ids(relays)[0]: 40, ids(relays)[1]: 10}
    finally:
        reader.stop()


def test_a_relay_that_is_down_never_stops_the_other(tmp_path: Path) -> None:
    one, two = Relay(tmp_path / "one"), Relay(tmp_path / "two")
    reader = reader_of([one.port, two.port], startingOffsets="earliest")
    try:
        one.publish(0, 10)
        two.publish(0, 10)
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        first, second = ids([one, two])
        port = two.port
        two.close()  # the second relay is down for a while
        one.publish(10, 15)
        later = reader.latestOffset(end, ReadAllAvailable())
        assert positions(later) == {first: 25, second: 10}  # the first reads on
        assert reader.reportLatestOffset()["unreachable"] == [f"127.0.0.1:{port}"]
        assert sorted(rows(reader, end, later)) == [(first, i) for i in range(10, 25)]
        two = Relay(tmp_path / "two", port=port)  # back, on its spool: taken up where it was
        two.publish(10, 5)
        again = reader.latestOffset(later, ReadAllAvailable())
        assert positions(again) == {first: 25, second: 15}
        assert rows(reader, later, again) == [(second, i) for i in range(10, 15)]
        assert "unreachable" not in reader.reportLatestOffset()
    finally:
        reader.stop()
        one.close()
        two.close()


def test_relays_added_or_left_between_runs(relays: list[Relay], tmp_path: Path) -> None:
    one, two = relays
    one.publish(0, 30)
    two.publish(0, 20)
    first_run = reader_of([one.port], startingOffsets="earliest")
    try:
        start = first_run.initialOffset()
        checkpoint = first_run.latestOffset(start, ReadAllAvailable())
    finally:
        first_run.stop()
    # the second relay is added to the options of the checkpointed query: it enters at
    # startingOffsets (earliest) with an empty range, and is read from the next batch on
    second_run = reader_of([one.port, two.port], startingOffsets="earliest")
    try:
        entered = second_run.latestOffset(checkpoint, ReadAllAvailable())
        assert positions(entered) == {ids(relays)[0]: 30, ids(relays)[1]: 0}
        assert second_run.partitions(checkpoint, entered) == []
        then = second_run.latestOffset(entered, ReadAllAvailable())
        assert rows(second_run, entered, then) == [(ids(relays)[1], i) for i in range(20)]
    finally:
        second_run.stop()
    # the first relay leaves the options: the query fails, naming it
    third_run = reader_of([two.port])
    try:
        with pytest.raises(BrokerDataLossError, match=f"relay 127.0.0.1:{one.port} .*no longer"):
            third_run.latestOffset(then, ReadAllAvailable())
    finally:
        third_run.stop()
    # a checkpoint of one relay from an earlier release cannot say which of two it was
    two_now = reader_of([one.port, two.port])
    try:
        with pytest.raises(BrokerDataLossError, match="one position .* names 2"):
            two_now.latestOffset({"offset": 30}, ReadAllAvailable())
    finally:
        two_now.stop()


def test_no_relay_reachable_at_start_fails_naming_each(tmp_path: Path) -> None:
    reader = reader_of([1, 2])
    with pytest.raises(Exception, match="no relay can be reached: relay 127.0.0.1:1: .*relay 127"):
        reader.initialOffset()
    reader.stop()


def test_a_batch_replanned_on_a_relay_that_is_down_waits_for_it(tmp_path: Path) -> None:
    """A restarted query re-plans its last batch; a relay down then still gets its ranges,
    whose tasks fetch them once it is back (the task retries), checking its id."""
    one, two = Relay(tmp_path / "one"), Relay(tmp_path / "two")
    try:
        one.publish(0, 5)
        two.publish(0, 7)
        first_run = reader_of([one.port, two.port], startingOffsets="earliest")
        try:
            start = first_run.initialOffset()
            end = first_run.latestOffset(start, ReadAllAvailable())
        finally:
            first_run.stop()
        port = two.port
        two.close()
        again = reader_of([one.port, two.port], startingOffsets="earliest")
        try:
            parts = again.partitions(start, end)
            second = ids([one])[0]
            waiting = [p for p in parts if p.relay_id != second]
            assert waiting and all(str(p.relay[0]) == f"127.0.0.1:{port}" for p in waiting)
            two = Relay(tmp_path / "two", port=port)  # back before the tasks give up
            remote = pickle.loads(pickle.dumps(again))
            got = sorted(
                n
                for p in waiting
                for b in remote.read(pickle.loads(pickle.dumps(p)))
                for n in b.column("offset").to_pylist()
            )
            assert got == list(range(7))
        finally:
            again.stop()
    finally:
        one.close()
        two.close()
