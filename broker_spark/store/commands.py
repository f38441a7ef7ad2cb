"""Broker's store commands (``internal_command``) and their exact wire encoding.

Masters and clones talk in these commands on ``<name>/<$>/data/master`` and
``<name>/<$>/data/clone``. To let a clone of ours follow a master inside a real
Zeek (and the other way round) they must be Broker's bytes exactly, so the
layouts below were read off a recorded Broker session (see ``docs/stores.md``):

``u64 seq | sender entity | receiver entity | u8 variant index | fields``

An entity id is the 16-byte endpoint id then a u64 object id. Field encodings:
``data`` is a tagged Broker value, an optional is ``u8 0/1`` then the bare value,
a timespan is a bare i64 of nanoseconds, ``init_type`` is the u8 type tag,
``req_id`` and sequence numbers are u64, ``heartbeat_interval`` a u16, a vector
of sequence numbers a varbyte count then u64s, and a snapshot a varbyte count
then that many (key, value) pairs of tagged values (no table tag in front).

Expiries are kept as integer nanoseconds (a timespan) in these objects, which
is what the wire carries and what the store arithmetic needs.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from dataclasses import dataclass, field
from typing import Any

from broker_spark.data.binary import DEFAULT_LIMITS, DecodeLimits, decode_from, encode_into
from broker_spark.data.types import DataType
from broker_spark.data.varbyte import encode_varbyte, read_varbyte
from broker_spark.errors import DecodeError, EncodeError

__all__ = [
    "ACTIONS",
    "MAX_NACK_SEQS",
    "MAX_SNAPSHOT_ENTRIES",
    "NIL",
    "Action",
    "AckCloneCommand",
    "AddCommand",
    "AttachWriterCommand",
    "ClearCommand",
    "Command",
    "CumulativeAckCommand",
    "EntityId",
    "EraseCommand",
    "ExpireCommand",
    "InternalCommand",
    "KeepaliveCommand",
    "NackCommand",
    "PutCommand",
    "PutUniqueCommand",
    "PutUniqueResultCommand",
    "RetransmitFailedCommand",
    "SubtractCommand",
    "clone_topic",
    "decode_command",
    "encode_command",
    "master_topic",
    "unicast_target",
    "with_publisher",
]

MAX_NACK_SEQS = 65536  # matches the channel's bound on one nack
MAX_SNAPSHOT_ENTRIES = 1 << 24

_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_U16 = struct.Struct(">H")
_ENTITY = struct.Struct(">16sQ")
_HEAD_SIZE = 57  # u64 seq, two entities of 24 bytes, u8 variant index
_MAX_U64 = (1 << 64) - 1


def master_topic(name: str) -> str:
    """Where a store's master listens (clones and writers send here)."""
    return f"{name}/<$>/data/master"


def clone_topic(name: str) -> str:
    """Where a store's clones listen (the master sends here)."""
    return f"{name}/<$>/data/clone"


@dataclass(frozen=True, slots=True)
class EntityId:
    """An endpoint id plus an object id: names one store actor or requester."""

    endpoint: bytes
    object: int
    #: The 24 bytes on the wire, computed once (entities are few and long-lived).
    packed: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.endpoint, bytes) or len(self.endpoint) != 16:
            raise ValueError(f"entity endpoint must be 16 bytes, got {self.endpoint!r}")
        if not isinstance(self.object, int) or not 0 <= self.object <= _MAX_U64:
            raise ValueError(f"entity object id must be a u64, got {self.object!r}")
        object.__setattr__(self, "packed", _ENTITY.pack(self.endpoint, self.object))

    def __bool__(self) -> bool:
        """Valid (not nil): Broker's test is a non-zero endpoint id."""
        return self.endpoint != _ZERO_ID

    def endpoint_string(self) -> str:
        """The endpoint id as Broker prints it (a dashed UUID)."""
        return str(uuid.UUID(bytes=self.endpoint))

    def __repr__(self) -> str:
        return f"EntityId({self.endpoint.hex()}, {self.object})"


_ZERO_ID = bytes(16)
NIL = EntityId(_ZERO_ID, 0)

