"""The peering decisions, sans I/O: dials and redials, unpeer, duplicate races, v2 routes.

:class:`~broker_spark.protocol.peering.PeeringMachine` is driven here with plain
events and times, no socket and no loop. The race tests wire two machines to
real :class:`~broker_spark.protocol.handshake.Handshake` objects over an
in-memory network whose delivery order Hypothesis chooses.
"""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker_spark.errors import EC, SC
from broker_spark.protocol.framing import FrameDecoder
from broker_spark.protocol.handshake import Handshake
from broker_spark.protocol.peering import (
    Abort,
    CancelDial,
    CancelTimer,
    Dial,
    Listen,
    PeeringMachine,
    RemoveLink,
    Report,
    Resolve,
    StartTimer,
    advertised_filter,
)
from broker_spark.status import NetworkInfo

pytestmark = pytest.mark.timeout(120)

KEY = ("10.0.0.2", 9999)
PEER = bytes(range(16))
NET = NetworkInfo(*KEY)


def kinds(actions: list) -> list[type]:
    return [type(a) for a in actions]


def only(actions: list, kind: type) -> list:
    return [a for a in actions if isinstance(a, kind)]


# -- dialling and retrying ----------------------------------------------------------------


def test_peer_dials_once_and_a_second_call_waits_for_the_same_dial() -> None:
    m = PeeringMachine()
    answer, actions = m.peer(*KEY, retry=5.0)
    assert answer is None and actions == [Dial(KEY)]
    answer, actions = m.peer(*KEY, retry=5.0)
    assert answer is None and actions == []  # already dialling


def test_a_failed_dial_is_reported_fails_the_call_and_retries_after_retry_seconds() -> None:
    m = PeeringMachine()
    m.peer(*KEY, retry=2.5)
    actions = m.dial_failed(KEY, EC.PeerUnavailable, "refused")
    assert kinds(actions) == [Report, Resolve, StartTimer]
    report, resolve, timer = actions
    assert report.code is EC.PeerUnavailable and report.network == NET
    assert resolve == Resolve(KEY, False)
    assert timer.delay == 2.5 and timer.timer.kind == "retry"
    assert m.timer_fired(timer.timer) == [Dial(KEY)]


def test_retry_zero_tries_once_and_forgets_the_address() -> None:
    m = PeeringMachine()
    m.peer(*KEY, retry=0)
    actions = m.dial_failed(KEY, EC.PeerUnavailable, "refused")
    assert kinds(actions) == [Report, Resolve]
    assert m.targets_view() == []


def test_a_broken_tls_setup_fails_every_listen_and_dial_with_its_reason() -> None:
    m = PeeringMachine(tls_error="no such key file")
    (report,) = m.listen("127.0.0.1", 0)
    assert report.code is EC.CannotOpenFile and "no such key file" in report.message
    _, actions = m.peer(*KEY, retry=0)
    assert kinds(actions) == [Report, Resolve]
    assert PeeringMachine().listen("127.0.0.1", 0) == [Listen("127.0.0.1", 0)]


@settings(max_examples=60)
@given(
    retry=st.floats(min_value=0.01, max_value=60, allow_nan=False),
    failures=st.integers(min_value=1, max_value=12),
)
def test_every_failure_gives_one_report_and_one_redial_exactly_retry_seconds_later(
    retry: float, failures: int
) -> None:
    """As Broker: a retrying peering to an absent node reports once per retry interval."""
    m = PeeringMachine()
    _, actions = m.peer(*KEY, retry=retry)
    assert actions == [Dial(KEY)]
    for _ in range(failures):
        actions = m.dial_failed(KEY, EC.PeerUnavailable, "refused")
        assert len(only(actions, Report)) == 1
        (start,) = only(actions, StartTimer)
        assert start.delay == retry
        assert m.timer_fired(start.timer) == [Dial(KEY)]
    (view,) = m.targets_view()
    assert view.connecting


