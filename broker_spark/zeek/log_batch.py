"""Zeek's log batches on its ZeroMQ cluster backend (``zeek-bin-serializer``).

A Zeek node on the ZeroMQ backend PUSHes each flush of a log writer as one
batch (ZEEK-ZEROMQ.md section 2b; zeek/zeek ``src/cluster/serializer/binary-serialization-format/``):
the stream, writer, filter and path, the columns (every batch carries them: there
is no LogCreate), then the records' values back to back. Big-endian; a text is a
4-byte length and its bytes::

    str stream | str writer | str filter | str path
    u32 nf | nf x {u8 has_secondary; [str secondary]; str name; i32 type; i32 subtype; u8 optional}
    u32 nr | nr x nf x value (the values of :mod:`~broker_spark.zeek.record`)

A record's values are exactly a LogWrite's ``serial_data`` without its leading
field count. The log scanner (:mod:`~broker_spark.zeek.log_scan`) reads batches
as they arrived, beside Broker's log messages: :func:`record_spans` says where
each record lies, and the column decoder reads records without their count
(``Block.fields``). So a batch is spooled as received and costs its receiver
nothing per record. The other way was tried first and measured
(``bench/zeromq_logs.py``, and in the helper's report): translating each batch on
arrival into the LogCreate and Broker ``Batch`` of LogWrites a Zeek would send
over Broker (:class:`BatchTranslator`, still here, byte for byte Zeek's Broker
messages) cost the receiving process 2 to 6 microseconds a record, the process
whose falling behind makes Zeek drop batches; with the translation the receiver
spooled half the rate of the Broker path in the same run, without it, all of
the 340,000 records a second offered.

Finding where each record ends needs its values' sizes: :func:`record_ends` reads
only the headers and lengths, never building a value (from 16 records on, all
records at once with numpy). Bad bytes raise :class:`~broker_spark.errors.DecodeError`
naming what and where; no count is trusted beyond what the remaining bytes can hold.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from broker_spark.data.binary import encode
from broker_spark.data.varbyte import encode_varbyte
from broker_spark.errors import DecodeError, EncodeError
from broker_spark.zeek.columns import _PAD, Block, value_run_ends
from broker_spark.zeek.log_schema import LogField, LogSchema
from broker_spark.zeek.logs import LogCreate, WriterInfo
from broker_spark.zeek.record import MAX_FIELDS, _skip, decode_values, encode_record
from broker_spark.zeek.types import TypeTag, ZeekType

__all__ = [
    "DEFAULT_FILTER",
    "LOG_MESSAGE_TYPE",
    "LOG_SERIALIZER",
    "BatchHeader",
    "BatchTranslator",
    "decode_batch",
    "encode_batch",
    "is_log_batch",
    "read_header",
    "record_count",
    "record_ends",
    "record_spans",
    "run_spans",
]

#: Frame 0 of a log message, and frame 2: the serializer Zeek uses by default.
LOG_MESSAGE_TYPE = b"log-write"
LOG_SERIALIZER = b"zeek-bin-serializer"
#: The filter name Zeek writes for a stream's default filter.
DEFAULT_FILTER = "default"
#: The writer a Zeek names (its ASCII writer, JSON or not).
DEFAULT_WRITER = "Log::WRITER_ASCII"

_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_FIELD_TYPES = struct.Struct(">iiB")
_VALUE_MIN = 9  # type, subtype, present

#: Distinct batch headers (logs and their columns) remembered.
_HEADER_CACHE = 256
#: Records in a batch from which their ends are found with numpy (fewer: one by one).
VECTOR_MIN = 16


@dataclass(frozen=True)
class BatchHeader:
    """What precedes the records of a batch: who wrote them and their columns.

    ``size`` is the header's length up to (not including) the record count.
    """

    stream: str
    writer: str
    filter: str
    path: str
    schema: LogSchema
    size: int


def _text(data: bytes, pos: int, what: str) -> tuple[str, int]:
    if pos + 4 > len(data):
        raise DecodeError(f"log batch: truncated {what} length at byte {pos}")
    (n,) = _U32.unpack_from(data, pos)
    pos += 4
    if n > len(data) - pos:
        raise DecodeError(
            f"log batch: {what} of {n} bytes at byte {pos - 4}, {len(data) - pos} left"
        )
    raw = bytes(data[pos : pos + n])
    try:
        return raw.decode("utf-8"), pos + n
    except UnicodeDecodeError:
        raise DecodeError(f"log batch: {what} at byte {pos} is not UTF-8") from None


def _parse_header(data: bytes) -> BatchHeader:
    pos = 0
    stream, pos = _text(data, pos, "stream id")
    writer, pos = _text(data, pos, "writer id")
    filter_name, pos = _text(data, pos, "filter name")
    path, pos = _text(data, pos, "path")
    if not stream or not path:
        raise DecodeError("log batch without a stream id or path (every Zeek log has both)")
    if pos + 4 > len(data):
        raise DecodeError(f"log batch of {path!r}: truncated field count at byte {pos}")
    (count,) = _U32.unpack_from(data, pos)
    pos += 4
    if count > MAX_FIELDS or count * 14 > len(data) - pos:
        raise DecodeError(f"log batch of {path!r}: field count {count} does not fit")
    if count == 0:
        raise DecodeError(f"log batch of {path!r} without fields (every Zeek log has some)")
    fields = []
    for i in range(count):
        if pos >= len(data):
            raise DecodeError(f"log batch of {path!r}: truncated field {i}")
        has_secondary = data[pos]
        pos += 1
        secondary = None
        if has_secondary > 1:
            raise DecodeError(f"log batch of {path!r}: field {i}: bad secondary flag")
        if has_secondary:
            secondary, pos = _text(data, pos, f"field {i}'s secondary name")
        name, pos = _text(data, pos, f"field {i}'s name")
        if pos + _FIELD_TYPES.size > len(data):
            raise DecodeError(f"log batch of {path!r}: truncated type of field {name!r}")
        tag, subtag, optional = _FIELD_TYPES.unpack_from(data, pos)
        pos += _FIELD_TYPES.size
        try:
            zeek_type = ZeekType(TypeTag(tag), TypeTag(subtag))
        except ValueError:
            raise DecodeError(
                f"log batch of {path!r}: field {name!r} has unknown type {tag}/{subtag}"
            ) from None
        fields.append(LogField(name, zeek_type, optional > 0, secondary))
    schema = LogSchema(stream, path, tuple(fields), source="ZeroMQ log batch")
    return BatchHeader(stream, writer, filter_name, path, schema, pos)


#: Parsed headers by their names part (stream, writer, filter, path): (whole header, parsed).
_headers: dict[bytes, tuple[bytes, BatchHeader]] = {}


def read_header(data: bytes | memoryview) -> BatchHeader:
    """The header of a batch (cached: every batch of a log repeats the same one); ``data``
    may be a memoryview of a larger buffer, so that finding it copies nothing."""
    try:
        pos = 0
        for _ in range(4):
            (n,) = _U32.unpack_from(data, pos)
            pos += 4 + n
    except struct.error:
        raise DecodeError(f"log batch: {len(data)} bytes are too few for a header") from None
    names = bytes(data[:pos])
    cached = _headers.get(names)
    if cached is not None and data[: len(cached[0])] == cached[0]:
        return cached[1]
    header = _parse_header(data)
    if len(_headers) >= _HEADER_CACHE:
        _headers.clear()
    _headers[names] = (bytes(data[: header.size]), header)
    return header


def is_log_batch(payload: bytes) -> bool:
    """Whether a message is a ZeroMQ log batch rather than Broker data (cheap): a batch starts
    with the stream id's 4-byte length, so with a zero byte, where Broker data starts with
    its type tag; the only Broker value starting with 0 is a lone ``none``, one byte long."""
    return len(payload) > 16 and payload[0] == 0


def record_spans(data: bytes) -> tuple[BatchHeader, np.ndarray, np.ndarray]:
    """The header of a batch and where each record starts and ends in it."""
    header = read_header(data)
    ends, _buf = _ends(data, header)
    ends = np.asarray(ends, dtype=np.int64)
    starts = np.empty_like(ends)
    if len(ends):
        starts[0] = header.size + 4
        starts[1:] = ends[:-1]
    return header, starts, ends


def run_spans(
    buf: bytes, starts: Sequence[int], ends: Sequence[int], header: BatchHeader
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The records of several batches of one header (``buf[starts[i]:ends[i]]``, each
    starting with the header's bytes), found in one pass: their starts and ends in ``buf``
    and each batch's count; None when a batch holds a look-alike start or a record that
    does not fit (then :func:`record_spans` takes them one by one).

    As :func:`_vector_ends`, for many batches at once: a Spark partition holds dozens of
    a log's batches, and one numpy pass over all their records costs what one batch's
    pass does, numpy's work per call being most of it for a single batch.
    """
    types = header.schema.types
    tag = int(types[0].tag)
    msg_ends = np.asarray(ends, dtype=np.int64)
    body = np.asarray(starts, dtype=np.int64) + header.size + 4  # where records begin
    if (body > msg_ends).any():
        return None
    counts = np.asarray(
        [int.from_bytes(buf[b - 4 : b], "big") for b in body.tolist()], dtype=np.int64
    )
    lo, hi = int(starts[0]), int(msg_ends[-1])
    view = np.zeros(hi - lo + _PAD, dtype=np.uint8)  # the run's bytes, with room past them
    view[: hi - lo] = np.frombuffer(buf, dtype=np.uint8, count=hi - lo, offset=lo)
    words = np.ndarray(shape=(len(view) - 7,), dtype=">u8", buffer=view, strides=(1,))
    cands = np.flatnonzero(view[3 : hi - lo] == tag)
    cands = cands[words[cands] == tag << 32] + lo
    # only candidates among a batch's records (its header names the first column's type too)
    owner = np.searchsorted(msg_ends, cands, side="right")
    keep = owner < len(msg_ends)
    cands, owner = cands[keep], owner[keep]
    keep = cands >= body[owner]
    cands, owner = cands[keep], owner[keep]
    if not len(cands):
        return None
    limits = msg_ends[owner]
    block = Block(view, cands - lo, limits - lo, len(types))
    stops = value_run_ends(block, types) + lo  # (a run that does not fit: lo - 1)
    # where each candidate is its batch's last and first
    last = np.ones(len(cands), dtype=bool)
    last[:-1] = owner[1:] != owner[:-1]
    first = np.ones(len(cands), dtype=bool)
    first[1:] = last[:-1]
    per = np.bincount(owner, minlength=len(msg_ends))
    if (per == counts).all():
        # no look-alike: each record ends where the next of its batch starts, a batch's
        # last at the batch's end
        following = np.empty_like(cands)
        following[:-1] = cands[1:]
        following[last] = limits[last]
        if (stops == following).all() and (cands[first] == body[owner[first]]).all():
            return cands, stops, counts
        return None
    # batches with look-alikes (rare): their records are the chain from their first start
    true = per == counts
    keep = true[owner]
    for b in np.flatnonzero(~true).tolist():
        mine = np.flatnonzero(owner == b)
        index = dict(zip(cands[mine].tolist(), mine.tolist(), strict=True))
        pos, stop = int(body[b]), int(msg_ends[b])
        for _ in range(int(counts[b])):
            k = index.get(pos)
            if k is None:
                return None
            keep[k] = True
            pos = int(stops[k])
        if pos != stop:
            return None
    cands, stops, owner = cands[keep], stops[keep], owner[keep]
    last = np.ones(len(cands), dtype=bool)
    last[:-1] = owner[1:] != owner[:-1]
    following = np.empty_like(cands)
    following[:-1] = cands[1:]
    following[last] = msg_ends[owner[last]]
    if not (stops == following).all():
        return None
    return cands, stops, counts