# Few entities talk to a store; decoding each one afresh would dominate small commands.
_ENTITY_CACHE_SIZE = 4096
_ENTITIES: dict[bytes, EntityId] = {bytes(24): NIL}


# -- actions (the payload of the channels) -------------------------------------


@dataclass(frozen=True, slots=True)
class PutCommand:
    key: Any
    value: Any
    expiry: int | None  # nanoseconds from the time the master applies it
    publisher: EntityId


@dataclass(frozen=True, slots=True)
class PutUniqueCommand:
    key: Any
    value: Any
    expiry: int | None
    who: EntityId  # the requester; the result comes back addressed to it
    req_id: int
    publisher: EntityId


@dataclass(frozen=True, slots=True)
class PutUniqueResultCommand:
    inserted: bool
    who: EntityId
    req_id: int
    publisher: EntityId


@dataclass(frozen=True, slots=True)
class EraseCommand:
    key: Any
    publisher: EntityId


@dataclass(frozen=True, slots=True)
class ExpireCommand:
    key: Any
    publisher: EntityId


@dataclass(frozen=True, slots=True)
class AddCommand:
    key: Any
    value: Any
    init_type: DataType  # what a missing key starts as
    expiry: int | None
    publisher: EntityId


@dataclass(frozen=True, slots=True)
class SubtractCommand:
    key: Any
    value: Any
    expiry: int | None
    publisher: EntityId


@dataclass(frozen=True, slots=True)
class ClearCommand:
    publisher: EntityId


# -- channel control -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AttachWriterCommand:
    """A writer's channel handshake to the master: events follow ``offset``."""

    offset: int
    heartbeat_interval: int


@dataclass(frozen=True, slots=True)
class KeepaliveCommand:
    """A producer's heartbeat carrying its latest sequence number."""

    seq: int


@dataclass(frozen=True, slots=True)
class CumulativeAckCommand:
    seq: int


@dataclass(frozen=True, slots=True)
class NackCommand:
    """Asks again for ``seqs``; ``(0,)`` asks for the handshake."""

    seqs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AckCloneCommand:
    """The master's handshake to a clone: the state as of ``offset`` (key, value pairs)."""

    offset: int
    heartbeat_interval: int
    snapshot: tuple[tuple[Any, Any], ...]


@dataclass(frozen=True, slots=True)
class RetransmitFailedCommand:
    seq: int


Action = (
    PutCommand
    | PutUniqueCommand
    | PutUniqueResultCommand
    | EraseCommand
    | ExpireCommand
    | AddCommand
    | SubtractCommand
    | ClearCommand
)
Command = (
    Action
    | AttachWriterCommand
    | KeepaliveCommand
    | CumulativeAckCommand
    | NackCommand
    | AckCloneCommand
    | RetransmitFailedCommand
)

_ORDER: tuple[type, ...] = (
    PutCommand,
    PutUniqueCommand,
    PutUniqueResultCommand,
    EraseCommand,
    ExpireCommand,
    AddCommand,
    SubtractCommand,
    ClearCommand,
    AttachWriterCommand,
    KeepaliveCommand,
    CumulativeAckCommand,
    NackCommand,
    AckCloneCommand,
    RetransmitFailedCommand,
)
_INDEX = {cls: i for i, cls in enumerate(_ORDER)}
ACTIONS: tuple[type, ...] = _ORDER[:8]


@dataclass(frozen=True, slots=True)
class InternalCommand:
    """One command message: sequence number, sender, receiver (NIL = broadcast), content."""

    seq: int
    sender: EntityId
    receiver: EntityId
    content: Command


def with_publisher(content: Action, publisher: EntityId) -> Action:
    """``content`` with a nil publisher replaced by ``publisher`` (the local store's id)."""
    current = getattr(content, "publisher", None)
    if current is None or current or not publisher:
        return content
    return dataclasses.replace(content, publisher=publisher)


