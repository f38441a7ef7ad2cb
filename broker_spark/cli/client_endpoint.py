"""The short-lived endpoint behind ``publish``, ``subscribe``, ``store``, ``status``, ``topology``.

A :class:`Client` makes a leaf endpoint (it never forwards for others), connects
it to one node, by native peering (``--peer``) or through the node's WebSocket
API (``--ws``), retrying for ``--wait`` seconds, and turns a failure into one
line that says why (the reason comes from the endpoint's own error status,
e.g. "connection refused" or a TLS mismatch).

:meth:`Client.finish` is how a command that published makes sure its messages
arrived before the process ends: it waits until the endpoint took everything
queued, then unpeers, which sends Broker's goodbye ping behind the data; the
node answers it only after reading everything before it, and the connection
closes on that answer (over ``--ws``: until the server answered the last
flow-control probe, which it does once it processed everything before it).
Only then does the endpoint shut down.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from broker_spark.addresses import format_host_port
from broker_spark.cli.args import client_configuration
from broker_spark.cli.errors import CliError
from broker_spark.endpoint import Endpoint
from broker_spark.errors import SC
from broker_spark.introspect import connection_count
from broker_spark.source_opener import SourceError, SourceOpener, SourceUnreachable
from broker_spark.status import Status
from broker_spark.zeromq.cluster import links_of
from broker_spark.zeromq.proxy_address import ProxyAddressError, parse_zeromq_proxy

__all__ = ["Client"]

log = logging.getLogger("broker_spark.cli")

#: How long ``finish`` waits for queued messages and the goodbye, at most.
FINISH_TIMEOUT = 30.0


def parse_proxy(text: str | None) -> tuple[str, str] | None:
    """``--zeromq-proxy HOST`` (or two ZeroMQ endpoints) as the proxy's XPUB and XSUB
    addresses; CliError naming the flag when it is neither."""
    if text is None:
        return None

    try:
        return parse_zeromq_proxy(text, "--zeromq-proxy")
    except ProxyAddressError as exc:
        raise CliError(str(exc)) from None


class Client:
    """One endpoint connected to one node; a context manager that always shuts it down."""

    def __init__(self, args: argparse.Namespace, watch: bool = False) -> None:
        self.config = client_configuration(args)
        #: Whether :meth:`lost` should notice the connection going away (statuses wanted).
        self.watch = watch
        self.peer: tuple[str, int] = args.peer
        self.ws: str | None = getattr(args, "ws", None)
        self.zeromq: tuple[str, str] | None = parse_proxy(getattr(args, "zeromq_proxy", None))
        self.wait: float = args.wait
        self.endpoint: Any = None
        self._statuses: Any = None

    def __enter__(self) -> Client:

        self.endpoint = Endpoint(self.config)
        self._statuses = self.endpoint.make_status_subscriber(receive_statuses=self.watch)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.endpoint is not None:
            self.endpoint.shutdown()

    @property
    def target(self) -> str:
        """The node as the user named it: ``host:port`` or the WebSocket URL."""
        if self.ws:
            return self.ws
        if self.zeromq:
            return f"the ZeroMQ proxy at {self.zeromq[0]} and {self.zeromq[1]}"
        return format_host_port(*self.peer)

    def connect(self, topics: tuple[str, ...] = ()) -> None:
        """Peer (or connect to the WebSocket API, subscribing to ``topics``; what this
        endpoint publishes goes there on any topic); CliError when it cannot."""

        opener = SourceOpener(self.endpoint, self._statuses)
        deadline = time.monotonic() + self.wait
        while True:
            try:
                if self.zeromq:
                    opener.zeromq_proxy(*self.zeromq, timeout=max(self.wait, 5.0))
                elif self.ws:
                    opener.websocket(self.ws, topics)
                else:
                    opener.peer(self.peer[0], self.peer[1])
            except SourceUnreachable as exc:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CliError(str(exc)) from None
                log.debug("%s, retrying", exc)
                time.sleep(min(0.5, remaining))
                continue
            except SourceError as exc:  # e.g. a URL that is not ws:// or wss://
                raise CliError(str(exc)) from None
            log.debug("connected to %s", self.target)
            return

    def lost(self) -> str | None:
        """Why the connection went away since the last call (needs ``watch``), or None."""

        for item in self._statuses.poll():
            if isinstance(item, Status) and item.code() in (SC.PeerLost, SC.PeerRemoved):
                return item.message() or item.code().name
        return None

    def finish(self, publisher: Any = None, timeout: float = FINISH_TIMEOUT) -> None:
        """Deliver what was published, say goodbye and shut down (see the module docstring)."""

        ep = self.endpoint
        deadline = time.monotonic() + timeout
        while publisher is not None and publisher.buffered():
            if time.monotonic() > deadline:
                raise CliError(
                    f"{publisher.buffered()} messages still queued after {timeout:g} s: "
                    f"{self.target} does not read them"
                )
            time.sleep(0.005)
        if self.zeromq:  # ZeroMQ acknowledges nothing: wait until it wrote everything out
            links = list(links_of(ep).values())
            ep.zeromq_leave()
            for link in links:
                link.terminated.wait(max(0.0, deadline - time.monotonic()))
        elif self.ws:
            # The server answers the bridge's last probe once it processed everything.
            confirmed = ep.web_socket_flush(self.ws, max(0.0, deadline - time.monotonic()))
            ep.web_socket_unpeer(self.ws)
            if publisher is not None and not confirmed:
                raise CliError(f"{self.target} did not confirm it processed the messages")
        else:
            ep.unpeer(self.peer[0], self.peer[1])
            while connection_count(ep) and time.monotonic() < deadline:
                time.sleep(0.005)
        ep.shutdown()
