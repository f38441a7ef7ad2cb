"""The per-connection handshake of Broker's wire protocol (phases 1 and 2), sans I/O.

One :class:`Handshake` runs on each new connection until both sides agree on a
protocol version and know each other's filter, or until it fails. It never
touches a socket or a clock: the caller feeds received frame bodies to
``receive``, passes the time to ``tick``, and writes what ``data_to_send``
hands out. That keeps every state and every interleaving testable without I/O.

The exchange (WIRE.md, checked against recorded Broker sessions):

- The connecting side sends ``hello`` at once; the accepting side sends
  ``probe`` and waits for a ``hello``.
- Whoever receives a ``hello`` and has the smaller 16-byte id becomes the
  *originator*: it sends ``version_select`` (highest common version) and
  ``originator_syn`` (its filter). Otherwise it answers with its own ``hello``
  (unless it sent one already) and waits for ``version_select``.
- The responder answers ``originator_syn`` with ``responder_syn_ack``; the
  originator then sends ``originator_ack``. Both are done.

The shape is :class:`~broker_spark.protocol.peer_session.PeerSession`'s (which
runs it): inputs go in (``start``, ``receive``, ``tick``), the frames they call
for collect inside, and :meth:`Handshake.data_to_send` hands them out, in order.

Redundant connections (two links to one peer) are the caller's business, since
only the caller sees all connections: it may pass ``is_redundant``, which the
originator consults the moment it learns the peer's id (as Broker decides
redundancy at the originator, before it sends ``version_select``), or call
:meth:`Handshake.reject_redundant` itself.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Literal

from broker_spark.errors import EC, BrokerError, DecodeError, ProtocolError
from broker_spark.protocol.framing import encode_frame
from broker_spark.protocol.wire_messages import (
    ID_SIZE,
    DropConn,
    HandshakeMessage,
    Hello,
    OriginatorAck,
    OriginatorSyn,
    Probe,
    ResponderSynAck,
    VersionSelect,
    decode_handshake,
    encode_handshake,
)

__all__ = ["DEFAULT_HANDSHAKE_TIMEOUT", "Handshake", "HandshakeState", "refusal"]

#: Seconds a handshake may take from its creation before it fails with PeerTimeout.
DEFAULT_HANDSHAKE_TIMEOUT = 10.0


class HandshakeState(enum.Enum):
    """Where a handshake stands; the names say what it waits for."""

    INIT = "init"
    AWAIT_HELLO = "await_hello"
    AWAIT_HELLO_OR_VERSION_SELECT = "await_hello_or_version_select"
    AWAIT_VERSION_SELECT = "await_version_select"
    AWAIT_ORIGINATOR_SYN = "await_originator_syn"
    AWAIT_RESPONDER_SYN_ACK = "await_responder_syn_ack"
    AWAIT_ORIGINATOR_ACK = "await_originator_ack"
    DONE = "done"
    FAILED = "failed"


_S = HandshakeState

# States in which a stray probe is harmless (phase 1, as Broker tolerates it).
_PROBE_OK = frozenset({_S.AWAIT_HELLO, _S.AWAIT_HELLO_OR_VERSION_SELECT, _S.AWAIT_VERSION_SELECT})


class Handshake:
    """The handshake of one connection, in the role of connector or acceptor.

    What the inputs call for sending collects as complete frames (length prefix
    included), which :meth:`data_to_send` hands out in order. Bad input never
    raises: it moves the handshake to ``failed`` with an ``EC`` code and a
    message; only calls that make no sense in the current state (receiving
    before ``start``, or after ``done``) raise :class:`ProtocolError`.
    """

    def __init__(
        self,
        own_id: bytes,
        own_filter: Iterable[str],
        role: Literal["connector", "acceptor"],
        supported_versions: tuple[int, int] = (1, 1),
        now: float = 0.0,
        *,
        timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
        is_redundant: Callable[[bytes], bool] | None = None,
    ) -> None:
        if not isinstance(own_id, bytes) or len(own_id) != ID_SIZE:
            raise ValueError(f"own_id must be {ID_SIZE} bytes, got {own_id!r}")
        if role not in ("connector", "acceptor"):
            raise ValueError(f"role must be 'connector' or 'acceptor', got {role!r}")
        lo, hi = supported_versions
        if not 1 <= lo <= hi <= 0xFF:
            raise ValueError(f"invalid supported_versions {supported_versions!r}")
        self.own_id = own_id
        self.own_filter: tuple[str, ...] = tuple(own_filter)
        self.role = role
        self.supported_versions = (lo, hi)
        self.timeout = timeout
        self.deadline: float | None = now + timeout
        self.state = _S.INIT
        self.peer_id: bytes | None = None
        self.peer_filter: tuple[str, ...] | None = None
        self.peer_versions: tuple[int, int] | None = None
        self.version: int | None = None
        self.is_originator: bool | None = None
        self.error_code: EC | None = None
        self.error_message: str | None = None
        #: True when the failure came from the peer's drop_conn.
        self.dropped_by_peer = False
        self._is_redundant = is_redundant
        self._sent_hello = False
        self._out: list[bytes] = []

    # -- status -----------------------------------------------------------------

    @property
    def done(self) -> bool:
        """True once both sides are peered; later frames are node messages."""
        return self.state is _S.DONE

    @property
    def failed(self) -> bool:
        """True when the handshake failed; see ``error_code`` and ``error_message``."""
        return self.state is _S.FAILED

    @property
    def error(self) -> ProtocolError | None:
        """The failure as an exception the caller may raise or report, or None."""
        if self.error_code is None:
            return None
        return ProtocolError(self.error_message or "", code=self.error_code)

    def __repr__(self) -> str:
        peer = self.peer_id.hex() if self.peer_id else None
        return f"Handshake({self.role}, state={self.state.value}, peer={peer})"

    # -- output -------------------------------------------------------------------

    def data_to_send(self) -> bytes:
        """The frames the inputs so far call for and not yet handed out, in order."""
        out, self._out = self._out, []
        return b"".join(out)

    # -- inputs -------------------------------------------------------------------

    def start(self) -> None:
        """Begin: the connector sends hello, the acceptor sends probe."""
        if self.state is not _S.INIT:
            raise ProtocolError("handshake already started", code=EC.InvalidHandshakeState)
        if self.role == "connector":
            self.state = _S.AWAIT_HELLO_OR_VERSION_SELECT
            self._send(self._hello())
        else:
            self.state = _S.AWAIT_HELLO
            self._send(Probe())

    def receive(self, body: bytes | memoryview) -> None:
        """Handle one received frame body (what it calls for goes to :meth:`data_to_send`)."""
        state = self.state
        if state is _S.FAILED:
            return
        if state is _S.INIT or state is _S.DONE:
            raise ProtocolError(
                f"handshake cannot receive in state {state.value}", code=EC.InvalidHandshakeState
            )
        try:
            msg = decode_handshake(body)
        except DecodeError as exc:
            return self._fail(EC.InvalidMessage, f"malformed handshake message: {exc}")
        except BrokerError as exc:
            return self._fail(exc.code, str(exc))
        if isinstance(msg, DropConn):
            return self._on_drop_conn(msg)
        if isinstance(msg, Probe) and state in _PROBE_OK:
            return
        if isinstance(msg, Hello) and state in (_S.AWAIT_HELLO, _S.AWAIT_HELLO_OR_VERSION_SELECT):
            return self._on_hello(msg)
        if isinstance(msg, VersionSelect) and state in (
            _S.AWAIT_VERSION_SELECT,
            _S.AWAIT_HELLO_OR_VERSION_SELECT,
        ):
            return self._on_version_select(msg)
        if isinstance(msg, OriginatorSyn) and state is _S.AWAIT_ORIGINATOR_SYN:
            self.peer_filter = msg.filter
            self.state = _S.AWAIT_ORIGINATOR_ACK
            return self._send(ResponderSynAck(self.own_filter))
        if isinstance(msg, ResponderSynAck) and state is _S.AWAIT_RESPONDER_SYN_ACK:
            self.peer_filter = msg.filter
            self._finish()
            return self._send(OriginatorAck())
        if isinstance(msg, OriginatorAck) and state is _S.AWAIT_ORIGINATOR_ACK:
            return self._finish()
        self._fail(
            EC.UnexpectedHandshakeMessage,
            f"unexpected {type(msg).__name__} while in state {state.value}",
        )

    def tick(self, now: float) -> None:
        """Fail with PeerTimeout once ``now`` reaches the deadline."""
        if self.deadline is not None and now >= self.deadline:
            self._fail(
                EC.PeerTimeout,
                f"handshake not finished within {self.timeout} s (state {self.state.value})",
            )

    def reject_redundant(self) -> None:
        """Abort because the caller already has a connection to this peer.

        Sends ``drop_conn(redundant_connection)`` and fails with that code. Only
        meaningful before the handshake is done; afterwards the link carries
        node messages and must be unpeered instead.
        """
        if self.state is _S.DONE or self.state is _S.FAILED:
            raise ProtocolError(
                f"cannot reject a handshake in state {self.state.value}",
                code=EC.InvalidHandshakeState,
            )
        self._drop(EC.RedundantConnection, "redundant connection")

    # -- transitions (each returns None: what it sends goes to ``_out``) ---------------

    def _on_hello(self, msg: Hello) -> None:
        self.peer_id = msg.sender
        self.peer_versions = (msg.min_version, msg.max_version)
        lo, hi = self.supported_versions
        if msg.min_version > hi or msg.max_version < lo or msg.min_version > msg.max_version:
            return self._drop(
                EC.PeerIncompatible,
                f"version range not supported: peer offers {msg.min_version}-"
                f"{msg.max_version}, we support {lo}-{hi}",
            )
        if msg.sender == self.own_id:
            return self._drop(EC.InvalidPeeringRequest, "cannot peer with itself")
        if self.own_id < msg.sender:
            self.is_originator = True
            if self._is_redundant is not None and self._is_redundant(msg.sender):
                return self._drop(EC.RedundantConnection, "redundant connection")
            self.version = min(hi, msg.max_version)
            self.state = _S.AWAIT_RESPONDER_SYN_ACK
            return self._send(
                VersionSelect(self.own_id, self.version), OriginatorSyn(self.own_filter)
            )
        self.is_originator = False
        self.state = _S.AWAIT_VERSION_SELECT
        if not self._sent_hello:
            self._send(self._hello())

    def _on_version_select(self, msg: VersionSelect) -> None:
        if self.peer_id is not None and msg.sender != self.peer_id:
            return self._fail(
                EC.PeerInvalid,
                f"version_select from {msg.sender.hex()} after hello from {self.peer_id.hex()}",
            )
        if msg.sender == self.own_id:
            return self._drop(EC.InvalidPeeringRequest, "cannot peer with itself")
        self.peer_id = msg.sender
        self.is_originator = False
        lo, hi = self.supported_versions
        if not lo <= msg.version <= hi:
            return self._drop(
                EC.PeerIncompatible,
                f"selected version {msg.version} not supported, we support {lo}-{hi}",
            )
        self.version = msg.version
        self.state = _S.AWAIT_ORIGINATOR_SYN

    def _on_drop_conn(self, msg: DropConn) -> None:
        if self.peer_id is None:
            self.peer_id = msg.sender
        try:
            code = EC(msg.code)
        except ValueError:
            code = EC.Unspecified
        self.dropped_by_peer = True
        return self._fail(code, f"peer dropped the connection: {msg.description}")

    # -- helpers ------------------------------------------------------------------

    def _hello(self) -> Hello:
        self._sent_hello = True
        lo, hi = self.supported_versions
        return Hello(self.own_id, lo, hi)

    def _send(self, *msgs: HandshakeMessage) -> None:
        self._out += [encode_frame(encode_handshake(m)) for m in msgs]

    def _finish(self) -> None:
        self.state = _S.DONE
        self.deadline = None

    def _fail(self, code: EC, message: str) -> None:
        self.state = _S.FAILED
        self.deadline = None
        self.error_code = code
        self.error_message = message

    def _drop(self, code: EC, message: str) -> None:
        """Fail and tell the peer why, with drop_conn."""
        self._send(DropConn(self.own_id, int(code), message))
        self._fail(code, message)


def refusal(own_id: bytes, code: EC, message: str) -> bytes:
    """The bytes that turn a peer away before any handshake: one framed ``drop_conn``
    naming ``code`` and why (what a TLS-only listener answers a plain-text peer, in the
    peer's own language, before it closes)."""
    return encode_frame(encode_handshake(DropConn(own_id, int(code), message)))