def unicast_target(topic: str, cmd: InternalCommand) -> bytes | None:
    """The endpoint a command should be addressed to in its envelope, or None to broadcast.

    Broker broadcasts actions and keepalives on the store topic and sends the
    rest straight to the one endpoint concerned; events to the master stay
    broadcasts (only the master subscribes). A master's event with a receiver
    set is a retransmission for that clone.
    """
    if not cmd.receiver:
        return None
    content = cmd.content
    if isinstance(content, (AttachWriterCommand, KeepaliveCommand)):
        return None
    if isinstance(content, ACTIONS) and topic.endswith("/data/master"):
        return None
    return cmd.receiver.endpoint


# -- encoding --------------------------------------------------------------------


def _put_u64(value: int, out: bytearray, what: str) -> None:
    try:
        out += _U64.pack(value)
    except struct.error:
        raise EncodeError(f"{what} is not a u64: {value!r}") from None


def _put_entity(value: EntityId, out: bytearray) -> None:
    if not isinstance(value, EntityId):
        raise EncodeError(f"expected an EntityId, got {value!r}")
    out += value.packed


def _put_expiry(value: int | None, out: bytearray) -> None:
    if value is None:
        out.append(0)
        return
    out.append(1)
    try:
        out += _I64.pack(value)
    except struct.error:
        raise EncodeError(f"expiry is not an i64 of nanoseconds: {value!r}") from None


def encode_command(cmd: InternalCommand) -> bytes:
    """The command's bytes, as Broker writes them."""
    out = bytearray()
    _put_u64(cmd.seq, out, "sequence number")
    _put_entity(cmd.sender, out)
    _put_entity(cmd.receiver, out)
    c = cmd.content
    if type(c) is PutCommand and type(c.publisher) is EntityId:  # the bulk of all traffic
        out.append(0)
        encode_into(c.key, out)
        encode_into(c.value, out)
        _put_expiry(c.expiry, out)
        out += c.publisher.packed
        return bytes(out)
    index = _INDEX.get(type(c))
    if index is None:
        raise EncodeError(f"not a store command: {c!r}")
    out.append(index)
    if index == 0:  # put
        encode_into(c.key, out)
        encode_into(c.value, out)
        _put_expiry(c.expiry, out)
        _put_entity(c.publisher, out)
    elif index == 1:  # put_unique
        encode_into(c.key, out)
        encode_into(c.value, out)
        _put_expiry(c.expiry, out)
        _put_entity(c.who, out)
        _put_u64(c.req_id, out, "req_id")
        _put_entity(c.publisher, out)
    elif index == 2:  # put_unique_result
        out.append(1 if c.inserted else 0)
        _put_entity(c.who, out)
        _put_u64(c.req_id, out, "req_id")
        _put_entity(c.publisher, out)
    elif index in (3, 4):  # erase, expire
        encode_into(c.key, out)
        _put_entity(c.publisher, out)
    elif index == 5:  # add
        encode_into(c.key, out)
        encode_into(c.value, out)
        if not 0 <= int(c.init_type) <= 14:
            raise EncodeError(f"init_type is not a Broker type tag: {c.init_type!r}")
        out.append(int(c.init_type))
        _put_expiry(c.expiry, out)
        _put_entity(c.publisher, out)
    elif index == 6:  # subtract
        encode_into(c.key, out)
        encode_into(c.value, out)
        _put_expiry(c.expiry, out)
        _put_entity(c.publisher, out)
    elif index == 7:  # clear
        _put_entity(c.publisher, out)
    elif index in (8, 12):  # attach_writer, ack_clone
        _put_u64(c.offset, out, "offset")
        try:
            out += _U16.pack(c.heartbeat_interval)
        except struct.error:
            raise EncodeError(
                f"heartbeat interval is not a u16: {c.heartbeat_interval!r}"
            ) from None
        if index == 12:
            out += encode_varbyte(len(c.snapshot))
            for key, value in c.snapshot:
                encode_into(key, out)
                encode_into(value, out)
    elif index == 11:  # nack
        out += encode_varbyte(len(c.seqs))
        for seq in c.seqs:
            _put_u64(seq, out, "nack sequence number")
    else:  # keepalive, cumulative_ack, retransmit_failed
        _put_u64(c.seq, out, "sequence number")
    return bytes(out)


# -- decoding ----------------------------------------------------------------------


