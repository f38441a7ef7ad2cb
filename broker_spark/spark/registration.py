"""``broker_spark.spark.register(spark)``: ``format("broker")`` in a session, sized for its cluster.

Spark (4.0 and later) registers a Python data source by itself when its
Python workers can import a top-level ``pyspark_*`` module exposing a
``DefaultSource``, and ``pip install broker-spark`` installs one
(``pyspark_broker``). Where that lookup does not happen or cannot see the
package (the package was installed into the notebook's environment after the
session started, a Spark Connect session, a cluster whose workers lack it at
start), ``format("broker")`` fails with Spark's ``DATA_SOURCE_NOT_FOUND`` and one
call fixes it. The call is safe to make always, and does three things:

* it registers a subclass of the source that carries the session's parallelism
  (:func:`~broker_spark.spark.read.parallelism.session_parallelism`), so stream
  reads split micro-batches for the cluster's cores instead of the driver's.
  Spark 4.1 and later let it replace the source their lookup found; Spark 4.0
  refuses (``DATA_SOURCE_ALREADY_EXISTS``), which is taken as done: the found
  source works, sized by the driver's cores unless ``minPartitions`` says more;
* in a classic session it makes ``spark`` the active session of the calling
  thread on the JVM side. With PySpark's pinned threads (the default) each
  Python thread has a JVM thread of its own, and a thread that never made a
  session active there has none; ``df.write``/``writeStream...start()`` look
  Python data sources up in the *active* session, so from such a thread they
  fail with ``DATA_SOURCE_NOT_FOUND`` (reads look in the DataFrame's own
  session and work). Calling ``register(spark)`` in the thread fixes it;
* through Spark Connect it touches neither ``SparkContext`` nor the JVM (the
  client has neither): the server keeps sessions per client, and the
  parallelism is asked of the server with a query;
* it keeps secret option values out of Spark's UI. A classic session's plans,
  progress and UI show no option of a Python data source, but a Spark Connect
  server's UI (its "Connect" tab) shows each statement as received, options
  included, redacted only by ``spark.sql.redaction.string.regex`` (unset by
  default). So the session's pattern gains :data:`SECRET_OPTION_VALUES`:
  the value of every option whose name looks like a secret's (``ssl.passphrase``,
  ``zeromq.curve*SecretKey``, anything with ``pass``, ``secret``, ``token`` or
  ``credential``), the key itself still shown.
"""

from __future__ import annotations

import logging
from typing import Any

from broker_spark.spark.read.parallelism import is_connect_session, session_parallelism
from broker_spark.spark.source import BrokerDataSource

__all__ = ["SECRET_OPTION_VALUES", "register", "registered_source"]

log = logging.getLogger(__name__)

#: Spark's string redaction pattern (a Java regex) for the values of secret options as a
#: Connect statement shows them (``key: "ssl.passphrase" value: "..."``); the key stays.
SECRET_OPTION_VALUES = (
    r'(?i)(?<=key: "[^"]{0,100}(?:pass|secret|token|credential)[^"]{0,100}"\s{0,40}value: )'
    r'"(?:[^"\\]|\\.)*"'
)
_STRING_REDACTION = "spark.sql.redaction.string.regex"


def registered_source(parallelism: int | None) -> type:
    """The class :func:`register` hands Spark: the source, with ``parallelism`` on it.

    A class made here, not importable by name, so cloudpickle ships it by value
    (with the figure) to Spark's Python processes; its base is imported there.
    """

    return type(
        "BrokerDataSource",
        (BrokerDataSource,),
        {
            "__module__": __name__,
            "__qualname__": "registered_source.<locals>.BrokerDataSource",
            "__doc__": BrokerDataSource.__doc__,
            "session_parallelism": parallelism,
        },
    )


def register(spark: Any) -> bool:
    """Register the ``broker`` data source with ``spark`` (a SparkSession); idempotent.

    Returns whether the source in use is the one registered here, sized for
    the session's parallelism; False where Spark keeps the one it found by
    itself (Spark 4.0), which splits micro-batches for the driver's cores
    unless a query sets ``minPartitions``. Call it after the cluster's
    executors are up: the parallelism it records is the one of that moment.
    In a thread other than the one that made the session, call it in that
    thread before writing (see the module's docs).
    """
    parallelism = session_parallelism(spark)
    sized = True
    try:
        spark.dataSource.register(registered_source(parallelism))
    except Exception as exc:  # Spark wraps its errors in several exception types
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
            raise
        sized = False
        log.info(
            "format('broker') was found by Spark already and cannot be replaced here: "
            "micro-batches are split for the driver's cores unless minPartitions is set"
        )
    else:
        log.info("format('broker') registered for a parallelism of %s", parallelism)
    _redact_secret_options(spark)
    if not is_connect_session(spark):
        _activate_in_this_thread(spark)
    return sized


def _redact_secret_options(spark: Any) -> None:
    """Add :data:`SECRET_OPTION_VALUES` to the session's string redaction pattern (kept)."""
    try:
        current = spark.conf.get(_STRING_REDACTION, None) or ""
        if SECRET_OPTION_VALUES in current:
            return
        spark.conf.set(
            _STRING_REDACTION,
            f"(?:{current})|(?:{SECRET_OPTION_VALUES})" if current else SECRET_OPTION_VALUES,
        )
    except Exception as exc:  # a platform that forbids setting it: say so, go on
        log.warning(
            "could not set %s (%s): a Spark Connect server's UI may show secret option "
            "values; set it in the server's configuration (docs/security.md)",
            _STRING_REDACTION,
            exc,
        )


def _activate_in_this_thread(spark: Any) -> None:
    """Make ``spark`` the JVM side's active session for the calling Python thread.

    PySpark does the same when a thread calls ``spark.createDataFrame``; there
    is no public call for it alone.
    """
    from pyspark.sql import SparkSession

    jvm = spark._jvm
    SparkSession._get_j_spark_session_class(jvm).setActiveSession(spark._jsparkSession)
