"""Tables: Zeek's logs as a table per log, and Broker data stores as tables.

* :mod:`.writer`: ``write_zeek_tables`` and :class:`ZeekTables` (public as
  :mod:`broker_spark.spark.zeek_tables`), with :mod:`.columns` (a table's columns),
  :mod:`.stage` (the tasks that parse and write files) and :mod:`.markers` (exactly
  once on plain file tables);
* :mod:`.stores`: a Broker data store read and written as a table.
"""
