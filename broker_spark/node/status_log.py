"""A running node's statuses and errors, as log lines (and, for a relay, refusal counts).

A node prints nothing after ``ready``: what happens to its peerings (peered, lost,
refused) goes to the log, from a thread of its own that reads the endpoint's
status subscriber, so a slow log never holds up the endpoint.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from broker_spark.errors import BrokerError
from broker_spark.status import Error

__all__ = ["StatusLogger", "log_status"]

log = logging.getLogger("broker_spark.node")


#: Errors that mean a peer's connection or message was turned away (what a relay counts).
_REFUSALS = {
    "peer_invalid": "connection",
    "peer_incompatible": "connection",
    "peer_disconnect_during_handshake": "connection",
    "invalid_message": "undecodable",
    "deserialization_failed": "undecodable",
}


class StatusLogger:
    """Logs the endpoint's statuses (INFO) and errors (WARNING) from a thread of its own;
    with ``counts`` (a relay's), counts each refused connection or message of a peer."""

    def __init__(self, endpoint: Any, counts: Any = None) -> None:
        self._counts = counts
        self._sub = endpoint.make_status_subscriber(receive_statuses=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="broker-spark-status", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                items = self._sub.get(64, 0.2)
            except BrokerError:
                return  # the endpoint shut down
            for item in items:
                log_status(item)
                if self._counts is not None and isinstance(item, Error):
                    reason = _REFUSALS.get(item.code().snake_name)
                    if reason is not None:
                        self._counts.refused("broker", reason)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2.0)


def log_status(item: Any) -> None:
    """One status or error as one log line."""
    if isinstance(item, Error):
        log.warning("%s: %s", item.code().snake_name, item.message())
        return
    words = "".join(" " + c.lower() if c.isupper() else c for c in item.code().name).strip()
    ctx = item.context()
    where = f" at {ctx.network}" if ctx.network.is_set() else ""
    detail = f" ({item.message()})" if item.message() else ""
    log.info("%s: %s%s%s", words, ctx.node or "?", where, detail)
