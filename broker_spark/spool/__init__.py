"""The durable spool of received messages, what fills it, and the relay that serves it.

Broker keeps nothing for a peer that is gone, so whatever a Zeek publishes while
no reader is there is lost unless something keeps it. This package keeps it: an
append-only log with dense offsets on disk, and the small protocol that hands
ranges of it to readers. It needs no Spark; three owners use it:

* ``broker-spark node --spool`` (a *relay*, next to Zeek or anywhere), which
  serves its spool on ``--relay`` to readers that dial in over TCP/TLS;
* the *receiver* process of a query's ``spoolPath``
  (:mod:`broker_spark.reader.receiver`), serving it over a Unix socket;
* the Spark stream reader's driver side, for a private spool.

Modules, from the disk up:

* :mod:`.segment`: one segment file and its sparse index;
* :mod:`.compressed_segment`: a sealed segment compressed in blocks (zstd or lz4), and
  :mod:`.compactor`, the spool's thread that compresses them off the appending thread;
* :mod:`.spool`: :class:`~.spool.Spool`, the log of segments (retention, locking,
  reads by offset range);
* :mod:`.record_packing`: a batch packed as the record stream, in as few C calls as
  its records allow;
* :mod:`.private`: a reader's temporary spool, removed however the reader ends;
* :mod:`.schema_history`: which Zeek log schemas were in force from which offset;
* :mod:`.pump`: the thread that moves what an endpoint (or a ZeroMQ logger)
  receives into the spool;
* :mod:`.service`: a spool with its subscription, pump and status;
* :mod:`.inline_frames`: ranges of records compressed ahead of time, for readers
  that carry records rather than fetch them;
* :mod:`.relay_protocol`: the spool protocol and its owner's side, sans-I/O
  (``docs/relay.md``); :mod:`.relay_reader_session`: a reader's side of it, sans-I/O;
* :mod:`.relay_server` and :mod:`.relay_client`: that protocol over a Unix socket
  or TCP/TLS.

``tests/test_import_cycles.py`` checks that nothing here imports pyspark.
"""
