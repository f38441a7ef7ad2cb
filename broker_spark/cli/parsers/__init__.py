"""The flags of every subcommand, apart from the modules that run them.

Building the parser (``--help``, a usage error, every start) loads only these
and what their flags need. A subcommand's ``run`` is named as
``"MODULE:FUNCTION"`` of ``broker_spark.cli``, and ``cli.main`` imports that
module once the subcommand is chosen, so the modules that run commands import
what they use at their top.
"""

from __future__ import annotations

from typing import Any

from broker_spark.cli.parsers import (
    bench,
    certs,
    demo,
    logs,
    network,
    node,
    publish,
    spool_status,
    store,
    subscribe,
)

__all__ = ["register_all"]

#: In the order ``--help`` lists them.
_COMMANDS = (node, publish, subscribe, logs, store, network, spool_status, certs, demo, bench)


def register_all(sub: Any) -> None:
    """Every subcommand's parser, on ``sub`` (the top parser's subparsers)."""
    for module in _COMMANDS:
        module.register(sub)
