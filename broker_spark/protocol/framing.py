"""Length-prefixed framing of Broker's wire protocol (every version).

Every message on a Broker connection is a 4-byte big-endian length followed by
that many bytes of body. This module only cuts a byte stream into bodies and
glues bodies back into a stream; it knows nothing about what a body means.

It sits on the hot path (hundreds of thousands of small frames per second), so
the decoder slices bodies straight out of the bytes handed to ``feed`` and only
buffers the one frame that a feed leaves incomplete (in a ``bytearray`` that
grows by amortised appends). Every byte is copied at most twice, whatever the
chunking, so a feed of many frames costs O(n), never O(n^2). A length above the configured maximum is rejected from the header alone,
before any memory is spent on the body, and the decoder stays failed: the
stream can no longer be trusted and the caller must close the connection.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from broker_spark.errors import DecodeError, EncodeError

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "HEADER_SIZE",
    "MAX_BODY_SIZE",
    "FrameDecoder",
    "encode_frame",
    "encode_frames",
    "frame_prefix",
]

#: Size of the length prefix in front of every body.
HEADER_SIZE = 4

#: The largest body a 4-byte length can describe.
MAX_BODY_SIZE = 0xFFFFFFFF

#: A generous default limit for one body (16 MiB); the core may configure another.
DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024

_U32 = struct.Struct(">I")
_unpack_u32 = _U32.unpack_from
_pack_u32 = _U32.pack

#: The 4-byte length prefix of a frame whose body has ``size`` bytes (``frame_prefix(size)``):
#: what a writer that assembles a frame from pieces puts in front of them.
frame_prefix = _pack_u32


class FrameDecoder:
    """Cut a byte stream into frame bodies.

    ``feed`` returns every body completed by the new bytes (possibly none) and
    keeps a partial frame for the next call. A header announcing more than
    ``max_frame_size`` bytes raises :class:`DecodeError`; from then on every
    ``feed`` raises again, because the stream position is lost for good.
    """

    __slots__ = ("_partial", "_max", "_error", "_fed")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if not 0 <= max_frame_size <= MAX_BODY_SIZE:
            raise ValueError(f"max_frame_size out of range: {max_frame_size}")
        # At most one incomplete frame (header included) waits here between feeds.
        self._partial = bytearray()
        self._max = max_frame_size
        self._error: str | None = None
        self._fed = 0  # bytes fed so far, to name stream offsets in errors

    @property
    def max_frame_size(self) -> int:
        return self._max

    @property
    def failed(self) -> bool:
        """True once an oversized frame was seen; the connection must be closed."""
        return self._error is not None

    @property
    def pending(self) -> int:
        """Bytes received but not yet returned as a complete body."""
        return len(self._partial)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; return the bodies they complete, in order."""
        if self._error is not None:
            raise DecodeError(self._error)
        if not isinstance(data, bytes):
            data = bytes(data)
        self._fed += len(data)
        pos = 0
        first: bytes | None = None
        if self._partial:
            first, pos = self._complete_partial(data)
            if first is None:
                return []
        out, pos = self._parse(data, pos)
        if first is not None:
            out.insert(0, first)
        if pos < len(data):
            self._partial += memoryview(data)[pos:]
        return out

    def _complete_partial(self, data: bytes) -> tuple[bytes | None, int]:
        """Top up the pending frame from ``data``; return it when complete.

        Returns ``(body or None, bytes of data used)``. Only the one pending
        frame is ever copied through the bytearray; everything after it is
        parsed straight from ``data``.
        """
        partial = self._partial
        pos = 0
        if len(partial) < HEADER_SIZE:
            pos = HEADER_SIZE - len(partial)
            partial += data[:pos]
            if len(partial) < HEADER_SIZE:
                return None, len(data)
        (size,) = _unpack_u32(partial)
        if size > self._max:
            self._fail(size, self._fed - len(data) - (len(partial) - pos))
        missing = HEADER_SIZE + size - len(partial)
        if len(data) - pos < missing:
            partial += memoryview(data)[pos:]
            return None, len(data)
        partial += memoryview(data)[pos : pos + missing]
        with memoryview(partial) as view:
            body = bytes(view[HEADER_SIZE:])
        partial.clear()
        return body, pos + missing

    def _parse(self, data: bytes, pos: int) -> tuple[list[bytes], int]:
        """Parse complete frames out of ``data`` from ``pos``; return them and the stop."""
        ends, stop = self.body_ends(data, pos)
        out: list[bytes] = []
        append = out.append
        for end in ends:
            append(data[pos + HEADER_SIZE : end])
            pos = end
        return out, stop

    def body_ends(self, data: bytes, pos: int) -> tuple[list[int], int]:
        """Where the bodies of the complete frames in ``data`` from ``pos`` end, and where
        the first incomplete frame starts: each body starts ``HEADER_SIZE`` bytes after the
        previous body's end (the first, after ``pos``).

        The one loop that cuts frames: :class:`~broker_spark.protocol.envelope_reader.EnvelopeReader`
        walks these ends too. A length over the limit fails the stream here, from the header
        alone. Ends rather than bodies, so that a reader that wants only part of a body (the
        payload after a known header) copies that part only; one int a frame, the cheapest
        form measured (bench/pubsub.py's subscriber CPU a message as with the loop inline).
        """
        ends: list[int] = []
        add = ends.append
        end = len(data)
        limit = self._max
        while end - pos >= HEADER_SIZE:
            (size,) = _unpack_u32(data, pos)
            if size > limit:
                self._fail(size, self._fed - (end - pos))
            stop = pos + HEADER_SIZE + size
            if stop > end:
                break
            add(stop)
            pos = stop
        return ends, pos

    def _fail(self, size: int, stream_offset: int) -> None:
        self._error = (
            f"frame of {size} bytes at stream offset {stream_offset} "
            f"exceeds the maximum of {self._max} bytes"
        )
        self._partial = bytearray()
        raise DecodeError(self._error)


def encode_frame(body: bytes | bytearray | memoryview) -> bytes:
    """Prefix one body with its 4-byte big-endian length."""
    size = len(body)
    if size > MAX_BODY_SIZE:
        raise EncodeError(f"frame body of {size} bytes does not fit a 32-bit length")
    return b"".join((_pack_u32(size), body))


def encode_frames(bodies: Iterable[bytes | bytearray | memoryview]) -> bytes:
    """Frame many bodies into one buffer, so a batch costs one write."""
    parts: list[bytes | bytearray | memoryview] = []
    append = parts.append
    for body in bodies:
        size = len(body)
        if size > MAX_BODY_SIZE:
            raise EncodeError(f"frame body of {size} bytes does not fit a 32-bit length")
        append(_pack_u32(size))
        append(body)
    return b"".join(parts)
