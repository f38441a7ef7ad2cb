"""A relay decodes a log reader's ranges into its rows (issue 51's design (a)).

A task of a relay reader (``format=zeek-logs``) sends the relay its converter; the relay
decodes each range with the very converter the task would have built, from the log
schemas its own history holds at the range's first offset, and sends Arrow IPC. Here:
the converter as data and back, the protocol's frames, and, over a real relay on
loopback holding every recording (a real Zeek's logs over Broker and over ZeroMQ), the
rows of every kind of log reader read both ways (decoded by the relay, and by the task
from the records an older relay sends) and found equal; what a relay does when it
cannot decode (its history differs, it fails, the reader's ``mode=FAILFAST`` refuses a
record), and that a reader that asks nothing is sent records as before.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from spark_fixtures import wait_for
from zeek_recordings import LOG_RECORDINGS, ZMQ_LOGS, recording, zmq_messages

from broker_spark.columnar import converter_spec as spec_module
from broker_spark.columnar.converter_spec import (
    ConverterSpecError,
    converter_from_spec,
    converter_spec,
    decodes,
    rows_from_ipc,
    rows_ipc,
    schemas_digest,
)
from broker_spark.columnar.log_converter import LogConverter
from broker_spark.columnar.record_batches import RecordConversionError
from broker_spark.config import TLSSettings
from broker_spark.reader.options import HostPort, parse_reader_options
from broker_spark.reader.relay_fetch import fetch_from_relay
from broker_spark.spark.read.stream import stream_reader
from broker_spark.spark.source import arrow_schema_of
from broker_spark.spark.tables.columns import table_input_schema
from broker_spark.spark.zeek_schema import generic_log_schema, log_columns, zeek_log_schema
from broker_spark.spool import relay_protocol, relay_server, served_rows
from broker_spark.spool.relay_client import SpoolClient
from broker_spark.spool.relay_protocol import (
    ROWS_TARGET,
    Kind,
    RelayProtocolError,
    RelayServerSession,
)
from broker_spark.spool.relay_reader_session import (
    Records,
    RelayClientSession,
    Rows,
    ServerMessage,
)
from broker_spark.spool.relay_server import RelayServer
from broker_spark.spool.schema_history import LogSchemaHistory
from broker_spark.spool.segment import DataLossError
from broker_spark.spool.service import SpoolService
from broker_spark.spool.spool import Spool
from broker_spark.zeek import standard_schema
from broker_spark.zeek.log_batch import read_header
from broker_spark.zeromq.log_receiver import LOG_TOPIC_PREFIX

pytestmark = pytest.mark.timeout(120)

NOW = 1_700_000_000_000_000_000


def _messages() -> list[tuple[str, bytes, str, int]]:
    """Every recording's log messages, one after the other, as a relay spools them."""
    out: list[tuple[str, bytes, str, int]] = []
    for name in LOG_RECORDINGS:
        out += [(t, p, name, NOW + len(out)) for t, p in recording(name).data]
    for frames in zmq_messages(ZMQ_LOGS):
        out.append((LOG_TOPIC_PREFIX + read_header(frames[3]).stream, frames[3], "zmq", NOW))
    return out


class _Relay:
    """A relay's server over a spool holding every recording, with its schema history, in
    this process (real sockets on loopback)."""

    def __init__(self, path: Path, wire: str = "auto") -> None:
        self.spool = Spool(str(path), index_interval=4)
        self.history = LogSchemaHistory(str(path))
        messages = _messages()
        for at in range(0, len(messages), 7):  # appended in steps, as a pump does
            chunk = messages[at : at + 7]
            first = self.spool.append_batch(chunk)
            self.history.observe(first, chunk)
        self.messages = len(messages)
        self.server = RelayServer(
            SpoolService(self.spool, ["zeek/"], history=self.history), wire_compression=wire
        )
        self.port = self.server.serve_tcp("127.0.0.1", 0)

    def close(self) -> None:
        self.server.close()
        self.spool.close()


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Relay]:
    r = _Relay(tmp_path_factory.mktemp("rows") / "spool")
    try:
        yield r
    finally:
        r.close()


