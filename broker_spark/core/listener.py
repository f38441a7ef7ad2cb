"""A listening socket of the peering: accept, tell TLS from plain, hand over to a connection.

Why not ``loop.create_server(ssl=...)``: when asyncio's TLS handshake fails on
an accepted socket, no protocol ever exists and the failure only reaches the
loop's log, so the endpoint could not report it. Here each accepted socket is
first *peeked at* (``MSG_PEEK`` leaves the bytes in the kernel): a TLS record
goes to ``connect_accepted_socket(ssl=...)``, whose failure (unknown CA, no
certificate, no shared cipher) we catch and report; plain Broker bytes on a
TLS endpoint get a ``drop_conn(peer_incompatible)`` in plain text, so the
other side learns why too, and an ``Error`` here. A plain endpoint needs no
peek: the connection itself spots a TLS record in its first byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable

from broker_spark.addresses import format_host_port
from broker_spark.admission import LISTEN_BACKLOG, Admission, Slot
from broker_spark.errors import EC
from broker_spark.protocol.handshake import refusal
from broker_spark.status import NetworkInfo
from broker_spark.tls import looks_like_tls

__all__ = ["Listener", "classify_tls_failure"]

#: Connections accepted per readiness callback before yielding to the loop.
ACCEPT_BATCH = 64
#: Inbound connections a listener holds at once (in their handshakes or peered); beyond, a new
#: one is closed at once with an error status, so a flood of idle sockets costs no memory.
MAX_INBOUND = 1024


def _bind(address: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.create_server((address, port), family=family, backlog=LISTEN_BACKLOG)
    sock.setblocking(False)
    return sock


def classify_tls_failure(exc: BaseException, network: NetworkInfo, limit: float) -> tuple[EC, str]:
    """An EC code and a message for a TLS handshake of an accepted socket that failed.

    asyncio ends a TLS handshake that misses ``ssl_handshake_timeout`` with a
    ``ConnectionAbortedError`` (it raises that for nothing else here): a peer
    that stalls is a timeout, not a TLS settings mismatch.
    """
    if isinstance(exc, (ConnectionAbortedError, TimeoutError)):
        return EC.PeerTimeout, (
            f"{network!r}: TLS handshake not done within the handshake timeout ({limit:g} s)"
        )
    reason = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or exc
    code = EC.PeerInvalid if "certificate" in str(reason).lower() else EC.PeerIncompatible
    return code, (
        f"{network!r}: TLS handshake failed: {reason} "
        "(do both endpoints use the same TLS settings?)"
    )


class Listener:
    """One listening socket, accepting peers on the endpoint's loop.

    It knows nothing of its owner (the peering): what it accepted goes to the
    ``accepted`` callback as ``(socket, network, tls, slot)``, failures to
    ``report``. Every accepted connection holds a slot of :attr:`admission`
    (at most ``max_inbound``, ``per_address`` from one address, half of them
    before their handshake) until the owner calls ``slot.leave()``; the owner
    calls ``slot.identify()`` when its handshake is done.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        address: str,
        port: int,
        *,
        node_id: bytes,
        tls: bool,
        handshake_timeout: float,
        accepted: Callable[[socket.socket, NetworkInfo, bool, Slot], None],
        report: Callable[[EC, str], None],
        max_inbound: int | None = None,
        per_address: int | None = None,
    ) -> None:
        self.max_inbound = max_inbound or MAX_INBOUND
        extra = {"per_address": per_address} if per_address else {}
        #: the slots of the connections accepted here, and what was refused
        self.admission = Admission("peering", self.max_inbound, **extra)
        #: Connections closed at once because the slots were taken.
        self.refused = 0
        self.loop = loop
        self.node_id = node_id
        #: Whether this endpoint speaks TLS (then every accepted socket is sniffed first).
        self.tls = tls
        self.handshake_timeout = handshake_timeout
        self._accepted = accepted
        self._report = report
        self.sock = _bind(address, port)
        self.port: int = self.sock.getsockname()[1]
        self.admission.address = format_host_port(address, self.port)
        self._sniffing: dict[int, tuple[socket.socket, asyncio.TimerHandle, Slot]] = {}
        self.loop.add_reader(self.sock.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._report(EC.CannotOpenResource, f"accept failed: {exc}")
                return
            sock.setblocking(False)
            network = NetworkInfo(str(addr[0]), int(addr[1]))
            slot = self.admission.take(network.address)  # logged once a minute per address
            if slot is None:
                sock.close()
                self.refused += 1
                if self.admission.said:  # once per address and minute, as the log
                    self._report(
                        EC.PeerUnavailable,
                        f"{network!r}: refused: inbound connections held already "
                        "(from this address, before their handshake, or in all; said once "
                        "a minute per address, counted in full by the listener)",
                    )
                continue
            if not self.tls:
                self._accepted(sock, network, False, slot)
            else:
                self._sniff(sock, network, slot)

    # -- telling TLS from plain ---------------------------------------------------------

    def _sniff(self, sock: socket.socket, network: NetworkInfo, slot: Slot) -> None:
        fd = sock.fileno()
        timer = self.loop.call_later(self.handshake_timeout, self._sniff_timeout, fd, network)
        self._sniffing[fd] = (sock, timer, slot)
        self.loop.add_reader(fd, self._sniffed, fd, network)

    def _take(self, fd: int, keep: bool = False) -> socket.socket | None:
        """The socket being sniffed on ``fd``, no longer watched; its slot left unless
        ``keep`` (then it goes on, with the slot, to the owner)."""
        entry = self._sniffing.pop(fd, None)
        if entry is None:
            return None
        sock, timer, slot = entry
        timer.cancel()
        self.loop.remove_reader(fd)
        if not keep:
            slot.leave()
        return sock

    def _sniff_timeout(self, fd: int, network: NetworkInfo) -> None:
        sock = self._take(fd)
        if sock is not None:
            sock.close()
            self._report(
                EC.PeerTimeout, f"{network!r}: no TLS handshake within the handshake timeout"
            )

    def _sniffed(self, fd: int, network: NetworkInfo) -> None:
        entry = self._sniffing.get(fd)
        if entry is None:
            return
        try:
            head = entry[0].recv(8, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            head = b""
        slot = entry[2]
        tls = bool(head) and (looks_like_tls(head) or head[:1] == b"\x16")
        sock = self._take(fd, keep=tls)
        if sock is None:
            return
        if not head:
            sock.close()  # connected and left without a word (a port probe)
            return
        if tls:
            self._accepted(sock, network, True, slot)
            return
        self._refuse_plain(sock)
        self._report(
            EC.PeerIncompatible,
            f"{network!r}: the peer speaks plain TCP but this endpoint requires TLS "
            "(disable_ssl differs between the two endpoints)",
        )

    def _refuse_plain(self, sock: socket.socket) -> None:
        """Tell a plain-text peer, in its own language, why it is turned away."""
        refused = refusal(
            self.node_id,
            EC.PeerIncompatible,
            "this endpoint requires TLS (disable_ssl differs between the two endpoints)",
        )
        with contextlib.suppress(OSError):
            while sock.recv(65536):  # drain, so closing sends FIN rather than RST
                pass
        with contextlib.suppress(OSError):
            sock.send(refused)
            sock.shutdown(socket.SHUT_WR)
        sock.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.loop.remove_reader(self.sock.fileno())
        self.sock.close()
        for fd in list(self._sniffing):
            sock = self._take(fd)
            if sock is not None:
                sock.close()
