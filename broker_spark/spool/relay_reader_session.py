"""The reader's side of the spool protocol, sans I/O: what a reader sends and receives.

:mod:`~broker_spark.spool.relay_protocol` decides the protocol (its frames, their
kinds and checks) and holds the owner's side; this module is a reader's connection:
:class:`RelayClientSession` makes its HELLO, FOLLOW, CREDIT and REQUEST frames and turns
the owner's bytes into :class:`Records`, :class:`Rows` and :class:`ServerMessage`,
checking that records come in order from the offset followed. Its shell is
:mod:`~broker_spark.spool.relay_client`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack
import pyarrow as pa

from broker_spark.spool.relay_protocol import (
    DEFAULT_CREDIT,
    KEPT_HEAD,
    MAX_FRAME,
    PROTOCOL_VERSION,
    RECORDS_HEAD,
    ROWS_HEAD,
    SERVER_KINDS,
    WIRE_CODECS,
    Framed,
    Kind,
    RelayProtocolError,
    decompressed,
    encode_message,
    message_fields,
    offset_field,
    zstd_codec,
)

__all__ = ["RelayClientSession", "Records", "Rows", "ServerMessage"]


@dataclass
class Records:
    """A RECORDS frame: ``count`` records from offset ``first``, as a record stream (from a
    KEPT frame: ``count`` records of the offsets it spans, the others not for this reader)."""

    first: int
    count: int
    data: bytes


@dataclass
class Rows:
    """A ROWS frame: ``rows`` rows a relay decoded from the records of offsets ``[first,
    first + count)``, as an Arrow IPC stream, and its converter's ``counters`` of them."""

    first: int
    count: int
    rows: int
    counters: dict[str, int]
    data: bytes


@dataclass
class ServerMessage:
    """Any other frame from the owner: ``welcome``, ``heartbeat``, ``error`` or ``reply``."""

    kind: str
    fields: dict[str, Any]


_NAMES = {
    Kind.WELCOME: "welcome",
    Kind.HEARTBEAT: "heartbeat",
    Kind.ERROR: "error",
    Kind.REPLY: "reply",
}