def _older_relay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the relay in this process behave as one that knows nothing of ``rows`` (its
    HELLO never sees the field): it sends records, and the task decodes them."""
    hello = RelayServerSession._hello

    def older(self: RelayServerSession, fields: dict[str, Any]) -> Any:
        return hello(self, {k: v for k, v in fields.items() if k != "rows"})

    monkeypatch.setattr(RelayServerSession, "_hello", older)


def _read(port: int, spark_schema: Any, many: bool = True, **options: str) -> pa.Table:
    """Every row a relay reader's tasks read of the whole spool (``many``: partitions of a
    few offsets, so that most start where log schemas are in force; else one)."""
    opts = parse_reader_options(
        {
            "relay": f"127.0.0.1:{port}", "ssl.disable": "true", "format": "zeek-logs",
            "startingOffsets": "earliest", "maxRecordsPerPartition": "9" if many else "100000",
            **options,
        }
    )  # fmt: skip
    schema = arrow_schema_of(spark_schema)
    reader = stream_reader(opts, schema, spark_schema)
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, None)
        batches: list[pa.RecordBatch] = []
        remote = pickle.loads(pickle.dumps(reader))
        parts = reader.partitions(start, end)
        assert len(parts) > 3 if many else len(parts) == 1
        assert all(p.relay is not None for p in parts)
        for part in parts:
            batches += remote.read(pickle.loads(pickle.dumps(part)))
        return pa.Table.from_batches(batches, schema)
    finally:
        reader.stop()


def _readers() -> dict[str, tuple[Any, dict[str, str]]]:
    """Every kind of log reader: generic rows, runs, messages' bytes, and each log's typed
    columns (nested and flat, and as ``mode=FAILFAST``)."""
    out: dict[str, tuple[Any, dict[str, str]]] = {
        "generic": (generic_log_schema(relay=True), {}),
        "runs": (table_input_schema(runs=True), {}),
        "messages": (table_input_schema(runs=True, messages=True), {}),
        "generic-dns": (generic_log_schema(relay=True), {"logs": "dns"}),
    }
    for path in ("conn", "dns", "http", "files"):
        out[f"{path}-nested"] = (zeek_log_schema(path, relay=True), {"logs": path})
        flat = zeek_log_schema(path, "flat", relay=True)
        out[f"{path}-flat"] = (flat, {"logs": path, "columns": "flat"})
    out["http-failfast"] = (
        zeek_log_schema("http", relay=True),
        {"logs": "http", "mode": "FAILFAST"},
    )
    return out


READERS = _readers()


@pytest.mark.parametrize("kind", sorted(READERS))
def test_rows_a_relay_decodes_equal_the_tasks_own(
    relay: _Relay, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    spark_schema, options = READERS[kind]
    before = relay.server.decoded_records
    decoded = _read(relay.port, spark_schema, **options)
    # the relay decoded them; rows of messages' bytes hold nothing decoded: never asked
    assert (relay.server.decoded_records > before) == (kind != "messages")
    assert decoded.num_rows > 0
    _older_relay(monkeypatch)
    before = relay.server.decoded_records
    own = _read(relay.port, spark_schema, **options)
    assert relay.server.decoded_records == before  # the tasks did
    assert decoded.schema == own.schema
    assert decoded.equals(own)
    assert decoded.to_pylist() == own.to_pylist()


def test_rows_compressed_on_the_wire_are_the_same_rows(tmp_path: Path) -> None:
    """A relay compresses rows (lz4) where it compresses records: for readers elsewhere."""
    compressing = _Relay(tmp_path / "spool", wire="always")
    try:
        spark_schema, options = READERS["http-nested"]
        packed = _read(compressing.port, spark_schema, **options)
        assert compressing.server.decoded_records > 0
    finally:
        compressing.close()
    plain = _Relay(tmp_path / "plain", wire="never")
    try:
        plain_rows = _read(plain.port, spark_schema, **options)
        # two spools: only their ids (the ``relay`` column) differ
        assert plain_rows.drop_columns(["relay"]).equals(packed.drop_columns(["relay"]))
    finally:
        plain.close()


def _task_converter(kind: str, schemas: Any = ()) -> LogConverter:
    spark_schema, options = READERS[kind]
    path = options.get("logs")
    known = standard_schema(path) if path else None
    return LogConverter(
        arrow_schema_of(spark_schema),
        log_columns(spark_schema, known.names if known else ()),
        options.get("mode", "PERMISSIVE"),
        [path] if path else None,
        known,
        schemas,
    )


def _fetch(relay: _Relay, converter: LogConverter, digest: str | None, end: int) -> Any:
    return fetch_from_relay(
        HostPort("127.0.0.1", relay.port),
        TLSSettings(disable_ssl=True),
        0,
        end,
        converter=converter_spec(converter),
        schemas=digest,
        retry=0,
    )


def test_a_range_whose_schemas_differ_is_sent_as_records(relay: _Relay) -> None:
    """The relay decodes a range only with the schemas the task has: where its history
    holds others at the range's start, it sends the records (and the task decodes)."""
    converter = _task_converter("http-nested")
    converter.relay = relay.server.service.id  # as a task sets it from its partition
    matching = _fetch(relay, converter, schemas_digest([]), 12)
    assert matching.rows is not None and matching.records == b""
    decoded = [b for frame in matching.rows for b in frame.batches]
    other = _fetch(relay, converter, "not-the-digest", 12)
    assert other.rows is None and other.count == 12
    mine = converter.convert_packed(other.records, other.count)
    assert pa.Table.from_batches([mine]).equals(pa.Table.from_batches(decoded, mine.schema))


