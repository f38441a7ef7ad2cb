"""broker-spark as a Zeek cluster's logger on the ZeroMQ backend: the batch codec and the PULL.

The recording ``zeek-zmq-logs-http-methods`` holds every multipart message a real
Zeek (9.1.0-dev) PUSHed to a logger while reading a trace, and the JSON logs the
same Zeek wrote itself: each record must render as exactly Zeek's line, in order,
and encoding the decoded batches again must give the recorded bytes. The receiver
is a real PULL socket on loopback fed by a real pyzmq PUSH, as Zeek's own is.
"""

from __future__ import annotations

import logging
import struct
import time

import pytest
import zmq
from hypothesis import given
from hypothesis import strategies as st
from zeek_recordings import ZMQ_LOGS, zmq_local_lines, zmq_messages

from broker_spark.data.binary import decode
from broker_spark.errors import DecodeError, ShutdownError
from broker_spark.zeek import LogField, LogSchema
from broker_spark.zeek.log_batch import (
    BatchTranslator,
    decode_batch,
    encode_batch,
    read_header,
    record_ends,
)
from broker_spark.zeek.log_lines import LogLines
from broker_spark.zeek.logs import Batch, LogWrite, as_message
from broker_spark.zeek.undecodable import (
    MAGIC,
    UNDECODABLE_TOPIC,
    decode_again,
    is_undecodable,
    pack_undecodable,
    unpack_undecodable,
)
from broker_spark.zeromq.curve import CurveConfigError, CurveKeys, generate_keypair
from broker_spark.zeromq.log_receiver import ZeroMQLogReceiver

pytestmark = pytest.mark.timeout(60)

PATHS = ("conn", "files", "http", "weird", "reporter", "packet_filter")


def _batches() -> list[bytes]:
    return [m[3] for m in zmq_messages(ZMQ_LOGS)]


