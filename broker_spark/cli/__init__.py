"""The ``broker-spark`` command (also ``python -m broker_spark``).

Subcommands live one module each (``node``, ``publish``, ``subscribe``,
``logs``, ``store``, ``network`` for status and topology, ``spool_status``
for spools and their receivers, ``certs``, ``demo``, ``bench``), and their
flags in :mod:`broker_spark.cli.parsers`, so that building the parser loads
none of what the commands run. This module builds the parser, imports the
chosen command's module, sets up logging and turns every failure into one line on stderr
and an exit status:

- 0: success (also ``node`` and ``subscribe`` stopped by SIGINT or SIGTERM,
  their normal end);
- 1: a failure at run time (unreachable peer, no store master, bad input data);
- 2: a usage error: a wrong flag or argument, a bad configuration file;
- 130: interrupted by Ctrl-C.

No traceback reaches the user unless ``--log-level debug`` asks for one.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from broker_spark.cli.errors import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
)
from broker_spark.cli.parsers import register_all
from broker_spark.errors import BrokerError
from broker_spark.version import __version__

__all__ = ["build_parser", "main"]

PROG = "broker-spark"
LOG_LEVELS = ("debug", "info", "warning", "error")

log = logging.getLogger("broker_spark.cli")


class _Formatter(argparse.HelpFormatter):
    """Wraps descriptions; keeps text with line breaks (the examples) as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (usage is one ``--help`` away)."""

    def __init__(self, *args: Any, top: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)
        self._intermixing = False
        # --log-level is accepted before the command and after it (where users put it).
        self.add_argument(
            "--log-level",
            choices=LOG_LEVELS,
            type=str.lower,
            default=None if top else argparse.SUPPRESS,
            help="what to log on stderr (default info; node configs may set it)",
        )

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        """Positionals may come after options (``publish /t --peer X 1 2``), as users expect.

        argparse stops filling ``nargs='*'`` positionals at the first option;
        its intermixed mode does not have that limit but refuses subparsers,
        so it is used by the parsers without any (the subcommands themselves).
        """
        if self._subparsers is not None or self._intermixing:
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{PROG}: error: {message} (see '{self.prog} --help')\n")
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    """The complete parser, every subcommand registered (no side effects, cheap)."""
    parser = _Parser(
        top=True,
        prog=PROG,
        description="Zeek's Broker in pure Python, with a Spark data source: run nodes, "
        "publish and subscribe, follow Zeek's logs, use data stores, inspect a network, "
        "run the demo.",
        epilog=f"Run '{PROG} COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    register_all(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    return parser


def command_function(name: str) -> Callable[[argparse.Namespace], int | None]:
    """The function a subcommand's ``run`` names, ``"MODULE:FUNCTION"`` of this package.

    Only the chosen command's module is imported, and only now: the modules of all the
    commands together (the endpoint, the spool, TLS, ZeroMQ, the demo) would take every
    start, ``--help`` included, from 0.08 s of CPU and 23 MiB to 0.45 s and 91 MiB
    (measured, issue 52).
    """
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), function)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (tests swap it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


_handler: logging.Handler | None = None


def _setup_logging(level: str | None) -> None:
    global _handler
    root = logging.getLogger("broker_spark")
    if _handler is None:
        _handler = _StderrHandler()
        _handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)-7s %(message)s", "%H:%M:%S")
        )
        root.addHandler(_handler)
        root.propagate = False
    root.setLevel((level or "info").upper())


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); the exit status."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    _setup_logging(args.log_level)
    try:
        return int(command_function(args.run)(args) or EXIT_OK)
    except KeyboardInterrupt:
        _fail("interrupted")
        return EXIT_INTERRUPTED
    except CliError as exc:
        _fail(str(exc))
        return exc.code
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_OK
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        _fail(f"{where}{exc.strerror or exc}")
        return EXIT_FAILURE
    except Exception as exc:  # BrokerError, ValueError, and anything unexpected: one line
        log.debug("traceback", exc_info=True)
        text = str(exc) or type(exc).__name__
        if not isinstance(exc, (BrokerError, ValueError)):
            text = f"{type(exc).__name__}: {text} (run with --log-level debug for details)"
        _fail(text)
        return EXIT_FAILURE


def _fail(message: str) -> None:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    sys.stderr.flush()


def _silence_stdout() -> None:
    """The reader of stdout went away (``| head``): stop writing there, quietly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