def test_a_relay_that_fails_to_decode_sends_the_records(
    relay: _Relay, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault injected into the relay's decoding (a fake, for the fault only): the task
    fetches the records instead and decodes them itself."""

    def broken(self: Any, records: bytes, count: int) -> Any:
        raise MemoryError("injected")

    monkeypatch.setattr(served_rows.RangeRows, "decode", broken)
    fetched = _fetch(relay, _task_converter("generic"), schemas_digest([]), 20)
    assert fetched.rows is None and fetched.count == 20


def test_a_connection_that_breaks_midway_is_made_good_by_the_task(
    relay: _Relay, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A fault injected into the relay (a fake, for the fault only): its connection breaks
    after the first ROWS frame of a range (frames of a few records here); the task has
    given that frame's rows already, fetches the range's records and decodes the rest."""
    monkeypatch.setattr(relay_protocol, "ROWS_TARGET", 20_000)
    rows_frame = RelayServerSession.rows
    sent: list[int] = []

    def breaking(self: RelayServerSession, *args: Any) -> bytes:
        if sent:
            raise ConnectionResetError("injected")
        sent.append(1)
        return rows_frame(self, *args)

    spark_schema, options = READERS["generic"]
    whole = _read(relay.port, spark_schema, many=False, **options)
    monkeypatch.setattr(RelayServerSession, "rows", breaking)
    before = relay.server.decoded_records
    broken = _read(relay.port, spark_schema, many=False, **options)
    assert sent and relay.server.decoded_records > before  # one frame went as rows
    assert "decoding the range's records here" in caplog.text
    assert broken.equals(whole)


def _rows_given_then_past(got: pa.Table, whole: pa.Table, lost: int, logged: str) -> None:
    """``got`` is some of ``whole``'s rows before offset ``lost`` (those a relay sent), then
    all of its rows from ``lost`` on: every row once, none it had not; the log says so."""
    offsets = got.column("offset").to_numpy()
    given = int((offsets < lost).sum())
    assert 0 < given < int((whole.column("offset").to_numpy() < lost).sum())
    tail = whole.filter(pc.greater_equal(whole.column("offset"), lost))
    assert got.equals(pa.concat_tables([whole.slice(0, given), tail]).combine_chunks())
    assert f"failOnDataLoss=false: reading from offset {lost}" in logged


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_records_dropped_while_a_relay_sends_rows_are_data_loss(
    relay: _Relay,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fail_on_data_loss: bool,
) -> None:
    """A fault injected into the relay (a fake, for the fault only): after the first ROWS
    frame of a range, its spool says retention dropped everything before offset ``lost``
    (a reader far behind). The task fails with data loss, or, with ``failOnDataLoss=false``,
    gives the rows it was sent and then the range's rows from ``lost`` on, decoded from the
    records the relay still holds: every row once, none it had not."""
    monkeypatch.setattr(relay_protocol, "ROWS_TARGET", 20_000)
    spark_schema, options = READERS["generic"]
    whole = _read(relay.port, spark_schema, many=False, **options)
    lost = relay.messages - 10
    read_about = relay_server.read_about
    calls: list[int] = []

    def dropping(spool: Any, lo: int, stop: int, budget: int) -> tuple[bytes, int]:
        calls.append(lo)
        if len(calls) == 2:
            assert lo < lost  # the first frame ended before the records said lost
            raise DataLossError(lo, stop, lost)
        return read_about(spool, lo, stop, budget)

    monkeypatch.setattr(relay_server, "read_about", dropping)
    flag = str(fail_on_data_loss).lower()
    if fail_on_data_loss:
        with pytest.raises(DataLossError):
            _read(relay.port, spark_schema, many=False, failOnDataLoss=flag, **options)
        return
    got = _read(relay.port, spark_schema, many=False, failOnDataLoss=flag, **options)
    _rows_given_then_past(got, whole, lost, caplog.text)


def test_failfast_fails_the_task_as_its_own_decoding_would(tmp_path: Path) -> None:
    """A record the reader's ``mode=FAILFAST`` refuses fails the task with the converter's
    own words, whoever decodes."""
    spool_path = tmp_path / "spool"
    with Spool(str(spool_path)) as spool:
        spool.append_batch([("zeek/logs/HTTP::LOG", b"\x01\x02not broker", "zeek", NOW)])
    own = _task_converter("http-failfast")
    with Spool(str(spool_path), readonly=True) as view:
        records = view.read_packed(0, 1)
    with pytest.raises(RecordConversionError) as local:
        own.convert_packed(records, 1)
    spool = Spool(str(spool_path))
    server = RelayServer(SpoolService(spool, ["zeek/"]))
    try:
        port = server.serve_tcp("127.0.0.1", 0)
        with pytest.raises(RecordConversionError) as remote:
            fetch_from_relay(
                HostPort("127.0.0.1", port),
                TLSSettings(disable_ssl=True),
                0,
                1,
                converter=converter_spec(_task_converter("http-failfast")),
                schemas=schemas_digest([]),
                retry=0,
            )
        assert server.decoded_records == 0
    finally:
        server.close()
        spool.close()
    assert str(local.value) in str(remote.value)


def test_a_reader_that_asks_nothing_is_sent_records(relay: _Relay) -> None:
    fetched = fetch_from_relay(
        HostPort("127.0.0.1", relay.port), TLSSettings(disable_ssl=True), 0, 10, retry=0
    )
    assert fetched.rows is None and fetched.count == 10


# --- the converter as data ----------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(READERS))
def test_a_converter_made_from_its_spec_is_the_same_converter(kind: str) -> None:
    schemas = [(("zeek", "HTTP::LOG", "http"), standard_schema("http"))]
    converter = _task_converter(kind, schemas)
    spec = msgpack.unpackb(msgpack.packb(converter_spec(converter)))  # as on the wire
    again = converter_from_spec(spec, schemas)
    for name in ("schema", "columns", "strict", "paths", "known", "zeek_version"):
        assert getattr(again, name) == getattr(converter, name), name
    assert converter_spec(again) == converter_spec(converter)


def test_rows_of_messages_bytes_are_not_worth_a_relay_s_decoding() -> None:
    assert decodes(_task_converter("runs")) and decodes(_task_converter("conn-flat"))
    assert not decodes(_task_converter("messages"))
    assert not decodes(object())


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"version": 99}, "version 99"),
        ({"schema": b"no arrow"}, "cannot be built"),
        ({"roles": {"topic": 5}}, "roles"),
        ({"leaves": [1]}, "leaves"),
        ({"logs": "http"}, "logs"),
        ({"mode": None}, "mode"),
        ({"known": {"stream": "X"}}, "cannot be built"),
    ],
)
def test_a_spec_that_cannot_be_built_says_why(change: dict[str, Any], words: str) -> None:
    spec = {**converter_spec(_task_converter("http-nested")), **change}
    with pytest.raises(ConverterSpecError, match=words):
        converter_from_spec(spec)
    with pytest.raises(ConverterSpecError, match="a map"):
        converter_from_spec([1, 2])


