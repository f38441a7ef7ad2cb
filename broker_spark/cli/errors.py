"""The command's exit codes and errors: :mod:`broker_spark.exits`, re-exported.

They are defined below the command because the node part raises them too
(``broker_spark.node`` never imports ``cli/``); the subcommands import them from here.
"""

from __future__ import annotations

from broker_spark.exits import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    UsageError,
)

__all__ = ["EXIT_FAILURE", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "CliError", "UsageError"]
