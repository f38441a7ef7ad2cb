"""Writing: rows published as Broker messages (events, values, Zeek log records).

:mod:`.writers` holds Spark's writers; :mod:`.row_messages`, :mod:`.event_rows` and
:mod:`.log_rows` turn Arrow batches of rows into encoded messages on the executors.
"""
