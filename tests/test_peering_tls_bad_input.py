"""Bad input on a TLS endpoint: each closes that connection only, with an Error naming why.

The TLS counterparts of the bad-input tests of ``test_peering_wire.py``: a
client that connects and says nothing, one that sends garbage where a TLS
record belongs, and one that starts a TLS handshake and stalls in its middle.
Each time the endpoint closes that socket with an ``Error`` naming the reason,
while its healthy TLS peer keeps being served (checked by ``serving``).
"""

from __future__ import annotations

import ssl

import pytest
from test_peering_support import drained_to_eof, error_of, raw, serving

import broker_spark as broker
from broker_spark import EC
from broker_spark.config import TLSSettings
from broker_spark.protocol.framing import FrameDecoder
from broker_spark.protocol.wire_messages import DropConn, decode_handshake
from broker_spark.tls import make_contexts

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def served():
    """Endpoint A (anonymous TLS, 0.5 s handshake timeout) with a healthy TLS peer B."""
    with serving(ssl=True) as ctx:
        a = ctx[0]
        assert a._tcp().tls is not None
        yield ctx


def client_hello() -> bytes:
    """The first flight of a broker-spark TLS client: what a real peer would send."""
    contexts = make_contexts(TLSSettings())
    assert contexts is not None
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = contexts.client.wrap_bio(incoming, outgoing, server_side=False)
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    hello = outgoing.read()
    assert hello[:1] == b"\x16"  # a TLS handshake record
    return hello


def test_silent_client_times_out(served) -> None:
    a, b, port, sub, errors = served
    with raw(port) as sock:
        err = error_of(errors)
        assert err.code() == EC.PeerTimeout
        assert "no TLS handshake within the handshake timeout" in err.message()
        assert drained_to_eof(sock)


def test_plain_garbage_instead_of_a_tls_record_is_refused(served) -> None:
    a, b, port, sub, errors = served
    with raw(port) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        err = error_of(errors)
        assert err.code() == EC.PeerIncompatible
        assert "plain TCP but this endpoint requires TLS" in err.message()
        # The client is told why, in plain Broker framing, before the close.
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        (body,) = FrameDecoder().feed(received)
        drop = decode_handshake(body)
        assert isinstance(drop, DropConn) and drop.code == EC.PeerIncompatible


def test_bogus_tls_record_fails_the_tls_handshake(served) -> None:
    a, b, port, sub, errors = served
    with raw(port) as sock:
        # A TLS handshake record header, then a body that is no ClientHello.
        sock.sendall(b"\x16\x03\x01\x00\x20" + b"\xee" * 32)
        err = error_of(errors)
        assert isinstance(err, broker.Error)
        assert err.code() == EC.PeerIncompatible
        assert "TLS handshake failed" in err.message()
        assert drained_to_eof(sock)


def test_tls_handshake_stalled_midway_times_out(served) -> None:
    a, b, port, sub, errors = served
    with raw(port) as sock:
        sock.sendall(client_hello())  # then never the client's second flight
        err = error_of(errors)
        assert err.code() == EC.PeerTimeout, err
        assert "TLS handshake not done within the handshake timeout (0.5 s)" in err.message()
        assert drained_to_eof(sock)
