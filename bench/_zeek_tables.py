"""The tables part of ``bench/zeek_logs.py`` (``--only tables``): the mix of logs a Zeek
sees (:data:`TABLES_MIX`, its LogWrites and its spool, also used by the other benches of
Zeek's logs), the ways its tables are written, and :func:`bench_tables`, which reads the mix
from a relay into ``noop`` and into a table per log."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

#: Records in a Zeek's Batch of log writes.
BATCH = 400

TABLES_MIX = {"conn": 5, "dns": 3, "http": 2}


def mix_spool(folder: str, rows: int) -> int:
    """A spool of ``rows`` records of conn, dns and http (:data:`TABLES_MIX`), as a relay
    keeps them; the number of messages."""
    from broker_spark.data.binary import encode
    from broker_spark.spark.write.log_rows import _batch
    from broker_spark.spool.spool import Spool
    from broker_spark.zeek import LogCreate, standard_schema

    messages = []
    now = time.time_ns()
    for path in TABLES_MIX:
        schema = standard_schema(path)
        messages.append((f"zeek/logs/{schema.stream}", encode(LogCreate.of(schema)), "zeek", now))
    per_log = {p: rows * n // sum(TABLES_MIX.values()) for p, n in TABLES_MIX.items()}
    encoded = {p: log_writes(p) for p in TABLES_MIX}
    made = dict.fromkeys(TABLES_MIX, 0)
    while any(made[p] < per_log[p] for p in TABLES_MIX):
        for path, weight in TABLES_MIX.items():
            for _ in range(weight):
                if made[path] >= per_log[path]:
                    continue
                n = min(BATCH, per_log[path] - made[path])
                pool = encoded[path]
                chunk = [pool[(made[path] + i) % len(pool)] for i in range(n)]
                stream = standard_schema(path).stream
                messages.append((f"zeek/logs/{stream}", _batch(chunk), "zeek", now))
                made[path] += n
    with Spool(folder, index_interval=8) as spool:
        spool.append_batch(messages)
    return len(messages)


def log_writes(path: str) -> list[bytes]:
    """The recordings' LogWrites of log ``path``, each as it travels inside a Batch."""
    from zeek_recordings import LOG_RECORDINGS, recording

    from broker_spark.data.varbyte import encode_varbyte
    from broker_spark.zeek import standard_schema
    from broker_spark.zeek.log_scan import LOG_WRITE_HEAD

    def text(s: str) -> bytes:
        raw = s.encode()
        return encode_varbyte(len(raw)) + raw

    stream = standard_schema(path).stream
    head = (
        LOG_WRITE_HEAD + text(stream) + b"\x0b" + text("Log::WRITER_ASCII") + b"\x05"
        + text(path) + b"\x05"
    )  # fmt: skip
    serials = [s for name in LOG_RECORDINGS for s in recording(name).writes.get(path, [])]
    return [head + encode_varbyte(len(s)) + s for s in serials]


#: The ways the tables are written: the Parquet path (the tasks write Parquet with Arrow),
#: and Spark's writer handed the tasks' typed columns (ORC; Spark's Parquet).
TABLE_WAYS: dict[str, dict[str, Any]] = {
    "tables": {},
    "tables_orc": {"table_format": "orc"},
    "tables_spark_parquet": {"spark_writer": True},
}
#: With ``--lake`` (a PySpark the connectors support, e.g. .venv-spark-4.0): Delta and
#: Iceberg, each by its fast path (the tasks' files, committed by delta-rs or pyiceberg:
#: a Delta path table, a table of the JDBC catalog ``lake``) and by Spark's writer.
LAKE_WAYS: dict[str, dict[str, Any]] = {
    "tables_delta": {"table_format": "delta"},
    "tables_iceberg": {"table_format": "iceberg"},
    "tables_delta_spark": {"table_format": "delta", "spark_writer": True},
    "tables_iceberg_spark": {"table_format": "iceberg", "spark_writer": True},
}


def _table_name(kind: str, db: str, work: str) -> str:
    """Where a way writes its tables: Spark's catalog, a Delta folder, Iceberg's ``lake``."""
    if kind == "tables_delta":
        return f"delta.`{work}/{db}/{{path}}`"
    if kind.startswith("tables_iceberg"):
        return f"lake.{db}.{{path}}"
    return db + ".{path}"


