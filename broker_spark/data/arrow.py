"""Broker values <-> Arrow arrays: how messages become Spark columns and back.

Two mappings, both columnar (a Python list per column, then one
``pa.array(list, type=...)``, which is where pyarrow is fast):

* **JSON text**: any Broker value as Zeek's JSON text in a string column
  (:func:`values_to_json_array` / :func:`json_array_to_values`). Lossless
  except where Zeek's format is (timestamps to the millisecond).
* **Typed**: values converted to a chosen Arrow type (:func:`to_arrow`) and
  back (:func:`from_arrow`). A value that does not fit its type (a string in
  an integer column, a count beyond int64, a vector of the wrong length for a
  struct) becomes null and is counted, because one odd message should not
  fail a streaming batch; ``strict=True`` raises :class:`EncodeError` (a
  ``ValueError``) naming the row and field instead. Inside lists, maps and
  structs the innermost misfit is nulled, so the rest of the value survives;
  a map key cannot be null, so a misfit key nulls its whole map.

Arrow has no counts, addresses, ports or enums; :func:`from_arrow` takes an
optional Broker type hint for the top level (``DataType.Count`` on an int64
column, ``DataType.Address`` on a string column, ``DataType.Set`` on a list
column...). Without one, each Arrow type maps to its natural Broker type.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pyarrow as pa

from broker_spark.data.json_codec import dumps_value, loads_value
from broker_spark.data.types import (
    Count,
    DataType,
    Enum,
    Port,
    Timespan,
    Timestamp,
    new_timedelta,
    sorted_values,
    timespan_ns,
    timestamp_ns,
)
from broker_spark.data.value import freeze
from broker_spark.errors import BrokerError, DecodeError, EncodeError

__all__ = [
    "from_arrow",
    "json_array_to_values",
    "to_arrow",
    "values_to_json_array",
]

_UNIT_NS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
_ADDRESSES = (ipaddress.IPv4Address, ipaddress.IPv6Address)
_NETWORKS = (ipaddress.IPv4Network, ipaddress.IPv6Network)
_TS_EPOCH = Timestamp.from_ns(0)

# --- JSON text columns ------------------------------------------------------------------


def values_to_json_array(values: Iterable[Any]) -> pa.StringArray:
    """Each value as Zeek JSON text. ``None`` is Broker's none (``{"@data-type":"none",...}``)."""
    out = []
    for row, value in enumerate(values):
        try:
            out.append(dumps_value(value))
        except BrokerError as exc:
            raise EncodeError(f"row {row}: {exc}") from None
    return pa.array(out, type=pa.string())


def json_array_to_values(array: pa.Array | pa.ChunkedArray) -> list[Any]:
    """The values of a column of Zeek JSON text; an Arrow null reads as ``None``.

    A malformed row raises :class:`DecodeError` naming the row.
    """
    out = []
    for row, text in enumerate(array.to_pylist()):
        if text is None:
            out.append(None)
            continue
        try:
            out.append(loads_value(text))
        except DecodeError as exc:
            raise DecodeError(f"row {row}: {exc}") from None
    return out


# --- Broker values -> typed Arrow arrays --------------------------------------------------


class _Misfit(Exception):
    """A value that does not fit its Arrow type (raised by leaf converters)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Context:
    """Per-call state: the row being converted, the misfit count, strictness."""

    __slots__ = ("misfits", "row", "strict")

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.row = 0
        self.misfits = 0

    def misfit(self, reason: str, path: str) -> None:
        if self.strict:
            raise EncodeError(f"row {self.row}, field {path!r}: {reason}")
        self.misfits += 1


_Conv = Callable[[Any], Any]


def _describe(v: Any) -> str:
    text = repr(v)
    return f"{type(v).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _is_integer(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_conv(lo: int, hi: int, type_name: str) -> _Conv:
    def conv(v: Any) -> Any:
        cls = type(v)
        if cls is int or cls is Count or _is_integer(v):
            if lo <= v <= hi:
                return v if cls is int else int(v)
            raise _Misfit(f"{_describe(v)} is out of range for {type_name}")
        raise _Misfit(f"{_describe(v)} is not an integer or count")

    return conv


def _float_conv(v: Any) -> Any:
    cls = type(v)
    if cls is float:
        return v
    if cls is int or cls is Count or _is_integer(v) or isinstance(v, float):
        return float(v)
    raise _Misfit(f"{_describe(v)} is not a real")


def _bool_conv(v: Any) -> Any:
    if v is True or v is False:
        return v
    raise _Misfit(f"{_describe(v)} is not a boolean")


def _string_conv(v: Any) -> Any:
    cls = type(v)
    if cls is str:
        text = v
    elif cls is Enum:
        text = v.name
    elif isinstance(v, (_ADDRESSES, _NETWORKS, Port)):
        return str(v)
    elif isinstance(v, (bytes, bytearray, memoryview)):
        try:
            return bytes(v).decode("utf-8")
        except UnicodeDecodeError:
            raise _Misfit("a string that is not UTF-8") from None
    elif isinstance(v, str):
        text = str.__str__(v)
    else:
        raise _Misfit(f"{_describe(v)} has no string form")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise _Misfit("a string with lone surrogates") from None
    return text


def _binary_conv(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        try:
            return v.encode("utf-8")
        except UnicodeEncodeError:
            raise _Misfit("a string with lone surrogates") from None
    raise _Misfit(f"{_describe(v)} is not a string")


def _wall_clock_ns(value: _dt.datetime) -> int:
    """Nanoseconds of a timestamp as Arrow stores it: a naive ``datetime``'s fields as they
    are (Arrow's and pyarrow's convention), not local time as elsewhere in the data model."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    return timestamp_ns(value)


