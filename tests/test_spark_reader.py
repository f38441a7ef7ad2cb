"""The stream reader's driver-side logic, called directly as Spark would (no SparkSession).

Spark calls the offset methods in one long-lived process and ``read`` on a
pickled copy elsewhere; these tests do the same in one process, with a real
TCP peering to a hub endpoint that publishes.
"""

from __future__ import annotations

import os
import pickle

import pytest
import spark_fixtures
from spark_fixtures import free_port, wait_for

import broker_spark as broker
from broker_spark import zeek
from broker_spark.columnar.record_batches import default_schema
from broker_spark.data.json_codec import dumps_value
from broker_spark.reader.in_process import BrokerDataLossError
from broker_spark.reader.offsets import SpoolOffset
from broker_spark.reader.options import BrokerOptionError, parse_reader_options
from broker_spark.spark.compat import ReadAllAvailable, ReadMaxRows
from broker_spark.spark.read.local_executors import MARKER_NAME
from broker_spark.spark.read.partitions import SpoolPartition
from broker_spark.spark.read.stream import StreamReader, stream_reader

hub = spark_fixtures.hub  # a fixture, shared by the Spark test modules

pytestmark = pytest.mark.timeout(60)


def _reader(hub: broker.Endpoint, **extra: str) -> StreamReader:
    """A reader of the hub's topics; with a spoolPath, it receives in its own process unless
    the test asks for a receiver (tests/test_spark_receiver.py is about those)."""
    options = {
        "topics": "zeek/",
        "peer": f"127.0.0.1:{hub.hub_port}",
        "ssl.disable": "true",
        "receiver": "false",
        **extra,
    }
    opts = parse_reader_options(options)
    return stream_reader(opts, default_schema(opts.format))


def _publish(hub: broker.Endpoint, first: int, count: int, topic: str = "zeek/events") -> None:
    hub.publish_batch(
        *[(topic, zeek.Event("ping", broker.Count(i), "x")) for i in range(first, first + count)]
    )


def _spooled(reader: StreamReader, count: int) -> None:
    runtime = reader.runtime
    assert runtime is not None and runtime.service is not None
    [pump] = runtime.service.pumps
    assert pump.wait_appended(count, 20), f"fewer than {count} messages arrived"


def _wait_subscribed(hub: broker.Endpoint) -> None:
    wait_for(lambda: hub.peer_subscriptions(), 20, "the reader's subscription")


def _rows(reader: StreamReader, start: dict, end: dict) -> list[dict]:
    """What executors would read: partitions pickled, read by a pickled reader copy."""
    remote = pickle.loads(pickle.dumps(reader))
    assert remote.runtime is None
    rows = []
    for part in reader.partitions(start, end):
        for batch in remote.read(pickle.loads(pickle.dumps(part))):
            rows.extend(batch.to_pylist())
    return rows


def test_nothing_starts_before_the_first_offset_call(hub: broker.Endpoint) -> None:
    reader = _reader(hub)
    assert reader.runtime is None
    assert hub.peers() == []
    assert isinstance(reader.getDefaultReadLimit(), ReadAllAvailable)
    assert reader.runtime is None
    reader.initialOffset()
    try:
        assert reader.runtime is not None
        _wait_subscribed(hub)
    finally:
        reader.stop()
    assert reader.runtime is None


def test_messages_flow_into_batches_with_dense_offsets(hub: broker.Endpoint) -> None:
    reader = _reader(hub, format="zeek")
    try:
        start = reader.initialOffset()
        assert start == {"offset": 0}
        assert reader.initialOffset() == start  # Spark asks twice
        _wait_subscribed(hub)
        _publish(hub, 0, 300)
        _spooled(reader, 300)
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end == {"offset": 300}
        rows = _rows(reader, start, end)
        assert [r["offset"] for r in rows] == list(range(300))
        first = rows[0]
        assert first["topic"] == "zeek/events"
        assert first["event"] == "ping"
        assert first["data"] == dumps_value(zeek.Event("ping", broker.Count(0), "x").as_data())
        assert (
            first["args"] == '[{"@data-type":"count","data":0},{"@data-type":"string","data":"x"}]'
        )
        assert first["sender"] == hub.node_id()
        assert first["received_at"] is not None
        # The same range reads the same rows, however often.
        assert _rows(reader, start, end) == rows
        assert reader.latestOffset(end, ReadAllAvailable()) == end  # nothing new
    finally:
        reader.stop()