def _entity(raw: bytes) -> EntityId:
    """The entity id in 24 raw bytes, shared with earlier decodes of the same bytes."""
    entity = _ENTITIES.get(raw)
    if entity is None:
        if len(_ENTITIES) >= _ENTITY_CACHE_SIZE:
            _ENTITIES.clear()
        entity = _ENTITIES[raw] = EntityId(*_ENTITY.unpack(raw))
    return entity


class _Reader:
    """Walks a command buffer; every read checks the bytes that remain."""

    __slots__ = ("buf", "limits", "pos")

    def __init__(self, buf: bytes, limits: DecodeLimits) -> None:
        self.buf = buf
        self.pos = 0
        self.limits = limits

    def need(self, n: int, what: str) -> None:
        if self.pos + n > len(self.buf):
            raise DecodeError(
                f"store command truncated in {what} at offset {self.pos}: "
                f"need {n} bytes, have {len(self.buf) - self.pos}"
            )

    def u8(self, what: str) -> int:
        self.need(1, what)
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def u16(self, what: str) -> int:
        self.need(2, what)
        (v,) = _U16.unpack_from(self.buf, self.pos)
        self.pos += 2
        return v

    def u64(self, what: str) -> int:
        self.need(8, what)
        (v,) = _U64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return v

    def entity(self, what: str) -> EntityId:
        self.need(24, what)
        pos = self.pos
        self.pos = pos + 24
        return _entity(self.buf[pos : pos + 24])

    def data(self, what: str) -> Any:
        if self.pos >= len(self.buf):
            raise DecodeError(f"store command truncated before {what} at offset {self.pos}")
        start = self.pos
        try:
            value, self.pos = decode_from(self.buf, self.pos, self.limits)
        except DecodeError as exc:
            raise DecodeError(f"store command: bad {what} at offset {start}: {exc}") from None
        return value

    def expiry(self) -> int | None:
        flag = self.u8("expiry flag")
        if flag == 0:
            return None
        if flag != 1:
            raise DecodeError(f"store command: optional flag {flag} at offset {self.pos - 1}")
        self.need(8, "expiry")
        (v,) = _I64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return v

    def count(self, what: str, min_size: int, limit: int) -> int:
        start = self.pos
        try:
            n, self.pos = read_varbyte(self.buf, self.pos)
        except DecodeError as exc:
            raise DecodeError(f"store command: bad {what} size at offset {start}: {exc}") from None
        if n > limit:
            raise DecodeError(
                f"store command: {what} of {n} entries at offset {start} exceeds {limit}"
            )
        if n * min_size > len(self.buf) - self.pos:
            raise DecodeError(
                f"store command: {what} at offset {start} declares {n} entries "
                f"but only {len(self.buf) - self.pos} bytes remain"
            )
        return n