def test_the_digest_tells_schemas_apart_by_their_json() -> None:
    http = standard_schema("http")
    one = [(("zeek", "HTTP::LOG", "http"), http)]
    assert schemas_digest(one) == schemas_digest(list(one))
    assert schemas_digest(one) != schemas_digest([])
    assert schemas_digest(one) != schemas_digest([(("other", "HTTP::LOG", "http"), http)])
    assert schemas_digest(one + [(("z", "DNS::LOG", "dns"), standard_schema("dns"))]) == (
        schemas_digest([(("z", "DNS::LOG", "dns"), standard_schema("dns"))] + one)
    )


def test_rows_travel_as_arrow_ipc_compressed_or_not() -> None:
    batch = pa.record_batch({"a": pa.array(range(1000)), "b": pa.array(["x"] * 1000)})
    for codec in (None, *spec_module.ROWS_CODECS):
        [back] = rows_from_ipc(rows_ipc(batch, codec))
        assert back.equals(batch)
    assert len(rows_ipc(batch, "lz4")) < len(rows_ipc(batch))


# --- the protocol -------------------------------------------------------------------------


def _agreed(rows: bool = True) -> tuple[RelayServerSession, RelayClientSession]:
    server, client = RelayServerSession("spool-1"), RelayClientSession()
    spec = converter_spec(_task_converter("http-nested"))
    [event] = server.receive(client.hello("follow", "task", rows=spec))
    assert event.kind == "hello" and server.rows_spec == spec
    if rows:
        server.serve_rows("none")
    client.receive(server.welcome(0, 100, []))
    assert client.rows is rows
    return server, client


