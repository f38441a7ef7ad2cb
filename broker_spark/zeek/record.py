"""Zeek's binary serialization of one log record: the ``serial_data`` of a LogWrite.

The same record values travel in Zeek's ZeroMQ log batches, so this codec
knows nothing of Broker's envelope (ZEEK.md section 2, ZEEK-ZEROMQ.md 2b).
Big-endian throughout: a 4-byte field count, then per field a 4-byte type,
a 4-byte subtype, a present byte and, when present, the payload of the type
(see :func:`decode_values`). Zeek's logging framework writes subtype 0 for
every value, containers included (their elements carry their own types), and
so does :func:`encode_record`; the decoder accepts any subtype.

Decoding is defensive: bad bytes raise :class:`DecodeError` naming the field
and byte offset, and no count is trusted beyond what the remaining bytes can
hold (every element needs at least 9), so an element count of 2**60 costs
nothing. This module is the reference: :mod:`~broker_spark.zeek.columns`
decodes many records of one layout at once and must agree with it.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from broker_spark.data.types import (
    INT64_MAX,
    INT64_MIN,
    UINT64_MAX,
    Count,
    DataType,
    Enum,
    Port,
    timespan_ns,
    timestamp_ns,
    type_of,
)
from broker_spark.errors import DecodeError, EncodeError
from broker_spark.zeek.types import (
    TEXT_TAGS,
    TypeTag,
    ZeekSet,
    ZeekType,
    zeek_interval,
    zeek_time,
)

__all__ = [
    "MAX_FIELDS",
    "decode_values",
    "encode_record",
    "record_tags",
    "type_of_value",
]

#: More columns than any log has (Zeek's largest standard log has 34); a bound on the count.
MAX_FIELDS = 4096

_HEADER = struct.Struct(">iiB")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_U64 = struct.Struct(">Q")
_F64 = struct.Struct(">d")
_PORT = struct.Struct(">Qi")
_IPV6_WORDS = struct.Struct(">IIII")

_VALUE_MIN = 9  # a value's header: type, subtype, present


class _Reader:
    """A cursor over one record's bytes that reports where it failed."""

    __slots__ = ("data", "end", "field", "names")

    def __init__(self, data: bytes, names: Sequence[str] | None) -> None:
        self.data = data
        self.end = len(data)
        self.field = -1
        self.names = names

    def fail(self, pos: int, what: str) -> DecodeError:
        if self.field < 0:
            where = "record header"
        else:
            name = ""
            if self.names is not None and self.field < len(self.names):
                name = f" ({self.names[self.field]})"
            where = f"field {self.field}{name}"
        return DecodeError(f"log record: {where} at byte {pos}: {what}")

    def need(self, pos: int, size: int, what: str) -> None:
        if pos + size > self.end:
            raise self.fail(pos, f"truncated {what}: needs {size} bytes, {self.end - pos} left")


def decode_values(data: bytes, names: Sequence[str] | None = None) -> list[Any]:
    """The values of one serialized record, in column order (None for an unset field).

    Types: bool ``bool``; int ``int``; count ``Count``; double ``float``; time
    :class:`ZeekTime`; interval :class:`ZeekInterval` (a ``float`` for a
    double no datetime can hold); string, file and func ``str`` (``bytes``
    when not UTF-8, as Broker's bindings give strings); enum ``Enum``; port
    ``Port``; addr and subnet ``ipaddress``; set :class:`ZeekSet`; vector
    ``tuple``. ``names`` only improves error messages.
    """
    if isinstance(data, memoryview):
        data = data.tobytes()
    if not isinstance(data, (bytes, bytearray)):
        raise DecodeError(f"log record: expected bytes, got {type(data).__name__}")
    r = _Reader(data, names)
    r.need(0, 4, "field count")
    (count,) = _I32.unpack_from(data, 0)
    if count < 0 or count > MAX_FIELDS or count * _VALUE_MIN > r.end - 4:
        raise r.fail(0, f"field count {count} does not fit in {r.end} bytes")
    values = []
    pos = 4
    for i in range(count):
        r.field = i
        value, pos = _read_value(r, pos, 0)
        values.append(value)
    if pos != r.end:
        r.field = -1
        raise r.fail(pos, f"{r.end - pos} bytes left after {count} fields")
    return values


