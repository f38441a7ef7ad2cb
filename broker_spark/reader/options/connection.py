"""The options every reader and writer shares: how its endpoint reaches the Broker world.

``listen``, ``peer``, ``websocket``, the ``ssl.*`` files and Zeek's ZeroMQ
backend (``zeromq.*``), checked against each other (certificates need TLS, a
``wss://`` WebSocket contradicts ``ssl.disable``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker_spark.config import TLSSettings
from broker_spark.reader.options.text import SSL_FILES, RawOptions, split_option
from broker_spark.reader.options.values import (
    BrokerOptionError,
    HostPort,
    WebSocketTarget,
    parse_host_port,
    parse_websocket,
)
from broker_spark.reader.options.zeromq import ZeroMQOptions, parse_zeromq

if TYPE_CHECKING:
    from broker_spark.config import Configuration

__all__ = ["ConnectionOptions", "parse_connection"]


@dataclass(frozen=True)
class ConnectionOptions:
    """How an endpoint reaches the Broker world: accept peers, dial peers, a WebSocket API,
    or Zeek's ZeroMQ cluster backend."""

    listen: HostPort | None = None
    peers: tuple[HostPort, ...] = ()
    websocket: WebSocketTarget | None = None
    ssl: TLSSettings = field(default_factory=TLSSettings)
    zeromq: ZeroMQOptions = field(default_factory=ZeroMQOptions)

    def configuration(self) -> Configuration:
        """A fresh endpoint configuration with these TLS settings."""
        return self.ssl.configuration()


def parse_ssl(raw: RawOptions) -> TLSSettings:
    disable = raw.boolean("ssl.disable", False)
    files = {name: raw.nonempty(name) or "" for name in SSL_FILES}
    given = [name for name in SSL_FILES if files[name]]
    if disable and given:
        raise BrokerOptionError(
            "ssl.disable", "true", f"contradicts {given[0]} (certificates need TLS)"
        )
    if given:
        if files["ssl.key"] and not files["ssl.certificate"]:
            raise BrokerOptionError("ssl.key", files["ssl.key"], "needs ssl.certificate")
        if files["ssl.passphrase"] and not files["ssl.key"]:
            raise BrokerOptionError("ssl.passphrase", files["ssl.passphrase"], "needs ssl.key")
        if not files["ssl.certificate"]:
            first = given[0]
            raise BrokerOptionError(
                first, files[first], "mutual TLS needs ssl.certificate and ssl.key as well"
            )
        if not files["ssl.key"]:
            raise BrokerOptionError(
                "ssl.certificate", files["ssl.certificate"], "needs ssl.key (the private key)"
            )
        if not files["ssl.cafile"] and not files["ssl.capath"]:
            raise BrokerOptionError(
                "ssl.certificate",
                files["ssl.certificate"],
                "needs ssl.cafile or ssl.capath to verify peers (mutual TLS)",
            )
    return TLSSettings(
        disable,
        files["ssl.certificate"],
        files["ssl.key"],
        files["ssl.cafile"],
        files["ssl.capath"],
        files["ssl.passphrase"],
    )


def parse_connection(raw: RawOptions) -> ConnectionOptions:
    listen_text = raw.nonempty("listen")
    listen = parse_host_port(listen_text, "listen", listen=True) if listen_text else None
    peers = tuple(dict.fromkeys(parse_host_port(p, "peer") for p in split_option(raw, "peer")))
    websocket_text = raw.nonempty("websocket")
    websocket = parse_websocket(websocket_text) if websocket_text else None
    ssl = parse_ssl(raw)
    if websocket is not None and websocket.secure and ssl.disable_ssl:
        raise BrokerOptionError(
            "ssl.disable", "true", f"contradicts websocket={websocket_text!r} (use ws://)"
        )
    return ConnectionOptions(listen, peers, websocket, ssl, parse_zeromq(raw))
