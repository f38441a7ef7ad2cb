"""Traces as the live tests feed them to Zeek: read, led by harmless packets, replayed.

A Zeek on the Broker backend sends no log write while it has no peer, and a Zeek
reading a trace with ``-r`` starts on its packets before any peering is up. So the
Broker tests write the trace into Zeek's stdin (``-r -``) in two parts: the pcap
header and ARP requests first (Zeek logs nothing for an ARP request), more ARP
requests until Zeek's script says it has its peers, then the trace itself. Each ARP
request lets Zeek's main loop turn once, which is when it takes in Broker's news of
the peering.

Only what the project's traces are is read: little-endian pcap with microsecond
times.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

TRACES = Path(__file__).resolve().parent / "traces"

_MAGIC = 0xA1B2C3D4
_RECORD = struct.Struct("<IIII")


@dataclass(frozen=True)
class Packet:
    ts_us: int  # capture time, microseconds since the epoch
    data: bytes
    orig_len: int

    def record(self) -> bytes:
        seconds, micros = divmod(self.ts_us, 1_000_000)
        return _RECORD.pack(seconds, micros, len(self.data), self.orig_len) + self.data


@dataclass(frozen=True)
class Trace:
    header: bytes
    packets: tuple[Packet, ...]

    def body(self) -> bytes:
        return b"".join(p.record() for p in self.packets)

    def write(self, path: Path) -> Path:
        path.write_bytes(self.header + self.body())
        return path


def read(path: Path) -> Trace:
    raw = path.read_bytes()
    (magic,) = struct.unpack("<I", raw[:4])
    if magic != _MAGIC:
        raise ValueError(f"{path}: not a little-endian microsecond pcap (magic {magic:#x})")
    packets = []
    at = 24
    while at < len(raw):
        seconds, micros, incl, orig = _RECORD.unpack_from(raw, at)
        at += _RECORD.size
        packets.append(Packet(seconds * 1_000_000 + micros, raw[at : at + incl], orig))
        at += incl
    return Trace(raw[:24], tuple(packets))


def arp_request(ts_us: int, n: int = 0) -> Packet:
    """A broadcast ARP request (Ethernet) at ``ts_us``: Zeek analyses it and logs nothing."""
    mac = b"\x02\x00\x00\x00\x00" + bytes([n % 256])
    frame = b"\xff" * 6 + mac + b"\x08\x06"
    frame += struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + mac + bytes([10, 255, 255, 1])
    frame += b"\x00" * 6 + bytes([10, 255, 255, 2])
    return Packet(ts_us, frame, len(frame))


def replayed(traces: Sequence[Path], copies: int, gap_s: int = 3600) -> Trace:
    """``traces`` one after the other, ``copies`` times over: each starts ``gap_s``
    seconds after the last one ended (longer than Zeek's connection timeouts, so its
    connections are new ones), all moved to the first trace's time."""
    loaded = [read(t) for t in traces]
    out: list[Packet] = []
    at = loaded[0].packets[0].ts_us
    for _ in range(copies):
        for trace in loaded:
            shift = at - trace.packets[0].ts_us
            out.extend(Packet(p.ts_us + shift, p.data, p.orig_len) for p in trace.packets)
            at = out[-1].ts_us + gap_s * 1_000_000
    return Trace(loaded[0].header, tuple(out))


def feed_when_ready(
    stdin: IO[bytes], trace: Trace, ready: Callable[[], bool], timeout: float = 60.0
) -> int:
    """Write ``trace`` into a Zeek's stdin (``zeek -r -``) once ``ready()`` is true.

    First the pcap header and an ARP request a second before the trace's first packet,
    then another (a microsecond later each) every 0.1 s until ``ready()``, then the
    trace; stdin is closed after it. Returns how many ARP requests led the trace.
    """
    first = trace.packets[0].ts_us - 1_000_000
    stdin.write(trace.header)
    deadline = time.monotonic() + timeout
    sent = 0
    while True:
        stdin.write(arp_request(first + sent, sent).record())
        stdin.flush()
        sent += 1
        if ready():
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"not ready after {timeout} s ({sent} ARP requests sent)")
        time.sleep(0.1)
    stdin.write(trace.body())
    stdin.close()
    return sent
