"""What a WebSocket server refused of a writer task's messages, matched to the messages.

A Zeek behind its WebSocket API converts every event with its own handler's
types and answers one it cannot (unknown event, wrong types or count) with
an error, ``failed to create Zeek event``; nothing names the message. The
task's bridge paces its messages in groups closed by probes
(:mod:`~broker_spark.websocket.pacing`), which attributes each such error
to the group it came in (to the message itself with groups of one). This
module keeps the messages the server has not yet confirmed, in the order the
bridge sent them (every message the task publishes goes to the bridge, in
order), and turns the bridge's rejections into :class:`Refusal`\\ s that
name the messages. Confirmed messages are forgotten, so what is kept is
bounded by what is in flight.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker_spark.data.binary import decode, encode
from broker_spark.data.json_codec import dumps_value
from broker_spark.errors import EC, BrokerError
from broker_spark.websocket.pacing import Rejection

__all__ = ["Refusal", "ServerRejectedError", "ServerVerdicts", "bad_record"]


class ServerRejectedError(BrokerError, ValueError):
    """The server refused a message (mode FAILFAST): the task fails with its words."""

    code = EC.InvalidData


@dataclass(frozen=True)
class Refusal:
    """One refused message: the server's error, and the messages it may concern
    (one when exact), each ``(topic, payload, is_bad_record)``."""

    rejection: Rejection
    messages: tuple[tuple[str, bytes, bool], ...]

    @property
    def exact(self) -> bool:
        return self.rejection.exact and len(self.messages) == 1

    @property
    def of_bad_records(self) -> bool:
        """Whether it concerns only messages of ``badRecordsTopic`` (never routed again)."""
        return bool(self.messages) and all(bad for _t, _p, bad in self.messages)

    def describe(self) -> str:
        r = self.rejection
        where = f"message {r.first + 1}" if r.exact else f"one of messages {r.first + 1}-{r.end}"
        text = f"{where} of this task, {r.code}: {r.context}"
        if self.exact:
            topic, payload, _bad = self.messages[0]
            text += f" (topic {topic}, data {_render(payload)[:300]})"
        return text


def _render(payload: bytes) -> str:
    try:
        return dumps_value(decode(payload))
    except BrokerError:
        return payload.hex()


def bad_record(topic: str, refusal: Refusal, server: str) -> tuple[str, bytes]:
    """The ``badRecordsTopic`` message for an exactly attributed refusal:
    ``(topic, data as Zeek JSON, reason)``, as for rows that could not be encoded."""
    original_topic, payload, _bad = refusal.messages[0]
    r = refusal.rejection
    reason = f"{server} rejected it: {r.code}: {r.context}"
    return topic, encode((original_topic, _render(payload), reason))


class ServerVerdicts:
    """The unconfirmed messages of one task's bridge, and the refusals among them."""

    def __init__(self, run_in_loop: Callable[[Callable[[], Any]], Any], link: Any) -> None:
        """``run_in_loop`` runs a function on the loop of the bridge's endpoint
        (``Endpoint.run_in_loop``): only that thread reads the bridge's pacer."""
        self._run_in_loop = run_in_loop
        self.link = link
        self._pending: deque[tuple[str, bytes, bool]] = deque()
        self._base = 0  # the bridge's number of the first pending message
        self._taken = 0  # rejections already turned into refusals

    def sent(self, messages: list[tuple[str, bytes]], bad_records: bool = False) -> None:
        """Messages published, in order (each reaches the bridge, in this order)."""
        self._pending.extend((t, p, bad_records) for t, p in messages)

    def _snapshot(self) -> tuple[list[Rejection], int]:
        pacer = self.link.pacer
        new = pacer.rejections[self._taken :]
        self._taken = len(pacer.rejections)
        return new, pacer.confirmed

    def take(self) -> list[Refusal]:
        """Refusals since the last call; forgets what the server confirmed meanwhile."""
        rejections, confirmed = self._run_in_loop(self._snapshot)
        pending, base = self._pending, self._base
        out = []
        for r in rejections:
            lo, hi = max(r.first - base, 0), min(r.end - base, len(pending))
            out.append(Refusal(r, tuple(pending[i] for i in range(lo, hi))))
        while self._base < confirmed and pending:
            pending.popleft()
            self._base += 1
        return out
