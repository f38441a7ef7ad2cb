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
  (``EXT_COUNT`` and friends below), so ``Count`` stays distinct from ``int``,
  ``set`` from ``frozenset`` and from vectors, and timestamps and timespans
  keep their nanoseconds;
* tables are msgpack maps with arbitrary keys; a :class:`FrozenTable` (the
  hashable table that can itself be a key or a set element) and ``frozenset``
  have their own codes, so a decoded key is hashable whenever the encoded one
  was, and every value comes back with the type it went in with.

Records frame a message as we spool it: ``[topic, payload, sender,
received_at_ns, offset]``, where ``payload`` is the message's Broker binary
encoding, kept as bytes so it is never re-encoded. A record stream is simply
records packed back to back.

Decoding never trusts its input: every length is bounded by the input's size
(``unpackb`` does this itself; the record reader sets explicit limits),
nesting of extension containers is bounded, and any malformation raises
:class:`DecodeError` naming what was wrong.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import msgpack
from msgpack import ExtType

from broker_spark.data.types import (
    Count,
    DataType,
    Enum,
    FrozenTable,
    Port,
    Timespan,
    Timestamp,
    type_of,
)
from broker_spark.errors import DecodeError, EncodeError

EXT_COUNT = 1
EXT_ADDRESS = 2
EXT_SUBNET = 3
EXT_PORT = 4
EXT_TIMESTAMP = 5
EXT_TIMESPAN = 6
EXT_ENUM = 7
EXT_SET = 8
EXT_FROZENSET = 9
EXT_FROZEN_TABLE = 10

MAX_NESTING = 64
"""How deep sets and frozen tables may nest inside each other (packing and unpacking).

Each level is a separate msgpack call, so this bound keeps both the Python
recursion and the C stack small even for hostile input (see ``_SHALLOW``).
Vectors and tables do not count: they are native msgpack containers, which the
C code bounds by itself.
"""

MAX_RECORD_SIZE = 256 * 1024 * 1024
"""No single string or payload in a record stream may exceed this many bytes."""

_TIME = struct.Struct(">qH")  # microseconds, nanoseconds beyond them (0..999)
_WIDE_TIME_BYTES = 12  # nanoseconds, for datetimes and timedeltas beyond int64 microseconds
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_TS_EPOCH = Timestamp.from_ns(0)
_ONE_US = _dt.timedelta(microseconds=1)
_PORT = struct.Struct(">HB")
_U64 = struct.Struct(">Q")

# ExtType's own constructor validates its arguments in Python; ours are valid by
# construction, and building the namedtuple directly is three times faster.
_new_tuple = tuple.__new__


def _ext(code: int, data: bytes) -> ExtType:
    return _new_tuple(ExtType, (code, data))


# --- encoding ---------------------------------------------------------------------------

_PACKERS: list[msgpack.Packer] = []
"""Idle packers. A ``Packer`` is neither thread-safe nor re-entrant, and a set's
payload is packed while the outer packer is mid-value, so each pack borrows one
(``list.pop`` and ``append`` are atomic) and gives it back."""


def _pack(value: Any) -> bytes:
    try:
        packer = _PACKERS.pop()
    except IndexError:
        packer = msgpack.Packer(strict_types=True, default=_default, use_bin_type=True)
    try:
        return packer.pack(value)
    finally:
        _PACKERS.append(packer)


def _time_bytes(micros: int, nanos: int) -> bytes:
    """Microseconds and the nanosecond remainder: the split ``datetime`` already
    holds, so neither side multiplies or divides (Broker's int64 nanoseconds fit)."""
    if 0 <= nanos < 1000:
        try:
            return _TIME.pack(micros, nanos)
        except struct.error:
            pass
    return (micros * 1000 + nanos).to_bytes(_WIDE_TIME_BYTES, "big", signed=True)


def _enc_count(value: int) -> ExtType:
    if value < 256:
        return _SMALL_COUNTS[value]
    return _new_tuple(ExtType, (EXT_COUNT, _U64.pack(value)))


# Small counts (message envelopes, versions, flags) are by far the most frequent.
_SMALL_COUNTS = [_ext(EXT_COUNT, bytes((i,))) for i in range(256)]


