"""A batch of received messages packed as the spool's record stream, fast.

Appending is the relay's hot path: a busy Zeek's batches arrive by the thousand
a second, and packing each record with its own msgpack call would cost more than
writing them. :func:`chunker` numbers a batch once and packs it in as few C calls
as the records allow (one, for the usual batch of records of one length), while
still naming a record that cannot be packed (:class:`~broker_spark.errors.EncodeError`)
before anything is written. :class:`~broker_spark.spool.spool.Spool` plans its
segments and index entries over the chunks it hands out.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

import msgpack

from broker_spark.columnar.strided import strided_records
from broker_spark.data.msgpack_records import pack_records
from broker_spark.errors import EncodeError

__all__ = ["chunker"]

_FIELD_TYPES = ({str}, {bytes}, {str}, {int})
#: The types of a numbered record's fields: a record's, and its offset.
_ROW_TYPES = (*_FIELD_TYPES, {int})


def _plain_records(batch: Sequence[Sequence[Any]], kinds: tuple = _FIELD_TYPES) -> bool:
    """Whether every record is a ``(str, bytes, str, int)`` tuple of exactly those types
    (``kinds``; checked a column at a time, in C): such records pack in bulk."""
    try:
        if set(map(len, batch)) != {len(kinds)}:
            return False
        return all(
            set(map(type, map(itemgetter(k), batch))) == kind for k, kind in enumerate(kinds)
        )
    except Exception:  # not sequences, or too short: not plain
        return False


def chunker(
    batch: Sequence[Sequence[Any]], first: int, numbered: bool = False
) -> Callable[[int, int], Any]:
    """``chunk(i, take)``: records ``batch[i:i+take]`` as a record stream, offsets from ``first``.

    With ``numbered`` the batch is rows already, each record with its offset
    (``first`` on, one apart: the caller's word, as the spool's pump numbers
    what it takes as it stamps it); else the records are numbered once. The
    usual batch (one peer, one topic, events of one layout) packs into
    records of one length: then it is packed
    in one C call, and checking the packed headers of every record (one
    extended slice per header byte, see :mod:`~broker_spark.columnar.strided`)
    proves each is ``[str, bin, str, uint, uint]``, so the checks of the
    careful path hold and a chunk is a slice of that packing. Otherwise chunks
    are packed one at a time, in bulk when :func:`_plain_records` says the
    types allow, else by ``pack_records``, which names a bad record.
    """
    if numbered:
        rows = batch if type(batch) is list else list(batch)
    else:
        try:
            rows = _numbered(batch, first)
        except (TypeError, ValueError):
            return lambda i, take: _pack_chunk(batch, i, take, first + i)  # raises EncodeError
    if _one_length(batch):
        try:
            packed = _packb(rows)[_array_header_size(len(rows)) :]
        except Exception:  # not packable: the careful path says which record
            packed = b""
        found = strided_records(packed, len(rows))
        if found is not None:
            view, stride = memoryview(packed), found.layout.stride
            return lambda i, take: view[i * stride : (i + take) * stride]
    if numbered:
        plain = _plain_records(rows, _ROW_TYPES)
        return lambda i, take: _pack_numbered_chunk(rows, i, take, plain)
    plain = _plain_records(batch)
    return lambda i, take: _pack_rows(rows[i : i + take], plain)


def _numbered(records: Sequence[Sequence[Any]], first: int) -> list[tuple[Any, ...]]:
    """``(topic, payload, sender, received_at, offset)`` rows, offsets from ``first``; raises
    TypeError or ValueError on a record that is not a 4-sequence."""
    return [
        (topic, payload, sender, received_at, offset)
        for offset, (topic, payload, sender, received_at) in zip(itertools.count(first), records)
    ]


def _one_length(batch: Sequence[Sequence[Any]]) -> bool:
    """Whether the payloads of the first, middle and last records have one length (a
    cheap guess that all records pack to one length, which :func:`chunker` then checks)."""
    try:
        return len({len(batch[k][1]) for k in (0, len(batch) // 2, -1)}) == 1
    except Exception:
        return False


def _array_header_size(n: int) -> int:
    """The size of the msgpack array header of ``n`` items."""
    return 1 if n < 16 else 3 if n < 65536 else 5


def _pack_chunk(batch: Sequence[Sequence[Any]], i: int, take: int, first: int) -> bytes:
    """Records ``batch[i:i+take]`` as a record stream with offsets from ``first``."""
    try:
        rows = _numbered(batch[i : i + take], first)
    except (TypeError, ValueError):
        raise EncodeError(
            f"records {i} to {i + take - 1} of the batch are not all "
            "(topic, payload, sender, received_at_ns) tuples"
        ) from None
    return _pack_rows(rows, False)  # a later chunk holds the bad record: check every one


def _pack_numbered_chunk(rows: list[tuple[Any, ...]], i: int, take: int, plain: bool) -> bytes:
    """Numbered ``rows[i:i+take]`` as a record stream; raises EncodeError on a row that is not
    a 5-sequence (records are checked so when they are numbered here)."""
    try:
        return _pack_rows(rows[i : i + take], plain)
    except (TypeError, ValueError):
        raise EncodeError(
            f"rows {i} to {i + take - 1} of the batch are not all "
            "(topic, payload, sender, received_at_ns, offset) tuples"
        ) from None


def _pack_rows(rows: list[tuple[Any, ...]], plain: bool) -> bytes:
    """Numbered records as a record stream. ``plain`` records (see :func:`_plain_records`)
    are packed as one msgpack array, whose header is then cut off: the same bytes as
    ``pack_records`` (records packed back to back), in one C call instead of one per record."""
    if plain:
        try:
            packed = _packb(rows)
        except (ValueError, OverflowError):
            pass  # e.g. a time beyond 64 bits: pack_records names the record
        else:
            return packed[_array_header_size(len(rows)) :]
    return pack_records(rows)


def _packb(rows: list[tuple[Any, ...]]) -> bytes:
    return msgpack.packb(rows, use_bin_type=True)
