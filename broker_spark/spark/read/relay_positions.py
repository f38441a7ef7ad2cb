"""One stream over several relays: ``.option("relay", "logger1:9998,logger2:9998")``.

A Zeek cluster on the ZeroMQ backend spreads its log batches round robin over
all its loggers, so a site with two loggers runs two relay nodes, and a query
must read both as one stream. The reader keeps one position per relay, keyed
by the relay's id (``relay-id``, made when its spool was first owned), as
Spark's Kafka source keeps one per partition (:class:`RelayOffsets`):

* each micro-batch plans partitions from every relay's new range; a task
  fetches its range from its relay (whose id it checks) and tags its rows
  with the relay's id (the ``relay`` column), so ``(relay, offset)`` says where
  a record is;
* ``maxRecordsPerTrigger`` is shared fairly among the relays that have records
  (:func:`fair_shares`);
* ``failOnDataLoss`` applies per relay: a relay whose spool dropped what the
  query had not read yet, or that now serves another spool, fails the query
  (or, with ``false``, is read on from what it holds);
* a relay first reached after the query started (added to the options of a
  checkpointed query, or unreachable until now) enters the offsets at
  ``startingOffsets`` with an empty range, and is read from the next batch on,
  so re-planning a batch after a restart reads exactly the same ranges;
* a relay that cannot be reached never stops the others: it keeps its position
  (nothing new is planned from it), the log says so once (and again when it is
  back), and ``reportLatestOffset`` (the query's progress) names it under
  ``unreachable``. Ranges already planned on it are retried by their tasks for a
  while (:data:`~broker_spark.reader.relay_fetch.TASK_RETRY`);
* a relay in the checkpoint whose address left the options fails the query,
  naming it.

With one relay the same holds; a checkpoint written for one relay by an
earlier release (``{"offset": N}``) is that relay's position.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import InputPartition

from broker_spark.reader.in_process import BrokerDataLossError, lost_before_checkpoint
from broker_spark.reader.offsets import RelayOffsets, fair_shares
from broker_spark.reader.options import ReaderOptions, parse_host_port
from broker_spark.reader.remote import RelayRuntime, RelaySet, reader_runtime
from broker_spark.spark.compat import ReadAllAvailable, ReadLimit, ReadMaxRows
from broker_spark.spark.read.parallelism import plan_ranges
from broker_spark.spark.read.partitions import SpoolPartition, with_schemas

if TYPE_CHECKING:
    from broker_spark.spark.read.rows import Rows

__all__ = ["RelayPositions"]

log = logging.getLogger(__name__)


class RelayPositions:
    """The positions of a reader of one or more relays: one position per relay.

    ``rows`` says whether the relays' Zeek log schemas are followed; ``parallelism`` is
    the cluster's, shared among the relays that have records in a batch.
    """

    def __init__(self, options: ReaderOptions, rows: Rows, parallelism: int) -> None:
        self.options = options
        self.rows = rows
        self.parallelism = parallelism
        self._available_now = False
        self._relays: RelaySet | None = None
        self._initial_positions: dict[str, int] | None = None
        self._first_seen: dict[str, int] = {}  # where a relay reached this run starts
        self._targets: dict[str, int] | None = None  # availableNow
        self._next: RelayOffsets | None = None  # Spark before 4.2: where the next batch starts
        self._addresses: dict[str, str] = {}

    @property
    def relays(self) -> RelaySet | None:
        """The relays (None until the first of Spark's questions reached them)."""
        return self._relays

    def make_runtime(self) -> Any:
        return reader_runtime(
            self.options, logs=self.rows.logs, index_interval=self.rows.index_interval
        )

    # --- the relays ----------------------------------------------------------------------

    def _started_relays(self, checkpoint: RelayOffsets | None = None) -> RelaySet:
        relays = self._relays
        if relays is None:
            relays = self.make_runtime()
            assert isinstance(relays, RelaySet)
            try:
                relays.open()
            except BaseException:
                relays.close()
                raise
            self._relays = relays
            if checkpoint is not None:
                self._reconcile(relays, checkpoint)
            if self._available_now:
                self._targets = self._ends(relays)
        else:
            relays.check()
        self._learn(relays)
        return relays

    def _learn(self, relays: RelaySet) -> None:
        """Remember where each relay reached in this run starts (``startingOffsets`` at the
        moment it was first reached), and where each is."""
        for relay_id, member in relays.by_id().items():
            self._addresses[relay_id] = str(member.relay)
            if relay_id not in self._first_seen:
                if self.options.starting_offsets == "earliest":
                    self._first_seen[relay_id] = member.spool.start_offset()
                else:
                    self._first_seen[relay_id] = max(
                        member.spool.start_offset(), member.latest_start()
                    )

    def _reconcile(self, relays: RelaySet, checkpoint: RelayOffsets) -> None:
        """A checkpoint's relays against the options: one whose address left them fails the
        query; one whose spool ends before the checkpoint's position lost data."""
        members = relays.by_id()
        wanted = {str(m.relay) for m in relays.members}
        positions = self._positions(checkpoint, relays)
        for relay_id, position in positions.items():
            member = members.get(relay_id)
            at = checkpoint.addresses.get(relay_id) or self._addresses.get(relay_id, "")
            if member is None and at and at not in wanted:
                raise BrokerDataLossError(
                    f"relay {at} (id {relay_id}) is in this query's checkpoint but no longer in "
                    f"its relay option ({self.options_text()}): add it back, or start the query "
                    "with a new checkpoint"
                )
            if member is not None and member.reachable:
                lost_before_checkpoint(self.options, position, member.spool.end, member.where)

    def options_text(self) -> str:
        return ",".join(str(r) for r in self.options.relays)

    def _positions(self, offsets: RelayOffsets, relays: RelaySet) -> dict[str, int]:
        """Positions by relay id; a one-relay checkpoint of an earlier release maps to the
        one relay of the options."""
        positions = dict(offsets.positions)
        for relay_id, at in offsets.addresses.items():
            if at:
                self._addresses.setdefault(relay_id, at)
        if offsets.legacy is not None:
            ids = list(relays.by_id())
            if len(relays.members) != 1 or not ids:
                raise BrokerDataLossError(
                    f"this query's checkpoint holds one position ({offsets.legacy}) from a "
                    f"release that read one relay, and the relay option names "
                    f"{len(relays.members)} ({self.options_text()}): start it with a new checkpoint"
                )
            positions[ids[0]] = offsets.legacy
        return positions

    def _ends(self, relays: RelaySet) -> dict[str, int]:
        return {k: m.spool.end_offset() for k, m in relays.by_id().items()}

    def _offsets(self, positions: dict[str, int]) -> dict:
        addresses = {k: self._addresses.get(k, "") for k in positions}
        return RelayOffsets(positions, addresses).to_dict()

    def _parse(self, obj: Any) -> RelayOffsets:
        return RelayOffsets.from_dict(obj)

    # --- Spark's questions ---------------------------------------------------------------

    def initial_offset(self) -> dict:
        if self._initial_positions is None:
            relays = self._started_relays()
            self._initial_positions = {k: self._first_seen[k] for k in relays.by_id()}
            if self._next is None:
                self._next = RelayOffsets(self._initial_positions, dict(self._addresses))
        return self._offsets(dict(self._initial_positions))

    def default_read_limit(self) -> ReadLimit:
        limit = self.options.max_records_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepare_available_now(self) -> None:
        self._available_now = True
        if self._relays is not None:
            self._targets = self._ends(self._relays)

    def latest_offset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        if start is None:
            return self._latest_without_admission()
        offsets = self._parse(start)
        relays = self._started_relays(offsets)
        positions = self._positions(offsets, relays)
        members = relays.by_id()
        self._check_left(positions, relays)
        out = dict(positions)
        available: dict[str, int] = {}
        for relay_id, member in members.items():
            first = positions.get(relay_id)
            if first is None:  # reached for the first time: enters at startingOffsets
                out[relay_id] = self._first_seen[relay_id]
                continue
            if not member.reachable:
                continue  # keeps its position: nothing new is planned from it
            begin, end = member.spool.start_offset(), member.spool.end_offset()
            if first < begin and first < end:
                self._lost(member, first, begin, begin)
                first = begin
            latest = max(end, first)
            if self._targets is not None and relay_id in self._targets:
                latest = min(latest, max(self._targets[relay_id], first))
            out[relay_id] = first
            available[relay_id] = latest - first
        if isinstance(limit, ReadMaxRows):
            shares = fair_shares(available, max(1, limit.max_rows))
        else:
            shares = available
        for relay_id, n in shares.items():
            out[relay_id] += n
        return self._offsets(out)

    def _check_left(self, positions: dict[str, int], relays: RelaySet) -> None:
        wanted = {str(m.relay) for m in relays.members}
        known = relays.by_id()
        for relay_id in positions:
            at = self._addresses.get(relay_id, "")
            if relay_id not in known and at and at not in wanted:
                raise BrokerDataLossError(
                    f"relay {at} (id {relay_id}) is in this query's offsets but no longer in its "
                    f"relay option ({self.options_text()})"
                )

    def _latest_without_admission(self) -> dict:
        """Spark 4.0 and 4.1 (see
        :meth:`~broker_spark.spark.read.spool_positions.SpoolPositions._latest_without_admission`)."""
        relays = self._started_relays()
        if self._next is None:
            self.initial_offset()
            assert self._next is not None
            begin = {k: m.spool.start_offset() for k, m in relays.by_id().items()}
            latest = self.latest_offset(self._offsets(begin), ReadAllAvailable())
        else:
            latest = self.latest_offset(
                self._offsets(dict(self._next.positions)), self.default_read_limit()
            )
        self._next = self._parse(latest)
        return latest

    def _planned_relays(self, end: RelayOffsets) -> None:
        if self._next is None:
            self._next = end
            return
        merged = dict(self._next.positions)
        for relay_id, offset in end.positions.items():
            if merged.get(relay_id, -1) < offset:
                merged[relay_id] = offset
        self._next = RelayOffsets(merged, dict(self._addresses))

    def report_latest(self) -> dict | None:
        relays = self._relays
        if relays is None:
            return None
        out = self._offsets(self._ends(relays))
        unreachable = relays.unreachable()
        if unreachable:
            out["unreachable"] = unreachable
        return out

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        lo_offsets, hi_offsets = self._parse(start), self._parse(end)
        relays = self._started_relays(hi_offsets)
        lows = self._positions(lo_offsets, relays)
        highs = self._positions(hi_offsets, relays)
        self._planned_relays(RelayOffsets(highs, dict(self._addresses)))
        members = relays.by_id()
        busy = [k for k, hi in highs.items() if hi > lows.get(k, hi)]
        parallelism = max(1, self.parallelism // max(1, len(busy)))
        parts: list[InputPartition] = []
        for relay_id in sorted(busy):
            lo, hi = lows[relay_id], highs[relay_id]
            member = members.get(relay_id)
            if member is None:  # re-planned on a relay not reached in this run: its tasks wait
                parts += self._unreached_partitions(relay_id, lo, hi, parallelism)
                continue
            if member.reachable:
                begin = member.spool.start_offset()
                if lo < begin:
                    self._lost(member, lo, min(begin, hi), begin)
                    lo = min(begin, hi)
            for a, b in self._split_relay(member, lo, hi, parallelism):
                parts.append(self._relay_partition(member, a, b))
        return parts

    def _unreached_partitions(
        self, relay_id: str, lo: int, hi: int, parallelism: int
    ) -> list[InputPartition]:
        """A batch planned before a restart on a relay this run has not reached: its tasks
        fetch from the address the offsets name (and retry while it is down), checking the
        relay's id; the Zeek log schemas it announced are not known here (Zeek's standard
        ones stand in for them, as for records whose LogCreate was not seen)."""
        at = self._addresses.get(relay_id, "")
        if not at:
            raise BrokerDataLossError(
                f"the batch reads offsets {lo} to {hi - 1} of relay {relay_id}, whose address "
                "is not known"
            )
        log.warning(
            "re-planning offsets %d to %d of relay %s, which is not reachable now", lo, hi - 1, at
        )
        relay = parse_host_port(at, "relay")
        fail = self.options.fail_on_data_loss
        ssl = self.options.connection.ssl
        parts: list[InputPartition] = []
        for a, b in self._split_relay(None, lo, hi, parallelism):
            parts.append(SpoolPartition.relayed(a, b, relay, ssl, fail, relay_id))
        return parts

    def _split_relay(
        self, member: RelayRuntime | None, lo: int, hi: int, parallelism: int
    ) -> list[tuple[int, int]]:
        history = member.history if member is not None else None
        per_message = history.records_per_message() if history is not None else 1.0
        return plan_ranges(
            lo,
            hi,
            records_cap=self.options.max_records_per_partition,
            parallelism=parallelism,
            min_partitions=self.options.min_partitions,
            per_message=per_message,
        )

    def _relay_partition(self, member: RelayRuntime, lo: int, hi: int) -> SpoolPartition:
        fail = self.options.fail_on_data_loss
        if self.options.partition_data == "inline":
            part = SpoolPartition.inline(lo, hi, *member.spool.read_counted(lo, hi))
        else:
            part = SpoolPartition.relayed(
                lo,
                hi,
                member.relay,
                self.options.connection.ssl,
                fail,
                member.relay_id,
                self.options.served_topics,
                self.options.served_logs,
            )
        part.relay_id = member.relay_id
        return with_schemas(part, member.history, lo)

    def _lost(self, member: Any, lo: int, hi: int, earliest: int) -> None:
        if hi <= lo:
            return
        text = (
            f"offsets {lo} to {hi - 1} are no longer in the spool of {member.where} "
            f"(earliest held: {earliest})"
        )
        if self.options.fail_on_data_loss:
            raise BrokerDataLossError(
                f"{text}; set failOnDataLoss=false to skip them, or keep more on the relay "
                "(node --spool-retention/--spool-max-age)"
            )
        log.warning("%s; failOnDataLoss=false: skipping them", text)

    def commit(self, end: dict) -> None:
        offsets = self._parse(end)
        relays = self._started_relays()
        positions = self._positions(offsets, relays)
        for relay_id, member in relays.by_id().items():
            if relay_id in positions and member.reachable:
                member.committed(positions[relay_id])
        self._planned_relays(RelayOffsets(positions, dict(self._addresses)))

    def stop(self) -> None:
        relays, self._relays = self._relays, None
        if relays is not None:
            relays.close()