def test_read_limit_and_available_now(hub: broker.Endpoint) -> None:
    reader = _reader(hub, maxRecordsPerTrigger="40")
    try:
        assert reader.getDefaultReadLimit() == ReadMaxRows(40)
        start = reader.initialOffset()
        _wait_subscribed(hub)
        _publish(hub, 0, 100)
        _spooled(reader, 100)
        ends = []
        offset = start
        while True:
            nxt = reader.latestOffset(offset, ReadMaxRows(40))
            if nxt == offset:
                break
            ends.append(nxt["offset"])
            offset = nxt
        assert ends == [40, 80, 100]
        # The engine may override the default limit: all available.
        assert reader.latestOffset(start, ReadAllAvailable()) == {"offset": 100}
        reader.prepareForTriggerAvailableNow()
        _publish(hub, 100, 10)
        _spooled(reader, 110)
        # What arrived after prepareForTriggerAvailableNow is not part of this run.
        assert reader.latestOffset(offset, ReadAllAvailable()) == {"offset": 100}
    finally:
        reader.stop()


def test_spark_before_4_2_calls_latest_offset_without_arguments(
    hub: broker.Endpoint, tmp_path
) -> None:
    """Spark 4.0 and 4.1 (Databricks 17.3 and 18 LTS) pass neither start nor limit: the
    reader keeps the start itself and applies maxRecordsPerTrigger. A restarted query
    tells it the checkpoint's last offset through ``setLatestSeenOffset``, which those
    Spark versions turn into ``partitions(end, end)``."""
    spool = str(tmp_path / "spool")
    reader = _reader(hub, maxRecordsPerTrigger="40", spoolPath=spool)
    try:
        assert reader.initialOffset() == {"offset": 0}
        _wait_subscribed(hub)
        _publish(hub, 0, 100)
        _spooled(reader, 100)
        ends = [reader.latestOffset()["offset"] for _ in range(4)]
        assert ends == [40, 80, 100, 100]
        assert reader.partitions({"offset": 40}, {"offset": 80})  # a batch re-planned late
        reader.commit({"offset": 80})  # nor does a late commit move the start back
        assert reader.latestOffset() == {"offset": 100}
    finally:
        reader.stop()
    wait_for(lambda: not hub.peers(), 20, "the first reader's peering to close")

    restarted = _reader(hub, maxRecordsPerTrigger="40", spoolPath=spool)
    try:
        assert restarted.partitions({"offset": 100}, {"offset": 100}) == []
        _wait_subscribed(hub)
        _publish(hub, 100, 50)
        _spooled(restarted, 50)  # counted by this reader's pump
        assert restarted.latestOffset() == {"offset": 140}  # from 100, not from 0
        assert restarted.latestOffset() == {"offset": 150}
    finally:
        restarted.stop()
    wait_for(lambda: not hub.peers(), 20, "the second reader's peering to close")

    # A new query's first question comes before initialOffset (and is the one question
    # availableNow asks on these versions): everything held, whatever the limit, and
    # the initial offset is fixed then, not when Spark asks for it later.
    earliest = _reader(hub, maxRecordsPerTrigger="40", spoolPath=spool, startingOffsets="earliest")
    try:
        assert earliest.latestOffset() == {"offset": 150}
        assert earliest.initialOffset() == {"offset": 0}
        assert earliest.latestOffset() == {"offset": 150}
    finally:
        earliest.stop()
    wait_for(lambda: not hub.peers(), 20, "the third reader's peering to close")
    latest = _reader(hub, maxRecordsPerTrigger="40", spoolPath=spool)
    try:
        assert latest.latestOffset() == {"offset": 150}
        _wait_subscribed(hub)
        _publish(hub, 150, 50)
        _spooled(latest, 50)
        assert latest.initialOffset() == {"offset": 150}  # not 200: those are this query's
        assert latest.latestOffset() == {"offset": 190}
    finally:
        latest.stop()


