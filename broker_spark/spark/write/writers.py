"""The writers of ``df.write``/``df.writeStream.format("broker")``: rows published as data messages.

Spark builds a writer once per write (per query for a stream), pickles it,
and calls ``write`` in executor tasks and ``commit`` on the driver
(REFERENCE.md section 3). So a writer holds only parsed options and the
schema; every task opens its own short-lived endpoint, deliberately, peers
with ``peer`` (native) or bridges to ``websocket``, publishes its rows
(encoded by :class:`~broker_spark.spark.write.row_messages.RowEncoder`), waits for
the first peer to acknowledge them (:meth:`Endpoint.flush <broker_spark.endpoint.Endpoint.flush>`)
and shuts the endpoint down. Only then does ``write`` return, so a task that
fails is retried by Spark: at-least-once delivery, as Spark's Kafka sink.

With option ``log`` the rows are a Zeek log's records
(:class:`~broker_spark.spark.write.log_rows.LogRowEncoder`): a LogCreate, then
Batches of LogWrites.

With option ``signature`` the rows are events of that signature, typed
(:class:`~broker_spark.spark.write.event_rows.SignatureRowEncoder`).

Over ``websocket`` the task's bridge subscribes to nothing and sends every
message it publishes, paced to the server's queue; the server's refusals
(Zeek's ``failed to create Zeek event``) come back attributed to messages
(:mod:`~broker_spark.websocket.verdicts`) and are bad rows too, and the
task is done when the server answered that it processed everything.

Bad rows (malformed ``data``, null topics, values that do not fit their Zeek
type, rows the server refused) fail the task (``mode=FAILFAST``, the default
without ``badRecordsTopic``) with the row's position and the reason, checked
per Arrow batch before any of that batch is published; with
``mode=PERMISSIVE`` they are counted and skipped, or with
``badRecordsTopic`` published there, as the vector ``(topic, data, reason)``.

``commit`` has no side effect outside the driver's log: delivery happened in
``write``. It records the batch id, so a second ``commit`` of one batch
(which Spark may do after a restart) does nothing, not even log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from broker_spark.data.binary import encode
from broker_spark.endpoint import Endpoint
from broker_spark.errors import EC, BrokerError, DeliveryError
from broker_spark.reader.connect import EndpointSettings, open_endpoint
from broker_spark.reader.options import ConnectionOptions, WriterOptions
from broker_spark.spark.compat import ArrowStreamWriterBase, arrow_batches
from broker_spark.spark.write.event_rows import SignatureRowEncoder
from broker_spark.spark.write.log_rows import LogRowEncoder
from broker_spark.spark.write.row_messages import BadRow, EncodedBatch, RowEncoder
from broker_spark.websocket.verdicts import (
    Refusal,
    ServerRejectedError,
    ServerVerdicts,
    bad_record,
)

__all__ = [
    "BadRowError",
    "BrokerBatchWriter",
    "BrokerCommitMessage",
    "BrokerStreamWriter",
    "publish_batches",
]

log = logging.getLogger(__name__)

#: Seconds a task waits for its peer to acknowledge what it published.
ACK_TIMEOUT = 60.0

#: Seconds a task waits to learn what its peers subscribe to before publishing.
FILTER_WAIT = 5.0


class BadRowError(BrokerError, ValueError):
    """A row that cannot be published, and no ``badRecordsTopic`` to send it to."""

    code = EC.InvalidData


@dataclass
class BrokerCommitMessage(WriterCommitMessage):
    """What one task did: messages published, bad rows diverted, and where."""

    published: int
    bad_rows: int
    partition: int


def _task_identity() -> tuple[int, str]:
    """The partition id and a description of the task (for error messages)."""
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
    except Exception:  # not in a Spark task (tests, direct calls)
        ctx = None
    if ctx is None:
        return -1, "this task"
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    where = f"partition {ctx.partitionId()}"
    if batch is not None:
        where += f" of batch {batch}"
    return ctx.partitionId(), where


def _await_peer_filters(
    endpoint: Endpoint, timeout: float, topics: Iterable[str] = (), links: Sequence[Any] = ()
) -> bool:
    """Wait until the peers' subscriptions are known, so the first messages are routed.

    ``peer()`` returns once the handshake is done, but a version 2 peering
    (between two broker_spark endpoints) learns filters from routing messages
    that follow, one endpoint's at a time, and the subscriptions of endpoints
    behind the peer may come before the peer's own. So the wait is for the
    peers' own subscriptions (``links``) and for one that matches a topic about
    to be published (any, with no topic given). Nothing matching after
    ``timeout`` seconds: what the task publishes goes nowhere, as Broker's
    publish does without subscribers, and a warning says so.
    """
    wanted = sorted({t for t in topics if t})
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        prefixes = tuple(str(p) for p in endpoint.peer_subscriptions())
        covered = bool(prefixes) and (not wanted or any(t.startswith(prefixes) for t in wanted))
        if covered and endpoint.routes_known(links):
            return True
        if time.monotonic() > deadline:
            if covered:
                return True  # a peer's own routes are late; what matches goes out
            where = ", ".join(wanted[:5]) + (" ..." if len(wanted) > 5 else "")
            log.warning(
                "no peer subscribes to %s: what this task publishes goes nowhere",
                where or "anything",
            )
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


class _Encoder(Protocol):
    def encode(self, batch: pa.RecordBatch, first_row: int = 0) -> EncodedBatch: ...


def make_encoder(schema: pa.Schema, options: WriterOptions) -> _Encoder:
    """The encoder of a write: Zeek log records with option ``log``, else data messages
    (a schema that cannot be published fails here, when the query starts)."""
    if options.log is not None:
        return LogRowEncoder(schema, options)
    if options.signature is not None:
        return SignatureRowEncoder(schema, options)
    return RowEncoder(schema, options)


def _bad_message(bad_topic: str, row: BadRow) -> tuple[str, bytes]:
    return bad_topic, encode((row.topic, row.text, row.reason))


class _Publisher:
    """One task's endpoint: opened on first use, acknowledged and closed at the end.

    Over ``websocket`` the bridge subscribes to nothing and sends every message
    the task publishes, paced; its groups are of one message when refused rows
    are to be routed (each refusal then names its message), else of
    :data:`~broker_spark.websocket.pacing.DEFAULT_GROUP`.
    """

    def __init__(
        self,
        connection: ConnectionOptions,
        settings: EndpointSettings,
        *,
        exact_refusals: bool = False,
    ) -> None:
        self.connection = connection
        self.settings = settings
        self.endpoint: Endpoint | None = None
        self.links: list[Any] = []  # the peerings made at open, which must acknowledge
        self.verdicts: ServerVerdicts | None = None  # a WebSocket server's refusals
        self.exact_refusals = exact_refusals

    def open(self, topics: Iterable[str] = ()) -> Endpoint:
        if self.endpoint is None:
            conn = self.connection
            first = set(topics)  # where the first messages go: a subscriber must be known
            options = {"group": 1} if self.exact_refusals else {}
            self.endpoint = open_endpoint(conn, settings=self.settings, websocket_options=options)
            self.links = self.endpoint.links()
            bridges = [x for x in self.links if x.kind == "websocket" and x.pacer is not None]
            if bridges:
                self.verdicts = ServerVerdicts(self.endpoint.run_in_loop, bridges[0])
            if conn.peers or conn.zeromq.proxy:
                _await_peer_filters(self.endpoint, FILTER_WAIT, first, self.links)
        return self.endpoint

    def publish(self, messages: list[tuple[str, bytes]], bad_records: bool = False) -> None:
        if messages:
            endpoint = self.endpoint
            if endpoint is None:
                endpoint = self.open({m[0] for m in messages})
            if self.verdicts is not None:
                self.verdicts.sent(messages, bad_records)
            endpoint.publish_encoded(messages)
            for link in self.links:
                if link.closed:
                    raise DeliveryError(
                        f"the peering with {link.peer_str} ended before the ack "
                        "(while the task was publishing)"
                    )

    def finish(self) -> None:
        if self.endpoint is not None:
            self.endpoint.flush(ACK_TIMEOUT, self.links)

    def close(self) -> None:
        endpoint, self.endpoint = self.endpoint, None
        if endpoint is not None:
            endpoint.shutdown()


class _Outcome:
    """A task's counts, and what to do with the server's refusals (mode, badRecordsTopic)."""

    def __init__(self, options: WriterOptions, where: str) -> None:
        self.options = options
        self.where = where
        self.published = 0
        self.bad_rows = 0
        self.refused = 0  # rows the server refused (counted in bad_rows too)
        self.lost_bad_records = 0  # badRecordsTopic messages the server refused

    def encoded(self, encoded: EncodedBatch) -> list[tuple[str, bytes]]:
        """The bad rows of a batch: fail (FAILFAST), or their badRecordsTopic messages."""
        options = self.options
        if not encoded.bad:
            return []
        if not options.permissive:
            first = encoded.bad[0]
            more = len(encoded.bad) - 1
            extra = f" (and {more} more bad rows in this batch)" if more else ""
            raise BadRowError(
                f"cannot publish {self.where}, {first.describe()}{extra}; "
                "set badRecordsTopic to publish bad rows there instead "
                "(or mode=PERMISSIVE to count and skip them)"
            )
        self.bad_rows += len(encoded.bad)
        if options.bad_records_topic is None:
            return []
        return [_bad_message(options.bad_records_topic, row) for row in encoded.bad]

    def refusals(self, refusals: list[Refusal], server: str) -> list[tuple[str, bytes]]:
        """Refused messages: fail (FAILFAST) with the server's words, or count and route."""
        routed = []
        for refusal in refusals:
            if refusal.of_bad_records:
                self.lost_bad_records += 1
                continue
            if not self.options.permissive:
                raise ServerRejectedError(
                    f"{server} rejected a message of {self.where}: {refusal.describe()}; "
                    "set badRecordsTopic (or mode=PERMISSIVE) to go on without such rows"
                )
            self.refused += 1
            self.bad_rows += 1
            topic = self.options.bad_records_topic
            if topic is not None and refusal.exact:
                routed.append(bad_record(topic, refusal, server))
        return routed