def record_count(data: bytes, header: BatchHeader) -> int:
    """How many records the batch says it holds (the count after its header)."""
    if header.size + 4 > len(data):
        raise DecodeError(f"log batch of {header.path!r}: truncated record count")
    return int(_U32.unpack_from(data, header.size)[0])


def record_ends(data: bytes, header: BatchHeader) -> list[int]:
    """Where each record of the batch ends (the first starts at ``header.size + 4``)."""
    ends, _buf = _ends(data, header)
    return ends if isinstance(ends, list) else ends.tolist()


def _ends(data: bytes, header: BatchHeader) -> tuple[list[int] | np.ndarray, np.ndarray | None]:
    """The records' ends: from many records at once with numpy (an array, with the padded
    buffer it was found in), else one by one (a list)."""
    count = record_count(data, header)
    pos = header.size + 4
    width = len(header.schema.fields)
    if count and (not width or count * width * _VALUE_MIN > len(data) - pos):
        raise DecodeError(
            f"log batch of {header.path!r}: {count} records of {width} fields do not fit "
            f"in {len(data) - pos} bytes"
        )
    end = len(data)
    if count >= VECTOR_MIN:
        found = _vector_ends(data, header, pos, count)
        if found is not None:
            return found
    ends: list[int] = []
    try:
        for _ in range(count):
            for _ in range(width):
                pos = _skip(data, pos, 0)
            if pos > end:
                raise ValueError("truncated")
            ends.append(pos)
    except (ValueError, struct.error, IndexError):
        raise DecodeError(
            f"log batch of {header.path!r}: record {len(ends)} is malformed "
            f"(at byte {ends[-1] if ends else header.size + 4})"
        ) from None
    if pos != end:
        raise DecodeError(
            f"log batch of {header.path!r}: {end - pos} bytes left after {count} records"
        )
    return ends, None


