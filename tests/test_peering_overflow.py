"""``peer_overflow_policy``: what an endpoint does with a peer that stops reading.

The stuck peer is a raw socket that completes Broker's version 1 handshake
(the scripted Zeek of ``test_peering_wire``), subscribes to ``/flood`` and
then never reads: nothing is injected into the endpoint, the peer just leaves
the endpoint's writes in the kernel. Both socket buffers are made small and
the transport's high-water mark lowered so the endpoint's own buffers fill
after a few thousand small messages, and the stall timeout and tick are cut
to fractions of a second so each test takes well under a second of waiting.

Every policy must keep memory bounded (at most ``peer_buffer_size`` queued
messages plus what the transport holds up to its high-water mark) and
report the stall with the documented ``Error(peer_timeout)``.
"""

from __future__ import annotations

import socket
import threading

import pytest
from test_peering_support import LOCAL, make_endpoint, next_matching, wait_for, wants
from test_peering_wire import HIGH_ID, ZeekPeer

import broker_spark as broker
from broker_spark import EC, SC
from broker_spark.core import connection, peering
from broker_spark.data.binary import decode
from broker_spark.protocol.wire_messages import MSG_DATA

pytestmark = pytest.mark.timeout(30)

CAPACITY = 64  # peer_buffer_size
HIGH_WATER = 8 * 1024  # the transport's buffer limit in these tests
MESSAGES = 4000
TOPIC = "/flood/x"


@pytest.fixture
def fast_stall(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connection, "WRITE_HIGH_WATER", HIGH_WATER)
    monkeypatch.setattr(peering, "TICK_INTERVAL", 0.05)


class StuckPeer:
    """The endpoint, a raw peer that stopped reading, and a thread publishing to it."""

    def __init__(self, policy: str) -> None:
        self.ep = make_endpoint(
            peer_buffer_size=CAPACITY, peer_overflow_policy=policy, publisher_buffer_size=64
        )
        tcp = self.ep._tcp()
        tcp.stall_timeout = 0.2
        self.status = self.ep.make_status_subscriber(True)
        port = self.ep.listen(LOCAL, 0)
        sock = socket.socket()
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((LOCAL, port))
            self.zeek = ZeekPeer(sock, HIGH_ID)
            self.zeek.handshake(self.ep._core.node_id, "connector", ("/flood",))
            assert wants(self.ep, TOPIC)
            (self.conn,) = list(tcp.conns)
            self.conn.transport.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_SNDBUF, 4096
            )
        except BaseException:
            sock.close()
            self.ep.shutdown()
            raise
        self.published = threading.Event()
        self.peak_queued = 0
        self.peak_transport = 0
        self.thread = threading.Thread(target=self._publish, daemon=True)
        self.thread.start()

    def _publish(self) -> None:
        try:
            for i in range(MESSAGES):
                self.ep.publish(TOPIC, i)
        except broker.BrokerError:
            return  # shut down under us
        self.published.set()

    def sample(self) -> None:
        """Record how much the connection holds right now (read from the test thread)."""
        self.peak_queued = max(self.peak_queued, self.conn.writer.queued)
        if not self.conn.lost:
            self.peak_transport = max(
                self.peak_transport, self.conn.transport.get_write_buffer_size()
            )

    def sampled_until(self, predicate, timeout: float = 10.0) -> bool:
        def check() -> bool:
            self.sample()
            return predicate()

        return wait_for(check, timeout)

    def assert_bounded(self) -> None:
        assert self.peak_queued <= CAPACITY
        # A write that crosses the high-water mark carries at most one flush: CAPACITY frames.
        assert self.peak_transport <= HIGH_WATER + CAPACITY * 64

    def settled(self) -> int:
        """The drop count once every publication went through the core to the connection."""
        src = self.ep._publish_src
        assert wait_for(lambda: not src.items)
        # The pump that took the last ones finishes before this runs on the loop.
        return self.ep._loop.run_sync(lambda: self.conn.dropped)

    def read_values(self, count: int) -> list[int]:
        """Read ``count`` data messages (the peer starts reading again)."""
        values = []
        while len(values) < count:
            msg = self.zeek.recv_node()
            if msg.msg_type == MSG_DATA:
                values.append(decode(msg.payload_bytes))
        return values

    def close(self) -> None:
        self.ep.shutdown()
        self.thread.join(5.0)
        self.zeek.sock.close()


@pytest.fixture
def stuck(request: pytest.FixtureRequest, fast_stall: None):
    made = StuckPeer(request.param)
    yield made
    made.close()


@pytest.mark.parametrize("stuck", ["disconnect"], indirect=True)
def test_disconnect_drops_the_stuck_peer(stuck: StuckPeer) -> None:
    # Back-pressure first: the buffers fill and the publisher blocks.
    assert stuck.sampled_until(lambda: stuck.conn.writer.queued >= CAPACITY)
    assert not stuck.published.is_set()
    err = next_matching(stuck.status, lambda s: isinstance(s, broker.Error))
    assert err.code() == EC.PeerTimeout
    assert "peer_overflow_policy=disconnect" in err.message()
    assert next_matching(stuck.status, lambda s: s.code() == SC.PeerLost) is not None
    # With the peer gone, nothing holds the publisher back any more.
    assert stuck.published.wait(10.0)
    stuck.assert_bounded()
    assert stuck.zeek.closed()


@pytest.mark.parametrize("stuck", ["drop_newest"], indirect=True)
def test_drop_newest_keeps_the_oldest_and_counts_the_rest(stuck: StuckPeer) -> None:
    assert stuck.sampled_until(stuck.published.is_set)
    err = next_matching(stuck.status, lambda s: isinstance(s, broker.Error))
    assert err.code() == EC.PeerTimeout and "peer_overflow_policy=drop_newest" in err.message()
    stuck.assert_bounded()
    assert stuck.ep.peers(), "the peer stays peered"
    dropped = stuck.settled()
    assert 0 < dropped < MESSAGES
    # Every message was either dropped or is delivered once, in order: the oldest ones.
    values = stuck.read_values(MESSAGES - dropped)
    assert values == list(range(MESSAGES - dropped))


@pytest.mark.parametrize("stuck", ["drop_oldest"], indirect=True)
def test_drop_oldest_keeps_the_newest_and_counts_the_rest(stuck: StuckPeer) -> None:
    assert stuck.sampled_until(stuck.published.is_set)
    err = next_matching(stuck.status, lambda s: isinstance(s, broker.Error))
    assert err.code() == EC.PeerTimeout and "peer_overflow_policy=drop_oldest" in err.message()
    stuck.assert_bounded()
    assert stuck.ep.peers(), "the peer stays peered"
    dropped = stuck.settled()
    assert 0 < dropped < MESSAGES
    values = stuck.read_values(MESSAGES - dropped)
    # In order, nothing twice, and the newest message survived the drops.
    assert values == sorted(set(values))
    assert values[-1] == MESSAGES - 1
    assert len(values) + dropped == MESSAGES
