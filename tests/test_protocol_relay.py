"""The spool protocol's sessions, without sockets: what each side sends and accepts."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_spark.protocol.framing import encode_frame
from broker_spark.spool.relay_protocol import (
    FRAME_TARGET,
    HEARTBEAT_INTERVAL,
    Kind,
    RelayProtocolError,
    RelayServerSession,
)
from broker_spark.spool.relay_reader_session import (
    Records,
    RelayClientSession,
    ServerMessage,
)


def _pair(local: bool = False) -> tuple[RelayServerSession, RelayClientSession]:
    return RelayServerSession("spool-1", local=local), RelayClientSession(credit=4096)


def _welcomed(
    role: str = "follow", **hello: object
) -> tuple[RelayServerSession, RelayClientSession]:
    server, client = _pair(local=role == "attach")
    events = server.receive(client.hello(role, "test", **hello))
    assert [e.kind for e in events] == ["hello"]
    [welcome] = client.receive(server.welcome(10, 20, []))
    assert isinstance(welcome, ServerMessage) and welcome.fields["relay"] == "spool-1"
    return server, client


def test_a_follow_streams_records_within_the_credit_and_in_order() -> None:
    server, client = _welcomed()
    [event] = server.receive(client.follow(12))
    assert event.kind == "follow" and event.fields["from"] == 12
    assert server.follow(12, event.fields["credit"], 10, 20) is None
    got: list[int] = []
    sent = 0
    while (span := server.next_range(10, 20)) is not None:
        lo, stop, budget = span
        assert stop == 20 and budget == 4096 - sent
        count = min(stop - lo, -(-budget // 1000))  # records of 1000 bytes, as a shell reads
        frame = server.records(lo, count, b"r" * 1000 * count, now=0.0)
        sent += 1000 * count
        [records] = client.receive(frame)
        assert isinstance(records, Records) and records.first == lo
        got.extend(range(lo, lo + records.count))
    assert sent <= 4096 + 1000  # the credit (the last record may round it up)
    assert got == list(range(12, 12 + len(got))) and got
    credit = client.took(sent)
    assert credit is not None
    server.receive(credit)
    assert server.next_range(10, 20) is not None  # room again


def test_following_a_range_stops_at_its_end() -> None:
    server, client = _welcomed()
    [event] = server.receive(client.follow(10, until=13))
    assert event.fields["until"] == 13
    assert server.follow(10, 1 << 20, 10, 20, until=13) is None
    lo, stop, _budget = server.next_range(10, 20)
    assert (lo, stop) == (10, 13)
    client.receive(server.records(10, 3, b"x" * 30, now=0.0))
    assert server.next_range(10, 20) is None and not server.following
    assert client.next == 13


def test_offsets_outside_the_spool_get_errors_and_the_connection_stays() -> None:
    server, client = _welcomed()
    server.receive(client.follow(5))
    lost = server.follow(5, 100, 10, 20)
    [error] = client.receive(lost)
    assert error.kind == "error" and error.fields["code"] == "data_loss"
    assert error.fields["earliest"] == 10
    server.receive(client.follow(21))
    [beyond] = client.receive(server.follow(21, 100, 10, 20))
    assert beyond.fields["code"] == "offset_out_of_range" and beyond.fields["end"] == 20
    server.receive(client.follow(20))  # the end itself: follow live from there
    assert server.follow(20, 100, 10, 20) is None and server.next_range(10, 20) is None
    assert server.next_range(10, 21) == (20, 21, 100)


def test_retention_during_a_follow_is_data_loss() -> None:
    server, client = _welcomed()
    server.receive(client.follow(10))
    server.follow(10, 1 << 20, 10, 20)
    [error] = client.receive(server.lost(15))
    assert error.fields == {"code": "data_loss", "message": error.fields["message"], "earliest": 15}
    assert not server.following


def test_heartbeats_come_when_nothing_else_does() -> None:
    server, _client = _welcomed()
    assert server.tick(HEARTBEAT_INTERVAL - 0.1, 0, 5) is None
    beat = server.tick(HEARTBEAT_INTERVAL, 0, 5)
    assert beat is not None and beat[4] == Kind.HEARTBEAT
    assert server.tick(HEARTBEAT_INTERVAL + 0.5, 0, 5) is None


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", "exceeds the maximum"),
        (encode_frame(bytes([Kind.FOLLOW]) + msgpack.packb({"from": 0, "credit": 1})), "HELLO"),
        (encode_frame(bytes([Kind.HELLO]) + b"\xc1"), "does not decode"),
        (encode_frame(bytes([Kind.HELLO]) + msgpack.packb([1, 2])), "not a map"),
        (encode_frame(bytes([Kind.HELLO]) + msgpack.packb({"version": 1, "role": "x"})), "role"),
        (encode_frame(bytes([Kind.RECORDS]) + b"\0" * 12), "frame kind"),
        (b"\xff\xff\xff\xff", "exceeds the maximum"),
    ],
)
def test_garbage_is_a_protocol_error(data: bytes, why: str) -> None:
    server = RelayServerSession("s")
    with pytest.raises(RelayProtocolError, match=why):
        server.receive(data)


def test_only_local_readers_attach_stop_or_restart() -> None:
    remote = RelayServerSession("s", local=False)
    with pytest.raises(RelayProtocolError, match="owner's machine"):
        remote.receive(RelayClientSession().hello("attach", "x", identity={}))
    server, client = _welcomed("status")
    for op in ("stop", "state", "restart_at"):
        fresh = RelayServerSession("s", local=False)
        fresh.receive(client.hello("status"))
        with pytest.raises(RelayProtocolError, match="owner's own machine"):
            fresh.receive(client.request(op, offset=3))
    [event] = server.receive(client.request("bounds"))
    assert event.kind == "request" and event.fields["op"] == "bounds"
    [commit] = server.receive(client.request("commit", offset=7))
    assert commit.kind == "commit" and server.committed == 7


def test_the_client_refuses_records_out_of_order() -> None:
    server, client = _welcomed()
    server.receive(client.follow(12))
    server.follow(12, 1 << 20, 10, 20)
    with pytest.raises(RelayProtocolError, match="offset 13 where 12 was due"):
        client.receive(_records(13, 1))


def _records(first: int, count: int) -> bytes:
    import struct

    return encode_frame(struct.pack(">BQI", Kind.RECORDS, first, count) + b"x" * count)


@given(
    counts=st.lists(st.integers(1, 50), min_size=1, max_size=20),
    cuts=st.lists(st.integers(1, 200), max_size=30),
    compressed=st.booleans(),
)
def test_records_survive_any_cutting_of_the_stream(
    counts: list[int], cuts: list[int], compressed: bool
) -> None:
    server, client = _compressing() if compressed else _welcomed()
    assert (server.compression == "zstd") is compressed
    server.receive(client.follow(10))
    server.follow(10, 1 << 30, 10, 10 + sum(counts))
    stream = b""
    at = 10
    for n in counts:
        stream += server.records(at, n, bytes([n]) * n, now=0.0)
        at += n
    got: list[Records] = []
    pos = 0
    for cut in [*cuts, len(stream)]:
        got += [r for r in client.receive(stream[pos : pos + cut]) if isinstance(r, Records)]
        pos += cut
        if pos >= len(stream):
            break
    got += [r for r in client.receive(stream[pos:]) if isinstance(r, Records)]
    assert [r.count for r in got] == counts
    assert b"".join(r.data for r in got) == b"".join(bytes([n]) * n for n in counts)


@given(
    sizes=st.lists(st.integers(1, 3 * FRAME_TARGET), min_size=1, max_size=30),
    credit=st.integers(1, 8 * FRAME_TARGET),
)
def test_the_owner_sends_only_while_the_credit_has_room(sizes: list[int], credit: int) -> None:
    """Records as large as ``sizes``: the owner asks for records only while what it sent
    and was not acknowledged leaves room in the credit, and always moves on once the
    reader acknowledges."""
    server = RelayServerSession("s")
    server.receive(RelayClientSession().hello("follow"))
    end = len(sizes)
    assert server.follow(0, credit, 0, end) is None
    unacked = 0
    steps = 0
    while server.next < end:
        steps += 1
        assert steps < 10 * end + 10
        span = server.next_range(0, end)
        if span is None:
            server.receive(RelayClientSession(credit).took(unacked) or b"")
            unacked = 0
            continue
        lo, stop, budget = span
        assert 0 < budget <= credit - unacked  # only sent while there was room
        hi = lo + 1  # as the shell reads: records until the budget is reached
        while hi < stop and sum(sizes[lo:hi]) < budget:
            hi += 1
        size = sum(sizes[lo:hi])
        server.records(lo, hi - lo, b"\0" * size, now=0.0)
        unacked += size


def _compressing(
    offer: object = None, compress: bool = True
) -> tuple[RelayServerSession, RelayClientSession]:
    server = RelayServerSession("spool-1", compress=compress)
    client = RelayClientSession(credit=1 << 20)
    hello = {} if offer is None else {"compression": offer}
    server.receive(client.hello("follow", "test", **hello))
    client.receive(server.welcome(0, 100, []))
    return server, client


LOGS = b"".join(
    b'{"ts":%d,"uid":"C%07d","proto":"tcp","service":"dns"}' % (i, i) for i in range(400)
)


def test_records_are_compressed_for_a_reader_that_offers_when_the_owner_compresses() -> None:
    server, client = _compressing()
    assert server.compression == "zstd"
    server.receive(client.follow(0))
    server.follow(0, 1 << 20, 0, 100)
    frame = server.records(0, 3, LOGS, now=0.0)
    assert frame[4] == Kind.RECORDS_COMPRESSED and len(frame) < len(LOGS) / 4
    [records] = client.receive(frame)
    assert (records.first, records.count, records.data) == (0, 3, LOGS)
    _lo, _stop, budget = server.next_range(0, 100)  # credit counts the records as written
    assert budget == (1 << 20) - len(LOGS)


def test_kept_frames_are_compressed_too() -> None:
    server = RelayServerSession("spool-1", compress=True)
    client = RelayClientSession(credit=1 << 20)
    server.receive(client.hello("follow", "test", topics=["zeek/logs/"]))
    [welcome] = client.receive(server.welcome(0, 100, []))
    assert welcome.fields["compression"] == "zstd"
    server.receive(client.follow(0))
    server.follow(0, 1 << 20, 0, 100)
    frame = server.records(0, 5, LOGS, now=0.0, kept=2)
    assert frame[4] == Kind.KEPT_COMPRESSED
    [records] = client.receive(frame)
    assert (records.first, records.count, records.data) == (0, 2, LOGS)
    assert client.next == 5


@pytest.mark.parametrize(
    ("offer", "compress"),
    [([], True), (["lz4"], True), (None, False), ("zstd", True)],
    ids=["offers-nothing", "offers-another-codec", "owner-does-not-compress", "not-a-list"],
)
def test_records_go_as_written_unless_both_sides_agree(offer: object, compress: bool) -> None:
    server, client = _compressing(offer, compress)
    assert server.compression is None
    server.receive(client.follow(0))
    server.follow(0, 1 << 20, 0, 100)
    frame = server.records(0, 3, LOGS, now=0.0)
    assert frame[4] == Kind.RECORDS
    [records] = client.receive(frame)
    assert records.data == LOGS


def test_a_compressed_frame_that_was_not_agreed_or_does_not_decompress_is_refused() -> None:
    server, client = _compressing(compress=False)
    client.follow(0)
    head = bytes([Kind.RECORDS_COMPRESSED]) + (0).to_bytes(8, "big") + (1).to_bytes(4, "big")
    with pytest.raises(RelayProtocolError, match="none was agreed"):
        client.receive(encode_frame(head + (5).to_bytes(4, "big") + b"xxxxx"))
    server, client = _compressing()
    client.follow(0)
    with pytest.raises(RelayProtocolError, match="does not decompress"):
        client.receive(encode_frame(head + (5).to_bytes(4, "big") + b"xxxxx"))
    server, client = _compressing()
    client.follow(0)
    with pytest.raises(RelayProtocolError, match="at most"):
        client.receive(encode_frame(head + (1 << 31).to_bytes(4, "big") + b"xxxxx"))


def test_a_welcome_naming_an_unknown_codec_is_refused() -> None:
    client = RelayClientSession()
    client.hello("follow", "test")
    welcome = encode_frame(
        bytes([Kind.WELCOME])
        + msgpack.packb({"version": 1, "relay": "r", "start": 0, "end": 0, "compression": "brotli"})
    )
    with pytest.raises(RelayProtocolError, match="unknown codec"):
        client.receive(welcome)
