"""The decisions of a listener's slots, without sockets (``protocol/address_slots.py``).

Per-address caps, the unidentified share, refusals counted by reason and the
once-a-minute log throttle: what every listener (relay, Broker, WebSocket,
metrics) asks before it serves a connection. The same object with real
sockets is in tests/test_address_crowds.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_spark.protocol.address_slots import (
    LOG_EVERY,
    PER_ADDRESS,
    TOO_MANY,
    UNIDENTIFIED,
    AddressSlots,
)


def test_one_address_holds_at_most_its_cap_and_others_still_enter() -> None:
    slots = AddressSlots(limit=10, per_address=3, unidentified=10)
    assert [slots.enter("a") for _ in range(4)] == [None, None, None, PER_ADDRESS]
    assert slots.enter("b") is None
    slots.leave("a", identified=False)
    assert slots.enter("a") is None  # a place of its own freed
    assert slots.refused == {PER_ADDRESS: 1}
    assert slots.by_address == {"a": 3, "b": 1}


def test_strangers_hold_a_bounded_share_and_identified_readers_keep_theirs() -> None:
    slots = AddressSlots(limit=4, per_address=4)  # share: half, 2
    assert slots.unidentified == 2
    assert slots.enter("reader") is None
    slots.identify()  # said HELLO
    assert slots.enter("x") is None and slots.enter("y") is None
    assert slots.enter("z") == UNIDENTIFIED  # the crowd of strangers stops at its share
    assert slots.open == 3 and slots.strangers == 2
    assert slots.enter("reader2") == UNIDENTIFIED  # (until a stranger leaves or identifies)
    slots.leave("x", identified=False)
    assert slots.enter("reader2") is None
    slots.identify()
    assert slots.enter("w") is None  # a stranger again: y and w
    assert slots.enter("v") == TOO_MANY
    slots.leave("reader", identified=True)
    assert slots.strangers == 2 and slots.open == 3
    assert slots.refused == {UNIDENTIFIED: 2, TOO_MANY: 1}


def test_refusals_from_one_address_are_logged_once_a_minute() -> None:
    slots = AddressSlots(limit=1, per_address=1)
    assert slots.should_log("a", 100.0)
    assert not slots.should_log("a", 100.0 + LOG_EVERY - 0.001)
    assert slots.should_log("b", 101.0)  # another address: its own line
    assert slots.should_log("a", 100.0 + LOG_EVERY)
    assert not slots.should_log("a", 100.0 + LOG_EVERY + 1)


def test_the_log_throttle_forgets_old_addresses_and_stays_bounded() -> None:
    slots = AddressSlots(limit=1, per_address=1)
    for i in range(5000):  # an IPv6 scanner: a new address each time
        slots.should_log(f"2001:db8::{i:x}", 0.0)
    assert len(slots._logged) <= 4096
    assert slots.should_log("late", LOG_EVERY)  # the stale ones forgotten, room again
    assert len(slots._logged) == 1


def test_impossible_bounds_are_refused() -> None:
    for args in ((0, 1), (1, 0)):
        with pytest.raises(ValueError):
            AddressSlots(*args)
    with pytest.raises(ValueError):
        AddressSlots(4, 4, unidentified=0)


@given(
    st.lists(
        st.tuples(st.sampled_from(["enter", "identify", "leave"]), st.sampled_from("abc")),
        max_size=80,
    )
)
def test_the_bounds_hold_whatever_the_order(ops: list[tuple[str, str]]) -> None:
    slots = AddressSlots(limit=6, per_address=3, unidentified=2)
    held: list[tuple[str, bool]] = []  # the connections admitted: address, identified
    for op, address in ops:
        if op == "enter":
            if slots.enter(address) is None:
                held.append((address, False))
        elif op == "identify":
            strangers = [i for i, (_, ident) in enumerate(held) if not ident]
            if strangers:
                held[strangers[0]] = (held[strangers[0]][0], True)
                slots.identify()
        else:
            mine = [i for i, (a, _) in enumerate(held) if a == address]
            if mine:
                slots.leave(*held.pop(mine[0]))
        assert slots.open == len(held) <= 6
        assert slots.strangers == sum(1 for _, ident in held if not ident) <= 2
        for a in "abc":
            assert slots.by_address[a] == sum(1 for x, _ in held if x == a) <= 3