def _lines_by_path(found: list[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path, line in found:
        out.setdefault(path, []).append(line)
    return out


def test_every_recorded_batch_decodes_and_encodes_back_to_its_bytes() -> None:
    messages = zmq_messages(ZMQ_LOGS)
    assert len(messages) == 63
    for frames in messages:
        assert frames[0] == b"log-write" and frames[2] == b"zeek-bin-serializer"
        header, records = decode_batch(frames[3])
        again = encode_batch(
            header.schema, records, writer=header.writer, filter_name=header.filter
        )
        assert again == frames[3], header.path
    header, _ = decode_batch(messages[0][3])
    assert (header.stream, header.writer, header.filter, header.path) == (
        "Reporter::LOG",
        "Log::WRITER_ASCII",
        "default",
        "reporter",
    )
    assert header.schema.names == ("ts", "level", "message", "location")


def test_the_scanner_reads_zeromq_batches_as_zeeks_lines_in_order() -> None:
    """Batches as they arrive (the spool keeps them so), beside Broker's log messages."""
    sender = zmq_messages(ZMQ_LOGS)[0][1].decode()
    batches = _batches()
    decoder = LogLines()
    # one batch whose records are cut short: it costs only its own records
    header = read_header(batches[5])
    broken = batches[5][: header.size + 4] + b"\xff" * 20
    by_path = _lines_by_path(decoder.lines([(b, sender) for b in [broken, *batches]]))
    for path in PATHS:
        assert by_path[path] == zmq_local_lines(ZMQ_LOGS, path), path
    assert decoder.undecodable == 1 and decoder.unnamed == 0
    one = LogLines(["conn"])  # one log: its lines alone, fast or record by record
    assert [line for _p, line in one.lines([(b, sender) for b in batches])] == zmq_local_lines(
        ZMQ_LOGS, "conn"
    )


def test_translated_batches_render_as_the_line_zeek_wrote_in_order() -> None:
    sender = zmq_messages(ZMQ_LOGS)[0][1].decode()
    translator = BatchTranslator()
    messages = []
    for batch in _batches():
        _header, out = translator.translate(batch, sender)
        messages.extend((payload, sender) for payload in out)
    decoder = LogLines()
    by_path = _lines_by_path(decoder.lines(messages))
    assert sorted(by_path) == sorted(PATHS)
    for path in PATHS:  # every line, also those Zeek wrote before any logger was connected
        assert by_path[path] == zmq_local_lines(ZMQ_LOGS, path), path
    assert decoder.undecodable == 0 and decoder.unnamed == 0


def test_translated_messages_are_what_a_zeek_sends_over_broker() -> None:
    batches = _batches()
    translator = BatchTranslator()
    header, first = translator.translate(batches[0], "zeek-1")
    assert len(first) == 2  # the log's columns are new: a LogCreate, then the Batch
    create = as_message(decode(first[0]))
    assert create.schema().fields == header.schema.fields
    batch = Batch(decode(first[1]))
    writes = batch.messages()
    _, records = decode_batch(batches[0])
    assert [w.values() for w in writes] == records
    assert all(isinstance(w, LogWrite) and w.path() == "reporter" for w in writes)
    # the same columns again from the same sender: no LogCreate; from another: one
    assert len(translator.translate(batches[0], "zeek-1")[1]) == 1
    assert len(translator.translate(batches[0], "zeek-2")[1]) == 2


def _conn_schema() -> tuple[LogSchema, list[list]]:
    records, schema = [], None
    for batch in _batches():
        header, found = decode_batch(batch)
        if header.path == "conn":
            schema = header.schema
            records.extend(found)
    assert schema is not None
    return schema, records


def test_a_large_batch_is_split_with_numpy_as_record_by_record(monkeypatch) -> None:
    from broker_spark.zeek import log_batch

    schema, records = _conn_schema()
    batch = encode_batch(schema, (records * 30)[:1000])
    header = read_header(batch)
    fast = record_ends(batch, header)
    assert len(fast) == 1000 and fast[-1] == len(batch)
    monkeypatch.setattr(log_batch, "VECTOR_MIN", 10**9)
    assert record_ends(batch, header) == fast
    monkeypatch.undo()
    # a value that looks like a record's start (the ts header inside a string) does not confuse it
    fields = (LogField.of("ts", "time"), LogField.of("s", "string"))
    tricky = LogSchema("T::LOG", "t", fields)
    fake_start = struct.pack(">iiB", 5, 0, 1) + struct.pack(">d", 1.0)
    rows = [[float(i), fake_start.decode("latin-1") if i % 3 else "x"] for i in range(40)]
    data = encode_batch(tricky, rows)
    _header, back = decode_batch(data)
    assert [r[1] for r in back] == [r[1] for r in rows]


def test_runs_of_batches_are_read_at_once_look_alikes_and_bad_batches_included() -> None:
    """Consecutive batches of one log are scanned as one run (their records found in one
    pass); a batch holding a value that looks like a record's start is chained, and a
    malformed batch among them costs only itself."""
    from broker_spark.zeek import log_scan

    schema, records = _conn_schema()
    fields = (LogField.of("ts", "time"), LogField.of("s", "string"))
    tricky = LogSchema("T::LOG", "t", fields)
    fake = (struct.pack(">iiB", 5, 0, 1) + struct.pack(">d", 1.0)).decode("latin-1")
    plain = [encode_batch(schema, (records * 3)[i : i + 40]) for i in range(0, 120, 40)]
    odd = [encode_batch(tricky, [[float(i), fake if i % 3 else "x"] for i in range(30)])] * 3
    broken = plain[1][: len(plain[1]) - 50] + b"\x00" * 50  # same header, records cut
    batches = [*plain, broken, *plain, *odd]
    expected = [line for b in batches if b is not broken for line in _translated_lines(b)]
    decoder = LogLines()
    scanner = decoder.scanner
    runs = []
    original = scanner._batch_run

    def spy(*args, **kwargs):
        taken = original(*args, **kwargs)
        runs.append(taken)
        return taken

    scanner._batch_run = spy
    got = [line for _path, line in decoder.lines([(b, "zeek-1") for b in batches])]
    assert got == expected
    assert decoder.undecodable == 1 and max(runs) >= 3
    assert log_scan.RUN_BATCHES >= 2


def _translated_lines(batch: bytes) -> list[str]:
    """The lines of a batch as the reference path gives them (through Broker messages)."""
    _header, messages = BatchTranslator().translate(batch, "zeek-1")
    return [line for _path, line in LogLines().lines([(m, "zeek-1") for m in messages])]


@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**64 - 1),
            st.one_of(st.none(), st.text(max_size=20)),
            st.lists(st.text(max_size=5), max_size=4, unique=True),
        ),
        max_size=40,
    )
)
def test_batches_of_any_records_round_trip(rows) -> None:  # Hypothesis: the codec
    from broker_spark.data.types import Count

    fields = (
        LogField.of("n", "count"),
        LogField.of("s", "string", optional=True),
        LogField.of("v", "vector of string"),
    )
    schema = LogSchema("H::LOG", "h", fields)
    records = [[Count(n), s, tuple(v)] for n, s, v in rows]
    data = encode_batch(schema, records)
    header, back = decode_batch(data)
    assert header.schema.fields == fields and back == records