def _time_conv(unit: str, is_timestamp: bool) -> _Conv:
    per = _UNIT_NS[unit]
    kind, ns_of = ("timestamp", _wall_clock_ns) if is_timestamp else ("timespan", timespan_ns)
    cls_ok = _dt.datetime if is_timestamp else _dt.timedelta

    def conv(v: Any) -> Any:
        if not isinstance(v, cls_ok):
            raise _Misfit(f"{_describe(v)} is not a {kind}")
        n = ns_of(v) // per
        if -(1 << 63) <= n < (1 << 63):
            return n
        raise _Misfit(f"{kind} {v} does not fit int64 {unit}")

    return conv


def _null_conv(v: Any) -> Any:
    raise _Misfit(f"{_describe(v)} in a null column")


def _items_of(v: Any) -> Any:
    cls = type(v)
    if cls is tuple or cls is list:
        return v
    if cls is set or cls is frozenset or isinstance(v, (set, frozenset)):
        return sorted_values(v)
    if isinstance(v, (tuple, list)):
        return v
    raise _Misfit(f"{_describe(v)} is not a vector or set")


def _list_conv(t: Any, path: str, ctx: _Context) -> _Conv:
    elem_path = path + "[]"
    elem = _converter(t.value_type, elem_path, ctx)
    size = t.list_size if pa.types.is_fixed_size_list(t) else None

    def conv(v: Any) -> Any:
        items = _items_of(v)
        if size is not None and len(items) != size:
            raise _Misfit(f"{len(items)} elements for a list of {size}")
        out = []
        for x in items:
            if x is None:
                out.append(None)
                continue
            try:
                out.append(elem(x))
            except _Misfit as m:
                ctx.misfit(m.reason, elem_path)
                out.append(None)
        return out

    return conv


def _map_conv(t: Any, path: str, ctx: _Context) -> _Conv:
    key = _converter(t.key_type, path + "{key}", ctx)
    value_path = path + "{value}"
    val = _converter(t.item_type, value_path, ctx)

    def conv(v: Any) -> Any:
        if not isinstance(v, Mapping):
            raise _Misfit(f"{_describe(v)} is not a table")
        out = []
        for k, x in v.items():
            if k is None:
                raise _Misfit("a none key in a map (Arrow map keys cannot be null)")
            k = key(k)  # a misfit key fails the whole map
            if x is None:
                out.append((k, None))
                continue
            try:
                out.append((k, val(x)))
            except _Misfit as m:
                ctx.misfit(m.reason, value_path)
                out.append((k, None))
        return out

    return conv


def _struct_conv(t: Any, path: str, ctx: _Context) -> _Conv:
    fields = [t.field(i) for i in range(t.num_fields)]
    paths = [f"{path}.{f.name}" for f in fields]
    convs = [_converter(f.type, p, ctx) for f, p in zip(fields, paths, strict=True)]
    names = [f.name for f in fields]
    n = len(fields)

    def one(i: int, x: Any) -> Any:
        if x is None:
            return None
        try:
            return convs[i](x)
        except _Misfit as m:
            ctx.misfit(m.reason, paths[i])
            return None

    def conv(v: Any) -> Any:
        if isinstance(v, (tuple, list)):
            if len(v) != n:
                raise _Misfit(f"a vector of {len(v)} values for a struct of {n} fields")
            return tuple([one(i, x) for i, x in enumerate(v)])
        if isinstance(v, Mapping) and all(isinstance(k, str) for k in v):
            return tuple([one(i, v.get(name)) for i, name in enumerate(names)])
        raise _Misfit(f"{_describe(v)} is not a vector (or a table with string keys)")

    return conv


