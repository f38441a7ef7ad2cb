"""``make demo`` / ``broker-spark demo``: Zeek's conn log through Spark and back into Broker.

What runs, all in this process and on loopback unless told otherwise:

1. a Broker node (an :class:`~broker_spark.Endpoint` listening, TLS by
   default) that holds the master of the store ``demo-summary`` and
   subscribes to ``/demo/summary``;
2. a local SparkSession with a structured-streaming query that reads Zeek's
   conn log with ``spark.readStream.format("broker")`` and ``format=zeek-logs``
   (typed columns), counts connections and bytes per service per 10-second
   window, prints each update, and writes the updates back with
   ``format("broker")`` to the topic and to the store
   (:mod:`~broker_spark.demo.spark`);
3. once the query's endpoint has subscribed, a thread publishing synthetic
   connection records as a Zeek does (a LogCreate, then Batches of LogWrites
   on ``zeek/logs/Conn::LOG``) at a steady rate (:mod:`~broker_spark.demo.events`),
   for ``--seconds``; Spark's start-up is not part of that minute.

Then it waits for Spark to read the rest, stops the query, reads the store
back as a table, prints a summary and checks it: every record read, every
summary back on the topic, the store holding the last value of every window.
Exit status 0 when all of that holds, 1 with one line per problem otherwise.

With ``--peer HOST:PORT`` the conn log comes from another node (a Zeek, or
a node a Zeek logs to, on ``--topic``) and the demo generates none;
``--master`` runs the query on a cluster, whose executors reach the node at
``--advertise``.

The modules, each importing only those after it:

- :mod:`~broker_spark.demo.launch`: :func:`main` and :func:`run`, set-up and clean-up;
- :mod:`~broker_spark.demo.phases`: one run of the query, from its start to the checks;
- :mod:`~broker_spark.demo.options`: flags, options, result, wiring (shared by the two above);
- :mod:`~broker_spark.demo.spark`: the session, the windowed query and its sink;
- :mod:`~broker_spark.demo.table`: the running table of totals per window (no Spark);
- :mod:`~broker_spark.demo.events`: the synthetic conn log and its paced publisher
  (also ``broker-spark publish --generate``).

This package re-exports the entry points, so ``broker_spark.demo.main`` and
``broker_spark.demo.run`` are the functions; no submodule is named like them
(importing a submodule ``run`` would replace the function ``run`` here).
"""

from broker_spark.demo.launch import main, run
from broker_spark.demo.options import DemoError, DemoOptions, DemoResult, add_arguments

__all__ = ["DemoError", "DemoOptions", "DemoResult", "add_arguments", "main", "run"]
