"""Broker binary straight to Zeek JSON text, for the stream reader's ``data`` column.

Decoding a payload into Python values and encoding those as JSON costs two
passes and an object per leaf; the reader only wants the text. This walks the
binary once and writes the JSON as it goes, with the output of the leaves that
repeat (strings, addresses, ports, enums, timestamps to the millisecond)
remembered by their bytes. It is a shortcut, not a second codec: whatever it
does not handle itself (sets, tables, subnets, reals, deep nesting, anything
unusual or malformed) goes through :func:`binary.decode` and
:func:`json_codec.dumps_value`, and its output is always exactly what
``dumps_value(decode(payload))`` gives, errors included.
"""

from __future__ import annotations

import struct
from json.encoder import encode_basestring_ascii as _quote
from typing import Any

from broker_spark import zeek
from broker_spark.data.binary import DEFAULT_LIMITS, decode, decode_from
from broker_spark.data.json_codec import dumps_value
from broker_spark.data.types import Count, Timestamp
from broker_spark.data.varbyte import read_varbyte

__all__ = ["binary_to_json", "event_to_json"]

_unpack_q = struct.Struct(">q").unpack_from
_unpack_Q = struct.Struct(">Q").unpack_from
_unpack_d = struct.Struct(">d").unpack_from

_MAX_DEPTH = 32  # deeper values take the reference path (whose limits then apply)
_MAX_STRING = DEFAULT_LIMITS.max_string
_MAX_CONTAINER = DEFAULT_LIMITS.max_container
_MAX_ITEMS = DEFAULT_LIMITS.max_items
_MEMO_LIMIT = 8192
_MEMO_STRING_BYTES = 64

_COUNTS = ['{"@data-type":"count","data":%d}' % i for i in range(256)]  # noqa: UP031
_VECTOR_OPEN = '{"@data-type":"vector","data":['
_NONE = '{"@data-type":"none","data":{}}'
_TRUE = '{"@data-type":"boolean","data":true}'
_FALSE = '{"@data-type":"boolean","data":false}'

_strings: dict[bytes, str] = {}
_leaves: dict[bytes, str] = {}  # address, subnet, port, timespan, enum: keyed by tag + bytes
_seconds: dict[int, str] = {}  # timestamp text up to the seconds, by second
_MILLIS = ['.%03d"}' % i for i in range(1000)]  # noqa: UP031
_NS_MIN = -(1 << 63)


class _Unhandled(Exception):
    """Leave this payload to the reference path."""


def _remember(memo: dict[Any, str], key: Any, text: str) -> str:
    if len(memo) >= _MEMO_LIMIT:
        memo.clear()
    memo[key] = text
    return text


def _string(raw: bytes) -> str:
    text = _strings.get(raw)
    if text is not None:
        return text
    try:
        data = raw.decode()
    except UnicodeDecodeError:
        data = raw.decode("utf-8", "surrogateescape")
    text = '{"@data-type":"string","data":' + _quote(data) + "}"
    return _remember(_strings, raw, text) if len(raw) <= _MEMO_STRING_BYTES else text


def _reference_leaf(buf: bytes, pos: int, size: int) -> tuple[str, int]:
    """A leaf of fixed ``size`` bytes after its tag, through the reference codecs (memoized)."""
    stop = pos + 1 + size
    key = buf[pos:stop]
    text = _leaves.get(key)
    if text is None:
        if stop > len(buf):
            raise _Unhandled
        value, _ = decode_from(buf, pos)
        text = _remember(_leaves, key, dumps_value(value))
    return text, stop


