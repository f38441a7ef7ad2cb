"""The one source opener (broker_spark.source_opener) on real sockets: what each failure
says, and which kind it is (a wrong setting, or nobody there), which is what the Spark
source, the command's clients and a relay node decide on."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from ports import free_port

import broker_spark as broker
from broker_spark.source_opener import (
    SourceError,
    SourceMisconfigured,
    SourceOpener,
    SourceUnreachable,
    open_zeromq_logs,
)
from broker_spark.zeromq.curve import CurveKeys

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def endpoint() -> Iterator[broker.Endpoint]:
    with broker.Endpoint(broker.Configuration(broker.BrokerOptions(disable_ssl=True))) as ep:
        yield ep


def _opener(ep: broker.Endpoint) -> SourceOpener:
    return SourceOpener(ep, ep.make_status_subscriber(False))


def test_a_peer_nobody_listens_for_is_unreachable_with_the_endpoints_reason(
    endpoint: broker.Endpoint,
) -> None:
    port = free_port()
    with pytest.raises(SourceUnreachable) as caught:
        _opener(endpoint).peer("127.0.0.1", port)
    exc = caught.value
    assert (exc.source, exc.target) == ("peer", f"127.0.0.1:{port}")
    # one line naming the address once, the endpoint's error its reason
    assert str(exc).startswith(f"cannot connect to 127.0.0.1:{port}")
    assert str(exc).count("cannot connect") == 1
    assert exc.reason == f"cannot peer: {exc.why}" and exc.why
    assert isinstance(exc, broker.BrokerError)


def test_a_peer_that_listens_is_opened(endpoint: broker.Endpoint) -> None:
    with broker.Endpoint(broker.Configuration(broker.BrokerOptions(disable_ssl=True))) as other:
        port = _opener(other).listen("127.0.0.1", 0)
        assert port > 0
        _opener(endpoint).peer("127.0.0.1", port)
        assert [p.peer.network.port for p in endpoint.peers()] == [port]


def test_listening_on_a_taken_port_says_where(endpoint: broker.Endpoint) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SourceUnreachable) as caught:
            _opener(endpoint).listen("127.0.0.1", port)
    assert str(caught.value).startswith(f"cannot listen on 127.0.0.1:{port}: ")
    assert caught.value.reason.startswith("cannot listen: ")


@pytest.mark.parametrize("call", ["listen", "peer"])
@pytest.mark.parametrize("port", [70000, -1])
def test_a_port_that_is_not_one_is_a_wrong_setting(
    endpoint: broker.Endpoint, call: str, port: int
) -> None:
    with pytest.raises(SourceMisconfigured) as caught:
        getattr(_opener(endpoint), call)("127.0.0.1", port)
    assert f"127.0.0.1:{port}: port must be 0 to 65535" in str(caught.value)


def test_a_websocket_url_that_is_not_one_is_misconfigured(endpoint: broker.Endpoint) -> None:
    with pytest.raises(SourceMisconfigured) as caught:
        _opener(endpoint).websocket("http://user:secret@127.0.0.1:1/v1/messages/json", ["t/"])
    assert "secret" not in str(caught.value) and "secret" not in caught.value.target
    assert caught.value.reason.startswith("cannot connect: ")


def test_a_websocket_server_nobody_runs_is_unreachable(endpoint: broker.Endpoint) -> None:
    url = f"ws://127.0.0.1:{free_port()}/v1/messages/json"
    with pytest.raises(SourceUnreachable) as caught:
        _opener(endpoint).websocket(url, ["t/"])
    assert str(caught.value).startswith(f"cannot connect to {url}")


def test_a_zeromq_proxy_nobody_runs_is_unreachable_and_a_bad_address_misconfigured(
    endpoint: broker.Endpoint,
) -> None:
    nobody = f"tcp://127.0.0.1:{free_port()}"
    with pytest.raises(SourceUnreachable) as caught:
        _opener(endpoint).zeromq_proxy(nobody, nobody, timeout=0.5)
    assert "no ZeroMQ proxy answered" in caught.value.why
    assert str(caught.value).startswith(f"cannot join the ZeroMQ proxy at {nobody},{nobody}: ")
    with pytest.raises(SourceMisconfigured, match="nonsense"):
        _opener(endpoint).zeromq_proxy("nonsense", "nonsense")
    with pytest.raises(SourceMisconfigured) as caught:  # a key that does not fit
        _opener(endpoint).zeromq_proxy(nobody, nobody, curve=CurveKeys(server_publickey="x" * 40))
    assert str(caught.value).startswith(f"zeromq.proxy {nobody},{nobody}: CURVE: ")


def test_the_zeromq_logs_socket_binds_or_says_why() -> None:
    receiver = open_zeromq_logs("tcp://127.0.0.1:0")
    try:
        assert receiver.endpoint.startswith("tcp://127.0.0.1:")
        with pytest.raises(SourceError) as caught:  # the same address again
            open_zeromq_logs(receiver.endpoint)
        assert caught.value.source == "zeromq.logs"
        assert caught.value.target == receiver.endpoint
        assert receiver.endpoint in str(caught.value)
    finally:
        receiver.close()


def test_curve_keys_that_start_with_an_at_sign_are_keys(tmp_path) -> None:
    """Z85 has '@': a public key starting with it is a key, and so is a secret key of a key's
    length that names no file; ``@FILE`` still reads a secret key from FILE."""
    from broker_spark.node.sources import curve_keys
    from broker_spark.zeromq.curve import generate_keypair

    def pair_where(field: str) -> dict[str, str]:
        while True:  # about one pair in 85
            pair = generate_keypair()
            if pair[field].startswith("@"):
                return pair

    pair = pair_where("public")
    secret_file = tmp_path / "secret"
    secret_file.write_text(pair["secret"])
    keys = curve_keys({"server_publickey": pair["public"], "server_secretkey": f"@{secret_file}"})
    assert (keys.server_publickey, keys.server_secretkey) == (pair["public"], pair["secret"])
    pair = pair_where("secret")
    keys = curve_keys({"server_publickey": pair["public"], "server_secretkey": pair["secret"]})
    assert keys.server_secretkey == pair["secret"]