@pytest.mark.parametrize(
    "cut",
    [b"", b"\x00\x00\x00\xff", None],
)
def test_a_malformed_batch_is_a_clear_error(cut) -> None:
    batch = _batches()[0]
    data = batch[: len(batch) - 3] if cut is None else cut
    with pytest.raises(DecodeError, match="log batch"):
        decode_batch(data)
    header = read_header(batch)
    huge = batch[: header.size] + struct.pack(">I", 2**31) + batch[header.size + 4 :]
    with pytest.raises(DecodeError, match="do not fit"):
        record_ends(huge, header)


def _push(endpoint: str, curve: CurveKeys | None = None) -> tuple[zmq.Context, zmq.Socket]:
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.linger = 0
    if curve is not None:
        curve.configure_client(push)
    push.connect(endpoint)
    return ctx, push


def _take_all(receiver: ZeroMQLogReceiver, count: int, timeout: float = 10) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got.extend(receiver.take(8192, 0.2))
    return got


def test_the_pull_socket_receives_what_zeek_pushed_and_keeps_bad_messages(caplog) -> None:
    """Nothing is dropped at the door: a message that does not decode (one frame, another
    serializer, a batch whose header is cut) is handed on as an undecodable record, with
    its frames, its source and why, in the order it arrived."""
    messages = zmq_messages(ZMQ_LOGS)
    with ZeroMQLogReceiver("tcp://127.0.0.1:0") as receiver:
        ctx, push = _push(receiver.endpoint)
        try:
            push.send_multipart([b"junk"])
            push.send_multipart([b"log-write", b"n", b"broker-json-v1", b"{}"])
            for frames in messages:
                push.send_multipart(frames)
            push.send_multipart([b"log-write", b"n", b"zeek-bin-serializer", b"\x00\x00"])
            with caplog.at_level(logging.WARNING):
                got = _take_all(receiver, len(messages) + 3)
        finally:
            push.close(0)
            ctx.term()
        assert receiver.received == len(messages) + 3 and receiver.rejected == 3
        assert "does not decode (1 frames, a log message has 4); kept" in caplog.text
    kept = [unpack_undecodable(p) for t, p, _s in got if t == UNDECODABLE_TOPIC]
    assert [k.frames for k in kept] == [
        (b"junk",),
        (b"log-write", b"n", b"broker-json-v1", b"{}"),
        (b"log-write", b"n", b"zeek-bin-serializer", b"\x00\x00"),
    ]
    assert {k.source for k in kept} == {"zeromq-logs"}
    assert "serializer b'broker-json-v1'" in kept[1].reason
    assert all(decode_again(k) is None for k in kept)  # still undecodable today
    good = [(t, p, s) for t, p, s in got if t != UNDECODABLE_TOPIC]
    assert [p for _t, p, _s in good] == [m[3] for m in messages]  # as they arrived
    topics = {t for t, _p, _s in good}
    assert "zeek/logs/Conn::LOG" in topics and all(t.startswith("zeek/logs/") for t in topics)
    assert {s for _t, _p, s in good} == {messages[0][1].decode()}
    by_path = _lines_by_path(LogLines().lines([(p, s) for _t, p, s in good]))
    for path in PATHS:
        assert by_path[path] == zmq_local_lines(ZMQ_LOGS, path)


def test_a_kept_batch_decodes_again_where_its_serializer_is_known() -> None:
    """A newer Zeek's serializer name is kept with the batch, so a broker-spark that knows
    it reads the batch from the spool as the record a relay makes of a batch today."""
    frames = zmq_messages(ZMQ_LOGS)[0]
    renamed = [frames[0], frames[1], b"zeek-bin-serializer-v2", frames[3]]
    kept = unpack_undecodable(pack_undecodable("zeromq-logs", "another serializer", renamed))
    assert decode_again(kept) is None
    topic, batch = decode_again(kept, (b"zeek-bin-serializer-v2",)) or ("", b"")
    assert batch == frames[3] and topic == "zeek/logs/" + read_header(frames[3]).stream
    assert not is_undecodable(frames[3]) and is_undecodable(pack_undecodable("x", "y", []))
    with pytest.raises(DecodeError):
        unpack_undecodable(MAGIC + b"\xc1")


