"""Reading: the stream reader Spark drives, and what it is composed of.

A stream reader (:mod:`.stream`) is one class made of two parts: where the positions
come from (:mod:`.spool_positions`: one spool, received in this process or by a
receiver process; :mod:`.relay_positions`: a set of relays, a position in each) and
how records become rows (:mod:`.rows`: messages, events, Zeek's log records). The
driver side plans partitions (:mod:`.partitions`, :mod:`.parallelism`, and
:mod:`broker_spark.reader.offsets`); the executor side, a pickled copy, fetches and
converts them (:mod:`.partitions`, with :mod:`broker_spark.reader.relay_fetch` from a
relay).
"""
