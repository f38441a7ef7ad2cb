"""What a relay could not decode, kept as a spool record of its own kind.

A relay is a Zeek site's durability point, so it drops nothing it has read: a
batch it cannot decode (a newer Zeek's changed format, another serializer, a
sender's bad frame) is kept in the spool as it arrived, with where it came from
and why it was not read. Readers show it (``format=zeek-logs`` as an
undecodable row, the tables writer in its quarantine table), an operator sees
it counted, and a later broker-spark that knows the format reads it again from
the spool with :func:`decode_again`.

The record's topic is :data:`UNDECODABLE_TOPIC` (under ``zeek/logs/``, so a
relay keeping Zeek's logs keeps it and a log reader is served it); its payload
starts with :data:`MAGIC`, a byte no Broker value and no ZeroMQ log batch starts
with, then a msgpack map ``{source, reason, frames}``: the kind of source
(``zeromq-logs``), the reason in words, and the message's frames as received
(Zeek's four ``log-write`` frames, or whatever a sender sent).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgpack

from broker_spark.errors import DecodeError
from broker_spark.zeek.log_batch import LOG_MESSAGE_TYPE, LOG_SERIALIZER, read_header

__all__ = [
    "MAGIC",
    "UNDECODABLE_TOPIC",
    "Undecodable",
    "decode_again",
    "is_undecodable",
    "pack_undecodable",
    "unpack_undecodable",
]

#: The topic of a kept undecodable message: a Zeek stream id always has ``::``, so no log
#: of Zeek's is named so.
UNDECODABLE_TOPIC = "zeek/logs/broker-spark:undecodable"
#: How an undecodable record's payload starts (0xFF opens no Broker value, 0x00 a batch).
MAGIC = b"\xffbroker-spark undecodable\x01"
#: Frames kept of one message, at most (a sender's message of thousands of frames is
#: kept as its first ones; the reason says how many there were).
MAX_FRAMES = 16


@dataclass(frozen=True)
class Undecodable:
    """A kept message: its ``frames`` as received, its ``source`` kind and the ``reason``."""

    source: str
    reason: str
    frames: tuple[bytes, ...]


def pack_undecodable(source: str, reason: str, frames: Sequence[bytes]) -> bytes:
    """The payload of the spool record that keeps ``frames``."""
    kept = [bytes(f) for f in frames[:MAX_FRAMES]]
    if len(frames) > MAX_FRAMES:
        reason = f"{reason} (the first {MAX_FRAMES} of {len(frames)} frames kept)"
    body = msgpack.packb({"source": source, "reason": reason, "frames": kept}, use_bin_type=True)
    return MAGIC + body


def is_undecodable(payload: bytes | memoryview) -> bool:
    """Whether a spool record's payload is a kept undecodable message."""
    return bytes(payload[: len(MAGIC)]) == MAGIC


def unpack_undecodable(payload: bytes | memoryview) -> Undecodable:
    """The kept message of a payload :func:`is_undecodable` says is one (DecodeError else)."""
    if not is_undecodable(payload):
        raise DecodeError("not a kept undecodable message")
    try:
        body = msgpack.unpackb(bytes(payload[len(MAGIC) :]), raw=False)
        return Undecodable(
            str(body["source"]), str(body["reason"]), tuple(bytes(f) for f in body["frames"])
        )
    except (ValueError, KeyError, TypeError, msgpack.UnpackException) as exc:
        raise DecodeError(f"a kept undecodable message that does not unpack: {exc}") from None


def decode_again(
    kept: Undecodable, serializers: Sequence[bytes] = (LOG_SERIALIZER,)
) -> tuple[str, bytes] | None:
    """A kept ZeroMQ log message as the spool record a relay would have made of it,
    ``(topic, batch)``, when this broker-spark reads it now (``serializers``: the ones it
    knows); None while it still cannot."""
    frames = kept.frames
    if len(frames) != 4 or frames[0] != LOG_MESSAGE_TYPE or frames[2] not in serializers:
        return None
    try:
        header = read_header(frames[3])
    except DecodeError:
        return None
    return "zeek/logs/" + header.stream, frames[3]
