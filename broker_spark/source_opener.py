"""Open an endpoint's sources: listen, peer, Zeek's WebSocket API, a Zeek cluster's ZeroMQ
proxy and its loggers' PULL socket. One opener for every caller.

Three callers open the same sources with different policies:

* the Spark data source (``reader/connect``) fails a query at start when a
  source cannot be opened, naming the option at fault;
* a command's client (``cli/client_endpoint``) retries until its ``--wait`` runs out,
  then says why it could not connect;
* a relay node (``node/sources``) runs for months: a source that is down when it
  starts is retried in the background, and only a wrong setting stops it.

So each attempt here either opens the source or raises a :class:`SourceError` saying
why, of one of two kinds the policies tell apart: :class:`SourceMisconfigured` (the
setting is wrong, e.g. a URL that is not ``ws://``: retrying cannot help) and
:class:`SourceUnreachable` (nobody answered, or the other side refused: worth another
try). The reason is the endpoint's own error status when it reported one (read from
the status subscriber the caller made before connecting), else a plain sentence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from broker_spark.addresses import without_credentials
from broker_spark.errors import EC, BrokerError
from broker_spark.status import Error

__all__ = [
    "SourceError",
    "SourceMisconfigured",
    "SourceOpener",
    "SourceUnreachable",
    "open_zeromq_logs",
]

log = logging.getLogger(__name__)


#: How a failure of each source is said: briefly after the option that names it
#: (``option peer='h:1': cannot peer: ...``), and in a line of its own.
_SAID = {
    "listen": ("cannot listen", "cannot listen on"),
    "peer": ("cannot peer", "cannot connect to"),
    "websocket": ("cannot connect", "cannot connect to"),
    "zeromq.proxy": ("cannot join", "cannot join the ZeroMQ proxy at"),
    "zeromq.logs": ("", ""),
}


class SourceError(BrokerError):
    """A source could not be opened: ``source`` says which (``listen``, ``peer``,
    ``websocket``, ``zeromq.proxy``, ``zeromq.logs``), ``target`` where (the address as
    given, a URL without its credentials), ``why`` why (the endpoint's own error when it
    reported one). ``reason`` says it after the setting that names the source
    (``cannot peer: ...``); the error's text is a line of its own
    (``cannot connect to h:1: ...``). ``plain``: ``why`` is the reason as it stands."""

    code = EC.PeerUnavailable

    def __init__(self, source: str, target: str, why: str, *, plain: bool = False) -> None:
        short, long = ("", "") if plain else _SAID[source]
        self.source = source
        self.target = target
        self.why = why
        self.reason = f"{short}: {why}" if short else why
        if long and not why.startswith(long):
            super().__init__(f"{long} {target}: {why}")
        elif not long and target not in why:  # plain: still say which source
            super().__init__(f"{source} {target}: {why}")
        else:
            super().__init__(why)


class SourceMisconfigured(SourceError):
    """The setting itself is wrong (an address that is not one, a key that does not fit):
    no retry opens the source."""

    code = EC.InvalidData


class SourceUnreachable(SourceError):
    """Nobody answered, the other side refused, or the address is taken: another try may
    open the source."""


def _errors_text(statuses: Any) -> str:
    """The messages of the errors the endpoint reported since the last call (``""``)."""

    if statuses is None:
        return ""
    try:
        items = statuses.poll()
    except Exception:  # the endpoint is shutting down
        return ""
    return "; ".join(dict.fromkeys(i.message() for i in items if isinstance(i, Error)))


class SourceOpener:
    """Opens ``endpoint``'s sources, one attempt per call. ``statuses`` is a status
    subscriber made before the first attempt (its errors are the reasons given)."""

    def __init__(self, endpoint: Any, statuses: Any = None) -> None:
        self.endpoint = endpoint
        self.statuses = statuses

    def _why(self, default: str) -> str:
        return _errors_text(self.statuses) or default

    def _attempt(
        self,
        source: str,
        target: str,
        call: Callable[[], Any],
        refused: str,
        failed: Callable[[Any], bool] = lambda done: not done,
    ) -> Any:
        """What ``call()`` (one of the endpoint's opening methods) returned; what it raised,
        or a result ``failed`` says is a failure, as a :class:`SourceError` (``refused``:
        the reason when the endpoint reported none)."""
        try:
            done = call()
        except NotImplementedError as exc:
            raise SourceMisconfigured(
                source, target, f"not supported yet: {exc}", plain=True
            ) from None
        except ValueError as exc:  # a malformed address or option
            raise SourceMisconfigured(source, target, str(exc)) from None
        except OSError as exc:
            raise SourceUnreachable(source, target, str(exc)) from None
        if failed(done):
            raise SourceUnreachable(source, target, self._why(refused))
        return done

    def listen(self, host: str, port: int) -> int:
        """Listen for Broker peers; the port bound (``port`` 0: one the system chose)."""
        bound = self._attempt(
            "listen",
            _checked("listen", host, port),
            lambda: self.endpoint.listen(host, port),
            "the address is in use or not local",
        )
        return int(bound)

    def peer(self, host: str, port: int, retry: float = 0.0) -> None:
        """Peer with a Broker endpoint (``retry``: redial every so many seconds once it
        drops; 0: never). The first attempt's failure is raised either way."""
        self._attempt(
            "peer",
            _checked("peer", host, port),
            lambda: self.endpoint.peer(host, port, retry),
            "the peer is unreachable or refused the peering",
        )

    def websocket(
        self, url: str, topics: Sequence[str], retry: float = 0.0, **options: Any
    ) -> None:
        """Bridge to a WebSocket API (a Zeek's), subscribing to ``topics`` there; the
        bridge sends what the endpoint publishes. ``retry``: redial interval after the
        bridge drops or a first attempt fails (0: never); ``options``: its pacing."""
        self._attempt(
            "websocket",
            without_credentials(url),  # not ws:// or wss:// is a ValueError: misconfigured
            lambda: self.endpoint.web_socket_peer(url, list(topics), retry, **options),
            "the server is unreachable or refused the connection",
            failed=lambda done: done is False,
        )

    def zeromq_proxy(
        self,
        xsub: str,
        xpub: str,
        *,
        curve: Any = None,
        timeout: float | None = None,
        linger_ms: int | None = None,
    ) -> None:
        """Join a Zeek cluster through its XPUB/XSUB proxy (``xsub``: where this endpoint's
        XSUB connects, the proxy's XPUB; ``xpub``: where its XPUB connects). Once joined,
        ZeroMQ redials by itself; ``timeout``: how long to wait for the join."""
        target = f"{xsub},{xpub}"
        if curve is not None and getattr(curve, "any", False):
            # Here, as the cluster's own import in Endpoint.zeromq_join: pyzmq.
            from broker_spark.zeromq.curve import CurveConfigError

            try:
                curve.require_client()
            except CurveConfigError as exc:
                raise SourceMisconfigured(
                    "zeromq.proxy", target, f"CURVE: {exc}", plain=True
                ) from None
        extra: dict[str, Any] = {}
        if timeout is not None:
            extra["timeout"] = timeout
        if linger_ms is not None:
            extra["linger_ms"] = linger_ms
        try:
            ok = self.endpoint.zeromq_join(xsub, xpub, curve=curve, **extra)
        except ValueError as exc:  # a malformed ZeroMQ address
            raise SourceMisconfigured("zeromq.proxy", target, str(exc), plain=True) from None
        if not ok:
            why = self._why("no ZeroMQ proxy answered")
            raise SourceUnreachable("zeromq.proxy", target, why)


def open_zeromq_logs(bind: str, curve: Any = None) -> Any:
    """The logger role on Zeek's ZeroMQ cluster backend: a PULL socket bound at ``bind``
    that Zeek nodes PUSH their log batches to, drained on its own thread (a
    :class:`~broker_spark.zeromq.log_receiver.ZeroMQLogReceiver`); a CURVE server with
    ``curve``'s server keys."""
    # Here, not at the top, for start-up time (measured, issue 52): pyzmq and the receiver
    # take importing this module from 32 ms of CPU to 174, and the reader's runtime imports
    # it for every source, ZeroMQ or not.
    from broker_spark.zeromq.curve import CurveConfigError
    from broker_spark.zeromq.log_receiver import ZeroMQBindError, ZeroMQLogReceiver

    try:
        receiver = ZeroMQLogReceiver(bind, curve=curve)
    except CurveConfigError as exc:
        raise SourceMisconfigured("zeromq.logs", bind, str(exc), plain=True) from None
    except ZeroMQBindError as exc:
        raise SourceUnreachable("zeromq.logs", bind, str(exc), plain=True) from None
    log.info(
        "receiving Zeek's logs on %s%s", receiver.endpoint, " (CURVE)" if receiver.curve else ""
    )
    return receiver


def _checked(source: str, host: str, port: int) -> str:
    """``host:port`` for messages, once ``port`` is one (else the setting is wrong)."""
    target = _host_port(host, port)
    if type(port) is not int or not 0 <= port <= 65535:
        raise SourceMisconfigured(source, target, f"port must be 0 to 65535, got {port!r}")
    return target


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