def test_a_connection_that_fails_before_its_dial_returns_is_still_redialled() -> None:
    """A peer may drop the connection before the dial has returned: the redial that
    could not start while the dial ran starts when it returns."""
    m = PeeringMachine()
    m.peer(*KEY, retry=1.0)
    m.connection_up("c1", KEY)
    actions = m.connection_failed("c1", EC.PeerInvalid, "dropped", PEER, NET, linked=False)
    assert kinds(actions) == [Report, Resolve]
    m.connection_lost("c1")
    (start,) = m.dial_done(KEY)
    assert isinstance(start, StartTimer) and start.delay == 1.0


def test_a_stale_timer_is_ignored() -> None:
    m = PeeringMachine()
    m.peer(*KEY, retry=1.0)
    (start,) = only(m.dial_failed(KEY, EC.PeerUnavailable, "x"), StartTimer)
    _, actions = m.peer(*KEY, retry=1.0)  # a new call dials at once, cancelling the timer
    assert CancelTimer(start.timer) in actions and Dial(KEY) in actions
    assert m.timer_fired(start.timer) == []


# -- links, unpeer, close -----------------------------------------------------------------


def up(m: PeeringMachine, conn: str = "c1", **kw) -> list:
    m.connection_up(conn, KEY)
    m.dial_done(KEY)
    return m.link_up(conn, PEER, NET, **kw)


def test_a_link_resolves_the_call_and_later_calls_answer_at_once() -> None:
    m = PeeringMachine()
    m.peer(*KEY, retry=1.0)
    assert up(m) == [Resolve(KEY, True)]
    assert m.peer(*KEY, retry=1.0) == (True, [])


def test_a_lost_link_is_redialled_after_retry() -> None:
    m = PeeringMachine()
    m.peer(*KEY, retry=3.0)
    up(m)
    (start,) = m.link_closed("c1", PEER, NET)
    assert isinstance(start, StartTimer) and start.delay == 3.0
    m.connection_lost("c1")
    assert m.timer_fired(start.timer) == [Dial(KEY)]


def test_unpeer_stops_dialling_and_says_goodbye_to_a_linked_peer() -> None:
    m = PeeringMachine()
    m.peer(*KEY, retry=1.0)
    found, actions = m.unpeer(*KEY)
    assert found and actions == [CancelDial(KEY), Resolve(KEY, False)]
    m.peer(*KEY, retry=1.0)
    up(m)
    found, actions = m.unpeer(*KEY)
    assert found and actions == [Resolve(KEY, False), RemoveLink(PEER, SC.PeerRemoved)]
    assert m.link_closed("c1", PEER, NET) == []  # no redial after unpeer


def test_unpeer_of_a_connection_in_its_handshake_aborts_it() -> None:
    m = PeeringMachine()
    m.peer(*KEY, retry=1.0)
    m.connection_up("c1", KEY)
    _, actions = m.unpeer(*KEY)
    assert Abort("c1") in actions


def test_unpeer_finds_a_peer_that_dialled_us_by_its_address_and_reports_strangers() -> None:
    m = PeeringMachine()
    inbound = NetworkInfo("10.0.0.9", 40000)
    m.connection_up("in", None)
    m.link_up("in", PEER, inbound)
    assert m.unpeer("10.0.0.9", 40000) == (True, [RemoveLink(PEER, SC.PeerRemoved)])
    found, (report,) = m.unpeer("10.0.0.7", 1)
    assert not found and report.code is EC.PeerInvalid


def test_close_fails_every_wait_and_ends_dials_and_connections() -> None:
    m = PeeringMachine()
    m.peer(*KEY, retry=1.0)
    m.connection_up("in", None)
    actions = m.close()
    assert CancelDial(KEY) in actions and Resolve(KEY, False) in actions
    assert Abort("in") in actions
    assert m.peer(*KEY, retry=1.0) == (False, [])
    assert m.connection_up("late", None) == [Abort("late")]


