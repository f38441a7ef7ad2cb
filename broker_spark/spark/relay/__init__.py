"""A spool with an owner of its own: the receiver process of a query, and relay nodes.

Broker keeps nothing for a peer that is gone, so whatever a Zeek publishes
while no reader is peered is lost. Here the endpoint that receives and the
spool it appends to belong to a process that outlives the query: the
*receiver* of a ``spoolPath`` (started by the first reader that needs it,
found again by the next) or a *relay* (``broker-spark node --spool``, next to
Zeek or anywhere), which readers replay from over the network.

* :mod:`.service`: the spool, the endpoint's subscription and the pump that
  joins them, and what a status shows of them;
* :mod:`.server`: the spool protocol (:mod:`broker_spark.protocol.relay`)
  served over a Unix socket (the receiver) or TCP/TLS (a relay);
* :mod:`.receiver`: the receiver process, and :mod:`.attach`, how a reader
  finds or starts it;
* :mod:`.follower`: a reader's copy of a relay's spool, fed over the network.

``docs/relay.md`` tells the story for users.
"""
