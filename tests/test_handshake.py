"""The handshake state machine: recorded sessions, all interleavings, every failure."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recorded import VECTORS

from broker_spark.errors import EC, ProtocolError
from broker_spark.protocol.framing import FrameDecoder, encode_frame, encode_frames
from broker_spark.protocol.handshake import DEFAULT_HANDSHAKE_TIMEOUT, Handshake, HandshakeState
from broker_spark.protocol.wire_messages import (
    DropConn,
    HandshakeMessage,
    Hello,
    OriginatorAck,
    OriginatorSyn,
    Probe,
    ResponderSynAck,
    VersionSelect,
    decode_handshake,
    encode_handshake,
)

S = HandshakeState
SMALL = bytes.fromhex("0d42ef1b361d5ba4a475f534b4b13844")  # ids of the recorded session
LARGE = bytes.fromhex("9679fa7af4b356fa9f995d32671b20c5")


def frame(msg: HandshakeMessage) -> bytes:
    return encode_frame(encode_handshake(msg))


def bodies(frames: list[bytes]) -> list[HandshakeMessage]:
    """Decode the frames a handshake returned."""
    return [decode_handshake(b) for b in FrameDecoder().feed(b"".join(frames))]


def names(frames: list[bytes]) -> list[str]:
    return [type(m).__name__ for m in bodies(frames)]


def sent(hs: Handshake) -> list[bytes]:
    """The frames ``hs`` collected to send since it was last asked, one by one."""
    return [encode_frame(body) for body in FrameDecoder().feed(hs.data_to_send())]


def start(hs: Handshake) -> list[bytes]:
    hs.start()
    return sent(hs)


def receive(hs: Handshake, body: bytes) -> list[bytes]:
    hs.receive(body)
    return sent(hs)


def tick(hs: Handshake, now: float) -> list[bytes]:
    hs.tick(now)
    return sent(hs)


def reject(hs: Handshake) -> list[bytes]:
    hs.reject_redundant()
    return sent(hs)


def feed(hs: Handshake, *msgs: HandshakeMessage) -> list[bytes]:
    out: list[bytes] = []
    for msg in msgs:
        out += receive(hs, encode_handshake(msg))
    return out


# -- the recorded sessions --------------------------------------------------------------


SESSIONS = {
    # name: (connector id, connector filter, acceptor id, acceptor filter)
    "broker-v1-session": (SMALL, (), LARGE, ("/test/pipe",)),
    "broker-v1-types-and-store": (
        bytes.fromhex("3169cf5839ef5d9cb880c909a280dce4"),
        ("/reply",),
        bytes.fromhex("da5de73efaa650a7ac2a16fb92f55afd"),
        ("/types", "kv/<$>/data/master"),
    ),
}


@pytest.mark.parametrize("session", sorted(SESSIONS))
def test_reproduces_recorded_handshake_against_recorded_peer(session: str) -> None:
    """Play each side against the other side's recording; our bytes must match theirs."""
    cid, cfilter, aid, afilter = SESSIONS[session]
    c2s = FrameDecoder().feed((VECTORS / f"{session}.c2s.bin").read_bytes())
    s2c = FrameDecoder().feed((VECTORS / f"{session}.s2c.bin").read_bytes())

    connector = Handshake(cid, cfilter, "connector")
    out = start(connector)
    for body in s2c[:3]:
        assert not connector.done
        out += receive(connector, body)
    assert connector.done and connector.is_originator and connector.version == 1
    assert connector.peer_id == aid and connector.peer_filter == afilter
    assert b"".join(out) == encode_frames(c2s[:4])

    acceptor = Handshake(aid, afilter, "acceptor")
    out = start(acceptor)
    for body in c2s[:4]:
        assert not acceptor.done
        out += receive(acceptor, body)
    assert acceptor.done and acceptor.is_originator is False and acceptor.version == 1
    assert acceptor.peer_id == cid and acceptor.peer_filter == cfilter
    assert b"".join(out) == encode_frames(s2c[:3])


# -- two handshakes against each other, in every order ------------------------------------


