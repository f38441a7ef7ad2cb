"""Seeded delays in the link layer: a fault injector for the peering race tests.

A fake on purpose: :func:`delayed_links` replaces ``PeerConnection.buffer_updated``
so that every chunk of bytes a peer connection receives is handed to the
connection after a random delay (seeded, up to ``max_delay`` seconds), in the
order it arrived. Handshake steps, subscriptions, pings and publications then
reach each endpoint's loop at shifted times, which is what the scheduling of
a loaded machine does now and then, made to happen on every run: a race
between, say, the end of a handshake and a publication fails within a few
runs instead of one in five on a quiet machine.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from broker_spark.core.connection import PeerConnection

__all__ = ["delayed_links"]


@contextmanager
def delayed_links(seed: int, max_delay: float = 0.005) -> Iterator[random.Random]:
    """Within the block, received bytes reach peer connections ``0..max_delay`` s late."""
    rng = random.Random(seed)
    original = PeerConnection.buffer_updated
    pending: dict[int, deque[bytes]] = {}
    due: dict[int, float] = {}

    def buffer_updated(self: PeerConnection, nbytes: int) -> None:
        key = id(self)
        queue = pending.setdefault(key, deque())
        queue.append(self._rview[:nbytes].tobytes())
        loop = self.loop
        # A later chunk never overtakes an earlier one: TCP keeps order, so must we.
        at = max(loop.time() + rng.random() * max_delay, due.get(key, 0.0))
        due[key] = at

        def deliver() -> None:
            data = queue.popleft()
            core = self.peering.core
            core.begin_io()
            try:
                self.data_received(data)
            finally:
                core.end_io()

        loop.call_at(at, deliver)

    PeerConnection.buffer_updated = buffer_updated  # type: ignore[method-assign]
    try:
        yield rng
    finally:
        PeerConnection.buffer_updated = original  # type: ignore[method-assign]
