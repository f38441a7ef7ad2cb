"""Who a listening port lets in: a bound on connections, a bearer token, refusals counted.

Every port the product opens turns some clients away: a relay reader without
a HELLO, a WebSocket client without the token, a scraper beyond the metrics
server's threads. An operator wants those counted (``broker-spark status
--relay`` and ``/metrics`` show them) and every port bounded, so a scanner
opening thousands of idle sockets costs a refusal each and not the memory of
the process. :class:`Admission` is that bookkeeping for one listener, shared
by the asyncio servers and the threaded metrics server (so it locks).

:func:`authorization_matches` checks an HTTP ``Authorization`` header against
a bearer token, what Prometheus (``authorization: credentials_file``) and
WebSocket clients send; a client that can only put credentials into its URL
(``wss://user:TOKEN@host/...``, which becomes HTTP Basic) is accepted with the
token as its password. The comparison takes the same time wherever the
header differs, so the token cannot be guessed byte by byte.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import threading
import time
from typing import Any

from broker_spark.protocol.address_slots import (
    DEFAULT_PER_ADDRESS,
    PER_ADDRESS,
    TOO_MANY,
    UNIDENTIFIED,
    AddressSlots,
    unidentified_share,
)

__all__ = [
    "DEFAULT_PER_ADDRESS",
    "LISTEN_BACKLOG",
    "PER_ADDRESS",
    "TOO_MANY",
    "UNAUTHORIZED",
    "UNIDENTIFIED",
    "Admission",
    "Slot",
    "authorization_matches",
]

log = logging.getLogger(__name__)

#: The connections the kernel queues on a listening port until the process accepts them
#: (the system caps it at ``net.core.somaxconn``). Every listener asks for this many, not
#: the 5 to 128 the libraries default to: while a busy process has not come round to
#: accepting, a burst (a crowd renewing sockets, every reader reconnecting after a relay
#: restart) then waits in the queue, where a full one drops the next client's SYN, which
#: costs that client a retransmission after 1 s, then 3 s and 7 s. Each queued connection
#: costs the kernel a socket, and admission refuses a crowd's one by one once accepted.
LISTEN_BACKLOG = 1024
#: The reason a client without the right credential is refused with.
UNAUTHORIZED = "unauthorized"


class Admission:
    """One listener's connections and refusals by reason: at most ``limit`` at once,
    ``per_address`` from one address, half the slots (``unidentified``) for connections
    that have not said who they are (the decisions are
    :class:`~broker_spark.protocol.address_slots.AddressSlots`'; this locks around them,
    logs refusals once per address and minute, and is shared by the asyncio servers and
    the threaded metrics server).

    ``enter(address)`` admits a connection (False when refused, counted by reason),
    ``identify()`` marks it identified (HELLO, handshake), ``leave(address, identified)``
    ends it, ``refuse(reason)`` counts a client turned away for another reason.
    """

    def __init__(
        self,
        listener: str,
        limit: int,
        address: str = "",
        *,
        per_address: int = DEFAULT_PER_ADDRESS,
        unidentified: int | None = None,
    ) -> None:
        self.listener = listener
        self.address = address
        self._lock = threading.Lock()
        self._slots = AddressSlots(limit, per_address, unidentified)
        self.said = False

    @property
    def limit(self) -> int:
        return self._slots.limit

    @limit.setter
    def limit(self, value: int) -> None:
        """Tests shrink a bound (the same code path, sooner); the share follows."""
        with self._lock:
            self._slots.limit = value
            self._slots.unidentified = unidentified_share(value)

    @property
    def per_address(self) -> int:
        return self._slots.per_address

    @per_address.setter
    def per_address(self, value: int) -> None:
        """Tests shrink it too (the same code path, sooner)."""
        with self._lock:
            self._slots.per_address = value

    @property
    def connections(self) -> int:
        """Connections admitted and not yet ended."""
        return self._slots.open

    def enter(self, address: str = "") -> bool:
        """Admit one more connection from ``address``; False (counted) when refused."""
        with self._lock:
            reason = self._slots.enter(address)
            if reason is None:
                return True
            loud = self._slots.should_log(address, time.monotonic())
            #: whether the last refusal was logged (a listener that also reports refusals
            #: elsewhere, as statuses, says them as seldom)
            self.said = loud
        if loud:
            log.warning(
                "%s %s: connection refused (%s; %s); said once a minute per address",
                self.listener,
                address or "(local)",
                reason,
                self._why(reason),
            )
        return False

    def _why(self, reason: str) -> str:
        if reason == PER_ADDRESS:
            return f"{self._slots.per_address} connections from this address already"
        if reason == UNIDENTIFIED:
            return f"{self._slots.unidentified} connections have not said who they are yet"
        return f"{self._slots.limit} connections already"

    def take(self, address: str) -> Slot | None:
        """:meth:`enter` as an object to hand along with the connection (None: refused)."""
        return Slot(self, address) if self.enter(address) else None

    def identify(self) -> None:
        """A connection admitted has said who it is (HELLO, handshake)."""
        with self._lock:
            self._slots.identify()

    def leave(self, address: str = "", identified: bool = False) -> None:
        """A connection :meth:`enter` admitted has ended."""
        with self._lock:
            self._slots.leave(address, identified)

    def refuse(self, reason: str) -> None:
        """Count a client turned away for ``reason`` (a short, fixed word)."""
        with self._lock:
            self._slots.refuse(reason)

    def snapshot(self) -> dict[str, Any]:
        """What a status shows of this listener."""
        with self._lock:
            slots = self._slots
            return {
                "listener": self.listener,
                "address": self.address,
                "connections": slots.open,
                "unidentified": slots.strangers,
                "limit": slots.limit,
                "per_address": slots.per_address,
                "refused": dict(slots.refused),
            }


class Slot:
    """One admitted connection's place in an :class:`Admission`, for code that hands the
    connection along (accept, TLS, handshake, close happen in different places):
    :meth:`identify` and :meth:`leave` may be called any number of times."""

    def __init__(self, admission: Admission, address: str) -> None:
        self.admission = admission
        self.address = address
        self.identified = False
        self.left = False

    def identify(self) -> None:
        if not self.identified and not self.left:
            self.identified = True
            self.admission.identify()

    def leave(self) -> None:
        if not self.left:
            self.left = True
            self.admission.leave(self.address, self.identified)


def authorization_matches(header: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``token``: ``Bearer TOKEN``, or
    ``Basic`` with ``TOKEN`` as the password (any user name)."""
    if not header or not token:
        return False
    scheme, _, credential = header.strip().partition(" ")
    credential = credential.strip()
    scheme = scheme.lower()
    if scheme == "basic":
        try:
            decoded = base64.b64decode(credential, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        credential = decoded.partition(":")[2]
    elif scheme != "bearer":
        return False
    return hmac.compare_digest(credential.encode("utf-8"), token.encode("utf-8"))
