"""A relay serves a reader of some Zeek logs only those logs' records.

A ``format=zeek-logs`` reader with ``logs`` (one pipeline table, one
``write_zeek_tables`` restricted to some logs) names them in its HELLO; the relay
then sends only the records holding those logs (KEPT frames: the offsets still
advance over the rest), telling a message's logs from its first bytes
(``zeek/log_paths.message_logs``). Here: that telling against the decoded messages
of a real Zeek's recordings (Broker and ZeroMQ), the filter, the protocol, and a
Spark relay reader (its tasks and the driver, inline) reading the same rows from a
relay that narrows and from one that does not (an older relay: the reader filters
itself), while the relay sends a fraction of the records.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import wait_for
from test_spark_relay import Relay
from zeek_recordings import LOG_RECORDINGS, ZMQ_LOGS, recording, zmq_messages

from broker_spark import zeek
from broker_spark.data.binary import decode, encode
from broker_spark.data.msgpack_records import pack_record, unpack_records
from broker_spark.data.types import Count
from broker_spark.reader.options import parse_reader_options
from broker_spark.spark.read.stream import stream_reader
from broker_spark.spark.source import arrow_schema_of
from broker_spark.spark.zeek_schema import generic_log_schema
from broker_spark.spool import relay_protocol
from broker_spark.spool.relay_protocol import (
    PROTOCOL_VERSION,
    Kind,
    RelayServerSession,
    encode_message,
)
from broker_spark.spool.relay_reader_session import (
    RelayClientSession,
)
from broker_spark.spool.served_records import keep_records, served
from broker_spark.zeek import Batch, LogWrite, standard_schema
from broker_spark.zeek.log_batch import read_header
from broker_spark.zeek.log_paths import message_logs

pytestmark = pytest.mark.timeout(120)


def _decoded_logs(payload: bytes) -> frozenset[str]:
    """The logs of a Broker message, by decoding it whole (the oracle)."""
    _version, kind, content = decode(payload)
    if kind == Count(5):  # a Batch
        return frozenset(p for item in content for p in _decoded_logs(encode(item)))
    if kind == Count(3):  # a LogWrite: stream, writer, path, record
        return frozenset((content[2],))
    if kind == Count(2):  # a LogCreate
        return frozenset((zeek.LogCreate(decode(payload)).path(),))
    return frozenset()


@pytest.mark.parametrize("name", LOG_RECORDINGS)
def test_every_recorded_message_tells_its_logs(name: str) -> None:
    data = recording(name).data
    assert data
    for _topic, payload in data:
        assert message_logs(payload) == _decoded_logs(payload)
    assert {p for _t, payload in data for p in message_logs(payload) or ()} >= set(
        recording(name).writes
    )


def test_zeromq_log_batches_tell_their_log() -> None:
    frames = list(zmq_messages(ZMQ_LOGS))
    assert frames
    for f in frames:
        assert message_logs(f[3]) == frozenset((read_header(f[3]).path,))


def test_a_batch_of_several_logs_names_them_all_and_unknown_bytes_are_served() -> None:
    conn, dns = standard_schema("conn"), standard_schema("dns")
    base = recording("zeek-logs-http-methods")
    one = zeek.decode_values(base.writes["conn"][0])
    mixed = Batch(
        LogWrite.of(conn, one),
        LogWrite.of(conn, one),
        LogWrite("DNS::LOG", "Log::WRITER_ASCII", "dns", LogWrite.of(conn, one).serial_data()),
    )
    assert message_logs(encode(mixed)) == {"conn", "dns"}
    assert dns.path == "dns"
    assert message_logs(encode(zeek.Event("ping", Count(1)))) == frozenset()
    broken = encode(Batch(LogWrite.of(conn, one)))[:-40]  # cut inside its path or record
    assert message_logs(broken[:60]) is None or "conn" in message_logs(broken[:60])


def _records(payloads: list[bytes]) -> bytes:
    return b"".join(pack_record("zeek/logs/x", p, "s", 7, i) for i, p in enumerate(payloads))


def _recorded_stream() -> tuple[bytes, list[frozenset[str]]]:
    data = recording("zeek-logs-http-methods").data
    logs = [message_logs(p) or frozenset() for _t, p in data]
    return _records([p for _t, p in data]), logs


def test_keep_records_keeps_the_records_holding_the_logs() -> None:
    stream, logs = _recorded_stream()
    kept, count = keep_records(stream, None, ("http",))
    offsets = [r.offset for r in unpack_records(kept)]
    assert offsets == [i for i, found in enumerate(logs) if "http" in found]
    assert count == len(offsets) and 0 < count < len(logs)
    both, _n = keep_records(stream, ("zeek/logs/",), ("http", "conn"))
    assert [r.offset for r in unpack_records(both)] == [
        i for i, found in enumerate(logs) if found & {"http", "conn"}
    ]
    assert keep_records(stream, ("zeek/other/",), ("http",)) == (b"", 0)
    # an older relay serves everything and echoes no logs: the reader filters itself
    assert served({}, None, ("http",), stream, len(logs)) == (kept, count)
    assert served({"logs": ["http"]}, None, ("http",), kept, count) == (kept, count)


def test_the_protocol_serves_a_hello_s_logs_as_kept_frames() -> None:
    server = RelayServerSession("spool-1")
    hello = encode_message(
        Kind.HELLO, {"version": PROTOCOL_VERSION, "role": "follow", "name": "t", "logs": ["conn"]}
    )
    server.receive(hello)
    assert server.served_logs == ("conn",) and server.narrowed
    client = RelayClientSession()
    client.hello("follow", "t", logs=["conn"])
    [welcome] = client.receive(server.welcome(0, 10, []))
    assert welcome.fields["logs"] == ["conn"]
    with pytest.raises(ValueError):
        server.records(0, 10, b"", 0.0)  # a narrowed reader gets KEPT frames only
    bad = encode_message(Kind.HELLO, {"version": PROTOCOL_VERSION, "role": "follow", "logs": "x"})
    with pytest.raises(relay_protocol.RelayProtocolError):
        RelayServerSession("spool-1").receive(bad)


def _read_all(port: int, partition_data: str, **options: str) -> list[tuple[Any, ...]]:
    opts = parse_reader_options(
        {
            "relay": f"127.0.0.1:{port}", "ssl.disable": "true", "format": "zeek-logs",
            "startingOffsets": "earliest", "partitionData": partition_data, **options,
        }
    )  # fmt: skip
    spark_schema = generic_log_schema(relay=True)
    reader = stream_reader(opts, arrow_schema_of(spark_schema), spark_schema)
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, None)
        rows: list[tuple[Any, ...]] = []
        remote = pickle.loads(pickle.dumps(reader))
        for part in reader.partitions(start, end):
            for batch in remote.read(pickle.loads(pickle.dumps(part))):
                columns = [
                    batch.column(c).to_pylist() for c in ("_path", "offset", "record", "log")
                ]
                rows += zip(*columns, strict=True)
        [entry] = end["relays"].values()
        rows.append(("end", entry["offset"]))
        return sorted(rows, key=repr)
    finally:
        reader.stop()


@pytest.mark.parametrize("partition_data", ["auto", "inline"])
def test_a_one_log_reader_fetches_one_log_and_reads_what_it_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, partition_data: str
) -> None:
    """A reader of ``logs=http`` over a relay holding a whole recording: the relay sends
    it only the messages holding http records, its rows (and its end offset: the
    spool's) are those it reads from a relay that serves everything (an older relay,
    which does not know the HELLO's ``logs``: the reader leaves the rest out itself)."""
    rec = recording("zeek-logs-http-methods")
    relay = Relay(tmp_path / "relay")
    try:
        relay.publisher.publish_encoded(rec.data)
        spool = relay.node.service.spool
        wait_for(lambda: spool.end_offset() >= len(rec.data), 30, "the recording spooled")
        server = relay.node.server
        narrowed = _read_all(relay.port, partition_data, logs="http")
        sent = server.served_records
        http_rows = [r for r in narrowed if r[0] == "http"]
        assert len(http_rows) == len(rec.local_lines("http"))
        assert ("end", len(rec.data)) in narrowed  # offsets went on over the rest
        holding = sum("http" in (message_logs(p) or ()) for _t, p in rec.data)
        fetches = 2 if partition_data == "inline" else 1  # inline: the driver fetches
        assert 0 < sent <= holding * fetches < len(rec.data)

        def older(self: RelayServerSession, fields: dict[str, Any]) -> Any:
            fields = {k: v for k, v in fields.items() if k != "logs"}
            return _hello(self, fields)

        _hello = RelayServerSession._hello
        monkeypatch.setattr(RelayServerSession, "_hello", older)
        before = server.served_records
        assert _read_all(relay.port, partition_data, logs="http") == narrowed
        assert server.served_records - before >= len(rec.data)  # it sent every record
    finally:
        relay.close()