def bench_tables(spark: Any, rows: int, repeat: int, lake: bool = False) -> dict[str, Any]:
    """The mix read from a relay into ``noop`` and into a table per log, taking turns
    (``lake``: Delta's and Iceberg's ways too)."""
    import shutil
    import tempfile
    import uuid

    from relay import _Relay
    from spark_stream import CpuSampler, _per_row, _sustained, run_to_end

    from broker_spark.spark.zeek_tables import table_input_schema, write_zeek_tables

    work = tempfile.mkdtemp(prefix="bench-tables-")
    spool = str(Path(work) / "spool")
    try:  # the folder goes if the spool or its relay cannot be made (the runs' finally is later)
        messages = mix_spool(spool, rows)
        relay = _Relay(spool, 8)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    records = sum(rows * n // sum(TABLES_MIX.values()) for n in TABLES_MIX.values())
    runs: dict[str, list[dict[str, Any]]] = {
        "noop": [], "noop_typed": [], "noop_tasks": [], "noop_messages": []
    }  # fmt: skip
    ways = {**TABLE_WAYS, **(LAKE_WAYS if lake else {})}
    runs.update({kind: [] for kind in ways})

    def source() -> Any:
        return (
            spark.readStream.format("broker")
            .option("relay", f"127.0.0.1:{relay.port}")
            .option("ssl.disable", "true")
            .option("startingOffsets", "earliest")
        )

    try:
        for i in range(repeat):
            for kind in runs:
                sampler = CpuSampler().__enter__()
                if kind == "noop_typed":
                    try:
                        stream_rows, seconds = _typed_reads(source)
                    finally:
                        sampler.__exit__()
                else:
                    if kind.startswith("noop"):
                        as_messages = kind == "noop_messages"
                        query = (
                            source()
                            .option("format", "zeek-logs")
                            .option("relayDecode", "false" if kind == "noop_tasks" else "true")
                            .schema(table_input_schema(runs=as_messages, messages=as_messages))
                            .load()
                            .writeStream.format("noop")
                            .trigger(availableNow=True)
                            .start()
                        )
                    else:
                        db = "bench_" + uuid.uuid4().hex[:8]
                        spark.sql(f"CREATE DATABASE {db} LOCATION '{Path(work) / db}'")
                        table = _table_name(kind, db, work)
                        query = write_zeek_tables(
                            source(),
                            str(Path(work) / f"checkpoint-{kind}-{i}"),
                            table=table,
                            quarantine=db + ".quarantine",
                            trigger={"availableNow": True},
                            **ways[kind],
                        )
                    _rate, stream_rows, seconds = _sustained(run_to_end(query, sampler, 900))
                got = stream_rows  # noop: a row a record
                if kind in ways:
                    got = sum(spark.table(table.format(path=p)).count() for p in TABLES_MIX)
                    spark.sql(f"DROP DATABASE {db} CASCADE")
                if kind == "noop_messages":  # a row a message's log: noop counts no records
                    got = records
                else:
                    assert got == records, f"{got} records of {records} by {kind}"
                runs[kind].append(
                    {
                        "rows": got,
                        "stream_rows": stream_rows,
                        "rows_per_s": got / seconds if seconds else 0.0,
                        "seconds": seconds,
                        "cpu_us_per_row": _relay_named(_per_row(sampler.by_role(), got)),
                    }
                )
    finally:
        relay.close()
        shutil.rmtree(work, ignore_errors=True)
    best = {k: max(v, key=lambda r: r["rows_per_s"]) for k, v in runs.items()}
    best["messages"] = messages
    best["mix"] = TABLES_MIX
    for kind in ways:
        best[f"{kind}_vs_noop"] = best[kind]["rows_per_s"] / best["noop"]["rows_per_s"]
    return best


def _typed_reads(source: Any) -> tuple[int, float]:
    """Each log of the mix read as its typed columns (``logs=<path>``, relay-decoded as by
    default, with the schema the typed limits yield: the log's columns and the metadata),
    a query a log into ``noop``, one after the other (as the limits run them): the records
    and the seconds, summed (the caller samples the CPU around them all)."""
    from spark_stream import CpuSampler, _sustained, run_to_end

    from broker_spark.spark.zeek_schema import zeek_log_schema

    rows, seconds = 0, 0.0
    for path in TABLES_MIX:
        query = (
            source()
            .option("format", "zeek-logs")
            .option("logs", path)
            .schema(zeek_log_schema(path))
            .load()
            .writeStream.format("noop")
            .trigger(availableNow=True)
            .start()
        )
        _rate, got, took = _sustained(run_to_end(query, CpuSampler(), 900))
        rows, seconds = rows + got, seconds + took
    return rows, seconds


def _relay_named(cpu: dict[str, float]) -> dict[str, float]:
    """The tiers' CPU, the relay's process named as such (the sampler's role for processes
    the bench spawns is ``publisher/subscriber``)."""
    return {("relay" if k == "publisher/subscriber" else k): v for k, v in cpu.items()}
