"""``Store``: Broker's data store handle, and the ``attach_master``/``attach_clone`` calls.

A :class:`Store` is a thin, thread-safe facade over a store actor
(:mod:`broker_spark.core.store_actor`) on the endpoint's loop, with the
methods and return values of Broker's Python bindings:

- reads (``get``, ``exists``, ``keys``, ``get_index_from_value``) wait for the
  loop and return copies, never the stored objects; a clone answers from its
  local replica (before its first snapshot it waits up to ``max_get_delay``);
- ``put``, ``erase`` and ``clear`` cannot fail on valid input, so they return
  at once: the write is queued (in order) and applied in a batch;
- the modifiers (``increment``, ``decrement``, ``append``, ``insert_into``,
  ``remove_from``, ``push``, ``pop``) wait for the loop, because a type clash
  must reach the caller: they raise :class:`~broker_spark.errors.StoreError`
  (``EC.TypeClash``, ``EC.InvalidData``, ``EC.NoSuchKey``) and change
  nothing. On a clone the check runs against the replica; the master drops
  what still fails there, as Broker does;
- ``put_unique`` returns True only for the first writer of a key, also from
  clones (which ask the master and wait for its answer);
- ``await_idle(timeout)`` has the developer guide's meaning for masters and
  clones and returns False on timeout.

Every blocking call wakes with :class:`~broker_spark.errors.ShutdownError`
when the endpoint shuts down. Expiries are seconds (a float) or a timedelta.

The arrow runs one way: :mod:`broker_spark.endpoint` imports this module
(``Endpoint.attach_master``/``attach_clone``) and this module does not import
the endpoint; it needs of one only what :class:`StoreOwner` describes.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Coroutine, Mapping
from time import time_ns
from typing import TYPE_CHECKING, Any, Protocol

from broker_spark.core.node_message import thaw_copy
from broker_spark.core.store_actor import CloneActor, MasterActor, StoreActor
from broker_spark.core.store_host import StoreHost, host_for
from broker_spark.data.types import timespan_ns
from broker_spark.data.value import freeze, from_py
from broker_spark.errors import EC, StoreError
from broker_spark.protocol import channel as ch
from broker_spark.store import ops
from broker_spark.store.backends import Backend, StoreBackend, open_backend
from broker_spark.store.clone import CloneState
from broker_spark.store.commands import (
    ClearCommand,
    EntityId,
    EraseCommand,
    PutCommand,
)
from broker_spark.store.master import MasterState

if TYPE_CHECKING:
    from broker_spark.core.actor import Core

__all__ = [
    "DEFAULT_AWAIT_IDLE_TIMEOUT",
    "DEFAULT_MAX_GET_DELAY",
    "DEFAULT_STALE_INTERVAL",
    "Store",
    "StoreOwner",
    "attach_clone",
    "attach_master",
]

#: What ``await_idle()`` waits without a timeout.
DEFAULT_AWAIT_IDLE_TIMEOUT = 10.0
#: How long a clone's read waits for the first snapshot before failing with StaleData.
DEFAULT_MAX_GET_DELAY = 5.0
#: Silence from the master after which a clone reports ``EC.StaleData``.
DEFAULT_STALE_INTERVAL = 10.0
#: How long ``put_unique`` on a clone waits for the master's answer.
DEFAULT_PUT_UNIQUE_TIMEOUT = 10.0


_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def _value(x: Any) -> Any:
    """``from_py`` with a shortcut for the common keys and values (str, float, int64)."""
    t = type(x)
    if t is str or t is float or (t is int and _I64_MIN <= x <= _I64_MAX):
        return x
    return from_py(x)


def _expiry(expiry: Any) -> int | None:
    """Seconds (int or float) or a timedelta as nanoseconds; None stays None."""
    if expiry is None:
        return None
    if isinstance(expiry, _dt.timedelta):
        return timespan_ns(expiry)
    if isinstance(expiry, (int, float)) and not isinstance(expiry, bool):
        return round(expiry * 1_000_000_000)
    raise TypeError(f"expiry must be seconds or a timedelta, got {expiry!r}")


def _seconds(timeout: Any, default: float | None) -> float | None:
    if timeout is None:
        return default
    if isinstance(timeout, _dt.timedelta):
        return timeout.total_seconds()
    return float(timeout)


class StoreOwner(Protocol):
    """What stores need of an endpoint: its core (whose loop thread runs the actors).

    An :class:`~broker_spark.endpoint.Endpoint` is one. A :class:`Store` also
    keeps its owner alive, as Broker's handle keeps its ``_parent``.
    """

    _core: Core


class Store:
    """A master or clone of a data store (``broker.Store``); thread-safe."""

    def __init__(self, endpoint: StoreOwner, actor: StoreActor) -> None:
        self._endpoint: StoreOwner | None = endpoint  # keeps the endpoint alive (Broker's _parent)
        self._actor: StoreActor | None = actor
        self._name = actor.name
        self._loop = endpoint._core.loop_thread  # the loop of the actor's host

    # -- plumbing -------------------------------------------------------------------

    def _get_actor(self) -> StoreActor:
        actor = self._actor
        if actor is None:
            raise StoreError(f"the handle of store {self._name!r} was reset", EC.Unspecified)
        return actor

    def _run(self, make: Callable[[StoreActor], Coroutine[Any, Any, Any]]) -> Any:
        return self._loop.run_coro(make(self._get_actor()))

    def _call(self, fn: Callable[[Any, int], Any]) -> Any:
        return self._run(lambda a: a.call(fn))

    def _read(self, fn: Callable[[Any], Any]) -> Any:
        return self._run(lambda a: a.read(fn))

    def _write(self, cmd: Any) -> None:
        """Queue a write that cannot fail; blocks only while the inbox is full."""
        self._get_actor().inbox.put(cmd)

    @property
    def _entity(self) -> EntityId:
        return self._get_actor().entity

    # -- inspectors ------------------------------------------------------------------

    def name(self) -> str:
        return self._name

    def is_master(self) -> bool:
        """True for a master's handle, False for a clone's (an extension)."""
        return self._get_actor().role == "master"

    def exists(self, key: Any) -> bool:
        key = from_py(key)
        return bool(self._read(lambda st: st.exists(key)))

    def get(self, key: Any) -> Any:
        """The value of ``key`` (a copy), or None if absent."""
        key = from_py(key)
        try:
            return thaw_copy(self._read(lambda st: st.get(key)))
        except StoreError as exc:
            if exc.code == EC.NoSuchKey:
                return None
            raise

    def get_index_from_value(self, key: Any, index: Any) -> Any:
        """Set membership, table lookup or vector index; None if key or index is absent."""
        key, index = from_py(key), from_py(index)
        try:
            return thaw_copy(self._read(lambda st: st.get_index_from_value(key, index)))
        except StoreError as exc:
            if exc.code == EC.NoSuchKey:
                return None
            raise

    def keys(self) -> set[Any]:
        """The keys, as a set (container keys frozen so they are hashable)."""
        return {freeze(k) for k in self._read(lambda st: st.keys())}

    # -- modifiers ---------------------------------------------------------------------

    def put(self, key: Any, value: Any, expiry: Any = None) -> None:
        self._write(PutCommand(_value(key), _value(value), _expiry(expiry), self._entity))

    def put_unique(self, key: Any, value: Any, expiry: Any = None) -> bool:
        """Insert only if ``key`` is absent; True only for the write that inserted it."""
        key, value, span = from_py(key), from_py(value), _expiry(expiry)
        actor = self._get_actor()
        if isinstance(actor, CloneActor):
            return bool(self._loop.run_coro(actor.put_unique(key, value, span)))
        return bool(self._call(lambda st, now: st.put_unique(key, value, span, now)))

    def erase(self, key: Any) -> None:
        self._write(EraseCommand(from_py(key), self._entity))

    def clear(self) -> None:
        self._write(ClearCommand(self._entity))

    def _modify(self, cmd: Any) -> None:
        self._call(lambda st, now: st.local(cmd, now))

    def increment(self, key: Any, amount: Any, expiry: Any = None) -> None:
        self._modify(ops.increment(from_py(key), from_py(amount), _expiry(expiry), self._entity))

    def decrement(self, key: Any, amount: Any, expiry: Any = None) -> None:
        self._modify(ops.decrement(from_py(key), from_py(amount), _expiry(expiry), self._entity))

    def append(self, key: Any, s: Any, expiry: Any = None) -> None:
        self._modify(ops.append(from_py(key), from_py(s), _expiry(expiry), self._entity))

    def insert_into(self, key: Any, index: Any, value: Any = None, expiry: Any = None) -> None:
        """Add ``index`` to a set, or (with ``value``) set ``index -> value`` in a table."""
        v = ops.MISSING if value is None else from_py(value)
        self._modify(
            ops.insert_into(from_py(key), from_py(index), v, _expiry(expiry), self._entity)
        )

    def remove_from(self, key: Any, index: Any, expiry: Any = None) -> None:
        self._modify(ops.remove_from(from_py(key), from_py(index), _expiry(expiry), self._entity))

    def push(self, key: Any, value: Any, expiry: Any = None) -> None:
        self._modify(ops.push(from_py(key), from_py(value), _expiry(expiry), self._entity))

    def pop(self, key: Any, expiry: Any = None) -> None:
        self._modify(ops.pop(from_py(key), _expiry(expiry), self._entity))

    # -- synchronisation and lifetime ----------------------------------------------------

    def await_idle(self, timeout: Any = None) -> bool:
        """Block until idle (see the developer guide); False after ``timeout`` seconds."""
        secs = _seconds(timeout, DEFAULT_AWAIT_IDLE_TIMEOUT)
        return bool(self._run(lambda a: a.await_idle(secs)))

    def reset(self) -> None:
        """Release this handle (the store lives on with its endpoint); idempotent."""
        self._actor = None
        self._endpoint = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.reset()

    def __repr__(self) -> str:
        actor = self._actor
        role = actor.role if actor is not None else "reset"
        return f"Store({self._name!r}, {role})"


# -- attaching ---------------------------------------------------------------------------


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"a store name must be a non-empty string, got {name!r}")
    return name


def attach_master(
    endpoint: StoreOwner,
    name: str,
    backend: Any = Backend.Memory,
    opts: Mapping[str, Any] | None = None,
    *,
    heartbeat_interval: int = ch.DEFAULT_HEARTBEAT_INTERVAL,
    connection_timeout: int = ch.DEFAULT_CONNECTION_TIMEOUT,
) -> Store:
    """Make this endpoint the master of ``name``, or return its existing master.

    Raises StoreError: ``EC.MasterExists`` when a peer's filter shows a master
    for ``name`` already; ``EC.CannotOpenFile`` or ``EC.BackendFailure`` (with
    the path) when the backend cannot be opened. The channel settings are
    ticks of 100 ms.
    """
    name = _check_name(name)
    core = endpoint._core
    host = host_for(core)
    run = core.loop_thread.run_sync
    existing = run(host.masters.get, name)
    if existing is not None:
        return Store(endpoint, existing)
    _refuse_if_taken(host, name)
    kind = Backend.Memory if backend is None else backend
    store_backend = open_backend(kind, dict(opts or {}))
    try:
        actor = run(
            _start_master, host, name, store_backend, heartbeat_interval, connection_timeout
        )
    except BaseException:
        store_backend.close()
        raise
    return Store(endpoint, actor)


def _refuse_if_taken(host: StoreHost, name: str) -> None:
    peer = host.core.loop_thread.run_sync(host.master_taken, name)
    if peer is not None:
        raise StoreError(f"a master for store {name!r} exists already on {peer}", EC.MasterExists)


def _start_master(
    host: StoreHost, name: str, backend: StoreBackend, heartbeat: int, timeout: int
) -> StoreActor:
    """On the loop: check again (another thread may have won) and start the actor."""
    existing = host.masters.get(name)
    if existing is not None:
        backend.close()
        return existing
    peer = host.master_taken(name)
    if peer is not None:
        raise StoreError(f"a master for store {name!r} exists already on {peer}", EC.MasterExists)
    entity = EntityId(host.node_id, host.new_object_id())
    state = MasterState(
        name,
        backend,
        entity,
        time_ns(),
        heartbeat_interval=heartbeat,
        connection_timeout=timeout,
    )
    actor = MasterActor(host, state)
    host.add(actor)
    return actor


def attach_clone(
    endpoint: StoreOwner,
    name: str,
    *,
    stale_interval: float | None = DEFAULT_STALE_INTERVAL,
    max_get_delay: float = DEFAULT_MAX_GET_DELAY,
    put_unique_timeout: float = DEFAULT_PUT_UNIQUE_TIMEOUT,
    heartbeat_interval: int = ch.DEFAULT_HEARTBEAT_INTERVAL,
    connection_timeout: int = ch.DEFAULT_CONNECTION_TIMEOUT,
) -> Store:
    """Attach a clone of ``name`` (or return this endpoint's existing clone).

    The clone finds its master by itself (it asks on the master topic until
    one answers). ``stale_interval`` (seconds, None for never) is the silence
    after which it reports ``EC.StaleData`` to status subscribers; reads keep
    answering from the replica meanwhile.
    """
    name = _check_name(name)
    core = endpoint._core
    host = host_for(core)
    actor = core.loop_thread.run_sync(
        _start_clone,
        host,
        name,
        {
            "stale_interval": stale_interval,
            "max_get_delay": max_get_delay,
            "put_unique_timeout": put_unique_timeout,
        },
        heartbeat_interval,
        connection_timeout,
    )
    return Store(endpoint, actor)


def _start_clone(
    host: StoreHost, name: str, settings: dict[str, Any], heartbeat: int, timeout: int
) -> StoreActor:
    existing = host.clones.get(name)
    if existing is not None:
        return existing
    entity = EntityId(host.node_id, host.new_object_id())
    state = CloneState(
        name,
        entity,
        time_ns(),
        stale_interval=None,  # reads stay served; staleness is reported instead
        heartbeat_interval=heartbeat,
        connection_timeout=timeout,
    )
    actor = CloneActor(host, state, **settings)
    host.add(actor)
    actor.flush(time_ns())  # the first nack 0: "is there a master?"
    return actor