def test_a_link_that_comes_up_after_close_changes_nothing() -> None:
    """Found by the rule-based test below: a version 2 handshake that finished after close
    started a wait for the neighbour's routes, a timer on a machine that was shut."""
    m = PeeringMachine()
    m.peer(*KEY, retry=0.0)
    m.connection_up("c1", KEY)
    m.close()
    assert m.link_up("c1", PEER, NET, routes_known=False) == []
    assert m.link_up("c1", PEER, NET, routes_known=True) == []


def test_a_handshake_failure_is_the_attempt_failing_and_later_failures_are_reports() -> None:
    m = PeeringMachine()
    m.peer(*KEY, retry=1.0)
    m.connection_up("c1", KEY)
    m.dial_done(KEY)
    actions = m.connection_failed("c1", EC.PeerIncompatible, "bad", PEER, NET, linked=False)
    assert kinds(actions) == [Report, Resolve, StartTimer]
    assert actions[0].message == f"{NET!r}: bad"
    m.connection_up("in", None)
    (report,) = m.connection_failed("in", EC.PeerTimeout, "silent", PEER, NET, linked=True)
    assert report.code is EC.PeerTimeout


# -- version 2: waiting for the neighbour's routes --------------------------------------------


def test_v2_peer_waits_for_routes_and_returns_when_they_arrive() -> None:
    m = PeeringMachine(routes_timeout=5.0)
    m.peer(*KEY, retry=1.0)
    (start,) = up(m, routes_known=False)
    assert start.delay == 5.0 and m.awaiting_routes() == {PEER}
    assert m.routes_arrived(PEER) == [CancelTimer(start.timer), Resolve(KEY, True)]
    assert m.awaiting_routes() == set()


def test_v2_peer_returns_true_when_the_routes_timeout_passes() -> None:
    m = PeeringMachine()
    m.peer(*KEY, retry=1.0)
    (start,) = up(m, routes_known=False)
    assert m.timer_fired(start.timer) == [Resolve(KEY, True)]


def test_v2_link_closing_before_its_routes_fails_the_attempt_and_redials() -> None:
    m = PeeringMachine()
    m.peer(*KEY, retry=1.0)
    up(m, routes_known=False)
    actions = m.link_closed("c1", PEER, NET)
    assert kinds(actions) == [CancelTimer, Report, Resolve, StartTimer]
    assert actions[1].code is EC.PeerDisconnectDuringHandshake
    assert actions[2] == Resolve(KEY, False)


# -- the duplicate-connection race ----------------------------------------------------------


def test_claims_first_live_connection_wins() -> None:
    m = PeeringMachine()
    m.connection_up("a", None)
    m.connection_up("b", None)
    assert m.claim(PEER, "a")
    assert not m.claim(PEER, "b")
    m.connection_closing("a")
    assert m.claim(PEER, "b")  # a closing connection holds no claim


def test_redundant_call_succeeds_when_the_kept_link_is_up_or_checks_later() -> None:
    m = PeeringMachine(handshake_timeout=10.0)
    m.peer(*KEY, retry=1.0)
    m.connection_up("mine", KEY)
    (start,) = m.redundant("mine", PEER)
    assert start.delay == 10.0 and start.timer.kind == "check"
    m.connection_up("kept", None)
    m.link_up("kept", PEER, NetworkInfo("10.0.0.2", 40000))
    # link_up resolved it already (same peer id); a late check finds the link up anyway
    assert m.timer_fired(start.timer) == []


def test_redundant_without_a_kept_link_redials_after_the_check() -> None:
    m = PeeringMachine(handshake_timeout=10.0)
    m.peer(*KEY, retry=1.0)
    m.connection_up("mine", KEY)
    m.dial_done(KEY)
    (start,) = m.redundant("mine", PEER)
    m.connection_lost("mine")
    assert m.timer_fired(start.timer) == [Dial(KEY)]