def _timestamp(ns: int) -> str:
    """Zeek JSON floors timestamps to the millisecond: the text up to the seconds, memoized,
    plus the milliseconds (the reference formats the first second of a minute the same way)."""
    seconds, rest = divmod(ns, 1_000_000_000)
    prefix = _seconds.get(seconds)
    if prefix is None:
        if ns < _NS_MIN + 1_000_000_000:  # where the reference rounds differently
            return dumps_value(Timestamp.from_ns(ns))
        whole = dumps_value(Timestamp.from_ns(seconds * 1_000_000_000))
        prefix = _remember(_seconds, seconds, whole[: -len(_MILLIS[0])])
    return prefix + _MILLIS[rest // 1_000_000]


def _transcode(buf: bytes, pos: int, out: list[str]) -> int:
    """Append the JSON of the value at ``pos`` to ``out``; return the position after it.

    Raises (anything) when the value should take the reference path instead.
    """
    end = len(buf)
    append = out.append
    stack: list[int] = []
    budget = _MAX_ITEMS
    remaining = 1
    first = True
    while True:
        while not remaining:
            if not stack:
                return pos
            append("]}")
            remaining = stack.pop()
        remaining -= 1
        if first:
            first = False
        else:
            append(",")
        tag = buf[pos]
        if tag == 5:
            n = buf[pos + 1]
            if n < 0x80:
                start = pos + 2
            else:
                n, start = read_varbyte(buf, pos + 1)
            pos = start + n
            if pos > end or n > _MAX_STRING:
                raise _Unhandled
            append(_string(buf[start:pos]))
        elif tag == 2:
            n = _unpack_Q(buf, pos + 1)[0]
            append(_COUNTS[n] if n < 256 else '{"@data-type":"count","data":' + str(n) + "}")
            pos += 9
        elif tag == 14:
            n = buf[pos + 1]
            if n < 0x80:
                pos += 2
            else:
                n, pos = read_varbyte(buf, pos + 1)
            budget -= n
            if n > end - pos or n > _MAX_CONTAINER or budget < 0 or len(stack) >= _MAX_DEPTH:
                raise _Unhandled
            append(_VECTOR_OPEN)
            if n:
                stack.append(remaining)
                remaining = n
                first = True
            else:
                append("]}")
        elif tag == 3:
            append('{"@data-type":"integer","data":' + str(_unpack_q(buf, pos + 1)[0]) + "}")
            pos += 9
        elif tag == 9:
            append(_timestamp(_unpack_q(buf, pos + 1)[0]))
            pos += 9
        elif tag == 6 or tag == 10:
            text, pos = _reference_leaf(buf, pos, 16 if tag == 6 else 8)
            append(text)
        elif tag == 8:
            text, pos = _reference_leaf(buf, pos, 3)
            append(text)
        elif tag == 0:
            append(_NONE)
            pos += 1
        elif tag == 1:
            b = buf[pos + 1]
            if b > 1:
                raise _Unhandled
            append(_TRUE if b else _FALSE)
            pos += 2
        elif tag == 4:
            append(dumps_value(_unpack_d(buf, pos + 1)[0]))
            pos += 9
        else:  # enum, subnet, set, table, unknown: the reference path, for this subtree
            value, pos = decode_from(buf, pos)
            append(dumps_value(value))


def binary_to_json(payload: bytes) -> str:
    """``dumps_value(decode(payload))``, faster: Zeek JSON text of a Broker binary value.

    Malformed payloads raise :class:`DecodeError` (and unencodable values
    :class:`EncodeError`) exactly as the reference path does.
    """
    out: list[str] = []
    try:
        if payload.startswith(_EVENT_HEAD):  # most traffic is Zeek events: skip their envelope
            event = _event_fast(payload)
            if event is not None:
                return event[0]
        if _transcode(payload, 0, out) == len(payload):
            return "".join(out)
    except Exception:
        pass
    return dumps_value(decode(payload))


_EVENT_HEAD = bytes((14, 3, 2, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 1, 14))
_EVENT_DATA_OPEN = _VECTOR_OPEN + _COUNTS[1] + "," + _COUNTS[1] + "," + _VECTOR_OPEN
_METADATA_CHECK = (Count(1), Count(1))


def _event_fast(buf: bytes) -> tuple[str, str, str] | None:
    """The usual event layout, ``[1, 1, [name, [args...](, metadata)]]``, read in place."""
    if not buf.startswith(_EVENT_HEAD):
        raise _Unhandled
    fields = buf[21]
    if fields not in (2, 3) or buf[22] != 5:
        raise _Unhandled
    n = buf[23]
    if n >= 0x80:
        raise _Unhandled
    pos = 24 + n
    name_raw = buf[24:pos]
    if buf[pos] != 14:
        return None  # the arguments are not a vector: not an event
    parts: list[str] = []
    pos = _transcode(buf, pos, parts)
    args = "".join(parts)
    meta = ""
    if fields == 3:
        metadata, pos = decode_from(buf, pos)
        if not zeek.is_event((*_METADATA_CHECK, ("", (), metadata))):
            return None
        meta = "," + dumps_value(metadata)
    if pos != len(buf):
        raise _Unhandled
    try:
        name = name_raw.decode()
    except UnicodeDecodeError:
        name = name_raw.decode("utf-8", "backslashreplace")
    data = _EVENT_DATA_OPEN + _string(name_raw) + "," + args + meta + "]}]}"
    return data, name, args[len(_VECTOR_OPEN) - 1 : -1]


def _event_reference(payload: bytes) -> tuple[str, str | None, str | None]:
    value = decode(payload)
    data = dumps_value(value)
    event = zeek.event_name_and_args(value)
    if event is None:
        return data, None, None
    name, args = event
    return data, name, "[" + ",".join(map(dumps_value, args)) + "]"


def event_to_json(payload: bytes) -> tuple[str, str | None, str | None]:
    """``(data, event name, args)`` of a payload: args a JSON array of Zeek JSON values.

    For a value that is not a Zeek event, name and args are None. Same
    results and errors as decoding and using :func:`zeek.event_name_and_args`.
    """
    try:
        fast = _event_fast(payload)
    except Exception:
        return _event_reference(payload)
    if fast is None:
        return _event_reference(payload)
    return fast