def test_partitions_split_and_spool_mode(hub: broker.Endpoint, tmp_path) -> None:
    reader = _reader(
        hub,
        spoolPath=str(tmp_path / "spool"),
        partitionData="spool",
        maxRecordsPerPartition="100",
    )
    try:
        start = reader.initialOffset()
        _wait_subscribed(hub)
        _publish(hub, 0, 250)
        _spooled(reader, 250)
        end = reader.latestOffset(start, ReadAllAvailable())
        parts = reader.partitions(start, end)
        assert [(p.start, p.end) for p in parts] == [(0, 84), (84, 167), (167, 250)]
        assert all(p.packed is None and p.spool_path for p in parts)
        rows = _rows(reader, start, end)
        assert [r["offset"] for r in rows] == list(range(250))
        assert reader.partitions(end, end) == []
    finally:
        reader.stop()


def _read_as_task(reader: StreamReader, parts: list, jvm: str | None, monkeypatch) -> list:
    """Offsets the partitions hold, read by a task whose JVM is ``jvm`` (SPARK_LOCAL_DIRS)."""
    remote = pickle.loads(pickle.dumps(reader))
    if jvm is None:
        monkeypatch.delenv("SPARK_LOCAL_DIRS", raising=False)
    else:
        monkeypatch.setenv("SPARK_LOCAL_DIRS", jvm)
    offsets = []
    for part in parts:
        for batch in remote.read(pickle.loads(pickle.dumps(part))):
            offsets.extend(batch.column("offset").to_pylist())
    return offsets


@pytest.mark.parametrize(
    ("task_jvm", "mode", "switches"),
    [
        ("/tmp/blockmgr-driver", "auto", True),  # local mode: the task runs in the driver's JVM
        ("/work/executor-1/blockmgr-x", "auto", False),  # a cluster's executor
        (None, "auto", False),  # a task that cannot tell
        ("/tmp/blockmgr-driver", "inline", False),  # asked for inline: inline it stays
    ],
)
def test_auto_partitions_read_the_spool_once_a_task_runs_in_the_drivers_jvm(
    hub: broker.Endpoint, monkeypatch, task_jvm: str | None, mode: str, switches: bool
) -> None:
    monkeypatch.setenv("SPARK_LOCAL_DIRS", "/tmp/blockmgr-driver")  # the reader's process
    reader = _reader(hub, partitionData=mode, maxRecordsPerPartition="50")
    try:
        start = reader.initialOffset()
        _wait_subscribed(hub)
        _publish(hub, 0, 100)
        _spooled(reader, 100)
        middle = reader.latestOffset(start, ReadAllAvailable())
        first = reader.partitions(start, middle)
        assert all(p.packed is not None for p in first)  # nobody has shown anything yet
        tokens = {p.local_token for p in first}
        assert tokens == ({"/tmp/blockmgr-driver"} if mode == "auto" else {None})
        assert _read_as_task(reader, first, task_jvm, monkeypatch) == list(range(100))
        monkeypatch.setenv("SPARK_LOCAL_DIRS", "/tmp/blockmgr-driver")
        _publish(hub, 100, 100)
        _spooled(reader, 200)
        end = reader.latestOffset(middle, ReadAllAvailable())
        second = reader.partitions(middle, end)
        if switches:
            assert all(p.packed is None and p.spool_path for p in second)
            assert (
                reader.positions._frames is None
            )  # nothing compressed ahead once tasks read the spool
        else:
            assert all(p.packed is not None for p in second)
        assert _read_as_task(reader, second, task_jvm, monkeypatch) == list(range(100, 200))
    finally:
        reader.stop()