def record_tags(data: bytes) -> tuple[int, ...] | None:
    """The type tag of each field of a serialized record, read from the headers only
    (None when the bytes are not a well-formed record). Cheap: no value is built."""
    try:
        (count,) = _I32.unpack_from(data, 0)
        if count < 0 or count * _VALUE_MIN > len(data) - 4:
            return None
        tags = []
        pos = 4
        for _ in range(count):
            tag, _sub, present = _HEADER.unpack_from(data, pos)
            tags.append(tag)
            pos = _skip(data, pos, 0) if present else pos + _VALUE_MIN
        return tuple(tags) if pos == len(data) else None
    except (struct.error, ValueError, IndexError):
        return None


def _skip(data: bytes, pos: int, depth: int) -> int:
    """The position after the value at ``pos`` (ValueError/struct.error when malformed)."""
    tag, _sub, present = _HEADER.unpack_from(data, pos)
    pos += _VALUE_MIN
    if not present:
        return pos
    size = _FIXED_SIZES.get(tag)
    if size is not None:
        if pos + size > len(data):
            raise ValueError("truncated")
        return pos + size
    if tag in TEXT_TAGS:
        (n,) = _U32.unpack_from(data, pos)
        return pos + 4 + n
    if tag == TypeTag.ADDR:
        return pos + 1 + _addr_size(data[pos])
    if tag == TypeTag.SUBNET:
        return pos + 2 + _addr_size(data[pos + 1])
    if tag in (TypeTag.TABLE, TypeTag.VECTOR) and depth == 0:
        (n,) = _I64.unpack_from(data, pos)
        pos += 8
        if n < 0 or n * _VALUE_MIN > len(data) - pos:
            raise ValueError("bad count")
        for _ in range(n):
            pos = _skip(data, pos, depth + 1)
        return pos
    raise ValueError("unsupported type")


def _addr_size(family: int) -> int:
    if family == 4:
        return 4
    if family == 6:
        return 16
    raise ValueError("bad family")


_FIXED_SIZES = {
    TypeTag.BOOL: 8,
    TypeTag.INT: 8,
    TypeTag.COUNT: 8,
    TypeTag.DOUBLE: 8,
    TypeTag.TIME: 8,
    TypeTag.INTERVAL: 8,
    TypeTag.PORT: 12,
}


def _read_value(r: _Reader, pos: int, depth: int) -> tuple[Any, int]:
    data = r.data
    r.need(pos, _VALUE_MIN, "value header")
    tag, _sub, present = _HEADER.unpack_from(data, pos)
    if present > 1:
        raise r.fail(pos + 8, f"present flag {present} is neither 0 nor 1")
    pos += _VALUE_MIN
    if not present:
        return None, pos
    reader = _READERS.get(tag)
    if reader is None:
        raise r.fail(pos - _VALUE_MIN, f"type {tag} cannot appear in a log record")
    return reader(r, pos, depth)


def _read_bool(r: _Reader, pos: int, depth: int) -> tuple[Any, int]:
    r.need(pos, 8, "bool")
    (n,) = _I64.unpack_from(r.data, pos)
    return n != 0, pos + 8


def _read_int(r: _Reader, pos: int, depth: int) -> tuple[Any, int]:
    r.need(pos, 8, "int")
    return _I64.unpack_from(r.data, pos)[0], pos + 8


def _read_count(r: _Reader, pos: int, depth: int) -> tuple[Any, int]:
    r.need(pos, 8, "count")
    return Count(_U64.unpack_from(r.data, pos)[0]), pos + 8


def _read_double(r: _Reader, pos: int, depth: int) -> tuple[Any, int]:
    r.need(pos, 8, "double")
    return _F64.unpack_from(r.data, pos)[0], pos + 8


def _read_time(r: _Reader, pos: int, depth: int) -> tuple[Any, int]:
    r.need(pos, 8, "time")
    return zeek_time(_F64.unpack_from(r.data, pos)[0]), pos + 8


def _read_interval(r: _Reader, pos: int, depth: int) -> tuple[Any, int]:
    r.need(pos, 8, "interval")
    return zeek_interval(_F64.unpack_from(r.data, pos)[0]), pos + 8


def _read_text(r: _Reader, pos: int, depth: int) -> tuple[bytes, int]:
    r.need(pos, 4, "text length")
    (n,) = _U32.unpack_from(r.data, pos)
    pos += 4
    if n > r.end - pos:
        raise r.fail(pos - 4, f"text of {n} bytes, only {r.end - pos} left")
    return r.data[pos : pos + n], pos + n


def _read_string(r: _Reader, pos: int, depth: int) -> tuple[Any, int]:
    raw, pos = _read_text(r, pos, depth)
    try:
        return raw.decode("utf-8"), pos
    except UnicodeDecodeError:
        return bytes(raw), pos