def _converter(t: Any, path: str, ctx: _Context) -> _Conv:
    """The function turning one non-None Broker value into what ``pa.array`` takes for ``t``."""
    types = pa.types
    if types.is_integer(t):
        bits = t.bit_width
        if types.is_signed_integer(t):
            return _int_conv(-(1 << (bits - 1)), (1 << (bits - 1)) - 1, str(t))
        return _int_conv(0, (1 << bits) - 1, str(t))
    if types.is_floating(t):
        return _float_conv
    if types.is_boolean(t):
        return _bool_conv
    if types.is_string(t) or types.is_large_string(t):
        return _string_conv
    if types.is_binary(t) or types.is_large_binary(t):
        return _binary_conv
    if types.is_timestamp(t):
        return _time_conv(t.unit, True)
    if types.is_duration(t):
        return _time_conv(t.unit, False)
    if types.is_null(t):
        return _null_conv
    if types.is_list(t) or types.is_large_list(t) or types.is_fixed_size_list(t):
        return _list_conv(t, path, ctx)
    if types.is_map(t):
        return _map_conv(t, path, ctx)
    if types.is_struct(t):
        return _struct_conv(t, path, ctx)
    raise EncodeError(f"field {path!r}: no mapping from Broker values to Arrow type {t}")


def to_arrow(
    values: Iterable[Any], arrow_type: pa.DataType, *, strict: bool = False, name: str = "value"
) -> tuple[pa.Array, int]:
    """Convert Broker values to an Arrow array of ``arrow_type``; returns ``(array, misfits)``.

    ``None`` (Broker's none) is null and not a misfit. ``name`` is the field
    name used in strict-mode errors (nested fields add ``.field``, ``[]``,
    ``{key}``/``{value}``).
    """
    ctx = _Context(strict)
    conv = _converter(arrow_type, name, ctx)
    out: list[Any] = []
    append = out.append
    for row, v in enumerate(values):
        if v is None:
            append(None)
            continue
        ctx.row = row
        try:
            append(conv(v))
        except _Misfit as m:
            ctx.misfit(m.reason, name)
            append(None)
    return pa.array(out, type=arrow_type), ctx.misfits


# --- typed Arrow arrays -> Broker values --------------------------------------------------


def _valid(array: pa.Array) -> list[bool] | None:
    """Row validity, or None when nothing is null (the common, fast case)."""
    if array.null_count == 0:
        return None
    return array.is_valid().to_pylist()


def _timestamps(ints: list[Any], per: int) -> list[Any]:
    out: list[Any] = []
    for n in ints:
        if n is None:
            out.append(None)
            continue
        micros, nanos = divmod(n * per, 1000)
        try:
            # Arithmetic on a datetime subclass returns the subclass, all in C.
            ts = _TS_EPOCH + _dt.timedelta(0, 0, micros)
        except OverflowError:
            raise DecodeError(f"timestamp {n * per}ns is beyond Python's datetime") from None
        if nanos:
            ts._nanos = nanos
        out.append(ts)
    return out


def _timespans(ints: list[Any], per: int) -> list[Any]:
    out: list[Any] = []
    for n in ints:
        if n is None:
            out.append(None)
            continue
        micros, nanos = divmod(n * per, 1000)
        try:
            span = new_timedelta(Timespan, 0, 0, micros)
        except OverflowError:
            raise DecodeError(f"timespan {n * per}ns is beyond Python's timedelta") from None
        if nanos:
            span._nanos = nanos
        out.append(span)
    return out


def _parse_strings(texts: list[Any], parse: Callable[[str], Any], what: str) -> list[Any]:
    out = []
    for row, text in enumerate(texts):
        if text is None:
            out.append(None)
            continue
        try:
            out.append(parse(text))
        except ValueError:
            raise DecodeError(f"row {row}: {text!r} is not a {what}") from None
    return out


_STRING_HINTS: dict[DataType, tuple[Callable[[str], Any], str]] = {
    DataType.Address: (ipaddress.ip_address, "address"),
    DataType.Subnet: (ipaddress.ip_network, "subnet"),
    DataType.Port: (Port.parse, "port"),
    DataType.EnumValue: (Enum, "enum name"),
}


