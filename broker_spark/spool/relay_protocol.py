"""The spool protocol: replaying a spool to readers and talking to its owner, sans I/O.

A spool's owner (a ``broker-spark node --spool`` relay, or the receiver
process of a query's ``spoolPath``) serves this protocol; readers follow the
spool from an offset on, and tools ask for its status. ``docs/relay.md``
describes it for people; this module is the one place that decides it, and holds the
owner's side (:class:`RelayServerSession`); a reader's side is
:mod:`~broker_spark.spool.relay_reader_session`.

Frames are Broker's framing (a 4-byte big-endian length, then the body); a
body is one kind byte and its fields, msgpack maps for everything but records:

=====  ==========  ==================================================================
kind   direction   body
=====  ==========  ==================================================================
1      c -> s      HELLO ``{version, role, name[, topics][, logs][, compression]}``:
                   role ``follow``, ``status`` or ``attach`` (a reader of the owner's
                   own machine, with ``identity``); ``topics``: what the reader means
                   to read; ``logs``: the Zeek logs it reads (paths); ``compression``:
                   the codecs it decompresses (``["zstd"]``)
2      s -> c      WELCOME ``{version, relay, start, end, schemas}``: the spool's id
                   (fixed for its life), its first and next offset, its Zeek log
                   schemas (one entry per change, as ``zeek-log-schemas.jsonl``);
                   ``topics`` when the reader's credential is limited to them, or
                   the HELLO's; ``logs``, the HELLO's, when it serves only those;
                   ``compression``, the codec of its records frames when it compresses
3      c -> s      FOLLOW ``{from, credit[, until]}``: send records from offset
                   ``from`` on (up to ``until``, or live), at most ``credit`` bytes
                   ahead of what the reader took
4      s -> c      RECORDS: u64 first offset, u32 count, the spool's record stream
5      c -> s      CREDIT ``{bytes}``: the reader took that many bytes
6      s -> c      HEARTBEAT ``{start, end}``: sent when nothing else was for a second
7      s -> c      ERROR ``{code, message, ...}``
8      c -> s      REQUEST ``{op, ...}``: ``status``, ``bounds`` (the spool's start,
                   end and schemas), ``commit`` (offset), ``state``, ``stop``,
                   ``restart_at`` (offset); the last three on the owner's own
                   machine only
9      s -> c      REPLY ``{op, ...}`` (or an ERROR naming the request)
10     s -> c      KEPT: u64 first offset, u32 offsets spanned, u32 records kept, the
                   records of those offsets on the reader's topics and of its logs
11     s -> c      RECORDS compressed: RECORDS' header, u32 bytes of the record stream,
                   the record stream compressed with the WELCOME's ``compression``
12     s -> c      KEPT compressed: KEPT's header, u32 bytes, the records compressed
13     s -> c      ROWS: u64 first offset, u32 offsets spanned, u32 rows, u32 bytes of a
                   msgpack map (the converter's counters), then an Arrow IPC stream of
                   the rows a relay decoded from those offsets' records
=====  ==========  ==================================================================

Rows decoded by the relay: a reader of Zeek's logs may send its converter in its HELLO
(``rows``: :func:`~broker_spark.columnar.converter_spec.converter_spec`) and, in each
FOLLOW, the digest of the log schemas in force at its first offset (``schemas``). A
relay that builds the converter says so in its WELCOME (``rows``: ``"lz4"`` when it
compresses the rows' buffers, else ``"none"``), and answers each FOLLOW whose digest
matches its own history with ROWS frames: the records of the offsets, decoded in groups
of thousands (:data:`ROWS_TARGET` bytes of records), as the reader's own tasks would
decode them. A FOLLOW whose digest differs, or a relay that cannot build the converter
(or is older: it ignores the field), is served records as usual, and the reader decodes
them itself.

Compression on the wire: a reader that offers a codec in its HELLO is sent RECORDS
and KEPT frames compressed with it (kinds 11 and 12) when the owner compresses for
that connection: a relay does for readers on other machines (the wire is then about
a thirteenth of Zeek's batches; ``docs/relay.md``) and not on loopback, where it
would cost both sides CPU for nothing. Credit counts the records' bytes as
written either way. A reader that offers nothing, or an owner of an earlier
version (which ignores the field), uses kinds 4 and 10.

Offsets are the owner's spool offsets, dense and durable, so a query's
checkpoint stays valid across restarts of the query, of the owner and of the
connection. A FOLLOW below the spool's first offset is answered by ERROR
``data_loss`` with ``earliest``; beyond its end by ERROR ``offset_out_of_range``
with ``end``; the connection stays usable either way and the reader may FOLLOW
again. Bytes that are no frame of this protocol, or a frame out of turn, get
ERROR ``protocol`` and the connection is closed: the owner keeps serving
everyone else.

A reader's HELLO may name the ``topics`` it reads (prefixes): the owner then
serves it only records on them, as KEPT frames (whose offsets still advance over
the others), and its WELCOME echoes them. Likewise the ``logs`` a reader of Zeek's logs names:
it is served only the records holding records (or the LogCreate) of those logs
(:mod:`~broker_spark.spool.served_records` tells which), and a relay that does not
know the field serves everything and echoes nothing (the reader then leaves the
rest out itself). A relay may also limit a reader's
credential (its certificate's name) to topic prefixes: such a reader is served
only records on those (KEPT frames too), and a HELLO naming other ``topics``, a
``status`` role or request, gets ERROR ``forbidden`` and the connection is
closed; other readers are not affected. A server already serving as many
connections as it allows answers a new one with ERROR ``too_many`` before any
HELLO and closes it.

Flow control is by credit: the owner sends while the bytes it sent beyond the
reader's acknowledgements stay within the credit, so a slow reader costs the
owner nothing but the socket's buffer.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import msgpack
import pyarrow as pa

from broker_spark.errors import EC, BrokerError, DecodeError
from broker_spark.protocol.framing import FrameDecoder, encode_frame

__all__ = [
    "DEFAULT_CREDIT",
    "FRAME_TARGET",
    "HEARTBEAT_INTERVAL",
    "KEPT_HEAD",
    "MAX_FRAME",
    "PROTOCOL_VERSION",
    "RECORDS_HEAD",
    "ROWS_HEAD",
    "ROWS_TARGET",
    "SERVER_KINDS",
    "WIRE_CODECS",
    "Framed",
    "Kind",
    "RelayProtocolError",
    "RelayServerSession",
    "ServerEvent",
    "decompressed",
    "encode_message",
    "message_fields",
    "offset_field",
    "zstd_codec",
]

PROTOCOL_VERSION = 1

#: The largest frame either side accepts: room for one record as large as a peering's
#: largest message (16 MiB) plus a frame's worth of others.
MAX_FRAME = 64 << 20

#: The largest frame the owner accepts from a reader: readers send small maps only.
MAX_CLIENT_FRAME = 1 << 20

#: Bytes of records the owner puts in one RECORDS frame, about (a single larger record
#: goes alone).
FRAME_TARGET = 1 << 20

#: Bytes of records a relay decodes into one ROWS frame, about: some 16,000 of Zeek's log
#: records, so that each log of a mix still has thousands in a group, where decoding costs
#: least per record. Measured on the mix of ``bench/zeek_logs.py`` (conn 5 : dns 3 : http
#: 2) as JSON lines: 2.8 µs a record at 8 MiB, 3.4 at 4 MiB, 4.5 at 1 MiB, no less above.
ROWS_TARGET = 8 << 20

#: Bytes a reader lets the owner send ahead of what it took.
DEFAULT_CREDIT = 16 << 20

#: Seconds without a frame after which the owner sends a heartbeat.
HEARTBEAT_INTERVAL = 1.0
#: Seconds a new connection may take to send its HELLO; a client that stays silent
#: longer is closed, so idle sockets cannot pile up on a relay.
HELLO_TIMEOUT = 10.0

RECORDS_HEAD = struct.Struct(">BQI")
# KEPT: u64 first offset, u32 offsets spanned, u32 records kept (a reader limited to topics)
KEPT_HEAD = struct.Struct(">BQII")
_RAW_SIZE = struct.Struct(">I")
# ROWS: u64 first offset, u32 offsets spanned, u32 rows, u32 bytes of the counters' map
ROWS_HEAD = struct.Struct(">BQIII")
#: The codecs a reader may offer and an owner may compress its records frames with.
WIRE_CODECS = ("zstd",)
_ZSTD_LEVEL = 1  # 13x on Zeek's batches at about a GB a second


class Kind:
    HELLO = 1
    WELCOME = 2
    FOLLOW = 3
    RECORDS = 4
    CREDIT = 5
    HEARTBEAT = 6
    ERROR = 7
    REQUEST = 8
    REPLY = 9
    KEPT = 10
    RECORDS_COMPRESSED = 11
    KEPT_COMPRESSED = 12
    ROWS = 13


_CLIENT_KINDS = {Kind.HELLO, Kind.FOLLOW, Kind.CREDIT, Kind.REQUEST}
SERVER_KINDS = {
    Kind.WELCOME,
    Kind.RECORDS,
    Kind.KEPT,
    Kind.HEARTBEAT,
    Kind.ERROR,
    Kind.REPLY,
    Kind.RECORDS_COMPRESSED,
    Kind.KEPT_COMPRESSED,
    Kind.ROWS,
}

ROLES = ("follow", "status", "attach")


class RelayProtocolError(BrokerError):
    """Bytes that are not this protocol, or a frame out of turn: the connection must close."""

    code = EC.InvalidData


def encode_message(kind: int, fields: dict[str, Any]) -> bytes:
    """One framed control message."""
    return encode_frame(bytes((kind,)) + msgpack.packb(fields, use_bin_type=True))


def encode_records(first: int, count: int, data: bytes) -> bytes:
    """One framed RECORDS message (the record stream is not copied into a msgpack map)."""
    return encode_frame(RECORDS_HEAD.pack(Kind.RECORDS, first, count) + data)


def zstd_codec() -> pa.Codec:
    """The codec of compressed RECORDS and KEPT frames."""
    return pa.Codec("zstd", compression_level=_ZSTD_LEVEL)


def decompressed(codec: pa.Codec, body: bytes, at: int) -> bytes:
    """The record stream of a compressed frame whose size field starts at ``at``."""
    if len(body) < at + _RAW_SIZE.size:
        raise RelayProtocolError("a compressed frame without its size")
    (size,) = _RAW_SIZE.unpack_from(body, at)
    if size > MAX_FRAME:
        raise RelayProtocolError(f"a compressed frame of {size} bytes (at most {MAX_FRAME})")
    try:
        data = codec.decompress(body[at + _RAW_SIZE.size :], decompressed_size=size, asbytes=True)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise RelayProtocolError(f"a compressed frame does not decompress: {exc}") from None
    if len(data) != size:
        raise RelayProtocolError(f"a compressed frame holds {len(data)} bytes, not {size}")
    return data


def message_fields(body: bytes) -> dict[str, Any]:
    """The msgpack map of a control frame's body."""
    try:
        fields = msgpack.unpackb(body[1:], raw=False, strict_map_key=True)
    except Exception as exc:
        raise RelayProtocolError(f"a frame of kind {body[0]} does not decode: {exc}") from None
    if not isinstance(fields, dict):
        raise RelayProtocolError(f"a frame of kind {body[0]} is not a map")
    return fields