class RelayClientSession:
    """One connection on the reader's side: frames to send, and what the owner sent.

    Records must come in order from the offset followed; the session checks
    that, and keeps the credit topped up as the reader takes records
    (:meth:`took`).
    """

    def __init__(self, credit: int = DEFAULT_CREDIT) -> None:
        self._framed = Framed(SERVER_KINDS, MAX_FRAME)
        self._codec: pa.Codec | None = None  # set when the WELCOME says the owner compresses
        self.credit = credit
        self.welcomed = False
        #: Whether the owner decodes rows for this reader (its WELCOME said ``rows``).
        self.rows = False
        self.next: int | None = None  # the offset the next RECORDS must start at
        self._untold = 0  # bytes taken and not yet acknowledged

    def hello(self, role: str, name: str = "", **fields: Any) -> bytes:
        """The HELLO; a follower offers the codecs it decompresses unless ``fields`` says
        otherwise (``compression=[]``: records as written)."""
        if role == "follow":
            fields.setdefault("compression", list(WIRE_CODECS))
        return encode_message(
            Kind.HELLO, {"version": PROTOCOL_VERSION, "role": role, "name": name, **fields}
        )

    def follow(self, start: int, until: int | None = None, schemas: str | None = None) -> bytes:
        """FOLLOW from ``start``; ``schemas``: the digest of the log schemas in force there
        (a reader whose converter the owner built is answered with rows when they match)."""
        self.next = start
        self._untold = 0
        fields: dict[str, Any] = {"from": start, "credit": self.credit}
        if until is not None:
            fields["until"] = until
        if schemas is not None:
            fields["schemas"] = schemas
        return encode_message(Kind.FOLLOW, fields)

    def request(self, op: str, **fields: Any) -> bytes:
        return encode_message(Kind.REQUEST, {"op": op, **fields})

    def receive(self, data: bytes) -> list[Records | Rows | ServerMessage]:
        out: list[Records | Rows | ServerMessage] = []
        for body in self._framed.frames(data):
            kind = body[0]
            if kind == Kind.ROWS:
                out.append(self._rows(body))
                continue
            if kind in (Kind.RECORDS_COMPRESSED, Kind.KEPT_COMPRESSED) and self._codec is None:
                raise RelayProtocolError("a compressed frame where none was agreed")
            if kind in (Kind.RECORDS, Kind.RECORDS_COMPRESSED):
                if len(body) < RECORDS_HEAD.size:
                    raise RelayProtocolError("a RECORDS frame without its header")
                _, first, count = RECORDS_HEAD.unpack_from(body)
                self._advance(first, count)
                out.append(Records(first, count, self._stream(body, RECORDS_HEAD.size)))
                continue
            if kind in (Kind.KEPT, Kind.KEPT_COMPRESSED):  # [first, first + span), ``kept`` of them
                if len(body) < KEPT_HEAD.size:
                    raise RelayProtocolError("a KEPT frame without its header")
                _, first, span, kept = KEPT_HEAD.unpack_from(body)
                if kept > span:
                    raise RelayProtocolError(f"{kept} records kept of {span} offsets")
                self._advance(first, span)
                out.append(Records(first, kept, self._stream(body, KEPT_HEAD.size)))
                continue
            fields = message_fields(body)
            if kind == Kind.WELCOME:
                if self.welcomed:
                    raise RelayProtocolError("WELCOME twice")
                self.welcomed = True
                for name in ("start", "end"):
                    offset_field(fields, name)
                if not isinstance(fields.get("relay"), str):
                    raise RelayProtocolError("a WELCOME without the relay's id")
                codec = fields.get("compression")
                if codec is not None:
                    if codec not in WIRE_CODECS:
                        raise RelayProtocolError(f"a WELCOME with an unknown codec {codec!r}")
                    self._codec = zstd_codec()
                self.rows = fields.get("rows") is not None
            elif not self.welcomed and kind != Kind.ERROR:
                raise RelayProtocolError("the first frame must be WELCOME")
            if kind == Kind.ERROR and fields.get("code") in ("data_loss", "offset_out_of_range"):
                self.next = None  # following stopped; FOLLOW again to go on
            out.append(ServerMessage(_NAMES[kind], fields))
        return out

    def _stream(self, body: bytes, at: int) -> bytes:
        """The record stream of a RECORDS or KEPT frame whose header ends at ``at``,
        decompressed when the frame is of a compressed kind (:meth:`receive` has checked
        that the WELCOME named a codec)."""
        if body[0] not in (Kind.RECORDS_COMPRESSED, Kind.KEPT_COMPRESSED):
            return body[at:]
        assert self._codec is not None
        return decompressed(self._codec, body, at)

    def _advance(self, first: int, span: int) -> None:
        """A frame of offsets ``[first, first + span)`` arrived: they must be the next ones."""
        if self.next is None or first != self.next or span < 1:
            raise RelayProtocolError(f"records from offset {first} where {self.next} was due")
        self.next = first + span

    def _rows(self, body: bytes) -> Rows:
        if not self.rows:
            raise RelayProtocolError("a ROWS frame where none was agreed")
        if len(body) < ROWS_HEAD.size:
            raise RelayProtocolError("a ROWS frame without its header")
        _, first, count, rows, size = ROWS_HEAD.unpack_from(body)
        at = ROWS_HEAD.size + size
        if len(body) < at:
            raise RelayProtocolError("a ROWS frame shorter than its counters")
        try:
            counters = msgpack.unpackb(body[ROWS_HEAD.size : at], strict_map_key=True)
        except Exception as exc:
            raise RelayProtocolError(f"a ROWS frame's counters do not decode: {exc}") from None
        if not isinstance(counters, dict) or not all(
            isinstance(k, str) and type(v) is int for k, v in counters.items()
        ):
            raise RelayProtocolError(f"a ROWS frame's counters are not counts: {counters!r}")
        self._advance(first, count)
        return Rows(first, count, rows, counters, body[at:])

    def took(self, nbytes: int) -> bytes | None:
        """The reader took ``nbytes`` of records: a CREDIT frame once half the credit waits."""
        self._untold += nbytes
        if self._untold * 2 < self.credit:
            return None
        told, self._untold = self._untold, 0
        return encode_message(Kind.CREDIT, {"bytes": told})
