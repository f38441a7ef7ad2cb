"""The messages of Broker's wire protocol version 1, byte for byte.

Two families share one connection. During the handshake (phases 1 and 2) a
frame body is a one-byte message type and then the fields of a small fixed
message (:class:`Hello`, :class:`Probe`, ...). Afterwards (phase 3) a body is a
*node message envelope* with no type byte in front: sender id, receiver id, u8
type, u16 TTL, u16 topic length, topic, payload.

Envelopes are on the hot path and are forwarded far more often than they are
interpreted, so :class:`NodeMessage` keeps the received body as it is and
slices header fields out on demand, and :func:`with_sender_and_ttl` forwards a
message by patching 18 header bytes in one copy, never touching the payload.
Payloads (values, store commands) are decoded elsewhere.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from broker_spark.data.varbyte import encode_string, encode_varbyte, read_raw_string, read_varbyte
from broker_spark.errors import EC, DecodeError, EncodeError, ProtocolError

# -- constants ------------------------------------------------------------------

#: "ZEEK" in ASCII: the first field of hello, probe, version_select and drop_conn.
MAGIC = 0x5A45454B

#: Size of an endpoint id (a UUID, 16 raw bytes).
ID_SIZE = 16

#: The all-zero receiver of a broadcast envelope.
BROADCAST = bytes(ID_SIZE)

#: TTL Broker puts on every message it originates.
DEFAULT_TTL = 16

#: The reserved topic of ping, pong and routing_update envelopes.
PING_TOPIC = "<$>"
ROUTING_UPDATE_TOPIC = PING_TOPIC

#: The goodbye token: ``BYE`` then 8 bytes that identify the farewell. Broker
#: copies its 64-bit bye id in host byte order (little-endian on the platforms
#: Zeek runs on); the receiver treats the token as opaque and only echoes it.
BYE_PREFIX = b"BYE"
BYE_TOKEN_SIZE = 11

#: Default limit on the number of prefixes in a received filter.
MAX_FILTER_PREFIXES = 1 << 16

#: A topic's length is a u16 in the envelope, so prefixes can be no longer.
MAX_TOPIC_SIZE = 0xFFFF

#: Size of the fixed envelope header: 16 + 16 + 1 + 2 + 2.
ENVELOPE_HEADER_SIZE = 37


class MessageType(enum.IntEnum):
    """Type byte of a handshake body, and type field of an envelope (1 to 5)."""

    DATA = 1
    COMMAND = 2
    ROUTING_UPDATE = 3
    PING = 4
    PONG = 5
    HELLO = 6
    PROBE = 7
    VERSION_SELECT = 8
    DROP_CONN = 9
    ORIGINATOR_SYN = 10
    RESPONDER_SYN_ACK = 11
    ORIGINATOR_ACK = 12


# Plain ints for hot paths (comparisons against an IntEnum member cost more).
MSG_DATA = 1
MSG_COMMAND = 2
MSG_ROUTING_UPDATE = 3
MSG_PING = 4
MSG_PONG = 5
MSG_HELLO = 6
MSG_PROBE = 7
MSG_VERSION_SELECT = 8
MSG_DROP_CONN = 9
MSG_ORIGINATOR_SYN = 10
MSG_RESPONDER_SYN_ACK = 11
MSG_ORIGINATOR_ACK = 12

# -- filters --------------------------------------------------------------------


def encode_filter(prefixes: Iterable[str]) -> bytes:
    """Encode topic prefixes as varbyte n, then n strings."""
    items = [p.encode("utf-8") for p in prefixes]
    parts = [encode_varbyte(len(items))]
    for raw in items:
        if len(raw) > MAX_TOPIC_SIZE:
            raise EncodeError(f"filter prefix of {len(raw)} bytes exceeds {MAX_TOPIC_SIZE}")
        parts.append(encode_string(raw))
    return b"".join(parts)


def read_filter(
    buf: bytes | memoryview, pos: int, max_count: int = MAX_FILTER_PREFIXES
) -> tuple[tuple[str, ...], int]:
    """Read a filter at ``pos``; return ``(prefixes, pos_after)``.

    The count is checked against ``max_count`` and against the bytes left (every
    prefix takes at least its length byte) before anything is allocated.
    """
    start = pos
    count, pos = read_varbyte(buf, pos)
    if count > max_count:
        raise DecodeError(f"filter at offset {start} has {count} prefixes, limit {max_count}")
    if count > len(buf) - pos:
        raise DecodeError(f"truncated filter at offset {start}: {count} prefixes announced")
    out = []
    for _ in range(count):
        raw, pos = read_raw_string(buf, pos, MAX_TOPIC_SIZE)
        try:
            out.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise DecodeError(f"invalid UTF-8 in filter prefix before offset {pos}") from None
    return tuple(out), pos


def decode_filter(buf: bytes | memoryview, max_count: int = MAX_FILTER_PREFIXES) -> tuple[str, ...]:
    """Decode a whole buffer holding exactly one filter (a routing_update payload)."""
    prefixes, pos = read_filter(buf, 0, max_count)
    if pos != len(buf):
        raise DecodeError(f"{len(buf) - pos} trailing bytes after filter at offset {pos}")
    return prefixes


# -- handshake messages (phases 1 and 2) --------------------------------------


def _check_id(name: str, value: bytes) -> None:
    if not isinstance(value, bytes) or len(value) != ID_SIZE:
        raise EncodeError(f"{name} must be {ID_SIZE} bytes, got {value!r}")


def _check_u8(name: str, value: int) -> None:
    if not 0 <= value <= 0xFF:
        raise EncodeError(f"{name} must fit one byte, got {value}")


@dataclass(frozen=True, slots=True)
class Hello:
    """Opens phase 1: who the sender is and which protocol versions it speaks."""

    sender: bytes
    min_version: int
    max_version: int


@dataclass(frozen=True, slots=True)
class Probe:
    """Sent first by the accepting side, only to surface connection errors early."""


@dataclass(frozen=True, slots=True)
class VersionSelect:
    """The originator's choice of protocol version; ends phase 1."""

    sender: bytes
    version: int


