"""Our own compact msgpack format, for bytes we write and read back ourselves.

Broker's binary encoding is what peers speak; this format is for what stays
with us: the Spark spool and the partitions shipped to executors. It favours
speed through msgpack's C extension over canonical bytes:

* the exact builtin types (``None``, ``bool``, ``int``, ``float``, ``str``,
  ``bytes``, ``list``, ``dict``) are packed natively, because the packer runs
  with ``strict_types=True``; a ``tuple`` (a vector) becomes a msgpack array,
  and every array decodes as a ``tuple`` (``use_list=False``), so a vector is
  always a tuple and no other type uses arrays;
* every other Broker type goes through ``default`` into an extension type
  (``EXT_COUNT`` and friends), so ``Count`` stays distinct from ``int``,
  ``set`` from ``frozenset`` and from vectors, and timestamps and timespans
  keep their nanoseconds;
* tables are msgpack maps with arbitrary keys; a :class:`FrozenTable` (the
  hashable table that can itself be a key or a set element) and ``frozenset``
  have their own codes, so a decoded key is hashable whenever the encoded one
  was, and every value comes back with the type it went in with.

Values are packed by :mod:`~broker_spark.data.msgpack_pack` and unpacked by
:mod:`~broker_spark.data.msgpack_unpack` (both re-exported here). This module
frames messages as we spool them: a record is ``[topic, payload, sender,
received_at_ns, offset]``, where ``payload`` is the message's Broker binary
encoding, kept as bytes so it is never re-encoded. A record stream is simply
records packed back to back. Records are the spool's per-message cost, so
both directions check the common case (exact field types) in one comparison
and build :class:`Record` straight from the unpacked tuple.

Decoding never trusts its input: every length is bounded by the input's size
and by ``max_record_size``, and any malformation raises :class:`DecodeError`
naming the byte where the bad record starts.

Readers that need a record's fields without unpacking it (the spool, to check
which offset a range starts at; :mod:`~broker_spark.columnar.strided`, to read a
stream of records of one layout a column at a time) walk its msgpack headers
with :func:`record_fields` (and :func:`str_header`, :func:`bin_header`,
:func:`uint_header`), so the record's layout is parsed here only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import msgpack

from broker_spark.data.msgpack_ext import (
    EXT_ADDRESS,
    EXT_COUNT,
    EXT_ENUM,
    EXT_FROZEN_TABLE,
    EXT_FROZENSET,
    EXT_PORT,
    EXT_SET,
    EXT_SUBNET,
    EXT_TIMESPAN,
    EXT_TIMESTAMP,
    MAX_NESTING,
    new_tuple,
)
from broker_spark.data.msgpack_pack import pack_value
from broker_spark.data.msgpack_unpack import unpack_value
from broker_spark.errors import DecodeError, EncodeError

MAX_RECORD_SIZE = 256 * 1024 * 1024
"""No single string or payload in a record stream may exceed this many bytes."""


class Record(NamedTuple):
    """One spooled message: its topic, Broker binary payload, and where and when it came from."""

    topic: str
    payload: bytes
    sender: str
    received_at_ns: int
    offset: int


_FIELD_TYPES = (str, bytes, str, int, int)

_RECORD_PACKERS: list[msgpack.Packer] = []
"""Idle record packers (a ``Packer`` is not thread-safe; ``pop``/``append`` are atomic)."""


def pack_record(topic: str, payload: bytes, sender: str, received_at_ns: int, offset: int) -> bytes:
    """Pack one record; the payload is stored as given (already Broker binary)."""
    record = (topic, payload, sender, received_at_ns, offset)
    if tuple(map(type, record)) != _FIELD_TYPES or offset < 0:
        _check_record(*record)
    try:
        packer = _RECORD_PACKERS.pop()
    except IndexError:
        packer = msgpack.Packer(use_bin_type=True)
    try:
        return packer.pack(record)
    except (ValueError, OverflowError) as exc:
        raise EncodeError(f"cannot pack record at offset {offset}: {exc}") from None
    finally:
        _RECORD_PACKERS.append(packer)


def pack_records(records: Iterable[Record | tuple]) -> bytes:
    """Pack many records into one stream (the concatenation of :func:`pack_record`)."""
    packer = msgpack.Packer(use_bin_type=True, autoreset=False)
    for rec in records:
        topic, payload, sender, received_at_ns, offset = rec
        _check_record(topic, payload, sender, received_at_ns, offset)
        try:
            packer.pack((topic, payload, sender, received_at_ns, offset))
        except (ValueError, OverflowError) as exc:
            raise EncodeError(f"cannot pack record at offset {offset}: {exc}") from None
    return packer.bytes()


def _check_record(topic: Any, payload: Any, sender: Any, received_at_ns: Any, offset: Any) -> None:
    """Raise :class:`EncodeError` naming the first field a record cannot have."""
    if not isinstance(topic, str) or not isinstance(sender, str):
        raise EncodeError("record topic and sender must be str")
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise EncodeError(f"record payload must be bytes, got {type(payload).__name__}")
    if type(received_at_ns) is not int or type(offset) is not int:
        raise EncodeError("record received_at_ns and offset must be int")
    if offset < 0:
        raise EncodeError(f"record offset must not be negative: {offset}")


def unpack_records(
    buf: bytes | bytearray | memoryview,
    *,
    allow_truncated: bool = False,
    max_record_size: int = MAX_RECORD_SIZE,
) -> Iterator[Record]:
    """Iterate over the records in a stream made by :func:`pack_record`/:func:`pack_records`.

    A stream that ends inside a record raises :class:`DecodeError` naming the
    byte, unless ``allow_truncated`` is set (a spool torn by a crash), in which
    case iteration stops before the incomplete record. Malformed content always
    raises :class:`DecodeError`. No single string or payload may exceed
    ``max_record_size`` bytes.
    """
    return _iter_records(buf, allow_truncated, max_record_size)


def records_end(buf: bytes | bytearray | memoryview, max_record_size: int = MAX_RECORD_SIZE) -> int:
    """The length of the longest prefix of ``buf`` made of complete records.

    What a spool needs after a crash: truncate its file to this length.
    Malformed content (as opposed to a torn end) raises :class:`DecodeError`.
    """
    unpacker = record_unpacker(buf, max_record_size)
    tell = unpacker.tell
    pos = 0
    try:
        for obj in unpacker:
            if type(obj) is not tuple or tuple(map(type, obj)) != _FIELD_TYPES or obj[4] < 0:
                raise _bad_record(obj, pos)
            pos = tell()
    except DecodeError:
        raise
    except Exception as exc:
        raise _malformed(exc, pos) from None
    return pos


def _iter_records(buf: Any, allow_truncated: bool, max_record_size: int) -> Iterator[Record]:
    """The records of ``buf``; iterating the ``Unpacker`` stops at a torn end by itself."""
    unpacker = record_unpacker(buf, max_record_size)
    tell = unpacker.tell
    pos = 0  # where the next record starts
    try:
        for obj in unpacker:
            if type(obj) is not tuple or tuple(map(type, obj)) != _FIELD_TYPES or obj[4] < 0:
                raise _bad_record(obj, pos)
            yield new_tuple(Record, obj)
            pos = tell()
    except DecodeError:
        raise
    except Exception as exc:
        raise _malformed(exc, pos) from None
    if pos != len(buf) and not allow_truncated:
        raise DecodeError(f"truncated record at byte {pos} of {len(buf)}")


def record_unpacker(buf: Any, max_record_size: int = MAX_RECORD_SIZE) -> msgpack.Unpacker:
    """An unpacker of the records in ``buf``, every length bounded by ``buf``'s size and
    ``max_record_size``: arrays of at most 5 fields, no maps, no extension types (a field
    never holds one; values inside payloads are Broker binary)."""
    size = max(len(buf), 1)
    limit = min(size, max_record_size)
    unpacker = msgpack.Unpacker(
        None,
        raw=False,
        use_list=False,
        max_buffer_size=size,
        max_str_len=limit,
        max_bin_len=limit,
        max_array_len=5,
        max_map_len=0,
        max_ext_len=0,
        ext_hook=_no_ext,
    )
    unpacker.feed(buf)
    return unpacker


#: The tag of a record: a msgpack fixarray of 5 fields.
RECORD_ARRAY = 0x95
_STR_WIDTHS = {0xD9: 1, 0xDA: 2, 0xDB: 4}  # str 8/16/32: the width of the length after the tag
_BIN_WIDTHS = {0xC4: 1, 0xC5: 2, 0xC6: 4}
#: msgpack's unsigned integer tags, by the width of the big-endian value after the tag.
UINT_WIDTHS = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}


def str_header(buf: Any, pos: int) -> tuple[int, int] | None:
    """A msgpack str header at ``pos``: ``(header size, length)``, or None."""
    tag = buf[pos]
    if 0xA0 <= tag <= 0xBF:
        return 1, tag & 0x1F
    width = _STR_WIDTHS.get(tag)
    if width is None or pos + 1 + width > len(buf):
        return None
    return 1 + width, int.from_bytes(buf[pos + 1 : pos + 1 + width], "big")


def bin_header(buf: Any, pos: int) -> tuple[int, int] | None:
    """A msgpack bin header at ``pos``: ``(header size, length)``, or None."""
    width = _BIN_WIDTHS.get(buf[pos])
    if width is None or pos + 1 + width > len(buf):
        return None
    return 1 + width, int.from_bytes(buf[pos + 1 : pos + 1 + width], "big")


def uint_header(buf: Any, pos: int) -> tuple[int, int] | None:
    """A msgpack unsigned integer at ``pos``: ``(header size, width)`` of its big-endian
    value, ``(0, 1)`` for a positive fixint (the tag is the value); None for another tag."""
    tag = buf[pos]
    if tag < 0x80:
        return 0, 1
    width = UINT_WIDTHS.get(tag)
    return None if width is None else (1, width)


_FIELD_HEADERS = (str_header, bin_header, str_header, uint_header, uint_header)


def record_fields(buf: Any, pos: int = 0, *, fixints: bool = True) -> list[tuple[int, int]] | None:
    """Where the fields of the record at ``pos`` lie, read from its msgpack headers alone:
    ``(position, size)`` of each field's bytes in ``buf`` (the integers' big-endian bytes),
    the record ending where the last ends; None when it is no ``[str, bin, str, uint,
    uint]`` array lying whole in ``buf`` (``fixints`` False: nor one whose integer is a
    fixint). It checks no more: :func:`unpack_records` is the judge of a record."""
    end = len(buf)
    if pos >= end or buf[pos] != RECORD_ARRAY:
        return None
    fields = []
    at = pos + 1
    for header in _FIELD_HEADERS:
        if at >= end:
            return None
        found = header(buf, at)
        if found is None:
            return None
        head, size = found
        if not head and not fixints:
            return None
        at += head
        if at + size > end:
            return None
        fields.append((at, size))
        at += size
    return fields


def is_record(obj: Any) -> bool:
    """Whether an unpacked ``obj`` is a record: 5 fields of the right types, offset >= 0."""
    return type(obj) is tuple and tuple(map(type, obj)) == _FIELD_TYPES and obj[4] >= 0


def _no_ext(code: int, data: bytes) -> Any:
    raise DecodeError(f"unexpected extension type {code} in a record")


def _bad_record(obj: Any, pos: int) -> DecodeError:
    """Why the unpacked ``obj`` starting at byte ``pos`` is not a record."""
    if type(obj) is not tuple or len(obj) != 5:
        return DecodeError(f"record at byte {pos} is not an array of 5 fields")
    if tuple(map(type, obj)) != _FIELD_TYPES:
        return DecodeError(f"record at byte {pos} has fields of the wrong types")
    return DecodeError(f"record at byte {pos} has a negative offset {obj[4]}")


def _malformed(exc: Exception, pos: int) -> DecodeError:
    return DecodeError(f"malformed record at byte {pos}: {type(exc).__name__}: {exc}")


__all__ = [
    "stamped",
    "EXT_ADDRESS",
    "EXT_COUNT",
    "EXT_ENUM",
    "EXT_FROZENSET",
    "EXT_FROZEN_TABLE",
    "EXT_PORT",
    "EXT_SET",
    "EXT_SUBNET",
    "EXT_TIMESPAN",
    "EXT_TIMESTAMP",
    "MAX_NESTING",
    "MAX_RECORD_SIZE",
    "RECORD_ARRAY",
    "Record",
    "UINT_WIDTHS",
    "bin_header",
    "is_record",
    "pack_record",
    "pack_records",
    "pack_value",
    "record_fields",
    "record_unpacker",
    "records_end",
    "str_header",
    "uint_header",
    "unpack_records",
    "unpack_value",
]


def stamped(
    items: list[tuple[str, bytes, str]], clock_ns: Callable[[], int]
) -> list[tuple[str, bytes, str, int]]:
    """``(topic, payload, sender)`` messages as spool records' fields, all stamped with one
    ``clock_ns()`` read (a source's ``take_stamped``: one clock read per batch taken)."""
    if not items:
        return []
    now = clock_ns()
    return [(topic, payload, sender, now) for topic, payload, sender in items]
