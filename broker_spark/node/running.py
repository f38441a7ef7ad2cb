"""Start and stop a relay node from Python: what tests and embedders use instead of the command.

``broker-spark node`` parses flags and a TOML file into one
:class:`~broker_spark.node.settings.NodeSettings` and runs
:func:`~broker_spark.node.serve.serve` until a signal. A program that wants a
node of its own makes the same settings (or reads them with
:func:`~broker_spark.node.settings.load_node_config`) and hands them to
:class:`Node`, which runs the same :func:`serve` in a thread::

    from broker_spark.node import Node, NodeSettings

    settings = NodeSettings(listen=("127.0.0.1", 0), spool_dir="spool",
                            spool_topics=["zeek/logs/"], relay=("127.0.0.1", 0))
    with Node(settings) as node:   # returns once the node announced "ready"
        print(node.announcements)  # node <id>, listening on 127.0.0.1:PORT, ...

:meth:`Node.stop` is a planned stop, as SIGTERM is for the command: the node
takes nothing more, keeps what was read and gives readers their grace.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType

from broker_spark.addresses import HostPort, parse_host_port
from broker_spark.node.serve import STOP_BOUND, serve
from broker_spark.node.settings import NodeSettings

__all__ = ["Node"]


class Node:
    """One node run from ``settings`` in a thread of its own (see the module's docstring).

    ``load``, when given, reads the settings again for :meth:`reload` (what SIGHUP does
    for the command); ``announce`` also gets each announced line as it comes.
    """

    def __init__(
        self,
        settings: NodeSettings,
        *,
        load: Callable[[], NodeSettings] | None = None,
        announce: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        #: The lines the node announced, in order (``node <id>``, ..., ``ready``).
        self.announcements: list[str] = []
        self._load = load
        self._announce = announce
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    # -- running ------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> Node:
        """Start the node; return once it is ready, or raise what stopped it from starting."""
        if self._thread is not None:
            raise RuntimeError("this node was started already")
        self._thread = threading.Thread(target=self._run, name="broker-spark-node", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            self.stop()
            raise TimeoutError(f"the node was not ready within {timeout:g} s")
        if self._error is not None:
            self._thread.join()
            raise self._error
        return self

    def stop(self, timeout: float = STOP_BOUND) -> None:
        """A planned stop: take nothing more, keep what was read, close; waits for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def reload(self) -> None:
        """Read the settings again (with ``load``) and take what may change without a restart."""
        if self._load is None:
            raise RuntimeError("a node made without load= cannot reload its settings")
        self._reload.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        try:
            serve(self.settings, self._stop, self._reload, self._load, self._said)
        except BaseException as exc:  # handed to start() (or lost, when stopping anyway)
            self._error = exc
        finally:
            self._ready.set()

    def _said(self, line: str) -> None:
        self.announcements.append(line)
        if self._announce is not None:
            self._announce(line)
        if line == "ready":
            self._ready.set()

    # -- what it announced --------------------------------------------------------------

    def address(self, what: str = "listening") -> HostPort | None:
        """The bound address of ``what`` (``listening``, ``websocket listening``, ``relay
        listening``, ``metrics listening``) as announced; None when the node has none."""
        prefix = what + " on "
        for line in self.announcements:
            if line.startswith(prefix):
                return parse_host_port(line[len(prefix) :].split(" ")[0])
        return None

    def __enter__(self) -> Node:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