def _read_enum(r: _Reader, pos: int, depth: int) -> tuple[Any, int]:
    """An enum's name; bytes that are not UTF-8 are kept (as surrogate escapes), so the name
    renders and encodes back to exactly its bytes, as Zeek writes any string."""
    raw, end = _read_text(r, pos, depth)
    return Enum(raw.decode("utf-8", "surrogateescape")), end


def _read_port(r: _Reader, pos: int, depth: int) -> tuple[Any, int]:
    r.need(pos, 12, "port")
    number, proto = _PORT.unpack_from(r.data, pos)
    if number > 65535:
        raise r.fail(pos, f"port number {number} is above 65535")
    if not 0 <= proto <= 3:
        raise r.fail(pos + 8, f"port protocol {proto} is not 0 to 3")
    return Port(number, proto), pos + 12


def _read_addr_bytes(r: _Reader, pos: int) -> tuple[bytes, int]:
    r.need(pos, 1, "address family")
    family = r.data[pos]
    if family == 4:
        r.need(pos + 1, 4, "IPv4 address")
        return r.data[pos + 1 : pos + 5], pos + 5
    if family == 6:
        r.need(pos + 1, 16, "IPv6 address")
        return r.data[pos + 1 : pos + 17], pos + 17
    raise r.fail(pos, f"address family {family} is neither 4 nor 6")


def _read_addr(r: _Reader, pos: int, depth: int) -> tuple[Any, int]:
    raw, pos = _read_addr_bytes(r, pos)
    return ipaddress.ip_address(raw), pos


def _read_subnet(r: _Reader, pos: int, depth: int) -> tuple[Any, int]:
    """A subnet: its length, then its address. Zeek keeps an IPv4 prefix as a length within
    IPv6 space (``IPPrefix``), so ``/8`` travels as 104; an IPv6 length is the prefix."""
    r.need(pos, 1, "subnet length")
    length = r.data[pos]
    raw, end = _read_addr_bytes(r, pos + 1)
    if len(raw) == 4:
        if not 96 <= length <= 128:
            raise r.fail(pos, f"IPv4 subnet length {length} is not 96 + a prefix of 0 to 32")
        length -= 96
    elif length > 128:
        raise r.fail(pos, f"IPv6 prefix length {length} is above 128")
    net = ipaddress.ip_network((raw, length), strict=False)
    return net, end


def _read_container(r: _Reader, pos: int, depth: int, kind: str) -> tuple[list, int]:
    if depth:
        raise r.fail(pos - _VALUE_MIN, f"a {kind} inside a container")
    r.need(pos, 8, f"{kind} size")
    (n,) = _I64.unpack_from(r.data, pos)
    pos += 8
    if n < 0 or n * _VALUE_MIN > r.end - pos:
        raise r.fail(pos - 8, f"{kind} of {n} elements does not fit in {r.end - pos} bytes")
    items = []
    for _ in range(n):
        item, pos = _read_value(r, pos, depth + 1)
        items.append(item)
    return items, pos


def _read_set(r: _Reader, pos: int, depth: int) -> tuple[Any, int]:
    items, pos = _read_container(r, pos, depth, "set")
    try:
        return ZeekSet(items), pos
    except TypeError:
        raise r.fail(pos, "set elements are not hashable") from None


def _read_vector(r: _Reader, pos: int, depth: int) -> tuple[Any, int]:
    items, pos = _read_container(r, pos, depth, "vector")
    return tuple(items), pos


_READERS: dict[int, Callable[[_Reader, int, int], tuple[Any, int]]] = {
    TypeTag.BOOL: _read_bool,
    TypeTag.INT: _read_int,
    TypeTag.COUNT: _read_count,
    TypeTag.DOUBLE: _read_double,
    TypeTag.TIME: _read_time,
    TypeTag.INTERVAL: _read_interval,
    TypeTag.STRING: _read_string,
    TypeTag.FILE: _read_string,
    TypeTag.FUNC: _read_string,
    TypeTag.ENUM: _read_enum,
    TypeTag.PORT: _read_port,
    TypeTag.ADDR: _read_addr,
    TypeTag.SUBNET: _read_subnet,
    TypeTag.TABLE: _read_set,
    TypeTag.VECTOR: _read_vector,
}


# --- encoding --------------------------------------------------------------------------------


