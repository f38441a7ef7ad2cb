"""Where a Zeek cluster's ZeroMQ proxy is: its host, or the two endpoints a node connects to.

The command's ``--zeromq-proxy`` and Spark's ``zeromq.proxy`` option both take it.
Zeek's proxy binds its XPUB on port 5555 and its XSUB on 5556 by default; a node's
XSUB connects to the first and its XPUB to the second (Zeek's
``connect_xsub_endpoint`` and ``connect_xpub_endpoint``).
"""

from __future__ import annotations

import re

from broker_spark.errors import EC, BrokerError

__all__ = ["PROXY_PORTS", "ProxyAddressError", "is_zeromq_endpoint", "parse_zeromq_proxy"]

#: The ports Zeek's proxy binds by default: its XPUB (our XSUB connects) and its XSUB.
PROXY_PORTS = (5555, 5556)

_ENDPOINT = re.compile(r"(tcp|ipc|inproc)://\S+\Z")


class ProxyAddressError(BrokerError, ValueError):
    """A proxy address that is neither a host nor two ZeroMQ endpoints, given as ``option``."""

    code = EC.InvalidData

    def __init__(self, option: str, value: str, reason: str) -> None:
        super().__init__(f"{option} {value!r}: {reason}")
        self.option = option
        self.value = value
        self.reason = reason


def is_zeromq_endpoint(text: str) -> bool:
    """Whether ``text`` is a ZeroMQ endpoint a node can connect or bind (``tcp://host:5557``)."""
    return _ENDPOINT.match(text) is not None


def parse_zeromq_proxy(text: str, option: str) -> tuple[str, str]:
    """A Zeek cluster's ZeroMQ proxy: its host (Zeek's ports 5555 for its XPUB, 5556 for its
    XSUB) or both endpoints, ``tcp://h:5555,tcp://h:5556`` (where our XSUB, then our XPUB,
    connect: Zeek's ``connect_xsub_endpoint`` and ``connect_xpub_endpoint``).
    :class:`ProxyAddressError` names ``option`` when ``text`` is neither."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) == 2 and all(is_zeromq_endpoint(p) for p in parts):
        return parts[0], parts[1]
    host = text.strip().removeprefix("tcp://")
    if len(parts) != 1 or not host or "/" in host or (":" in host and not host.startswith("[")):
        raise ProxyAddressError(
            option, text, "expected the proxy's host, or its XPUB and XSUB endpoints (a,b)"
        )
    first, second = (f"tcp://{host}:{port}" for port in PROXY_PORTS)
    return first, second
