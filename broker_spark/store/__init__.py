"""Broker's replicated data stores: commands, backends, value operations, master and clone.

Everything here is free of I/O except the SQLite backend's file: the endpoint
feeds commands in, ticks the state machines, and sends what they return.
"""

from broker_spark.store.backends import (
    Backend,
    MemoryBackend,
    SQLiteBackend,
    StoreBackend,
    open_backend,
)
from broker_spark.store.clone import CloneState
from broker_spark.store.commands import (
    NIL,
    EntityId,
    InternalCommand,
    clone_topic,
    decode_command,
    encode_command,
    master_topic,
    unicast_target,
)
from broker_spark.store.events import STORE_EVENTS_TOPIC, StoreEvent, store_events_topic
from broker_spark.store.master import MasterState

__all__ = [
    "NIL",
    "STORE_EVENTS_TOPIC",
    "Backend",
    "CloneState",
    "EntityId",
    "InternalCommand",
    "MasterState",
    "MemoryBackend",
    "SQLiteBackend",
    "StoreBackend",
    "StoreEvent",
    "clone_topic",
    "decode_command",
    "encode_command",
    "master_topic",
    "open_backend",
    "store_events_topic",
    "unicast_target",
]
