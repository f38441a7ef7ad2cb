"""TLS contexts from the TLS settings (:class:`~broker_spark.config.TLSSettings`), matching
Broker's defaults.

One module, below everything that dials or listens, so every one of them makes its
contexts the same way: the core's peering, the WebSocket API, the relay and the
receiver (``broker-spark node``, ``status``) and Spark's readers of a relay.

Broker encrypts by default. With any certificate option set, both sides present
certificates that verify against the configured CA (mutual TLS, TLS 1.2 or
later, strong ciphers). With none set, Broker uses anonymous ECDH
(``AECDH-AES256-SHA`` over TLS 1.2, curve P-384, no certificates), which keeps
a link encrypted but unauthenticated; we do the same so a default Zeek peers
with us. Where the linked OpenSSL lacks anonymous ECDH, the accepting side
falls back to a fresh self-signed certificate that nobody verifies: still
encrypted, still unauthenticated, but not compatible with a default Zeek.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from dataclasses import dataclass

from broker_spark.config import TLSSettings
from broker_spark.errors import EC, BrokerError

ANON_CIPHER = "AECDH-AES256-SHA@SECLEVEL=0"
ANON_CURVE = "secp384r1"
CERT_SUITES = "ECDHE+AESGCM:ECDHE+CHACHA20:DHE+AESGCM"
STRONG_CIPHERS = CERT_SUITES + ":!aNULL:!eNULL:!MD5:!RC4"


class TLSConfigError(BrokerError):
    """The TLS options cannot be used (missing file, wrong passphrase, bad CA...)."""

    code = EC.CannotOpenFile


@dataclass(frozen=True)
class TLSContexts:
    """The server-side and client-side contexts for one endpoint."""

    server: ssl.SSLContext
    client: ssl.SSLContext
    authenticated: bool
    anonymous_ecdh: bool


def anonymous_ecdh_available() -> bool:
    """Whether the linked OpenSSL can do Broker's anonymous ECDH default."""
    try:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.set_ciphers(ANON_CIPHER)
        return True
    except ssl.SSLError:
        return False


def _anon_context(server: bool) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    if not server:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _self_signed_server_context() -> ssl.SSLContext:
    # Here, not at the top, for start-up time (measured, issue 52): certs loads cryptography's
    # x509, 23 ms of every endpoint's import, and only this rare context needs it.
    from broker_spark.certs import make_node_cert

    pair = make_node_cert(None, "broker-spark anonymous")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(STRONG_CIPHERS)
    # load_cert_chain needs files; keep them only for the duration of the load.
    with tempfile.TemporaryDirectory() as tmp:
        cert = os.path.join(tmp, "cert.pem")
        key = os.path.join(tmp, "key.pem")
        with open(cert, "wb") as f:
            f.write(pair.cert_pem)
        with open(key, "wb") as f:
            f.write(pair.key_pem)
        ctx.load_cert_chain(cert, key)
    return ctx


def _anonymous_contexts() -> TLSContexts:
    client = _anon_context(server=False)
    if anonymous_ecdh_available():
        server = _anon_context(server=True)
        server.set_ciphers(ANON_CIPHER)
        server.set_ecdh_curve(ANON_CURVE)
        # The client offers anonymous ECDH first and certificate-based suites after
        # it, so it also reaches a peer that fell back to a self-signed certificate.
        client.set_ciphers(f"AECDH-AES256-SHA:{CERT_SUITES}@SECLEVEL=0")
        client.set_ecdh_curve(ANON_CURVE)
        return TLSContexts(server, client, authenticated=False, anonymous_ecdh=True)
    server = _self_signed_server_context()
    client.set_ciphers(STRONG_CIPHERS)
    return TLSContexts(server, client, authenticated=False, anonymous_ecdh=False)


def _auth_context(settings: TLSSettings, server: bool) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(STRONG_CIPHERS)
    ctx.verify_mode = ssl.CERT_REQUIRED
    if not server:
        # Broker verifies the peer's chain against the CA, not its host name.
        ctx.check_hostname = False
    if not settings.certificate or not settings.key:
        raise TLSConfigError(
            "mutual TLS needs both openssl_certificate and openssl_key "
            f"(certificate={settings.certificate!r}, key={settings.key!r})"
        )
    if not settings.cafile and not settings.capath:
        raise TLSConfigError("mutual TLS needs openssl_cafile or openssl_capath to verify peers")
    for label, path in (
        ("openssl_certificate", settings.certificate),
        ("openssl_key", settings.key),
        ("openssl_cafile", settings.cafile),
        ("openssl_capath", settings.capath),
    ):
        if path and not os.path.exists(path):
            raise TLSConfigError(f"cannot open TLS file {path} (from {label})")
    try:
        ctx.load_cert_chain(
            settings.certificate, settings.key, password=settings.passphrase or None
        )
    except ssl.SSLError as exc:
        raise TLSConfigError(
            f"cannot load certificate {settings.certificate} with key {settings.key}: "
            f"{exc.reason or exc} (wrong passphrase or mismatched key?)"
        ) from None
    try:
        ctx.load_verify_locations(cafile=settings.cafile or None, capath=settings.capath or None)
    except (FileNotFoundError, ssl.SSLError) as exc:
        raise TLSConfigError(
            f"cannot load CA from cafile={settings.cafile!r} capath={settings.capath!r}: {exc}"
        ) from None
    return ctx


def make_contexts(settings: TLSSettings) -> TLSContexts | None:
    """Contexts for an endpoint's settings; ``None`` when SSL is disabled (plain TCP)."""
    if settings.disable_ssl:
        return None
    if settings.authenticated:
        return TLSContexts(
            _auth_context(settings, server=True),
            _auth_context(settings, server=False),
            authenticated=True,
            anonymous_ecdh=False,
        )
    return _anonymous_contexts()


def looks_like_tls(first_bytes: bytes) -> bool:
    """True when bytes read from a plain connection are a TLS handshake record."""
    return len(first_bytes) >= 3 and first_bytes[0] == 0x16 and first_bytes[1] == 0x03