def publish_batches(
    batches: Iterator[pa.RecordBatch],
    encoder: _Encoder,
    options: WriterOptions,
    *,
    settings: EndpointSettings | None = None,
) -> BrokerCommitMessage:
    """Publish every row of ``batches``; return once the first peer acknowledged them (over
    ``websocket``: once the server answered that it processed them)."""
    partition, where = _task_identity()
    publisher = _Publisher(
        options.connection,
        settings or EndpointSettings(),
        exact_refusals=options.bad_records_topic is not None,
    )
    server = options.connection.websocket.url if options.connection.websocket else "the server"
    outcome = _Outcome(options, where)
    position = 0
    try:
        for batch in batches:
            encoded = encoder.encode(batch, position)
            position += batch.num_rows
            bad = outcome.encoded(encoded)
            outcome.published += len(encoded.messages) + len(bad)
            publisher.publish(encoded.messages)
            publisher.publish(bad, bad_records=True)
            if publisher.verdicts is not None:
                routed = outcome.refusals(publisher.verdicts.take(), server)
                outcome.published += len(routed)
                publisher.publish(routed, bad_records=True)
        publisher.finish()
        while publisher.verdicts is not None:
            routed = outcome.refusals(publisher.verdicts.take(), server)
            if not routed:
                break
            outcome.published += len(routed)
            publisher.publish(routed, bad_records=True)
            publisher.finish()
    finally:
        publisher.close()
    if outcome.bad_rows:
        log.warning(
            "%s: %d bad rows (%d refused by %s) %s",
            where,
            outcome.bad_rows,
            outcome.refused,
            server,
            f"went to {options.bad_records_topic}" if options.bad_records_topic else "skipped",
        )
    if outcome.lost_bad_records:
        log.warning(
            "%s: %s refused %d messages of badRecordsTopic %s (Zeek's WebSocket API takes events only)",
            where,
            server,
            outcome.lost_bad_records,
            options.bad_records_topic,
        )
    accepted = outcome.published - outcome.refused - outcome.lost_bad_records
    return BrokerCommitMessage(accepted, outcome.bad_rows, partition)