def test_a_marker_left_by_another_run_does_not_count(
    hub: broker.Endpoint, tmp_path, monkeypatch
) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / MARKER_NAME).write_text("/tmp/blockmgr-of-an-earlier-run")
    monkeypatch.setenv("SPARK_LOCAL_DIRS", "/tmp/blockmgr-driver")
    reader = _reader(hub, spoolPath=str(spool))
    try:
        start = reader.initialOffset()
        _wait_subscribed(hub)
        _publish(hub, 0, 10)
        _spooled(reader, 10)
        parts = reader.partitions(start, reader.latestOffset(start, ReadAllAvailable()))
        assert all(p.packed is not None for p in parts)
    finally:
        reader.stop()


def test_earliest_and_latest_with_a_kept_spool(hub: broker.Endpoint, tmp_path) -> None:
    spool = str(tmp_path / "spool")
    first = _reader(hub, spoolPath=spool)
    try:
        first.initialOffset()
        _wait_subscribed(hub)
        _publish(hub, 0, 20)
        _spooled(first, 20)
    finally:
        first.stop()
    assert os.path.isdir(spool)  # a spoolPath outlives the reader
    for starting, expected in (("earliest", 0), ("latest", 20)):
        reader = _reader(hub, spoolPath=spool, startingOffsets=starting)
        try:
            assert reader.initialOffset() == {"offset": expected}
        finally:
            reader.stop()


def test_temporary_spool_is_removed_at_stop(hub: broker.Endpoint) -> None:
    reader = _reader(hub)
    reader.initialOffset()
    runtime = reader.runtime
    assert runtime is not None
    path = runtime.spool_path
    endpoint = runtime.endpoint
    assert os.path.isdir(path)
    reader.stop()
    assert not os.path.exists(path)
    assert endpoint is not None and endpoint.is_shutdown
    reader.stop()  # idempotent


def _retained(hub: broker.Endpoint, tmp_path, fail: str) -> tuple[StreamReader, dict]:
    """A reader whose first 300 messages were dropped by retention before Spark read them."""
    reader = _reader(
        hub,
        spoolPath=str(tmp_path / "spool"),
        failOnDataLoss=fail,
        **{"spool.segmentBytes": "4k", "spool.retentionBytes": "8k"},
    )
    start = reader.initialOffset()
    _wait_subscribed(hub)
    _publish(hub, 0, 300)
    _spooled(reader, 300)
    runtime = reader.runtime
    assert runtime is not None and runtime.spool is not None
    earliest = runtime.spool.enforce_retention(0)
    assert 0 < earliest < 300
    return reader, start


def test_data_loss_fails_when_asked(hub: broker.Endpoint, tmp_path) -> None:
    reader, start = _retained(hub, tmp_path, "true")
    try:
        with pytest.raises(BrokerDataLossError, match="failOnDataLoss=false"):
            reader.latestOffset(start, ReadAllAvailable())
        with pytest.raises(BrokerDataLossError, match="no longer in the spool"):
            reader.partitions(start, {"offset": 300})
    finally:
        reader.stop()


def test_data_loss_skips_ahead_otherwise(hub: broker.Endpoint, tmp_path, caplog) -> None:
    reader, start = _retained(hub, tmp_path, "false")
    try:
        earliest = reader.runtime.spool.start_offset()
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end == {"offset": 300}
        rows = _rows(reader, start, end)
        assert [r["offset"] for r in rows] == list(range(earliest, 300))
        assert "skipping them" in caplog.text
    finally:
        reader.stop()


