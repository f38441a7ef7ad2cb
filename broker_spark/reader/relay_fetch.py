"""What a task of a relay reader runs: fetch its range of offsets from the relay.

A partition planned on a relay (``relay=host:port,...``, ``partitionData`` not
``inline``) carries the relay's address, id and the query's topics; the task connects
itself, checks that the relay still serves the spool it was planned on, and fetches
the records of its range on those topics. A relay that restarts or is cut off is tried
again for :data:`TASK_RETRY` seconds before the task fails.
"""

from __future__ import annotations

import logging
import time

from broker_spark.config import TLSSettings
from broker_spark.reader.options import HostPort
from broker_spark.reader.remote import FETCH_TIMEOUT, tls_context
from broker_spark.spool.relay_client import RelayError, SpoolClient, SpoolClientError
from broker_spark.spool.segment import DataLossError
from broker_spark.spool.served_records import hello_fields, served

__all__ = ["TASK_RETRY", "fetch_from_relay"]

log = logging.getLogger(__name__)

#: Seconds a task tries again to reach a relay it cannot (a restart, a cut): after that the
#: task fails (and Spark retries it, or the query fails with the reason).
TASK_RETRY = 120.0


def fetch_from_relay(
    relay: HostPort,
    ssl: TLSSettings,
    start: int,
    end: int,
    timeout: float = FETCH_TIMEOUT,
    relay_id: str | None = None,
    retry: float = TASK_RETRY,
    topics: tuple[str, ...] | None = None,
    logs: tuple[str, ...] | None = None,
) -> tuple[bytes, int]:
    """The record stream of offsets ``[start, end)`` of a relay's spool (what a task of a
    relay reader does), and how many records it holds: only those on ``topics`` (the
    reader's prefixes; None: all) holding records of ``logs`` (the Zeek logs a log reader
    keeps; None: all), so fewer than the offsets when the spool holds other
    topics too. A relay that cannot be reached (it restarts, the network is cut) is
    tried again for ``retry`` seconds. Raises :class:`DataLossError` when the relay no
    longer holds the range, or serves another spool than ``relay_id``."""
    deadline = time.monotonic() + retry
    delay = 0.2
    while True:
        try:
            return _fetch_once(relay, ssl, start, end, timeout, relay_id, topics, logs)
        except SpoolClientError as exc:
            if time.monotonic() + delay > deadline:
                raise SpoolClientError(
                    f"{exc} (tried again for {retry:g} s: a task reads its range from the relay "
                    "it was planned on)"
                ) from None
            log.warning("relay %s: %s; trying again in %.1f s", relay, exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def _fetch_once(
    relay: HostPort,
    ssl: TLSSettings,
    start: int,
    end: int,
    timeout: float,
    relay_id: str | None,
    topics: tuple[str, ...] | None,
    logs: tuple[str, ...] | None,
) -> tuple[bytes, int]:
    with SpoolClient.tcp(relay.host, relay.port, tls_context(ssl)) as client:
        asked = hello_fields(topics, logs)
        welcome = client.hello("follow", "task", **asked)
        if relay_id is not None and welcome.get("relay") != relay_id:
            raise DataLossError(
                start,
                end,
                end,
                f"relay {relay} now serves another spool (id {welcome.get('relay')}, planned on "
                f"{relay_id}): offsets {start} to {end - 1} of the planned one are not there",
            )
        try:
            data, count = client.fetch_counted(start, end, timeout)
        except RelayError as exc:
            if exc.relay_code == "data_loss":
                earliest = int(exc.fields.get("earliest", end))
                raise DataLossError(start, end, earliest) from None
            raise
    return served(welcome, topics, logs, data, count)
