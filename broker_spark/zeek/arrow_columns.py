"""Arrow arrays from decoded columns (:mod:`~broker_spark.zeek.columns`).

Two consumers want a column of many records as Arrow: Spark, which wants
typed arrays (a ``time`` as a timestamp, a ``port`` as its number, a set as a
list), and the JSON renderer, which wants the texts Zeek writes. Both start
from the same pieces built here in bulk: the texts Zeek's JSON writer holds
for strings (:func:`~broker_spark.zeek.text.zeek_text`: printable ASCII is
taken as it is, in one pass; only strings holding other bytes go through
Python), and addresses as text (IPv4 in bulk, IPv6 one at a time). Where the
optional C accelerator :data:`~broker_spark.zeek.compiled.zeek_texts` was built,
it gathers the texts and spells the addresses instead (the tests hold the two
ways equal).

Natural forms (:func:`natural_array`): bool ``bool``, int ``int64``, count
``uint64``, double, time and interval ``float64`` (seconds), port ``uint16``
(its number), texts ``string``, addr and subnet ``string``, set and vector a
``list`` of the element's form. SQL forms (:func:`sql_array`: no unsigned integers,
times as timestamps; what a Spark table takes) differ in count (``int64``, above
2**63-1 is a misfit), time (``timestamp[us]``, rounded half away from zero, as
``read_zeek_json`` does), port (``int32``).
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_spark.zeek import compiled
from broker_spark.zeek.columns import ColumnData, gather_bytes
from broker_spark.zeek.text import addr_text, zeek_text
from broker_spark.zeek.types import TEXT_TAGS, TypeTag

__all__ = [
    "addr_strings",
    "micros_of_seconds",
    "natural_array",
    "printable_rows",
    "raw_texts",
    "row_spans",
    "sql_array",
    "text_strings",
    "validity",
]

_INT64_MAX = np.uint64((1 << 63) - 1)


@functools.cache
def _digits() -> pa.Array:
    """ "0" to "255", a subnet's prefix lengths as text. Made on first use, not at import:
    pyarrow's first ``pa.array`` imports pandas when it is installed (140 ms of CPU, measured),
    which a reader's driver-side process, importing this module but decoding nothing, would
    pay at every query's start."""
    return pa.array([str(i) for i in range(256)], pa.string())


def validity(present: np.ndarray) -> pa.Buffer | None:
    """An Arrow validity bitmap for ``present`` (None when every entry is present)."""
    if present.all():
        return None
    return pa.py_buffer(np.packbits(present, bitorder="little"))


def numbers(values: np.ndarray, kind: pa.DataType, present: np.ndarray) -> pa.Array:
    """A numeric Arrow array straight from its buffers (``pa.array`` with a mask is several
    times slower); ``values`` must be in the native layout of ``kind``."""
    data = np.ascontiguousarray(values)
    return pa.Array.from_buffers(
        kind,
        len(data),
        [validity(present), pa.py_buffer(data)],
        null_count=int(len(present) - np.count_nonzero(present)),
    )


