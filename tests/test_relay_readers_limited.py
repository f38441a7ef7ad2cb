"""A relay serves a reader only the topics its certificate may read, and the topics it asks for.

``broker-spark node --reader NAME=PREFIX,...`` (``[spool.readers]``) limits the
reader whose certificate is named NAME: it gets only records on those prefixes
(KEPT frames, the offsets still advancing over the rest), and asking for other
topics or for the relay's status is answered ``forbidden`` and closed. Readers
not named read everything, unless ``"*"`` names a limit for them. A reader
whose HELLO names ``topics`` (a Spark reader's ``topics`` option) is served
only records on them, whatever its certificate. Here: the
sans-I/O protocol, then a real relay with mutual TLS and real certificates, a
real Spark relay reader (tasks fetching their ranges, and inline partitions),
and the node's command line.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from spark_fixtures import wait_for
from test_cli_support import run_command
from test_spark_relay import Relay

from broker_spark import zeek
from broker_spark.cli import main
from broker_spark.columnar.record_batches import default_schema
from broker_spark.config import TLSSettings
from broker_spark.data.msgpack_records import pack_record, unpack_records
from broker_spark.reader.options import parse_reader_options
from broker_spark.spark.read.stream import stream_reader
from broker_spark.spool.relay_client import RelayError, SpoolClient, served_topics
from broker_spark.spool.relay_protocol import (
    PROTOCOL_VERSION,
    Kind,
    RelayProtocolError,
    RelayServerSession,
    encode_message,
)
from broker_spark.spool.relay_reader_session import (
    Records,
    RelayClientSession,
)
from broker_spark.spool.served_records import keep_records
from broker_spark.tls import make_contexts

pytestmark = pytest.mark.timeout(120)

TOPICS = ("zeek/dns/a", "zeek/conn/b", "zeek/dns/c", "zeek/http/d")


@given(st.lists(st.sampled_from(TOPICS), max_size=30), st.sampled_from([(), ("zeek/dns/",)]))
def test_keep_records_keeps_exactly_the_records_on_the_prefixes(topics, prefixes) -> None:
    stream = b"".join(pack_record(t, b"\x05\x01x", "s", 7, i) for i, t in enumerate(topics))
    kept, count = keep_records(stream, prefixes)
    wanted = [(t, i) for i, t in enumerate(topics) if t.startswith(prefixes)]
    assert [(r.topic, r.offset) for r in unpack_records(kept)] == wanted
    assert count == len(wanted)


def _hello(**fields) -> bytes:
    return encode_message(Kind.HELLO, {"version": PROTOCOL_VERSION, "role": "follow", **fields})


def test_the_protocol_refuses_other_topics_and_the_status_and_frames_kept_records() -> None:
    limited = RelayServerSession("r", allowed=("zeek/dns/",), identity="certificate 'dns'")
    [event] = limited.receive(_hello(name="x", topics=["zeek/dns/", "zeek/conn/"]))
    assert event.kind == "forbidden" and "zeek/conn/" in event.fields["message"]
    assert "certificate 'dns'" in event.fields["message"]
    status = RelayServerSession("r", allowed=("zeek/dns/",))
    assert status.receive(_hello(role="status"))[0].kind == "forbidden"
    ok = RelayServerSession("r", allowed=("zeek/dns/",))
    assert ok.receive(_hello(topics=["zeek/dns/x"]))[0].kind == "hello"
    asked = ok.receive(encode_message(Kind.REQUEST, {"op": "status"}))
    assert asked[0].kind == "forbidden"
    # Records: a KEPT frame spanning 10 offsets, holding the 3 records kept.
    assert ok.follow(0, 1 << 20, 0, 10) is None
    client = RelayClientSession()
    client.welcomed = True
    client.follow(0)
    frame = ok.records(0, 10, b"abc", 0.0, kept=3)
    [records] = client.receive(frame)
    assert records == Records(0, 3, b"abc") and client.next == 10
    with pytest.raises(ValueError):
        ok.records(10, 1, b"", 0.0)  # a limited reader gets KEPT frames only
    everything = RelayServerSession("r")
    everything.receive(_hello())
    everything.follow(0, 1 << 20, 0, 10)
    with pytest.raises(ValueError):
        everything.records(0, 10, b"abc", 0.0, kept=3)


def test_a_reader_is_served_the_topics_its_hello_names() -> None:
    """Without a credential's limit, a HELLO's ``topics`` narrow what a follower is
    served (KEPT frames, the WELCOME echoing them); with one, they narrow it further."""
    narrowed = RelayServerSession("r")
    assert narrowed.receive(_hello(topics=["zeek/dns/"]))[0].kind == "hello"
    assert narrowed.served == ("zeek/dns/",)
    assert narrowed.welcome(0, 10, [])[5:].find(b"zeek/dns/") > 0  # echoed in the WELCOME
    narrowed.follow(0, 1 << 20, 0, 10)
    with pytest.raises(ValueError):
        narrowed.records(0, 10, b"abc", 0.0)  # served some topics: KEPT frames only
    assert narrowed.records(0, 10, b"abc", 0.0, kept=3)
    limited = RelayServerSession("r", allowed=("zeek/",))
    assert limited.receive(_hello(topics=["zeek/dns/"]))[0].kind == "hello"
    assert limited.served == ("zeek/dns/",)
    status = RelayServerSession("r")  # only a follower's topics narrow anything
    assert status.receive(_hello(role="status", topics=["zeek/dns/"]))[0].kind == "hello"
    assert status.served is None
    for bad in ("zeek/dns/", [1, 2], {"a": 1}):
        with pytest.raises(RelayProtocolError, match="'topics' must be a list"):
            RelayServerSession("r").receive(_hello(topics=bad))


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    assert main(["certs", "--out", str(out), "--nodes", "relay", "dns", "other"]) == 0
    return out


def _tls(certs: Path, name: str) -> TLSSettings:
    return TLSSettings(
        certificate=str(certs / f"{name}.pem"), key=str(certs / f"{name}.key"),
        cafile=str(certs / "ca.pem"),
    )  # fmt: skip


def _publish(relay: Relay, n: int, first: int = 0) -> None:
    """Events ``first`` to ``first + n``, on the TOPICS in turn (offset i: TOPICS[i % 4])."""
    relay.publisher.publish_batch(
        *[(TOPICS[i % len(TOPICS)], zeek.Event("e", i)) for i in range(first, first + n)]
    )
    spool = relay.node.service.spool
    wait_for(lambda: spool.end_offset() >= first + n, 20, f"{first + n} spooled")


@pytest.fixture
def relay(tmp_path: Path, certs: Path):
    r = Relay(
        tmp_path / "relay",
        config=_tls(certs, "relay").configuration(),
        readers={"dns": ("zeek/dns/",)},
    )
    try:
        _publish(r, 40)
        yield r
    finally:
        r.close()


def _client(relay: Relay, certs: Path, name: str) -> SpoolClient:
    return SpoolClient.tcp("127.0.0.1", relay.port, make_contexts(_tls(certs, name)).client)


def test_a_limited_reader_gets_only_its_topics_and_others_everything(relay, certs) -> None:
    with _client(relay, certs, "dns") as dns:
        welcome = dns.hello("follow", "dns")
        assert welcome["topics"] == ["zeek/dns/"]
        data, count = dns.fetch_counted(0, 40, 10)
        got = [(r.topic, r.offset) for r in unpack_records(data)]
        assert got == [
            (TOPICS[i % 4], i) for i in range(40) if TOPICS[i % 4].startswith("zeek/dns/")
        ]
        assert count == len(got) == 20
        # it may still follow live: offsets go on over what is not for it
        _publish(relay, 8, first=40)
        assert dns.fetch_counted(40, 48, 10)[1] == 4
    with _client(relay, certs, "other") as other:  # not named: everything
        assert "topics" not in other.hello("follow", "other")
        assert other.fetch_counted(0, 48, 10)[1] == 48
        assert other.request("status")["status"]["end"] == 48


def test_any_reader_naming_topics_gets_only_those(relay, certs) -> None:
    with _client(relay, certs, "other") as other:  # no limit of its own
        assert other.hello("follow", "other", topics=["zeek/http/", "zeek/conn/"])["topics"] == [
            "zeek/http/",
            "zeek/conn/",
        ]
        data, count = other.fetch_counted(0, 40, 10)
        got = [r.topic for r in unpack_records(data)]
        assert got == [TOPICS[i % 4] for i in range(40) if TOPICS[i % 4] in TOPICS[1::2]]
        assert count == len(got) == 20


def test_a_task_filters_what_an_older_relay_serves_unasked() -> None:
    """A relay that ignores a HELLO's ``topics`` (an older one) says none in its WELCOME:
    the task then leaves the other topics out itself."""
    stream = b"".join(pack_record(t, b"\x05\x01x", "s", 7, i) for i, t in enumerate(TOPICS))
    data, count = served_topics({}, ("zeek/dns/",), stream, len(TOPICS))
    assert [r.topic for r in unpack_records(data)] == ["zeek/dns/a", "zeek/dns/c"] and count == 2
    same = served_topics({"topics": ["zeek/dns/"]}, ("zeek/dns/",), stream, 4)
    assert same == (stream, 4)  # served by a relay that did the narrowing: taken as is
    assert served_topics({}, None, stream, 4) == (stream, 4)


def test_asking_for_more_is_forbidden_and_costs_nobody_else(relay, certs) -> None:
    with _client(relay, certs, "other") as bystander:
        bystander.hello("follow", "bystander")
        with _client(relay, certs, "dns") as dns, pytest.raises(RelayError) as err:
            dns.hello("follow", "dns", topics=["zeek/"])
        assert err.value.relay_code == "forbidden"
        assert "certificate 'dns' may not read topics zeek/" in str(err.value)
        with _client(relay, certs, "dns") as dns, pytest.raises(RelayError) as err:
            dns.hello("status", "dns")
        assert err.value.relay_code == "forbidden"
        assert bystander.fetch_counted(0, 40, 10)[1] == 40  # served throughout


@pytest.mark.parametrize("partition_data", ["auto", "inline"])
def test_a_spark_reader_with_a_limited_certificate_reads_its_topics(
    relay, certs, partition_data: str
) -> None:
    options = {
        "topics": "zeek/dns/", "relay": f"127.0.0.1:{relay.port}",
        "startingOffsets": "earliest", "partitionData": partition_data,
        **_tls(certs, "dns").spark_options(),
    }  # fmt: skip
    opts = parse_reader_options(options)
    reader = stream_reader(opts, default_schema(opts.format))
    try:
        start, end = reader.initialOffset(), reader.latestOffset(reader.initialOffset(), None)
        rows = []
        remote = pickle.loads(pickle.dumps(reader))
        for part in reader.partitions(start, end):
            for batch in remote.read(pickle.loads(pickle.dumps(part))):
                columns = batch.column("topic").to_pylist(), batch.column("offset").to_pylist()
                rows += zip(*columns, strict=True)
        assert sorted(rows, key=lambda r: r[1]) == [
            (TOPICS[i % 4], i) for i in range(40) if TOPICS[i % 4].startswith("zeek/dns/")
        ]
    finally:
        reader.stop()
    # The same certificate asking for every topic is refused, with the reason.
    opts = parse_reader_options({**options, "topics": "zeek/"})
    greedy = stream_reader(opts, default_schema(opts.format))
    try:
        with pytest.raises(RelayError, match="may not read topics zeek/"):
            greedy.initialOffset()
    finally:
        greedy.stop()


def test_a_zeek_log_reader_with_the_default_topics_is_served_every_record() -> None:
    """Logs reach a relay on ``zeek/logs/`` and, in a Broker cluster, on each logger's node
    topic (``zeek/cluster/node/<logger>/``): a ``format=zeek-logs`` reader that did not
    name its ``topics`` is served all the relay holds (it keeps the log messages); one
    that named them, and every other reader, is served its topics."""
    relay = {"relay": "127.0.0.1:9998"}
    logs = parse_reader_options({**relay, "format": "zeek-logs"})
    assert logs.topics == ("zeek/logs/",) and logs.served_topics is None
    named = parse_reader_options({**relay, "format": "zeek-logs", "topics": "zeek/logs/"})
    assert named.served_topics == ("zeek/logs/",)
    events = parse_reader_options({**relay, "topics": "site/a,site/b"})
    assert events.served_topics == ("site/a", "site/b")


@pytest.mark.parametrize("partition_data", ["auto", "inline"])
def test_a_spark_reader_reads_only_its_topics_from_a_relay_holding_more(
    relay, certs, partition_data: str
) -> None:
    """``topics`` holds for a relay as for a peering: the tasks (and the driver, inline)
    are served only the reader's topics, though its certificate may read everything."""
    opts = parse_reader_options(
        {
            "topics": "zeek/http/,zeek/conn/", "relay": f"127.0.0.1:{relay.port}",
            "startingOffsets": "earliest", "partitionData": partition_data,
            **_tls(certs, "other").spark_options(),
        }
    )  # fmt: skip
    reader = stream_reader(opts, default_schema(opts.format))
    try:
        start, end = reader.initialOffset(), reader.latestOffset(reader.initialOffset(), None)
        rows = []
        remote = pickle.loads(pickle.dumps(reader))
        for part in reader.partitions(start, end):
            for batch in remote.read(pickle.loads(pickle.dumps(part))):
                columns = batch.column("topic").to_pylist(), batch.column("offset").to_pylist()
                rows += zip(*columns, strict=True)
        assert sorted(rows, key=lambda r: r[1]) == [
            (TOPICS[i % 4], i) for i in range(40) if TOPICS[i % 4] in TOPICS[1::2]
        ]
    finally:
        reader.stop()


def test_the_node_takes_reader_limits_from_flags_and_the_file(tmp_path: Path, certs) -> None:
    spool = ["--spool", str(tmp_path / "spool"), "--subscribe", "zeek/", "--relay", "127.0.0.1:0"]
    refused = run_command("node", "--listen", "127.0.0.1:0", *spool, "--reader", "dns=zeek/dns/")
    assert refused.returncode == 2 and "needs mutual TLS" in refused.stderr
    bad = run_command("node", *spool, "--reader", "no-equals-sign")
    assert bad.returncode == 2 and "NAME=PREFIX" in bad.stderr
    from broker_spark.node.settings import load_node_config

    conf = tmp_path / "node.toml"
    conf.write_text('[spool]\ndir = "s"\n[spool.readers]\ndns = ["zeek/dns/"]\n"*" = []\n')
    assert load_node_config(conf).spool_readers == {"dns": ("zeek/dns/",), "*": ()}
    conf.write_text('[spool]\ndir = "s"\nreaders = ["x"]\n')
    with pytest.raises(Exception, match="readers must be a table"):
        load_node_config(conf)
