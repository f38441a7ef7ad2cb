"""What a task of a relay reader runs: fetch its range of offsets from the relay.

A partition planned on a relay (``relay=host:port,...``, ``partitionData`` not
``inline``) carries the relay's address, id and the query's topics; the task connects
itself, checks that the relay still serves the spool it was planned on, and fetches
the records of its range on those topics. A relay that restarts or is cut off is tried
again for :data:`TASK_RETRY` seconds before the task fails.

A task reading Zeek's logs sends its converter too (``converter``): a
relay that can decodes the range into the task's rows and sends Arrow IPC, so the task
decodes nothing (docs/architecture.md, "Where Zeek's log records are decoded"). An older
relay, one whose log schemas differ from the partition's, or one that fails to decode,
sends the records, and the task decodes them as before: the rows are the same either way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa

from broker_spark.columnar.converter_spec import rows_from_ipc
from broker_spark.columnar.record_batches import RecordConversionError
from broker_spark.config import TLSSettings
from broker_spark.reader.options import HostPort
from broker_spark.reader.remote import FETCH_TIMEOUT, tls_context
from broker_spark.spool.relay_client import RelayError, SpoolClient, SpoolClientError
from broker_spark.spool.relay_reader_session import Records, Rows
from broker_spark.spool.segment import DataLossError
from broker_spark.spool.served_records import hello_fields, served

__all__ = ["TASK_RETRY", "Fetched", "FrameRows", "fetch_from_relay"]

log = logging.getLogger(__name__)

#: Seconds a task tries again to reach a relay it cannot (a restart, a cut): after that the
#: task fails (and Spark retries it, or the query fails with the reason).
TASK_RETRY = 120.0


class FrameRows(NamedTuple):
    """One ROWS frame, as a task takes it: its batches, what the relay's converter counted
    in them, and the offset after the frame's (all of the range before it is in these
    rows or in earlier frames')."""

    batches: list[pa.RecordBatch]
    counters: dict[str, int]
    next_offset: int


@dataclass
class Fetched:
    """What a task fetched of its range: its records (a record stream, and how many), or,
    when the relay decodes them, ``rows``: each ROWS frame's rows (:class:`FrameRows`), as
    the frames arrive (the connection is open until the
    stream ends or is closed)."""

    records: bytes = b""
    count: int = 0
    rows: Iterator[FrameRows] | None = None


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
    converter: dict[str, Any] | None = None,
    schemas: str | None = None,
) -> Fetched:
    """What a task of a relay reader fetches of offsets ``[start, end)`` of a relay's spool:
    its records (a record stream) and how many there are, only those on ``topics`` (the
    reader's prefixes; None: all) holding records of ``logs`` (the Zeek logs a log reader
    keeps; None: all), so fewer than the offsets when the spool holds other topics too. With
    ``converter`` (a :func:`~broker_spark.columnar.converter_spec.converter_spec`) the relay
    is asked to decode them, from the log schemas whose digest is ``schemas``: the rows
    then stream in as it decodes them. A relay that cannot be reached (it restarts, the
    network is cut) is tried again for ``retry`` seconds. Raises :class:`DataLossError`
    when the relay no longer holds the range, or serves another spool than ``relay_id``;
    ``RecordConversionError`` where the converter refuses a record (``mode=FAILFAST``), as
    the task's own decoding would."""
    deadline = time.monotonic() + retry
    delay = 0.2
    while True:
        try:
            try:
                return _fetch_once(
                    relay, ssl, start, end, timeout, relay_id, topics, logs, converter, schemas
                )
            except RelayError as exc:
                if exc.relay_code != "rows_failed":
                    raise
                log.warning("relay %s: %s; fetching the records instead", relay, exc)
                converter = None
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
    converter: dict[str, Any] | None,
    schemas: str | None,
) -> Fetched:
    client = SpoolClient.tcp(relay.host, relay.port, tls_context(ssl))
    try:
        asked = hello_fields(topics, logs)
        if converter is not None:
            asked["rows"] = converter
        welcome = client.hello("follow", "task", **asked)
        if relay_id is not None and welcome.get("relay") != relay_id:
            raise DataLossError(
                start,
                end,
                end,
                f"relay {relay} now serves another spool (id {welcome.get('relay')}, planned on "
                f"{relay_id}): offsets {start} to {end - 1} of the planned one are not there",
            )
        digest = schemas if welcome.get("rows") is not None else None
        parts = _relay_errors(client.parts(start, end, timeout, digest), start, end)
        first = next(parts, None)
        if isinstance(first, Rows):  # the connection goes on serving the stream
            stream, client = _decoded(client, first, parts), None
            return Fetched(rows=stream)
        records = [first, *parts] if first is not None else []
    finally:
        if client is not None:
            client.close()
    if any(isinstance(p, Rows) for p in records):
        raise SpoolClientError(f"relay {relay} sent decoded rows among records")
    data = b"".join(p.data for p in records)  # type: ignore[union-attr]
    data, count = served(welcome, topics, logs, data, sum(p.count for p in records))  # type: ignore[union-attr]
    return Fetched(data, count)


def _relay_errors(
    parts: Iterator[Records | Rows], start: int, end: int
) -> Iterator[Records | Rows]:
    """``parts``, the relay's ERRORs about the range as the task's own errors: ``data_loss``
    as :class:`DataLossError`, ``conversion`` as the converter's ``RecordConversionError``."""
    try:
        yield from parts
    except RelayError as exc:
        if exc.relay_code == "data_loss":
            earliest = int(exc.fields.get("earliest", end))
            raise DataLossError(start, end, earliest) from None
        if exc.relay_code == "conversion":
            raise RecordConversionError(str(exc.fields.get("message", exc))) from None
        raise


def _decoded(
    client: SpoolClient, first: Rows, parts: Iterator[Records | Rows]
) -> Iterator[FrameRows]:
    """The rows of each ROWS frame as it arrives (the relay decodes the next meanwhile), with
    what the relay's converter counted in them; the connection closes with the stream."""
    try:
        yield _frame_rows(first)
        for part in parts:
            yield _frame_rows(part)
    finally:
        client.close()


def _frame_rows(part: Records | Rows) -> FrameRows:
    if not isinstance(part, Rows):
        raise SpoolClientError("a relay sent records among decoded rows")
    batches = [b for b in rows_from_ipc(part.data) if b.num_rows]
    return FrameRows(batches, dict(part.counters), part.first + part.count)
