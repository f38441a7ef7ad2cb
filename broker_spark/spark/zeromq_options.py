"""The ZeroMQ options of the ``broker`` data source: Zeek's ZeroMQ cluster backend.

Kept apart from :mod:`~broker_spark.spark.options` (which checks all options
together and re-exports what is public here), so each stays small. The names
follow Zeek's own options (``Cluster::Backend::ZeroMQ::...``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from broker_spark.spark.option_values import BrokerOptionError

__all__ = [
    "ZEROMQ_CURVE",
    "ZEROMQ_PROXY_PORTS",
    "ZeroMQOptions",
    "parse_zeromq",
    "parse_zeromq_proxy",
]

#: Zeek's ZeroMQ cluster backend, named after Zeek's options (Cluster::Backend::ZeroMQ::...).
ZEROMQ_CURVE = (
    "zeromq.curveServerPublicKey",
    "zeromq.curveServerSecretKey",
    "zeromq.curveClientPublicKey",
    "zeromq.curveClientSecretKey",
)

#: The ports Zeek's proxy binds by default: its XPUB (our XSUB connects) and its XSUB.
ZEROMQ_PROXY_PORTS = (5555, 5556)


class _Options(Protocol):
    def nonempty(self, name: str) -> str | None: ...


@dataclass(frozen=True)
class ZeroMQOptions:
    """Zeek's ZeroMQ cluster backend: our logger PULL (``zeromq.logs``, bound, as Zeek's
    ``listen_log_endpoint``), our XSUB and XPUB connected to the cluster's proxy (as
    ``connect_xsub_endpoint``/``connect_xpub_endpoint``), and the CURVE keys (Z85, as
    ``curve_{server,client}_{publickey,secretkey}``; empty: Zeek's environment variables)."""

    logs: str | None = None
    xsub: str | None = None
    xpub: str | None = None
    curve: tuple[str, str, str, str] = field(default=("", "", "", ""), repr=False)

    @property
    def proxy(self) -> bool:
        return self.xsub is not None or self.xpub is not None

    def curve_keys(self) -> Any:
        """The CURVE keys in force (:class:`~broker_spark.zeromq.curve.CurveKeys`): these
        options, or Zeek's environment variables; CurveConfigError when they do not fit."""
        from broker_spark.zeromq.curve import CurveKeys

        return CurveKeys.resolve(CurveKeys(*self.curve))


_ZMQ_ENDPOINT = re.compile(r"(tcp|ipc|inproc)://\S+\Z")


def _zeromq_endpoint(raw: _Options, name: str) -> str | None:
    value = raw.nonempty(name)
    if value is not None and not _ZMQ_ENDPOINT.match(value):
        raise BrokerOptionError(name, value, "expected a ZeroMQ endpoint such as tcp://host:5557")
    return value


def parse_zeromq_proxy(text: str, option: str) -> tuple[str, str]:
    """A Zeek cluster's ZeroMQ proxy: its host (Zeek's ports 5555 for its XPUB, 5556 for its
    XSUB) or both endpoints, ``tcp://h:5555,tcp://h:5556`` (where our XSUB, then our XPUB,
    connect: Zeek's ``connect_xsub_endpoint`` and ``connect_xpub_endpoint``)."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) == 2 and all(_ZMQ_ENDPOINT.match(p) for p in parts):
        return parts[0], parts[1]
    host = text.strip().removeprefix("tcp://")
    if len(parts) != 1 or not host or "/" in host or (":" in host and not host.startswith("[")):
        raise BrokerOptionError(
            option, text, "expected the proxy's host, or its XPUB and XSUB endpoints (a,b)"
        )
    first, second = (f"tcp://{host}:{port}" for port in ZEROMQ_PROXY_PORTS)
    return first, second


def parse_zeromq(raw: _Options) -> ZeroMQOptions:
    logs = _zeromq_endpoint(raw, "zeromq.logs")
    xsub = _zeromq_endpoint(raw, "zeromq.connectXsubEndpoint")
    xpub = _zeromq_endpoint(raw, "zeromq.connectXpubEndpoint")
    proxy = raw.nonempty("zeromq.proxy")
    if proxy is not None:
        if xsub is not None or xpub is not None:
            raise BrokerOptionError(
                "zeromq.proxy", proxy, "contradicts zeromq.connectXsubEndpoint/connectXpubEndpoint"
            )
        xsub, xpub = parse_zeromq_proxy(proxy, "zeromq.proxy")
    if (xsub is None) != (xpub is None):
        given = "zeromq.connectXsubEndpoint" if xpub is None else "zeromq.connectXpubEndpoint"
        raise BrokerOptionError(
            given,
            xsub or xpub,
            "a node connects to both of the proxy's sockets: give the other too",
        )
    keys = tuple(raw.nonempty(name) or "" for name in ZEROMQ_CURVE)
    if any(keys) and logs is None and xsub is None and xpub is None:
        given = next(n for n, k in zip(ZEROMQ_CURVE, keys, strict=True) if k)
        raise BrokerOptionError(given, None, "applies with zeromq.logs or zeromq.proxy only")
    options = ZeroMQOptions(logs, xsub, xpub, keys)  # type: ignore[arg-type]
    if logs is not None or xsub is not None or xpub is not None:
        from broker_spark.zeromq.curve import CurveConfigError

        try:
            options.curve_keys()
        except CurveConfigError as exc:
            raise BrokerOptionError("zeromq.curve*", None, str(exc)) from None
    return options