#: The Zeek type a value of each Broker type is written as when its column does not say.
_ZEEK_TAG_OF = {
    DataType.Boolean: TypeTag.BOOL,
    DataType.Count: TypeTag.COUNT,
    DataType.Integer: TypeTag.INT,
    DataType.Real: TypeTag.DOUBLE,
    DataType.Timestamp: TypeTag.TIME,
    DataType.Timespan: TypeTag.INTERVAL,
    DataType.String: TypeTag.STRING,
    DataType.EnumValue: TypeTag.ENUM,
    DataType.Port: TypeTag.PORT,
    DataType.Address: TypeTag.ADDR,
    DataType.Subnet: TypeTag.SUBNET,
    DataType.Set: TypeTag.TABLE,
    DataType.Vector: TypeTag.VECTOR,
}


def type_of_value(value: Any) -> TypeTag:
    """The Zeek type a Python value is written as when its column does not say (its Broker
    type, :func:`~broker_spark.data.types.type_of`, as Zeek logs it)."""
    try:
        tag = _ZEEK_TAG_OF.get(type_of(value))
    except TypeError:
        tag = None
    if tag is None:
        raise EncodeError(f"no Zeek log type for a {type(value).__name__}: {value!r:.80}")
    return tag


def _as_type(spec: Any) -> ZeekType | None:
    """A column type from a ZeekType, a tag, a (tag, subtag) pair, a spelling or a field."""
    if spec is None or isinstance(spec, ZeekType):
        return spec
    zeek_type = getattr(spec, "zeek_type", None)  # a LogField
    if isinstance(zeek_type, ZeekType):
        return zeek_type
    if isinstance(spec, str):
        return ZeekType.parse(spec)
    if isinstance(spec, int):
        return ZeekType(TypeTag(spec))
    if isinstance(spec, (tuple, list)) and len(spec) == 2:
        return ZeekType(TypeTag(spec[0]), TypeTag(spec[1]))
    raise EncodeError(f"not a Zeek column type: {spec!r}")


def encode_record(values: Sequence[Any] | Mapping[str, Any], types: Sequence[Any]) -> bytes:
    """Serialize one record as Zeek does: ``values`` in column order (or a mapping by the
    names of ``types``, which are then :class:`~broker_spark.zeek.log_schema.LogField`s).

    ``types`` gives each column's type (a :class:`ZeekType`, a tag, a Zeek spelling such
    as ``"set[string]"``, or a LogField); it is needed because an unset field (None)
    still carries its type. A set's or vector's elements take the column's element
    type, or their own when it is unknown. Raises :class:`EncodeError` naming the
    column for a value its type cannot hold.
    """
    if isinstance(values, Mapping):
        values = [values.get(getattr(t, "name", None)) for t in types]
    if len(values) != len(types):
        raise EncodeError(f"log record: {len(values)} values for {len(types)} columns")
    out = bytearray(_I32.pack(len(values)))
    for i, (value, spec) in enumerate(zip(values, types, strict=True)):
        column = _as_type(spec)
        try:
            _write_value(out, value, column, 0)
        except EncodeError as exc:
            name = getattr(spec, "name", None)
            label = f"field {i}" + (f" ({name})" if name else "")
            raise EncodeError(f"log record: {label}: {exc}") from None
    return bytes(out)


def _write_value(out: bytearray, value: Any, column: ZeekType | None, depth: int) -> None:
    if column is None or column.tag is TypeTag.VOID:
        if value is None:
            raise EncodeError("an unset value needs its column type")
        column = ZeekType(type_of_value(value))
    tag = column.tag
    if value is None:
        out += _HEADER.pack(tag, 0, 0)
        return
    writer = _WRITERS.get(tag)
    if writer is None:
        raise EncodeError(f"type {tag.script_name} cannot be written in a log record")
    out += _HEADER.pack(tag, 0, 1)
    writer(out, value, column, depth)


def _int_value(value: Any, lo: int, hi: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise EncodeError(f"{what} needs an integer, got {value!r:.60}")
    if not lo <= value <= hi:
        raise EncodeError(f"{what} {value} is out of range")
    return int(value)


def _write_bool(out: bytearray, value: Any, column: ZeekType, depth: int) -> None:
    if not isinstance(value, bool):
        raise EncodeError(f"bool needs True or False, got {value!r:.60}")
    out += _I64.pack(1 if value else 0)


def _write_int(out: bytearray, value: Any, column: ZeekType, depth: int) -> None:
    out += _I64.pack(_int_value(value, INT64_MIN, INT64_MAX, "int"))


def _write_count(out: bytearray, value: Any, column: ZeekType, depth: int) -> None:
    out += _U64.pack(_int_value(value, 0, UINT64_MAX, "count"))


def _seconds_of(value: Any, what: str) -> float:
    exact = getattr(value, "seconds", None)
    if isinstance(exact, float):
        return exact
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, _dt.datetime):
        return timestamp_ns(value) / 1_000_000_000
    if isinstance(value, _dt.timedelta):
        return timespan_ns(value) / 1_000_000_000
    raise EncodeError(f"{what} needs a number of seconds, got {value!r:.60}")