def offset_field(fields: dict[str, Any], name: str) -> int:
    """Field ``name`` of a map, which must be an offset."""
    value = fields.get(name)
    if type(value) is not int or value < 0:
        raise RelayProtocolError(f"{name!r} must be an offset, got {value!r}")
    return value


class Framed:
    """Cuts received bytes into (kind, body) pairs, refusing what is not this protocol."""

    def __init__(self, allowed: set[int], max_frame: int) -> None:
        self._decoder = FrameDecoder(max_frame)
        self._allowed = allowed

    def frames(self, data: bytes) -> list[bytes]:
        try:
            bodies = self._decoder.feed(data)
        except DecodeError as exc:
            raise RelayProtocolError(str(exc)) from None
        for body in bodies:
            if not body or body[0] not in self._allowed:
                kind = body[0] if body else "none"
                raise RelayProtocolError(f"unexpected frame kind {kind}")
        return bodies


# --- the owner's side ---------------------------------------------------------------------


@dataclass
class ServerEvent:
    """What a reader asked: ``hello``, ``follow``, ``request`` (``fields`` holds the rest)."""

    kind: str
    fields: dict[str, Any] = field(default_factory=dict)


class RelayServerSession:
    """One connection on the owner's side: what the reader asked, what to send it.

    The shell feeds received bytes to :meth:`receive` and acts on the events;
    while following, :meth:`next_range` says which offsets to read and send
    next (given the spool's bounds), :meth:`records` frames them, and
    :meth:`tick` makes heartbeats. ``local`` says whether the connection comes
    from the owner's own machine (a Unix socket): only those may ``attach``,
    ``stop`` or ``restart_at``.
    """

    def __init__(
        self,
        relay_id: str,
        *,
        local: bool = False,
        now: float = 0.0,
        allowed: tuple[str, ...] | None = None,
        identity: str = "",
        compress: bool = False,
    ) -> None:
        self.relay_id = relay_id
        self.local = local
        #: Whether this connection's records are compressed if the reader offers a codec
        #: (the owner's choice: readers on other machines), and the codec once agreed.
        self.compress = compress
        self.compression: str | None = None
        self._codec: pa.Codec | None = None
        self._opened = now
        #: The topic prefixes this reader's credential may read (None: everything).
        self.allowed = allowed
        #: The topic prefixes this reader is served (None: every record): its HELLO's
        #: ``topics``, or else what its credential allows.
        self.served = allowed
        #: The Zeek logs (paths) this reader is served (None: every record): its HELLO's.
        self.served_logs: tuple[str, ...] | None = None
        #: The converter a reader of Zeek's logs sent in its HELLO (None: it reads records),
        #: and, once the shell built it (:meth:`serve_rows`), the codec of the rows' buffers
        #: (``"none"`` or ``"lz4"``); :attr:`rows_now` says whether the current FOLLOW is
        #: answered with rows (its schemas' digest matched) or with records.
        self.rows_spec: dict[str, Any] | None = None
        self.rows_codec: str | None = None
        self.rows_now = False
        self.identity = identity  # who the credential names, for messages
        self._framed = Framed(_CLIENT_KINDS, MAX_CLIENT_FRAME)
        self.role: str | None = None
        self.name = ""
        self.following = False
        self.next = 0  # the next offset to send
        self.until: int | None = None  # where following ends (None: live)
        self.committed: int | None = None  # what the reader said it committed
        self._credit = 0  # bytes the reader allows beyond what it took
        self._in_flight = 0  # bytes sent and not yet acknowledged
        self._last_sent = 0.0

    def hello_overdue(self, now: float) -> bool:
        """Whether the connection, opened at the ``now`` given to the constructor, has gone
        :data:`HELLO_TIMEOUT` seconds without a HELLO (answer :meth:`error`, close)."""
        return self.role is None and now - self._opened >= HELLO_TIMEOUT

    # --- receiving ------------------------------------------------------------------

    def receive(self, data: bytes) -> list[ServerEvent]:
        """Events for the frames completed by ``data``; :class:`RelayProtocolError` when
        the bytes are not this protocol (answer with :meth:`error` and close)."""
        events = []
        for body in self._framed.frames(data):
            kind = body[0]
            fields = message_fields(body)
            if self.role is None:
                if kind != Kind.HELLO:
                    raise RelayProtocolError("the first frame must be HELLO")
                events.append(self._hello(fields))
            elif kind == Kind.HELLO:
                raise RelayProtocolError("HELLO twice")
            elif kind == Kind.FOLLOW:
                if self.role != "follow":
                    raise RelayProtocolError(f"FOLLOW from a {self.role} connection")
                start = offset_field(fields, "from")
                credit = offset_field(fields, "credit")
                until = offset_field(fields, "until") if fields.get("until") is not None else None
                if until is not None and until < start:
                    raise RelayProtocolError(f"FOLLOW from {start} until {until}")
                digest = fields.get("schemas")
                if digest is not None and not isinstance(digest, str):
                    raise RelayProtocolError(f"'schemas' must be a digest, got {digest!r}")
                self.following = False  # until the shell accepts it (see follow())
                events.append(
                    ServerEvent(
                        "follow",
                        {"from": start, "credit": credit, "until": until, "schemas": digest},
                    )
                )
            elif kind == Kind.CREDIT:
                took = offset_field(fields, "bytes")
                self._in_flight = max(0, self._in_flight - took)
            else:  # REQUEST
                events.append(self._request(fields))
        return events

    def _hello(self, fields: dict[str, Any]) -> ServerEvent:
        version = fields.get("version")
        if type(version) is not int or version < 1:
            raise RelayProtocolError(f"bad protocol version {version!r}")
        role = fields.get("role")
        if role not in ROLES:
            raise RelayProtocolError(f"unknown role {role!r} (expected {', '.join(ROLES)})")
        if role == "attach" and not self.local:
            raise RelayProtocolError("attach is only for readers on the owner's machine")
        self.role = role
        name = fields.get("name", "")
        self.name = name if isinstance(name, str) else ""
        topics = fields.get("topics")
        if topics is not None and (
            not isinstance(topics, list | tuple) or not all(isinstance(t, str) for t in topics)
        ):
            raise RelayProtocolError(f"'topics' must be a list of topic prefixes, got {topics!r}")
        if self.allowed is not None:
            if role == "status":
                return self._forbidden("the relay's status")
            beyond = [t for t in topics or () if not t.startswith(self.allowed)]
            if beyond:
                return self._forbidden(f"topics {', '.join(beyond)}")
        if topics is not None and role == "follow":
            # each is within what the credential allows (checked above): they narrow it
            self.served = tuple(topics)
        logs = fields.get("logs")
        if logs is not None and (
            not isinstance(logs, list | tuple)
            or not logs
            or not all(isinstance(p, str) and p for p in logs)
        ):
            raise RelayProtocolError(f"'logs' must be a list of log paths, got {logs!r}")
        if logs is not None and role == "follow":
            self.served_logs = tuple(logs)
        rows = fields.get("rows")
        if rows is not None and role == "follow":
            if not isinstance(rows, dict):
                raise RelayProtocolError(f"'rows' must be a converter's map, got {rows!r}")
            self.rows_spec = rows
        offered = fields.get("compression")
        if (
            self.compress
            and role == "follow"
            and isinstance(offered, list | tuple)
            and ("zstd" in offered)
        ):
            self.compression, self._codec = "zstd", zstd_codec()
        return ServerEvent("hello", fields)

    def serve_rows(self, codec: str) -> None:
        """The shell built the reader's converter: its WELCOME says so, and FOLLOWs whose
        schemas match are answered with rows, their buffers compressed with ``codec``."""
        if self.rows_spec is None:
            raise ValueError("this reader sent no converter")
        self.rows_codec = codec

    @property
    def narrowed(self) -> bool:
        """Whether this reader is served some records only (KEPT frames)."""
        return self.served is not None or self.served_logs is not None

    def _forbidden(self, what: str) -> ServerEvent:
        allowed = ", ".join(self.allowed or ()) or "nothing"
        who = self.identity or "this reader"
        message = f"{who} may not read {what} (it may read {allowed})"
        return ServerEvent("forbidden", {"message": message})

    def _request(self, fields: dict[str, Any]) -> ServerEvent:
        op = fields.get("op")
        if op == "commit":
            self.committed = offset_field(fields, "offset")
            return ServerEvent("commit", fields)
        if op in ("stop", "restart_at", "state") and not self.local:
            raise RelayProtocolError(f"{op} is only for the owner's own machine")
        if op == "status" and self.allowed is not None:
            return self._forbidden("the relay's status")
        if op == "restart_at":
            offset_field(fields, "offset")
        if op not in ("status", "bounds", "stop", "restart_at", "state"):
            raise RelayProtocolError(f"unknown request {op!r}")
        return ServerEvent("request", fields)

    # --- answering --------------------------------------------------------------------

    def welcome(self, start: int, end: int, schemas: list[dict[str, Any]]) -> bytes:
        return encode_message(
            Kind.WELCOME,
            {
                "version": PROTOCOL_VERSION,
                "relay": self.relay_id,
                "start": start,
                "end": end,
                "schemas": schemas,
                # a reader served some topics gets KEPT frames: fewer records than offsets
                **({"topics": list(self.served)} if self.served is not None else {}),
                **({"logs": list(self.served_logs)} if self.served_logs is not None else {}),
                **({"compression": self.compression} if self.compression else {}),
                **({"rows": self.rows_codec} if self.rows_codec is not None else {}),
            },
        )

    def follow(
        self,
        start: int,
        credit: int,
        first: int,
        end: int,
        until: int | None = None,
        rows: bool = False,
    ) -> bytes | None:
        """Accept a FOLLOW from ``start`` (to ``until``, or live) against a spool holding
        ``[first, end)``: None when accepted (records follow, or ``rows``: decoded rows, for
        a reader whose converter the shell built), else the ERROR frame."""
        if rows and self.rows_codec is None:
            raise ValueError("rows for a reader whose converter was not built")
        if start < first:
            return self.error(
                "data_loss",
                f"offset {start} is no longer held (the earliest is {first})",
                earliest=first,
            )
        if start > end:
            return self.error(
                "offset_out_of_range",
                f"offset {start} is beyond the end of the spool ({end})",
                end=end,
            )
        self.following = start != until
        self.rows_now = rows
        self.next = start
        self.until = until
        self._credit = max(1, credit)
        self._in_flight = 0
        return None

    def next_range(self, first: int, end: int) -> tuple[int, int, int] | None:
        """What to send now, given the spool holds ``[first, end)``: records from offset
        ``lo`` to at most ``stop``, about ``budget`` bytes of them (the shell reads in steps
        until it has that many; record sizes vary too much to guess a count). None when
        nothing is due (caught up, or the credit is used). A range that retention dropped
        is :meth:`lost`."""
        if not self.following or self.next >= end:
            return None
        room = self._credit - self._in_flight
        if room <= 0:
            return None
        stop = end if self.until is None else min(end, self.until)
        if self.rows_now:  # decoded in groups of thousands, whatever the room (they cost less)
            return self.next, stop, ROWS_TARGET
        return self.next, stop, min(room, FRAME_TARGET)

    def lost(self, earliest: int) -> bytes:
        """Retention dropped records not yet sent: the ERROR frame (following stops)."""
        self.following = False
        return self.error(
            "data_loss",
            f"offsets {self.next} to {earliest - 1} were dropped before they were sent",
            earliest=earliest,
        )

    def records(
        self, first: int, count: int, data: bytes, now: float, kept: int | None = None
    ) -> bytes:
        """Frame records ``[first, first + count)``, from where :meth:`next_range` said;
        ``kept``: for a reader served some topics (:attr:`served`), how many of them
        ``data`` holds (the rest were not for it), framed as KEPT."""
        if (kept is None) == self.narrowed:
            raise ValueError("KEPT frames are for, and only for, a reader served some records")
        self._sent(first, count, len(data), now)
        if self._codec is not None:
            packed = _RAW_SIZE.pack(len(data)) + self._codec.compress(data, asbytes=True)
            if kept is not None:
                head = KEPT_HEAD.pack(Kind.KEPT_COMPRESSED, first, count, kept)
            else:
                head = RECORDS_HEAD.pack(Kind.RECORDS_COMPRESSED, first, count)
            return encode_frame(head + packed)
        if kept is not None:
            return encode_frame(KEPT_HEAD.pack(Kind.KEPT, first, count, kept) + data)
        return encode_records(first, count, data)

    def _sent(self, first: int, count: int, nbytes: int, now: float) -> None:
        """Offsets ``[first, first + count)`` go out in a frame of ``nbytes`` counted against
        the credit; they must be the next ones (RECORDS, KEPT and ROWS alike)."""
        if first != self.next or count < 1:
            raise ValueError(f"records {first}+{count} are not the next ones ({self.next})")
        self.next = first + count
        if self.next == self.until:
            self.following = False  # the range asked for is complete
        self._in_flight += nbytes
        self._last_sent = now

    def rows(
        self, first: int, count: int, rows: int, counters: dict[str, int], ipc: bytes, now: float
    ) -> bytes:
        """Frame the ``rows`` decoded from records ``[first, first + count)`` (an Arrow IPC
        stream) with the converter's ``counters`` of them, from where :meth:`next_range`
        said, for a FOLLOW answered with rows."""
        if not self.rows_now:
            raise ValueError("ROWS frames are for a FOLLOW answered with rows")
        self._sent(first, count, len(ipc), now)
        meta = msgpack.packb(counters)
        head = ROWS_HEAD.pack(Kind.ROWS, first, count, rows, len(meta))
        return encode_frame(head + meta + ipc)

    def refuse_rows(self, message: str, code: str = "conversion") -> bytes:
        """The rows of the FOLLOW cannot be made: the ERROR frame (following stops).
        ``conversion``: the reader's converter refused a record (``mode=FAILFAST``), as
        its task would have; ``rows_failed``: the relay failed (the reader may fetch the
        records instead)."""
        self.following = False
        return self.error(code, message)

    def tick(self, now: float, start: int, end: int) -> bytes | None:
        """A heartbeat when nothing was sent for :data:`HEARTBEAT_INTERVAL`."""
        if self.role != "follow" or now - self._last_sent < HEARTBEAT_INTERVAL:
            return None
        self._last_sent = now
        return encode_message(Kind.HEARTBEAT, {"start": start, "end": end})

    def reply(self, op: str, fields: dict[str, Any]) -> bytes:
        return encode_message(Kind.REPLY, {"op": op, **fields})

    def error(self, code: str, message: str, **extra: Any) -> bytes:
        return encode_message(Kind.ERROR, {"code": code, "message": message, **extra})

    @staticmethod
    def refusal(code: str, message: str) -> bytes:
        """An ERROR for a connection turned away before it has a session (a full server)."""
        return encode_message(Kind.ERROR, {"code": code, "message": message})
