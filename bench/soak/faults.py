"""Faults the soak injects besides kills: connections cut mid-frame, and hostile clients.

:class:`CuttingProxy` sits between the Spark query and a relay node (a TCP
forwarder on its own loop thread). :meth:`CuttingProxy.cut` ends every
connection through it at an arbitrary byte: the next chunk is forwarded only in
part, then both sides are reset, so a reader sees half a frame and then a dead
socket, as when a network path fails.

:func:`hostile_burst` connects to every listening port what a scanner or a
broken client would: garbage, a frame header announcing 2 GiB, an HTTP request
with an endless header, and idle sockets left open until the next burst. A
relay's reader port (a name starting with ``relay``) gets every malformed,
oversized and out-of-turn frame and msgpack bomb of tests/relay_attacks.py too,
each of which must be answered with an ERROR or a close (:attr:`unanswered`
names those that were not), and a greedy reader held until the next burst.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import struct
import threading
from typing import Any

from relay_attacks import CASES, CLOSED, ERROR, attack, greedy

__all__ = ["CuttingProxy", "HostileClients"]

_CHUNK = 1 << 16


class CuttingProxy:
    """Forwards ``127.0.0.1:port`` to ``upstream``; :meth:`cut` drops every connection."""

    def __init__(self, upstream: tuple[str, int], rng: random.Random) -> None:
        self.upstream = upstream
        self.rng = rng
        self.cuts = 0
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._cutting: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        self.port: int = self._server.sockets[0].getsockname()[1]

    async def _start(self) -> asyncio.base_events.Server:
        return await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:  # the relay is down: the client retries
            _reset(writer)
            return
        pair = (writer, up_writer)
        self._pairs.add(pair)
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer, pair), self._pipe(up_reader, writer, pair)
            )
        finally:
            self._pairs.discard(pair)
            self._cutting.difference_update(pair)
            for w in pair:
                _close(w)

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pair: Any
    ) -> None:
        try:
            while chunk := await reader.read(_CHUNK):
                if writer in self._cutting:  # mid-frame: a part of this chunk, then nothing
                    writer.write(chunk[: self.rng.randrange(len(chunk))])
                    with contextlib.suppress(Exception):
                        await writer.drain()
                    for w in pair:
                        _reset(w)
                    return
                writer.write(chunk)
                await writer.drain()
            # The sender closed its side: pass the close on, as TCP would.
            with contextlib.suppress(Exception):
                writer.write_eof()
        except (ConnectionError, OSError):
            for w in pair:  # one side failed: the other sees the failure too
                _reset(w)

    def cut(self) -> int:
        """Cut every connection at its next chunk; the number of connections cut."""

        def mark() -> int:
            for pair in self._pairs:
                self._cutting.update(pair)
            return len(self._pairs)

        n = asyncio.run_coroutine_threadsafe(_call(mark), self._loop).result(10)
        self.cuts += n
        return n

    def close(self) -> None:
        if self._loop.is_closed():
            return

        def stop() -> None:
            self._server.close()
            for pair in list(self._pairs):
                for w in pair:
                    _reset(w)
            self._loop.stop()

        self._loop.call_soon_threadsafe(stop)
        self._thread.join(10)
        self._loop.close()


async def _call(fn: Any) -> Any:
    return fn()


def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.close()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a reset (SO_LINGER 0), as a failed path looks to the other side."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(Exception):
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()


class HostileClients:
    """Bursts of bad clients at a set of ports; idle ones are held until the next burst."""

    def __init__(self, ports: dict[str, int], rng: random.Random) -> None:
        self.ports = ports
        self.rng = rng
        self.connections = 0
        self.failed_to_connect = 0
        #: relay attack cases that got neither an ERROR nor a close: ``port name: case``
        self.unanswered: list[str] = []
        self._idle: list[socket.socket] = []

    def burst(self, idle: int = 8) -> None:
        self.release()
        for name, port in self.ports.items():
            for payload in (
                os.urandom(self.rng.randrange(1, 4096)),  # garbage
                struct.pack(">I", 0x7FFFFFFF) + b"\x01" * 64,  # a 2 GiB frame announced
                b"GET /" + b"A" * 70000 + b" HTTP/1.1\r\n",  # an endless request line
                b"\x16\x03\x01\x02\x00" + os.urandom(64),  # half a TLS hello
            ):
                self._send(name, port, payload)
            for _ in range(idle):
                try:
                    self._idle.append(socket.create_connection(("127.0.0.1", port), timeout=2))
                    self.connections += 1
                except OSError:
                    self.failed_to_connect += 1
            if name.startswith("relay"):
                self._relay_frames(name, port)

    def _relay_frames(self, name: str, port: int) -> None:
        """The relay protocol's malformed frames, and a greedy reader held open."""
        for case, payload in CASES.items():
            try:
                outcome = attack(port, payload, timeout=2.0)
            except OSError:
                self.failed_to_connect += 1
                continue
            self.connections += 1
            if outcome not in (ERROR, CLOSED):
                self.unanswered.append(f"{name}: {case}")
        try:
            self._idle.append(greedy(port)[0])
            self.connections += 1
        except OSError:
            self.failed_to_connect += 1

    def _send(self, name: str, port: int, payload: bytes) -> None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                self.connections += 1
                with contextlib.suppress(OSError):
                    sock.sendall(payload)
                    sock.settimeout(0.5)
                    sock.recv(4096)
        except OSError:
            self.failed_to_connect += 1

    def release(self) -> None:
        for sock in self._idle:
            sock.close()
        self._idle.clear()
