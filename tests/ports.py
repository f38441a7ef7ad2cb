"""Ports reserved now for a server that binds them later (a restarted relay, a PULL socket).

Picked below the kernel's ephemeral range: a port from ``bind(0)`` is one the
kernel hands out again to any process's next outgoing or port-0 socket, so in
the time between choosing it and binding it a JVM's result server could take
it, and a ZeroMQ PUSH already dialling it (ZeroMQ redials until its peer is
there) would then send its greeting into that JVM's socket. Below the range
only an explicit bind takes a port.

A port is handed out once per process: two ports chosen before either is bound
(a relay's PULL and its reader port) must not be the same one.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_port"]

_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port nobody listens on, outside the ephemeral range when it is known."""
    try:
        low = int(_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    if low > 1024 + 2000:
        for _ in range(200):
            port = random.randrange(max(1024, low - 12000), low)
            if port in _HANDED_OUT:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _HANDED_OUT.add(port)
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    _HANDED_OUT.add(port)
    return port
