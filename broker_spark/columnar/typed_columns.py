"""Arrow columns encoded as the Broker data of a declared Zeek type: the typed writers' hot path.

A column with a Zeek type (an event parameter of the ``signature`` option,
a ``zeekTypes`` entry) becomes one Broker binary fragment per row, as
:func:`~broker_spark.columnar.column_encode.encode_column` makes them for the
natural mapping, so rows are still the join of their fragments and every
value is encoded once. What it costs depends on how far the column's Arrow
type is from the Zeek type:

* the same thing (int64 as ``int``, double as ``double``, string as
  ``string``, timestamp as ``time``, duration as ``interval``): the natural
  column encoding, and in bulk (:func:`bulk_column`) where the untyped
  writer would be;
* one check away: int64 as ``count`` (no negative value) and integers as
  ``double`` are cast and take the same paths;
* text that parses (``addr``, ``subnet``, ``port``, ``enum``, ``count``...)
  and numbers of seconds as ``time``/``interval``: a loop over the values
  with a cache of the fragments of texts already seen (a stream repeats its
  addresses, ports and enum names);
* nested columns (lists, maps, structs as sets, tables, vectors, records):
  :func:`~broker_spark.zeek.typed_values.converter` per value, then the
  binary encoder.

:func:`check_column` runs when the write starts and refuses a column that
can never hold the type (a boolean ``addr``, a struct whose fields are not
the record's), so the query fails at once with the column named. A value
that does not fit (a negative ``count``, text that is no address) is an
error for its row only, which the writer treats as a bad row.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from broker_spark.columnar.column_encode import encode_column
from broker_spark.columnar.record_batches import SchemaMappingError
from broker_spark.data.binary import encode
from broker_spark.data.varbyte import encode_varbyte
from broker_spark.errors import BrokerError
from broker_spark.zeek.script_types import (
    Basic,
    EnumType,
    RecordType,
    ScriptType,
    SetType,
    TableType,
    VectorType,
)
from broker_spark.zeek.typed_values import converter, seconds_ns

__all__ = ["bulk_column", "check_column", "encode_typed_column", "metadata_column"]

_NONE = b"\x00"
_I64 = struct.Struct(">Bq").pack
_U64 = struct.Struct(">BQ").pack
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
#: Distinct texts whose fragments one column remembers (per batch).
_CACHE_LIMIT = 65536

types = pa.types


def _is_text(t: pa.DataType) -> bool:
    return types.is_string(t) or types.is_large_string(t)


def _is_binary(t: pa.DataType) -> bool:
    return types.is_binary(t) or types.is_large_binary(t)


def _is_number(t: pa.DataType) -> bool:
    return types.is_integer(t) or types.is_floating(t) or types.is_decimal(t)


def _is_list(t: pa.DataType) -> bool:
    return types.is_list(t) or types.is_large_list(t) or types.is_fixed_size_list(t)


# --- can this column hold that type? (when the write starts) ------------------------------


def _atomic_fits(t: pa.DataType, name: str) -> bool:
    if name == "any" or types.is_null(t) or _is_text(t):
        return True  # text parses into every atomic type
    if name in ("count", "int"):
        return types.is_integer(t) or types.is_decimal(t)
    if name == "double":
        return _is_number(t)
    if name == "bool":
        return types.is_boolean(t)
    if name == "time":
        return types.is_timestamp(t) or _is_number(t)
    if name == "interval":
        return types.is_duration(t) or _is_number(t)
    if name == "string":
        return _is_binary(t)
    if name == "pattern":
        return _is_list(t) and _is_text(t.value_type)
    if name == "port":
        return types.is_struct(t)
    return False


def check_column(t: pa.DataType, zeek: ScriptType, what: str) -> None:
    """Refuse a column of Arrow type ``t`` that can never hold Zeek type ``zeek``."""
    if types.is_null(t) or isinstance(zeek, Basic) and zeek.name == "any":
        return
    if isinstance(zeek, Basic):
        if not _atomic_fits(t, zeek.name):
            raise SchemaMappingError(f"{what}: a {t} column cannot hold Zeek type {zeek}")
        return
    if isinstance(zeek, EnumType):
        if not _is_text(t):
            raise SchemaMappingError(f"{what}: an enum comes from a STRING column, not {t}")
        return
    if isinstance(zeek, (SetType, VectorType)):
        if not _is_list(t):
            raise SchemaMappingError(f"{what}: {zeek} comes from an ARRAY column, not {t}")
        inner = zeek.element if isinstance(zeek, VectorType) else None
        if inner is not None:
            check_column(t.value_type, inner, f"{what}[]")
        elif len(zeek.index) == 1:
            check_column(t.value_type, zeek.index[0], f"{what}[]")
        return
    if isinstance(zeek, TableType):
        if types.is_map(t):
            if len(zeek.index) == 1:
                check_column(t.key_type, zeek.index[0], f"{what} key")
            check_column(t.item_type, zeek.value, f"{what} value")
            return
        if _is_list(t) and types.is_struct(t.value_type):
            return  # key/value structs, checked per value
        raise SchemaMappingError(f"{what}: {zeek} comes from a MAP column, not {t}")
    if isinstance(zeek, RecordType):
        if not types.is_struct(t):
            raise SchemaMappingError(f"{what}: a record comes from a STRUCT column, not {t}")
        by_name = {f.name.lower(): f for f in zeek.fields}
        given = {t.field(i).name.lower(): t.field(i) for i in range(t.num_fields)}
        extra = sorted(set(given) - set(by_name))
        if extra:
            raise SchemaMappingError(
                f"{what}: struct field {extra[0]} is not a field of {zeek} "
                f"(the record's fields are {', '.join(f.name for f in zeek.fields)})"
            )
        for name, f in by_name.items():
            if name in given:
                check_column(given[name].type, f.type, f"{what}.{f.name}")
            elif not f.nullable:
                raise SchemaMappingError(
                    f"{what}: the struct has no field {f.name}, which the record needs "
                    "(only &optional and &default fields may be left out)"
                )
        return
    raise SchemaMappingError(f"{what}: not a Zeek type: {zeek!r}")


# --- whole columns in bulk --------------------------------------------------------------------


def bulk_column(array: pa.Array, zeek: ScriptType) -> pa.Array | None:
    """``array`` cast so that its natural bulk encoding is that of ``zeek`` (no nulls), or None.

    The bulk join (:func:`~broker_spark.columnar.column_encode.encode_rows_bulk`)
    encodes signed integers as ``int``, unsigned as ``count``, floats as
    ``double`` and strings as ``string``; a column that is, or casts to, one
    of those for ``zeek`` goes that way.
    """
    if array.null_count or not isinstance(zeek, Basic):
        return None
    t, name = array.type, zeek.name
    if name == "int" and types.is_signed_integer(t):
        return array
    if name == "count" and types.is_integer(t):
        if types.is_signed_integer(t) and len(array) and pc.min(array).as_py() < 0:
            return None
        return array.cast(pa.uint64())
    if name == "double" and (types.is_floating(t) or types.is_integer(t)):
        return array.cast(pa.float64())
    if name == "string" and (_is_text(t) or _is_binary(t)):
        return array
    return None


# --- per value --------------------------------------------------------------------------------


def _natural(array: pa.Array, zeek: ScriptType) -> bool:
    """Whether the untyped encoding of ``array`` already is that of ``zeek``."""
    if not isinstance(zeek, Basic):
        return False
    t, name = array.type, zeek.name
    return (
        name == "any"
        or (name == "int" and types.is_signed_integer(t))
        or (name == "count" and types.is_unsigned_integer(t))
        or (name == "double" and types.is_floating(t))
        or (name == "bool" and types.is_boolean(t))
        or (name == "string" and (_is_text(t) or _is_binary(t)))
        or (name == "time" and types.is_timestamp(t))
        or (name == "interval" and types.is_duration(t))
    )


def _seconds_fragment(tag: int) -> Callable[[Any], bytes]:
    def fragment(v: Any) -> bytes:
        ns = seconds_ns(v)
        if not _INT64_MIN <= ns <= _INT64_MAX:
            raise ValueError(f"{v} seconds is out of range")
        return _I64(tag, ns)

    return fragment


def _fragment_of(zeek: ScriptType, t: pa.DataType) -> Callable[[Any], bytes]:
    """One value (as ``to_pylist`` gives it) to its fragment; raises ValueError if it misfits."""
    if isinstance(zeek, Basic):
        if zeek.name in ("time", "interval") and _is_number(t):
            return _seconds_fragment(9 if zeek.name == "time" else 10)
        if zeek.name == "count" and types.is_integer(t):

            def count(v: int) -> bytes:
                if v < 0:
                    raise ValueError(f"{v} is negative: not a count")
                return _U64(2, v)

            return count
    if isinstance(zeek, Basic) and zeek.name == "addr" and (_is_text(t) or _is_binary(t)):
        return _addr_fragment
    if isinstance(zeek, EnumType) and zeek.names is None:

        def any_enum(v: str) -> bytes:
            raw = v.strip().encode()
            if not raw:
                raise ValueError("an empty enum name")
            return b"\x0b" + encode_varbyte(len(raw)) + raw

        return any_enum
    conv = converter(zeek)
    return lambda v: encode(conv(v))


_V4_HEAD = b"\x06" + bytes(10) + b"\xff\xff"
_AF_INET, _AF_INET6 = socket.AF_INET, socket.AF_INET6


def _addr_fragment(text: str | bytes) -> bytes:
    """An address from its text, without an ``ipaddress`` object (``inet_pton`` is strict:
    ``10.0.0.300`` and ``010.0.0.1`` are refused, as ``ipaddress`` refuses them)."""
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    text = text.strip()
    try:
        return _V4_HEAD + socket.inet_pton(_AF_INET, text)
    except OSError:
        pass
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return b"\x06" + socket.inet_pton(_AF_INET6, text)
    except OSError:
        raise ValueError(f"{text!r} is not an addr") from None


def encode_typed_column(
    array: pa.Array | pa.ChunkedArray,
    zeek: ScriptType,
    *,
    nullable: bool,
    what: str,
    errors: dict[int, str],
) -> list[bytes]:
    """The Broker binary fragment of each value of ``array`` as Zeek type ``zeek``.

    A null is ``none`` when ``nullable``, else an error for its row, as is a
    value that does not fit; a row in error gets an empty fragment and its
    message in ``errors`` (the first error of a row wins).
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if not nullable and array.null_count:
        for row, valid in enumerate(array.is_valid().to_pylist()):
            if not valid:
                errors.setdefault(row, f"{what} is null")
    t = array.type
    if _natural(array, zeek):
        return encode_column(array, errors)
    cast = bulk_column(array, zeek)
    if cast is not None:
        return encode_column(cast, errors)
    fragment = _fragment_of(zeek, t)
    cache: dict[Any, bytes] = {}
    cacheable = _is_text(t) or _is_binary(t) or types.is_integer(t)
    out: list[bytes] = []
    append = out.append
    for row, v in enumerate(array.to_pylist()):
        if v is None:
            append(_NONE)
            continue
        if cacheable:
            hit = cache.get(v)
            if hit is not None:
                append(hit)
                continue
        try:
            frag = fragment(v)
        except (ValueError, TypeError, BrokerError) as exc:
            errors.setdefault(row, f"{what} ({zeek}): {exc}")
            append(b"")
            continue
        if cacheable and len(cache) < _CACHE_LIMIT:
            cache[v] = frag
        append(frag)
    return out


def metadata_column(
    array: pa.Array | pa.ChunkedArray, what: str, errors: dict[int, str]
) -> list[bytes]:
    """An event's metadata vector per row: ``[[count 1, network timestamp]]`` (Zeek's
    ``EventMetadata::NETWORK_TIMESTAMP``) from a time column; a null row has none (empty)."""
    times = encode_typed_column(array, Basic("time"), nullable=True, what=what, errors=errors)
    head = b"\x0e\x01\x0e\x02" + _U64(2, 1)
    return [b"\x0e\x00" if f == _NONE else head + f for f in times]
