"""One error hierarchy for the whole project, with codes that mirror Broker's.

Broker reports failures as an ``ec`` code plus context. We keep the same codes
(``EC``), so a status subscriber written for Broker's Python bindings sees the
values it expects, and every exception we raise derives from :class:`BrokerError`
so callers can catch the project's failures in one place.
"""

from __future__ import annotations

import enum


class EC(enum.IntEnum):
    """Broker's error codes (``broker::ec``), numbered as in Broker's sources."""

    None_ = 0
    Unspecified = 1
    PeerIncompatible = 2
    PeerInvalid = 3
    PeerUnavailable = 4
    PeerDisconnectDuringHandshake = 5
    PeerTimeout = 6
    MasterExists = 7
    NoSuchMaster = 8
    NoSuchKey = 9
    RequestTimeout = 10
    TypeClash = 11
    InvalidData = 12
    BackendFailure = 13
    StaleData = 14
    CannotOpenFile = 15
    CannotWriteFile = 16
    InvalidTopicKey = 17
    EndOfFile = 18
    InvalidTag = 19
    InvalidMessage = 20
    InvalidStatus = 21
    ConversionFailed = 22
    ConsumerExists = 23
    ConnectionTimeout = 24
    BadMemberFunctionCall = 25
    RepeatedRequestId = 26
    BrokenClone = 27
    ShuttingDown = 28
    InvalidPeeringRequest = 29
    RepeatedPeeringHandshakeRequest = 30
    UnexpectedHandshakeMessage = 31
    InvalidHandshakeState = 32
    NoPathToPeer = 33
    NoConnectorAvailable = 34
    CannotOpenResource = 35
    SerializationFailed = 36
    DeserializationFailed = 37
    WrongMagicNumber = 38
    RedundantConnection = 39
    LogicError = 40

    @property
    def snake_name(self) -> str:
        """The name Broker prints and Zeek's WebSocket API sends (``deserialization_failed``)."""
        if self is EC.None_:
            return "none"
        out = []
        for i, ch in enumerate(self.name):
            if ch.isupper() and i:
                out.append("_")
            out.append(ch.lower())
        return "".join(out)


class SC(enum.IntEnum):
    """Broker's status codes (``broker::sc``)."""

    Unspecified = 1
    PeerAdded = 2
    PeerRemoved = 3
    PeerLost = 4
    EndpointDiscovered = 5
    EndpointUnreachable = 6


class BrokerError(Exception):
    """Base of every error this project raises; carries a Broker error code."""

    code: EC = EC.Unspecified

    def __init__(self, message: str = "", code: EC | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class DecodeError(BrokerError, ValueError):
    """Malformed input to a decoder: says what was wrong and where."""

    code = EC.DeserializationFailed


class EncodeError(BrokerError, ValueError):
    """A value that cannot be represented in the target encoding."""

    code = EC.SerializationFailed


class ProtocolError(BrokerError):
    """A peer broke the wire protocol (wrong magic, unexpected message, bad version)."""

    code = EC.InvalidMessage


class PeeringError(BrokerError):
    """A peering could not be established or was lost."""

    code = EC.PeerUnavailable


class StoreError(BrokerError):
    """A data store operation failed (no such key, type clash, backend failure...)."""

    code = EC.BackendFailure


class DeliveryError(BrokerError):
    """A peer did not confirm in time that it took what an endpoint published (``flush``)."""

    code = EC.PeerTimeout


class ShutdownError(BrokerError):
    """The endpoint was shut down while the caller waited."""

    code = EC.ShuttingDown
