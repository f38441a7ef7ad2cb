"""The ZeroMQ options of the ``broker`` data source: Zeek's ZeroMQ cluster backend.

Kept apart from :mod:`~broker_spark.reader.options.reader` (which checks all options
together and re-exports what is public here), so each stays small. The names
follow Zeek's own options (``Cluster::Backend::ZeroMQ::...``). Where the proxy is
(``zeromq.proxy``) is read as the command reads ``--zeromq-proxy``, by
:mod:`broker_spark.zeromq.proxy_address`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from broker_spark.reader.options.values import BrokerOptionError
from broker_spark.zeromq.proxy_address import (
    ProxyAddressError,
    is_zeromq_endpoint,
    parse_zeromq_proxy,
)

__all__ = [
    "ZEROMQ_CURVE",
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
        # Start-up time (measured, issue 52): pyzmq is 35 ms of the reader options' import,
        # which every Spark reader makes; only ZeroMQ readers need it.
        from broker_spark.zeromq.curve import CurveKeys

        return CurveKeys.resolve(CurveKeys(*self.curve))


def _zeromq_endpoint(raw: _Options, name: str) -> str | None:
    value = raw.nonempty(name)
    if value is not None and not is_zeromq_endpoint(value):
        raise BrokerOptionError(name, value, "expected a ZeroMQ endpoint such as tcp://host:5557")
    return value


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
        try:
            xsub, xpub = parse_zeromq_proxy(proxy, "zeromq.proxy")
        except ProxyAddressError as exc:
            raise BrokerOptionError(exc.option, exc.value, exc.reason) from None
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
        # Start-up time, as curve_keys' import.
        from broker_spark.zeromq.curve import CurveConfigError

        try:
            options.curve_keys()
        except CurveConfigError as exc:
            raise BrokerOptionError("zeromq.curve*", None, str(exc)) from None
    return options
