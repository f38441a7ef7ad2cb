"""A peered connection's health check, sans I/O: liveness, keep-alive pings, stalled peers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_spark.protocol.link_health import HEALTHY, check_link

pytestmark = pytest.mark.timeout(60)

TIMES = {"ping_interval": 5.0, "liveness_timeout": 20.0}


def test_a_peer_that_sent_something_lately_is_healthy() -> None:
    assert check_link(10.0, last_rx=9.0, last_ping=0.0, **TIMES) is HEALTHY


def test_an_idle_connection_gets_one_ping_per_interval() -> None:
    assert check_link(10.0, last_rx=4.0, last_ping=0.0, **TIMES).ping
    assert check_link(10.0, last_rx=4.0, last_ping=8.0, **TIMES) is HEALTHY  # pinged lately


def test_a_silent_peer_is_lost_after_the_liveness_timeout_and_nothing_else_happens() -> None:
    verdict = check_link(
        30.0, last_rx=9.0, last_ping=0.0, paused=True, queued=9, capacity=1, **TIMES
    )
    assert verdict.lost == "no data from the peer for 21.0 s (liveness timeout)"
    assert not verdict.ping and verdict.disconnect is None and verdict.drop is None


STALLED = {"paused": True, "queued": 8, "capacity": 8, "paused_at": 1.0, "stall_timeout": 5.0}


@pytest.mark.parametrize(
    ("policy", "field", "text"),
    [
        ("disconnect", "disconnect", "(peer_overflow_policy=disconnect)"),
        ("drop_newest", "drop", "dropping the newest messages"),
        ("drop_oldest", "drop", "dropping the oldest messages"),
    ],
)
def test_a_stalled_peer_meets_its_overflow_policy(policy: str, field: str, text: str) -> None:
    verdict = check_link(7.0, last_rx=6.5, last_ping=6.5, policy=policy, **STALLED, **TIMES)
    reason = getattr(verdict, field)
    assert reason.startswith("the peer read nothing for 6.0 s with 8 messages waiting")
    assert text in reason


def test_no_stall_verdict_before_the_timeout_with_room_or_while_dropping_already() -> None:
    base = {"last_rx": 6.5, "last_ping": 6.5, **TIMES}
    assert check_link(5.5, **base, **STALLED) is HEALTHY  # 4.5 s < stall_timeout
    assert check_link(7.0, **base, **{**STALLED, "queued": 7}) is HEALTHY  # room left
    assert check_link(7.0, **base, **{**STALLED, "paused": False}) is HEALTHY
    assert check_link(7.0, **base, dropping=True, **STALLED) is HEALTHY


@given(
    now=st.floats(0, 1000),
    rx_ago=st.floats(0, 100),
    ping_ago=st.floats(0, 100),
    paused_ago=st.floats(0, 100),
    paused=st.booleans(),
    dropping=st.booleans(),
    queued=st.integers(0, 20),
    policy=st.sampled_from(["disconnect", "drop_newest", "drop_oldest"]),
)
def test_the_verdict_follows_the_rules(
    now, rx_ago, ping_ago, paused_ago, paused, dropping, queued, policy
) -> None:
    last_rx, last_ping, paused_at = now - rx_ago, now - ping_ago, now - paused_ago
    verdict = check_link(
        now,
        last_rx=last_rx,
        last_ping=last_ping,
        paused=paused,
        dropping=dropping,
        queued=queued,
        capacity=10,
        paused_at=paused_at,
        stall_timeout=5.0,
        policy=policy,
        **TIMES,
    )
    idle = now - last_rx  # as the check computes it (float rounding included)
    lost = idle > 20.0
    assert (verdict.lost is not None) == lost
    if lost:
        return
    assert verdict.ping == (idle > 5.0 and now - last_ping > 5.0)
    stalled = paused and not dropping and queued >= 10 and now - paused_at > 5.0
    assert (verdict.disconnect is not None) == (stalled and policy == "disconnect")
    assert (verdict.drop is not None) == (stalled and policy != "disconnect")
