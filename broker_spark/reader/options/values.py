"""The values inside the ``broker`` data source's options: addresses, URLs, lists of types.

Kept apart from :mod:`~broker_spark.reader.options.reader`, which checks the options
together, so each stays small; that module re-exports what is public here.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from broker_spark.addresses import without_credentials
from broker_spark.errors import EC, BrokerError

__all__ = [
    "DEFAULT_WEBSOCKET_PATH",
    "BrokerOptionError",
    "HostPort",
    "WebSocketTarget",
    "is_secret_option",
    "parse_host_port",
    "parse_websocket",
    "split_top_level",
]

DEFAULT_WEBSOCKET_PATH = "/v1/messages/json"
_SECRET = frozenset(
    {"ssl.passphrase", "zeromq.curveServerSecretKey", "zeromq.curveClientSecretKey"}
)
# Names that look like a secret's, misspelled ones included (``ssl.passphrse``): their
# values never show in an error either.
_SECRET_LIKE = re.compile(r"(?i)pass|secret|token|credential|password")


def is_secret_option(name: str) -> bool:
    """Whether the value of option ``name`` must never be shown (errors, logs, reprs)."""
    return name in _SECRET or bool(_SECRET_LIKE.search(name))


_HOSTNAME = re.compile(
    r"(?=.{1,253}\Z)[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})(\.[A-Za-z0-9_-]{1,63})*\.?\Z"
)


class BrokerOptionError(BrokerError, ValueError):
    """An option of the ``broker`` data source is missing, malformed or contradicts another."""

    code = EC.InvalidData

    def __init__(self, option: str, value: Any, reason: str) -> None:
        secret = is_secret_option(option)
        shown = "***" if secret and value is not None else repr(value)
        where = f"option {option}" if value is None else f"option {option}={shown}"
        super().__init__(f"{where}: {reason}")
        self.option = option
        self.value = None if secret else value


# --- values ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HostPort:
    """A ``host:port`` address; the host is empty for "all interfaces" (listen only)."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_host_port(text: str, option: str, *, listen: bool = False) -> HostPort:
    """Parse ``host:port``, ``[ipv6]:port`` (and, for ``listen``, ``:port``)."""
    value = text.strip()
    if value.startswith("["):
        close = value.find("]")
        if close < 0 or not value[close + 1 :].startswith(":"):
            raise BrokerOptionError(option, text, "expected [ipv6-address]:port")
        host, port_text = value[1:close], value[close + 2 :]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise BrokerOptionError(option, text, f"{host!r} is not an IPv6 address") from None
    else:
        if value.count(":") > 1:
            raise BrokerOptionError(
                option, text, "an IPv6 address needs brackets, as in [::1]:9999"
            )
        host, sep, port_text = value.rpartition(":")
        if not sep:
            raise BrokerOptionError(option, text, "expected host:port")
        if host and not _HOSTNAME.match(host):
            raise BrokerOptionError(option, text, f"{host!r} is not a host name or address")
    if not host and not listen:
        raise BrokerOptionError(option, text, "the host is missing (expected host:port)")
    if not port_text.isdigit() or not port_text.isascii():
        raise BrokerOptionError(option, text, f"port {port_text!r} is not a number")
    port = int(port_text)
    if port > 65535 or (port == 0 and not listen):
        raise BrokerOptionError(option, text, f"port {port} is out of range (1 to 65535)")
    return HostPort(host, port)


@dataclass(frozen=True)
class WebSocketTarget:
    """A remote Broker/Zeek WebSocket API: ``ws://`` (plain) or ``wss://`` (TLS)."""

    url: str
    secure: bool
    host: str
    port: int
    path: str


def parse_websocket(text: str) -> WebSocketTarget:
    option = "websocket"
    shown = without_credentials(text)  # errors never show a password
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError as exc:
        raise BrokerOptionError(option, shown, f"not a URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("ws", "wss"):
        raise BrokerOptionError(option, shown, "expected a ws:// or wss:// URL")
    host = parts.hostname or ""
    if not host:
        raise BrokerOptionError(option, shown, "the URL names no host")
    if parts.username is not None or parts.query or parts.fragment:
        raise BrokerOptionError(
            option, shown, "user names, queries and fragments are not supported"
        )
    secure = scheme == "wss"
    if port is None:
        port = 443 if secure else 80
    elif port == 0:
        raise BrokerOptionError(option, shown, "port 0 is out of range (1 to 65535)")
    path = parts.path if parts.path not in ("", "/") else DEFAULT_WEBSOCKET_PATH
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return WebSocketTarget(f"{scheme}://{netloc}{path}", secure, host, port, path)


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """``text`` cut at each ``sep`` outside brackets (``a:set[addr, port],b:count``)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts
