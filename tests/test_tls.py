"""TLS contexts over real loopback sockets, with certificates made by ``cryptography``."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

import pytest

from broker_spark.certs import make_ca, make_node_cert, write_pem
from broker_spark.config import TLSSettings
from broker_spark.tls import TLSConfigError, TLSContexts, looks_like_tls, make_contexts


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> tuple[object, object]:
    """Run one TLS handshake over loopback; return (server result, client result)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    result: dict[str, object] = {}

    def serve() -> None:
        conn, _ = listener.accept()
        conn.settimeout(5)
        try:
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"ok")
                result["server"] = tls.cipher()[0]
        except (ssl.SSLError, OSError) as exc:
            result["server"] = exc
        finally:
            conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            with client_ctx.wrap_socket(raw) as tls:
                result["client"] = tls.recv(2)
        except (ssl.SSLError, OSError) as exc:
            result["client"] = exc
        finally:
            raw.close()
    finally:
        thread.join(5)
        listener.close()
    return result.get("server"), result.get("client")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pki")
    ca = make_ca()
    other_ca = make_ca("another CA")
    node = make_node_cert(ca, "node")
    stranger = make_node_cert(other_ca, "stranger")
    return {
        "ca": write_pem(d / "ca.pem", ca.cert_pem),
        "cert": write_pem(d / "node.pem", node.cert_pem),
        "key": write_pem(d / "node.key", node.key_pem),
        "key_enc": write_pem(d / "node-enc.key", node.key_pem_encrypted("s3cret")),
        "other_ca": write_pem(d / "other-ca.pem", other_ca.cert_pem),
        "stranger_cert": write_pem(d / "stranger.pem", stranger.cert_pem),
        "stranger_key": write_pem(d / "stranger.key", stranger.key_pem),
    }


def _auth(pki: dict[str, Path], **over: str) -> TLSContexts:
    opts = {"certificate": str(pki["cert"]), "key": str(pki["key"]), "cafile": str(pki["ca"])}
    opts.update(over)
    ctx = make_contexts(TLSSettings(**opts))
    assert ctx is not None
    return ctx


def test_disable_ssl_gives_no_context() -> None:
    assert make_contexts(TLSSettings(disable_ssl=True)) is None


def test_anonymous_default_is_encrypted_without_certificates() -> None:
    ctx = make_contexts(TLSSettings())
    assert ctx is not None and not ctx.authenticated
    server, client = _handshake(ctx.server, ctx.client)
    assert client == b"ok"
    if ctx.anonymous_ecdh:
        assert server == "AECDH-AES256-SHA"


def test_mutual_tls_with_a_ca(pki: dict[str, Path]) -> None:
    ctx = _auth(pki)
    assert ctx.authenticated
    server, client = _handshake(ctx.server, ctx.client)
    assert client == b"ok", client
    assert isinstance(server, str)


def test_encrypted_key_with_passphrase(pki: dict[str, Path]) -> None:
    ctx = _auth(pki, key=str(pki["key_enc"]), passphrase="s3cret")
    _, client = _handshake(ctx.server, ctx.client)
    assert client == b"ok"


def test_wrong_passphrase_is_a_clear_error(pki: dict[str, Path]) -> None:
    with pytest.raises(TLSConfigError, match="passphrase"):
        _auth(pki, key=str(pki["key_enc"]), passphrase="wrong")


def test_missing_file_names_the_path(pki: dict[str, Path], tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(TLSConfigError, match="nope.pem"):
        _auth(pki, certificate=str(missing))


def test_wrong_ca_fails_the_handshake(pki: dict[str, Path]) -> None:
    good = _auth(pki)
    stranger = _auth(
        pki,
        certificate=str(pki["stranger_cert"]),
        key=str(pki["stranger_key"]),
        cafile=str(pki["other_ca"]),
    )
    server, client = _handshake(good.server, stranger.client)
    assert isinstance(server, ssl.SSLError) or isinstance(client, (ssl.SSLError, OSError))


def test_authenticated_does_not_peer_with_anonymous(pki: dict[str, Path]) -> None:
    good = _auth(pki)
    anon = make_contexts(TLSSettings())
    assert anon is not None
    server, client = _handshake(good.server, anon.client)
    assert isinstance(server, ssl.SSLError) or isinstance(client, (ssl.SSLError, OSError))
    server, client = _handshake(anon.server, good.client)
    assert isinstance(server, ssl.SSLError) or isinstance(client, (ssl.SSLError, OSError))


def test_tls_records_are_recognised_on_a_plain_connection() -> None:
    assert looks_like_tls(b"\x16\x03\x01\x02\x00")
    assert not looks_like_tls(b"\x00\x00\x00\x17\x06")
