"""A log's rows of a micro-batch as a DataFrame of its typed columns, for Spark's writers.

Delta, Iceberg, ORC and Spark's own Parquet writer take a DataFrame; what they
are handed decides their speed. Zeek's JSON lines parsed in the JVM
(``from_json``) made about 53,000 records/s here, against about 190,000 when
the tasks decode the messages themselves and write Parquet with Arrow. So the
tasks decode here too: one ``mapInArrow`` per log and columns, in which each
task makes its rows the log's typed Arrow columns with the same code the
Parquet path runs (:class:`~broker_spark.spark.tables.typed_rows.TypedRows`),
and Spark's writer takes those columns as they are: no JSON lines, no parse.

Rows a task cannot make typed (a record that does not decode as its columns
say, a count past 2^63, which Spark reads as null) come out of the same
``mapInArrow`` as Zeek's JSON lines with their columns null, and the frame
takes their columns from Spark's own parse of the line instead
(:func:`~broker_spark.spark.zeek_schema.parse_zeek_json`, which reads a line
with nothing in it as null, cheaply): the rows Spark's parse always gave them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from broker_spark.columnar.log_metadata import learn_schema_texts
from broker_spark.spark.compat import arrow_schema
from broker_spark.spark.tables.columns import KEPT_METADATA, with_metadata
from broker_spark.spark.tables.stage import DAY
from broker_spark.spark.tables.typed_rows import NotTyped, TypedRows, to_schema
from broker_spark.spark.zeek_schema import parse_zeek_json, zeek_log_schema
from broker_spark.zeek.log_schema import LogSchema

__all__ = ["LINE", "typed_frame", "typed_partition"]

#: The column of a refused record's JSON line (null for the rows the task made typed).
LINE = "_zeek_line"
_PARSED = "_zeek_parsed"


def typed_frame(
    rows: Any,
    path: str,
    schema: LogSchema,
    *,
    columns: str,
    zeek_version: str,
    known: dict[str, str],
) -> Any:
    """``rows`` (the stream's rows of log ``path`` written with ``schema``: messages'
    bytes, runs of lines or a line each) as the log's typed columns, the metadata each
    table row keeps and ``day``, a row a record. ``known``: the columns (JSON) of schema
    ids learned so far (a partition names an id's columns on its first row only)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    log_columns = zeek_log_schema(schema, columns, metadata=False)
    kept = with_metadata(log_columns)
    produced = StructType([*kept.fields, StructField(LINE, StringType(), True)])
    run = typed_partition(
        path,
        json.dumps(schema.to_json()),
        KEPT_METADATA,
        columns,
        zeek_version,
        known,
        arrow_schema(produced),
    )
    typed = rows.mapInArrow(run, produced)
    parsed = typed.select("*", parse_zeek_json(F.col(LINE), schema, columns).alias(_PARSED))
    typed_or_parsed = [
        F.when(F.col(LINE).isNull(), F.col(f"`{name}`"))
        .otherwise(F.col(_PARSED).getField(name))
        .alias(name)
        for name in log_columns.names
    ]
    metadata = [F.col(f"`{f.name}`") for f in kept.fields[len(log_columns.fields) :]]
    out = parsed.select(*typed_or_parsed, *metadata)
    # the day of the record's time (a log of a site's own may have no ts: its arrival)
    when = "ts" if "ts" in schema.names else kept.names[len(log_columns.fields) + 2]
    return out.withColumn(DAY, F.to_date(F.col(f"`{when}`")))


def typed_partition(
    path: str,
    schema_text: str,
    keep: Sequence[str],
    columns: str,
    zeek_version: str,
    known: dict[str, str],
    produced: pa.Schema,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of :func:`typed_frame`: each batch of rows as batches of
    ``produced`` (the log's columns, the ``keep`` metadata, :data:`LINE`)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema = LogSchema.from_json(json.loads(schema_text), source="the stream")
        rows = TypedRows(path, schema, keep, columns, zeek_version)
        texts = dict(known)
        first_kept = len(produced) - 1 - len(keep)
        kept_names = produced.names[first_kept : first_kept + len(keep)]
        for batch in batches:
            if not batch.num_rows:
                continue
            learn_schema_texts(batch, texts)
            table = pa.Table.from_batches([batch])
            try:
                yield to_schema(rows.typed(table), produced)
            except NotTyped:  # Spark parses these records' lines
                lines, kept = rows.lines(table, texts)
                refused = {name: kept[meta] for name, meta in zip(kept_names, keep, strict=True)}
                refused[LINE] = lines
                yield to_schema(pa.table(refused), produced)

    return run
