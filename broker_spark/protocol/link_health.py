"""A peered connection's periodic health check, sans I/O: keep-alive, liveness, stalls.

Every ``TICK_INTERVAL`` the endpoint asks, for each peered connection, what
its timings say; :func:`check_link` answers from the figures it is handed
(the time, when the peer last sent anything, when we last pinged, whether our
send buffer is full and since when) and the connection carries the answer
out. The rules, as Broker's:

- a peer that sent nothing for ``liveness_timeout`` seconds is lost
  (``peer_timeout``), whatever else holds;
- a connection idle for ``ping_interval`` seconds gets a keep-alive ping, at
  most one per interval, so a quiet but healthy peer is never lost;
- a peer that leaves our full send buffer unread for ``stall_timeout`` seconds
  meets the overflow policy: ``disconnect`` closes the connection, the drop
  policies start discarding (newest or oldest) until it reads again.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HEALTHY", "Verdict", "check_link"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one check asks for (the fields are independent but for ``lost``, which ends it)."""

    #: The peer is lost: close the connection with this reason (nothing else applies).
    lost: str | None = None
    #: Send a keep-alive ping now.
    ping: bool = False
    #: The stalled peer is dropped (policy ``disconnect``): close with this reason.
    disconnect: str | None = None
    #: Start dropping messages for the stalled peer; report this reason.
    drop: str | None = None


HEALTHY = Verdict()


def check_link(
    now: float,
    *,
    last_rx: float,
    last_ping: float,
    ping_interval: float,
    liveness_timeout: float,
    paused: bool = False,
    dropping: bool = False,
    queued: int = 0,
    capacity: int = 0,
    paused_at: float = 0.0,
    stall_timeout: float = 0.0,
    policy: str = "disconnect",
) -> Verdict:
    """The verdict on one peered connection at time ``now`` (see the module docstring).

    ``paused`` says the transport stopped taking our writes at ``paused_at``;
    ``queued`` messages wait in a send buffer of ``capacity``; ``dropping``
    says the overflow policy is being applied already.
    """
    idle = now - last_rx
    if idle > liveness_timeout:
        return Verdict(lost=f"no data from the peer for {idle:.1f} s (liveness timeout)")
    ping = idle > ping_interval and now - last_ping > ping_interval
    if not (paused and not dropping and queued >= capacity and now - paused_at > stall_timeout):
        return Verdict(ping=True) if ping else HEALTHY
    stalled = f"the peer read nothing for {now - paused_at:.1f} s with {queued} messages waiting"
    if policy == "disconnect":
        return Verdict(ping=ping, disconnect=f"{stalled} (peer_overflow_policy=disconnect)")
    which = "newest" if policy == "drop_newest" else "oldest"
    return Verdict(
        ping=ping,
        drop=f"{stalled}: dropping the {which} messages until it reads again "
        f"(peer_overflow_policy={policy})",
    )