def test_checkpoint_beyond_the_spool(hub: broker.Endpoint, tmp_path) -> None:
    # A restarted query whose spool did not survive: Spark re-plans [30, 35).
    strict = _reader(hub)
    with pytest.raises(BrokerDataLossError, match="set spoolPath"):
        strict.partitions({"offset": 30}, {"offset": 35})
    assert strict.runtime is None  # nothing left running after the failure
    lenient = _reader(hub, failOnDataLoss="false")
    try:
        assert lenient.partitions({"offset": 30}, {"offset": 35}) == []
        start = {"offset": 35}
        _wait_subscribed(hub)
        _publish(hub, 0, 5)
        _spooled(lenient, 5)
        end = lenient.latestOffset(start, ReadAllAvailable())
        assert end == {"offset": 40}
        assert [r["offset"] for r in _rows(lenient, start, end)] == list(range(35, 40))
    finally:
        lenient.stop()


def test_unreachable_peer_fails_at_the_first_offset_call() -> None:
    opts = parse_reader_options({"topics": "a", "peer": "127.0.0.1:1", "ssl.disable": "true"})
    reader = stream_reader(opts, default_schema())
    with pytest.raises(BrokerOptionError, match="peer=.*127.0.0.1:1.*cannot peer"):
        reader.initialOffset()
    assert reader.runtime is None


def test_an_unreachable_websocket_fails_at_the_first_offset_call() -> None:
    url = f"ws://127.0.0.1:{free_port()}/v1/messages/json"
    opts = parse_reader_options({"topics": "a", "websocket": url, "ssl.disable": "true"})
    reader = stream_reader(opts, default_schema())
    with pytest.raises(BrokerOptionError, match=f"websocket='{url}': cannot connect: "):
        reader.initialOffset()
    assert reader.runtime is None


def test_a_websocket_url_with_credentials_is_refused_without_showing_them() -> None:
    url = "ws://zeek:s3cret-pw@127.0.0.1:1/v1/messages/json"
    with pytest.raises(BrokerOptionError, match=r"websocket='ws://\*\*\*@127.0.0.1:1/") as caught:
        parse_reader_options({"topics": "a", "websocket": url})
    assert "s3cret-pw" not in str(caught.value) and "user names" in str(caught.value)


def test_offsets_are_stable_json() -> None:
    assert SpoolOffset(7).to_json() == '{"offset": 7}'
    part = SpoolPartition(0, 3, packed=b"")
    assert pickle.loads(pickle.dumps(part)).packed == b""


def test_listen_for_a_peer_with_tls() -> None:
    """A Zeek node may peer with the query (``listen``); TLS is on by default (anonymous)."""
    port = free_port()
    opts = parse_reader_options({"topics": "zeek/", "listen": f"127.0.0.1:{port}"})
    reader = stream_reader(opts, default_schema())
    node = broker.Endpoint()  # default configuration: TLS
    try:
        start = reader.initialOffset()
        assert node.peer("127.0.0.1", port, 0)
        wait_for(lambda: node.peer_subscriptions(), 20, "the reader's subscription")
        _publish(node, 0, 10)
        _spooled(reader, 10)
        end = reader.latestOffset(start, ReadAllAvailable())
        assert [r["offset"] for r in _rows(reader, start, end)] == list(range(10))
    finally:
        node.shutdown()
        reader.stop()