class SimConn:
    """One end of an in-memory connection between two simulated endpoints."""

    def __init__(self, node: SimNode, role: str, key: tuple[str, int] | None) -> None:
        self.node = node
        self.role = role
        self.key = key
        self.other: SimConn | None = None
        self.inbox: deque[bytes] = deque()
        self.hs: Handshake | None = None
        self.closed = False
        self.eof = False  # the other end closed
        self.linked = False

    def __repr__(self) -> str:
        return f"SimConn({self.node.name}, {self.role})"


class SimNode:
    def __init__(self, name: str, node_id: bytes, addr: tuple[str, int], net: SimNet) -> None:
        self.name = name
        self.node_id = node_id
        self.addr = addr
        self.net = net
        self.machine = PeeringMachine(handshake_timeout=10.0)
        self.resolved: list[tuple[tuple[str, int], bool]] = []
        self.reports: list[Report] = []

    def apply(self, actions: list) -> None:
        for a in actions:
            if isinstance(a, Resolve):
                self.resolved.append((a.key, a.ok))
            elif isinstance(a, Report):
                self.reports.append(a)
            elif isinstance(a, StartTimer):
                self.net.timers[(self, a.timer)] = self.net.now + a.delay
            elif isinstance(a, CancelTimer):
                self.net.timers.pop((self, a.timer), None)
            elif isinstance(a, Dial):
                self.net.dial(self, a.key)
            elif isinstance(a, Abort):
                self.net.close(a.conn)
            elif isinstance(a, CancelDial):
                pass  # dials connect at once here
            else:
                raise AssertionError(f"unexpected {a!r}")

    def linked_conns(self) -> list[SimConn]:
        return [c for c, _net in self.machine.links.values()]


class SimNet:
    """Endpoints whose connections deliver frames in an order chosen by the test."""

    def __init__(self) -> None:
        self.now = 0.0
        self.nodes: dict[tuple[str, int], SimNode] = {}
        self.conns: list[SimConn] = []
        self.timers: dict[tuple[SimNode, object], float] = {}

    def add(self, name: str, node_id: bytes, addr: tuple[str, int]) -> SimNode:
        node = self.nodes[addr] = SimNode(name, node_id, addr, self)
        return node

    def dial(self, node: SimNode, key: tuple[str, int]) -> None:
        there = self.nodes[key]
        mine, theirs = SimConn(node, "connector", key), SimConn(there, "acceptor", None)
        mine.other, theirs.other = theirs, mine
        for c in (mine, theirs):
            self.conns.append(c)
            n = c.node
            n.apply(n.machine.connection_up(c, c.key))
            c.hs = Handshake(
                n.node_id,
                (),
                c.role,  # type: ignore[arg-type]
                (1, 2),
                self.now,
                is_redundant=lambda pid, c=c: not c.node.machine.claim(pid, c),
            )
            c.hs.start()
            self.send(c, c.hs.data_to_send())
        node.apply(node.machine.dial_done(key))

    def send(self, conn: SimConn, data: bytes) -> None:
        assert conn.other is not None
        for body in FrameDecoder().feed(data):  # frame by frame, without the length prefix
            conn.other.inbox.append(body)

    def deliver(self, conn: SimConn) -> None:
        """The next event at ``conn``: a frame, or the other end's close once all arrived."""
        node = conn.node
        hs = conn.hs
        assert hs is not None
        if not conn.inbox:  # the other end closed, and everything it sent is read
            if not hs.done and not hs.failed:
                node.apply(
                    node.machine.connection_failed(
                        conn,
                        EC.PeerDisconnectDuringHandshake,
                        "closed",
                        hs.peer_id,
                        NET,
                        linked=False,
                    )
                )
            self.close(conn)
            return
        body = conn.inbox.popleft()
        if hs.done or hs.failed:
            return
        hs.receive(body)
        self.send(conn, hs.data_to_send())
        if hs.failed:
            if hs.error_code is EC.RedundantConnection:
                node.apply(node.machine.redundant(conn, hs.peer_id))
            else:
                node.apply(
                    node.machine.connection_failed(
                        conn, hs.error_code, hs.error_message or "", hs.peer_id, NET, linked=False
                    )
                )
            self.close(conn)
        elif hs.done:
            assert hs.peer_id is not None and conn.other is not None
            if hs.peer_id in node.machine.links:  # the core refuses a second link
                node.apply(node.machine.redundant(conn, hs.peer_id))
                self.close(conn)
                return
            conn.linked = True
            node.apply(node.machine.link_up(conn, hs.peer_id, NetworkInfo(*conn.other.node.addr)))

    def close(self, conn: SimConn) -> None:
        """Close ``conn``'s end (after what it sent, the other end sees the close)."""
        if conn.closed:
            return
        conn.closed = True
        conn.inbox.clear()
        m = conn.node.machine
        m.connection_closing(conn)
        if conn.linked and conn.hs is not None and conn.hs.peer_id is not None:
            conn.node.apply(m.link_closed(conn, conn.hs.peer_id, NET))
        m.connection_lost(conn)
        if conn.other is not None:
            conn.other.eof = True

    def busy(self) -> list[SimConn]:
        return [c for c in self.conns if not c.closed and (c.inbox or c.eof)]

    def fire_next_timer(self) -> bool:
        if not self.timers:
            return False
        (node, timer), due = min(self.timers.items(), key=lambda item: item[1])
        del self.timers[(node, timer)]
        self.now = max(self.now, due)
        node.apply(node.machine.timer_fired(timer))  # type: ignore[arg-type]
        return True


