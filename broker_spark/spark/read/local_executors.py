"""``partitionData=auto``: records inline until a task shows it runs in the driver's JVM.

In local mode (``local[*]``, a Databricks single-node cluster, a local Spark
Connect server) the executor *is* the driver's JVM: its Python workers run on
the driver's machine and can read the reader's spool there. Reading it saves
what an inline partition costs (the driver compresses every record, the JVM
carries the bytes with the task, the worker expands them): measured with
``bench/zeek_logs.py`` on 2 cores, a conn-log stream needed 5.3 instead of
5.9 to 6.8 us of CPU a row, the JVM's share falling most, and kept up with
330,000 rows a second where inline partitions gave 285,000 to 307,000.

Nothing in a Python data source says where executors run, so the reader finds
out. Spark gives every Python process it starts its JVM's block manager
folder in ``SPARK_LOCAL_DIRS`` (the driver's ``blockmgr-<uuid>``, or an
executor's own under its work folder): the same text in the reader's process
and in a task means the same JVM, hence the same machine. Inline partitions
carry the reader's value; a task whose own value is the same writes it into
:data:`MARKER_NAME` in the spool; the reader, finding its value there, plans
offsets only from then on. On a cluster every executor's folder is another,
no task writes, and partitions stay inline, which works anywhere. A spool
kept from another run (``spoolPath``) may hold an old marker: only the
current value counts.
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["MARKER_NAME", "LocalExecutors", "jvm_token", "report_if_local"]

#: The file in the spool folder where a task of the driver's JVM leaves that JVM's token.
MARKER_NAME = "local-executors"


def jvm_token() -> str | None:
    """This process's JVM as Spark names it to its Python processes (None outside Spark)."""
    return os.environ.get("SPARK_LOCAL_DIRS") or None


class LocalExecutors:
    """The reader's side: whether a task has shown it runs in this process's JVM."""

    def __init__(self, spool_path: str, token: str | None) -> None:
        self.spool_path = spool_path
        self.token = token
        self._seen = False

    def seen(self) -> bool:
        """Whether executors read this spool themselves (once true, true for good)."""
        if not self._seen and self.token is not None:
            try:
                with open(os.path.join(self.spool_path, MARKER_NAME), encoding="utf-8") as f:
                    self._seen = f.read() == self.token
            except (OSError, UnicodeDecodeError):
                pass
        return self._seen


def report_if_local(spool_path: str | None, token: str | None) -> bool:
    """The task's side: leave ``token`` in the spool when this task runs in that JVM.

    Written to a temporary name and renamed, so the reader never reads half a
    token; a spool this task cannot write leaves the query inline, as it was.
    """
    if not spool_path or token is None or jvm_token() != token:
        return False
    marker = os.path.join(spool_path, MARKER_NAME)
    try:
        with open(marker, encoding="utf-8") as f:
            if f.read() == token:
                return True
    except (OSError, UnicodeDecodeError):
        pass
    partial = f"{marker}.{os.getpid()}"
    try:
        with open(partial, "w", encoding="utf-8") as f:
            f.write(token)
        os.replace(partial, marker)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        return False
    return True
