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
    "keep_topics",
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
    "Record",
    "is_record",
    "pack_record",
    "pack_records",
    "pack_value",
    "record_unpacker",
    "records_end",
    "unpack_records",
    "unpack_value",
]


def keep_topics(stream: bytes, prefixes: tuple[str, ...]) -> tuple[bytes, int]:
    """The records of ``stream`` whose topic starts with one of ``prefixes``, as a record
    stream (their bytes untouched), and how many there are: what a relay serves a reader
    its credential limits to some topics (``spool/relay_server.py``)."""
    unpacker = record_unpacker(stream)
    kept: list[bytes] = []
    start = 0
    for record in unpacker:
        end = unpacker.tell()
        if not is_record(record):
            raise DecodeError(f"record at byte {start} is not a spool record")
        if record[0].startswith(prefixes):
            kept.append(stream[start:end])
        start = end
    return b"".join(kept), len(kept)


def stamped(
    items: list[tuple[str, bytes, str]], clock_ns: Callable[[], int]
) -> list[tuple[str, bytes, str, int]]:
    """``(topic, payload, sender)`` messages as spool records' fields, all stamped with one
    ``clock_ns()`` read (a source's ``take_stamped``: one clock read per batch taken)."""
    if not items:
        return []
    now = clock_ns()
    return [(topic, payload, sender, now) for topic, payload, sender in items]