@dataclass(frozen=True, slots=True)
class DropConn:
    """Aborts the handshake with a Broker error code (an ``EC`` value) and a reason."""

    sender: bytes
    code: int
    description: str


@dataclass(frozen=True, slots=True)
class OriginatorSyn:
    """The originator's filter (topic prefixes it subscribes to)."""

    filter: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "filter", tuple(self.filter))


@dataclass(frozen=True, slots=True)
class ResponderSynAck:
    """The responder's filter, answering :class:`OriginatorSyn`."""

    filter: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "filter", tuple(self.filter))


@dataclass(frozen=True, slots=True)
class OriginatorAck:
    """Concludes the handshake; afterwards only envelopes travel."""


HandshakeMessage = (
    Hello | Probe | VersionSelect | DropConn | OriginatorSyn | ResponderSynAck | OriginatorAck
)

_HELLO = struct.Struct(">BI16sBB")
_PROBE = struct.Struct(">BI")
_VERSION_SELECT = struct.Struct(">BI16sB")
_DROP_CONN = struct.Struct(">BI16sB")  # then the description string
_PROBE_BODY = _PROBE.pack(MSG_PROBE, MAGIC)
_ACK_BODY = bytes((MSG_ORIGINATOR_ACK,))


def encode_handshake(msg: HandshakeMessage) -> bytes:
    """Encode a handshake message as a frame body (type byte first)."""
    if isinstance(msg, Hello):
        _check_id("hello sender", msg.sender)
        _check_u8("min_version", msg.min_version)
        _check_u8("max_version", msg.max_version)
        return _HELLO.pack(MSG_HELLO, MAGIC, msg.sender, msg.min_version, msg.max_version)
    if isinstance(msg, Probe):
        return _PROBE_BODY
    if isinstance(msg, VersionSelect):
        _check_id("version_select sender", msg.sender)
        _check_u8("version", msg.version)
        return _VERSION_SELECT.pack(MSG_VERSION_SELECT, MAGIC, msg.sender, msg.version)
    if isinstance(msg, DropConn):
        _check_id("drop_conn sender", msg.sender)
        _check_u8("drop_conn code", int(msg.code))
        head = _DROP_CONN.pack(MSG_DROP_CONN, MAGIC, msg.sender, int(msg.code))
        return head + encode_string(msg.description)
    if isinstance(msg, OriginatorSyn):
        return bytes((MSG_ORIGINATOR_SYN,)) + encode_filter(msg.filter)
    if isinstance(msg, ResponderSynAck):
        return bytes((MSG_RESPONDER_SYN_ACK,)) + encode_filter(msg.filter)
    if isinstance(msg, OriginatorAck):
        return _ACK_BODY
    raise EncodeError(f"not a handshake message: {msg!r}")


def _need(body: bytes | memoryview, size: int, what: str) -> None:
    if len(body) < size:
        raise DecodeError(f"truncated {what}: {len(body)} bytes, need at least {size}")


def _exact(body: bytes | memoryview, pos: int, what: str) -> None:
    if pos != len(body):
        raise DecodeError(f"{len(body) - pos} trailing bytes after {what} at offset {pos}")


def _check_magic(magic: int, what: str) -> None:
    if magic != MAGIC:
        raise ProtocolError(
            f"wrong magic number 0x{magic:08x} in {what} (expected 0x{MAGIC:08x})",
            code=EC.WrongMagicNumber,
        )