def _enc_address(value: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ExtType:
    return _new_tuple(ExtType, (EXT_ADDRESS, value.packed))


def _enc_subnet(value: ipaddress.IPv4Network | ipaddress.IPv6Network) -> ExtType:
    return _ext(EXT_SUBNET, value.network_address.packed + bytes((value.prefixlen,)))


def _enc_port(value: Port) -> ExtType:
    return _new_tuple(ExtType, (EXT_PORT, _PORT.pack(value.number(), value.type())))


def _enc_timestamp(value: _dt.datetime) -> ExtType:
    nanos = getattr(value, "_nanos", 0)
    if value.tzinfo is None:  # naive: taken as UTC, as everywhere in the data model
        value = value.replace(tzinfo=_dt.timezone.utc)
    return _new_tuple(ExtType, (EXT_TIMESTAMP, _time_bytes((value - _EPOCH) // _ONE_US, nanos)))


def _enc_timespan(value: _dt.timedelta) -> ExtType:
    data = _time_bytes(value // _ONE_US, getattr(value, "_nanos", 0))
    return _new_tuple(ExtType, (EXT_TIMESPAN, data))


def _enc_enum(value: Enum) -> ExtType:
    return _new_tuple(ExtType, (EXT_ENUM, value.name.encode("utf-8")))


class _Nesting(threading.local):
    depth = 0


_nesting = _Nesting()


def _pack_nested(code: int, payload: Any) -> ExtType:
    """An extension container's payload, packed with the same bound the decoder applies."""
    state = _nesting
    depth = state.depth
    if depth >= MAX_NESTING:
        raise EncodeError(f"sets and tables nested deeper than {MAX_NESTING} levels")
    state.depth = depth + 1
    try:
        return _new_tuple(ExtType, (code, _pack(payload)))
    finally:
        state.depth = depth


def _enc_set(value: set) -> ExtType:
    return _pack_nested(EXT_SET, list(value))


def _enc_frozenset(value: frozenset) -> ExtType:
    return _pack_nested(EXT_FROZENSET, list(value))


def _enc_frozen_table(value: Mapping) -> ExtType:
    return _pack_nested(EXT_FROZEN_TABLE, dict(value.items()))


_ENCODERS: dict[type, Callable[[Any], Any]] = {
    ipaddress.IPv4Address: _enc_address,
    ipaddress.IPv6Address: _enc_address,
    ipaddress.IPv4Network: _enc_subnet,
    ipaddress.IPv6Network: _enc_subnet,
    Port: _enc_port,
    Timestamp: _enc_timestamp,
    _dt.datetime: _enc_timestamp,
    Timespan: _enc_timespan,
    _dt.timedelta: _enc_timespan,
    Enum: _enc_enum,
    set: _enc_set,
    frozenset: _enc_frozenset,
    FrozenTable: _enc_frozen_table,
}

_NATIVE = frozenset({type(None), bool, int, float, str, bytes, list, dict})


def _default(value: Any) -> Any:
    """msgpack's hook for everything that is not an exact native type.

    Vectors and counts are the most frequent by far, so they are handled inline
    (each Python call saved here is measurable per message).
    """
    cls = type(value)
    if cls is tuple:
        return list(value)
    if cls is Count:
        if value < 256:
            return _SMALL_COUNTS[value]
        return _new_tuple(ExtType, (EXT_COUNT, _U64.pack(value)))
    try:
        enc = _ENCODERS[cls]
    except KeyError:
        return _fallback(value)
    return enc(value)


def _fallback(value: Any) -> Any:
    """Subclasses, ABCs and wrappers: reduce to a native value or an extension type.

    msgpack calls ``default`` only once per object, so whatever we return must
    be packable without another call.
    """
    unwrap = getattr(value, "_broker_value", None)
    if unwrap is not None:
        inner = unwrap()
        return inner if type(inner) in _NATIVE else _default(inner)
    try:
        tag = type_of(value)
    except TypeError as exc:
        raise EncodeError(str(exc)) from None
    if tag is DataType.Boolean:
        return bool(value)
    if tag is DataType.Count:
        return _enc_count(value)
    if tag is DataType.Integer:
        return int(value)
    if tag is DataType.Real:
        return float(value)
    if tag is DataType.String:
        return str.__str__(value) if isinstance(value, str) else bytes(value)
    if tag is DataType.Address:
        return _enc_address(value)
    if tag is DataType.Subnet:
        return _enc_subnet(value)
    if tag is DataType.Timestamp:
        return _enc_timestamp(value)
    if tag is DataType.Timespan:
        return _enc_timespan(value)
    if tag is DataType.Set:
        return _enc_frozenset(value) if isinstance(value, frozenset) else _enc_set(value)
    if tag is DataType.Table:
        # A mapping that is not a dict may be serving as a key: keep it hashable.
        return _enc_frozen_table(value)
    if tag is DataType.Vector:
        return list(value)
    raise EncodeError(f"cannot pack {type(value).__name__} value {value!r}")


def pack_value(value: Any) -> bytes:
    """Pack one Broker value; :class:`EncodeError` when it has no Broker type or is out of range.

    Integers must fit msgpack (``-2**63 .. 2**64-1``); absurdly deep nesting
    fails with :class:`EncodeError` rather than exhausting the stack.
    """
    try:
        return _pack(value)
    except EncodeError:
        raise
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise EncodeError(f"cannot pack value: {type(exc).__name__}: {exc}") from None


# --- decoding ---------------------------------------------------------------------------


def _dec_count(data: bytes) -> Count:
    if not 1 <= len(data) <= 8:
        raise DecodeError(f"count extension of {len(data)} bytes (expected 1 to 8)")
    # Eight bytes cannot exceed Count's range, so skip its validating constructor.
    return int.__new__(Count, int.from_bytes(data, "big"))


_COUNT_VALUES = [Count(i) for i in range(256)]


def _dec_address(data: bytes) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if len(data) == 4:
        return ipaddress.IPv4Address(data)
    if len(data) == 16:
        return ipaddress.IPv6Address(data)
    raise DecodeError(f"address extension of {len(data)} bytes (expected 4 or 16)")


def _dec_subnet(data: bytes) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    if len(data) == 5:
        cls: Any = ipaddress.IPv4Network
    elif len(data) == 17:
        cls = ipaddress.IPv6Network
    else:
        raise DecodeError(f"subnet extension of {len(data)} bytes (expected 5 or 17)")
    try:
        return cls((data[:-1], data[-1]))
    except ValueError as exc:
        raise DecodeError(f"bad subnet extension: {exc}") from None


def _dec_port(data: bytes) -> Port:
    if len(data) != 3:
        raise DecodeError(f"port extension of {len(data)} bytes (expected 3)")
    number, proto = _PORT.unpack(data)
    try:
        return Port(number, proto)
    except ValueError as exc:
        raise DecodeError(f"bad port extension: {exc}") from None


def _split_time(data: bytes, what: str) -> tuple[int, int]:
    if len(data) == _TIME.size:
        micros, nanos = _TIME.unpack(data)
        if nanos < 1000:
            return micros, nanos
        raise DecodeError(f"{what} extension with {nanos} nanoseconds beyond the microsecond")
    if len(data) == _WIDE_TIME_BYTES:
        return divmod(int.from_bytes(data, "big", signed=True), 1000)
    raise DecodeError(f"{what} extension of {len(data)} bytes (expected {_TIME.size} or 12)")


def _dec_timestamp(data: bytes) -> Timestamp:
    micros, nanos = _split_time(data, "timestamp")
    try:
        # Arithmetic on a datetime subclass returns the subclass, all in C.
        ts = _TS_EPOCH + _dt.timedelta(0, 0, micros)
    except (OverflowError, ValueError):
        raise DecodeError(f"timestamp out of range: {micros}us") from None
    if nanos:
        ts._nanos = nanos
    return ts


def _dec_timespan(data: bytes) -> Timespan:
    micros, nanos = _split_time(data, "timespan")
    try:
        span = Timespan(0, 0, micros)
    except (OverflowError, ValueError):
        raise DecodeError(f"timespan out of range: {micros}us") from None
    if nanos:
        span._nanos = nanos
    return span


def _dec_enum(data: bytes) -> Enum:
    try:
        return Enum(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise DecodeError("enum name is not UTF-8") from None


_MEMO_LIMIT = 4096
_MEMOS: dict[int, dict[bytes, Any]] = {EXT_ADDRESS: {}, EXT_SUBNET: {}, EXT_PORT: {}, EXT_ENUM: {}}
"""Decoded immutable leaves by payload, per extension code.

Addresses, ports and enum names repeat heavily in real traffic (a handful of
hosts and services, a few dozen enum names), and building them is the costly
part of decoding them. The values are immutable, so sharing them is safe; each
memo is simply emptied when it reaches ``_MEMO_LIMIT`` entries."""


def _memoized(code: int, decode: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    memo = _MEMOS[code]

    def decode_and_remember(data: bytes) -> Any:
        value = decode(data)
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        memo[bytes(data)] = value
        return value

    return decode_and_remember


_LEAF_DECODERS: dict[int, Callable[[bytes], Any]] = {
    EXT_COUNT: _dec_count,
    EXT_ADDRESS: _memoized(EXT_ADDRESS, _dec_address),
    EXT_SUBNET: _memoized(EXT_SUBNET, _dec_subnet),
    EXT_PORT: _memoized(EXT_PORT, _dec_port),
    EXT_TIMESTAMP: _dec_timestamp,
    EXT_TIMESPAN: _dec_timespan,
    EXT_ENUM: _memoized(EXT_ENUM, _dec_enum),
}


def _dec_container(code: int, data: bytes, depth: int) -> Any:
    if code not in (EXT_SET, EXT_FROZENSET, EXT_FROZEN_TABLE):
        raise DecodeError(f"unknown extension type {code}")
    if depth >= MAX_NESTING:
        raise DecodeError(f"sets and tables nested deeper than {MAX_NESTING} levels")
    inner = _unpack(data, depth + 1)
    if code == EXT_FROZEN_TABLE:
        if type(inner) is not dict:
            raise DecodeError("frozen table extension does not hold a map")
        return FrozenTable(inner)
    if type(inner) is not tuple:
        raise DecodeError("set extension does not hold an array")
    return set(inner) if code == EXT_SET else frozenset(inner)


def _make_ext_hook(depth: int) -> Callable[[int, bytes], Any]:
    """The ``ext_hook`` for one nesting level: the level travels in the closure,
    which keeps decoding thread-safe and re-entrant without shared state."""

    def ext_hook(code: int, data: bytes) -> Any:
        # Counts and timestamps are inlined: they are the most frequent extensions.
        if code == EXT_COUNT and len(data) == 1:
            return _COUNT_VALUES[data[0]]
        if code == EXT_TIMESTAMP and len(data) == _TIME_SIZE:
            micros, nanos = _time_unpack(data)
            if nanos < 1000:
                # Arithmetic on a datetime subclass returns the subclass, all in C.
                ts = _TS_EPOCH + _timedelta(0, 0, micros)
                if nanos:
                    ts._nanos = nanos
                return ts
        memo = _MEMOS.get(code)
        if memo is not None:
            value = memo.get(data)
            if value is not None:
                return value
        dec = _LEAF_DECODERS.get(code)
        if dec is not None:
            return dec(data)
        return _dec_container(code, data, depth)

    return ext_hook


_TIME_SIZE = _TIME.size
_time_unpack = _TIME.unpack
_timedelta = _dt.timedelta

_EXT_HOOKS = [_make_ext_hook(depth) for depth in range(MAX_NESTING + 1)]


_SHALLOW = 4
"""Nesting levels decoded with ``unpackb``, whose parser state (about 40 KiB)
lives on the C stack; deeper levels use an ``Unpacker`` object, whose state
lives on the heap, so even ``MAX_NESTING`` levels fit a small thread stack."""


def _unpack(data: Any, depth: int) -> Any:
    # unpackb bounds every length by the input's size. msgpack's own timestamp
    # extension (-1) never reaches ext_hook; timestamp=3 turns it into a UTC
    # datetime, which is at least a Broker timestamp.
    if depth < _SHALLOW:
        return msgpack.unpackb(
            data,
            ext_hook=_EXT_HOOKS[depth],
            use_list=False,
            strict_map_key=False,
            raw=False,
            timestamp=3,
        )
    unpacker = msgpack.Unpacker(
        None,
        ext_hook=_EXT_HOOKS[depth],
        use_list=False,
        strict_map_key=False,
        raw=False,
        timestamp=3,
        max_buffer_size=max(len(data), 1),
    )
    unpacker.feed(data)
    value = unpacker.unpack()
    if unpacker.tell() != len(data):
        raise DecodeError("extra bytes after a nested value")
    return value


def unpack_value(data: bytes | bytearray | memoryview) -> Any:
    """Unpack one value packed by :func:`pack_value`; only :class:`DecodeError` escapes."""
    try:
        return _unpack(data, 0)
    except DecodeError:
        raise
    except Exception as exc:  # msgpack, hashing, unicode, range: all mean malformed input
        raise DecodeError(f"malformed packed value: {type(exc).__name__}: {exc}") from None


# --- records ----------------------------------------------------------------------------


class Record(NamedTuple):
    """One spooled message: its topic, Broker binary payload, and where and when it came from."""

    topic: str
    payload: bytes
    sender: str
    received_at_ns: int
    offset: int


_RECORD_PACKERS: list[msgpack.Packer] = []


def _pack_plain(obj: Any) -> bytes:
    try:
        packer = _RECORD_PACKERS.pop()
    except IndexError:
        packer = msgpack.Packer(use_bin_type=True)
    try:
        return packer.pack(obj)
    finally:
        _RECORD_PACKERS.append(packer)


def _check_record(topic: Any, payload: Any, sender: Any, received_at_ns: Any, offset: Any) -> None:
    if not isinstance(topic, str) or not isinstance(sender, str):
        raise EncodeError("record topic and sender must be str")
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise EncodeError(f"record payload must be bytes, got {type(payload).__name__}")
    if type(received_at_ns) is not int or type(offset) is not int:
        raise EncodeError("record received_at_ns and offset must be int")
    if offset < 0:
        raise EncodeError(f"record offset must not be negative: {offset}")


def pack_record(topic: str, payload: bytes, sender: str, received_at_ns: int, offset: int) -> bytes:
    """Pack one record; the payload is stored as given (already Broker binary)."""
    _check_record(topic, payload, sender, received_at_ns, offset)
    try:
        return _pack_plain((topic, payload, sender, received_at_ns, offset))
    except (ValueError, OverflowError) as exc:
        raise EncodeError(f"cannot pack record at offset {offset}: {exc}") from None


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


def _to_record(obj: Any, pos: int) -> Record:
    if type(obj) is not tuple or len(obj) != 5:
        raise DecodeError(f"record at byte {pos} is not an array of 5 fields")
    topic, payload, sender, received_at_ns, offset = obj
    if (
        type(topic) is not str
        or type(payload) is not bytes
        or type(sender) is not str
        or type(received_at_ns) is not int
        or type(offset) is not int
    ):
        raise DecodeError(f"record at byte {pos} has fields of the wrong types")
    if offset < 0:
        raise DecodeError(f"record at byte {pos} has a negative offset {offset}")
    return Record(topic, payload, sender, received_at_ns, offset)


def _no_ext(code: int, data: bytes) -> Any:
    raise DecodeError(f"unexpected extension type {code} in a record")


def _record_unpacker(buf: Any, max_record_size: int) -> msgpack.Unpacker:
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


class _Truncated(Exception):
    """The stream ends inside a record that starts at ``pos``."""

    def __init__(self, pos: int) -> None:
        super().__init__(pos)
        self.pos = pos


def _scan(buf: Any, max_record_size: int) -> Iterator[tuple[Record, int]]:
    """Each complete record with the byte position just after it; :class:`_Truncated` at a torn end."""
    unpacker = _record_unpacker(buf, max_record_size)
    end = len(buf)
    pos = 0
    while pos < end:
        try:
            obj = unpacker.unpack()
        except msgpack.OutOfData:
            raise _Truncated(pos) from None
        except DecodeError:
            raise
        except Exception as exc:
            raise DecodeError(
                f"malformed record at byte {pos}: {type(exc).__name__}: {exc}"
            ) from None
        record = _to_record(obj, pos)
        pos = unpacker.tell()
        yield record, pos


def _iter_records(buf: Any, allow_truncated: bool, max_record_size: int) -> Iterator[Record]:
    try:
        for record, _ in _scan(buf, max_record_size):
            yield record
    except _Truncated as torn:
        if not allow_truncated:
            raise DecodeError(f"truncated record at byte {torn.pos} of {len(buf)}") from None


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
    end = 0
    try:
        for _, pos in _scan(buf, max_record_size):
            end = pos
    except _Truncated as torn:
        return torn.pos
    return end


__all__ = [
    "MAX_NESTING",
    "MAX_RECORD_SIZE",
    "Record",
    "pack_record",
    "pack_records",
    "pack_value",
    "records_end",
    "unpack_records",
    "unpack_value",
]
