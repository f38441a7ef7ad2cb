"""broker-spark: Zeek's Broker in pure Python; ``import broker_spark as broker``.

The names Broker's Python bindings offer are all here. The light ones (data
model, topics, codes, configuration, statuses) are imported right away; the
endpoint and its threads, asyncio included, load on first use, so importing
the package stays cheap for processes (Spark workers, the CLI) that never
open an endpoint.

This module is the top of the package: it imports the defining modules, and
modules inside the package take names from those, never from here
(``Version`` and ``__version__`` live in :mod:`broker_spark.version`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from broker_spark.config import Backend, BrokerOptions, Configuration
from broker_spark.data import (
    Count,
    Data,
    DataType,
    Enum,
    FrozenTable,
    Port,
    Set,
    Table,
    Timespan,
    Timestamp,
    Vector,
)
from broker_spark.data.types import UTC as utc
from broker_spark.errors import EC, SC, BrokerError, ShutdownError
from broker_spark.status import (
    EndpointInfo,
    Error,
    NetworkInfo,
    PeerFlags,
    PeerInfo,
    PeerStatus,
    Status,
)
from broker_spark.topic import Topic
from broker_spark.version import Version, __version__

if TYPE_CHECKING:
    from broker_spark.endpoint import Endpoint
    from broker_spark.publisher import Publisher
    from broker_spark.store_api import Store
    from broker_spark.subscriber import StatusSubscriber, Subscriber

#: Names loaded on first access: attribute -> (module, attribute or None for the module).
_LAZY: dict[str, tuple[str, str | None]] = {
    "Endpoint": ("broker_spark.endpoint", "Endpoint"),
    "Publisher": ("broker_spark.publisher", "Publisher"),
    "Subscriber": ("broker_spark.subscriber", "Subscriber"),
    "SafeSubscriber": ("broker_spark.subscriber", "Subscriber"),
    "StatusSubscriber": ("broker_spark.subscriber", "StatusSubscriber"),
    "Store": ("broker_spark.store_api", "Store"),
    "zeek": ("broker_spark.zeek", None),
    "bro": ("broker_spark.zeek", None),
}


def now() -> Timestamp:
    """The current wall-clock time as a timestamp (``broker.now()``)."""
    import time

    return Timestamp.from_ns(time.time_ns())


def __getattr__(name: str) -> Any:
    spec = _LAZY.get(name)
    if spec is None:
        raise AttributeError(f"module 'broker_spark' has no attribute {name!r}")
    try:
        module = importlib.import_module(spec[0])
    except ModuleNotFoundError as exc:
        if exc.name != spec[0]:
            raise
        raise AttributeError(f"module 'broker_spark' has no attribute {name!r}") from exc
    value = module if spec[1] is None else getattr(module, spec[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "EC",
    "SC",
    "Backend",
    "BrokerError",
    "BrokerOptions",
    "Configuration",
    "Count",
    "Data",
    "DataType",
    "Endpoint",
    "EndpointInfo",
    "Enum",
    "Error",
    "FrozenTable",
    "NetworkInfo",
    "PeerFlags",
    "PeerInfo",
    "PeerStatus",
    "Port",
    "Publisher",
    "Set",
    "ShutdownError",
    "Status",
    "StatusSubscriber",
    "Store",
    "Subscriber",
    "Table",
    "Timespan",
    "Timestamp",
    "Topic",
    "Vector",
    "Version",
    "__version__",
    "now",
    "utc",
    "zeek",
]