class Link:
    """One connection between a connector and an acceptor, FIFO in each direction."""

    def __init__(self, connector: Handshake, acceptor: Handshake) -> None:
        self.sides = {"c": connector, "a": acceptor}
        self.decoders = {"c": FrameDecoder(), "a": FrameDecoder()}
        self.queues: dict[str, list[bytes]] = {"c": [], "a": []}  # frames *to* that side
        self.sent: dict[str, list[bytes]] = {"c": [], "a": []}
        self._emit("c", start(connector))
        self._emit("a", start(acceptor))

    def _emit(self, side: str, frames: list[bytes]) -> None:
        other = "a" if side == "c" else "c"
        self.sent[side] += frames
        self.queues[other] += frames

    def options(self) -> list[str]:
        return [side for side in ("c", "a") if self.queues[side]]

    def step(self, side: str, limit: int | None = None) -> None:
        """Deliver the next frame to ``side``, or only its next ``limit`` bytes."""
        queue = self.queues[side]
        data = queue.pop(0)
        if limit is not None and limit < len(data):
            data, rest = data[:limit], data[limit:]
            queue.insert(0, rest)
        for body in self.decoders[side].feed(data):
            self._emit(side, receive(self.sides[side], body))

    def run(self, choose: Callable[[list[str]], str]) -> Link:
        while opts := self.options():
            self.step(choose(opts))
        return self


def every_interleaving(make: Callable[[], tuple[Handshake, Handshake]]) -> list[Link]:
    """Replay the link for every order in which the two directions can deliver."""
    done: list[Link] = []
    pending: list[list[str]] = [[]]
    while pending:
        prefix = pending.pop()
        link = Link(*make())
        for side in prefix:
            link.step(side)
        opts = link.options()
        if not opts:
            done.append(link)
        pending += [prefix + [side] for side in opts]
    return done


VERSION_CASES = [
    ((1, 1), (1, 1), 1),  # two real Zeeks
    ((1, 2), (1, 2), 2),  # two broker_spark endpoints
    ((1, 2), (1, 1), 1),  # broker_spark dials a real Zeek
    ((1, 1), (1, 2), 1),  # a real Zeek dials broker_spark
    ((2, 3), (1, 2), 2),
    ((1, 5), (3, 4), 4),
]


@pytest.mark.parametrize("connector_smaller", [True, False], ids=["conn-orig", "acc-orig"])
@pytest.mark.parametrize(("cver", "aver", "expected"), VERSION_CASES)
def test_all_interleavings_agree(
    connector_smaller: bool, cver: tuple[int, int], aver: tuple[int, int], expected: int
) -> None:
    cid, aid = (SMALL, LARGE) if connector_smaller else (LARGE, SMALL)

    def make() -> tuple[Handshake, Handshake]:
        return (
            Handshake(cid, ["/c"], "connector", cver),
            Handshake(aid, ["/a", "/b"], "acceptor", aver),
        )

    links = every_interleaving(make)
    # The exchange is lock-step; only the probe may overtake the rest.
    assert len(links) == 2
    rng = random.Random(repr((connector_smaller, cver, aver)))
    for _ in range(20):  # and the same with TCP cutting frames anywhere
        link = Link(*make())
        while opts := link.options():
            link.step(rng.choice(opts), rng.randint(1, 30))
        links.append(link)
    for link in links:
        c, a = link.sides["c"], link.sides["a"]
        assert c.done and a.done, (c, a)
        assert (c.peer_id, a.peer_id) == (aid, cid)
        assert (c.peer_filter, a.peer_filter) == (("/a", "/b"), ("/c",))
        assert c.version == a.version == expected
        assert c.is_originator is connector_smaller and a.is_originator is not connector_smaller
        assert c.deadline is None and a.deadline is None
        if connector_smaller:
            assert names(link.sent["c"]) == [
                "Hello",
                "VersionSelect",
                "OriginatorSyn",
                "OriginatorAck",
            ]
            assert names(link.sent["a"]) == ["Probe", "Hello", "ResponderSynAck"]
        else:
            # The acceptor is the originator and never needs to send a hello.
            assert names(link.sent["c"]) == ["Hello", "ResponderSynAck"]
            assert names(link.sent["a"]) == [
                "Probe",
                "VersionSelect",
                "OriginatorSyn",
                "OriginatorAck",
            ]
        assert bodies(link.sent["c"])[0] == Hello(cid, *cver)