A_ID, B_ID = b"\x01" * 16, b"\x02" * 16
A_ADDR, B_ADDR = ("10.0.0.1", 1000), ("10.0.0.2", 2000)


@settings(max_examples=150)
@given(order=st.lists(st.integers(min_value=0, max_value=7), max_size=80))
def test_both_sides_dialling_at_once_end_with_one_link_and_both_calls_true(
    order: list[int],
) -> None:
    """Whatever order the frames of the two connections arrive in, one connection survives
    on both sides (the same one), the other ends as redundant without any error status,
    and each side's ``peer()`` returns True."""
    net = SimNet()
    a = net.add("a", A_ID, A_ADDR)
    b = net.add("b", B_ID, B_ADDR)
    for node, other in ((a, B_ADDR), (b, A_ADDR)):
        answer, actions = node.machine.peer(*other, retry=1.0)
        assert answer is None
        node.apply(actions)
    picks = iter(order)
    steps = 0
    while steps < 500:
        steps += 1
        busy = net.busy()
        if busy:
            net.deliver(busy[next(picks, 0) % len(busy)])
        elif (
            all(n.machine.links for n in (a, b))
            and not any(timer.kind == "check" for _n, timer in net.timers)
            or not net.fire_next_timer()
        ):
            break
    (kept_a,) = a.linked_conns()
    (kept_b,) = b.linked_conns()
    assert kept_a.other is kept_b  # both sides kept the same connection
    assert len(net.conns) == 4  # two connections, two ends each
    assert all(c.closed for c in net.conns if c not in (kept_a, kept_b))  # the loser ended
    assert (B_ADDR, True) in a.resolved and (A_ADDR, True) in b.resolved
    assert (B_ADDR, False) not in a.resolved and (A_ADDR, False) not in b.resolved
    assert a.reports == [] and b.reports == []


# -- any sequence of events ------------------------------------------------------------------


