"""The Spark data source ``broker``: spool, offsets, options and schemas it stands on.

The names users call directly load on first use (``from broker_spark.spark import
zeek_log_schema``), so importing this package needs no pyspark: the command line
uses modules here that do not need Spark.

* :func:`zeek_log_schema`: the typed Spark schema of a Zeek log (``"conn"``);
* :func:`parse_zeek_json`: a Column reading Zeek JSON log lines into those columns;
* :func:`read_zeek_json`: Zeek's JSON log files as a DataFrame of those columns;
* :func:`register`: makes ``format("broker")`` known to a session where Spark did
  not find it by itself, sizes stream reads for the session's parallelism, and
  lets a write started from the calling thread find the source (idempotent;
  ``docs/deploy.md``);
* :func:`read_deferred` and :func:`deferred_rows`: the rows of a stream read with
  ``deferredRows``, read by the task that consumes them (:mod:`.read.deferred`);
* :func:`stop_receiver`: stops the receiver process of a query's ``spoolPath``;
* :func:`write_zeek_tables`: one query writing each Zeek log into a table of its own,
  exactly once, its columns following Zeek.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "register": "broker_spark.spark.registration",
    "zeek_log_schema": "broker_spark.spark.zeek_schema",
    "parse_zeek_json": "broker_spark.spark.zeek_schema",
    "read_zeek_json": "broker_spark.spark.zeek_schema",
    "stop_receiver": "broker_spark.reader.receiver_attach",
    "read_deferred": "broker_spark.spark.read.deferred",
    "deferred_rows": "broker_spark.spark.read.deferred",
    "write_zeek_tables": "broker_spark.spark.zeek_tables",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'broker_spark.spark' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