@pytest.mark.parametrize("connector_smaller", [True, False])
@pytest.mark.parametrize(("cver", "aver"), [((1, 1), (2, 2)), ((2, 3), (1, 1)), ((1, 2), (3, 9))])
def test_incompatible_versions_fail_on_both_sides(
    connector_smaller: bool, cver: tuple[int, int], aver: tuple[int, int]
) -> None:
    cid, aid = (SMALL, LARGE) if connector_smaller else (LARGE, SMALL)
    for link in every_interleaving(
        lambda: (Handshake(cid, [], "connector", cver), Handshake(aid, [], "acceptor", aver))
    ):
        c, a = link.sides["c"], link.sides["a"]
        assert c.failed and a.failed
        # The acceptor sees the first hello, so it detects the mismatch and says so.
        assert a.error_code == EC.PeerIncompatible and not a.dropped_by_peer
        assert "version range not supported" in (a.error_message or "")
        assert c.error_code == EC.PeerIncompatible and c.dropped_by_peer
        assert c.peer_id == aid
        drop = bodies(link.sent["a"])[-1]
        assert isinstance(drop, DropConn) and drop.code == 2 and drop.sender == aid


# -- single steps -----------------------------------------------------------------------


def test_start_sends_hello_or_probe() -> None:
    assert start(Handshake(SMALL, [], "connector", (1, 2))) == [frame(Hello(SMALL, 1, 2))]
    assert start(Handshake(SMALL, [], "acceptor")) == [frame(Probe())]


def test_peer_id_known_as_soon_as_hello_arrives() -> None:
    acc = Handshake(LARGE, [], "acceptor")
    start(acc)
    assert acc.peer_id is None and acc.is_originator is None
    assert feed(acc, Hello(SMALL, 1, 2)) == [frame(Hello(LARGE, 1, 1))]
    assert acc.peer_id == SMALL and acc.peer_versions == (1, 2)
    assert acc.is_originator is False and acc.state is S.AWAIT_VERSION_SELECT


def test_connector_responder_learns_peer_from_version_select() -> None:
    con = Handshake(LARGE, ["/x"], "connector")
    start(con)
    assert feed(con, Probe()) == []
    assert feed(con, VersionSelect(SMALL, 1)) == []
    assert con.peer_id == SMALL and con.version == 1 and con.is_originator is False
    assert feed(con, OriginatorSyn(["/y"])) == [frame(ResponderSynAck(("/x",)))]
    assert con.peer_filter == ("/y",) and not con.done
    assert feed(con, OriginatorAck()) == [] and con.done


def test_connector_with_larger_id_does_not_repeat_its_hello() -> None:
    con = Handshake(LARGE, [], "connector")
    start(con)
    assert feed(con, Hello(SMALL, 1, 1)) == []
    assert con.state is S.AWAIT_VERSION_SELECT and con.peer_id == SMALL


def test_originator_selects_highest_common_version() -> None:
    con = Handshake(SMALL, ["/f"], "connector", (1, 3))
    start(con)
    out = feed(con, Hello(LARGE, 2, 2))
    assert bodies(out) == [VersionSelect(SMALL, 2), OriginatorSyn(("/f",))]
    assert con.version == 2 and con.state is S.AWAIT_RESPONDER_SYN_ACK
    assert feed(con, ResponderSynAck(())) == [frame(OriginatorAck())]
    assert con.done and con.peer_filter == ()


@pytest.mark.parametrize("version", [0, 2, 255])
def test_version_select_outside_our_range_is_refused(version: int) -> None:
    con = Handshake(LARGE, [], "connector", (1, 1))
    start(con)
    out = feed(con, VersionSelect(SMALL, version))
    assert con.failed and con.error_code == EC.PeerIncompatible
    (drop,) = bodies(out)
    assert isinstance(drop, DropConn) and drop.code == EC.PeerIncompatible and drop.sender == LARGE


def test_hello_with_inverted_range_is_incompatible() -> None:
    acc = Handshake(LARGE, [], "acceptor", (1, 5))
    start(acc)
    feed(acc, Hello(SMALL, 3, 2))
    assert acc.failed and acc.error_code == EC.PeerIncompatible


