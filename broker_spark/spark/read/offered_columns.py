"""The columns a stream reader offers: the message formats' default DDL, and for
``format=zeek-logs`` which log schema a reader of one log follows.

``DataSource.schema()`` answers with :func:`default_ddl` for messages and events; the same
columns as Arrow schemas, and how records become them, are in
:mod:`broker_spark.columnar.record_batches` (a test keeps the two the same).

A reader of Zeek's logs (:class:`~broker_spark.spark.read.rows.LogRows`) differs from a
message reader in three ways: its runtime's pump shows every message to a
:class:`~broker_spark.spool.schema_history.LogSchemaHistory`, which keeps the
LogCreates; each partition carries the log schemas in force at its first offset; and
executors turn records into rows with a
:class:`~broker_spark.columnar.log_converter.LogConverter`. What ``load()`` offers and
which schema one log's typed columns follow are decided here.
"""

from __future__ import annotations

from pyspark.sql.types import StructType

from broker_spark.reader.options import ReaderOptions
from broker_spark.reader.schema_probe import learn_log_schema
from broker_spark.spark.zeek_schema import generic_log_schema, zeek_log_schema
from broker_spark.spool.schema_history import LogSchemaHistory
from broker_spark.zeek.log_schema import LogSchema, standard_schema

__all__ = [
    "DEFAULT_DDL",
    "SPOOL_INDEX_INTERVAL",
    "ZEEK_DDL",
    "default_ddl",
    "known_log_schema",
    "offered_schema",
]

DEFAULT_DDL = "topic STRING, data STRING, sender STRING, received_at TIMESTAMP, offset LONG"
ZEEK_DDL = DEFAULT_DDL + ", event STRING, args STRING"

#: Messages between the spool's index entries. A Batch of 400 records is 150 KB or so, and
#: reading a range starts at the index entry before it, skipping records up to its start:
#: every 128 messages (the default, sized for events) that is megabytes read for nothing.
SPOOL_INDEX_INTERVAL = 8


def known_log_schema(options: ReaderOptions, *, learn: bool = False) -> LogSchema | None:
    """The columns of the one log a reader reads (None when it reads several or none is
    known): learned (``learn``: from a peered Zeek or an earlier run's spool), else Zeek's
    standard ones."""
    if len(options.logs) != 1:
        return None
    path = options.logs[0]
    if learn:
        learned = learn_log_schema(options, path)
        if learned is not None:
            return learned
    elif options.spool.path:
        learned = LogSchemaHistory(options.spool.path, readonly=True).latest(path)
        if learned is not None:
            return learned
    return standard_schema(path, options.zeek_version)


def offered_schema(options: ReaderOptions) -> StructType:
    """What ``load()`` offers without a user schema: a log's typed columns, or ``_path, log``
    (and, read from relays, ``relay``)."""
    known = known_log_schema(options, learn=True)
    relay = bool(options.relays)
    if known is None:
        return generic_log_schema(relay)
    return zeek_log_schema(known, options.columns, relay=relay)


def default_ddl(fmt: str = "default", relay: bool = False) -> str:
    """The default schema of ``format`` (``"zeek"`` adds ``event``, ``args``) as Spark DDL;
    read from relays, ``relay`` (the id of the relay a row comes from) ends it."""
    ddl = ZEEK_DDL if fmt == "zeek" else DEFAULT_DDL
    return ddl + ", relay STRING" if relay else ddl
