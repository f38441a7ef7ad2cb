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
import threading
from collections import Counter
from typing import Any

__all__ = ["Admission", "TOO_MANY", "UNAUTHORIZED", "authorization_matches"]

#: The reason a client beyond a listener's bound is refused with.
TOO_MANY = "too-many"
#: The reason a client without the right credential is refused with.
UNAUTHORIZED = "unauthorized"


class Admission:
    """One listener's connections (at most ``limit`` at once) and refusals by reason.

    ``enter()`` admits a connection (False when full; that counts as
    ``too-many``), ``leave()`` ends one, ``refuse(reason)`` counts a client
    turned away for another reason. Thread-safe.
    """

    def __init__(self, listener: str, limit: int, address: str = "") -> None:
        if limit < 1:
            raise ValueError(f"a listener's connection bound must be at least 1, not {limit}")
        self.listener = listener
        self.limit = limit
        self.address = address
        self._lock = threading.Lock()
        self._open = 0
        self._refused: Counter[str] = Counter()

    @property
    def connections(self) -> int:
        """Connections admitted and not yet ended."""
        return self._open

    def enter(self) -> bool:
        """Admit one more connection; False (counted as ``too-many``) when full."""
        with self._lock:
            if self._open >= self.limit:
                self._refused[TOO_MANY] += 1
                return False
            self._open += 1
            return True

    def leave(self) -> None:
        """A connection :meth:`enter` admitted has ended."""
        with self._lock:
            self._open = max(0, self._open - 1)

    def refuse(self, reason: str) -> None:
        """Count a client turned away for ``reason`` (a short, fixed word)."""
        with self._lock:
            self._refused[reason] += 1

    def snapshot(self) -> dict[str, Any]:
        """What a status shows of this listener."""
        with self._lock:
            return {
                "listener": self.listener,
                "address": self.address,
                "connections": self._open,
                "limit": self.limit,
                "refused": dict(self._refused),
            }


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
