"""A table per Zeek log in Spark Declarative Pipelines, run by ``spark-pipelines``.

docs/how-to/pipelines.md's pipeline (its spec and source file, the snippets marked
``<!-- live: pipeline-spec -->`` and ``pipeline-source``, moved onto a local relay): the
source file calls ``broker_spark.spark.pipelines.zeek_tables`` once; ``spark-pipelines run`` (PySpark's own command: a Spark Connect server and the
pipeline's client, processes of their own) then updates a streaming table per log
from a relay holding a real Zeek's recorded logs. A second update after more of
Zeek's logs reach the relay adds exactly those: nothing is read twice. The catalog
is Hive's metastore in a local Derby database: Spark's default catalog lives in the
server's memory, so a second update finds the tables' folders and no tables, and
refuses (LOCATION_ALREADY_EXISTS). Zeek's own JSON logs are the oracle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from live.doc_snippets import replace_all, snippet
from spark_fixtures import spark, wait_for  # noqa: F401
from spark_pipelines_cli import run_spark_pipelines
from test_spark_relay import Relay
from test_spark_zeek_tables import zeeks_own
from zeek_recordings import recording

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

LOGS = ("conn", "dns", "http", "files")  # the doc's
NOT_LOGGED = ("topic", "sender", "received_at", "offset", "record", "relay", "day")


def write_pipeline(folder: Path, port: int) -> None:
    """docs/how-to/pipelines.md's pipeline, its spec and source file, moved onto the test's relay (no
    TLS) and folder."""
    (folder / "transformations").mkdir(parents=True)
    spec = replace_all(
        snippet("how-to/pipelines.md", "pipeline-spec"),
        {"file:///srv/zeek-pipeline/storage": f"file://{folder / 'storage'}"},
    )
    (folder / "spark-pipeline.yml").write_text(spec)
    source = replace_all(
        snippet("how-to/pipelines.md", "pipeline-source"),
        {
            "relay1.example.net:9998,relay2.example.net:9998": f"127.0.0.1:{port}",
            '"ssl.certificate": "/local_disk0/broker-tls/reader.pem",': '"ssl.disable": "true",',
            '        "ssl.key": "/local_disk0/broker-tls/reader.key",\n': "",
            '        "ssl.cafile": "/local_disk0/broker-tls/ca.pem",\n': "",
        },
    )
    assert f"logs={list(LOGS)!r}".replace("'", '"') in source, source
    (folder / "transformations" / "zeek.py").write_text(source)


def run_pipeline(folder: Path) -> str:
    """``spark-pipelines run`` in ``folder``: its output; fails the test if it failed."""
    return run_spark_pipelines(folder)[1]


def table_rows(spark: Any, folder: Path, path: str) -> tuple[list[tuple], Any]:  # noqa: F811
    """The rows of log ``path``'s table, read from its files (the test's session has a
    catalog of its own): Zeek's columns only, and the whole frame."""
    df = spark.read.parquet(str(folder / "spark-warehouse" / f"zeek_{path}"))
    logged = df.select(*[c for c in df.columns if c not in NOT_LOGGED])
    return sorted(map(tuple, logged.collect())), df


def test_zeek_tables_defines_a_streaming_table_per_log_and_updates_add_only_the_new(
    spark,  # noqa: F811
    tmp_path: Path,
) -> None:
    first = recording("zeek-logs-http-methods")
    second = recording("zeek-logs-dns-edns-ecs")
    relay = Relay(tmp_path / "relay")
    folder = tmp_path / "pipeline"
    try:
        spool = relay.node.service.spool
        relay.publisher.publish_encoded(first.data)
        wait_for(lambda: spool.end_offset() >= len(first.data), 30, "round 1 spooled")
        write_pipeline(folder, relay.port)
        run_pipeline(folder)
        for path in ("conn", "http", "files"):
            got, df = table_rows(spark, folder, path)
            assert got == zeeks_own(spark, first.local_lines(path), path, tmp_path), path
            assert {"day", "offset", "record", "relay"} <= set(df.columns)
            assert "_path" not in df.columns  # as write_zeek_tables' tables
            assert df.schema["ts"].dataType.typeName() == "timestamp"
        sent_before = relay.node.server.served_records
        relay.publisher.publish_encoded(second.data)
        total = len(first.data) + len(second.data)
        wait_for(lambda: spool.end_offset() >= total, 30, "round 2 spooled")
        run_pipeline(folder)  # the second update: only what came since
        # each flow was served its own log's records: round 2 once, not every record per table
        per_flow = relay.node.server.served_records - sent_before
        assert per_flow < (len(LOGS) + 1) * len(second.data)  # the quarantine too
    finally:
        relay.close()
    for path in LOGS:
        lines = [
            line for rec in (first, second) if path in rec.writes for line in rec.local_lines(path)
        ]
        got, df = table_rows(spark, folder, path)
        assert got == zeeks_own(spark, lines, path, tmp_path), path
        positions = df.select("offset", "record").collect()
        assert len(positions) == len(set(positions)) == len(lines), path
