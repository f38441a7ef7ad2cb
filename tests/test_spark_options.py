"""Options of the broker data source, offsets JSON and partition planning."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_spark.config import Configuration
from broker_spark.errors import BrokerError
from broker_spark.reader.offsets import OffsetError, SpoolOffset, plan_partitions
from broker_spark.reader.options import (
    DEFAULT_RETENTION_BYTES,
    DEFAULT_SEGMENT_BYTES,
    BrokerOptionError,
    HostPort,
    ReaderOptions,
    WriterOptions,
    parse_host_port,
    parse_reader_options,
    parse_writer_options,
)

PEER = {"peer": "zeek.example:9999"}


class CaseInsensitiveDict(dict):
    """What Spark hands a data source: keys lower-cased."""

    def __init__(self, items: dict[str, Any]) -> None:
        super().__init__({k.lower(): v for k, v in items.items()})


def reader(**options: Any) -> ReaderOptions:
    return parse_reader_options(options)


def reader_error(options: dict[str, Any], streaming: bool = True) -> BrokerOptionError:
    with pytest.raises(BrokerOptionError) as info:
        parse_reader_options(options, streaming=streaming)
    assert isinstance(info.value, BrokerError) and isinstance(info.value, ValueError)
    return info.value


def writer_error(options: dict[str, Any]) -> BrokerOptionError:
    with pytest.raises(BrokerOptionError) as info:
        parse_writer_options(options)
    return info.value


# --- readers ----------------------------------------------------------------------------


def test_reader_defaults() -> None:
    opts = parse_reader_options({"topics": "/zeek/", **PEER})
    assert opts.topics == ("/zeek/",)
    assert opts.connection.peers == (HostPort("zeek.example", 9999),)
    assert opts.connection.listen is None and opts.connection.websocket is None
    assert not opts.connection.ssl.disable_ssl and not opts.connection.ssl.authenticated
    assert opts.store is None
    assert opts.starting_offsets == "latest"
    assert opts.max_records_per_trigger is None
    assert opts.fail_on_data_loss is True
    assert opts.format == "default" and opts.mode == "PERMISSIVE"
    assert opts.partition_data == "auto"
    assert opts.spool.path is None
    assert opts.spool.segment_bytes == DEFAULT_SEGMENT_BYTES
    assert opts.spool.retention_bytes == DEFAULT_RETENTION_BYTES
    assert pickle.loads(pickle.dumps(opts)) == opts  # readers travel to executors


def test_reader_options_as_spark_passes_them_and_as_documented() -> None:
    given_options = {
        "topics": " /a, /b ,/a,",
        "listen": "0.0.0.0:0",
        "peer": "h1:1, [::1]:2",
        "websocket": "wss://zeek.example:27759",
        "ssl.certificate": "/c.pem",
        "ssl.key": "/k.pem",
        "ssl.cafile": "/ca.pem",
        "ssl.passphrase": "secret",
        "startingOffsets": "EARLIEST",
        "maxRecordsPerTrigger": "5000",
        "maxRecordsPerPartition": 700,
        "failOnDataLoss": False,
        "spoolPath": "/shared/spool",
        "spool.segmentBytes": "1m",
        "spool.retentionBytes": "-1",
        "spool.retentionMs": "60000",
        "spool.fsync": "TRUE",
        "format": "Zeek",
        "mode": "failfast",
        "partitionData": "spool",
    }
    for options in (given_options, CaseInsensitiveDict(given_options)):
        opts = parse_reader_options(options)
        assert opts.topics == ("/a", "/b")
        assert opts.connection.listen == HostPort("0.0.0.0", 0)
        assert opts.connection.peers == (HostPort("h1", 1), HostPort("::1", 2))
        assert str(opts.connection.peers[1]) == "[::1]:2"
        ws = opts.connection.websocket
        assert ws is not None and ws.secure and (ws.host, ws.port) == ("zeek.example", 27759)
        assert ws.url == "wss://zeek.example:27759/v1/messages/json"
        ssl = opts.connection.ssl
        assert (ssl.certificate, ssl.key, ssl.cafile, ssl.passphrase) == (
            "/c.pem",
            "/k.pem",
            "/ca.pem",
            "secret",
        )
        assert "secret" not in repr(opts)
        assert opts.starting_offsets == "earliest"
        assert opts.max_records_per_trigger == 5000
        assert opts.max_records_per_partition == 700
        assert opts.fail_on_data_loss is False
        assert opts.spool.path == "/shared/spool"
        assert opts.spool.segment_bytes == 1 << 20
        assert opts.spool.retention_bytes is None
        assert opts.spool.retention_ms == 60000
        assert opts.spool.fsync is True
        assert (opts.format, opts.mode, opts.partition_data) == ("zeek", "FAILFAST", "spool")


def test_tls_options_fill_an_endpoint_configuration() -> None:
    opts = reader(
        topics="/t",
        listen=":9999",
        **{"ssl.certificate": "/c", "ssl.key": "/k", "ssl.capath": "/cas"},
    )
    config = opts.connection.configuration()
    assert isinstance(config, Configuration)
    assert (config.openssl_certificate, config.openssl_key, config.openssl_capath) == (
        "/c",
        "/k",
        "/cas",
    )
    assert config.authenticated and not config.options.disable_ssl
    plain = reader(topics="/t", listen="127.0.0.1:1", **{"ssl.disable": "true"})
    assert plain.connection.configuration().options.disable_ssl
    assert not plain.connection.configuration().authenticated


@pytest.mark.parametrize(
    ("options", "refused"),
    [
        ({"listen": ":9999"}, "listen"),  # every interface, anonymous TLS
        ({"listen": "0.0.0.0:9999", "ssl.disable": "true"}, "listen"),
        ({"listen": "10.0.0.5:9999"}, "listen"),
        ({"format": "zeek-logs", "zeromq.logs": "tcp://0.0.0.0:5557"}, "zeromq.logs"),
        ({"format": "zeek-logs", "zeromq.logs": "tcp://*:5557"}, "zeromq.logs"),
    ],
)
def test_listeners_other_hosts_reach_need_authentication_or_allow_anonymous(
    options: dict[str, str], refused: str
) -> None:
    with pytest.raises(BrokerOptionError) as err:
        reader(topics="/t", **options)
    assert err.value.option == refused and "allowAnonymous=true" in str(err.value)
    opts = reader(topics="/t", allowAnonymous="true", **options)
    assert opts.allow_anonymous


def test_mutual_tls_curve_and_loopback_need_no_opt_out() -> None:
    from broker_spark.zeromq.curve import generate_keypair

    mutual = {"ssl.certificate": "/c", "ssl.key": "/k", "ssl.cafile": "/ca"}
    assert not reader(topics="/t", listen=":9999", **mutual).allow_anonymous
    for local in ("127.0.0.1:9999", "[::1]:9999", "localhost:9999"):
        reader(topics="/t", listen=local)
    server, client = generate_keypair(), generate_keypair()
    curve = {
        "zeromq.curveServerPublicKey": server["public"],
        "zeromq.curveServerSecretKey": server["secret"],
        "zeromq.curveClientPublicKey": client["public"],
    }
    reader(topics="/t", format="zeek-logs", **{"zeromq.logs": "tcp://0.0.0.0:5557", **curve})
    reader(topics="/t", format="zeek-logs", **{"zeromq.logs": "ipc:///tmp/zeek-logs"})


@pytest.mark.parametrize(
    ("options", "option", "text"),
    [
        ({**PEER}, "topics", "is required"),
        ({"topics": "/a"}, "listen/peer/websocket/relay", "required"),
        ({"topics": " , ", **PEER}, "topics", "names nothing"),
        ({"topics": "/a", "store": "s", **PEER}, "store", "contradicts topics"),
        ({"topics": "/a", "peer": "nohost"}, "peer", "host:port"),
        ({"topics": "/a", "peer": ":9999"}, "peer", "host is missing"),
        ({"topics": "/a", "peer": "h:0"}, "peer", "out of range"),
        ({"topics": "/a", "peer": "h:70000"}, "peer", "out of range"),
        ({"topics": "/a", "peer": "h:http"}, "peer", "not a number"),
        ({"topics": "/a", "peer": "::1:9999"}, "peer", "brackets"),
        ({"topics": "/a", "peer": "[nope]:1"}, "peer", "not an IPv6"),
        ({"topics": "/a", "peer": "bad host:1"}, "peer", "not a host name"),
        ({"topics": "/a", "listen": "localhost"}, "listen", "host:port"),
        ({"topics": "/a", "listen": " "}, "listen", "empty"),
        ({"topics": "/a", "websocket": "http://x:1"}, "websocket", "ws://"),
        ({"topics": "/a", "websocket": "ws://:1"}, "websocket", "no host"),
        ({"topics": "/a", "websocket": "ws://x:99999"}, "websocket", "not a URL"),
        ({"topics": "/a", "websocket": "ws://x:1/p?q=1"}, "websocket", "queries"),
        ({"topics": "/a", "maxRecordsPerTrigger": "0", **PEER}, "maxRecordsPerTrigger", "positive"),
        (
            {"topics": "/a", "maxRecordsPerTrigger": "1e5", **PEER},
            "maxRecordsPerTrigger",
            "positive",
        ),
        (
            {"topics": "/a", "maxRecordsPerPartition": "-3", **PEER},
            "maxRecordsPerPartition",
            "positive",
        ),
        ({"topics": "/a", "failOnDataLoss": "yes", **PEER}, "failOnDataLoss", "true or false"),
        ({"topics": "/a", "startingOffsets": "0", **PEER}, "startingOffsets", "earliest, latest"),
        ({"topics": "/a", "format": "csv", **PEER}, "format", "default, zeek"),
        ({"topics": "/a", "mode": "DROPMALFORMED", **PEER}, "mode", "PERMISSIVE, FAILFAST"),
        ({"topics": "/a", "partitionData": "spool", **PEER}, "partitionData", "spoolPath"),
        ({"topics": "/a", "partitionData": "disk", **PEER}, "partitionData", "auto, inline, spool"),
        ({"topics": "/a", "spoolPath": "", **PEER}, "spoolPath", "empty"),
        ({"topics": "/a", "spool.segmentBytes": "-1", **PEER}, "spool.segmentBytes", "size"),
        ({"topics": "/a", "spool.segmentBytes": "12 parsecs", **PEER}, "spool.segmentBytes", "64m"),
        ({"topics": "/a", "spool.retentionBytes": "0", **PEER}, "spool.retentionBytes", "positive"),
        ({"topics": "/a", "spool.retentionMs": "1h", **PEER}, "spool.retentionMs", "integer"),
        ({"topics": "/a", "ssl.key": "/k", **PEER}, "ssl.key", "needs ssl.certificate"),
        ({"topics": "/a", "ssl.certificate": "/c", **PEER}, "ssl.certificate", "ssl.key"),
        (
            {"topics": "/a", "ssl.certificate": "/c", "ssl.key": "/k", **PEER},
            "ssl.certificate",
            "ssl.cafile or ssl.capath",
        ),
        ({"topics": "/a", "ssl.cafile": "/ca", **PEER}, "ssl.cafile", "ssl.certificate"),
        (
            {"topics": "/a", "ssl.disable": "true", "ssl.cafile": "/ca", **PEER},
            "ssl.disable",
            "contradicts",
        ),
        ({"topics": "/a", "ssl.disable": "maybe", **PEER}, "ssl.disable", "true or false"),
        ({"topics": "/a", "ssl.disable": "true", "websocket": "wss://h:1"}, "ssl.disable", "ws://"),
        ({"topics": "/a", "toipcs": "/b", **PEER}, "toipcs", "did you mean topics"),
        ({"topics": "/a", "topic": "/b", **PEER}, "topic", "writing only"),
        ({"topics": "/a", "badRecordsTopic": "/b", **PEER}, "badRecordsTopic", "writing only"),
        ({"store": "s", "listen": ":1"}, "peer", "clone"),
        ({"store": "s", "format": "zeek", **PEER}, "format", "not to store"),
        ({"topics": "/a", "TOPICS": "/b", **PEER}, "topics", "given twice"),
        ({"topics": "/a", "zeekVersion": "8.0", **PEER}, "zeekVersion", "format=zeek-logs"),
        ({"format": "zeek-logs", "zeekVersion": "7.2", **PEER}, "zeekVersion", "8.0, 9.0, 9.1"),
    ],
)
def test_bad_reader_options_name_the_option_and_value(
    options: dict[str, Any], option: str, text: str
) -> None:
    error = reader_error(options)
    assert error.option == option
    message = str(error)
    assert message.startswith(f"option {option}")
    assert text in message
    given_value = {k.lower(): v for k, v in options.items()}.get(option.lower())
    if given_value is not None and option != "ssl.disable":
        assert repr(given_value) in message


def test_zeek_version_picks_the_standard_columns_of_a_log_nothing_described() -> None:
    from broker_spark.spark.read.offered_columns import known_log_schema

    def dns(**more: str) -> tuple[str, ...]:
        opts = parse_reader_options({"format": "zeek-logs", "logs": "dns", **PEER, **more})
        return known_log_schema(opts).names

    assert dns()[-2:] == ("opcode", "opcode_name")  # 9.1, the newest
    assert dns(zeekVersion="9.0") == dns()
    assert "opcode" not in dns(zeekVersion="8.0.10")  # the LTS, read as 8.0


def test_a_passphrase_is_never_echoed() -> None:
    error = reader_error({"topics": "/a", "ssl.passphrase": "hunter2", **PEER})
    assert error.option == "ssl.passphrase" and "hunter2" not in str(error)
    assert error.value is None and "***" in str(error)


def test_batch_reads_take_a_store_through_a_peer() -> None:
    opts = parse_reader_options({"store": "hosts", **PEER}, streaming=False)
    assert opts.store == "hosts" and opts.topics == ()
    assert "spark.readStream" in str(reader_error({"topics": "/a", **PEER}, streaming=False))
    assert reader_error({"store": "s", "websocket": "ws://h:1"}, streaming=False).option == "peer"
    # a stream of a store's changes also works
    assert parse_reader_options({"store": "hosts", **PEER}).store == "hosts"


def test_spark_added_options_are_ignored() -> None:
    opts = parse_writer_options({"checkpointlocation": "/tmp/ck", "path": "x", **PEER})
    assert opts == WriterOptions(connection=opts.connection)


def test_sizes_with_suffixes() -> None:
    for text, value in [
        ("512", 512),
        ("2k", 2048),
        ("64M", 64 << 20),
        ("1gb", 1 << 30),
        ("3MiB", 3 << 20),
        ("7b", 7),
    ]:
        opts = reader(topics="/t", **PEER, **{"spool.retentionBytes": text})
        assert opts.spool.retention_bytes == value, text
    assert reader(topics="/t", **PEER, **{"spool.retentionMs": "none"}).spool.retention_ms is None


# --- writers ----------------------------------------------------------------------------


def test_writer_options() -> None:
    opts = parse_writer_options(
        CaseInsensitiveDict(
            {
                "topic": "/out",
                "websocket": "ws://h:8080/",
                "badRecordsTopic": "/bad",
                "format": "zeek",
            }
        )
    )
    assert opts.topic == "/out" and opts.bad_records_topic == "/bad" and opts.format == "zeek"
    ws = opts.connection.websocket
    assert ws is not None and not ws.secure and ws.url == "ws://h:8080/v1/messages/json"
    assert parse_writer_options({"store": "hosts", **PEER}).store == "hosts"
    assert parse_writer_options(PEER).topic is None  # the topic may come from a column


@pytest.mark.parametrize(
    ("options", "option", "text"),
    [
        ({"topic": "/t"}, "peer/websocket", "required"),
        ({"topic": "/t", "listen": ":9999", **PEER}, "listen", "not listen"),
        ({"topic": "/t", "store": "s", **PEER}, "store", "contradicts topic"),
        ({"store": "s", "websocket": "ws://h:1"}, "peer", "clone"),
        ({"store": "s", "format": "zeek", **PEER}, "format", "not to store"),
        ({"topic": "", **PEER}, "topic", "empty"),
        ({"topics": "/t", **PEER}, "topics", "reading only"),
        ({"startingOffsets": "earliest", **PEER}, "startingOffsets", "reading only"),
        ({"tpoic": "/t", **PEER}, "tpoic", "did you mean topic"),
        ({"peer": "h:1,h:x"}, "peer", "not a number"),
    ],
)
def test_bad_writer_options(options: dict[str, Any], option: str, text: str) -> None:
    error = writer_error(options)
    assert error.option == option and text in str(error)


def test_parse_host_port_forms() -> None:
    assert parse_host_port("example.org:80", "peer") == HostPort("example.org", 80)
    assert parse_host_port(" 10.0.0.1:1 ", "peer") == HostPort("10.0.0.1", 1)
    assert parse_host_port("[fe80::1]:443", "peer") == HostPort("fe80::1", 443)
    assert parse_host_port(":0", "listen", listen=True) == HostPort("", 0)
    assert str(HostPort("", 5)) == ":5"


# --- offsets and partitions -------------------------------------------------------------


def test_offset_json_is_what_spark_serializes_and_compares() -> None:
    offset = SpoolOffset(42)
    assert offset.to_dict() == {"offset": 42}
    assert offset.to_json() == json.dumps({"offset": 42}) == '{"offset": 42}'
    assert SpoolOffset.from_dict({"offset": 42}) == offset
    assert SpoolOffset.from_dict('{"offset": 42}') == offset
    assert SpoolOffset.from_json(offset.to_json()) == offset
    assert SpoolOffset(1) < SpoolOffset(2)
    assert SpoolOffset(0).to_json() != SpoolOffset(10).to_json()


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"offset": -1},
        {"offset": "3"},
        {"offset": 1.0},
        {"offset": True},
        {"offset": 1, "x": 2},
        "[1]",
        "{",
        '"7"',
        7,
    ],
)
def test_bad_offsets(bad: Any) -> None:
    with pytest.raises(OffsetError):
        if isinstance(bad, str):
            SpoolOffset.from_json(bad)
        else:
            SpoolOffset.from_dict(bad)


def test_plan_partitions_examples() -> None:
    assert plan_partitions(0, 0, 10) == []
    assert plan_partitions(5, 6, 10) == [(5, 6)]
    assert plan_partitions(0, 10, 10) == [(0, 10)]
    assert plan_partitions(0, 11, 10) == [(0, 6), (6, 11)]
    assert plan_partitions(100, 1100, 300) == [(100, 350), (350, 600), (600, 850), (850, 1100)]
    assert plan_partitions(0, 10, 100, min_partitions=4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert plan_partitions(0, 2, 100, min_partitions=4) == [(0, 1), (1, 2)]
    for args in [(3, 2, 1), (-1, 2, 1), (0, 2, 0), (0, 2, True)]:
        with pytest.raises(OffsetError):
            plan_partitions(*args)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    start=st.integers(0, 10**12),
    n=st.integers(0, 10**5),
    cap=st.integers(1, 10**4),
    minimum=st.integers(1, 64),
)
def test_plan_partitions_cover_the_range_evenly(start: int, n: int, cap: int, minimum: int) -> None:
    parts = plan_partitions(start, start + n, cap, min_partitions=minimum)
    assert parts == plan_partitions(start, start + n, cap, min_partitions=minimum)
    if n == 0:
        assert parts == []
        return
    assert parts[0][0] == start and parts[-1][1] == start + n
    assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))
    sizes = [hi - lo for lo, hi in parts]
    assert max(sizes) <= cap and min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
    assert len(parts) == max(-(-n // cap), min(minimum, n))
