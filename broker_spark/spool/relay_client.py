"""A blocking client of the spool protocol: readers, ``broker-spark status`` and ``receiver stop``.

One socket (a Unix socket to a receiver, TCP or TLS to a relay) and one
:class:`~broker_spark.spool.relay_reader_session.RelayClientSession`, used from one thread
at a time. Every wait is bounded; a connection that breaks or answers what
is not the protocol raises :class:`SpoolClientError` naming the spool's
owner, and the caller decides whether to connect again.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from broker_spark.errors import EC, BrokerError
from broker_spark.spool.relay_protocol import RelayProtocolError
from broker_spark.spool.relay_reader_session import (
    Records,
    RelayClientSession,
    Rows,
    ServerMessage,
)
from broker_spark.spool.served_records import served

__all__ = ["RelayError", "SpoolClient", "SpoolClientError", "served_topics"]

_READ_SIZE = 1 << 18


class SpoolClientError(BrokerError):
    """The spool's owner cannot be reached, hung up, or does not speak the protocol."""

    code = EC.PeerUnavailable


class RelayError(BrokerError):
    """The owner refused a request: ``code`` is its word for why (``data_loss``, ...)."""

    code = EC.InvalidData

    def __init__(self, where: str, fields: dict[str, Any]) -> None:
        self.relay_code = str(fields.get("code", "error"))
        self.fields = fields
        super().__init__(f"{where}: {fields.get('message', self.relay_code)}")


class SpoolClient:
    """A connection to a spool's owner. ``where`` names it in errors."""

    def __init__(self, sock: socket.socket, where: str, *, credit: int | None = None) -> None:
        self.sock = sock
        self.where = where
        self.session = RelayClientSession() if credit is None else RelayClientSession(credit)
        self.welcome: dict[str, Any] = {}
        self._pending: deque[Records | Rows | ServerMessage] = deque()

    # --- connecting -------------------------------------------------------------------------

    @classmethod
    def unix(cls, path: str, where: str, timeout: float = 10.0) -> SpoolClient:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(path)
        except OSError as exc:
            sock.close()
            raise SpoolClientError(f"cannot reach {where}: {exc}") from None
        return cls(sock, where)

    @classmethod
    def tcp(
        cls,
        host: str,
        port: int,
        tls: ssl.SSLContext | None,
        timeout: float = 10.0,
        credit: int | None = None,
    ) -> SpoolClient:
        where = f"relay {host}:{port}" if ":" not in host else f"relay [{host}]:{port}"
        try:
            raw = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise SpoolClientError(f"cannot reach {where}: {exc}") from None
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock = tls.wrap_socket(raw, server_hostname=None) if tls is not None else raw
        except (OSError, ssl.SSLError) as exc:
            raw.close()
            raise SpoolClientError(f"cannot reach {where}: TLS failed: {exc}") from None
        return cls(sock, where, credit=credit)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> SpoolClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- talking ----------------------------------------------------------------------------

    def send(self, frame: bytes) -> None:
        try:
            self.sock.sendall(frame)
        except OSError as exc:
            raise SpoolClientError(f"{self.where}: connection lost: {exc}") from None

    def hello(self, role: str, name: str = "", timeout: float = 10.0, **fields: Any) -> dict:
        """Say who we are; the owner's WELCOME (raises :class:`RelayError` on a refusal)."""
        self.send(self.session.hello(role, name, **fields))
        self.welcome = self._expect("welcome", timeout)
        return self.welcome

    def request(self, op: str, timeout: float = 10.0, **fields: Any) -> dict[str, Any]:
        """Ask the owner; its REPLY (raises :class:`RelayError` on an ERROR)."""
        self.send(self.session.request(op, **fields))
        return self._expect("reply", timeout)

    def _expect(self, kind: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for i, item in enumerate(self._pending):
                if isinstance(item, ServerMessage) and item.kind in (kind, "error"):
                    del self._pending[i]  # a deque's middle: answers come first or early
                    if item.kind == "error":
                        raise RelayError(self.where, item.fields)
                    return item.fields
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SpoolClientError(f"{self.where}: no answer within {timeout:g} s")
            self._read(remaining)

    def _read(self, timeout: float | None) -> bool:
        """Read what arrives within ``timeout`` into the pending frames; False on a timeout."""
        try:
            self.sock.settimeout(timeout)
            data = self.sock.recv(_READ_SIZE)
        except TimeoutError:
            return False
        except OSError as exc:
            raise SpoolClientError(f"{self.where}: connection lost: {exc}") from None
        if not data:
            raise SpoolClientError(f"{self.where}: the connection was closed")
        try:
            self._pending.extend(self.session.receive(data))
        except RelayProtocolError as exc:
            raise SpoolClientError(f"{self.where}: {exc}") from None
        return True

    # --- following --------------------------------------------------------------------------

    def follow(self, start: int, until: int | None = None, schemas: str | None = None) -> None:
        self.send(self.session.follow(start, until, schemas))

    def fetch(self, start: int, end: int, timeout: float) -> bytes:
        """The record stream of offsets ``[start, end)`` (raises :class:`RelayError`, code
        ``data_loss``, when the owner no longer holds them all)."""
        return self.fetch_counted(start, end, timeout)[0]

    def fetch_counted(self, start: int, end: int, timeout: float) -> tuple[bytes, int]:
        """:meth:`fetch`, and how many records the stream holds: ``end - start``, or fewer
        for a reader the relay limits to some topics (it leaves out the others' records)."""
        parts = self.fetch_range(start, end, timeout)
        return b"".join(p.data for p in parts), sum(p.count for p in parts)

    def fetch_range(
        self, start: int, end: int, timeout: float, schemas: str | None = None
    ) -> list[Records | Rows]:
        """What the owner sends for offsets ``[start, end)``: records, or, for a reader whose
        converter the owner built and whose ``schemas`` digest matches its own, the rows it
        decoded (:class:`Rows`). Raises :class:`RelayError` on the owner's ERROR."""
        return list(self.parts(start, end, timeout, schemas))

    def parts(
        self, start: int, end: int, timeout: float, schemas: str | None = None
    ) -> Iterator[Records | Rows]:
        """:meth:`fetch_range`, each frame as it arrives (``timeout`` for the whole range), so
        that rows the owner decoded are used while it decodes the next."""
        if end <= start:
            return
        self.follow(start, end, schemas)
        deadline = time.monotonic() + timeout
        while self.session.next is not None and self.session.next < end:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SpoolClientError(
                    f"{self.where}: offsets {start} to {end - 1} not received within {timeout:g} s"
                )
            for item in self.messages(remaining):
                if isinstance(item, Records | Rows):
                    self.took(len(item.data))
                    yield item
                elif item.kind == "error":
                    raise RelayError(self.where, item.fields)

    def messages(self, timeout: float) -> Iterator[Records | Rows | ServerMessage]:
        """What arrives (records, heartbeats, errors), waiting up to ``timeout`` for any."""
        if not self._pending:
            self._read(timeout)
        while self._pending:
            yield self._pending.popleft()

    def took(self, nbytes: int) -> None:
        frame = self.session.took(nbytes)
        if frame is not None:
            self.send(frame)


def served_topics(
    welcome: dict[str, Any], topics: tuple[str, ...] | None, data: bytes, count: int
) -> tuple[bytes, int]:
    """``data`` (``count`` records) as served for a reader of ``topics``: a relay that
    serves readers their topics says so in its WELCOME; from one that does not (an
    older relay), the records of other topics are left out here."""
    return served(welcome, topics, None, data, count)
