"""Learning a log's columns at ``load()``: from an earlier run's spool, or a brief peering.

``spark.readStream...option("format", "zeek-logs").option("logs", "conn")``
has to name its columns before any data flows. A Zeek sends a LogCreate for
each of its active logs to every new peer right after the handshake, so a
short-lived endpoint that peers (or listens) as the reader will, waits a
bounded time (``schemaWait``, 2 s by default) for the log's LogCreate and
leaves, learns the columns that Zeek really writes (a site's own scripts
add some). With a ``spoolPath`` an earlier run's history answers first,
without any network. Nothing learned: the caller falls back to Zeek's
standard schema of the log.
"""

from __future__ import annotations

import logging
import time

from broker_spark.data.binary import decode
from broker_spark.errors import BrokerError, DecodeError
from broker_spark.reader.connect import open_endpoint
from broker_spark.reader.options import ConnectionOptions, ReaderOptions
from broker_spark.reader.remote import RelaySet
from broker_spark.spool.schema_history import LogSchemaHistory
from broker_spark.subscriber import RawSubscriber
from broker_spark.zeek.log_scan import is_log_create
from broker_spark.zeek.log_schema import LogSchema
from broker_spark.zeek.logs import LogCreate

__all__ = ["learn_log_schema"]

log = logging.getLogger(__name__)

#: After the first LogCreate, how long more may follow (Zeek sends them all at once).
_BURST = 0.3


def learn_log_schema(options: ReaderOptions, path: str) -> LogSchema | None:
    """The columns a Zeek sends for log ``path``, if they can be learned; None otherwise."""
    if options.spool.path:
        try:
            found = LogSchemaHistory(options.spool.path, readonly=True).latest(path)
        except OSError:
            found = None
        if found is not None:
            return found
    if options.relays:
        return _from_relay(options, path)
    conn = options.connection
    if options.schema_wait <= 0 or not (conn.peers or conn.listen):
        return None
    try:
        return _probe(options, path)
    except (BrokerError, OSError) as exc:
        log.info("learning the columns of %s at load: %s (using Zeek's standard ones)", path, exc)
        return None


def _from_relay(options: ReaderOptions, path: str) -> LogSchema | None:
    """What the relays learned of the log's columns (the first that knows it)."""

    relays = RelaySet(options, logs=True)
    try:
        relays.open()
    except BrokerError as exc:
        log.info("learning the columns of %s from the relays: %s", path, exc)
        return None
    finally:
        relays.close()
    for member in relays.members:
        found = member.history.latest(path) if member.history is not None else None
        if found is not None:
            return found
    return None


def _probe(options: ReaderOptions, path: str) -> LogSchema | None:

    holder: list[RawSubscriber] = []
    conn = options.connection
    probe_conn = ConnectionOptions(conn.listen, conn.peers, None, conn.ssl)
    endpoint = open_endpoint(
        probe_conn,
        before_connect=lambda ep: holder.append(ep.make_raw_subscriber(options.topics, qsize=4096)),
    )
    try:
        deadline = time.monotonic() + options.schema_wait
        found = None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return found
            for _topic, payload, _sender in holder[0].take(4096, min(left, 0.1)):
                if not is_log_create(payload):
                    continue
                try:
                    schema = LogCreate(decode(payload)).schema()
                except DecodeError:
                    continue
                deadline = min(deadline, time.monotonic() + _BURST)
                if schema.path == path:
                    found = schema
                    deadline = time.monotonic()
    finally:
        for subscription in holder:
            subscription.close()
        endpoint.shutdown()
