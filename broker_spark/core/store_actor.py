"""Store actors: one master or clone state machine driven on the endpoint's loop.

A :class:`StoreActor` owns one sans-I/O :class:`~broker_spark.store.master.MasterState`
or :class:`~broker_spark.store.clone.CloneState` and is the only code that
touches it, always on the endpoint's loop, so neither needs a lock. Work comes
from three directions:

- **Writes from the API** (``put``, ``erase``, ``clear``) arrive through a
  bounded :class:`~broker_spark.core.queues.Source` (the *inbox*): the caller's
  thread appends and moves on, the actor takes them in batches of up to 1024,
  applies them one after the other and sends the resulting commands together.
  This is what makes a master take 100,000 puts a second: one loop wake-up,
  one routing pass and one flush per batch, not per put. A full inbox blocks
  the caller; the actor stops taking from it while the outgoing sources are
  backed up (slow peers, slow event subscribers), so memory stays bounded.
- **Requests** (reads, modifiers that can fail, ``put_unique``, ``await_idle``)
  run as coroutines on the loop (``LoopThread.run_coro``). Each first applies
  everything still in the inbox, so a caller always reads its own writes, and
  a shutdown cancels the coroutine, which wakes the caller with ShutdownError.
- **Commands from peers** (and from other actors of this endpoint) arrive as
  encoded payloads via :meth:`StoreActor.enqueue`; they are decoded in one
  batch per loop callback. Payloads addressed to another store object are
  skipped before decoding (an ``ack_clone`` with a large snapshot, say).

After each step the actor *flushes*: encodes the state's outgoing commands
into command messages for the host to send, publishes store events when a
local subscriber wants them, and completes waiting requests.

The host (:class:`~broker_spark.core.store_host.StoreHost`) owns the actors:
it routes to them, ticks them and closes them, so it imports this module and
this module does not import it back. What an actor needs from its host is
the :class:`ActorHost` protocol below; the real host is one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from time import time_ns
from typing import Any, Protocol

from broker_spark.core.node_message import COMMAND, DATA
from broker_spark.core.queues import Source
from broker_spark.data.binary import encode
from broker_spark.errors import EC, DecodeError, ShutdownError, StoreError
from broker_spark.status import EndpointInfo, Error
from broker_spark.store.clone import CloneState
from broker_spark.store.commands import (
    InternalCommand,
    decode_command,
    encode_command,
)
from broker_spark.store.events import store_events_topic
from broker_spark.store.master import MasterState

__all__ = ["ActorHost", "CloneActor", "MasterActor", "StoreActor"]

#: Writes an API caller may queue before ``put`` blocks.
INBOX_CAPACITY = 8192
#: Writes applied per loop callback before yielding to other work.
BATCH = 1024
#: The sender id of store events (not this endpoint's, which the core would drop).
EVENTS_SENDER = bytes(16)
_NIL_BYTES = bytes(24)


class ActorHost(Protocol):
    """What a store actor calls back on its host (all on the endpoint's loop)."""

    #: The endpoint's event loop, which runs the actor.
    loop: asyncio.AbstractEventLoop
    #: TTL and sender id of the command messages the actor produces.
    ttl: int
    node_id: bytes

    def send(self, msgs: list[tuple], sender: StoreActor) -> None:
        """Send command messages to peers and to the other local actors on their topics."""

    def publish_events(self, msgs: list[tuple]) -> None:
        """Publish store events to local subscribers."""

    def wants_events(self, topic: str) -> bool:
        """Whether any local subscriber would receive a store event on ``topic``."""

    def has_room(self) -> bool:
        """Whether the actor may take more writes (False: the host wakes it later)."""

    def emit(self, item: Error) -> None:
        """An error for the endpoint's status subscribers."""


class StoreActor:
    """What masters and clones share: inbox, incoming commands, flushing, waiters."""

    role = ""

    def __init__(self, host: ActorHost, state: MasterState | CloneState) -> None:
        self.host = host
        self.state = state
        self.name = state.name
        self.entity = state.entity
        self.listen_topic = state.topic
        self.events_topic = store_events_topic(state.name)
        self.loop = host.loop
        self.inbox = Source(self._schedule_threadsafe, INBOX_CAPACITY)
        self.closed = False
        self.decode_errors = 0
        self.write_errors = 0
        self._me = self.entity.packed  # the receiver bytes of commands meant for us
        self._incoming: list[bytes] = []
        self._scheduled = False
        self._idle_waiters: list[asyncio.Future[bool]] = []

    # -- scheduling ----------------------------------------------------------------

    def _schedule_threadsafe(self, src: Source) -> None:
        """Called by the inbox when a writer's append made it non-empty (any thread)."""
        with contextlib.suppress(RuntimeError):  # the loop is gone: shutting down
            self.loop.call_soon_threadsafe(self._run)

    def wake(self) -> None:
        """Run soon (on the loop)."""
        if not self._scheduled and not self.closed:
            self._scheduled = True
            self.loop.call_soon(self._run)

    def enqueue(self, payload: bytes) -> None:
        """An encoded command for this actor (on the loop); decoded in the next batch."""
        if self.closed:
            return
        self._incoming.append(payload)
        self.wake()

    def _run(self) -> None:
        self._scheduled = False
        if self.closed:
            return
        now = time_ns()
        self.state.emit_events = self.host.wants_events(self.events_topic)
        if self._incoming:
            self._receive(now)
        self._take_inbox(now)
        self.flush(now)

    # -- input ------------------------------------------------------------------------

    def _receive(self, now: int) -> None:
        payloads, self._incoming = self._incoming, []
        me = self._me
        cmds: list[InternalCommand] = []
        for payload in payloads:
            receiver = payload[32:56]
            if receiver != _NIL_BYTES and receiver != me:
                continue  # for another store object: not worth decoding
            try:
                cmds.append(decode_command(payload))
            except DecodeError:
                self.decode_errors += 1
        if cmds:
            self.state.receive_batch(cmds, now)

    def _take_inbox(self, now: int) -> None:
        src = self.inbox
        if not src.items or not self.host.has_room():
            return  # the host wakes us when the outgoing sources drained
        src.flagged = False
        self._apply_writes(src.take(BATCH), now)
        if src.items:
            src.flagged = True
            self.wake()

    def _drain_inbox(self, now: int) -> None:
        """Apply every queued write now (before a request, for read-your-writes)."""
        src = self.inbox
        while src.items:
            src.flagged = False
            self._apply_writes(src.take(len(src.items)), now)

    def _apply_writes(self, writes: list, now: int) -> None:
        if isinstance(self.state, CloneState):
            # Queued writes are put, erase and clear: they cannot fail on a clone.
            self.state.local_many(writes, now)
            return
        local = self.state.local
        for cmd in writes:
            try:
                local(cmd, now)
            except StoreError as exc:
                self.write_errors += 1
                self.report(exc.code, f"store {self.name!r}: {exc}")

    # -- output ------------------------------------------------------------------------

    def flush(self, now: int) -> None:
        """Send the state's commands, publish its events, complete waiting requests."""
        state = self.state
        host = self.host
        out = state.outgoing()
        if out:
            ttl, node = host.ttl, host.node_id
            host.send([(t, encode_command(c), COMMAND, ttl, node) for t, c in out], self)
        events = state.events()
        if events and host.wants_events(self.events_topic):
            host.publish_events(
                [(e.topic, encode(e.to_data()), DATA, 1, EVENTS_SENDER) for e in events]
            )
        self._after_flush()
        if self._idle_waiters and state.idle():
            waiters, self._idle_waiters = self._idle_waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(True)

    def _after_flush(self) -> None:
        """Role-specific completions (clone: put_unique answers, reads waiting for data)."""

    def report(self, code: EC, message: str, node: str = "") -> None:
        """An error for the endpoint's status subscribers."""
        self.host.emit(Error(code, message, EndpointInfo(node) if node else None))

    # -- time and peers --------------------------------------------------------------------

    def tick(self) -> None:
        if self.closed:
            return
        now = time_ns()
        self.state.emit_events = self.host.wants_events(self.events_topic)
        if self._incoming:
            self._receive(now)
        self.state.tick(now)
        self._on_tick(now)
        self._take_inbox(now)
        self.flush(now)

    def _on_tick(self, now: int) -> None:
        """Role-specific timers."""

    def peers_lost(self, endpoints: set[bytes]) -> None:
        """Endpoints became unreachable (status ``EndpointUnreachable``)."""

    # -- requests (coroutines on the loop) ----------------------------------------------------

    async def call(self, fn: Callable[[Any, int], Any]) -> Any:
        """Run ``fn(state, now)`` after every queued write; flush; return its result."""
        self._check_open()
        now = time_ns()
        self.state.emit_events = self.host.wants_events(self.events_topic)
        self._drain_inbox(now)
        try:
            return fn(self.state, now)
        finally:
            self.flush(now)

    async def read(self, fn: Callable[[Any], Any]) -> Any:
        """Run the read ``fn(state)`` after every queued write."""
        return await self.call(lambda state, now: fn(state))

    async def await_idle(self, timeout: float | None) -> bool:
        """Broker's ``await_idle``: True once idle, False after ``timeout`` seconds."""
        await self.call(lambda state, now: None)
        if self.state.idle():
            return True
        fut: asyncio.Future[bool] = self.loop.create_future()
        self._idle_waiters.append(fut)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            with contextlib.suppress(ValueError):
                self._idle_waiters.remove(fut)

    def _check_open(self) -> None:
        if self.closed:
            raise ShutdownError(f"store {self.name!r} is closed: its endpoint shut down")

    # -- shutdown ------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop; writers blocked on the inbox and waiting requests wake with ShutdownError."""
        if self.closed:
            return
        self.closed = True
        self.inbox.close()
        for fut in self._idle_waiters:
            fut.cancel()
        self._idle_waiters = []
        self._close_state()

    def _close_state(self) -> None:
        """Role-specific cleanup."""


class MasterActor(StoreActor):
    """Drives a :class:`MasterState` (its backend belongs to the loop thread)."""

    role = "master"
    state: MasterState

    def peers_lost(self, endpoints: set[bytes]) -> None:
        self.state.drop_endpoints(endpoints)

    def _after_flush(self) -> None:
        for writer, exc in self.state.errors():
            self.write_errors += 1
            self.report(
                exc.code,
                f"store {self.name!r}: a write from {writer.endpoint_string()} failed: {exc}",
                writer.endpoint_string(),
            )

    def _close_state(self) -> None:
        with contextlib.suppress(StoreError):
            self.state.close()


class CloneActor(StoreActor):
    """Drives a :class:`CloneState`: waits for data before reads, reports stale data."""

    role = "clone"
    state: CloneState

    def __init__(
        self,
        host: ActorHost,
        state: CloneState,
        *,
        stale_interval: float | None,
        max_get_delay: float,
        put_unique_timeout: float,
    ) -> None:
        super().__init__(host, state)
        self.stale_interval = None if stale_interval is None else int(stale_interval * 1e9)
        self.max_get_delay = max_get_delay
        self.put_unique_timeout = put_unique_timeout
        self.stale_reported = False
        self._unique: dict[int, asyncio.Future[bool]] = {}
        self._sync_waiters: list[asyncio.Future[None]] = []

    async def read(self, fn: Callable[[Any], Any]) -> Any:
        """A local read; before the first snapshot it waits up to ``max_get_delay`` for one."""
        self._check_open()
        if not self.state.has_data:
            fut: asyncio.Future[None] = self.loop.create_future()
            self._sync_waiters.append(fut)
            try:
                await asyncio.wait_for(asyncio.shield(fut), self.max_get_delay)
            except TimeoutError:
                raise StoreError(
                    f"clone of {self.name!r} found no master within {self.max_get_delay} s",
                    EC.StaleData,
                ) from None
            finally:
                with contextlib.suppress(ValueError):
                    self._sync_waiters.remove(fut)
        return await super().read(fn)

    async def put_unique(self, key: Any, value: Any, expiry: int | None) -> bool:
        """Ask the master; True only if it inserted (RequestTimeout if it never answers)."""
        fut: asyncio.Future[bool] = self.loop.create_future()

        def ask(state: CloneState, now: int) -> int:
            req = state.put_unique(key, value, expiry, now)
            self._unique[req] = fut
            return req

        req = await self.call(ask)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), self.put_unique_timeout)
        except TimeoutError:
            raise StoreError(
                f"put_unique on clone of {self.name!r}: no answer from a master "
                f"within {self.put_unique_timeout} s",
                EC.RequestTimeout,
            ) from None
        finally:
            self._unique.pop(req, None)

    def _after_flush(self) -> None:
        for req, inserted in self.state.put_unique_results():
            fut = self._unique.get(req)
            if fut is not None and not fut.done():
                fut.set_result(inserted)
        if self._sync_waiters and self.state.has_data:
            waiters, self._sync_waiters = self._sync_waiters, []
            for w in waiters:
                if not w.done():
                    w.set_result(None)

    def _on_tick(self, now: int) -> None:
        if self.stale_interval is None or not self.state.has_data:
            return
        silent = self.state.silent_for(now)
        if silent is None or silent <= self.stale_interval:
            self.stale_reported = False
        elif not self.stale_reported:
            self.stale_reported = True
            master = self.state.master
            self.report(
                EC.StaleData,
                f"clone of {self.name!r}: no word from its master for {silent / 1e9:.1f} s",
                master.endpoint_string() if master else "",
            )

    def peers_lost(self, endpoints: set[bytes]) -> None:
        master = self.state.master
        if master and master.endpoint in endpoints:
            self.state.master_lost(time_ns())

    def _close_state(self) -> None:
        for fut in [*self._unique.values(), *self._sync_waiters]:
            fut.cancel()
        self._unique.clear()
        self._sync_waiters = []