def test_a_finished_receiver_hands_over_what_it_read_and_then_ends() -> None:
    """A planned stop: after ``finish`` nothing more is taken from the network, and
    everything read is still handed out. Zeek's PUSH (not ``immediate``, as Zeek's
    default) then sends its batches round robin: the other logger's share to it, the
    stopped one's kept in the sender's queue until it is back."""
    messages = zmq_messages(ZMQ_LOGS)
    receiver = ZeroMQLogReceiver("tcp://127.0.0.1:0")
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    other = ctx.socket(zmq.PULL)
    try:
        other_at = other.bind_to_random_port("tcp://127.0.0.1")
        push.connect(receiver.endpoint)
        deadline = time.monotonic() + 10
        while receiver.received == 0 and time.monotonic() < deadline:
            push.send_multipart(messages[0])
            time.sleep(0.05)
        for frames in messages:
            push.send_multipart(frames)
        time.sleep(0.3)
        receiver.finish()
        read = receiver.received
        got = []
        with pytest.raises(ShutdownError):
            while True:
                got.extend(receiver.take(1000, 1.0))
        assert len(got) == read > len(messages)
        push.connect(f"tcp://127.0.0.1:{other_at}")
        time.sleep(0.3)
        for frames in messages:  # the sender keeps what it routes to the stopped one
            push.send_multipart(frames, zmq.NOBLOCK)
        taken = 0
        while other.poll(1000):
            other.recv_multipart()
            taken += 1
        assert 0 < taken < len(messages) and receiver.received == read
        with ZeroMQLogReceiver(receiver.endpoint) as again:  # started again: it gets them
            rest = _take_all(again, len(messages) - taken)
        assert taken + len(rest) == len(messages)
    finally:
        push.close(0)
        other.close(0)
        ctx.term()
        receiver.close()


def test_take_stamped_and_close() -> None:
    receiver = ZeroMQLogReceiver("tcp://127.0.0.1:0")
    ctx, push = _push(receiver.endpoint)
    try:
        push.send_multipart(zmq_messages(ZMQ_LOGS)[0])
        items: list = []
        deadline = time.monotonic() + 10
        while not items and time.monotonic() < deadline:
            items = receiver.take_stamped(100, 0.2, lambda: 12345)
        assert [len(i) for i in items] == [4] and items[0][3] == 12345
    finally:
        push.close(0)
        ctx.term()
        receiver.close()
    from broker_spark.errors import ShutdownError

    with pytest.raises(ShutdownError):
        receiver.take(1, 0.1)
    receiver.close()  # idempotent


def test_binding_a_taken_port_is_a_clear_error() -> None:
    from broker_spark.zeromq.log_receiver import ZeroMQBindError

    with (
        ZeroMQLogReceiver("tcp://127.0.0.1:0") as first,
        pytest.raises(ZeroMQBindError, match="cannot bind the log PULL socket"),
    ):
        ZeroMQLogReceiver(first.endpoint)


def _keys() -> CurveKeys:
    server, client = generate_keypair(), generate_keypair()
    return CurveKeys(server["public"], server["secret"], client["public"], client["secret"])


def test_curve_logs_from_a_client_with_the_shared_keys() -> None:
    keys = _keys()
    with ZeroMQLogReceiver("tcp://127.0.0.1:0", curve=keys) as receiver:
        assert receiver.curve
        ctx, push = _push(receiver.endpoint, keys)
        try:
            push.send_multipart(zmq_messages(ZMQ_LOGS)[0])
            assert len(_take_all(receiver, 1)) == 1
        finally:
            push.close(0)
            ctx.term()


@pytest.mark.parametrize("wrong", ["client", "server", "plain"])
def test_curve_refuses_a_wrong_key_with_a_clear_warning(wrong, caplog) -> None:
    keys = _keys()
    other = _keys()
    client = {
        "client": CurveKeys(
            keys.server_publickey, "", other.client_publickey, other.client_secretkey
        ),
        "server": CurveKeys(
            other.server_publickey, "", keys.client_publickey, keys.client_secretkey
        ),
        "plain": None,
    }[wrong]
    with (
        caplog.at_level(logging.WARNING),
        ZeroMQLogReceiver("tcp://127.0.0.1:0", curve=keys) as receiver,
    ):
        ctx, push = _push(receiver.endpoint, client)
        try:
            push.send_multipart(zmq_messages(ZMQ_LOGS)[0])
            deadline = time.monotonic() + 10
            while not receiver.refused and time.monotonic() < deadline:
                assert receiver.take(10, 0.1) == []
        finally:
            push.close(0)
            ctx.term()
        assert receiver.refused >= 1 and receiver.received == 0
    if wrong == "client":
        assert f"its CURVE public key {other.client_publickey} is not" in caplog.text
    else:
        assert "the handshake with a client" in caplog.text


