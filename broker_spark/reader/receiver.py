"""The receiver process of a ``spoolPath``: the endpoint and the spool, outliving the query.

Spark ends a query's driver-side reader process whenever the query stops,
restarts or fails, and a killed driver takes it along; Broker keeps nothing
for a peer that is gone. So with a ``spoolPath`` the endpoint that receives
and the spool it appends to live here, in a process of its own session,
started by the first reader that needs it (:mod:`.attach`) and found again
by the next one through files in the spool folder:

* the spool's ``.lock`` (held by the one owner: a second receiver on the same
  folder finds it taken and leaves);
* ``receiver.json`` (pid, socket, the options it was started with, written once
  it is ready, removed when it stops);
* the control socket (``receiver.sock`` in the folder, or in the temporary
  folder when the folder's path is too long for a Unix socket), speaking the
  spool protocol (:mod:`broker_spark.spool.relay_protocol`): readers attach there,
  ``broker-spark status --spool`` and ``broker-spark receiver stop`` talk there;
* ``receiver.log``, what it logs.

It keeps peering and appending while no query runs, within the spool's
retention, and stops after ``receiver.idleTimeout`` with no reader attached
(default an hour), on ``broker-spark receiver stop SPOOLPATH``, on SIGTERM or
SIGINT. A reader whose options differ from the receiver's is refused with
the options named.

Started as ``python -m broker_spark.reader.receiver SPOOLPATH --detach``:
the start request (the reader's options) comes on stdin, one JSON line; the
answer (``{"ready": ...}`` or ``{"error": ...}``) goes to stdout, one JSON
line, after which stdout is closed. ``--detach`` forks once more so the
process that started it never has to reap it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import logging.handlers
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from broker_spark.errors import BrokerError
from broker_spark.reader.connect import EndpointSettings
from broker_spark.reader.in_process import ReaderRuntime
from broker_spark.reader.options import parse_reader_options
from broker_spark.reader.receiver_files import (
    INFO_FILE,
    LOG_FILE,
    identity_of,
    identity_problem,
    socket_path,
)
from broker_spark.spool.relay_server import RelayServer
from broker_spark.spool.spool import SpoolLockedError

__all__ = [
    "INFO_FILE",
    "LOG_FILE",
    "IdleTimer",
    "identity_of",
    "identity_problem",
    "main",
    "socket_path",
]

log = logging.getLogger("broker_spark.receiver")


# --- when to stop -----------------------------------------------------------------------------


class IdleTimer:
    """When a receiver with no reader attached stops: ``timeout`` seconds after the last one
    left (or after it started, if none came)."""

    def __init__(self, timeout: float, now: float) -> None:
        self.timeout = timeout
        self.readers = 0
        self._idle_since: float | None = now

    def attached(self, readers: int, now: float) -> None:
        if readers and not self.readers:
            self._idle_since = None
        elif not readers and (self.readers or self._idle_since is None):
            self._idle_since = now
        self.readers = readers

    def expired(self, now: float) -> bool:
        return self._idle_since is not None and now - self._idle_since >= self.timeout


# --- the process ------------------------------------------------------------------------------


def _answer(line: dict[str, Any]) -> None:
    """The one line the starter reads, then stdout closed (nothing else ever goes there)."""
    with contextlib.suppress(OSError):
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)


def _log_to(path: str) -> None:
    handler = logging.handlers.RotatingFileHandler(
        os.path.join(path, LOG_FILE), maxBytes=4 << 20, backupCount=1
    )
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def run(spool_path: str, request: Mapping[str, Any]) -> int:
    """Own ``spool_path`` as ``request`` says, until idle, stopped or signalled."""

    options = parse_reader_options(dict(request["options"]))
    logs = bool(request.get("logs"))
    identity = identity_of(options, logs=logs)
    runtime = ReaderRuntime(
        options,
        options.topics,
        settings=EndpointSettings(),
        logs=logs,
        index_interval=int(request.get("index_interval", 128)),
        retry=float(request.get("retry", 5.0)),
        spool_path=spool_path,
    )
    try:
        spool = runtime.open_spool()
    except SpoolLockedError as exc:
        _answer({"error": str(exc), "busy": True})
        return 3
    except (OSError, BrokerError) as exc:
        _answer({"error": f"cannot open spool {spool_path}: {exc}"})
        return 2
    _log_to(spool_path)
    end_at_start = spool.end_offset()
    stop = threading.Event()
    idle = IdleTimer(options.receiver_idle_timeout, time.monotonic())
    server = None
    info = os.path.join(spool_path, INFO_FILE)
    sock = socket_path(spool_path)
    try:
        try:
            runtime.connect()
        except BrokerError as exc:
            _answer({"error": str(exc)})
            return 2
        service = runtime.service
        endpoint = runtime.endpoint
        assert service is not None

        def attach(fields: dict[str, Any]) -> str | None:
            theirs = fields.get("identity")
            if not isinstance(theirs, dict):
                return "the reader sent no options to compare"
            return identity_problem(identity, theirs)

        server = RelayServer(
            service,
            attach=attach,
            stop=stop.set,
            on_readers=lambda n: idle.attached(n, time.monotonic()),
            name="broker-spark-receiver",
        )
        server.serve_unix(sock)
        _write_info(
            info,
            {
                "pid": os.getpid(),
                "socket": sock,
                "started": time.time(),
                "node": endpoint.node_id() if endpoint is not None else None,
                "identity": identity,
                "idle_timeout": options.receiver_idle_timeout,
            },
        )
        log.info(
            "receiving %s into %s (offsets from %d on); stops %g s after its last reader",
            ", ".join(options.topics),
            spool_path,
            end_at_start,
            options.receiver_idle_timeout,
        )
        _answer({"ready": True, "end_at_start": end_at_start, "pid": os.getpid()})
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        with contextlib.suppress(AttributeError):
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        while not stop.wait(0.5):
            if idle.expired(time.monotonic()):
                log.info("no reader for %g s: stopping", idle.timeout)
                break
        log.info("stopping")
        return 0
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(info)
        if server is not None:
            server.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(sock)
        runtime.close()


def _write_info(path: str, info: dict[str, Any]) -> None:
    partial = f"{path}.{os.getpid()}"
    with open(partial, "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1)
    os.replace(partial, path)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    detach = "--detach" in args
    args = [a for a in args if a != "--detach"]
    if len(args) != 1:
        sys.stderr.write("usage: python -m broker_spark.reader.receiver SPOOLPATH [--detach]\n")
        return 2
    if detach and os.fork() > 0:
        os._exit(0)  # the starter reaps this one; the receiver goes on as an orphan
    try:
        request = json.loads(sys.stdin.readline())
    except ValueError as exc:
        _answer({"error": f"bad start request: {exc}"})
        return 2
    finally:
        with contextlib.suppress(OSError):
            sys.stdin.close()
    try:
        return run(os.path.abspath(args[0]), request)
    except Exception as exc:  # an answer rather than a silent death
        log.exception("the receiver failed")
        _answer({"error": f"{type(exc).__name__}: {exc}"})
        return 1


if __name__ == "__main__":
    sys.exit(main())