@pytest.mark.parametrize("role", ["connector", "acceptor"])
def test_connecting_to_ourselves_is_refused(role: str) -> None:
    hs = Handshake(SMALL, [], role)  # type: ignore[arg-type]
    start(hs)
    out = feed(hs, Hello(SMALL, 1, 1))
    assert hs.failed and hs.error_code == EC.InvalidPeeringRequest
    assert isinstance(bodies(out)[0], DropConn)
    con = Handshake(SMALL, [], "connector")
    start(con)
    feed(con, VersionSelect(SMALL, 1))
    assert con.failed and con.error_code == EC.InvalidPeeringRequest


def test_version_select_from_another_peer_is_refused() -> None:
    acc = Handshake(LARGE, [], "acceptor")
    start(acc)
    feed(acc, Hello(SMALL, 1, 1))
    feed(acc, VersionSelect(bytes(16), 1))
    assert acc.failed and acc.error_code == EC.PeerInvalid


# -- unexpected messages, drop_conn, wrong magic, garbage ---------------------------------


def in_state(state: HandshakeState) -> Handshake:
    """A started handshake waiting in ``state``; its peer is SMALL or LARGE."""
    if state is S.AWAIT_HELLO:
        hs = Handshake(LARGE, [], "acceptor")
        start(hs)
    elif state is S.AWAIT_HELLO_OR_VERSION_SELECT:
        hs = Handshake(LARGE, [], "connector")
        start(hs)
    elif state is S.AWAIT_RESPONDER_SYN_ACK:
        hs = Handshake(SMALL, [], "connector")
        start(hs)
        feed(hs, Hello(LARGE, 1, 1))
    else:
        hs = Handshake(LARGE, [], "acceptor")
        start(hs)
        feed(hs, Hello(SMALL, 1, 1))
        if state is not S.AWAIT_VERSION_SELECT:
            feed(hs, VersionSelect(SMALL, 1))
        if state is S.AWAIT_ORIGINATOR_ACK:
            feed(hs, OriginatorSyn(()))
    assert hs.state is state
    return hs


WAITING = {
    S.AWAIT_HELLO: {"Hello", "Probe"},
    S.AWAIT_HELLO_OR_VERSION_SELECT: {"Hello", "VersionSelect", "Probe"},
    S.AWAIT_VERSION_SELECT: {"VersionSelect", "Probe"},
    S.AWAIT_ORIGINATOR_SYN: {"OriginatorSyn"},
    S.AWAIT_RESPONDER_SYN_ACK: {"ResponderSynAck"},
    S.AWAIT_ORIGINATOR_ACK: {"OriginatorAck"},
}


def peer_messages(hs: Handshake) -> list[HandshakeMessage]:
    peer = SMALL if hs.own_id == LARGE else LARGE
    return [
        Hello(peer, 1, 1),
        Probe(),
        VersionSelect(peer, 1),
        OriginatorSyn(("/p",)),
        ResponderSynAck(("/p",)),
        OriginatorAck(),
    ]


@pytest.mark.parametrize("state", list(WAITING), ids=lambda s: s.value)
def test_every_message_in_every_state(state: HandshakeState) -> None:
    for msg in peer_messages(in_state(state)):
        hs = in_state(state)
        feed(hs, msg)
        if type(msg).__name__ in WAITING[state]:
            assert not hs.failed, (state, msg, hs.error_message)
        else:
            assert hs.failed and hs.error_code == EC.UnexpectedHandshakeMessage, (state, msg)
            assert type(msg).__name__ in (hs.error_message or "")


@pytest.mark.parametrize("state", list(WAITING), ids=lambda s: s.value)
@pytest.mark.parametrize("code", [2, 39, 28, 200])
def test_drop_conn_fails_with_its_code(state: HandshakeState, code: int) -> None:
    hs = in_state(state)
    assert feed(hs, DropConn(SMALL, code, "go away")) == []
    assert hs.failed and hs.dropped_by_peer
    assert hs.error_code == (EC(code) if code in EC._value2member_map_ else EC.Unspecified)
    assert "go away" in (hs.error_message or "")
    assert hs.peer_id is not None
    err = hs.error
    assert isinstance(err, ProtocolError) and err.code == hs.error_code


