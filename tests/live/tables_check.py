"""Zeek's own JSON logs against the tables ``write_zeek_tables`` wrote, record for record."""

from __future__ import annotations

import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from broker_spark.spark.zeek_schema import read_zeek_json

#: The columns a table adds to a log's own: where each record came from, and its day.
NOT_LOGGED = ("topic", "sender", "received_at", "offset", "record", "relay", "day")


def tables_of(spark: Any, db: str) -> set[str]:
    """The tables of ``db`` (not the session's temporary views, which every database lists)."""
    return {t.name for t in spark.catalog.listTables(db) if not t.isTemporary}


def count(spark: Any, table: str) -> int:
    """Rows in ``table`` now: the catalog's view of it is refreshed first (a session that
    writes a table with files of its own may otherwise count an older listing)."""
    spark.catalog.refreshTable(table)
    return spark.table(table).count()


def wait_for_tables(
    spark: Any, db: str, expected: Mapping[str, int], timeout: float = 240.0
) -> None:
    """Until every table of ``expected`` holds at least its number of rows."""
    deadline = time.monotonic() + timeout
    while True:
        have = tables_of(spark, db)
        counts = {p: count(spark, f"{db}.{p}") if p in have else 0 for p in expected}
        if all(counts[p] >= n for p, n in expected.items()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout} s the tables hold {counts}, not {expected}")
        time.sleep(1.0)


def assert_table_is_zeeks(
    spark: Any, table: str, path: str, lines: Sequence[str], tmp: Path
) -> None:
    """``table`` holds exactly the records of Zeek's JSON ``lines`` (each once), typed.

    Zeek's lines are read into typed columns (``read_zeek_json``, Zeek's standard columns of
    the log); the table's columns are the ones the live Zeek declared. Every column of the
    table must be one of Zeek's, every standard column the table lacks must be unset in
    every line, and the two must be equal as multisets of rows."""
    file = tmp / f"{path}-{uuid.uuid4().hex[:8]}.log"
    file.write_text("\n".join(lines) + "\n")
    want = read_zeek_json(spark, str(file), path).drop("_path")
    spark.catalog.refreshTable(table)
    got = spark.table(table)
    columns = [c for c in got.columns if c not in NOT_LOGGED]
    unknown = [c for c in columns if c not in want.columns]
    assert not unknown, f"{table}: columns Zeek's {path} log does not have: {unknown}"
    absent = [c for c in want.columns if c not in columns]
    for column in absent:
        assert want.where(want[column].isNotNull()).count() == 0, (table, column)
    got, want = got.select(*columns), want.select(*columns)
    assert got.schema == want.schema, f"{table}: {got.schema} against Zeek's {want.schema}"
    n_got, n_want = got.count(), want.count()
    missing = want.exceptAll(got).collect()
    extra = got.exceptAll(want).collect()
    assert not missing and not extra and n_got == n_want, (
        f"{table}: {n_got} rows for Zeek's {n_want}; missing {missing[:3]}, extra {extra[:3]}"
    )


def assert_relays_write_zeeks_tables(
    spark: Any,
    db: str,
    relays: str,
    oracle: Mapping[str, Sequence[str]],
    tmp: Path,
    others: Collection[str] = (),
) -> None:
    """One ``write_zeek_tables`` query over ``relays`` (``host:port,...``) from the start
    of their spools, run until it has read everything, into database ``db``: each log of
    ``oracle`` (Zeek's JSON lines by path) is its table exactly, and no other table was
    made but ``others`` (logs of Zeek's processes themselves, not of the traffic)."""
    from broker_spark.spark.zeek_tables import write_zeek_tables

    spark.sql(f"CREATE DATABASE IF NOT EXISTS {db} LOCATION '{tmp / 'warehouse'}'")
    source = (
        spark.readStream.format("broker")
        .option("relay", relays)
        .option("startingOffsets", "earliest")
    )
    query = write_zeek_tables(
        source, str(tmp / "checkpoint"), table=f"{db}.{{path}}",
        quarantine=f"{db}.quarantine", trigger={"availableNow": True},
    )  # fmt: skip
    query.awaitTermination(240)
    assert query.exception() is None
    for path, lines in sorted(oracle.items()):
        assert_table_is_zeeks(spark, f"{db}.{path}", path, lines, tmp)
    assert tables_of(spark, db) - set(oracle) <= set(others)
