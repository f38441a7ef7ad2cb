"""Frames and envelope headers cut in one pass: the receive fast path of a peer link.

Between two endpoints, nearly every frame is a publication whose envelope
header (sender, receiver, type, TTL, topic and, in version 2, the publisher
and a leaf multipath) repeats byte for byte: the same neighbour sends the same
topic again and again. Parsing that header is pure: the same bytes always
mean the same ``(topic, kind, ttl, sender)`` and the payload is whatever
follows. So the link parses a header once, the slow and careful way, and
:meth:`EnvelopeReader.learn` remembers what it meant; from then on a frame
that starts with known header bytes becomes the core's message tuple straight
out of the received chunk (one slice for the payload, one tuple), without
first cutting the frame body out.

A header may also be learned with an opaque *entry* instead of message
fields: a hop in the middle of a version 2 multipath remembers what it does
with a routed header (whom to forward to, with which new header). A frame
with such a header comes back as the pair ``(entry, payloads)``, for the
caller to act on; consecutive frames with the same entry share one pair (the
list of their payloads), so the caller acts once per run, not per frame. Everything else (control messages, unknown headers) comes
back as a raw body. Items keep the stream's order.

The cache never changes the outcome, only its cost: a frame whose header is
not known, or is longer than the cached form allows, takes the full parser.
The header length is found from the two layouts that are ever learned:

- version 1 data and command: 37 bytes + the topic;
- version 2 data with a leaf multipath: 37 bytes + the topic + the 16-byte
  publisher + a one-byte multipath length + the multipath.

Frames are cut by :class:`~broker_spark.protocol.framing.FrameDecoder`'s one loop
(this *is* one; ``body_ends``), so sizes are bounded the same way: a frame over the
limit fails the stream from its header alone.
"""

from __future__ import annotations

from typing import Any

from broker_spark.protocol.framing import HEADER_SIZE, FrameDecoder

__all__ = ["CACHE_SIZE", "EnvelopeReader"]

#: Distinct known headers kept per connection before the cache starts over.
CACHE_SIZE = 1024

#: Offset of the message type and of the topic length in an envelope body.
_TYPE = 32
_TOPIC_LEN = 35
_FIXED = 37
#: Message types whose headers may be learned.
_V1_KINDS = (1, 2)
_V2_DATA = 0x10


class EnvelopeReader(FrameDecoder):
    """A :class:`FrameDecoder` that also turns frames with known headers into messages."""

    __slots__ = ("_known", "_last", "_last_fields")

    def __init__(self, max_frame_size: int) -> None:
        super().__init__(max_frame_size)
        self._known: dict[bytes, tuple] = {}
        # The most recent hit, checked first: one ``startswith`` per frame in a stream
        # of one topic. Set whenever ``_known`` is not empty.
        self._last = b""
        self._last_fields: Any = ()

    def learn(self, header: bytes, fields: Any) -> None:
        """Remember what a body starting with ``header`` is.

        ``fields`` is either a tuple ``(topic, kind, ttl, sender)`` (the body
        is the message ``(topic, payload, kind, ttl, sender)``) or any other
        object, an entry handed back with the payloads as ``(entry, [payload, ...])``.
        """
        known = self._known
        if len(known) >= CACHE_SIZE:
            known.clear()
            known[self._last] = self._last_fields
        known[header] = fields
        if not self._last or header == self._last:
            self._last, self._last_fields = header, fields

    def forget(self) -> None:
        """Drop every learned header."""
        self._known.clear()
        self._last = b""
        self._last_fields = ()

    def feed_messages(self, data: bytes) -> tuple[list, int]:
        """Add received bytes; return the completed frames and how many are not messages.

        Each item is a message tuple ``(topic, payload, kind, ttl, sender)``
        made from a known header, an ``(entry, payloads)`` pair for a run of
        frames whose header was learned with that entry, or the ``bytes`` body
        of a frame the caller must parse itself; the order is the stream's. The count covers pairs
        and bodies: when it is 0 the list holds message tuples only.
        """
        if self._error is not None or type(data) is not bytes or not self._known:
            # Failed, unusual input, or nothing learned yet: the general way.
            return self._match(self.feed(data))
        self._fed += len(data)
        pos = 0
        if self._partial:
            # The frame a previous chunk left incomplete: finished through the buffer.
            first, pos = self._complete_partial(data)
            if first is None:
                return [], 0
            out, raw = self._match([first])
        else:
            out, raw = [], 0
        append = out.append
        known = self._known
        last, fields = self._last, self._last_fields
        skip = len(last)
        entry = type(fields) is not tuple
        run: list | None = None  # the payloads of the entry pair appended last
        ends, rest = self.body_ends(data, pos)
        for stop in ends:
            start = pos + HEADER_SIZE
            pos = stop
            if data.startswith(last, start, stop):
                if not entry:
                    append((fields[0], data[start + skip : stop], fields[1], fields[2], fields[3]))
                elif run is not None:
                    run.append(data[start + skip : stop])
                else:
                    run = [data[start + skip : stop]]
                    append((fields, run))
                    raw += 1
                continue
            run = None
            hlen = _header_length(data, start, stop)
            if hlen:
                head = data[start : start + hlen]
                found = known.get(head)
                if found is not None:
                    last, fields = self._last, self._last_fields = head, found
                    skip = hlen
                    entry = type(found) is not tuple
                    if entry:
                        run = [data[start + hlen : stop]]
                        append((found, run))
                        raw += 1
                    else:
                        append((found[0], data[start + hlen : stop], found[1], found[2], found[3]))
                    continue
            append(data[start:stop])
            raw += 1
        if rest < len(data):
            self._partial += memoryview(data)[rest:]
        return out, raw

    def _match(self, bodies: list[bytes]) -> tuple[list, int]:
        """Known headers among whole ``bodies``: the same outcome as the inline loop."""
        known = self._known
        out: list = []
        raw = 0
        for body in bodies:
            size = len(body)
            hlen = _header_length(body, 0, size) if known else 0
            found = known.get(body[:hlen]) if hlen else None
            if found is None:
                out.append(body)
                raw += 1
            elif type(found) is not tuple:
                out.append((found, [body[hlen:]]))
                raw += 1
            else:
                out.append((found[0], body[hlen:], found[1], found[2], found[3]))
        return out, raw


def _header_length(buf: bytes, start: int, stop: int) -> int:
    """The length of a learnable header at ``buf[start:stop]``, or 0 if none fits."""
    if stop - start < _FIXED:
        return 0
    kind = buf[start + _TYPE]
    hlen = _FIXED + ((buf[start + _TOPIC_LEN] << 8) | buf[start + _TOPIC_LEN + 1])
    if kind == _V2_DATA:
        at = start + hlen + 16
        if at >= stop:
            return 0
        mp_len = buf[at]
        if mp_len >= 0x80:
            return 0
        hlen += 17 + mp_len
    elif kind not in _V1_KINDS:
        return 0
    return hlen if hlen <= stop - start else 0
