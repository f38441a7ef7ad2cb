"""The relay node: a durable point of its own, run by ``broker-spark node`` or from Python.

A node is an endpoint with what a site keeps beside it: a spool and its relay
(:mod:`.relay`), Zeek's ZeroMQ backend and WebSocket API as sources
(:mod:`.sources`), a log directory (:mod:`.log_dir`), stores, metrics. Its
settings come from TOML and flags as one :class:`~.settings.NodeSettings`
(:mod:`.settings`); :mod:`.check` reads them without starting, :mod:`.serve`
assembles and runs the node, :mod:`.reload` takes new certificates and tokens on
SIGHUP, :mod:`.exposure` refuses unauthenticated listeners off loopback, and
:class:`~.running.Node` starts and stops one from Python. The command (``cli/``)
only parses arguments and prints; nothing here imports it, nor pyspark.

The names below load on first use, so ``from broker_spark.node.settings import ...``
(what the command's ``--help`` needs) does not start the whole node's imports.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Node": "broker_spark.node.running",
    "NodeSettings": "broker_spark.node.settings",
    "StoreSpec": "broker_spark.node.settings",
    "load_node_config": "broker_spark.node.settings",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'broker_spark.node' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
