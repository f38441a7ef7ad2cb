"""Store events: what changed in a master or clone, for local subscribers.

Broker publishes every insert, update, erase and expiry of a store as a data
message on ``<$>/local/data/store-events/<store name>``, so subscribing to
``<$>/local/data/store-events`` follows all stores and adding the name follows
one. The message is a vector, in Broker's layout:

- ``("insert", store, key, value, expiry, publisher_endpoint, publisher_object)``
- ``("update", store, key, old_value, new_value, expiry, publisher_endpoint, publisher_object)``
- ``("erase", store, key, publisher_endpoint, publisher_object)``
- ``("expire", store, key, publisher_endpoint, publisher_object)``

``expiry`` is a timespan or none; the publisher is the endpoint id as a dashed
UUID string and the object id as a count, both none for the nil entity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker_spark.data.types import Count, Timespan
from broker_spark.store.commands import NIL, EntityId

__all__ = ["STORE_EVENTS_TOPIC", "StoreEvent", "store_events_topic"]

STORE_EVENTS_TOPIC = "<$>/local/data/store-events"


def store_events_topic(store: str) -> str:
    """The topic a store's events are published on."""
    return f"{STORE_EVENTS_TOPIC}/{store}"


@dataclass(frozen=True, slots=True)
class StoreEvent:
    """One change. ``kind`` is insert, update, erase or expire; ``expiry`` is nanoseconds."""

    kind: str
    store: str
    key: Any
    value: Any = None
    old_value: Any = None
    expiry: int | None = None
    publisher: EntityId = NIL

    @property
    def topic(self) -> str:
        return store_events_topic(self.store)

    def to_data(self) -> tuple:
        """The Broker value published for this event."""
        pub = (
            (self.publisher.endpoint_string(), Count(self.publisher.object))
            if self.publisher
            else (None, None)
        )
        span = None if self.expiry is None else Timespan.from_ns(self.expiry)
        if self.kind == "insert":
            return ("insert", self.store, self.key, self.value, span, *pub)
        if self.kind == "update":
            return ("update", self.store, self.key, self.old_value, self.value, span, *pub)
        return (self.kind, self.store, self.key, *pub)