def decode_command(
    buf: bytes | bytearray | memoryview, limits: DecodeLimits = DEFAULT_LIMITS
) -> InternalCommand:
    """Parse one command that fills ``buf``; DecodeError (naming what and where) if malformed."""
    if type(buf) is not bytes:
        buf = bytes(buf)
    if len(buf) < _HEAD_SIZE:
        raise DecodeError(f"store command truncated: {len(buf)} bytes, header needs {_HEAD_SIZE}")
    (seq,) = _U64.unpack_from(buf, 0)
    sender = _entity(buf[8:32])
    receiver = _entity(buf[32:56])
    index = buf[56]
    if index == 0:  # put: the bulk of all traffic, read without the general machinery
        return InternalCommand(seq, sender, receiver, _decode_put(buf, limits))
    if index >= len(_ORDER):
        raise DecodeError(f"store command: unknown variant index {index} at offset 56")
    r = _Reader(buf, limits)
    r.pos = 57
    content: Command
    if index == 0:
        content = PutCommand(r.data("key"), r.data("value"), r.expiry(), r.entity("publisher"))
    elif index == 1:
        key, value, expiry = r.data("key"), r.data("value"), r.expiry()
        who, req_id = r.entity("who"), r.u64("req_id")
        content = PutUniqueCommand(key, value, expiry, who, req_id, r.entity("publisher"))
    elif index == 2:
        flag = r.u8("inserted")
        if flag > 1:
            raise DecodeError(f"store command: boolean {flag} at offset {r.pos - 1}")
        who, req_id = r.entity("who"), r.u64("req_id")
        content = PutUniqueResultCommand(flag == 1, who, req_id, r.entity("publisher"))
    elif index == 3:
        content = EraseCommand(r.data("key"), r.entity("publisher"))
    elif index == 4:
        content = ExpireCommand(r.data("key"), r.entity("publisher"))
    elif index == 5:
        key, value = r.data("key"), r.data("value")
        tag = r.u8("init_type")
        if tag > 14:
            raise DecodeError(f"store command: init_type {tag} at offset {r.pos - 1} is no type")
        content = AddCommand(key, value, DataType(tag), r.expiry(), r.entity("publisher"))
    elif index == 6:
        key, value = r.data("key"), r.data("value")
        content = SubtractCommand(key, value, r.expiry(), r.entity("publisher"))
    elif index == 7:
        content = ClearCommand(r.entity("publisher"))
    elif index == 8:
        content = AttachWriterCommand(r.u64("offset"), r.u16("heartbeat interval"))
    elif index == 9:
        content = KeepaliveCommand(r.u64("seq"))
    elif index == 10:
        content = CumulativeAckCommand(r.u64("seq"))
    elif index == 11:
        n = r.count("nack", 8, MAX_NACK_SEQS)
        content = NackCommand(tuple(r.u64("nack seq") for _ in range(n)))
    elif index == 12:
        offset, interval = r.u64("offset"), r.u16("heartbeat interval")
        n = r.count("snapshot", 2, min(MAX_SNAPSHOT_ENTRIES, limits.max_container))
        pairs = tuple((r.data("snapshot key"), r.data("snapshot value")) for _ in range(n))
        content = AckCloneCommand(offset, interval, pairs)
    else:
        content = RetransmitFailedCommand(r.u64("seq"))
    if r.pos != len(buf):
        raise DecodeError(
            f"store command: {len(buf) - r.pos} trailing bytes at offset {r.pos} "
            f"after {type(content).__name__}"
        )
    return InternalCommand(seq, sender, receiver, content)


def _decode_put(buf: bytes, limits: DecodeLimits) -> PutCommand:
    """The fields of a put command (key, value, expiry, publisher) from offset 57."""
    end = len(buf)
    what = "key"
    try:
        key, pos = _scalar(buf, 57, end, limits)
        what = "value"
        value, pos = _scalar(buf, pos, end, limits)
    except DecodeError as exc:
        raise DecodeError(f"store command: bad {what} of a put: {exc}") from None
    flag = buf[pos] if pos < end else -1
    if flag == 0:
        expiry = None
        pos += 1
    elif flag == 1 and pos + 9 <= end:
        (expiry,) = _I64.unpack_from(buf, pos + 1)
        pos += 9
    elif flag == -1 or flag == 1:
        raise DecodeError(f"store command: a put's expiry at offset {pos} is truncated")
    else:
        raise DecodeError(f"store command: optional flag {flag} at offset {pos}")
    if end - pos != 24:
        raise DecodeError(
            f"store command: a put's publisher at offset {pos} needs 24 bytes, {end - pos} remain"
        )
    return PutCommand(key, value, expiry, _entity(buf[pos:end]))


def _scalar(buf: bytes, pos: int, end: int, limits: DecodeLimits) -> tuple[Any, int]:
    """Decode one value at ``pos``: short strings and integers inline, the rest generally."""
    tag = buf[pos] if pos < end else -1
    if tag == 5 and pos + 1 < end:
        size = buf[pos + 1]
        stop = pos + 2 + size
        if size < 0x80 and stop <= end and size <= limits.max_string:
            raw = buf[pos + 2 : stop]
            try:
                return raw.decode(), stop
            except UnicodeDecodeError:
                return raw, stop
    elif tag == 3 and pos + 9 <= end:
        return _I64.unpack_from(buf, pos + 1)[0], pos + 9
    return decode_from(buf, pos, limits)
