"""Columnar codecs: Broker's binary encoding to and from Arrow columns, a column at a time.

The row codecs in :mod:`broker_spark.data` turn one value into bytes and back;
the readers and writers of a stream handle millions of rows of a few layouts,
so these work on whole columns, and on record streams whose records share a
layout, without a Python object per value. Each is a shortcut over the general
codecs, never a second definition: whatever one does not handle goes through
:mod:`broker_spark.data`. They depend on ``data/`` and ``zeek/`` only (no Spark):

* :mod:`.record_batches`: spool records to Arrow batches of a reader's schema
  (:class:`~.record_batches.RecordConverter`), using
* :mod:`.strided`: record streams of one layout read by slicing,
* :mod:`.binary_json`, :mod:`.shape_json`, :mod:`.shape_template`: Broker
  binary payloads to Zeek JSON text, per value and per shape of a column;
* :mod:`.column_encode`: Arrow columns to Broker binary (the writers' hot path),
  and :mod:`.typed_columns`, the same for columns of a declared Zeek type.
"""
