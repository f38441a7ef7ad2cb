"""Views of Zeek's log messages and identifier updates, the schema registry, standard schemas."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st
from zeek_recordings import LOG_RECORDINGS, recording

from broker_spark.data.binary import decode, encode
from broker_spark.data.types import Count, Enum
from broker_spark.errors import DecodeError
from broker_spark.zeek import (
    STANDARD_SCHEMAS_ZEEK_VERSION,
    Batch,
    Event,
    IdentifierUpdate,
    LogCreate,
    LogField,
    LogSchema,
    LogWrite,
    MessageType,
    SchemaRegistry,
    WriterInfo,
    as_message,
    iter_log_messages,
    standard_paths,
    standard_schema,
    standard_schemas,
)

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("name", LOG_RECORDINGS)
def test_recorded_messages_read_through_the_views(name: str) -> None:
    rec = recording(name)
    creates = writes = 0
    for topic, payload in rec.data:
        message = as_message(decode(payload))
        assert message.valid()
        for inner in iter_log_messages(message):
            if isinstance(inner, LogCreate):
                creates += 1
                assert topic == f"zeek/logs/{inner.stream_id()}"
                assert inner.writer_id() == "Log::WRITER_ASCII"
                assert inner.fields() == standard_schema(inner.path()).fields
            else:
                assert isinstance(inner, LogWrite)
                writes += 1
                assert inner.writer_id() == "Log::WRITER_ASCII"
                assert inner.serial_data() in rec.writes[inner.path()]
        if isinstance(message, Batch):
            assert message.size() == len(message.messages()) >= 1
            assert {m.stream_id() for m in message} == {topic.removeprefix("zeek/logs/")}
    assert creates == len(rec.creates)
    assert writes == sum(map(len, rec.writes.values()))


def test_a_log_create_built_from_a_schema_is_what_zeek_sends() -> None:
    rec = recording("zeek-logs-http-methods")
    sent = rec.creates["files"]  # written before network time moved: WriterInfo has it
    built = LogCreate(
        "Files::LOG",
        "Log::WRITER_ASCII",
        WriterInfo("files", network_time=sent[2][3]),
        standard_schema("files"),
    )
    assert encode(built) == encode((Count(1), Count(2), sent))
    assert LogCreate.of(standard_schema("conn")).schema() == standard_schema("conn")


def test_a_log_write_from_values_and_back() -> None:
    schema = LogSchema(
        "Spark::LOG", "spark", (LogField.of("n", "count"), LogField.of("s", "string"))
    )
    write = LogWrite.of(schema, {"n": 3, "s": "x"})
    assert write.valid() and write.type() is MessageType.LogWrite
    assert (write.stream_id(), write.writer_id(), write.path()) == (
        "Spark::LOG",
        "Log::WRITER_ASCII",
        "spark",
    )
    assert write.values() == [Count(3), "x"]
    assert write.record(schema) == {"n": Count(3), "s": "x"}
    back = LogWrite(decode(encode(write)))
    assert back.serial_data() == write.serial_data()
    # a record that happens to be valid UTF-8 comes back from Broker as a str; the bytes stay
    utf8 = LogWrite(
        decode(encode((Count(1), Count(3), (Enum("A"), Enum("B"), "p", "\x00\x00\x00\x00"))))
    )
    assert utf8.serial_data() == b"\x00\x00\x00\x00" and utf8.values() == []


def test_identifier_updates_of_the_recorded_zeek() -> None:
    rec = recording("zeek-id-update-and-store")
    updates = [as_message(decode(p)) for t, p in rec.data if t == "zeek/id/holdout"]
    assert [type(u) for u in updates] == [IdentifierUpdate] * 3
    names = {u.id_name() for u in updates}
    assert names == {"Holdout::holdout_table", "Holdout::holdout_const"}
    const = [u for u in updates if u.id_name() == "Holdout::holdout_const"][0]
    assert const.id_value() == "const-value"
    assert encode(IdentifierUpdate("Holdout::holdout_const", "const-value")) == encode(const)


def test_batches_nest_and_are_valid_only_when_every_message_is() -> None:
    schema = standard_schema("weird")
    event = Event("ping", 1)
    inner = Batch(LogCreate.of(schema), event)
    outer = Batch(inner, IdentifierUpdate("x", 1))
    assert outer.valid() and len(outer) == 2 and not Batch().size()
    assert [type(m) for m in iter_log_messages(outer)] == [LogCreate, Event, IdentifierUpdate]
    broken = Batch((Count(1), Count(5), ((Count(1), Count(3), ("no", "enums")),)))
    assert not broken.valid()
    with pytest.raises(DecodeError, match="invalid Batch"):
        broken.messages()


@pytest.mark.parametrize(
    "data",
    [
        (Count(1), Count(2), ("Conn::LOG", Enum("W"), (), ())),  # stream id not an enum
        (Count(2), Count(2), (Enum("S"), Enum("W"), (), ())),  # format 2
        (Count(1), Count(3), (Enum("S"), Enum("W"), "p")),  # LogWrite short of serial data
        "not a message",
    ],
)
def test_invalid_messages_are_not_valid_and_accessors_raise(data) -> None:
    message = as_message(data)
    assert not message.valid()
    for view in (LogCreate, LogWrite):
        with pytest.raises(DecodeError):
            view(data).stream_id()


def test_log_create_accessors_reject_malformed_parts() -> None:
    bad_info = LogCreate((Count(1), Count(2), (Enum("S"), Enum("W"), ("p",), ())))
    assert bad_info.valid()  # Broker checks only the enums
    with pytest.raises(DecodeError, match="writer info"):
        bad_info.path()
    bad_field = LogCreate(
        (
            Count(1),
            Count(2),
            (
                Enum("S"),
                Enum("W"),
                WriterInfo("p").to_data(),
                (("x", None, Count(99), Count(0), False),),
            ),
        )
    )
    with pytest.raises(DecodeError, match="unknown type 99"):
        bad_field.fields()


def test_the_registry_keys_by_sender_stream_and_path_and_falls_back_by_stream() -> None:
    conn = standard_schema("conn")
    changed = LogSchema(
        conn.stream, conn.path, conn.fields + (LogField.of("site", "string", True),)
    )
    registry = SchemaRegistry()
    assert registry.learn("zeek-1", conn)
    assert not registry.learn("zeek-1", conn)  # the same columns again: no change
    assert registry.learn("zeek-1", changed)
    assert registry.lookup("zeek-1", "Conn::LOG", "conn") == changed
    assert registry.lookup("relay", "Conn::LOG", "conn") == changed  # any sender's
    assert registry.lookup("zeek-1", "Conn::LOG", "conn_other") is None
    assert registry.by_path("conn") == changed
    copy = pickle.loads(pickle.dumps(registry))
    assert copy.items() == registry.items()


def test_standard_schemas_come_from_zeeks_own_description() -> None:
    assert STANDARD_SCHEMAS_ZEEK_VERSION == "9.1.0-dev"
    paths = standard_paths()
    assert len(paths) == 52 and {"conn", "dns", "http", "ssl", "x509", "files", "notice"} <= set(
        paths
    )
    conn = standard_schema("Conn::LOG")
    assert conn is standard_schema("conn") and conn.path == "conn"
    assert conn.names[:6] == ("ts", "uid", "id.orig_h", "id.orig_p", "id.resp_h", "id.resp_p")
    assert str(standard_schema("http").fields[20]) == "tags: set[enum HTTP::Tags]"
    assert standard_schema("no_such_log") is None


def test_standard_schemas_of_the_long_term_release_and_the_newest() -> None:
    """9.1 (the newest), 9.0 (the same base scripts) and 8.0 (the LTS: three logs differ)."""
    assert standard_schemas("9.0") == standard_schemas("9.1")
    assert len(standard_paths("8.0")) == 50
    assert standard_schema("ntp_control", "8.0") is None and standard_schema("ntp_control")
    dns_80, dns = standard_schema("dns", "8.0.10"), standard_schema("dns")
    assert dns.names[-2:] == ("opcode", "opcode_name") and "opcode" not in dns_80.names
    assert dns.names[: len(dns_80.names)] == dns_80.names  # 9.1 appended two columns
    assert standard_schema("ssh", "8.0").names[-1] == "host_key"
    assert standard_schema("ssh").names[-1] == "host_key_fingerprint"
    assert standard_schema("conn", "8.0") == standard_schema("conn")
    assert "Zeek 8.0.10" in standard_schema("conn", "8.0").source
    with pytest.raises(ValueError, match="no schemas of Zeek 7.0"):
        standard_schema("conn", "7.0")


@given(st.data())
def test_the_scanner_takes_any_bytes_without_raising(data) -> None:
    from broker_spark.zeek.log_scan import LogScanner

    rec = recording(data.draw(st.sampled_from(LOG_RECORDINGS)))
    topic, payload = data.draw(st.sampled_from(rec.data))
    raw = bytearray(payload)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(raw) - 1))
        kind = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if kind == "flip":
            raw[at] ^= data.draw(st.integers(1, 255))
        elif kind == "cut":
            del raw[at:]
            if not raw:
                raw = bytearray(b"\x00")
        else:
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=9))
    scanner = LogScanner()
    buf = bytes(raw) + b"trailing bytes of the next message"
    scanner.scan(buf, 0, len(raw), "zeek", 0)
    for group in scanner.take_groups():
        assert all(0 <= a <= b <= len(raw) for a, b in zip(group.starts, group.ends, strict=True))


def test_the_samples_are_the_recorded_sessions() -> None:
    from broker_spark.zeek.samples import SAMPLES, load_sample

    assert load_sample("dns-edns-ecs") == recording("zeek-logs-dns-edns-ecs").data
    assert load_sample("http-methods") == recording("zeek-logs-http-methods").data
    assert SAMPLES == ("dns-edns-ecs", "http-methods")
    with pytest.raises(ValueError, match="no sample"):
        load_sample("nope")
