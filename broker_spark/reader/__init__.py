"""The stream reader's runtime, without Spark: options, and who receives for a reader.

Everything a Spark query's reader needs that is not Spark itself lives here, so the
command (``broker-spark status`` of a receiver, ``receiver stop``) and a machine without
pyspark use it without importing ``spark/``:

* :mod:`.options`: every option of the ``broker`` data source, parsed once;
* :mod:`.in_process`: an endpoint, a spool and a pump in the reader's own process;
* :mod:`.receiver` and :mod:`.receiver_attach`: the receiver process that owns a
  ``spoolPath`` and outlives the query, and the reader's link to it (its status and stop);
* :mod:`.remote`: the reader's side of a receiver, or of a set of relays;
* :mod:`.connect`: an endpoint's peerings, WebSocket bridges and ZeroMQ membership
  from the connection options; :mod:`.schema_probe`: learning a log's columns at ``load()``;
* :mod:`.offsets`: a reader's offsets (a spool's, or one per relay) and how a range of
  them is split into partitions; :mod:`.relay_fetch`: a task's fetch of its range from a
  relay.

``spark/`` holds the adapters that need pyspark and imports these; nothing here imports
``spark/``, the node or the command.
"""