def decode_handshake(body: bytes | memoryview) -> HandshakeMessage:
    """Decode a handshake frame body.

    Raises :class:`DecodeError` for truncated or oversized bodies and for a type
    byte that is not a handshake message, and :class:`ProtocolError` with code
    ``EC.WrongMagicNumber`` when the magic number is not "ZEEK".
    """
    if not body:
        raise DecodeError("empty handshake message")
    kind = body[0]
    if MSG_HELLO <= kind <= MSG_DROP_CONN and len(body) >= 5:
        # The magic comes first: a peer that is not Broker at all is named as such.
        _check_magic(_PROBE.unpack_from(body)[1], MessageType(kind).name.lower())
    if kind == MSG_HELLO:
        _need(body, _HELLO.size, "hello")
        _exact(body, _HELLO.size, "hello")
        _, _, sender, lo, hi = _HELLO.unpack_from(body)
        return Hello(sender, lo, hi)
    if kind == MSG_PROBE:
        _need(body, _PROBE.size, "probe")
        _exact(body, _PROBE.size, "probe")
        return Probe()
    if kind == MSG_VERSION_SELECT:
        _need(body, _VERSION_SELECT.size, "version_select")
        _exact(body, _VERSION_SELECT.size, "version_select")
        _, _, sender, version = _VERSION_SELECT.unpack_from(body)
        return VersionSelect(sender, version)
    if kind == MSG_DROP_CONN:
        _need(body, _DROP_CONN.size, "drop_conn")
        _, _, sender, code = _DROP_CONN.unpack_from(body)
        raw, pos = read_raw_string(body, _DROP_CONN.size)
        _exact(body, pos, "drop_conn")
        # The description is diagnostic text; a peer's bad UTF-8 must not hide its code.
        return DropConn(sender, code, raw.decode("utf-8", "replace"))
    if kind in (MSG_ORIGINATOR_SYN, MSG_RESPONDER_SYN_ACK):
        prefixes, pos = read_filter(body, 1)
        _exact(body, pos, "filter")
        return OriginatorSyn(prefixes) if kind == MSG_ORIGINATOR_SYN else ResponderSynAck(prefixes)
    if kind == MSG_ORIGINATOR_ACK:
        _exact(body, 1, "originator_ack")
        return OriginatorAck()
    raise DecodeError(f"unknown handshake message type {kind}")


# -- node message envelopes (phase 3) -----------------------------------------

_HEADER = struct.Struct(">16s16sBHH")
_pack_header = _HEADER.pack
_U16 = struct.Struct(">H")
_pack_u16 = _U16.pack


class NodeMessage:
    """A received envelope: the body as it arrived, with header fields on demand.

    Only the topic is decoded up front (every receiver needs it to match
    filters, and it validates the envelope); the ids, type, TTL and payload are
    sliced out of ``body`` when asked for. ``payload_offset`` lets a payload
    decoder read straight from ``body`` without copying.
    """

    __slots__ = ("body", "topic", "payload_offset")

    body: bytes
    topic: str
    payload_offset: int

    def __init__(self, body: bytes, topic: str, payload_offset: int) -> None:
        self.body = body
        self.topic = topic
        self.payload_offset = payload_offset

    @property
    def sender(self) -> bytes:
        return self.body[0:16]

    @property
    def receiver(self) -> bytes:
        return self.body[16:32]

    @property
    def is_broadcast(self) -> bool:
        """True when the receiver is all zeros."""
        return self.body.startswith(BROADCAST, 16)

    @property
    def msg_type(self) -> int:
        return self.body[32]

    @property
    def ttl(self) -> int:
        body = self.body
        return (body[33] << 8) | body[34]

    @property
    def payload(self) -> memoryview:
        """The payload without copying (a read-only view into ``body``)."""
        return memoryview(self.body)[self.payload_offset :]

    @property
    def payload_bytes(self) -> bytes:
        """The payload as a bytes copy."""
        return self.body[self.payload_offset :]

    def with_sender_and_ttl(self, sender: bytes, ttl: int) -> bytes:
        """This envelope's body, re-addressed from ``sender`` with ``ttl``."""
        return with_sender_and_ttl(self.body, sender, ttl)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NodeMessage):
            return self.body == other.body
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.body)

    def __repr__(self) -> str:
        return (
            f"NodeMessage(type={self.msg_type}, sender={self.sender.hex()}, "
            f"receiver={self.receiver.hex()}, ttl={self.ttl}, topic={self.topic!r}, "
            f"payload={len(self.body) - self.payload_offset} bytes)"
        )


