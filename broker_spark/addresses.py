"""Which addresses other hosts reach: what decides whether a listener needs authentication.

``broker-spark node`` (``node/exposure.py``) and the Spark reader's ``listen`` and
``zeromq.logs`` options refuse a listener that other hosts reach unless its clients
authenticate or the user says ``allow anonymous`` (``docs/security.md``); both ask
these two questions.
"""

from __future__ import annotations

import ipaddress
import socket

__all__ = [
    "HostPort",
    "format_host_port",
    "is_loopback",
    "parse_host_port",
    "without_credentials",
    "zeromq_bind_host",
]

#: An address as the command and the node take it: a host (a name or an address) and a port.
HostPort = tuple[str, int]


def parse_host_port(text: str, default_host: str = "127.0.0.1") -> HostPort:
    """``host:port``, ``[v6addr]:port``, ``:port`` or ``port``; ValueError naming the text."""
    text = text.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"{text!r}: write IPv6 addresses in brackets, e.g. [::1]:9999")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"{text!r} is not HOST:PORT (the port must be a number)") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"{text!r}: port {port} is out of range 0-65535")
    return (host or default_host), port


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) is reachable from this host only.

    The wildcard (``""``, ``0.0.0.0``, ``::``, ``*``) is every interface. A name
    counts as loopback only when every address it resolves to is one, so an
    unknown or unresolvable name is treated as reachable.
    """
    host = host.strip("[]")
    if host in ("", "*"):
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(
        ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addresses
    )


def format_host_port(host: object, port: int) -> str:
    """``host:port`` as written in a URL or a log line, an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def zeromq_bind_host(endpoint: str) -> str | None:
    """The host a ZeroMQ endpoint binds (None for ipc:// and inproc://, local by nature)."""
    scheme, _, rest = endpoint.partition("://")
    if scheme not in ("tcp", "ws", "wss"):
        return None
    host = rest.rsplit(":", 1)[0]
    return host.split(";")[-1]  # tcp://eth0;0.0.0.0:5557 names an interface first


def without_credentials(url: str) -> str:
    """``url`` as it may be shown (logs, errors, statuses): a ``user:password@`` is ``***@``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rsplit("@", 1)[1]
    return f"{scheme}://{authority}{slash}{path}"
