"""What status subscribers receive: ``Status``, ``Error`` and the peer descriptions.

These mirror the classes of Broker's Python bindings: ``status.code()`` is an
:class:`~broker_spark.errors.SC`, ``error.code()`` an :class:`~broker_spark.errors.EC`,
``context()`` an :class:`EndpointInfo` whose ``network`` answers both
``network.address`` and the bindings' optional-style ``network.get().address``.
They are plain immutable-by-convention value objects, created on the core's
loop and handed to other threads as they are.
"""

from __future__ import annotations

import enum

from broker_spark.errors import EC, SC

__all__ = [
    "EndpointInfo",
    "Error",
    "NetworkInfo",
    "PeerFlags",
    "PeerInfo",
    "PeerStatus",
    "Status",
]


class PeerStatus(enum.IntEnum):
    """Where a peering stands (``broker.PeerStatus``)."""

    Initialized = 0
    Connecting = 1
    Connected = 2
    Peered = 3
    Disconnected = 4
    Reconnecting = 5


class PeerFlags(enum.IntFlag):
    """How a peer is attached (``broker.PeerFlags``)."""

    Invalid = 0
    Local = 1
    Remote = 2
    Outbound = 4
    Inbound = 8


class NetworkInfo:
    """A peer's address and port; unset (``""``, 0) for in-process peers.

    Broker's bindings wrap this in an optional, so code reads
    ``ctx.network.get().address``; :meth:`get` and :meth:`is_set` keep that working.
    """

    __slots__ = ("address", "port", "retry")

    def __init__(self, address: str = "", port: int = 0, retry: float = 0.0) -> None:
        self.address = address
        self.port = port
        self.retry = retry

    def get(self) -> NetworkInfo:
        return self

    def is_set(self) -> bool:
        return bool(self.address) or self.port != 0

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NetworkInfo):
            return (self.address, self.port) == (other.address, other.port)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.address, self.port))

    def __repr__(self) -> str:
        return f"{self.address}:{self.port}" if self.is_set() else "none"


class EndpointInfo:
    """An endpoint's id (``node``, a UUID string) and, when known, its network address."""

    __slots__ = ("node", "network")

    def __init__(self, node: str = "", network: NetworkInfo | None = None) -> None:
        self.node = node
        self.network = network if network is not None else NetworkInfo()

    @property
    def id(self) -> str:
        return self.node

    def node_id(self) -> str:
        return self.node

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EndpointInfo):
            return (self.node, self.network) == (other.node, other.network)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.node, self.network))

    def __repr__(self) -> str:
        return self.node


class PeerInfo:
    """One entry of ``Endpoint.peers()``."""

    __slots__ = ("peer", "flags", "status")

    def __init__(
        self,
        peer: EndpointInfo,
        flags: PeerFlags = PeerFlags.Remote,
        status: PeerStatus = PeerStatus.Peered,
    ) -> None:
        self.peer = peer
        self.flags = flags
        self.status = status

    def __repr__(self) -> str:
        return f"PeerInfo({self.peer!r}, {self.flags!r}, {self.status.name})"


class Status:
    """A peering event, delivered only to status subscribers that asked for statuses."""

    __slots__ = ("_code", "_context", "_message")

    def __init__(
        self,
        code: SC = SC.Unspecified,
        context: EndpointInfo | None = None,
        message: str = "",
    ) -> None:
        self._code = SC(code)
        self._context = context if context is not None else EndpointInfo()
        self._message = message

    def code(self) -> SC:
        return self._code

    def context(self) -> EndpointInfo:
        return self._context

    def message(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"Status({self._code.name}, {self._context!r}, {self._message!r})"


class Error:
    """A failure report, delivered to every status subscriber."""

    __slots__ = ("_code", "_context", "_message")

    def __init__(
        self,
        code: EC = EC.Unspecified,
        message: str = "",
        context: EndpointInfo | None = None,
    ) -> None:
        self._code = EC(code)
        self._context = context
        self._message = message

    def code(self) -> EC:
        return self._code

    def context(self) -> EndpointInfo | None:
        return self._context

    def message(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"Error({self._code.snake_name}, {self._message!r})"