def _offsets(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def raw_texts(buf: np.ndarray, col: ColumnData) -> tuple[np.ndarray, np.ndarray]:
    """The bytes of a text column (all records' texts back to back) and their offsets."""
    assert col.starts is not None and col.lengths is not None
    return gather_bytes(buf, col.starts, col.lengths), _offsets(col.lengths)


def printable_rows(data: np.ndarray, offsets: np.ndarray, extra: bytes = b"") -> np.ndarray:
    """Per text, whether every byte is printable ASCII and none of ``extra``."""
    bad = (data - np.uint8(0x20)) >= np.uint8(0x5F)
    for byte in extra:
        bad |= data == byte
    counts = np.zeros(len(data) + 1, dtype=np.int64)
    np.cumsum(bad, out=counts[1:])
    return counts[offsets[1:]] == counts[offsets[:-1]]


def _string_array(
    data: np.ndarray, offsets: np.ndarray, present: np.ndarray, kind: pa.DataType
) -> pa.Array:
    n = len(offsets) - 1
    large = int(offsets[-1]) >= (1 << 31) - 1
    arrow_type = (
        {pa.string(): pa.large_string(), pa.binary(): pa.large_binary()}[kind] if large else kind
    )
    offs = offsets if large else offsets.astype(np.int32)
    arr = pa.Array.from_buffers(
        arrow_type,
        n,
        [validity(present), pa.py_buffer(offs), pa.py_buffer(data)],
        null_count=int(n - present.sum()),
    )
    return arr.cast(kind) if large else arr


def row_spans(col: ColumnData) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """A text or address column's rows as the C accelerator takes them: their count,
    starts and lengths (int64) and presence (a byte a row)."""
    assert col.starts is not None and col.lengths is not None
    return (
        len(col.present),
        np.ascontiguousarray(col.starts, dtype=np.int64),
        np.ascontiguousarray(col.lengths, dtype=np.int64),
        np.ascontiguousarray(col.present, dtype=bool).view(np.uint8),
    )


def text_strings(buf: np.ndarray, col: ColumnData) -> pa.Array:
    """A text column as the strings Zeek's JSON writer holds (``zeek_text`` of each)."""
    accelerator = compiled.zeek_texts
    if accelerator is not None:  # gathered in C, each row's bytes checked on the way
        n, starts, lengths, has = row_spans(col)
        raw_offsets, raw_data, flags = accelerator.texts(n, buf, starts, lengths, has)
        data = np.frombuffer(raw_data, dtype=np.uint8)
        offsets = np.frombuffer(raw_offsets, dtype=np.int64)
        plain = np.frombuffer(flags, dtype=bool)
        if plain.all():
            return _string_array(data, offsets, col.present, pa.string())
    else:
        data, offsets = raw_texts(buf, col)
        if ((data - np.uint8(0x20)) < np.uint8(0x5F)).all():  # all printable: as they are
            return _string_array(data, offsets, col.present, pa.string())
        plain = printable_rows(data, offsets)
    raw = _string_array(data, offsets, col.present, pa.binary())
    fix = np.flatnonzero(~plain & col.present)
    texts = [zeek_text(raw[int(i)].as_py()) for i in fix]
    mask = np.zeros(len(plain), dtype=bool)
    mask[fix] = True
    fixed = pc.replace_with_mask(
        raw, pa.array(mask), pa.array([t.encode() for t in texts], pa.binary())
    )
    return fixed.cast(pa.string())


@functools.cache
def _octet_pairs() -> pa.Array:
    """``"0.0"`` to ``"255.255"``: two octets' text by their 16-bit value (built on first use)."""
    digits = [str(i) for i in range(256)]
    return pa.array([f"{a}.{b}" for a in digits for b in digits], pa.string())


@functools.cache
def _hex_words() -> pa.Array:
    """``"0"`` to ``"ffff"``: an IPv6 word's text by its value (built on first use)."""
    return pa.array([f"{i:x}" for i in range(65536)] + [""], pa.string())


def ipv6_strings(raw: np.ndarray) -> pa.Array:
    """IPv6 addresses (rows of 16 bytes) as ``zeek_inet_ntop`` writes them.

    The parts of each address are its words in hex, with the first longest run
    of two or more zero words replaced by one empty part (plus one more at
    either end of the address), joined with ``:``. The three forms Zeek writes
    with an IPv4 tail go through :func:`~broker_spark.zeek.text.addr_text`.
    """
    n = len(raw)
    words = raw.reshape(n, 8, 2).astype(np.int64)
    words = (words[:, :, 0] << 8) | words[:, :, 1]
    zero = words == 0
    run = np.zeros((n, 8), dtype=np.int64)
    run[:, 0] = zero[:, 0]
    for i in range(1, 8):
        run[:, i] = np.where(zero[:, i], run[:, i - 1] + 1, 0)
    length = run.max(axis=1)
    end = run.argmax(axis=1)  # the first position where the longest run ends
    length[length < 2] = 0
    start = np.where(length > 0, end - length + 1, 8)
    position = np.arange(8)
    inside = (position >= start[:, None]) & (position < (start + length)[:, None])
    # slots: a leading empty part, the eight words (the run's first word becomes the
    # empty part, its others vanish), a trailing empty part
    empty = 65536
    slots = np.full((n, 10), -1, dtype=np.int64)
    slots[:, 1:9] = np.where(inside, -1, words)
    slots[np.arange(n), 1 + np.minimum(start, 7)] = np.where(
        length > 0, empty, slots[np.arange(n), 1 + np.minimum(start, 7)]
    )
    slots[:, 0] = np.where((length > 0) & (start == 0), empty, -1)
    slots[:, 9] = np.where((length > 0) & (start + length == 8), empty, -1)
    keep = slots >= 0
    counts = keep.sum(axis=1)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    parts = pc.take(_hex_words(), pa.array(slots[keep]))
    out = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), parts), ":")
    tail = (start == 0) & (
        (length == 6)
        | ((length == 5) & (words[:, 5] == 0xFFFF))
        | ((length == 4) & (words[:, 4] == 0xFFFF) & (words[:, 5] == 0))
    )
    rows = np.flatnonzero(tail)
    if len(rows):
        mask = np.zeros(n, dtype=bool)
        mask[rows] = True
        texts = [addr_text(raw[i].tobytes()) for i in rows]
        out = pc.replace_with_mask(out, pa.array(mask), pa.array(texts, pa.string()))
    return out


