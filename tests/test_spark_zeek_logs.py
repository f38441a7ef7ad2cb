"""``format=zeek-logs`` in a real local Spark: a real Zeek's recorded log traffic as streams.

The recorded messages are replayed from a hub endpoint in the test process
into streaming queries; what the queries hold must equal what Spark reads
from the JSON logs the same Zeek wrote in the same run.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from spark_fixtures import hub, replay_logs, running, spark, wait_for  # noqa: F401
from zeek_recordings import recording

from broker_spark.data.binary import encode
from broker_spark.errors import SC
from broker_spark.spark.zeek_schema import read_zeek_json, zeek_log_schema
from broker_spark.zeek import LogCreate, LogField, LogSchema, standard_schema

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

METADATA = ["_path", "topic", "sender", "received_at", "offset", "record"]


def _reader(session: Any, port: int, **options: str) -> Any:
    reader = (
        session.readStream.format("broker")
        .option("format", "zeek-logs")
        .option("peer", f"127.0.0.1:{port}")
        .option("ssl.disable", "true")
        .option("schemaWait", "0")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _replay(
    session: Any, endpoint: Any, name: str, queries: dict[str, int], before: set[str]
) -> None:
    replay_logs(session, endpoint, recording(name).data, queries, before)


@pytest.mark.slow  # long (5 s and more): make test-slow, and every PySpark (versions)
@pytest.mark.versions
def test_a_stream_of_one_log_equals_zeeks_own_json_logs(spark, hub) -> None:  # noqa: F811
    name = "zeek-logs-dns-edns-ecs"
    rec = recording(name)
    dns = _reader(spark, hub.hub_port, logs="dns")
    conn = _reader(spark, hub.hub_port, logs="conn", columns="flat")
    assert dns.schema == zeek_log_schema("dns")
    assert [f.name for f in dns.schema.fields[2:3]] == ["id"] and "id.orig_h" in conn.columns
    before = set(hub._core.peer_filters())
    with (
        running(dns.writeStream.format("memory").queryName("zl_dns").start()),
        running(conn.writeStream.format("memory").queryName("zl_conn").start()),
    ):
        _replay(
            spark,
            hub,
            name,
            {"zl_dns": len(rec.writes["dns"]), "zl_conn": len(rec.writes["conn"])},
            before,
        )
        folder = rec.folder / "sender"
        for table, log, columns in (("zl_dns", "dns", "nested"), ("zl_conn", "conn", "flat")):
            live = spark.sql(f"select * from {table}")
            assert {r["_path"] for r in live.select("_path").collect()} == {log}
            live = live.drop(*METADATA)
            archived = read_zeek_json(spark, str(folder / f"{log}.log"), log, columns).drop("_path")
            assert live.schema == archived.schema
            assert live.count() == archived.count() == len(rec.writes[log])
            assert live.exceptAll(archived).count() == 0 and archived.exceptAll(live).count() == 0
        # flat names compare directly with what Spark itself infers from Zeek's JSON
        inferred = spark.read.json(str(folder / "conn.log"))
        plain = [c for c in inferred.columns if c not in ("ts", "tunnel_parents")]
        picked = [f"`{c}`" for c in plain]
        live = spark.sql("select * from zl_conn").selectExpr(*picked)
        assert live.exceptAll(inferred.selectExpr(*picked)).count() == 0


def test_several_logs_arrive_as_zeeks_json_lines(spark, hub) -> None:  # noqa: F811
    name = "zeek-logs-http-methods"
    rec = recording(name)
    df = _reader(spark, hub.hub_port, logs="conn,http,files")
    assert df.columns == ["_path", "log", "topic", "sender", "received_at", "offset", "record"]
    before = set(hub._core.peer_filters())
    with running(df.writeStream.format("memory").queryName("zl_many").start()):
        total = sum(len(rec.writes[p]) for p in ("conn", "http", "files"))
        _replay(spark, hub, name, {"zl_many": total}, before)
        rows = spark.sql("select _path, log from zl_many order by offset").collect()
        for path in ("conn", "http", "files"):
            # Zeek's lines exactly, and in order (a Batch's rows keep their order)
            lines = [r["log"] for r in rows if r["_path"] == path]
            assert lines == rec.local_lines(path)
        # the typed schema reads the log column with from_json, as for a one-log stream
        parsed = spark.sql("select log from zl_many where _path = 'http'").selectExpr(
            "from_json(log, 'method STRING, status_code BIGINT') as r"
        )
        assert {r["r"]["method"] for r in parsed.collect()} >= {"GET", "OPTIONS"}


def test_load_learns_the_columns_a_peered_zeek_declares(spark, hub) -> None:  # noqa: F811
    site = LogSchema(
        "Conn::LOG",
        "conn",
        standard_schema("conn").fields + (LogField.of("site.name", "string", True),),
    )
    statuses = hub.make_status_subscriber(True)
    stop = threading.Event()

    def act_like_zeek() -> None:
        # a Zeek sends a LogCreate of each active log to every new peer
        while not stop.is_set():
            for item in statuses.get(8, 0.1) or []:
                if getattr(item, "code", lambda: None)() == SC.PeerAdded:
                    wait_for(lambda: hub.peer_subscriptions(), 10)
                    hub.publish_encoded([("zeek/logs/Conn::LOG", encode(LogCreate.of(site)))])

    thread = threading.Thread(target=act_like_zeek, daemon=True)
    thread.start()
    try:
        df = _reader(spark, hub.hub_port, logs="conn", schemaWait="10")
        assert df.schema == zeek_log_schema(site)
        assert df.schema["site"].dataType.simpleString() == "struct<name:string>"
        # without a peered Zeek that says otherwise: Zeek's standard columns
        plain = _reader(spark, hub.hub_port, logs="dns", schemaWait="0.2")
        assert plain.schema == zeek_log_schema("dns")
    finally:
        stop.set()
        thread.join(5)
        statuses.reset()
