"""The recorded sessions of a real Zeek (``tests/vectors/zeek-*``): what it sent, and its own logs.

Each log recording holds the bytes Zeek sent while reading a trace and logging
remotely (``*.c2s.bin``) and the JSON logs the same Zeek wrote locally in the
same run (``sender/PATH.log``), the oracle for decoding its LogWrites.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from recorded import VECTORS

from broker_spark.data.binary import decode
from broker_spark.protocol.framing import FrameDecoder
from broker_spark.protocol.wire_messages import (
    MSG_DATA,
    MSG_ORIGINATOR_ACK,
    MSG_RESPONDER_SYN_ACK,
    decode_handshake,
    decode_node_message,
)

LOG_RECORDINGS = ("zeek-logs-http-methods", "zeek-logs-dns-edns-ecs")


@dataclass
class Recording:
    """One direction of a recorded Zeek session, taken apart."""

    name: str
    folder: Path
    data: list[tuple[str, bytes]] = field(default_factory=list)  # (topic, payload) of data msgs
    creates: dict[str, Any] = field(default_factory=dict)  # path -> LogCreate content
    writes: dict[str, list[bytes]] = field(default_factory=dict)  # path -> serial_data, in order
    streams: dict[str, str] = field(default_factory=dict)  # path -> stream id

    def local_lines(self, path: str) -> list[str]:
        """The lines Zeek wrote into its own ``PATH.log`` that also went over the wire
        (the last ones: lines written before the peering existed never did)."""
        lines = (self.folder / "sender" / f"{path}.log").read_text().splitlines()
        return lines[len(lines) - len(self.writes[path]) :]


def _envelopes(raw: bytes) -> list[tuple[int, str, bytes]]:
    frames = FrameDecoder().feed(raw)
    out = []
    in_handshake = True
    for body in frames:
        if in_handshake:
            kind = body[0]
            decode_handshake(body)
            in_handshake = kind not in (MSG_ORIGINATOR_ACK, MSG_RESPONDER_SYN_ACK)
            continue
        msg = decode_node_message(body)
        out.append((msg.msg_type, msg.topic, msg.body[msg.payload_offset :]))
    return out


@cache
def recording(name: str) -> Recording:
    folder = VECTORS / name
    (c2s,) = folder.glob("*.c2s.bin")
    rec = Recording(name, folder)
    writes: dict[str, list[bytes]] = defaultdict(list)
    for kind, topic, payload in _envelopes(c2s.read_bytes()):
        if kind != MSG_DATA:
            continue
        rec.data.append((topic, payload))
        value = decode(payload)
        for message in value[2] if value[1] == 5 else [value]:
            content = message[2]
            if message[1] == 2:
                rec.creates[content[2][0]] = content
                rec.streams[content[2][0]] = content[0].name
            elif message[1] == 3:
                serial = content[3]
                writes[content[2]].append(serial.encode() if isinstance(serial, str) else serial)
    rec.writes = dict(writes)
    return rec


ZMQ_LOGS = "zeek-zmq-logs-http-methods"


@cache
def zmq_messages(name: str, file: str = "frames.jsonl") -> list[list[bytes]]:
    """The multipart messages of a ZeroMQ recording (``frames.jsonl`` and the like), in order."""
    import json

    lines = (VECTORS / name / file).read_text().splitlines()
    return [[bytes.fromhex(f) for f in json.loads(line)["frames"]] for line in lines]


def zmq_local_lines(name: str, path: str) -> list[str]:
    """Zeek's own JSON log lines of a ZeroMQ recording (every one went over the wire)."""
    return (VECTORS / name / "sender" / f"{path}.log").read_text().splitlines()
