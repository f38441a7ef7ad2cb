"""How a reader finds the receiver of its ``spoolPath``, or starts one.

Under an exclusive lock on ``receiver.start.lock`` in the spool folder (so two
readers starting at once start one receiver), a reader connects to the
socket ``receiver.json`` names; if nobody answers there, it starts a receiver
(:mod:`.receiver`) in a session of its own, waits for its one-line answer and
connects. It then attaches: its HELLO carries the options the receiver must
share (:func:`~.receiver.identity_of`), and a receiver started with other
ones refuses, naming them. The connection stays open while the reader lives;
the receiver counts it as a reader (its idle timer) and learns the reader's
committed offsets over it.

Afterwards :meth:`ReceiverLink.state` asks the receiver for the spool's
bounds and a failure, once per Spark call. A receiver that is gone (killed,
stopped by hand, out of memory) is started again there, from the same
spool: what it had appended stays; what arrived while none ran is lost, as
it would be for any Broker peer that is down.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any

from broker_spark.errors import BrokerError
from broker_spark.reader.options import ReaderOptions
from broker_spark.reader.receiver_files import INFO_FILE, LOG_FILE, identity_of, socket_path
from broker_spark.spool.relay_client import RelayError, SpoolClient, SpoolClientError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "START_LOCK",
    "ReceiverError",
    "ReceiverLink",
    "read_info",
    "receiver_status",
    "stop_receiver",
]

log = logging.getLogger(__name__)

START_LOCK = "receiver.start.lock"

#: Seconds a new receiver may take to open its spool and endpoint and answer.
START_TIMEOUT = 60.0

#: How the receiver's process is started (``python -m``), then how earlier releases started
#: it: a receiver an older broker-spark started may still run after an upgrade (and is
#: found, stopped and attached to all the same).
RECEIVER_MODULES = (
    "broker_spark.reader.receiver",
    "broker_spark.spark.runtime.receiver",
    "broker_spark.spark.receiver",
    "broker_spark.spark.relay.receiver",
)


class ReceiverError(BrokerError):
    """The receiver of a spool cannot be started, reached, or refused this reader."""


def read_info(spool_path: str) -> dict[str, Any] | None:
    """What ``receiver.json`` says of the running receiver (None: none is known)."""
    try:
        with open(os.path.join(spool_path, INFO_FILE), encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


class ReceiverLink:
    """A reader's attachment to the receiver of ``options.spool.path``."""

    def __init__(
        self,
        options: ReaderOptions,
        *,
        logs: bool,
        index_interval: int,
        retry: float,
        name: str = "",
    ) -> None:
        assert options.spool.path, "a receiver needs a spoolPath"
        self.options = options
        self.path = os.path.abspath(options.spool.path)
        self.logs = logs
        self.index_interval = index_interval
        self.retry = retry
        self.name = name or f"{os.uname().nodename}:{os.getpid()}"
        self.identity = identity_of(options, logs=logs)
        self.client: SpoolClient | None = None
        self.pid: int | None = None
        #: the spool's end before the receiver this reader started subscribed (None: found one)
        self.end_at_start: int | None = None

    # --- attaching ------------------------------------------------------------------------

    def open(self) -> None:
        """Attach to the running receiver, or start one and attach (idempotent)."""
        if self.client is not None:
            return
        os.makedirs(self.path, exist_ok=True)
        deadline = time.monotonic() + START_TIMEOUT
        with self._start_lock():
            while True:
                client = self._connect_existing()
                if client is not None:
                    break
                if self._start():  # ours: it answered ready
                    client = self._connect_existing()
                    if client is not None:
                        break
                    raise ReceiverError(
                        f"the receiver of spool {self.path} started but cannot be reached; "
                        f"see {os.path.join(self.path, LOG_FILE)}"
                    )
                # another process owns the spool (a receiver starting or stopping): look again
                if time.monotonic() > deadline:
                    raise ReceiverError(
                        f"spool {self.path} is owned by a process that does not answer on "
                        f"{socket_path(self.path)}"
                    )
                time.sleep(0.2)
        self.client = client

    def _connect_existing(self) -> SpoolClient | None:
        info = read_info(self.path)
        if info is None or not isinstance(info.get("socket"), str):
            return None
        where = f"the receiver of spool {self.path}"
        try:
            client = SpoolClient.unix(info["socket"], where)
        except SpoolClientError:
            return None  # left behind by a receiver that died
        try:
            client.hello("attach", self.name, identity=self.identity)
        except RelayError as exc:
            client.close()
            raise ReceiverError(
                f"spool {self.path}: {exc.fields.get('message', exc)}; stop it with "
                f"`broker-spark receiver stop {self.path}` or use another spoolPath"
            ) from None
        except SpoolClientError:
            client.close()
            return None
        self.pid = info.get("pid") if isinstance(info.get("pid"), int) else None
        return client

    def _start(self) -> bool:
        """Start a receiver; True once it answered ready, False when another owns the spool."""
        request = {
            "options": dict(self.options.given),
            "logs": self.logs,
            "index_interval": self.index_interval,
            "retry": self.retry,
        }
        command = [sys.executable, "-m", RECEIVER_MODULES[0], self.path, "--detach"]
        with open(os.path.join(self.path, LOG_FILE), "ab") as errors:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                start_new_session=True,
                cwd=self.path,
                close_fds=True,
            )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.close()
            answer = _read_line(proc.stdout, START_TIMEOUT)
        finally:
            proc.stdout.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)  # the first of the two: it forks the receiver and exits
        if answer is None:
            raise ReceiverError(
                f"the receiver of spool {self.path} did not answer within {START_TIMEOUT:g} s; "
                f"see {os.path.join(self.path, LOG_FILE)}"
            )
        if answer.get("busy"):
            return False
        if "error" in answer:
            raise ReceiverError(f"the receiver of spool {self.path} failed: {answer['error']}")
        self.end_at_start = int(answer["end_at_start"])
        log.info("started the receiver of spool %s (pid %s)", self.path, answer.get("pid"))
        return True

    def _start_lock(self) -> contextlib.AbstractContextManager[None]:
        return _flocked(os.path.join(self.path, START_LOCK), START_TIMEOUT + 10)

    # --- while reading --------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The spool's ``start``, ``end`` and ``error`` (None, or why appending failed), from
        the receiver; a receiver found gone is started again first."""
        for attempt in (1, 2):
            if self.client is None:
                self.open()
            assert self.client is not None
            try:
                return self.client.request("state")
            except SpoolClientError as exc:
                self._drop()
                if attempt == 2:
                    raise ReceiverError(str(exc)) from None
                log.warning("%s; starting it again", exc)
        raise AssertionError("unreachable")

    def commit(self, offset: int) -> None:
        """Tell the receiver what the query committed (shown as the reader's lag)."""
        if self.client is not None:
            try:
                self.client.send(self.client.session.request("commit", offset=offset))
            except SpoolClientError:
                self._drop()

    def restart_at(self, offset: int) -> None:
        if self.client is None:
            self.open()
        assert self.client is not None
        try:
            self.client.request("restart_at", offset=offset)
        except RelayError as exc:
            raise ReceiverError(str(exc)) from None

    def _drop(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            client.close()

    def close(self) -> None:
        """Detach (the receiver goes on until its idle timeout)."""
        self._drop()


def _read_line(stream: Any, timeout: float) -> dict[str, Any] | None:
    """One JSON line from a pipe within ``timeout`` (None: nothing, or not JSON)."""
    deadline = time.monotonic() + timeout
    fd = stream.fileno()
    data = b""
    while b"\n" not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    try:
        answer = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


@contextlib.contextmanager
def _flocked(path: str, timeout: float) -> Any:
    """An exclusive ``flock`` on ``path`` for the block, waited for up to ``timeout``."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise ReceiverError(f"{path} stayed locked for {timeout:g} s") from None
                    time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def receiver_status(spool_path: str, client: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """What ``receiver.json`` says of the receiver of ``spool_path`` and what the receiver
    says of itself (its ``status``), asking as ``client``; None when none answers (none ran,
    or ``receiver.json`` is left from one that died)."""
    path = os.path.abspath(spool_path)
    info = read_info(path)
    if info is None or not isinstance(info.get("socket"), str):
        return None
    try:
        with SpoolClient.unix(info["socket"], f"the receiver of {path}") as link:
            link.hello("status", client)
            return info, dict(link.request("status")["status"])
    except (SpoolClientError, RelayError):
        return None


def stop_receiver(spool_path: str, timeout: float = 10.0) -> int | None:
    """Stop the receiver of ``spool_path`` and wait until it is gone; its pid, or None when
    none was running."""
    path = os.path.abspath(spool_path)
    info = read_info(path)
    if info is None or not isinstance(info.get("socket"), str):
        return None
    pid = info.get("pid") if isinstance(info.get("pid"), int) else None
    try:
        with SpoolClient.unix(info["socket"], f"the receiver of spool {path}") as client:
            client.hello("status", "stop")
            client.request("stop")
    except (SpoolClientError, RelayError):
        if pid is None or not _is_receiver(pid, path):
            return None  # receiver.json left behind by one that died
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid is not None and _alive(pid):
        if time.monotonic() > deadline:
            raise ReceiverError(f"the receiver of spool {path} (pid {pid}) did not stop")
        time.sleep(0.05)
    return pid


def _is_receiver(pid: int, path: str) -> bool:
    """Whether process ``pid`` is the receiver of ``path`` (not a process that took the pid
    of one that died)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().split(b"\0")
    except OSError:
        return False
    return any(m.encode() in words for m in RECEIVER_MODULES) and os.fsencode(path) in words


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (a receiver started without --detach, not yet reaped) counts as gone
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