def encode_node_message(
    sender: bytes,
    receiver: bytes,
    msg_type: int,
    ttl: int,
    topic: str,
    payload: bytes | bytearray | memoryview,
) -> bytes:
    """Encode an envelope body (no type byte in front, unlike handshake bodies)."""
    raw_topic = topic.encode("utf-8")
    try:
        header = _pack_header(sender, receiver, msg_type, ttl, len(raw_topic))
    except struct.error:
        header = b""
    if (
        len(header) != ENVELOPE_HEADER_SIZE
        or len(sender) != ID_SIZE
        or len(receiver) != ID_SIZE
        or not MSG_DATA <= msg_type <= MSG_PONG
    ):
        raise EncodeError(
            f"invalid envelope fields: sender={sender!r}, receiver={receiver!r}, "
            f"type={msg_type}, ttl={ttl}, topic of {len(raw_topic)} bytes"
        )
    return b"".join((header, raw_topic, payload))


def decode_node_message(body: bytes | bytearray | memoryview) -> NodeMessage:
    """Validate an envelope body and wrap it; the payload is not interpreted."""
    if type(body) is not bytes:
        body = bytes(body)
    size = len(body)
    if size < ENVELOPE_HEADER_SIZE:
        raise DecodeError(f"truncated envelope: {size} bytes, header needs {ENVELOPE_HEADER_SIZE}")
    kind = body[32]
    if not MSG_DATA <= kind <= MSG_PONG:
        raise DecodeError(f"invalid envelope message type {kind} at offset 32")
    end = ENVELOPE_HEADER_SIZE + ((body[35] << 8) | body[36])
    if end > size:
        raise DecodeError(
            f"truncated envelope topic at offset {ENVELOPE_HEADER_SIZE}: "
            f"needs {end - ENVELOPE_HEADER_SIZE} bytes, have {size - ENVELOPE_HEADER_SIZE}"
        )
    try:
        topic = body[ENVELOPE_HEADER_SIZE:end].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"invalid UTF-8 in envelope topic: {exc.reason}") from None
    return NodeMessage(body, topic, end)


def with_sender_and_ttl(body: bytes | bytearray | memoryview, sender: bytes, ttl: int) -> bytes:
    """Forward an envelope: replace sender and TTL, copy everything else as is.

    One copy of the body and no look at the payload; this is all a hop does.
    """
    if len(body) < ENVELOPE_HEADER_SIZE:
        raise DecodeError(f"truncated envelope: {len(body)} bytes")
    if len(sender) != ID_SIZE:
        raise EncodeError(f"sender must be {ID_SIZE} bytes, got {sender!r}")
    if not 0 <= ttl <= 0xFFFF:
        raise EncodeError(f"ttl must fit 16 bits, got {ttl}")
    view = memoryview(body)
    return b"".join((sender, view[16:33], _pack_u16(ttl), view[35:]))


# -- ping, pong, goodbye, routing updates ---------------------------------------


def bye_token(bye_id: int) -> bytes:
    """The goodbye ping payload: ``BYE`` and the 64-bit id, little-endian as Broker sends it."""
    return BYE_PREFIX + bye_id.to_bytes(8, "little")


def is_bye_token(payload: bytes | memoryview) -> bool:
    """True for a payload shaped like a goodbye token (``BYE`` + 8 bytes)."""
    return len(payload) == BYE_TOKEN_SIZE and bytes(payload[:3]) == BYE_PREFIX


def encode_ping(sender: bytes, receiver: bytes, payload: bytes, ttl: int = DEFAULT_TTL) -> bytes:
    """A ping envelope on ``<$>``; the peer echoes ``payload`` in a pong."""
    return encode_node_message(sender, receiver, MSG_PING, ttl, PING_TOPIC, payload)


def encode_pong(
    sender: bytes, receiver: bytes, payload: bytes | memoryview, ttl: int = DEFAULT_TTL
) -> bytes:
    """A pong envelope on ``<$>`` carrying a ping's payload back."""
    return encode_node_message(sender, receiver, MSG_PONG, ttl, PING_TOPIC, payload)


def encode_pong_for(ping: NodeMessage, own_id: bytes, ttl: int = DEFAULT_TTL) -> bytes:
    """Answer a received ping: from us, to its sender, with the same payload."""
    return encode_pong(own_id, ping.sender, ping.payload, ttl)


def encode_routing_update(
    sender: bytes, receiver: bytes, prefixes: Iterable[str], ttl: int = DEFAULT_TTL
) -> bytes:
    """A routing_update envelope on ``<$>`` carrying the sender's complete new filter."""
    return encode_node_message(
        sender, receiver, MSG_ROUTING_UPDATE, ttl, ROUTING_UPDATE_TOPIC, encode_filter(prefixes)
    )
