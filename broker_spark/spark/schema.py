"""The default output schemas of the stream reader as Spark DDL, for ``DataSource.schema()``.

The same columns as Arrow schemas, and how records become them, are in
:mod:`broker_spark.columnar.record_batches`; a test keeps the two the same.
"""

from __future__ import annotations

__all__ = ["DEFAULT_DDL", "ZEEK_DDL", "default_ddl"]

DEFAULT_DDL = "topic STRING, data STRING, sender STRING, received_at TIMESTAMP, offset LONG"
ZEEK_DDL = DEFAULT_DDL + ", event STRING, args STRING"


def default_ddl(fmt: str = "default", relay: bool = False) -> str:
    """The default schema of ``format`` (``"zeek"`` adds ``event``, ``args``) as Spark DDL;
    read from relays, ``relay`` (the id of the relay a row comes from) ends it."""
    ddl = ZEEK_DDL if fmt == "zeek" else DEFAULT_DDL
    return ddl + ", relay STRING" if relay else ddl