def _rebased(array: Any) -> tuple[list[int], int, int]:
    """A list-like array's offsets from zero and the slice of its child they index."""
    offsets = array.offsets.to_pylist()
    start = offsets[0]
    return [o - start for o in offsets], start, offsets[-1] - start


def _from_list(array: Any, hint: DataType | None) -> list[Any]:
    if pa.types.is_fixed_size_list(array.type):
        size = array.type.list_size
        child = array.values.slice(array.offset * size, len(array) * size)
        offsets = list(range(0, (len(array) + 1) * size, size))
    else:
        offsets, start, length = _rebased(array)
        child = array.values.slice(start, length)
    items = _from(child, None)
    valid = _valid(array)
    make: Callable[[list[Any]], Any] = tuple
    if hint is DataType.Set:
        items = [freeze(x) for x in items]
        make = set
    return [
        make(items[offsets[i] : offsets[i + 1]]) if valid is None or valid[i] else None
        for i in range(len(array))
    ]


def _from_map(array: Any) -> list[Any]:
    offsets, start, length = _rebased(array)
    keys = [freeze(k) for k in _from(array.keys.slice(start, length), None)]
    items = _from(array.items.slice(start, length), None)
    valid = _valid(array)
    return [
        dict(
            zip(keys[offsets[i] : offsets[i + 1]], items[offsets[i] : offsets[i + 1]], strict=True)
        )
        if valid is None or valid[i]
        else None
        for i in range(len(array))
    ]


def _from_struct(array: Any) -> list[Any]:
    columns = [_from(child, None) for child in array.flatten()]
    valid = _valid(array)
    rows = list(zip(*columns, strict=True)) if columns else [()] * len(array)
    if valid is None:
        return rows
    return [row if ok else None for row, ok in zip(rows, valid, strict=True)]


def _from(array: Any, hint: DataType | None) -> list[Any]:
    t = array.type
    types = pa.types
    if types.is_dictionary(t):
        return _from(array.dictionary_decode(), hint)
    if types.is_null(t):
        return [None] * len(array)
    if types.is_integer(t):
        values = array.to_pylist()
        if hint is DataType.Real:
            return [None if v is None else float(v) for v in values]
        unsigned = types.is_unsigned_integer(t)
        if hint is DataType.Count or (unsigned and hint is not DataType.Integer):
            if not unsigned and any(v is not None and v < 0 for v in values):
                raise DecodeError("a negative integer cannot be a count")
            return [None if v is None else int.__new__(Count, v) for v in values]
        return values
    if types.is_floating(t) or types.is_boolean(t):
        return array.to_pylist()
    if types.is_string(t) or types.is_large_string(t):
        texts = array.to_pylist()
        parse = _STRING_HINTS.get(hint) if hint is not None else None
        return texts if parse is None else _parse_strings(texts, *parse)
    if types.is_binary(t) or types.is_large_binary(t):
        return [_bytes_value(b) for b in array.to_pylist()]
    if types.is_timestamp(t):
        return _timestamps(array.view(pa.int64()).to_pylist(), _UNIT_NS[t.unit])
    if types.is_duration(t):
        return _timespans(array.view(pa.int64()).to_pylist(), _UNIT_NS[t.unit])
    if types.is_list(t) or types.is_large_list(t) or types.is_fixed_size_list(t):
        return _from_list(array, hint)
    if types.is_map(t):
        return _from_map(array)
    if types.is_struct(t):
        return _from_struct(array)
    raise DecodeError(f"no Broker mapping for Arrow type {t}")


def _bytes_value(b: bytes | None) -> Any:
    """Broker's rule: a string is ``str`` when it is UTF-8, ``bytes`` otherwise."""
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b


def from_arrow(
    array: pa.Array | pa.ChunkedArray, broker_type_hint: DataType | None = None
) -> list[Any]:
    """The Broker values of an Arrow array; nulls become ``None``.

    int64 -> int, uint64 -> Count, float -> float, string -> str, binary ->
    str or bytes, bool, timestamp -> Timestamp, duration -> Timespan, list ->
    tuple (vector), map -> dict, struct -> tuple (by field order), null -> None.
    ``broker_type_hint`` steers the top level: Count/Integer/Real on integer
    columns, Address/Subnet/Port/EnumValue on string columns, Set on lists.
    A string that does not parse as the hinted type raises :class:`DecodeError`.
    """
    if isinstance(array, pa.ChunkedArray):
        out: list[Any] = []
        for chunk in array.chunks:
            out.extend(_from(chunk, broker_type_hint))
        return out
    return _from(array, broker_type_hint)
