"""The messages that flow through the core's central merge.

A message is serialized once, at publish, and from then on travels as a plain
tuple (cheap to build, cheap to hand between threads, never re-encoded)::

    (topic: str, payload: bytes, kind: int, ttl: int, sender: bytes)

``kind`` is the envelope type of WIRE.md (1 = data, 2 = command), ``ttl`` the
hops left and ``sender`` the 16-byte id of the endpoint that published it. This
is the *node message* of Broker's developer guide, minus the receiver (every
message here is a broadcast); links write it to the wire as an envelope.

Local subscribers decode lazily, in their own thread, inside ``get()``. When a
message goes to exactly one local subscriber it is queued as the tuple itself
and decoded there, once. When several local subscribers want it, the core wraps
it in one :class:`SharedMessage` that decodes on first use and caches the
value, so it is still decoded once; the cached value is never handed out
itself (subscribers may mutate what they get), each subscriber gets its own
copy of the mutable parts, or the frozen form for safe subscribers.
"""

from __future__ import annotations

from typing import Any

from broker_spark.data.binary import decode, encode
from broker_spark.data.value import freeze

__all__ = [
    "COMMAND",
    "DATA",
    "KIND",
    "PAYLOAD",
    "SENDER",
    "TOPIC",
    "TTL",
    "SharedMessage",
    "decoded",
    "decoded_all",
    "decoded_frozen",
    "node_message",
    "thaw_copy",
]

#: Envelope types (WIRE.md) carried in the ``kind`` field.
DATA = 1
COMMAND = 2

#: Field positions in a node message tuple.
TOPIC = 0
PAYLOAD = 1
KIND = 2
TTL = 3
SENDER = 4

#: TTL Broker puts on the messages it originates.
DEFAULT_TTL = 16

_NOTHING: Any = object()
_CONTAINERS = (set, dict, tuple, list)


def thaw_copy(value: Any) -> Any:
    """A copy of ``value`` sharing every immutable part and copying every mutable one.

    Set elements and table keys are hashable (decoded frozen), so sets copy
    shallowly; tuples are rebuilt only when something inside them is mutable.
    """
    t = type(value)
    if t is set:
        return set(value)
    if t is dict:
        return {k: thaw_copy(v) for k, v in value.items()}
    if t is tuple:
        for x in value:
            if type(x) in _CONTAINERS:
                return tuple(thaw_copy(x) for x in value)
        return value
    return value


class SharedMessage:
    """A message bound for several local subscribers: decoded at most once, lazily.

    Two consumer threads racing on the first decode may both decode; each
    gets a correct value and the cache keeps one of them, so the race costs
    time, never correctness.
    """

    __slots__ = ("topic", "payload", "_value", "_frozen")

    def __init__(self, topic: str, payload: bytes) -> None:
        self.topic = topic
        self.payload = payload
        self._value = _NOTHING
        self._frozen = _NOTHING

    def raw_value(self) -> Any:
        value = self._value
        if value is _NOTHING:
            value = self._value = decode(self.payload)
        return value

    def value(self) -> Any:
        """The decoded value, as a private copy of its mutable parts."""
        return thaw_copy(self.raw_value())

    def frozen_value(self) -> Any:
        """The decoded value, immutable and hashable (shared between safe subscribers)."""
        frozen = self._frozen
        if frozen is _NOTHING:
            frozen = self._frozen = freeze(self.raw_value())
        return frozen


def decoded(item: tuple | SharedMessage) -> tuple[str, Any]:
    """``(topic, value)`` for an item of a subscriber queue."""
    if type(item) is tuple:
        return item[0], decode(item[1])
    return item.topic, item.value()


def decoded_all(items: list) -> list[tuple[str, Any]]:
    """:func:`decoded` of every item: one comprehension, no Python call per item.

    A subscriber's ``get`` spends most of its time here, so the per-item
    function call of ``[decoded(m) for m in items]`` is worth saving.
    """
    return [(m[0], decode(m[1])) if type(m) is tuple else (m.topic, m.value()) for m in items]


def decoded_frozen(item: tuple | SharedMessage) -> tuple[str, Any]:
    """``(topic, frozen value)`` for an item of a safe subscriber's queue."""
    if type(item) is tuple:
        return item[0], freeze(decode(item[1]))
    return item.topic, item.frozen_value()


def node_message(
    topic: str, data: Any, sender: bytes, ttl: int = DEFAULT_TTL, kind: int = DATA
) -> tuple[str, bytes, int, int, bytes]:
    """Build a data node message (encoding ``data`` now), e.g. to inject as if from a peer."""
    return (topic, encode(data), kind, ttl, sender)
