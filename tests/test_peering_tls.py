"""Peering over TLS: anonymous by default, mutual TLS with a CA, the self-signed fallback,
and the failures."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID
from test_peering_support import LOCAL, make_endpoint, next_matching, wants

import broker_spark as broker
from broker_spark import EC, tls
from broker_spark.certs import make_ca, make_node_cert, write_pem

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("peering-pki")
    ca, other_ca = make_ca(), make_ca("another CA")
    out: dict[str, str] = {
        "ca": str(write_pem(d / "ca.pem", ca.cert_pem)),
        "other_ca": str(write_pem(d / "other_ca.pem", other_ca.cert_pem)),
    }
    for name, issuer in (("a", ca), ("b", ca), ("x", other_ca)):
        pair = make_node_cert(issuer, f"node {name}")
        out[f"{name}_cert"] = str(write_pem(d / f"{name}.pem", pair.cert_pem))
        out[f"{name}_key"] = str(write_pem(d / f"{name}.key", pair.key_pem))
        if name == "b":
            encrypted = pair.key_pem_encrypted("s3cret")
            out["b_key_encrypted"] = str(write_pem(d / "b.enc.key", encrypted))
    return out


def tls_config(cert: str, key: str, cafile: str, passphrase: str = "") -> broker.Configuration:
    config = broker.Configuration(broker.BrokerOptions())
    config.openssl_certificate = cert
    config.openssl_key = key
    config.openssl_cafile = cafile
    config.openssl_passphrase = passphrase
    return config


def exchange(a: broker.Endpoint, b: broker.Endpoint) -> None:
    port = b.listen(LOCAL, 0)
    assert port
    assert a.peer(LOCAL, port, 0)
    sub = b.make_subscriber("/tls")
    assert wants(a, "/tls/x")
    a.publish("/tls/x", "secret")
    assert sub.get(5.0) == ("/tls/x", "secret")
    link = next(iter(a._core.links.values()))
    assert link.conn.transport.get_extra_info("ssl_object") is not None


def is_error(item: object) -> bool:
    return isinstance(item, broker.Error)


def expect_failure(a: broker.Endpoint, b: broker.Endpoint, codes: tuple[EC, ...]) -> None:
    """``a`` dials ``b``: both sides report an Error, and no peering comes up."""
    sa, sb = a.make_status_subscriber(), b.make_status_subscriber()
    port = b.listen(LOCAL, 0)
    assert port
    assert a.peer(LOCAL, port, 0) is False
    ea = next_matching(sa, is_error)
    eb = next_matching(sb, is_error)
    assert ea is not None and eb is not None, (ea, eb)
    assert ea.code() in codes, ea
    assert eb.code() in codes, eb
    assert a._core.links == {} and b._core.links == {}
    return ea, eb


def test_anonymous_tls_by_default() -> None:
    a, b = make_endpoint(ssl=True), make_endpoint(ssl=True)
    try:
        exchange(a, b)
        link = next(iter(a._core.links.values()))
        ssl_obj = link.conn.transport.get_extra_info("ssl_object")
        assert ssl_obj.getpeercert() in (None, {})  # encrypted, not authenticated
    finally:
        a.shutdown()
        b.shutdown()


def test_mutual_tls_with_a_ca(pki: dict[str, str]) -> None:
    a = make_endpoint(config=tls_config(pki["a_cert"], pki["a_key"], pki["ca"]))
    b = make_endpoint(config=tls_config(pki["b_cert"], pki["b_key"], pki["ca"]))
    try:
        exchange(a, b)
        link = next(iter(a._core.links.values()))
        cert = link.conn.transport.get_extra_info("peercert")
        assert ("commonName", "node b") in [x for rdn in cert["subject"] for x in rdn]
    finally:
        a.shutdown()
        b.shutdown()


def test_encrypted_key_with_passphrase(pki: dict[str, str]) -> None:
    a = make_endpoint(config=tls_config(pki["a_cert"], pki["a_key"], pki["ca"]))
    b = make_endpoint(config=tls_config(pki["b_cert"], pki["b_key_encrypted"], pki["ca"], "s3cret"))
    try:
        exchange(a, b)
    finally:
        a.shutdown()
        b.shutdown()


def test_wrong_passphrase_fails_to_listen(pki: dict[str, str]) -> None:
    b = make_endpoint(config=tls_config(pki["b_cert"], pki["b_key_encrypted"], pki["ca"], "wrong"))
    try:
        st = b.make_status_subscriber()
        assert b.listen(LOCAL, 0) == 0
        err = st.get(5.0)
        assert err.code() == EC.CannotOpenFile and "passphrase" in err.message()
    finally:
        b.shutdown()


def test_wrong_ca_fails_on_both_sides(pki: dict[str, str]) -> None:
    a = make_endpoint(config=tls_config(pki["a_cert"], pki["a_key"], pki["ca"]))
    x = make_endpoint(config=tls_config(pki["x_cert"], pki["x_key"], pki["other_ca"]))
    try:
        ea, _ = expect_failure(a, x, (EC.PeerInvalid, EC.PeerIncompatible))
        assert "TLS" in ea.message()
    finally:
        a.shutdown()
        x.shutdown()


def test_authenticated_does_not_peer_with_anonymous(pki: dict[str, str]) -> None:
    a = make_endpoint(config=tls_config(pki["a_cert"], pki["a_key"], pki["ca"]))
    anon = make_endpoint(ssl=True)
    try:
        expect_failure(anon, a, (EC.PeerInvalid, EC.PeerIncompatible))
    finally:
        a.shutdown()
        anon.shutdown()


@pytest.mark.parametrize("dialer_ssl", [True, False])
def test_ssl_against_no_ssl(dialer_ssl: bool) -> None:
    a, b = make_endpoint(ssl=dialer_ssl), make_endpoint(ssl=not dialer_ssl)
    try:
        ea, eb = expect_failure(a, b, (EC.PeerIncompatible,))
        assert "TLS" in ea.message() and "TLS" in eb.message()
        # The accepting side keeps serving correctly configured peers.
        c = make_endpoint(ssl=not dialer_ssl)
        try:
            exchange_plain_or_tls(c, b)
        finally:
            c.shutdown()
    finally:
        a.shutdown()
        b.shutdown()


def exchange_plain_or_tls(a: broker.Endpoint, b: broker.Endpoint) -> None:
    port = b.listen(LOCAL, 0)
    assert a.peer(LOCAL, port, 0)
    sub = b.make_subscriber("/ok")
    assert wants(a, "/ok")
    a.publish("/ok", 1)
    assert sub.get(5.0) == ("/ok", 1)


def test_certificate_files_must_exist(tmp_path: Path) -> None:
    a = make_endpoint(config=tls_config(str(tmp_path / "nope.pem"), "", ""))
    try:
        st = a.make_status_subscriber()
        assert a.peer(LOCAL, 1, 0) is False
        assert st.get(5.0).code() == EC.CannotOpenFile
    finally:
        a.shutdown()


@pytest.mark.parametrize("dialer_fallback", [True, False], ids=["both-fallback", "listener-only"])
def test_self_signed_fallback_without_anonymous_ecdh(
    monkeypatch: pytest.MonkeyPatch, dialer_fallback: bool
) -> None:
    """Fault injection: the availability check is patched to say this OpenSSL lacks
    anonymous ECDH, so the endpoints made under the patch take the fallback: the
    accepting side serves a fresh self-signed certificate nobody verifies."""
    with monkeypatch.context() as patch:
        patch.setattr(tls, "anonymous_ecdh_available", lambda: False)
        b = make_endpoint(ssl=True)
        a = make_endpoint(ssl=True) if dialer_fallback else None
    a = a or make_endpoint(ssl=True)  # made after the patch: the normal anonymous ECDH client
    try:
        assert b._tcp().tls.anonymous_ecdh is False and not b._tcp().tls.authenticated
        assert a._tcp().tls.anonymous_ecdh is (not dialer_fallback)
        exchange(a, b)
        ssl_obj = next(iter(a._core.links.values())).conn.transport.get_extra_info("ssl_object")
        cipher, version, _ = ssl_obj.cipher()
        # A certificate-based suite (ECDHE key exchange), not Broker's AECDH-AES256-SHA.
        assert cipher.startswith("ECDHE-") and "AECDH" not in cipher, cipher
        assert version == "TLSv1.2"
        assert ssl_obj.getpeercert() in (None, {})  # not verified...
        cert = x509.load_der_x509_certificate(ssl_obj.getpeercert(binary_form=True))
        # ...and self-signed, made for this endpoint.
        assert cert.subject == cert.issuer
        cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
        assert cn == "broker-spark anonymous"
    finally:
        a.shutdown()
        b.shutdown()