def test_curve_keys_follow_zeeks_rules() -> None:
    keys = _keys()
    env = {
        "ZEEK_CLUSTER_BACKEND_ZEROMQ_CURVE_SERVER_PUBLICKEY": keys.server_publickey,
        "ZEEK_CLUSTER_BACKEND_ZEROMQ_CURVE_SERVER_SECRETKEY": keys.server_secretkey,
        "ZEEK_CLUSTER_BACKEND_ZEROMQ_CURVE_CLIENT_PUBLICKEY": keys.client_publickey,
        "ZEEK_CLUSTER_BACKEND_ZEROMQ_CURVE_CLIENT_SECRETKEY": keys.client_secretkey,
    }
    assert CurveKeys.resolve(None, env) == keys
    assert CurveKeys.resolve(keys, {}) == keys
    with pytest.raises(CurveConfigError, match="both as options and in"):
        CurveKeys.resolve(keys, env)
    with pytest.raises(CurveConfigError, match="40 characters"):
        CurveKeys("short").check()
    with pytest.raises(CurveConfigError, match="not the public key of server_secretkey"):
        CurveKeys(_keys().server_publickey, keys.server_secretkey).check()
    with pytest.raises(CurveConfigError, match="needs server_secretkey and client_publickey"):
        ZeroMQLogReceiver(
            "tcp://127.0.0.1:0", curve=CurveKeys(server_secretkey=keys.server_secretkey)
        )
    assert "secret" not in repr(keys).replace(
        "secretkey", ""
    ) and keys.server_secretkey not in repr(keys)


def test_spark_options_name_what_is_wrong() -> None:
    from broker_spark.reader.connect import open_log_receiver
    from broker_spark.reader.options import (
        BrokerOptionError,
        parse_reader_options,
        parse_writer_options,
    )

    logs = {"format": "zeek-logs", "zeromq.logs": "tcp://127.0.0.1:0"}
    options = parse_reader_options(logs)
    assert options.connection.zeromq.logs == "tcp://127.0.0.1:0"
    receiver = open_log_receiver(options.connection)
    try:
        taken = parse_reader_options({**logs, "zeromq.logs": receiver.endpoint})
        with pytest.raises(BrokerOptionError, match="option zeromq.logs=.*cannot bind"):
            open_log_receiver(taken.connection)
    finally:
        receiver.close()
    with pytest.raises(BrokerOptionError, match="applies to format=zeek-logs only"):
        parse_reader_options({"topics": "x", "zeromq.logs": "tcp://127.0.0.1:1"})
    with pytest.raises(BrokerOptionError, match="leave out listen"):
        parse_reader_options({**logs, "peer": "127.0.0.1:9999"})
    with pytest.raises(BrokerOptionError, match="expected a ZeroMQ endpoint"):
        parse_reader_options({**logs, "zeromq.logs": "127.0.0.1:5557"})
    proxy = parse_reader_options({"topics": "z", "zeromq.proxy": "manager"}).connection.zeromq
    assert (proxy.xsub, proxy.xpub) == ("tcp://manager:5555", "tcp://manager:5556")
    both = parse_writer_options({"topic": "z", "zeromq.proxy": "tcp://a:1,tcp://b:2"})
    assert (both.connection.zeromq.xsub, both.connection.zeromq.xpub) == ("tcp://a:1", "tcp://b:2")
    with pytest.raises(BrokerOptionError, match="give the other too"):
        parse_writer_options({"topic": "z", "zeromq.connectXsubEndpoint": "tcp://a:1"})
    with pytest.raises(BrokerOptionError, match="is for reading"):
        parse_writer_options({"topic": "z", "zeromq.logs": "tcp://a:1"})
    with pytest.raises(BrokerOptionError, match="40 characters") as failure:
        parse_reader_options({**logs, "zeromq.curveServerSecretKey": "not-a-key"})
    assert "not-a-key" not in str(failure.value)
    keys = _keys()  # the options named after Zeek's make the logger a CURVE server
    curve = {
        "zeromq.curveServerSecretKey": keys.server_secretkey,
        "zeromq.curveClientPublicKey": keys.client_publickey,
    }
    receiver = open_log_receiver(parse_reader_options({**logs, **curve}).connection)
    try:
        assert receiver.curve
    finally:
        receiver.close()
    with pytest.raises(BrokerOptionError, match="needs server_secretkey and client_publickey"):
        open_log_receiver(
            parse_reader_options({**logs, **dict(list(curve.items())[:1])}).connection
        )
    with pytest.raises(BrokerOptionError, match="applies with zeromq.logs or zeromq.proxy"):
        parse_reader_options({"topics": "t", "peer": "h:1", **curve})
