"""Broker's primitive encodings shared by the value codec and the wire protocol.

A *varbyte* is an unsigned integer in little-endian base 128 with a continuation
bit, at most 32 bits (five bytes). A *string* is a varbyte length followed by
UTF-8 bytes. Readers take ``(buf, pos)`` and return ``(value, new_pos)`` so
parsers can walk a buffer without slicing it, and raise :class:`DecodeError`
naming the offset on any malformed input.
"""

from __future__ import annotations

from broker_spark.errors import DecodeError

MAX_VARBYTE = 0xFFFFFFFF


def encode_varbyte(n: int) -> bytes:
    """Encode ``0 <= n < 2**32`` as a varbyte."""
    if n < 0 or n > MAX_VARBYTE:
        raise ValueError(f"varbyte out of range: {n}")
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_varbyte(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Read a varbyte at ``pos``; return ``(value, pos_after)``."""
    try:
        b = buf[pos]
    except IndexError:
        raise DecodeError(f"truncated varbyte at offset {pos}") from None
    if b < 0x80:
        return b, pos + 1
    value = 0
    shift = 0
    start = pos
    end = len(buf)
    while True:
        if pos >= end:
            raise DecodeError(f"truncated varbyte at offset {start}")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 28:
            raise DecodeError(f"varbyte longer than 32 bits at offset {start}")
    if value > MAX_VARBYTE:
        raise DecodeError(f"varbyte exceeds 32 bits at offset {start}")
    return value, pos


def encode_string(s: str | bytes) -> bytes:
    """Encode a string as varbyte length + bytes (str is encoded as UTF-8)."""
    raw = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return encode_varbyte(len(raw)) + raw


def read_raw_string(
    buf: bytes | memoryview, pos: int, max_len: int = MAX_VARBYTE
) -> tuple[bytes, int]:
    """Read a length-prefixed byte string; reject lengths beyond the buffer or ``max_len``."""
    n, pos = read_varbyte(buf, pos)
    if n > max_len:
        raise DecodeError(f"string of {n} bytes at offset {pos} exceeds the limit of {max_len}")
    end = pos + n
    if end > len(buf):
        raise DecodeError(
            f"truncated string at offset {pos}: need {n} bytes, have {len(buf) - pos}"
        )
    return bytes(buf[pos:end]), end


def read_string(buf: bytes | memoryview, pos: int, max_len: int = MAX_VARBYTE) -> tuple[str, int]:
    """Read a length-prefixed UTF-8 string."""
    raw, end = read_raw_string(buf, pos, max_len)
    try:
        return raw.decode("utf-8"), end
    except UnicodeDecodeError as exc:
        raise DecodeError(f"invalid UTF-8 in string at offset {pos}: {exc.reason}") from None