def _vector_ends(
    data: bytes, header: BatchHeader, first: int, count: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """The records' ends found with numpy, and the padded buffer (None: not found this way).

    Every record starts with its first column's value header, whose type and
    subtype (0) are known: the places where those 8 bytes occur are candidate
    starts (the records' own and, rarely, look-alikes inside values). From every
    candidate at once, the columns are walked as :mod:`~broker_spark.zeek.columns`
    decodes them, giving where a record starting there would end; the records are
    then the chain from the first start, each beginning where the one before ended,
    which must be ``count`` long and end at the batch's end.
    """
    types = header.schema.types
    tag = int(types[0].tag)
    end = len(data)
    buf = np.zeros(end + _PAD, dtype=np.uint8)
    buf[:end] = np.frombuffer(data, dtype=np.uint8)
    # the type's last byte first (a zero byte would match everywhere), then all 8 bytes
    cands = np.flatnonzero(buf[first + 3 : end] == tag) + first
    words = np.ndarray(shape=(len(buf) - 7,), dtype=">u8", buffer=buf, strides=(1,))
    cands = cands[words[cands] == tag << 32]
    if not len(cands) or cands[0] != first:
        return None
    bound = np.full(len(cands), end, dtype=np.int64)
    stops = value_run_ends(Block(buf, cands, bound, len(types)), types)
    if len(cands) == count and stops[-1] == end and (stops[:-1] == cands[1:]).all():
        return stops, buf  # no look-alike: each record ends where the next starts
    index = dict(zip(cands.tolist(), stops.tolist(), strict=True))
    ends = []
    pos = first
    for _ in range(count):
        pos = index.get(pos, -1)
        if pos < 0:
            return None
        ends.append(pos)
    return (np.asarray(ends, dtype=np.int64), buf) if pos == end else None


def _assemble(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, head: bytes, prefix: bytes
) -> bytes:
    """One Broker Batch of the records ``buf[starts[i]:ends[i]]`` (back to back in ``buf``)
    as LogWrites: :data:`_BATCH_HEAD`, their count, and per record ``head``, the varbyte of
    its ``serial_data`` length, ``prefix`` (the field count) and the record, built with numpy:
    the records' bytes keep their order, so one masked copy moves them all."""
    n = len(starts)
    sizes = ends - starts
    serial = sizes + 4
    width = np.where(serial < 0x80, 1, np.where(serial < 0x4000, 2, 3))
    fixed = len(head) + width + 4
    piece = fixed + sizes
    lead = _BATCH_HEAD + encode_varbyte(n)
    begin = np.cumsum(piece) - piece + len(lead)
    out = np.empty(len(lead) + int(piece.sum()), dtype=np.uint8)
    record = np.ones(len(out), dtype=bool)
    out[: len(lead)] = np.frombuffer(lead, dtype=np.uint8)
    record[: len(lead)] = False
    at = begin[:, None] + np.arange(len(head))
    out[at] = np.frombuffer(head, dtype=np.uint8)
    record[at] = False
    at = begin + len(head)
    low = serial & 0x7F
    out[at] = np.where(width > 1, low | 0x80, low)
    record[at] = False
    two = width > 1
    mid = (serial >> 7) & 0x7F
    out[at[two] + 1] = np.where(width[two] > 2, mid[two] | 0x80, mid[two])
    record[at[two] + 1] = False
    three = width > 2
    out[at[three] + 2] = serial[three] >> 14
    record[at[three] + 2] = False
    at = (at + width)[:, None] + np.arange(len(prefix))
    out[at] = np.frombuffer(prefix, dtype=np.uint8)
    record[at] = False
    out[record] = buf[starts[0] : ends[-1]]
    return out.tobytes()


def decode_batch(data: bytes) -> tuple[BatchHeader, list[list[Any]]]:
    """The header and every record's values (see :func:`~broker_spark.zeek.record.decode_values`)."""
    header = read_header(data)
    ends = record_ends(data, header)
    prefix = _I32.pack(len(header.schema.fields))
    start = header.size + 4
    records = []
    for end in ends:
        records.append(decode_values(prefix + data[start:end], header.schema.names))
        start = end
    return header, records


def encode_batch(
    schema: LogSchema,
    records: Sequence[Sequence[Any]],
    *,
    writer: str = DEFAULT_WRITER,
    filter_name: str = DEFAULT_FILTER,
) -> bytes:
    """A batch as a Zeek node PUSHes it: ``records`` (values in column order) of ``schema``."""
    out = bytearray()
    for text in (schema.stream, writer, filter_name, schema.path):
        raw = text.encode("utf-8")
        out += _U32.pack(len(raw)) + raw
    out += _U32.pack(len(schema.fields))
    for f in schema.fields:
        if f.secondary_name is None:
            out.append(0)
        else:
            raw = f.secondary_name.encode("utf-8")
            out += b"\x01" + _U32.pack(len(raw)) + raw
        raw = f.name.encode("utf-8")
        out += _U32.pack(len(raw)) + raw
        out += _FIELD_TYPES.pack(int(f.type), int(f.subtype), 1 if f.optional else 0)
    out += _U32.pack(len(records))
    for values in records:
        if len(values) != len(schema.fields):
            raise EncodeError(f"log batch: {len(values)} values for {len(schema.fields)} columns")
        out += encode_record(values, schema.fields)[4:]
    return bytes(out)


# --- into Broker messages --------------------------------------------------------------


def _log_write_head(stream: str, writer: str, path: str) -> bytes:
    """The bytes of a LogWrite up to its record's length: the message head, the stream and
    writer enums, the path and the string tag of ``serial_data`` (ZEEK.md section 1)."""
    out = bytearray(b"\x0e\x03\x02" + (1).to_bytes(8, "big") + b"\x02" + (3).to_bytes(8, "big"))
    out += b"\x0e\x04"
    for tag, text in ((0x0B, stream), (0x0B, writer), (0x05, path)):
        raw = text.encode("utf-8")
        out.append(tag)
        out += encode_varbyte(len(raw)) + raw
    out.append(0x05)
    return bytes(out)


#: Records per Broker Batch, as a Zeek logging over Broker sends them (``Broker::log_batch_size``):
#: a ZeroMQ batch of up to 1000 becomes Batches of this size, so the spool and its readers
#: see the messages they see from Broker (a spool appends 400-record messages fastest).
BROKER_BATCH = 400

#: The varbyte of ``serial_data``'s length (the record plus its 4-byte count), by record size.
_lengths: dict[int, bytes] = {}


def _length(size: int) -> bytes:
    raw = encode_varbyte(size + 4)
    if len(_lengths) < 65536:
        _lengths[size] = raw
    return raw


_BATCH_HEAD = b"\x0e\x03\x02" + (1).to_bytes(8, "big") + b"\x02" + (5).to_bytes(8, "big") + b"\x0e"


class _Log:
    """What the translator keeps per distinct batch header."""

    __slots__ = ("create", "head", "header", "prefix")

    def __init__(self, header: BatchHeader) -> None:
        self.header = header
        self.head = _log_write_head(header.stream, header.writer, header.path)
        self.prefix = _I32.pack(len(header.schema.fields))
        info = WriterInfo(header.path)
        self.create = encode(LogCreate(header.stream, header.writer, info, header.schema).as_data())


class BatchTranslator:
    """Turns ZeroMQ log batches into Broker messages: LogCreates and Batches of LogWrites.

    It remembers which columns it announced per sender and log, so a LogCreate
    precedes a log's first batch from each sender and any batch whose columns
    changed, as a Zeek peering over Broker would send. For passing a ZeroMQ
    cluster's logs on to Broker peers, and for comparing both paths (the tests and
    benchmarks); the receiving side does not translate (see the module).
    """

    def __init__(self) -> None:
        self._logs: dict[bytes, _Log] = {}
        self._announced: dict[tuple[str, str, str], LogSchema] = {}

    def translate(self, batch: bytes, sender: str) -> tuple[BatchHeader, list[bytes]]:
        """The header of ``batch`` and the Broker messages it becomes (a LogCreate first
        when its columns are news from ``sender``); DecodeError for a malformed batch."""
        log = self._log(batch)
        header = log.header
        ends, buf = _ends(batch, header)
        out: list[bytes] = []
        key = (sender, header.stream, header.path)
        if self._announced.get(key) != header.schema:
            if len(self._announced) >= 4096:
                self._announced.clear()
            self._announced[key] = header.schema
            out.append(log.create)
        if not len(ends):
            return header, out
        head = log.head
        prefix = log.prefix
        first = header.size + 4
        if buf is not None and int((ends[1:] - ends[:-1]).max(initial=0)) < 1 << 20:
            assert isinstance(ends, np.ndarray)
            starts = np.concatenate(([first], ends[:-1]))
            for lo in range(0, len(ends), BROKER_BATCH):
                hi = lo + BROKER_BATCH
                out.append(_assemble(buf, starts[lo:hi], ends[lo:hi], head, prefix))
            return header, out
        ends = ends if isinstance(ends, list) else ends.tolist()
        start = first
        for lo in range(0, len(ends), BROKER_BATCH):
            chunk = ends[lo : lo + BROKER_BATCH]
            parts = [_BATCH_HEAD, encode_varbyte(len(chunk))]
            for end in chunk:
                parts.append(head)
                parts.append(_lengths.get(end - start) or _length(end - start))
                parts.append(prefix)
                parts.append(batch[start:end])
                start = end
            out.append(b"".join(parts))
        return header, out

    def _log(self, batch: bytes) -> _Log:
        header = read_header(batch)
        key = batch[: header.size]
        log = self._logs.get(key)
        if log is None:
            if len(self._logs) >= _HEADER_CACHE:
                self._logs.clear()
            log = self._logs[key] = _Log(header)
        return log
