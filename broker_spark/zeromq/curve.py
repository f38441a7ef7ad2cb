"""CURVE encryption as Zeek's ZeroMQ cluster backend configures it (Zeek 8.2 and later).

Zeek reads four Z85 keys (40 characters each, as ``generate_keypair()`` and
``zmq_curve_keypair`` make them) from its script options
``Cluster::Backend::ZeroMQ::curve_{server,client}_{publickey,secretkey}`` or from
the environment variables ``ZEEK_CLUSTER_BACKEND_ZEROMQ_CURVE_{SERVER,CLIENT}_{PUBLIC,SECRET}KEY``,
and refuses a mix of both (zeek/zeek ``src/cluster/backend/zeromq/ZeroMQ.cc``,
``load_curve_config``). Every node shares one client key pair:

* a **server** (the proxy's XPUB/XSUB, a logger's PULL) needs the server secret
  key and the client public key, the only client its ZAP handler lets in;
* a **client** (a node's XPUB, XSUB and PUSH) needs the server public key and the
  client key pair.

:class:`CurveKeys` holds the four keys with the same names and rules, checks them
(a key that is not Z85, or a public key that does not belong to its secret key, is
named at start rather than failing every handshake later), and configures pyzmq
sockets. :class:`ZapHandler` answers ZeroMQ's authentication requests (ZAP, RFC 27)
as Zeek's does.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields

import zmq
from zmq.utils import z85

from broker_spark.errors import EC, BrokerError

__all__ = [
    "ENV_PREFIX",
    "ZAP_ENDPOINT",
    "CurveConfigError",
    "CurveKeys",
    "ZapHandler",
    "generate_keypair",
]

#: The environment variables Zeek reads: this prefix and ``SERVER_PUBLICKEY`` and so on.
ENV_PREFIX = "ZEEK_CLUSTER_BACKEND_ZEROMQ_CURVE_"
#: Where libzmq sends a CURVE server's authentication requests (fixed by RFC 27).
ZAP_ENDPOINT = "inproc://zeromq.zap.01"


class CurveConfigError(BrokerError, ValueError):
    """The CURVE keys are incomplete, malformed, or do not belong together."""

    code = EC.InvalidData


def generate_keypair() -> dict[str, str]:
    """A new key pair in Z85, as Zeek's ``Cluster::Backend::ZeroMQ::generate_keypair()``:
    ``{"public": ..., "secret": ...}``."""
    public, secret = zmq.curve_keypair()
    return {"public": public.decode("ascii"), "secret": secret.decode("ascii")}


def _raw_key(name: str, text: str) -> bytes:
    if len(text) != 40:
        raise CurveConfigError(f"{name}: a Z85 key has 40 characters, this one {len(text)}")
    try:
        raw = z85.decode(text)
    except (ValueError, KeyError, TypeError):
        raise CurveConfigError(f"{name}: not a Z85 key") from None
    return raw


@dataclass(frozen=True)
class CurveKeys:
    """The four keys, named as Zeek names them (empty: not set)."""

    server_publickey: str = ""
    server_secretkey: str = ""
    client_publickey: str = ""
    client_secretkey: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> CurveKeys:
        """The keys Zeek's environment variables hold."""
        env = os.environ if environ is None else environ
        return cls(**{f.name: env.get(ENV_PREFIX + _env_suffix(f.name), "") for f in fields(cls)})

    @classmethod
    def resolve(
        cls, given: CurveKeys | None, environ: Mapping[str, str] | None = None
    ) -> CurveKeys:
        """The keys in force: ``given`` (options) or the environment, never a mix of both,
        as Zeek refuses script options and environment variables at the same time."""
        env = cls.from_env(environ)
        given = given or cls()
        if given.any and env.any:
            raise CurveConfigError(
                f"CURVE keys are given both as options and in {ENV_PREFIX}* environment "
                "variables; use one or the other (as Zeek requires)"
            )
        keys = env if env.any else given
        keys.check()
        return keys

    @property
    def any(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    @property
    def client_enabled(self) -> bool:
        """Enough for a client (Zeek's ``IsClientEnabled``)."""
        return bool(self.server_publickey and self.client_secretkey and self.client_publickey)

    @property
    def server_enabled(self) -> bool:
        """Enough for a server (Zeek's ``IsServerEnabled``)."""
        return bool(self.server_secretkey and self.client_publickey)

    def check(self) -> None:
        """Every key set is Z85, and each secret key matches its public key when both are set."""
        for f in fields(self):
            value = getattr(self, f.name)
            if value:
                _raw_key(f.name, value)
        for role in ("server", "client"):
            public = getattr(self, f"{role}_publickey")
            secret = getattr(self, f"{role}_secretkey")
            if public and secret and zmq.curve_public(secret.encode()).decode() != public:
                raise CurveConfigError(
                    f"{role}_publickey is not the public key of {role}_secretkey"
                )

    def require_server(self) -> None:
        if not self.server_enabled:
            raise CurveConfigError(
                "a CURVE server needs server_secretkey and client_publickey (the clients' "
                "shared key, the only one let in, as Zeek's logger and proxy do)"
            )

    def require_client(self) -> None:
        if not self.client_enabled:
            raise CurveConfigError(
                "a CURVE client needs server_publickey, client_publickey and client_secretkey"
            )

    def configure_client(self, sock: zmq.Socket) -> None:
        sock.curve_serverkey = self.server_publickey.encode("ascii")
        sock.curve_secretkey = self.client_secretkey.encode("ascii")
        sock.curve_publickey = self.client_publickey.encode("ascii")

    def configure_server(self, sock: zmq.Socket) -> None:
        sock.curve_server = True
        sock.curve_secretkey = self.server_secretkey.encode("ascii")

    def __repr__(self) -> str:  # never print secret keys
        shown = {
            f.name: ("***" if "secret" in f.name else getattr(self, f.name))
            if getattr(self, f.name)
            else ""
            for f in fields(self)
        }
        return f"CurveKeys({shown})"


def _env_suffix(name: str) -> str:
    role, key = name.split("_", 1)
    return f"{role.upper()}_{key.upper()}"


class ZapHandler:
    """Answers a CURVE server's ZAP requests: only the configured client public key is let in.

    Bound in the server socket's context (one handler per context), polled by the
    thread that owns the server socket (:meth:`socket`, then :meth:`handle` when
    readable). ``refused(address, key)`` hears of every client turned away, with
    its Z85 public key, so the owner can say who knocked.
    """

    def __init__(
        self,
        context: zmq.Context,
        allowed_publickey: str,
        refused: Callable[[str, str], None] | None = None,
    ) -> None:
        self.allowed = _raw_key("client_publickey", allowed_publickey)
        self.refused = refused
        self.socket = context.socket(zmq.REP)
        self.socket.linger = 0
        self.socket.bind(ZAP_ENDPOINT)

    def allow(self, publickey: str) -> None:
        """Let in this client public key from now on, instead of the one before."""
        self.allowed = _raw_key("client_publickey", publickey)

    def handle(self) -> None:
        """Answer every request waiting (non-blocking)."""
        while True:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            request_id = frames[1] if len(frames) > 1 else b""
            ok = (
                len(frames) >= 7
                and frames[0] == b"1.0"
                and frames[5] == b"CURVE"
                and frames[6] == self.allowed
            )
            if not ok and self.refused is not None:
                address = frames[3].decode("utf-8", "replace") if len(frames) > 3 else "?"
                key = z85.encode(frames[6]).decode() if len(frames) >= 7 else "?"
                self.refused(address, key)
            status = (b"200", b"OK", b"0") if ok else (b"400", b"client key not allowed", b"")
            self.socket.send_multipart([b"1.0", request_id, *status, b""])

    def close(self) -> None:
        self.socket.close(0)
