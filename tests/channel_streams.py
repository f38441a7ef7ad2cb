"""What the channel tests share: rebuilding a consumer's view from its deliveries."""

from __future__ import annotations

from typing import Any

from broker_spark.protocol.channel import Gap, Synced

GAP = object()


def reconstruct(items: list[Any]) -> list[Any]:
    """Apply a consumer's delivery stream to a list, checking it is well formed.

    Snapshots in these tests are the tuple of everything produced before the
    handshake, so a snapshot must be exactly ``first_seq - 1`` long.
    """
    state: list[Any] | None = None
    for item in items:
        if isinstance(item, Synced):
            assert len(item.snapshot) == item.first_seq - 1
            state = list(item.snapshot)
        else:
            assert state is not None, "delivery before the first handshake"
            assert item.seq == len(state) + 1, f"out of order: {item} after {len(state)}"
            state.append(GAP if isinstance(item, Gap) else item.content)
    return state or []
