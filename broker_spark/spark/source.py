"""``BrokerDataSource``: the ``broker`` format of ``spark.read``/``readStream``/``write``/``writeStream``.

Spark builds this object in short-lived worker processes (to ask for the
schema, to create readers and writers), so nothing here starts anything: it
parses the options (a bad one fails the query at start, naming the option)
and hands out the reader or writer that fits them.

* ``readStream`` with ``topics``: a :class:`~broker_spark.spark.read.stream.StreamReader`
  of messages, or with ``format=zeek-logs`` of Zeek's log records as rows (from one
  spool, or from relays); with ``store``: the store's change events
  (:func:`~broker_spark.spark.tables.stores.store_change_reader`).
* ``read`` with ``store``: :class:`StoreTableReader` (the store's contents).
* ``write``/``writeStream``: publishes rows (:mod:`~broker_spark.spark.write.writers`),
  or puts them into a store with ``store``.

Spark's ``schema()`` cannot tell a batch read from a stream read, so a store
has one default schema for both (:data:`~broker_spark.spark.tables.stores.STORE_DDL`).

:func:`~broker_spark.spark.register` registers a subclass that carries the
session's parallelism (:attr:`BrokerDataSource.session_parallelism`): Spark
pickles the registered class to every process that builds the source, so the
stream readers plan partitions for the cluster rather than for the driver's
cores (:mod:`~broker_spark.spark.read.parallelism`).
"""

from __future__ import annotations

import pyarrow as pa

from broker_spark.spark.requirement import unsupported_pyspark

try:
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
except ImportError as exc:  # PySpark 3.5 and earlier, or none: say what is needed
    raise unsupported_pyspark() from exc
from pyspark.sql.types import StructType

from broker_spark.reader.options import (
    BrokerOptionError,
    ReaderOptions,
    parse_reader_options,
    parse_writer_options,
)
from broker_spark.spark.compat import arrow_schema
from broker_spark.spark.read.deferred import (
    DEFERRED_COLUMN,
    DEFERRED_DDL,
    DeferredRows,
    rows_schema,
)
from broker_spark.spark.read.offered_columns import default_ddl, offered_schema
from broker_spark.spark.read.stream import StreamReader, stream_reader
from broker_spark.spark.tables.stores import (
    STORE_DDL,
    StoreStreamWriter,
    StoreTableReader,
    StoreTableWriter,
    store_change_reader,
)
from broker_spark.spark.write.writers import BrokerBatchWriter, BrokerStreamWriter

__all__ = ["BrokerDataSource", "arrow_schema_of"]


def arrow_schema_of(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects ``read`` to yield for ``schema`` (exactly, nullability included)."""
    return arrow_schema(schema)


class BrokerDataSource(DataSource):
    """Zeek Broker topics and data stores as Spark tables and streams (format ``"broker"``)."""

    #: The parallelism of the session that registered the source (None: not registered by
    #: :func:`~broker_spark.spark.register`, so the driver's cores stand in for it).
    session_parallelism: int | None = None

    @classmethod
    def name(cls) -> str:
        return "broker"

    def schema(self) -> str | StructType:
        options = parse_reader_options(self.options, streaming=True)
        if options.deferred_rows is not None:
            return DEFERRED_DDL
        if options.store is not None:
            return STORE_DDL
        if options.format == "zeek-logs":
            return offered_schema(options)
        return default_ddl(options.format, relay=bool(options.relays))

    # --- reading -----------------------------------------------------------------------------

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = parse_reader_options(self.options, streaming=True)
        if options.deferred_rows is None:
            return self._stream_reader(options, schema)
        if schema.fieldNames() != [DEFERRED_COLUMN]:
            raise BrokerOptionError(
                "deferredRows",
                None,
                f"the stream's rows are partitions ({DEFERRED_DDL}): give the rows' schema "
                "in the option, not with .schema()",
            )
        reader = self._stream_reader(options, rows_schema(options.deferred_rows))
        reader.rows = DeferredRows(reader.rows)
        return reader

    def _stream_reader(self, options: ReaderOptions, schema: StructType) -> StreamReader:
        arrow = arrow_schema_of(schema)
        parallelism = self.session_parallelism
        if options.store is not None:
            return store_change_reader(options, arrow, parallelism)
        return stream_reader(options, arrow, schema, parallelism)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_reader_options(self.options, streaming=False)
        return StoreTableReader(options, arrow_schema_of(schema))

    # --- writing -----------------------------------------------------------------------------

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = parse_writer_options(self.options)
        arrow = arrow_schema_of(schema)
        if options.store is not None:
            return StoreTableWriter(options, arrow, overwrite)
        if overwrite:
            raise BrokerOptionError(
                "mode",
                "overwrite",
                "published messages cannot be replaced; use mode append "
                "(overwrite applies to a store, with option store)",
            )
        return BrokerBatchWriter(options, arrow)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = parse_writer_options(self.options)
        arrow = arrow_schema_of(schema)
        if options.store is not None:
            return StoreStreamWriter(options, arrow, overwrite)
        return BrokerStreamWriter(options, arrow)