def test_rows_frames_carry_the_range_counts_and_rows() -> None:
    server, client = _agreed()
    [event] = server.receive(client.follow(10, 30, schemas="d1"))
    assert event.fields["schemas"] == "d1"
    assert server.follow(10, event.fields["credit"], 0, 100, 30, rows=True) is None
    assert server.next_range(0, 100) == (10, 30, ROWS_TARGET)
    ipc = rows_ipc(pa.record_batch({"a": [1, 2, 3]}))
    frame = server.rows(10, 12, 3, {"misfits": 1}, ipc, 0.0)
    [got] = client.receive(frame)
    assert got == Rows(10, 12, 3, {"misfits": 1}, ipc)
    frame = server.rows(22, 8, 0, {}, ipc, 0.0)
    assert client.receive(frame) == [Rows(22, 8, 0, {}, ipc)]
    assert not server.following  # the range asked for is complete
    with pytest.raises(ValueError, match="not the next"):
        server.rows(5, 1, 0, {}, ipc, 0.0)


def test_a_follow_of_other_schemas_is_answered_with_records() -> None:
    server, client = _agreed()
    server.receive(client.follow(0, 10, schemas="d1"))
    server.follow(0, 1 << 20, 0, 100, 10, rows=False)
    assert server.next_range(0, 100)[2] < ROWS_TARGET
    with pytest.raises(ValueError, match="ROWS frames"):
        server.rows(0, 10, 0, {}, b"", 0.0)


def test_rows_nobody_agreed_to_are_refused() -> None:
    server, client = _agreed(rows=False)
    assert b"rows" not in server.welcome(0, 100, [])
    server.receive(client.follow(0, 10))
    with pytest.raises(ValueError, match="not built"):
        server.follow(0, 1 << 20, 0, 100, 10, rows=True)
    rogue = RelayServerSession("spool-1")
    rogue.rows_spec, rogue.rows_codec = {}, "none"
    rogue.follow(0, 1 << 20, 0, 100, 10, rows=True)
    with pytest.raises(RelayProtocolError, match="none was agreed"):
        client.receive(rogue.rows(0, 10, 0, {}, b"", 0.0))


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (bytes([Kind.ROWS]) + b"\x00" * 4, "without its header"),
        (bytes([Kind.ROWS]) + (0).to_bytes(8, "big") + (1).to_bytes(4, "big") * 2 + (99).to_bytes(4, "big"), "shorter"),
        (bytes([Kind.ROWS]) + (0).to_bytes(8, "big") + (1).to_bytes(4, "big") * 2 + (1).to_bytes(4, "big") + b"\xc1", "do not decode"),
        (bytes([Kind.ROWS]) + (0).to_bytes(8, "big") + (1).to_bytes(4, "big") * 2 + (5).to_bytes(4, "big") + msgpack.packb({"a": "b"}), "not counts"),
    ],
)  # fmt: skip
def test_a_broken_rows_frame_is_not_the_protocol(body: bytes, words: str) -> None:
    _server, client = _agreed()
    client.follow(0, 10)
    with pytest.raises(RelayProtocolError, match=words):
        client.receive(len(body).to_bytes(4, "big") + body)


def test_a_hello_s_rows_must_be_a_map() -> None:
    client = RelayClientSession()
    with pytest.raises(RelayProtocolError, match="'rows'"):
        RelayServerSession("spool-1").receive(client.hello("follow", rows=[1]))


