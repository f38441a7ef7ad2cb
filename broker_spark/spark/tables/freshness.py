"""A table a batch was committed to, fresh in every session that reads it, at once.

A streaming query's ``foreachBatch`` runs in a clone of the session that
started it, and a session keeps what it listed of a table (its relation, and
the files of each partition it read) until told otherwise. A commit refreshed
in the batch's session alone left the notebook's own session reading the old
files: after a second round of Zeek's logs every table held both rounds, yet
``spark.table("zeek_conn").count()`` in the session that ran the query gave the
first round's count until ``REFRESH TABLE``. So each commit is refreshed in the
batch's session, in the sessions the writer was started from, and in the
JVM's default and active sessions (a notebook's ``spark``). Through Spark
Connect the batch's session is the client's own, and there is no JVM to reach.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

__all__ = ["jvm_session", "refresh_everywhere"]

log = logging.getLogger(__name__)


def jvm_session(spark: Any) -> Any:
    """The JVM's session of a classic PySpark session (None through Spark Connect)."""
    return getattr(spark, "_jsparkSession", None)


def refresh_everywhere(spark: Any, name: str, sessions: Iterable[Any] = ()) -> None:
    """Refresh table ``name`` in ``spark`` (the batch's session), in ``sessions`` (JVM
    sessions) and in the JVM's default and active sessions."""
    spark.catalog.refreshTable(name)
    for session in [*sessions, *_jvm_sessions(spark)]:
        try:
            session.catalog().refreshTable(name)
        except Exception as exc:  # a session stopped meanwhile: nothing of it to refresh
            log.debug("table %s not refreshed in a session: %s", name, exc)


def _jvm_sessions(spark: Any) -> list[Any]:
    jvm = getattr(spark, "_jvm", None)
    if jvm is None or jvm_session(spark) is None:
        return []
    companion = jvm.org.apache.spark.sql.SparkSession
    found = []
    for option in (companion.getDefaultSession(), companion.getActiveSession()):
        if option.isDefined():
            found.append(option.get())
    return found
