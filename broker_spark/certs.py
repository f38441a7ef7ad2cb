"""Certificates for Broker's TLS options, made with ``cryptography``.

Used by the ``broker-spark certs`` command, by the tests (real mutual TLS with a
CA of their own), and by the anonymous-TLS fallback that needs a throwaway
self-signed certificate where the linked OpenSSL lacks anonymous ECDH.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM-encoded."""

    cert_pem: bytes
    key_pem: bytes
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    def key_pem_encrypted(self, passphrase: str) -> bytes:
        """The private key encrypted with ``passphrase`` (for ``openssl_passphrase``)."""
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(passphrase.encode()),
        )


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "broker-spark"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _pair(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> KeyPair:
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), key_pem, key, cert)


def _validity(days: int) -> tuple[_dt.datetime, _dt.datetime]:
    now = _dt.datetime.now(_dt.timezone.utc)
    return now - _dt.timedelta(minutes=5), now + _dt.timedelta(days=days)


def make_ca(common_name: str = "broker-spark CA", days: int = 3650) -> KeyPair:
    """A self-signed certificate authority."""
    key = ec.generate_private_key(ec.SECP384R1())
    start, end = _validity(days)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA384())
    )
    return _pair(cert, key)


def make_node_cert(
    ca: KeyPair | None,
    common_name: str = "broker-spark node",
    hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
    days: int = 825,
) -> KeyPair:
    """A certificate for a node, usable as TLS server and client; self-signed when ``ca`` is None."""
    key = ec.generate_private_key(ec.SECP384R1())
    start, end = _validity(days)
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    issuer = ca.cert.subject if ca else _name(common_name)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca.key if ca else key, hashes.SHA384())
    return _pair(cert, key)


def write_pem(path: str | Path, data: bytes) -> Path:
    """Write PEM bytes; private keys are readable by the owner only."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if b"PRIVATE KEY" in data:
        # Created owner-only, never readable by others even for a moment (a key rewritten
        # with --force gets its mode set again before its new bytes go in).
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    else:
        p.write_bytes(data)
    return p
