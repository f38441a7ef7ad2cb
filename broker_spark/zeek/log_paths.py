"""Which Zeek logs a message holds records of, from its first bytes: what a relay needs to
serve a reader only the logs it reads.

Zeek's log topic names the stream (``zeek/logs/Conn::LOG``), not the path (``conn``), a
Broker cluster's logger gets every log on its node topic, and a Batch may hold LogWrites
of several logs, so a relay cannot tell a message's logs by its topic. Every LogWrite
names its path right after its stream and writer (the same head for every record of a
log), a ZeroMQ log batch names it in its header, and a LogCreate in its writer info: so
a Batch of one log (what Zeek sends) is told by finding its first record's head as often
as the Batch holds records (``bytes.count``, no decoding); a mixed one by reading each
head. Nothing is ever left out that a reader of the log needs: a message that cannot be
read this way says "unknown" (None) and is served.
"""

from __future__ import annotations

from broker_spark.data.binary import decode
from broker_spark.data.varbyte import read_varbyte
from broker_spark.errors import DecodeError
from broker_spark.zeek.log_batch import is_log_batch, read_header
from broker_spark.zeek.log_scan import BATCH_HEAD, LOG_CREATE_HEAD, LOG_WRITE_HEAD
from broker_spark.zeek.logs import LogCreate

__all__ = ["message_logs"]

_ENUM = 0x0B
_STRING = 0x05
_NONE: frozenset[str] = frozenset()


def message_logs(payload: bytes) -> frozenset[str] | None:
    """The paths of the logs whose records (or LogCreate) ``payload`` holds: empty for a
    message of no log (an event), None when it cannot be told (serve it)."""
    try:
        if is_log_batch(payload):
            return frozenset((read_header(payload).path,))
        if payload.startswith(LOG_WRITE_HEAD):
            path, _end = _write_path(payload, len(LOG_WRITE_HEAD))
            return frozenset((path,))
        if payload.startswith(BATCH_HEAD):
            return _batch_logs(payload)
        if payload.startswith(LOG_CREATE_HEAD):
            return frozenset((LogCreate(decode(payload)).path(),))
    except (DecodeError, ValueError, IndexError, UnicodeDecodeError):
        return None
    return _NONE


def _write_path(data: bytes, at: int) -> tuple[str, int]:
    """The path of the LogWrite whose stream enum starts at ``at`` (after the head's tag),
    and where its path ends."""
    n, at = read_varbyte(data, at)  # the stream's name
    at += n
    if data[at] != _ENUM:
        raise DecodeError("a LogWrite without its writer")
    n, at = read_varbyte(data, at + 1)  # the writer's name
    at += n
    if data[at] != _STRING:
        raise DecodeError("a LogWrite without its path")
    n, at = read_varbyte(data, at + 1)
    return data[at : at + n].decode(), at + n


def _batch_logs(payload: bytes) -> frozenset[str] | None:
    count, at = read_varbyte(payload, len(BATCH_HEAD))
    if count == 0:
        return _NONE
    if not payload.startswith(LOG_WRITE_HEAD, at):
        return None  # events, or a Batch nested: not what Zeek sends logs in
    path, end = _write_path(payload, at + len(LOG_WRITE_HEAD))
    if payload.count(payload[at:end]) == count:  # every record of one log (Zeek's Batches)
        return frozenset((path,))
    paths = set()
    found = payload.find(LOG_WRITE_HEAD, at)
    while found >= 0:
        path, end = _write_path(payload, found + len(LOG_WRITE_HEAD))
        paths.add(path)
        found = payload.find(LOG_WRITE_HEAD, end)
    return frozenset(paths)
