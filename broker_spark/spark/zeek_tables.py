"""Zeek's logs as a table per log, exactly once: the public face of :mod:`.tables`.

``write_zeek_tables(source, checkpoint, ...)`` starts the query; :class:`ZeekTables` is
its ``foreachBatch`` writer, for a query you build yourself; ``table_input_schema()`` the
columns that writer reads. See docs/zeek.md ("A table per log").
"""

from broker_spark.spark.tables.columns import KEPT_METADATA
from broker_spark.spark.tables.log_tables import (
    STREAM_COLUMNS,
    ZeekTableError,
    ZeekTables,
    each_record,
    table_input_schema,
    write_zeek_tables,
)

__all__ = [
    "KEPT_METADATA",
    "STREAM_COLUMNS",
    "ZeekTableError",
    "ZeekTables",
    "each_record",
    "table_input_schema",
    "write_zeek_tables",
]
