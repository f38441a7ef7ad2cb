"""Arguments several subcommands share: addresses, TLS, the peer to reach, output format.

Every subcommand that talks to a running node spells these the same way, so a
user learns them once: ``--peer HOST:PORT`` (or ``--ws URL`` where the
WebSocket API makes sense), ``--wait SECONDS``, the TLS flags and ``--no-tls``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from broker_spark.addresses import HostPort, parse_host_port
from broker_spark.config import BrokerOptions, TLSSettings
from broker_spark.node.settings import check_tls, secret_text

__all__ = [
    "DEFAULT_PORT",
    "HostPort",
    "add_connect_arguments",
    "add_format_argument",
    "add_tls_arguments",
    "check_tls",
    "client_configuration",
    "host_port",
    "parse_host_port",
    "positive_float",
]

#: Broker's customary port, used when ``--peer`` is not given.
DEFAULT_PORT = 9999


def host_port(text: str) -> HostPort:
    """``parse_host_port`` as an argparse ``type``."""
    try:
        return parse_host_port(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_count(text: str) -> int:
    """A whole number of 1 or more (``--count``)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError("the count must be 1 or more")
    return n


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"{text!r} must be zero or more")
    return value


#: The TLS flags (:func:`add_tls_arguments`) by the TLSSettings field each sets.
TLS_FLAGS = {
    "cert": "certificate",
    "key": "key",
    "ca": "cafile",
    "capath": "capath",
    "passphrase": "passphrase",
}


#: Where the key's passphrase comes from when ``--passphrase`` is not given.
PASSPHRASE_ENV = "BROKER_SPARK_TLS_PASSPHRASE"


def tls_flags(args: argparse.Namespace) -> dict[str, str]:
    """The TLS settings the flags give (``TLSSettings`` field names, only those given); the
    passphrase from ``--passphrase`` (text or ``@FILE``) or, with a ``--key``, from
    ``$BROKER_SPARK_TLS_PASSPHRASE`` (only then: a passphrase alone would ask for mutual TLS)."""
    given = {name: getattr(args, flag) for flag, name in TLS_FLAGS.items()}
    out = {name: value for name, value in given.items() if value is not None}
    if "passphrase" in out:
        out["passphrase"] = secret_text(out["passphrase"])
    elif out.get("key") and os.environ.get(PASSPHRASE_ENV):
        out["passphrase"] = os.environ[PASSPHRASE_ENV]
    return out


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    """Broker's TLS options: anonymous TLS by default, mutual TLS with certificates."""
    group = parser.add_argument_group(
        "TLS",
        "Without certificates the link is encrypted but not authenticated (Broker's "
        "default); with them, both sides must present certificates signed by the CA.",
    )
    group.add_argument("--cert", metavar="FILE", help="this endpoint's certificate (PEM)")
    group.add_argument("--key", metavar="FILE", help="its private key (PEM)")
    group.add_argument("--ca", metavar="FILE", help="CA certificate(s) to verify peers with")
    group.add_argument("--capath", metavar="DIR", help="directory of CA certificates")
    group.add_argument(
        "--passphrase",
        metavar="TEXT|@FILE",
        help=f"passphrase of an encrypted key; @FILE reads it from FILE (default with --key: "
        f"${PASSPHRASE_ENV})",
    )
    group.add_argument(
        "--no-tls", action="store_true", help="plain TCP (the peer must disable TLS too)"
    )


def add_connect_arguments(parser: argparse.ArgumentParser, websocket: bool = False) -> None:
    """``--peer`` (and ``--ws``), ``--wait`` and the TLS flags of a client command."""
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--peer",
        type=host_port,
        default=("127.0.0.1", DEFAULT_PORT),
        metavar="HOST:PORT",
        help=f"the node to peer with (default 127.0.0.1:{DEFAULT_PORT})",
    )
    if websocket:
        group.add_argument(
            "--ws",
            metavar="URL",
            help="go through a WebSocket API instead (ws://host:port or wss://host:port)",
        )
        group.add_argument(
            "--zeromq-proxy",
            metavar="HOST|XPUB,XSUB",
            help="join a Zeek cluster on the ZeroMQ backend instead, through its proxy: its "
            "host (ports 5555 and 5556) or tcp:// endpoints of its XPUB and XSUB; CURVE keys "
            "from Zeek's ZEEK_CLUSTER_BACKEND_ZEROMQ_CURVE_* environment variables",
        )
    group.add_argument(
        "--wait",
        type=positive_float,
        default=0.0,
        metavar="SECONDS",
        help="keep trying to connect for this long (default 0: one attempt)",
    )
    add_tls_arguments(parser)


def add_format_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format",
        choices=("json", "plain", "text"),
        default="json",
        help="json: Zeek's WebSocket JSON, lossless (default); plain: ordinary JSON "
        "(counts become numbers, addresses strings...); text: Broker's own rendering",
    )


def client_configuration(args: argparse.Namespace) -> Any:
    """The Configuration of a short-lived client endpoint (a leaf: it never forwards)."""
    tls = TLSSettings(disable_ssl=bool(args.no_tls), **tls_flags(args))
    config = tls.configuration(BrokerOptions(disable_forwarding=True))
    check_tls(config)
    return config
