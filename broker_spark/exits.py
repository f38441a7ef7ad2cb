"""Exit codes and the two exceptions a run raises to end with an error.

A subcommand, or a node started from settings (:mod:`broker_spark.node`), never
prints a traceback at the user: it raises :class:`CliError` (or lets a
:class:`~broker_spark.errors.BrokerError`, ``OSError`` or ``ValueError`` through)
and :func:`broker_spark.cli.main` prints one line, ``broker-spark: error: ...``,
and returns the code below. They live on the ground floor, not in ``cli/``, because
the node raises them too and the node does not import the command.
"""

from __future__ import annotations

__all__ = ["EXIT_FAILURE", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "CliError", "UsageError"]

#: Success.
EXIT_OK = 0
#: Something failed at run time (a peer unreachable, a store without master, bad input data).
EXIT_FAILURE = 1
#: The command line or a configuration file is wrong (nothing was attempted).
EXIT_USAGE = 2
#: Interrupted by Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A failure to report in one line; ``code`` is the exit status."""

    code = EXIT_FAILURE

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class UsageError(CliError):
    """A wrong flag, argument or configuration file: exit status 2."""

    code = EXIT_USAGE