def addr_strings(buf: np.ndarray, col: ColumnData) -> pa.Array:
    """An address column (or a subnet's addresses) as Zeek writes addresses."""
    assert col.starts is not None and col.lengths is not None
    present = col.present
    n = len(present)
    accelerator = compiled.zeek_texts
    if accelerator is not None:  # spelt in C
        _, starts, lengths, has = row_spans(col)
        offsets, data = accelerator.addresses(n, buf, starts, lengths, has)
        return pa.Array.from_buffers(
            pa.string(),
            n,
            [validity(present), pa.py_buffer(offsets), pa.py_buffer(data)],
            null_count=int(n - np.count_nonzero(present)),
        )
    v4 = present & (col.lengths == 4)
    starts = np.where(v4, col.starts, 0)
    # two halves ("10.0" and "0.1") from a table of every pair of octets, joined with a dot
    pairs = _octet_pairs()
    high = (buf[starts].astype(np.int32) << 8) | buf[starts + 1]
    low = (buf[starts + 2].astype(np.int32) << 8) | buf[starts + 3]
    out = pc.binary_join_element_wise(
        pc.take(pairs, pa.array(high)), pc.take(pairs, pa.array(low)), "."
    )
    v6 = np.flatnonzero(present & (col.lengths == 16))
    if len(v6):
        raw = buf[col.starts[v6][:, None] + np.arange(16)]
        mask = np.zeros(n, dtype=bool)
        mask[v6] = True
        out = pc.replace_with_mask(out, pa.array(mask), ipv6_strings(raw))
    if not present.all():
        out = pc.if_else(pa.array(present), out, pa.scalar(None, pa.string()))
    return out


def subnet_strings(buf: np.ndarray, col: ColumnData) -> pa.Array:
    assert col.prefix is not None
    prefix = pc.take(_digits(), pa.array(np.clip(col.prefix, 0, 255).astype(np.uint8)))
    return pc.binary_join_element_wise(addr_strings(buf, col), prefix, "/")


#: The microseconds of 0001-01-01 and 9999-12-31T23:59:59.999999, the range Spark supports.
MIN_MICROS = -62_135_596_800_000_000
MAX_MICROS = 253_402_300_799_999_999


def micros_of_seconds(seconds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Microseconds (rounded half away from zero) and which of them Spark's timestamps hold."""
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = seconds * 1e6
        rounded = np.trunc(scaled + np.copysign(0.5, scaled))
        # bounds as doubles that are exact (MAX_MICROS itself is not one)
        fits = np.isfinite(rounded) & (rounded >= float(MIN_MICROS)) & (rounded < 2.534023008e17)
        micros = np.where(fits, rounded, 0).astype(np.int64)
    return micros, fits


def _list_array(col: ColumnData, values: pa.Array) -> pa.Array:
    assert col.counts is not None
    offsets = _offsets(col.counts).astype(np.int32)
    return pa.ListArray.from_arrays(
        pa.array(offsets), values, mask=pa.array(~col.present) if not col.present.all() else None
    )


def natural_array(buf: np.ndarray, col: ColumnData) -> pa.Array:
    """A column in its natural Arrow form (see the module's docstring)."""
    tag = col.tag
    mask = None if col.present.all() else ~col.present
    if tag is TypeTag.BOOL:
        return pa.array(col.values != 0, pa.bool_(), mask=mask)
    if tag is TypeTag.INT:
        return numbers(col.values.astype(np.int64), pa.int64(), col.present)
    if tag is TypeTag.COUNT:
        return numbers(col.values.astype(np.uint64), pa.uint64(), col.present)
    if tag in (TypeTag.DOUBLE, TypeTag.TIME, TypeTag.INTERVAL):
        return numbers(col.values.astype(np.float64), pa.float64(), col.present)
    if tag is TypeTag.PORT:
        return numbers(col.values.astype(np.uint16), pa.uint16(), col.present)
    if tag in TEXT_TAGS:
        return text_strings(buf, col)
    if tag is TypeTag.ADDR:
        return addr_strings(buf, col)
    if tag is TypeTag.SUBNET:
        return subnet_strings(buf, col)
    if tag in (TypeTag.TABLE, TypeTag.VECTOR):
        assert col.elements is not None
        return _list_array(col, natural_array(buf, col.elements))
    return pa.nulls(len(col.present), pa.null())


def sql_array(buf: np.ndarray, col: ColumnData) -> tuple[pa.Array, int]:
    """A column in its SQL form (see the module's docstring), and how many values did not
    fit (made null)."""
    tag = col.tag
    if tag is TypeTag.COUNT:
        values = col.values.astype(np.uint64)
        fits = values <= _INT64_MAX
        present = col.present & fits
        misfits = int((col.present & ~fits).sum())
        return numbers(values.astype(np.int64), pa.int64(), present), misfits
    if tag is TypeTag.TIME:
        micros, fits = micros_of_seconds(col.values.astype(np.float64))
        present = col.present & fits
        misfits = int((col.present & ~fits).sum())
        return numbers(micros, pa.timestamp("us", tz="UTC"), present), misfits
    if tag is TypeTag.PORT:
        return numbers(col.values.astype(np.int32), pa.int32(), col.present), 0
    if tag in (TypeTag.TABLE, TypeTag.VECTOR):
        assert col.elements is not None
        inner, misfits = sql_array(buf, col.elements)
        return _list_array(col, inner), misfits
    return natural_array(buf, col), 0