class PeeringRules(RuleBasedStateMachine):
    """Random events against one machine; invariants that must hold after each."""

    def __init__(self) -> None:
        super().__init__()
        self.m = PeeringMachine()
        self.timers: set = set()
        self.dialing: set = set()
        self.conns: dict[str, tuple[str, int] | None] = {}
        self.linked: dict[str, bytes] = {}
        self.serial = 0
        self.closed = False

    def apply(self, actions: list) -> None:
        for a in actions:
            if isinstance(a, StartTimer):
                assert not self.closed
                self.timers.add(a.timer)
            elif isinstance(a, CancelTimer):
                self.timers.discard(a.timer)
            elif isinstance(a, Dial):
                assert not self.closed
                assert a.key not in self.dialing, "a second dial while one runs"
                self.dialing.add(a.key)
            elif isinstance(a, CancelDial):
                self.dialing.discard(a.key)

    keys = st.sampled_from([KEY, ("10.0.0.3", 1)])

    @rule(key=keys, retry=st.sampled_from([0.0, 1.0]))
    def peer(self, key, retry) -> None:
        _, actions = self.m.peer(*key, retry=retry)
        self.apply(actions)

    @rule(key=keys)
    def unpeer(self, key) -> None:
        self.apply(self.m.unpeer(*key)[1])

    @precondition(lambda self: self.dialing)
    @rule(data=st.data())
    def dial_fails(self, data) -> None:
        key = data.draw(st.sampled_from(sorted(self.dialing)))
        self.dialing.discard(key)
        self.apply(self.m.dial_failed(key, EC.PeerUnavailable, "refused"))

    @precondition(lambda self: self.dialing)
    @rule(data=st.data())
    def dial_connects(self, data) -> None:
        key = data.draw(st.sampled_from(sorted(self.dialing)))
        self.serial += 1
        conn = f"c{self.serial}"
        self.conns[conn] = key
        self.apply(self.m.connection_up(conn, key))
        self.dialing.discard(key)
        self.m.dial_done(key)

    @precondition(lambda self: any(c not in self.linked for c in self.conns))
    @rule(data=st.data(), v2=st.booleans())
    def handshake_done(self, data, v2) -> None:
        conn = data.draw(st.sampled_from(sorted(c for c in self.conns if c not in self.linked)))
        peer = PEER if self.conns[conn] == KEY else b"\x07" * 16
        if peer in self.m.links:
            self.apply(self.m.redundant(conn, peer))
            self.lose(conn)
            return
        self.linked[conn] = peer
        self.apply(self.m.link_up(conn, peer, NET, routes_known=not v2))

    @precondition(lambda self: self.conns)
    @rule(data=st.data())
    def connection_dies(self, data) -> None:
        conn = data.draw(st.sampled_from(sorted(self.conns)))
        self.apply(
            self.m.connection_failed(
                conn, EC.PeerTimeout, "x", self.linked.get(conn), NET, linked=conn in self.linked
            )
        )
        self.lose(conn)

    def lose(self, conn: str) -> None:
        self.m.connection_closing(conn)
        if conn in self.linked:
            self.apply(self.m.link_closed(conn, self.linked.pop(conn), NET))
        self.m.connection_lost(conn)
        del self.conns[conn]

    @precondition(lambda self: self.timers)
    @rule(data=st.data())
    def timer_fires(self, data) -> None:
        timer = data.draw(st.sampled_from(sorted(self.timers, key=lambda t: t.serial)))
        self.timers.discard(timer)
        self.apply(self.m.timer_fired(timer))

    @rule()
    def close(self) -> None:
        self.apply(self.m.close())
        self.closed = True
        self.dialing.clear()

    @invariant()
    def at_most_one_timer_and_one_routes_wait_per_address(self) -> None:
        for key in (KEY, ("10.0.0.3", 1)):
            live = [t for t in self.timers if t.key == key and t.kind != "routes"]
            target = self.m.targets.get(key)
            assert len(live) <= 1
            if target is not None and live:
                assert target.timer in live  # the one it holds is the one running

    @invariant()
    def a_dialling_address_has_no_pending_redial(self) -> None:
        for key in self.dialing:
            target = self.m.targets.get(key)
            if target is not None and target.timer is not None:
                assert target.timer.kind != "retry"


TestPeeringRules = PeeringRules.TestCase
TestPeeringRules.settings = settings(max_examples=80, stateful_step_count=30, deadline=None)


def test_advertised_filter_adds_the_other_neighbours_only_when_forwarding() -> None:
    own = ("/a",)
    assert advertised_filter(own, False, [("/b",)]) == own
    assert advertised_filter(own, True, [("/b",), ("/a/x",)]) == ("/a", "/b")
