"""A store clone as a sans-I/O state machine.

A clone keeps a full replica in memory, answers reads from it, and forwards
writes to the master. Two channels connect it to the master: a consumer for the
master's updates (it starts by asking for a handshake with ``nack 0``; the
master answers with ``ack_clone``, carrying a snapshot) and, once that
handshake is done, a producer for its own writes (``attach_writer``). Feed
commands that arrived on ``<name>/<$>/data/clone`` to :meth:`CloneState.receive`,
call :meth:`CloneState.tick` every channel tick, send :meth:`CloneState.outgoing`
and publish :meth:`CloneState.events`.

Time: ``now`` is integer nanoseconds since the epoch; the clone uses it only to
tell how long the master has been silent.

Losing the master: reads raise ``StoreError(EC.StaleData)`` when the master has
been silent for longer than ``stale_interval`` (and before the first snapshot).
When the update channel gives up (``connection_timeout`` ticks of silence) or
an update is lost for good, the clone starts a fresh consumer and asks for a
handshake again; the next ``ack_clone`` (from the same master or a restarted
one) replaces the replica by its snapshot, with store events for the
differences. Writes not yet acknowledged are sent again to the master that
answers, so a write is applied at least once; writes made before the first
handshake wait in a buffer, as in Broker.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from broker_spark.data.binary import encode
from broker_spark.errors import EC, ProtocolError, StoreError
from broker_spark.protocol import channel as ch
from broker_spark.store.backends import MemoryBackend
from broker_spark.store.channel_commands import channel_command, channel_message
from broker_spark.store.commands import (
    NIL,
    Action,
    AddCommand,
    ClearCommand,
    EntityId,
    EraseCommand,
    ExpireCommand,
    InternalCommand,
    PutCommand,
    PutUniqueCommand,
    PutUniqueResultCommand,
    SubtractCommand,
    clone_topic,
    master_topic,
    with_publisher,
)
from broker_spark.store.events import StoreEvent
from broker_spark.store.ops import MISSING, add_value, index_value, subtract_value

__all__ = ["DEFAULT_STALE_INTERVAL", "CloneState"]

DEFAULT_STALE_INTERVAL = 10_000_000_000  # 10 s: Broker's channel timeout (100 ticks of 100 ms)


class CloneState:
    """One store clone: a replica, an update consumer and a write producer."""

    def __init__(
        self,
        name: str,
        entity: EntityId,
        now: int,
        *,
        stale_interval: int | None = DEFAULT_STALE_INTERVAL,
        heartbeat_interval: int = ch.DEFAULT_HEARTBEAT_INTERVAL,
        nack_timeout: int = ch.DEFAULT_NACK_TIMEOUT,
        connection_timeout: int = ch.DEFAULT_CONNECTION_TIMEOUT,
        buffer_capacity: int = ch.DEFAULT_BUFFER_CAPACITY,
    ) -> None:
        self.name = name
        self.entity = entity
        self.topic = clone_topic(name)  # where we listen
        self.master_topic = master_topic(name)  # where we send
        self.stale_interval = stale_interval
        self._now = now
        self._nack_timeout = nack_timeout
        self._connection_timeout = connection_timeout
        self._data = MemoryBackend()
        self._master: EntityId = NIL
        self._synced = False  # a snapshot was applied: the replica means something
        self._last_heard: int | None = None
        self._out: list[tuple[str, InternalCommand]] = []
        self._events: list[StoreEvent] = []
        self._results: list[tuple[int, bool]] = []
        self._pending_unique: set[int] = set()
        self._req_id = 0
        self._writer: ch.Producer[EntityId] = ch.Producer(
            heartbeat_interval=heartbeat_interval,
            connection_timeout=connection_timeout,
            buffer_capacity=buffer_capacity,
        )
        self._target: EntityId = NIL  # the master the writer's path leads to
        self._unacked: deque[tuple[int, Action]] = deque()
        self._stalled: list[Action] = []
        self.dropped = 0
        self.resyncs = 0
        #: Record store events; the endpoint turns this off while nobody subscribes to them.
        self.emit_events = True
        self._input = self._new_input()
        self._pump()

    # -- the outside world ---------------------------------------------------------

    def receive(self, cmd: InternalCommand, now: int) -> None:
        """Handle one command; see :meth:`receive_batch`."""
        self.receive_batch((cmd,), now)

    def receive_batch(self, cmds: Iterable[InternalCommand], now: int) -> None:
        """Handle commands that arrived together (cheaper than one by one)."""
        self._now = now
        master = self._master
        consumer = self._input
        for cmd in cmds:
            if type(cmd.content) is PutCommand and cmd.sender == master and master:
                # The master's updates: the bulk of all traffic, straight to the channel
                # (what channel_message makes of a put, built here: its call would cost ~10%).
                self._last_heard = now
                try:
                    consumer.receive(ch.Event(cmd.seq, cmd.content))
                except ProtocolError:
                    self.dropped += 1
            else:
                self._receive_one(cmd)
                master = self._master
                consumer = self._input
        self._pump()

    def _receive_one(self, cmd: InternalCommand) -> None:
        """Handle a command from the master (topic ``<name>/<$>/data/clone``)."""
        msg = channel_message(cmd, to_master=False)
        sender = cmd.sender
        to_me = cmd.receiver == self.entity
        try:
            if isinstance(msg, ch.Handshake):  # ack_clone
                if not to_me or (self._input.initialized and sender != self._master):
                    self.dropped += 1
                    return
                self._master = sender
                self._input.producer_handle = sender
                self._heard()
                self._input.receive(msg)
            elif sender != self._master or not self._master:
                self.dropped += 1  # not (yet) our master
            elif isinstance(msg, (ch.Event, ch.Heartbeat)) or (
                isinstance(msg, ch.RetransmitFailed) and to_me
            ):
                self._heard()
                self._input.receive(msg)
            elif isinstance(msg, (ch.CumulativeAck, ch.Nack)) and to_me:
                self._heard()
                if sender == self._target:
                    self._writer.receive(sender, msg)
            else:
                self.dropped += 1
        except ProtocolError:
            self.dropped += 1

    def tick(self, now: int) -> None:
        """One channel tick: acks, nacks, heartbeats, timeouts."""
        self._now = now
        self._input.tick()
        self._writer.tick()
        self._pump()

    def outgoing(self) -> list[tuple[str, InternalCommand]]:
        out, self._out = self._out, []
        return out

    def events(self) -> list[StoreEvent]:
        out, self._events = self._events, []
        return out

    def put_unique_results(self) -> list[tuple[int, bool]]:
        """Answers to :meth:`put_unique` requests, as (req_id, inserted)."""
        out, self._results = self._results, []
        return out

    def idle(self) -> bool:
        """Connected to a master, nothing buffered from it, every local write acknowledged."""
        return (
            self._synced
            and self._input.idle()
            and not self._stalled
            and not self._unacked
            and self._writer.idle()
        )

    @property
    def master(self) -> EntityId:
        return self._master

    @property
    def synced(self) -> bool:
        """The current update channel has its handshake (the replica follows a master)."""
        return self._synced and self._input.initialized

    @property
    def has_data(self) -> bool:
        """A snapshot was applied at some point: reads answer from a real replica."""
        return self._synced

    def silent_for(self, now: int) -> int | None:
        """Nanoseconds since the master was last heard from (None: never heard)."""
        return None if self._last_heard is None else now - self._last_heard

    def master_lost(self, now: int) -> None:
        """The master's endpoint is gone: ask for a master again without waiting for timeouts.

        The replica stays readable; the next ``ack_clone`` (from whichever master
        answers) replaces it. The write channel is dropped too, so writes the
        master did not acknowledge go again to the master that answers.
        """
        self._now = now
        if self._target:
            self._writer.remove(self._target)
            self._target = NIL
            self._stalled = [content for _, content in self._unacked] + self._stalled
            self._unacked.clear()
        self._restart_input()
        self._pump()

    def stale(self) -> bool:
        """Reads would fail with StaleData: no snapshot yet, or the master silent too long."""
        if not self._synced or self._last_heard is None:
            return True
        if self.stale_interval is None:
            return False
        return self._now - self._last_heard > self.stale_interval

    # -- reads (local) ------------------------------------------------------------------

    def _fresh(self) -> MemoryBackend:
        if self.stale():
            if not self._synced:
                raise StoreError(
                    f"clone of {self.name!r} has no data from a master yet", EC.StaleData
                )
            silent = (self._now - (self._last_heard or 0)) / 1e9
            raise StoreError(
                f"clone of {self.name!r}: the master has been silent for {silent:.1f} s",
                EC.StaleData,
            )
        return self._data

    def get(self, key: Any) -> Any:
        return self._fresh().get(key)

    def exists(self, key: Any) -> bool:
        return self._fresh().exists(key)

    def keys(self) -> list[Any]:
        return self._fresh().keys()

    def get_index_from_value(self, key: Any, index: Any) -> Any:
        return index_value(self._fresh().get(key), index)

    def snapshot(self) -> tuple[tuple[Any, Any], ...]:
        """The replica as it is, stale or not (for tests and status)."""
        return self._data.snapshot()

    # -- writes (forwarded) ----------------------------------------------------------------

    def local(self, content: Action, now: int) -> None:
        """Forward a write to the master.

        Checks it against the replica first where that can tell (an add or
        subtract whose operand does not fit the stored value raises StoreError
        and nothing is sent); the master has the final word and silently drops
        writes that fail there, as Broker does.
        """
        self._now = now
        content = with_publisher(content, self.entity)
        if self._synced and isinstance(content, (AddCommand, SubtractCommand)):
            current = self._data.lookup(content.key)
            if current is not MISSING:
                if isinstance(content, AddCommand):
                    add_value(current, content.value, content.init_type)
                else:
                    subtract_value(current, content.value)
        self._forward(content)
        self._pump()

    def local_many(self, contents: Iterable[Action], now: int) -> None:
        """Forward several writes at once (one pass of the channel machinery for all).

        ``add`` and ``subtract`` still get :meth:`local`'s check against the
        replica, one by one; a failing one raises and the writes after it are
        not sent.
        """
        self._now = now
        entity = self.entity
        for content in contents:
            if isinstance(content, (AddCommand, SubtractCommand)):
                self._pump()
                self.local(content, now)
            else:
                self._forward(with_publisher(content, entity))
        self._pump()

    def put_unique(self, key: Any, value: Any, expiry: int | None, now: int) -> int:
        """Ask the master to insert ``key`` only if absent; the answer comes later.

        Returns the request id; ``put_unique_results()`` yields ``(req_id, inserted)``.
        """
        self._req_id += 1
        req = self._req_id
        self._pending_unique.add(req)
        self.local(PutUniqueCommand(key, value, expiry, self.entity, req, self.entity), now)
        return req

    def _forward(self, content: Action) -> None:
        if self._target:
            seq = self._writer.produce(content)
            self._unacked.append((seq, content))
        else:
            self._stalled.append(content)

    def _ensure_writer(self) -> None:
        """Point the write channel at the current master, resending what it never acked."""
        if self._target == self._master:
            return
        if self._target:
            self._writer.remove(self._target)
        self._writer.add(self._master)
        self._target = self._master
        again = [content for _, content in self._unacked] + self._stalled
        self._unacked.clear()
        self._stalled = []
        for content in again:
            self._forward(content)

    # -- applying the master's updates ---------------------------------------------------

    def _apply(self, c: Action) -> None:
        data = self._data
        if type(c) is PutCommand:
            old = data.swap(c.key, c.value)
            if self.emit_events:
                kind, old = ("insert", None) if old is MISSING else ("update", old)
                event = StoreEvent(kind, self.name, c.key, c.value, old, c.expiry, c.publisher)
                self._events.append(event)
        elif isinstance(c, (EraseCommand, ExpireCommand)):
            if data.erase(c.key) and self.emit_events:
                kind = "erase" if isinstance(c, EraseCommand) else "expire"
                self._events.append(StoreEvent(kind, self.name, c.key, publisher=c.publisher))
        elif isinstance(c, ClearCommand):
            if self.emit_events:
                for key in data.keys():
                    event = StoreEvent("erase", self.name, key, publisher=c.publisher)
                    self._events.append(event)
            data.clear()
        elif (
            isinstance(c, PutUniqueResultCommand)
            and c.who == self.entity
            and c.req_id in self._pending_unique
        ):
            self._pending_unique.discard(c.req_id)
            self._results.append((c.req_id, c.inserted))
        # add, subtract and put_unique never come from a master: ignored as in Broker

    def _apply_snapshot(self, pairs: Any) -> None:
        """Replace the replica, with events for what changed (Broker's ``set_store``)."""
        pairs = tuple(pairs or ())
        if not self.emit_events:
            self._data.replace_all(pairs)
            return
        old = {encode(k): (k, v) for k, v in self._data.snapshot()}
        new = {encode(k): (k, v) for k, v in pairs}
        master = self._master
        for k, (key, _) in old.items():
            if k not in new:
                self._events.append(StoreEvent("erase", self.name, key))
        for k, (key, value) in new.items():
            before = old.get(k)
            if before is None:
                self._events.append(StoreEvent("insert", self.name, key, value, publisher=master))
            elif encode(before[1]) != encode(value):
                event = StoreEvent("update", self.name, key, value, before[1], publisher=master)
                self._events.append(event)
        self._data.replace_all(pairs)

    # -- channel plumbing ----------------------------------------------------------------

    def _heard(self) -> None:
        self._last_heard = self._now

    def _new_input(self) -> ch.Consumer[EntityId]:
        consumer: ch.Consumer[EntityId] = ch.Consumer(
            self._master,
            nack_timeout=self._nack_timeout,
            connection_timeout=self._connection_timeout,
        )
        consumer.start()
        return consumer

    def _restart_input(self) -> None:
        """Drop the update channel and ask (anyone) for a new handshake."""
        self._drain_input_output()
        self._input = self._new_input()
        self.resyncs += 1

    def _drain_input_output(self) -> None:
        for msg in self._input.outgoing():
            # A handshake request (nack 0) goes to whichever master is out there.
            receiver = NIL if isinstance(msg, ch.Nack) and 0 in msg.seqs else self._master
            cmd = channel_command(msg, self.entity, receiver, to_master=True)
            self._out.append((self.master_topic, cmd))

    def _drain_writer(self) -> None:
        topic, me, target = self.master_topic, self.entity, self._target
        for _, msg in self._writer.outgoing():
            self._out.append((topic, channel_command(msg, me, target, to_master=True)))
        if any(isinstance(e, ch.ConsumerLost) for e in self._writer.events()):
            self._target = NIL  # the master stopped acknowledging; re-attach on the next sync
            if self.synced:
                self._ensure_writer()
                self._drain_writer()
        acked = self._writer.acked(self._target) if self._target else None
        if acked is not None:
            while self._unacked and self._unacked[0][0] <= acked:
                self._unacked.popleft()

    def _pump(self) -> None:
        """Apply what the master delivered and translate channel output into commands."""
        restart = False
        for item in self._input.deliverable():
            if isinstance(item, ch.Delivered):
                self._apply(item.content)
            elif isinstance(item, ch.Synced):
                self._apply_snapshot(item.snapshot)
                self._synced = True
                self._ensure_writer()
            else:  # Gap: an update is lost for good, the replica cannot be trusted
                restart = True
                break
        if any(isinstance(e, ch.ProducerLost) for e in self._input.events()):
            restart = True
        if restart:
            self._restart_input()
        self._drain_input_output()
        self._drain_writer()
