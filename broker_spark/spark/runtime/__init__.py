"""The driver side's processes and connections: who receives for a stream reader.

* :mod:`.in_process`: an endpoint, a spool and a pump in the reader's own process;
* :mod:`.receiver` and :mod:`.receiver_attach`: the receiver process that owns a
  ``spoolPath`` and outlives the query, and the reader's link to it;
* :mod:`.remote`: the reader's side of a receiver, or of a set of relays;
* :mod:`.connect`: an endpoint's peerings, WebSocket bridges and ZeroMQ membership
  from the connection options; :mod:`.schema_probe`: learning a log's columns at ``load()``.
"""
