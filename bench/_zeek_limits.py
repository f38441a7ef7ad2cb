"""The limits the read of Zeek's logs is measured against, for ``bench/zeek_logs.py --only
tables`` (issue 51's yardstick): the mix's records as the reader's converter types them,
into ``noop`` two ways in the tables' session, a Python source yielding them pre-built
(:mod:`_typed_null_source`) and Spark's own rows of them, cached.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from _typed_null_source import TypedNullSource
from spark_stream import CpuSampler, _per_row, _sustained, run_to_end

from broker_spark.columnar.log_converter import LogConverter
from broker_spark.data.binary import encode
from broker_spark.spark.source import arrow_schema_of
from broker_spark.spark.write.log_rows import _batch
from broker_spark.spark.zeek_schema import log_columns, zeek_log_schema
from broker_spark.zeek import LogCreate, standard_schema

#: The limits the read is measured against (bench_limits), as the report names them.
LIMITS = {
    "typed_null_source": "a Python source of the same typed rows, pre-built",
    "typed_ipc_source": "the same source, each batch read from Arrow IPC bytes (a relay-decoded "
    "read's Spark side)",
    "cached_noop": "Spark's own noop of the same rows, cached",
}


def log_payloads(path: str, rows: int, writes: list[bytes], batch: int) -> list[bytes]:
    """Log ``path``'s LogCreate, then ``rows`` of its records (``writes``, its LogWrites,
    cycled) in Batches of ``batch``: the messages a Zeek sends."""
    payloads = [encode(LogCreate.of(standard_schema(path)))]
    for lo in range(0, rows, batch):
        n = min(batch, rows - lo)
        payloads.append(_batch([writes[(lo + i) % len(writes)] for i in range(n)]))
    return payloads


def log_converter(path: str) -> LogConverter:
    """The reader's converter of log ``path``'s records into its typed columns."""
    schema = standard_schema(path)
    spark_schema = zeek_log_schema(schema)
    columns = log_columns(spark_schema, schema.names)
    return LogConverter(arrow_schema_of(spark_schema), columns, known=schema, paths=[path])


def _typed_block(path: str, rows: int, writes: list[bytes], batch: int) -> tuple[Any, Any]:
    """``rows`` of log ``path``'s records in Batches of ``batch``, as the reader's converter
    types them: the Arrow batch, and its Spark schema."""
    payloads = log_payloads(path, rows, writes, batch)
    n = len(payloads)
    typed = log_converter(path).convert(
        [f"zeek/logs/{standard_schema(path).stream}"] * n, payloads, ["zeek"] * n,
        [1_700_000_000_000_000_000] * n, list(range(n)),
    )  # fmt: skip
    assert typed.num_rows == rows, (path, typed.num_rows)
    return typed, zeek_log_schema(standard_schema(path))


def bench_limits(
    spark: Any,
    rows: int,
    repeat: int,
    mix: dict[str, int],
    writes_of: Callable[[str], list[bytes]],
    batch: int,
) -> dict[str, Any]:
    """The limit of a read of the ``mix``'s typed rows (``writes_of`` a log: its LogWrites, sent
    in Batches of ``batch``): a Python source yielding them pre-built
    (``_typed_null_source``) and Spark's own cached rows, each into ``noop``, a query (or a
    write) per log, their times and CPU summed."""

    spark.dataSource.register(TypedNullSource)
    work = tempfile.mkdtemp(prefix="bench-limits-")
    per_log = {p: rows * n // sum(mix.values()) for p, n in mix.items()}
    frames: dict[str, Any] = {}
    files: dict[str, tuple[str, Any]] = {}
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in LIMITS}
    try:
        for path, count in per_log.items():
            block, schema = _typed_block(path, 10_000, writes_of(path), batch)
            file = f"{work}/{path}.arrow"
            with pa.OSFile(file, "wb") as sink, pa.ipc.new_file(sink, block.schema) as out:
                out.write_batch(block)
            files[path] = (file, schema)
            whole = pa.Table.from_batches([block] * (count // block.num_rows + 1)).slice(0, count)
            pq.write_table(whole, f"{work}/{path}.parquet")
            frames[path] = spark.read.parquet(f"{work}/{path}.parquet").cache()
            assert frames[path].count() == count
        for _ in range(repeat):
            for kind in runs:
                sampler = CpuSampler().__enter__()
                seconds = 0.0
                try:
                    for path, count in per_log.items():
                        if kind == "cached_noop":
                            started = time.perf_counter()
                            frames[path].write.format("noop").mode("overwrite").save()
                            seconds += time.perf_counter() - started
                            continue
                        file, schema = files[path]
                        query = (
                            spark.readStream.format("bench-typed-null")
                            .schema(schema)
                            .option("file", file)
                            .option("rows", str(count))
                            .option("ipc", "true" if kind == "typed_ipc_source" else "false")
                            .load()
                            .writeStream.format("noop")
                            .trigger(availableNow=True)
                            .start()
                        )
                        _rate, got, took = _sustained(run_to_end(query, CpuSampler(), 900))
                        assert got == count, (path, got, count)
                        seconds += took
                finally:
                    sampler.__exit__()
                total = sum(per_log.values())
                runs[kind].append(
                    {
                        "rows": total,
                        "rows_per_s": total / seconds,
                        "seconds": seconds,
                        "cpu_us_per_row": _per_row(sampler.by_role(), total),
                    }
                )
    finally:
        for frame in frames.values():
            frame.unpersist()
        shutil.rmtree(work, ignore_errors=True)
    return {k: max(v, key=lambda r: r["rows_per_s"]) for k, v in runs.items()}
