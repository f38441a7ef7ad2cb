"""Who may connect: a node's listeners off loopback must authenticate their clients.

A relay node next to Zeek holds days of a site's connections, DNS queries and
HTTP hosts, and its ports give them out (the relay) or take data in (Broker
peers, WebSocket clients, a ZeroMQ logger's PULL). Bound to loopback only this
host reaches them; the first thing a user changes is the address, and then
anyone on the network would. So ``broker-spark node`` refuses to start a
listener that is reachable off this host unless its clients must prove who they
are: mutual TLS against a CA (``--cert``/``--key``/``--ca``, what
``broker-spark certs`` makes) for Broker peers, relay readers and WebSocket
clients; CURVE with the cluster's client key for the ZeroMQ logger (Zeek's
own); a bearer token (``--websocket-token``, ``--metrics-token``) for the
WebSocket API (over TLS, so the token is not readable on the wire) and the
metrics. ``--allow-anonymous`` (``allow_anonymous = true`` in ``[endpoint]``)
opts out explicitly, for a Zeek left at Broker's anonymous TLS default, with a
warning at start naming every open listener. ``docs/security.md`` has the
whole threat model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from broker_spark.addresses import format_host_port, is_loopback, zeromq_bind_host
from broker_spark.exits import UsageError

__all__ = ["OpenListener", "check_exposure", "open_listeners"]


@dataclass(frozen=True)
class OpenListener:
    """A listener reachable off this host whose clients are not authenticated."""

    flag: str  # the flag and address, as the user gave them: "--relay 0.0.0.0:9998"
    exposes: str  # what an unauthenticated client could do there
    remedy: str  # what authenticates its clients


def open_listeners(settings: Any, curve: Any = None) -> list[OpenListener]:
    """The listeners of ``settings`` (a ``NodeSettings``) reachable off this host whose
    clients are not authenticated; ``curve`` is the node's ``CurveKeys`` in force."""
    tls = settings.tls
    mutual = tls.authenticated and not tls.disable_ssl
    certs = "--cert, --key and --ca (mutual TLS; `broker-spark certs` makes them)"
    out: list[OpenListener] = []
    if not mutual:
        if settings.listen is not None and not is_loopback(settings.listen[0]):
            out.append(
                OpenListener(
                    f"--listen {format_host_port(*settings.listen)}",
                    "anyone may peer and publish into this node (its spool, its stores)",
                    certs,
                )
            )
        token = settings.websocket_token and not tls.disable_ssl
        if settings.websocket is not None and not is_loopback(settings.websocket[0]) and not token:
            out.append(
                OpenListener(
                    f"--websocket {format_host_port(*settings.websocket)}",
                    "anyone may publish and subscribe through Zeek's WebSocket API",
                    f"{certs}, or --websocket-token over TLS",
                )
            )
        if settings.spool_dir and settings.relay is not None and not is_loopback(settings.relay[0]):
            out.append(
                OpenListener(
                    f"--relay {format_host_port(*settings.relay)}",
                    "anyone may read everything the spool keeps",
                    certs,
                )
            )
    if (
        settings.spool_dir
        and settings.metrics is not None
        and not is_loopback(settings.metrics[0])
        and not settings.metrics_token
    ):
        out.append(
            OpenListener(
                f"--metrics {format_host_port(*settings.metrics)}",
                "anyone may read the node's counters (its sources, peers and readers)",
                "--metrics-token (Prometheus sends it from its credentials_file)",
            )
        )
    if settings.zeromq_logs:
        host = zeromq_bind_host(settings.zeromq_logs)
        server = curve is not None and curve.server_enabled
        if host is not None and not is_loopback(host) and not server:
            out.append(
                OpenListener(
                    f"--zeromq-logs {settings.zeromq_logs}",
                    "anyone may push log batches into this logger",
                    "CURVE keys (--curve-server-secretkey and --curve-client-publickey, "
                    "or Zeek's ZEEK_CLUSTER_BACKEND_ZEROMQ_CURVE_* variables)",
                )
            )
    return out


def check_exposure(
    settings: Any, curve: Any = None, flags: Mapping[str, str] | None = None
) -> list[str]:
    """Refuse (UsageError) listeners off loopback without client authentication, unless
    ``settings.allow_anonymous``; then return the warnings to print at start. ``flags``
    renames the node's flags for another command (``--zeromq-logs`` is ``logs``'
    ``--zeromq-bind``)."""
    found = open_listeners(settings, curve)
    for node_flag, flag in (flags or {}).items():
        found = [
            replace(o, flag=o.flag.replace(node_flag, flag, 1))
            if o.flag.startswith(node_flag + " ")
            else o
            for o in found
        ]
    if not found:
        return []
    if not settings.allow_anonymous:
        first = found[0]
        more = "".join(f"; {o.flag} too" for o in found[1:])
        raise UsageError(
            f"{first.flag} is reachable from other hosts and its clients are not "
            f"authenticated: {first.exposes}{more}. Give {first.remedy}, bind to "
            "127.0.0.1, or pass --allow-anonymous (allow_anonymous = true in [endpoint]) "
            "to accept anyone (docs/security.md)"
        )
    return [
        f"{o.flag} accepts unauthenticated clients (--allow-anonymous): {o.exposes}" for o in found
    ]
