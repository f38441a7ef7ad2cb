"""A store master as a sans-I/O state machine.

The master owns the data (in a backend), applies every write, and replicates
the result to clones over one channel producer; each writer (a clone that
forwards writes) reaches it over a channel of its own, for which the master
keeps a consumer. Nothing here touches sockets or clocks: feed commands that
arrived on ``<name>/<$>/data/master`` to :meth:`MasterState.receive`, call
:meth:`MasterState.tick` every channel tick (100 ms in Broker), and send what
:meth:`MasterState.outgoing` returns; :meth:`MasterState.events` yields the
store events to publish.

Time: ``now`` is integer nanoseconds since the epoch (the endpoint's clock),
passed to every call that can write; expiries are timespans in nanoseconds.

What clones see is Broker's protocol: ``add``, ``subtract`` and ``put_unique``
are applied here and broadcast as plain ``put`` commands (plus a
``put_unique_result`` for the asker), so clones only ever apply put, erase,
expire and clear. Expiry runs here only: :meth:`tick` removes due keys and
broadcasts ``expire``; a later write of the key replaces or cancels its expiry.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any

from broker_spark.data.binary import encode
from broker_spark.errors import ProtocolError, StoreError
from broker_spark.protocol import channel as ch
from broker_spark.store.backends import StoreBackend
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

__all__ = ["MasterState"]


class MasterState:
    """One store master: data, expiries, clones (a producer) and writers (consumers)."""

    def __init__(
        self,
        name: str,
        backend: StoreBackend,
        entity: EntityId,
        now: int,
        *,
        heartbeat_interval: int = ch.DEFAULT_HEARTBEAT_INTERVAL,
        nack_timeout: int = ch.DEFAULT_NACK_TIMEOUT,
        connection_timeout: int = ch.DEFAULT_CONNECTION_TIMEOUT,
        buffer_capacity: int = ch.DEFAULT_BUFFER_CAPACITY,
    ) -> None:
        self.name = name
        self.backend = backend
        self.entity = entity
        self.topic = master_topic(name)  # where we listen
        self.clones_topic = clone_topic(name)  # where we send
        self._now = now
        self._nack_timeout = nack_timeout
        self._connection_timeout = connection_timeout
        self._producer: ch.Producer[EntityId] = ch.Producer(
            heartbeat_interval=heartbeat_interval,
            connection_timeout=connection_timeout,
            buffer_capacity=buffer_capacity,
            snapshot=backend.snapshot,
        )
        self._inputs: dict[EntityId, ch.Consumer[EntityId]] = {}
        self._expiry: dict[bytes, tuple[int, Any]] = {}  # encoded key -> (due, key)
        self._heap: list[tuple[int, bytes]] = []  # lazily pruned (due, encoded key)
        self._out: list[tuple[str, InternalCommand]] = []
        self._events: list[StoreEvent] = []
        self._errors: list[tuple[EntityId, StoreError]] = []
        self._req_id = 0
        self.dropped = 0  # commands ignored: unknown writer, malformed for the channel
        #: Record store events; the endpoint turns this off while nobody subscribes to them.
        self.emit_events = True
        for key, due in backend.expiries():
            self._set_expiry(key, due)

    # -- the outside world ---------------------------------------------------------

    def receive(self, cmd: InternalCommand, now: int) -> None:
        """Handle one command; see :meth:`receive_batch`."""
        self.receive_batch((cmd,), now)

    def receive_batch(self, cmds: Iterable[InternalCommand], now: int) -> None:
        """Handle commands that arrived together (cheaper than one by one)."""
        self._now = now
        for cmd in cmds:
            self._receive_one(cmd)
        self._pump()

    def _receive_one(self, cmd: InternalCommand) -> None:
        """Handle a command from a clone or writer (topic ``<name>/<$>/data/master``)."""
        msg = channel_message(cmd, to_master=True)
        sender = cmd.sender
        try:
            if isinstance(msg, ch.Handshake):  # a writer attaches
                if sender not in self._inputs:
                    self._inputs[sender] = ch.Consumer(
                        sender,
                        nack_timeout=self._nack_timeout,
                        connection_timeout=self._connection_timeout,
                    )
                self._inputs[sender].receive(msg)
            elif isinstance(msg, (ch.Event, ch.Heartbeat, ch.RetransmitFailed)):
                self._to_input(sender, msg)
            elif isinstance(msg, (ch.CumulativeAck, ch.Nack)):
                self._to_producer(cmd, msg)
            else:
                self.dropped += 1
        except ProtocolError:
            self.dropped += 1

    def tick(self, now: int) -> None:
        """One channel tick: heartbeats, retransmission timers, expiries, a commit."""
        self._now = now
        self._producer.tick()
        for consumer in list(self._inputs.values()):
            consumer.tick()
        self._expire_due(now)
        self._pump()
        self.backend.flush()

    def outgoing(self) -> list[tuple[str, InternalCommand]]:
        """Commands to send, as (topic, command); see ``commands.unicast_target``."""
        self._drain_producer()
        out, self._out = self._out, []
        return out

    def events(self) -> list[StoreEvent]:
        out, self._events = self._events, []
        return out

    def errors(self) -> list[tuple[EntityId, StoreError]]:
        """Writes from remote writers that failed (Broker only logs these)."""
        out, self._errors = self._errors, []
        return out

    def idle(self) -> bool:
        """No pending clone handshakes, every clone acked everything, no writer input left."""
        return self._producer.idle() and all(c.idle() for c in self._inputs.values())

    @property
    def clones(self) -> tuple[EntityId, ...]:
        return self._producer.consumers

    @property
    def writers(self) -> tuple[EntityId, ...]:
        return tuple(self._inputs)

    def drop_endpoints(self, endpoints: set[bytes]) -> None:
        """Forget the clones and writers of endpoints that went away.

        Otherwise ``idle()`` would wait for their acks until the channel times
        out. Should such a clone still be alive (another path), its next ack or
        nack brings it back with a fresh snapshot.
        """
        for handle in self._producer.consumers:
            if handle.endpoint in endpoints:
                self._producer.remove(handle)
        for writer in list(self._inputs):
            if writer.endpoint in endpoints:
                del self._inputs[writer]

    def close(self) -> None:
        """Commit and close the backend."""
        self.backend.close()

    # -- local API ----------------------------------------------------------------------

    def local(self, content: Action, now: int) -> Any:
        """Apply a write made on this master's own store object.

        Returns the ``put_unique`` result (a bool) or None; raises StoreError
        (TypeClash, InvalidData, NoSuchKey...) with nothing changed.
        """
        self._now = now
        return self._apply(with_publisher(content, self.entity))

    def put_unique(self, key: Any, value: Any, expiry: int | None, now: int) -> bool:
        """``put_unique`` on the master: True only if ``key`` did not exist."""
        self._req_id += 1
        cmd = PutUniqueCommand(key, value, expiry, self.entity, self._req_id, self.entity)
        return self.local(cmd, now)

    def get(self, key: Any) -> Any:
        return self.backend.get(key)

    def exists(self, key: Any) -> bool:
        return self.backend.exists(key)

    def keys(self) -> list[Any]:
        return self.backend.keys()

    def get_index_from_value(self, key: Any, index: Any) -> Any:
        return index_value(self.backend.get(key), index)

    # -- applying writes -----------------------------------------------------------------

    def _apply(self, c: Action) -> Any:
        if isinstance(c, PutCommand):
            self._put(c.key, c.value, c.expiry, c.publisher, c)
        elif isinstance(c, AddCommand):
            old = self.backend.lookup(c.key)
            new = add_value(old, c.value, c.init_type)
            self._replace(c.key, old, new, c.expiry, c.publisher)
        elif isinstance(c, SubtractCommand):
            old = self.backend.lookup(c.key)
            new = subtract_value(old, c.value)
            self._replace(c.key, old, new, c.expiry, c.publisher)
        elif isinstance(c, EraseCommand):
            if self.backend.erase(c.key):
                self._set_expiry(c.key, None)
                if self.emit_events:
                    self._events.append(
                        StoreEvent("erase", self.name, c.key, publisher=c.publisher)
                    )
                self._broadcast(c)
        elif isinstance(c, PutUniqueCommand):
            inserted = not self.backend.exists(c.key)
            if inserted:
                self._put(c.key, c.value, c.expiry, c.publisher, None)
            self._broadcast(PutUniqueResultCommand(inserted, c.who, c.req_id, self.entity))
            return inserted
        elif isinstance(c, ClearCommand):
            if self.emit_events:
                for key in self.backend.keys():
                    self._events.append(StoreEvent("erase", self.name, key, publisher=c.publisher))
            self.backend.clear()
            self._expiry.clear()
            self._heap.clear()
            self._broadcast(c)
        # put_unique_result and expire are the master's own output: nothing to do
        return None

    def _put(self, key: Any, value: Any, expiry: int | None, publisher: EntityId, cmd: Any) -> None:
        due = None if expiry is None else self._now + expiry
        if due is not None or self._expiry:
            self._set_expiry(key, due)
        if not self.emit_events:
            self.backend.put(key, value, due)
        else:
            old = self.backend.swap(key, value, due)
            kind = "insert" if old is MISSING else "update"
            old = None if old is MISSING else old
            self._events.append(StoreEvent(kind, self.name, key, value, old, expiry, publisher))
        self._broadcast(cmd or PutCommand(key, value, expiry, publisher))

    def _replace(self, key: Any, old: Any, new: Any, expiry: int | None, pub: EntityId) -> None:
        """Store the result of an add or subtract and send it on as a plain put."""
        due = None if expiry is None else self._now + expiry
        self.backend.put(key, new, due)
        self._set_expiry(key, due)
        if self.emit_events:
            kind = "insert" if old is MISSING else "update"
            self._events.append(
                StoreEvent(kind, self.name, key, new, None if old is MISSING else old, None, pub)
            )
        self._broadcast(PutCommand(key, new, None, pub))

    # -- expiry ----------------------------------------------------------------------------

    def _set_expiry(self, key: Any, due: int | None) -> None:
        if due is None:
            if self._expiry:
                self._expiry.pop(encode(key), None)
            return
        k = encode(key)
        self._expiry[k] = (due, key)
        heapq.heappush(self._heap, (due, k))
        if len(self._heap) > 2 * len(self._expiry) + 1024:
            self._heap = [(d, k) for k, (d, _) in self._expiry.items()]
            heapq.heapify(self._heap)

    def _expire_due(self, now: int) -> None:
        heap = self._heap
        while heap and heap[0][0] < now:
            due, k = heapq.heappop(heap)
            entry = self._expiry.get(k)
            if entry is None or entry[0] != due:
                continue  # replaced or cancelled by a later write
            del self._expiry[k]
            key = entry[1]
            if self.backend.expire(key, now):
                if self.emit_events:
                    event = StoreEvent("expire", self.name, key, publisher=self.entity)
                    self._events.append(event)
                self._broadcast(ExpireCommand(key, self.entity))

    # -- channel plumbing ----------------------------------------------------------------

    def _to_input(self, sender: EntityId, msg: Any) -> None:
        consumer = self._inputs.get(sender)
        if consumer is None:
            self.dropped += 1  # not attached (yet); Broker ignores it too
            return
        consumer.receive(msg)

    def _to_producer(self, cmd: InternalCommand, msg: ch.CumulativeAck | ch.Nack) -> None:
        sender = cmd.sender
        if sender not in self._producer.consumers and not (
            isinstance(msg, ch.Nack) and 0 in msg.seqs
        ):
            if cmd.receiver == self.entity:
                # A clone we dropped (timeout) still follows us: start it afresh with a snapshot.
                self._producer.add(sender)
            else:
                self.dropped += 1
            return
        self._producer.receive(sender, msg)

    def _broadcast(self, content: Action) -> None:
        """Produce ``content`` on the clone channel: one broadcast however many clones."""
        seq = self._producer.produce(content)
        out = self._producer.outgoing()
        if out:
            self._translate(out, seq)

    def _drain_producer(self) -> None:
        out = self._producer.outgoing()
        if out:
            self._translate(out, 0)
        self._producer.events()  # nothing to do on lost clones: they ask again with nack 0

    def _translate(self, out: list[tuple[EntityId, Any]], fresh: int) -> None:
        """Turn channel messages into commands; the clones' copies of event ``fresh`` go once."""
        topic, me = self.clones_topic, self.entity
        beat_sent: set[int] = set()
        fresh_sent = False
        for handle, msg in out:
            if type(msg) is ch.Event and msg.seq == fresh:
                if not fresh_sent:
                    fresh_sent = True
                    # One broadcast for every clone: what channel_command makes of the event,
                    # built here (the bulk of all traffic; its call would cost ~5%).
                    self._out.append((topic, InternalCommand(fresh, me, NIL, msg.content)))
                continue
            if isinstance(msg, ch.Heartbeat):
                if msg.seq in beat_sent:
                    continue
                beat_sent.add(msg.seq)
            self._out.append((topic, channel_command(msg, me, handle, to_master=False)))

    def _pump(self) -> None:
        """Apply what writers delivered and translate channel output into commands."""
        self._drain_producer()
        lost = []
        for writer, consumer in self._inputs.items():
            for item in consumer.deliverable():
                if isinstance(item, ch.Delivered):
                    try:
                        self._apply(item.content)
                    except StoreError as exc:
                        self._errors.append((writer, exc))
            for msg in consumer.outgoing():
                cmd = channel_command(msg, self.entity, writer, to_master=False)
                self._out.append((self.clones_topic, cmd))
            if any(isinstance(e, ch.ProducerLost) for e in consumer.events()):
                lost.append(writer)
        for writer in lost:
            del self._inputs[writer]
        self._drain_producer()
