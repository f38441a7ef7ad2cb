"""One error hierarchy for the whole project, with codes that mirror Broker's.

Broker reports failures as an ``ec`` code plus context. We keep the same codes
(``EC``), so a status subscriber written for Broker's Python bindings sees the
values it expects, and every exception we raise derives from :class:`BrokerError`
so callers can catch the project's failures in one place.
"""

from __future__ import annotations

import enum


class EC(enum.IntEnum):
    """Broker's error codes (``broker::ec``), numbered as in Broker's sources.

    The ``#:`` line above each member is its meaning in ``docs/reference/codes.md``,
    which is generated from here (``make reference``)."""

    #: Not an error (Broker's `none`).
    None_ = 0
    #: The default code of an error that has no more specific one.
    Unspecified = 1
    #: The peer speaks an incompatible protocol version, or TLS settings do not match.
    PeerIncompatible = 2
    #: The peer named in a request does not exist.
    PeerInvalid = 3
    #: The remote peer is not listening (a dial failed), or a listener turned a connection away.
    PeerUnavailable = 4
    #: The remote peer closed the connection during the handshake.
    PeerDisconnectDuringHandshake = 5
    #: A peering request, or an acknowledgement a publisher waited for, timed out.
    PeerTimeout = 6
    #: A data store master of that name already exists.
    MasterExists = 7
    #: No data store master of that name exists (or none answered).
    NoSuchMaster = 8
    #: The data store key does not exist.
    NoSuchKey = 9
    #: A data store request timed out.
    RequestTimeout = 10
    #: The operation expected another type than it was given (a store's increment on a string).
    TypeClash = 11
    #: The value cannot be used for the operation.
    InvalidData = 12
    #: The data store's backend failed to carry out the operation.
    BackendFailure = 13
    #: The data store's backend holds stale data.
    StaleData = 14
    #: A file could not be opened.
    CannotOpenFile = 15
    #: A file could not be written.
    CannotWriteFile = 16
    #: An unknown key for a topic arrived.
    InvalidTopicKey = 17
    #: The end of an input file was reached.
    EndOfFile = 18
    #: An unknown type tag arrived.
    InvalidTag = 19
    #: A message broke the protocol (wrong magic, unexpected message, bad version).
    InvalidMessage = 20
    #: A status that decodes to no valid status arrived.
    InvalidStatus = 21
    #: Converting between two data types or formats failed.
    ConversionFailed = 22
    #: A reliable channel's producer already has that consumer.
    ConsumerExists = 23
    #: A remote endpoint did not answer in time.
    ConnectionTimeout = 24
    #: A method was called without its preconditions holding.
    BadMemberFunctionCall = 25
    #: A request id was used twice.
    RepeatedRequestId = 26
    #: A data store clone ran out of sync with its master.
    BrokenClone = 27
    #: The operation was cancelled because the endpoint is shutting down.
    ShuttingDown = 28
    #: A peering request was cancelled for invalid or inconsistent data.
    InvalidPeeringRequest = 29
    #: A second handshake with the same peer began before the first ended.
    RepeatedPeeringHandshakeRequest = 30
    #: A handshake message arrived that the handshake's state does not expect.
    UnexpectedHandshakeMessage = 31
    #: The handshake reached a state it cannot continue from.
    InvalidHandshakeState = 32
    #: No path leads to the receiver of a message.
    NoPathToPeer = 33
    #: No connector is available to dial a peer.
    NoConnectorAvailable = 34
    #: A resource (a socket, a file) could not be opened.
    CannotOpenResource = 35
    #: A value could not be encoded.
    SerializationFailed = 36
    #: Bytes could not be decoded (Zeek's WebSocket API sends this name for an event it
    #: cannot convert).
    DeserializationFailed = 37
    #: A connection's first bytes are not Broker's magic number.
    WrongMagicNumber = 38
    #: A second connection to a peer already connected was dropped.
    RedundantConnection = 39
    #: An internal logic error.
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

    #: The default status code.
    Unspecified = 1
    #: A direct connection to a peer was established.
    PeerAdded = 2
    #: A direct connection to a peer was closed on purpose.
    PeerRemoved = 3
    #: A direct connection to a peer was lost.
    PeerLost = 4
    #: A new endpoint became reachable in the network (over other peers, version 2).
    EndpointDiscovered = 5
    #: Every path to an endpoint was lost.
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