@pytest.mark.parametrize("state", list(WAITING), ids=lambda s: s.value)
@pytest.mark.parametrize("kind", [6, 7, 8, 9])
def test_wrong_magic_fails(state: HandshakeState, kind: int) -> None:
    hs = in_state(state)
    body = bytes([kind]) + b"KEEZ" + bytes(18)
    assert receive(hs, body) == []
    assert hs.failed and hs.error_code == EC.WrongMagicNumber


@pytest.mark.parametrize("state", list(WAITING), ids=lambda s: s.value)
@pytest.mark.parametrize("body", [b"", b"\x06ZEEK", b"\x0c\x00", b"\x0a\x05\x01", b"\x63garbage"])
def test_malformed_messages_fail(state: HandshakeState, body: bytes) -> None:
    hs = in_state(state)
    assert receive(hs, body) == []
    assert hs.failed and hs.error_code == EC.InvalidMessage


def test_failed_handshake_ignores_input() -> None:
    hs = in_state(S.AWAIT_HELLO)
    hs.receive(b"junk")
    assert hs.failed
    code, message = hs.error_code, hs.error_message
    assert receive(hs, encode_handshake(Hello(SMALL, 1, 1))) == []
    assert tick(hs, 1e9) == []
    assert (hs.error_code, hs.error_message) == (code, message)


def test_misuse_raises_protocol_error() -> None:
    hs = Handshake(SMALL, [], "acceptor")
    with pytest.raises(ProtocolError) as info:
        hs.receive(encode_handshake(Probe()))
    assert info.value.code == EC.InvalidHandshakeState
    start(hs)
    with pytest.raises(ProtocolError):
        start(hs)
    con = Handshake(SMALL, [], "connector")
    start(con)
    feed(con, Hello(LARGE, 1, 1), ResponderSynAck(()))
    assert con.done
    with pytest.raises(ProtocolError):
        con.receive(encode_handshake(OriginatorAck()))
    with pytest.raises(ProtocolError):
        con.reject_redundant()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"own_id": b"short"},
        {"role": "server"},
        {"supported_versions": (0, 1)},
        {"supported_versions": (2, 1)},
        {"supported_versions": (1, 256)},
    ],
)
def test_constructor_validation(kwargs: dict) -> None:
    args = {"own_id": SMALL, "own_filter": [], "role": "connector", **kwargs}
    with pytest.raises(ValueError):
        Handshake(**args)


# -- timeout ---------------------------------------------------------------------------


def test_timeout_fails_a_stalled_handshake() -> None:
    hs = Handshake(SMALL, [], "connector", now=100.0)
    assert hs.deadline == 100.0 + DEFAULT_HANDSHAKE_TIMEOUT
    start(hs)
    assert tick(hs, 105.0) == [] and not hs.failed
    feed(hs, Probe())
    assert tick(hs, 109.999) == [] and not hs.failed
    assert tick(hs, 110.0) == []
    assert hs.failed and hs.error_code == EC.PeerTimeout and hs.deadline is None
    assert "await_hello_or_version_select" in (hs.error_message or "")


def test_custom_timeout_and_no_timeout_after_done() -> None:
    hs = Handshake(SMALL, [], "connector", now=0.0, timeout=0.5)
    start(hs)
    feed(hs, Hello(LARGE, 1, 1), ResponderSynAck(()))
    assert hs.done
    assert tick(hs, 1000.0) == [] and hs.done and hs.deadline is None
    slow = Handshake(SMALL, [], "acceptor", now=0.0, timeout=0.5)
    start(slow)
    tick(slow, 0.5)
    assert slow.failed and slow.error_code == EC.PeerTimeout


# -- redundant connections ------------------------------------------------------------------


def test_is_redundant_consulted_by_originator_only() -> None:
    asked: list[bytes] = []

    def redundant(peer: bytes) -> bool:
        asked.append(peer)
        return True

    responder = Handshake(LARGE, [], "acceptor", is_redundant=redundant)
    start(responder)
    feed(responder, Hello(SMALL, 1, 1))
    assert not responder.failed and asked == []

    originator = Handshake(SMALL, [], "connector", is_redundant=redundant)
    start(originator)
    out = feed(originator, Hello(LARGE, 1, 1))
    assert asked == [LARGE]
    assert bodies(out) == [DropConn(SMALL, 39, "redundant connection")]
    assert originator.failed and originator.error_code == EC.RedundantConnection
    assert not originator.dropped_by_peer and originator.peer_id == LARGE


