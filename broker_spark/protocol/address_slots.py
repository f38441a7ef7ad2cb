"""Who gets a listener's next slot: per-address caps, a bounded share for strangers.

A listener with one global bound can be filled by one host: 300 idle sockets
from one address, renewed faster than the HELLO timeout, and every reader of
the site is refused. Kafka (``max.connections.per.ip``) and nginx
(``limit_conn``) bound connections per source; this does the same, and keeps
*unidentified* connections (TLS not finished, no HELLO or handshake yet) to a
bounded share of the slots, so a crowd from many addresses cannot take the
places of readers that said who they are. An identified connection is never
evicted: it keeps its place until it leaves.

It is sans-I/O: the listeners (asyncio servers, a threaded HTTP server) feed it
addresses and, for the log throttle, the time; it answers, counts and decides
nothing else. Not thread-safe by itself
(:class:`~broker_spark.admission.Admission` locks around it).
"""

from __future__ import annotations

from collections import Counter

__all__ = [
    "DEFAULT_PER_ADDRESS",
    "LOG_EVERY",
    "PER_ADDRESS",
    "TOO_MANY",
    "UNIDENTIFIED",
    "AddressSlots",
    "unidentified_share",
]

#: Connections one address holds at once on a listener, by default. A Spark executor host
#: runs a task per core, each with its own connection (and a retried one may overlap its
#: predecessor): 64 fits a 32-core executor with room, and is a quarter of the relay's 256.
DEFAULT_PER_ADDRESS = 64
#: Seconds between two log lines about refusals from one address.
LOG_EVERY = 60.0

#: Refused because the listener holds its bound.
TOO_MANY = "too-many"
#: Refused because this address holds its per-address cap.
PER_ADDRESS = "per-address"
#: Refused because unidentified connections hold their share of the slots.
UNIDENTIFIED = "unidentified"

#: Addresses remembered for the log throttle before the stale ones are forgotten.
_LOG_MEMORY = 4096


def unidentified_share(limit: int) -> int:
    """The part of ``limit`` unidentified connections may hold: half, at least one."""
    return max(1, limit // 2)


class AddressSlots:
    """A listener's slots: at most ``limit`` connections, ``per_address`` from one address,
    ``unidentified`` (default: half the limit) not identified yet.

    :meth:`enter` admits a new (unidentified) connection or names why not;
    :meth:`identify` marks it identified (HELLO said, handshake done), which
    frees its unidentified place; :meth:`leave` ends it. Refusals are counted
    by reason; :meth:`should_log` tells whether a refusal from an address is
    worth a log line (once per address per :data:`LOG_EVERY` seconds).
    """

    def __init__(self, limit: int, per_address: int, unidentified: int | None = None) -> None:
        if limit < 1:
            raise ValueError(f"a listener's connection bound must be at least 1, not {limit}")
        if per_address < 1:
            raise ValueError(f"connections per address must be at least 1, not {per_address}")
        self.limit = limit
        self.per_address = per_address
        self.unidentified = unidentified_share(limit) if unidentified is None else unidentified
        if self.unidentified < 1:
            raise ValueError("unidentified connections need at least one slot")
        self.open = 0
        self.strangers = 0  # connections not identified yet
        self.by_address: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self._logged: dict[str, float] = {}

    def enter(self, address: str) -> str | None:
        """Admit a new connection from ``address`` (unidentified); None, or the reason it
        is refused (counted)."""
        reason = None
        if self.open >= self.limit:
            reason = TOO_MANY
        elif self.by_address[address] >= self.per_address:
            reason = PER_ADDRESS
        elif self.strangers >= self.unidentified:
            reason = UNIDENTIFIED
        if reason is not None:
            self.refused[reason] += 1
            return reason
        self.open += 1
        self.strangers += 1
        self.by_address[address] += 1
        return None

    def identify(self) -> None:
        """A connection :meth:`enter` admitted said who it is: it no longer counts against
        the unidentified share."""
        self.strangers = max(0, self.strangers - 1)

    def leave(self, address: str, identified: bool) -> None:
        """A connection :meth:`enter` admitted has ended."""
        self.open = max(0, self.open - 1)
        if not identified:
            self.strangers = max(0, self.strangers - 1)
        self.by_address[address] -= 1
        if self.by_address[address] <= 0:
            del self.by_address[address]

    def refuse(self, reason: str) -> None:
        """Count a client turned away for another ``reason`` (a short, fixed word)."""
        self.refused[reason] += 1

    def should_log(self, address: str, now: float) -> bool:
        """Whether a refusal from ``address`` at ``now`` (seconds, any monotonic clock)
        gets a log line: the first one, then one per :data:`LOG_EVERY` seconds."""
        last = self._logged.get(address)
        if last is not None and now - last < LOG_EVERY:
            return False
        if len(self._logged) >= _LOG_MEMORY:
            self._logged = {a: t for a, t in self._logged.items() if now - t < LOG_EVERY}
            if len(self._logged) >= _LOG_MEMORY:  # that many addresses this minute: enough said
                return False
        self._logged[address] = now
        return True