# --- how many readers a relay decodes for -----------------------------------------------


def test_relay_decode_false_keeps_the_decoding_in_the_tasks(relay: _Relay) -> None:
    spark_schema, options = READERS["dns-nested"]
    before = relay.server.decoded_records
    rows = _read(relay.port, spark_schema, relayDecode="false", **options)
    assert relay.server.decoded_records == before and rows.num_rows > 0


def _follower(relay: _Relay, until: int | None) -> SpoolClient:
    """A task's connection that asked for rows and follows from offset 0 (to ``until``;
    None: live, so its FOLLOW never completes)."""
    client = SpoolClient.tcp("127.0.0.1", relay.port, None)
    spec = converter_spec(_task_converter("generic"))
    client.hello("follow", "task", rows=spec)
    client.follow(0, until, schemas_digest([]))
    return client


def _first_frame(client: SpoolClient) -> Any:
    for _ in range(100):
        for item in client.messages(5.0):
            if not isinstance(item, ServerMessage):
                return item
    raise AssertionError("nothing sent")


def test_a_relay_decodes_for_so_many_readers_and_sends_the_rest_records(
    relay: _Relay,
) -> None:
    """With every decoder taken (a live FOLLOW holds its decoder), a reader is sent
    records and decodes them itself; once a decoder is free, rows again."""
    relay.server.decoders = 1
    try:
        holder = _follower(relay, None)
        try:
            assert isinstance(_first_frame(holder), Rows)
            other = _follower(relay, 5)
            with other:
                assert isinstance(_first_frame(other), Records)
        finally:
            holder.close()
        wait_for(lambda: not relay.server.readers(), 10, "the holder's connection closed")
        with _follower(relay, 5) as again:
            assert isinstance(_first_frame(again), Rows)
    finally:
        relay.server.decoders = 2


def test_a_relay_of_no_decoders_offers_no_rows(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path / "spool"))
    server = RelayServer(SpoolService(spool, ["zeek/"]), decoders=0)
    try:
        port = server.serve_tcp("127.0.0.1", 0)
        with SpoolClient.tcp("127.0.0.1", port, None) as client:
            welcome = client.hello(
                "follow", "task", rows=converter_spec(_task_converter("generic"))
            )
        assert "rows" not in welcome
    finally:
        server.close()
        spool.close()
    with pytest.raises(ValueError, match="decoders must be 0 or more"):
        RelayServer(SpoolService(spool, ["zeek/"]), decoders=-1)


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_records_dropped_before_a_broken_connection_is_made_good_are_data_loss(
    relay: _Relay,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fail_on_data_loss: bool,
) -> None:
    """Faults injected into the relay (fakes, for the faults only): its connection breaks
    after the first ROWS frame of a range, and by the time the task fetches the rest as
    records, retention has dropped everything before offset ``lost``. The task fails with
    data loss, or, with ``failOnDataLoss=false``, gives the frame's rows and then the
    range's rows from ``lost`` on: every row once, none it had not."""
    monkeypatch.setattr(relay_protocol, "ROWS_TARGET", 20_000)
    spark_schema, options = READERS["generic"]
    whole = _read(relay.port, spark_schema, many=False, **options)
    lost = relay.messages - 10
    rows_frame, read_about = RelayServerSession.rows, relay_server.read_about
    sent: list[int] = []
    broke: list[int] = []

    def breaking(self: RelayServerSession, *args: Any) -> bytes:
        if sent:
            broke.append(1)
            raise ConnectionResetError("injected")
        sent.append(1)
        return rows_frame(self, *args)

    def dropping(spool: Any, lo: int, stop: int, budget: int) -> tuple[bytes, int]:
        if broke and lo < lost:
            raise DataLossError(lo, stop, lost)
        return read_about(spool, lo, stop, budget)

    monkeypatch.setattr(RelayServerSession, "rows", breaking)
    monkeypatch.setattr(relay_server, "read_about", dropping)
    flag = str(fail_on_data_loss).lower()
    if fail_on_data_loss:
        with pytest.raises(DataLossError):
            _read(relay.port, spark_schema, many=False, failOnDataLoss=flag, **options)
        assert broke
        return
    got = _read(relay.port, spark_schema, many=False, failOnDataLoss=flag, **options)
    assert broke and "decoding the range's records here" in caplog.text
    _rows_given_then_past(got, whole, lost, caplog.text)