class _Committer:
    """Per-batch bookkeeping on the driver: a batch is committed once."""

    def __init__(self) -> None:
        self._committed: set[int] = set()

    def commit_once(self, messages: list[WriterCommitMessage | None], batch_id: int) -> bool:
        if batch_id in self._committed:
            return False
        self._committed.add(batch_id)
        done = [m for m in messages if isinstance(m, BrokerCommitMessage)]
        log.info(
            "batch %d: %d messages published by %d tasks, %d bad rows",
            batch_id,
            sum(m.published for m in done),
            len(done),
            sum(m.bad_rows for m in done),
        )
        return True


class BrokerBatchWriter(DataSourceArrowWriter):
    """``df.write.format("broker")``: publish every row once (``append``)."""

    def __init__(self, options: WriterOptions, schema: pa.Schema) -> None:
        self.options = options
        self.schema = schema
        make_encoder(schema, options)  # a schema that cannot be published fails here, at start
        self._committer = _Committer()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BrokerCommitMessage:
        return publish_batches(iterator, make_encoder(self.schema, self.options), self.options)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self._committer.commit_once(messages, 0)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("a broker write failed; what its finished tasks published stays published")


class BrokerStreamWriter(ArrowStreamWriterBase):
    """``df.writeStream.format("broker")``: publish every row of every micro-batch (Spark
    4.0 hands rows, which become Arrow batches first; later Spark hands Arrow)."""

    def __init__(self, options: WriterOptions, schema: pa.Schema) -> None:
        self.options = options
        self.schema = schema
        make_encoder(schema, options)
        self._committer = _Committer()

    def write(self, iterator: Iterator[Any]) -> BrokerCommitMessage:
        batches = arrow_batches(iterator, self.schema)
        return publish_batches(batches, make_encoder(self.schema, self.options), self.options)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._committer.commit_once(messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning(
            "batch %d failed; Spark retries it, so its rows may be published again", batchId
        )