def test_reject_redundant_by_the_caller() -> None:
    acc = Handshake(LARGE, [], "acceptor")
    start(acc)
    feed(acc, Hello(SMALL, 1, 1))
    out = reject(acc)
    assert bodies(out) == [DropConn(LARGE, EC.RedundantConnection, "redundant connection")]
    assert acc.failed and acc.error_code == EC.RedundantConnection
    with pytest.raises(ProtocolError):
        acc.reject_redundant()
    # The other side sees the drop_conn and knows it was about redundancy.
    con = Handshake(SMALL, [], "connector")
    start(con)
    for body in FrameDecoder().feed(b"".join(out)):
        receive(con, body)
    assert con.failed and con.error_code == EC.RedundantConnection and con.dropped_by_peer


class Registry:
    """What a core does: the first connection to claim a peer wins."""

    def __init__(self) -> None:
        self.owner: dict[bytes, str] = {}

    def checker(self, conn: str) -> Callable[[bytes], bool]:
        def is_redundant(peer: bytes) -> bool:
            return self.owner.setdefault(peer, conn) != conn

        return is_redundant


@pytest.mark.parametrize("seed", range(40))
def test_simultaneous_dial_keeps_exactly_one_connection(seed: int) -> None:
    """X and Y dial each other at once; whatever the timing, one link survives."""
    rng = random.Random(seed)
    x_reg, y_reg = Registry(), Registry()
    links = {
        "xy": Link(  # X dials Y
            Handshake(SMALL, ["/x"], "connector", is_redundant=x_reg.checker("xy")),
            Handshake(LARGE, ["/y"], "acceptor", is_redundant=y_reg.checker("xy")),
        ),
        "yx": Link(  # Y dials X
            Handshake(LARGE, ["/y"], "connector", is_redundant=y_reg.checker("yx")),
            Handshake(SMALL, ["/x"], "acceptor", is_redundant=x_reg.checker("yx")),
        ),
    }
    while choices := [(n, side) for n, link in links.items() for side in link.options()]:
        name, side = rng.choice(choices)
        links[name].step(side)
    survivors = [n for n, link in links.items() if all(h.done for h in link.sides.values())]
    assert len(survivors) == 1
    (loser,) = set(links) - set(survivors)
    x_side, y_side = (
        (links[loser].sides["c"], links[loser].sides["a"])
        if loser == "xy"
        else (links[loser].sides["a"], links[loser].sides["c"])
    )
    assert x_side.failed and x_side.error_code == EC.RedundantConnection
    assert not x_side.dropped_by_peer
    assert y_side.failed and y_side.error_code == EC.RedundantConnection and y_side.dropped_by_peer
    assert x_reg.owner == {LARGE: survivors[0]}


# -- fuzz -------------------------------------------------------------------------------

_VALID = st.sampled_from(
    [
        encode_handshake(m)
        for m in (
            Hello(SMALL, 1, 1),
            Hello(LARGE, 1, 2),
            Hello(LARGE, 3, 4),
            Probe(),
            VersionSelect(SMALL, 1),
            VersionSelect(LARGE, 2),
            DropConn(SMALL, 39, "x"),
            OriginatorSyn(("/a",)),
            ResponderSynAck(()),
            OriginatorAck(),
        )
    ]
)


@given(
    st.sampled_from(["connector", "acceptor"]),
    st.sampled_from([SMALL, LARGE, bytes(16)]),
    st.lists(st.one_of(_VALID, st.binary(max_size=30)), max_size=8),
)
@settings(max_examples=300, deadline=None)
def test_fuzzed_input_never_raises(role: str, own_id: bytes, inputs: list[bytes]) -> None:
    hs = Handshake(own_id, ["/f"], role, (1, 2))  # type: ignore[arg-type]
    start(hs)
    for body in inputs:
        if hs.done:
            break
        for out in receive(hs, body):
            for sent in FrameDecoder().feed(out):
                decode_handshake(sent)  # we only ever send well-formed messages
    assert hs.failed == (hs.error_code is not None)
    if hs.done:
        assert hs.peer_id is not None and hs.version in (1, 2) and hs.peer_filter is not None