def _write_double(out: bytearray, value: Any, column: ZeekType, depth: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise EncodeError(f"double needs a number, got {value!r:.60}")
    out += _F64.pack(float(value))


def _write_time(out: bytearray, value: Any, column: ZeekType, depth: int) -> None:
    if isinstance(value, _dt.timedelta):
        raise EncodeError(f"time needs a datetime or seconds, got {value!r:.60}")
    out += _F64.pack(_seconds_of(value, "time"))


def _write_interval(out: bytearray, value: Any, column: ZeekType, depth: int) -> None:
    if isinstance(value, _dt.datetime):
        raise EncodeError(f"interval needs a timedelta or seconds, got {value!r:.60}")
    out += _F64.pack(_seconds_of(value, "interval"))


def _write_text(out: bytearray, value: Any, column: ZeekType, depth: int) -> None:
    if isinstance(value, Enum):
        value = value.name
    if isinstance(value, str):
        raw = value.encode("utf-8", "surrogateescape")
    elif isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
    else:
        raise EncodeError(f"{column.tag.script_name} needs a str, got {value!r:.60}")
    if len(raw) > 0xFFFFFFFF:
        raise EncodeError("text longer than 4 GiB")
    out += _U32.pack(len(raw))
    out += raw


def _write_port(out: bytearray, value: Any, column: ZeekType, depth: int) -> None:
    if not isinstance(value, Port):
        raise EncodeError(f"port needs a Port, got {value!r:.60}")
    out += _PORT.pack(value.number(), value.type())


def _addr_payload(value: Any) -> bytes:
    if isinstance(value, str):
        try:
            value = ipaddress.ip_address(value)
        except ValueError:
            raise EncodeError(f"not an address: {value!r:.60}") from None
    if isinstance(value, ipaddress.IPv4Address):
        return b"\x04" + value.packed
    if isinstance(value, ipaddress.IPv6Address):
        return b"\x06" + value.packed
    raise EncodeError(f"addr needs an address, got {value!r:.60}")


def _write_addr(out: bytearray, value: Any, column: ZeekType, depth: int) -> None:
    out += _addr_payload(value)


def _write_subnet(out: bytearray, value: Any, column: ZeekType, depth: int) -> None:
    if isinstance(value, str):
        try:
            value = ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise EncodeError(f"not a subnet: {value!r:.60}") from None
    if not isinstance(value, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        raise EncodeError(f"subnet needs a network, got {value!r:.60}")
    out.append(value.prefixlen + (96 if value.version == 4 else 0))
    out += _addr_payload(value.network_address)


def _write_container(out: bytearray, value: Any, column: ZeekType, depth: int) -> None:
    kind = "set" if column.tag is TypeTag.TABLE else "vector"
    if depth:
        raise EncodeError(f"a {kind} inside a container")
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        raise EncodeError(f"{kind} needs a collection, got {value!r:.60}")
    items = list(value)
    if column.tag is TypeTag.TABLE and not isinstance(value, ZeekSet):
        items = _canonical(items)
    out += _I64.pack(len(items))
    element = column.element if column.subtag is not TypeTag.VOID else None
    for item in items:
        _write_value(out, item, element, depth + 1)


def _canonical(items: list[Any]) -> list[Any]:
    """A plain set's elements in a stable order (sorted where they compare)."""
    try:
        return sorted(items)
    except TypeError:
        return items


_WRITERS: dict[int, Callable[[bytearray, Any, ZeekType, int], None]] = {
    TypeTag.BOOL: _write_bool,
    TypeTag.INT: _write_int,
    TypeTag.COUNT: _write_count,
    TypeTag.DOUBLE: _write_double,
    TypeTag.TIME: _write_time,
    TypeTag.INTERVAL: _write_interval,
    TypeTag.STRING: _write_text,
    TypeTag.FILE: _write_text,
    TypeTag.FUNC: _write_text,
    TypeTag.ENUM: _write_text,
    TypeTag.PORT: _write_port,
    TypeTag.ADDR: _write_addr,
    TypeTag.SUBNET: _write_subnet,
    TypeTag.TABLE: _write_container,
    TypeTag.VECTOR: _write_container,
}