def test_mutual_tls_through_the_ssl_options(tmp_path) -> None:
    """``ssl.certificate``/``ssl.key``/``ssl.cafile``/``ssl.passphrase`` make the reader's
    endpoint authenticate: a node with a certificate of the same CA peers, one of another
    CA does not."""
    from broker_spark.certs import make_ca, make_node_cert, write_pem

    ca, other = make_ca(), make_ca("another CA")
    files = {"ca": write_pem(tmp_path / "ca.pem", ca.cert_pem)}
    for name, issuer in (("spark", ca), ("zeek", ca), ("stranger", other)):
        pair = make_node_cert(issuer, name)
        files[name] = write_pem(tmp_path / f"{name}.pem", pair.cert_pem)
        files[f"{name}.key"] = write_pem(tmp_path / f"{name}.key", pair.key_pem)
        if name == "spark":
            encrypted = pair.key_pem_encrypted("s3cret")
            files["spark.key"] = write_pem(tmp_path / "spark.enc.key", encrypted)
    port = free_port()
    opts = parse_reader_options(
        {
            "topics": "zeek/",
            "listen": f"127.0.0.1:{port}",
            "ssl.certificate": str(files["spark"]),
            "ssl.key": str(files["spark.key"]),
            "ssl.passphrase": "s3cret",
            "ssl.cafile": str(files["ca"]),
        }
    )
    reader = stream_reader(opts, default_schema())

    def node(name: str) -> broker.Endpoint:
        config = broker.Configuration(broker.BrokerOptions())
        config.openssl_certificate = str(files[name])
        config.openssl_key = str(files[f"{name}.key"])
        config.openssl_cafile = str(files["ca"])
        return broker.Endpoint(config)

    zeek_node, stranger = node("zeek"), node("stranger")
    try:
        start = reader.initialOffset()
        assert not stranger.peer("127.0.0.1", port, 0)  # another CA: refused
        assert zeek_node.peer("127.0.0.1", port, 0)
        wait_for(lambda: zeek_node.peer_subscriptions(), 20, "the reader's subscription")
        _publish(zeek_node, 0, 5)
        _spooled(reader, 5)
        end = reader.latestOffset(start, ReadAllAvailable())
        assert [r["offset"] for r in _rows(reader, start, end)] == list(range(5))
    finally:
        zeek_node.shutdown()
        stranger.shutdown()
        reader.stop()


def test_the_pump_applies_size_retention_while_messages_arrive(hub: broker.Endpoint) -> None:
    reader = _reader(hub, **{"spool.segmentBytes": "2k", "spool.retentionBytes": "4k"})
    try:
        start = reader.initialOffset()
        _wait_subscribed(hub)
        _publish(hub, 0, 500)  # about 40 KiB: many segments
        _spooled(reader, 500)
        spool = reader.runtime.spool
        # The pump drops whole old segments by itself (every second), down to the limit.
        wait_for(lambda: spool.start_offset() > 0 and spool.total_bytes <= 6 * 1024, 20)
        assert spool.end_offset() == 500
        # A query still at offset 0 has lost what retention dropped (failOnDataLoss=true).
        with pytest.raises(BrokerDataLossError, match="failOnDataLoss"):
            reader.latestOffset(start, ReadAllAvailable())
    finally:
        reader.stop()


@pytest.mark.parametrize("first_call", ["initialOffset", "latestOffset"])
def test_latest_starts_before_the_subscription_is_seen(
    hub: broker.Endpoint, monkeypatch, first_call: str
) -> None:
    """A peer may publish the moment it sees the reader's subscription, before Spark
    asks for the initial offset (Spark 4.0 and 4.1 ask for it only when planning the
    first batch). ``startingOffsets=latest`` must still read those messages. Fault
    injected: connecting returns only once the peer's messages are in the spool, as a
    loaded machine may schedule it."""
    from broker_spark.reader.in_process import ReaderRuntime

    connect = ReaderRuntime.connect

    def slow_connect(runtime: ReaderRuntime) -> None:
        connect(runtime)
        _wait_subscribed(hub)
        _publish(hub, 0, 30)
        assert runtime.service is not None and runtime.service.pumps[0].wait_appended(30, 20)

    monkeypatch.setattr(ReaderRuntime, "connect", slow_connect)
    reader = _reader(hub)
    try:
        if first_call == "latestOffset":  # Spark 4.0 and 4.1
            end = reader.latestOffset()
            start = reader.initialOffset()
        else:  # Spark 4.2 and later
            start = reader.initialOffset()
            end = reader.latestOffset(start, ReadAllAvailable())
        assert (start, end) == ({"offset": 0}, {"offset": 30})
        assert len(_rows(reader, start, end)) == 30
    finally:
        reader.stop()
    wait_for(lambda: not hub.peers(), 20, "the reader's peering to close")
