"""The messages of wire protocol version 2: multi-hop routing between broker_spark endpoints.

Version 2 is what two broker_spark endpoints speak once their hellos both
offer it (WIRE.md, "Version 2"). A v2 link still carries version 1's
envelopes, so every v2 body starts with the same 33 bytes as a v1 envelope --
16-byte sender (the last hop), 16-byte receiver (the next hop), u8 type -- and
the type byte alone tells the two families apart: v1 uses 1 to 5, v2 uses
``0x10`` to ``0x13``. After that prefix:

- ``DATA_V2`` / ``COMMAND_V2``: u16 TTL, u16 topic length, topic (as in v1),
  16-byte publisher id, varbyte length + multipath (see ``multipath.py``),
  payload (the rest of the body, never interpreted while forwarding).
- ``SUBSCRIPTION``: varbyte n, then n hops of (16-byte id, u64 timestamp) in
  travel order (the origin and its Lamport time first, the last forwarder
  last), then the origin's filter (varbyte n, n strings).
- ``REVOCATION``: 16-byte revoker, u64 revoker timestamp, 16-byte hop (the
  lost neighbour), varbyte n, n 16-byte ids of endpoints asked to re-flood.

Integers are big-endian; docs/protocol-v2.md has worked examples in hex.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker_spark.data.varbyte import encode_varbyte, read_varbyte
from broker_spark.errors import DecodeError, EncodeError
from broker_spark.protocol.wire_messages import (
    DEFAULT_TTL,
    ID_SIZE,
    MAX_TOPIC_SIZE,
    encode_filter,
    read_filter,
)

__all__ = [
    "COMMAND_V2",
    "DATA_V2",
    "DEFAULT_TTL",
    "HEADER_SIZE",
    "ID_SIZE",
    "MAX_PATH_LEN",
    "REVOCATION",
    "SUBSCRIPTION",
    "V2_TYPES",
    "PathRevocation",
    "RoutedMessage",
    "SubscriptionUpdate",
    "V2Message",
    "decode_v2",
    "encode_v2",
    "encode_v2_parts",
    "is_v2_body",
]

DATA_V2 = 0x10
COMMAND_V2 = 0x11
SUBSCRIPTION = 0x12
REVOCATION = 0x13
V2_TYPES = frozenset((DATA_V2, COMMAND_V2, SUBSCRIPTION, REVOCATION))

#: sender, receiver, type: the prefix shared with version 1 envelopes.
HEADER_SIZE = 2 * ID_SIZE + 1

#: Longest path a subscription may record. Paths grow by one id per hop and a
#: flood never revisits an endpoint, so this is also the largest network
#: diameter version 2 supports; it bounds work and memory per message.
MAX_PATH_LEN = 255

MAX_U64 = (1 << 64) - 1

_PREFIX = struct.Struct(">16s16sB")
_ROUTED = struct.Struct(">HH")
_HOP = struct.Struct(">16sQ")
_REVOKE = struct.Struct(">16sQ16s")


@dataclass(frozen=True, slots=True)
class SubscriptionUpdate:
    """A flooded filter: who published it, when (its Lamport time), and the path so far.

    ``path`` is in travel order, origin first; ``timestamps`` runs parallel to
    it and holds each hop's clock when it forwarded (the origin's entry is the
    update's timestamp). Together they are the vector timestamp that versions
    the path, so a revocation can tell paths from before a link broke from
    paths learned after it healed.
    """

    path: tuple[bytes, ...]
    timestamps: tuple[int, ...]
    filter: tuple[str, ...]

    @property
    def origin(self) -> bytes:
        return self.path[0]

    @property
    def timestamp(self) -> int:
        return self.timestamps[0]


@dataclass(frozen=True, slots=True)
class PathRevocation:
    """``revoker`` lost its link to ``hop`` at its Lamport time ``timestamp``.

    Receivers drop every path that uses that link and was recorded before
    ``timestamp``. ``refresh`` names endpoints whose paths the revoker lost:
    each re-floods its subscription so that everyone relearns shortest paths
    to it (removing paths never teaches anyone a new one).
    """

    revoker: bytes
    timestamp: int
    hop: bytes
    refresh: tuple[bytes, ...] = ()


@dataclass(frozen=True, slots=True)
class RoutedMessage:
    """A data or command message on its way along a multipath.

    ``multipath`` is the encoded subtree rooted at the endpoint receiving this
    message; ``payload`` is opaque here and forwarded byte for byte.
    """

    kind: int
    ttl: int
    topic: str
    publisher: bytes
    multipath: bytes
    payload: bytes


V2Message = SubscriptionUpdate | PathRevocation | RoutedMessage


def is_v2_body(body: bytes | memoryview) -> bool:
    """True when a phase-3 body is a version 2 message (type byte at offset 32)."""
    return len(body) > 2 * ID_SIZE and body[2 * ID_SIZE] in V2_TYPES


# -- encoding -----------------------------------------------------------------


def _check_id(what: str, value: object) -> None:
    if not isinstance(value, bytes) or len(value) != ID_SIZE:
        raise EncodeError(f"{what} must be {ID_SIZE} bytes, got {value!r}")


def _check_u64(what: str, value: int) -> None:
    if not 0 <= value <= MAX_U64:
        raise EncodeError(f"{what} must fit 64 bits, got {value}")


def _encode_subscription(msg: SubscriptionUpdate) -> bytes:
    n = len(msg.path)
    if not 1 <= n <= MAX_PATH_LEN or len(msg.timestamps) != n:
        raise EncodeError(
            f"subscription path needs 1 to {MAX_PATH_LEN} hops and one timestamp each, "
            f"got {n} hops and {len(msg.timestamps)} timestamps"
        )
    parts = [encode_varbyte(n)]
    for hop, ts in zip(msg.path, msg.timestamps, strict=True):
        _check_id("path hop", hop)
        _check_u64("timestamp", ts)
        parts.append(_HOP.pack(hop, ts))
    parts.append(encode_filter(msg.filter))
    return b"".join(parts)


def _encode_revocation(msg: PathRevocation) -> bytes:
    _check_id("revoker", msg.revoker)
    _check_id("revoked hop", msg.hop)
    _check_u64("revocation timestamp", msg.timestamp)
    for who in msg.refresh:
        _check_id("refresh id", who)
    return b"".join(
        (
            _REVOKE.pack(msg.revoker, msg.timestamp, msg.hop),
            encode_varbyte(len(msg.refresh)),
            *msg.refresh,
        )
    )


def _encode_routed_header(msg: RoutedMessage) -> bytes:
    if msg.kind not in (DATA_V2, COMMAND_V2):
        raise EncodeError(f"routed message kind must be data or command, got {msg.kind}")
    if not 0 <= msg.ttl <= 0xFFFF:
        raise EncodeError(f"ttl must fit 16 bits, got {msg.ttl}")
    _check_id("publisher", msg.publisher)
    topic = msg.topic.encode("utf-8")
    if len(topic) > MAX_TOPIC_SIZE:
        raise EncodeError(f"topic of {len(topic)} bytes exceeds {MAX_TOPIC_SIZE}")
    return b"".join(
        (
            _ROUTED.pack(msg.ttl, len(topic)),
            topic,
            msg.publisher,
            encode_varbyte(len(msg.multipath)),
            msg.multipath,
        )
    )


def encode_v2_parts(sender: bytes, receiver: bytes, msg: V2Message) -> tuple[bytes, bytes]:
    """Encode ``msg`` as (header, payload); only routed messages have a payload.

    Keeping the two apart lets a forwarder hand both buffers to the transport
    without ever copying or looking at the payload.
    """
    _check_id("sender", sender)
    _check_id("receiver", receiver)
    if isinstance(msg, RoutedMessage):
        return _PREFIX.pack(sender, receiver, msg.kind) + _encode_routed_header(msg), msg.payload
    if isinstance(msg, SubscriptionUpdate):
        return _PREFIX.pack(sender, receiver, SUBSCRIPTION) + _encode_subscription(msg), b""
    if isinstance(msg, PathRevocation):
        return _PREFIX.pack(sender, receiver, REVOCATION) + _encode_revocation(msg), b""
    raise EncodeError(f"not a version 2 message: {msg!r}")


def encode_v2(sender: bytes, receiver: bytes, msg: V2Message) -> bytes:
    """Encode ``msg`` as one phase-3 frame body sent from ``sender`` to ``receiver``."""
    header, payload = encode_v2_parts(sender, receiver, msg)
    return header + payload if payload else header


# -- decoding -----------------------------------------------------------------


def _take(buf: bytes, pos: int, size: int, what: str) -> int:
    end = pos + size
    if end > len(buf):
        raise DecodeError(f"truncated {what} at offset {pos}: need {size} bytes")
    return end


def _decode_subscription(buf: bytes, pos: int) -> SubscriptionUpdate:
    start = pos
    n, pos = read_varbyte(buf, pos)
    if not 1 <= n <= MAX_PATH_LEN:
        raise DecodeError(
            f"subscription path of {n} hops at offset {start}, need 1..{MAX_PATH_LEN}"
        )
    _take(buf, pos, n * _HOP.size, "subscription path")
    path = []
    stamps = []
    for _ in range(n):
        hop, ts = _HOP.unpack_from(buf, pos)
        path.append(hop)
        stamps.append(ts)
        pos += _HOP.size
    prefixes, pos = read_filter(buf, pos)
    if pos != len(buf):
        raise DecodeError(f"{len(buf) - pos} trailing bytes after subscription at offset {pos}")
    return SubscriptionUpdate(tuple(path), tuple(stamps), prefixes)


def _decode_revocation(buf: bytes, pos: int) -> PathRevocation:
    _take(buf, pos, _REVOKE.size, "revocation")
    revoker, ts, hop = _REVOKE.unpack_from(buf, pos)
    pos += _REVOKE.size
    count_at = pos
    n, pos = read_varbyte(buf, pos)
    if pos + n * ID_SIZE != len(buf):
        raise DecodeError(
            f"revocation at offset {count_at} lists {n} ids but {len(buf) - pos} bytes follow"
        )
    refresh = tuple(buf[p : p + ID_SIZE] for p in range(pos, len(buf), ID_SIZE))
    return PathRevocation(revoker, ts, hop, refresh)


def _decode_routed(buf: bytes, pos: int, kind: int) -> RoutedMessage:
    _take(buf, pos, _ROUTED.size, "routed message header")
    ttl, topic_len = _ROUTED.unpack_from(buf, pos)
    pos += _ROUTED.size
    end = _take(buf, pos, topic_len, "topic")
    try:
        topic = buf[pos:end].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"invalid UTF-8 in topic at offset {pos}: {exc.reason}") from None
    pos = end
    end = _take(buf, pos, ID_SIZE, "publisher id")
    publisher = buf[pos:end]
    pos = end
    mp_len, pos = read_varbyte(buf, end)
    end = _take(buf, pos, mp_len, "multipath")
    return RoutedMessage(kind, ttl, topic, publisher, buf[pos:end], buf[end:])


def decode_v2(body: bytes | bytearray | memoryview) -> tuple[bytes, bytes, V2Message]:
    """Decode a version 2 body into ``(sender, receiver, message)``.

    Raises :class:`DecodeError` (only) for anything malformed. The multipath of
    a routed message is returned as bytes and checked when a hop splits it.
    """
    buf = body if type(body) is bytes else bytes(body)
    if len(buf) < HEADER_SIZE:
        raise DecodeError(f"truncated v2 message: {len(buf)} bytes, header needs {HEADER_SIZE}")
    sender, receiver, kind = _PREFIX.unpack_from(buf, 0)
    if kind == SUBSCRIPTION:
        msg: V2Message = _decode_subscription(buf, HEADER_SIZE)
    elif kind == REVOCATION:
        msg = _decode_revocation(buf, HEADER_SIZE)
    elif kind in (DATA_V2, COMMAND_V2):
        msg = _decode_routed(buf, HEADER_SIZE, kind)
    else:
        raise DecodeError(f"unknown v2 message type 0x{kind:02x} at offset {2 * ID_SIZE}")
    return sender, receiver, msg
