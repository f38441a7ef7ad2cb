"""Flow control for what a client publishes to a WebSocket API: never more in flight than Zeek holds.

Why: Zeek's server takes a client's messages into a queue of
``max_event_queue_size`` (32) that its main loop drains; a client that
outruns it is stalled and, as users found (zeek/zeek#4440: a client at
15.8k messages/s was dropped after about 4k), dropped. The API has no
acknowledgement for a message it accepted, so a client cannot see how full
the queue is.

What it does have: every message it cannot decode is answered with an
error, in order, on the connection (Zeek: ``{"type":"error","code":
"deserialization_failed","context":"failed to decode JSON object"}``;
Broker's and our own server: ``input #N contained malformed JSON``). So a
*probe*, a text frame that is not JSON (:data:`PROBE`), comes back as an
error exactly when the server's loop has processed everything sent before
it: an echo, at no cost to anyone else (it publishes nothing, and Zeek logs
nothing for it; checked in the recorded session).

:class:`EchoPacer` keeps the count. Data messages go out in *groups*, each
closed by a probe; the messages in flight are those after the last echoed
probe, and a message is sent only while it and the probe that will close
its group fit in the ``window`` (32, Zeek's queue). So the server never
holds more than the window, and when it keeps up, the echoes return while
later groups are still being sent: the client never waits for a round trip
unless the server is behind. Groups are half the window: one is processed
while the next waits in the server's queue (double buffering). A smaller
group gives finer-grained attribution of rejections, for more probes: each
costs the server a parse and an answer (measured against the Zeek-like test
server: groups of 8 made 6,500 events/s, 16 made 8,200, 30 made 9,600; no
pacing 11,000 to 14,000).

The echoes also say what happened to each group: Zeek answers a message it
cannot turn into an event (unknown event, wrong types) with its own error
(``failed to create Zeek event``), in order, before the probe's echo. Such a
rejection is attributed to the oldest group not yet echoed, so with a group
of one message it names the message exactly. When every data message sent
has been echoed, the server has processed all of them: that is what a
writer waits for before it reports its messages delivered.

Sans-I/O: the WebSocket link asks what to send and tells what arrived.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

__all__ = [
    "DEFAULT_GROUP",
    "DEFAULT_WINDOW",
    "PROBE",
    "EchoPacer",
    "Rejection",
    "is_probe_echo",
]

#: Messages a server may hold unprocessed: Zeek's ``max_event_queue_size`` default.
DEFAULT_WINDOW = 32
#: Data messages per probe.
DEFAULT_GROUP = 16
#: What a probe sends: not JSON, so every server answers it with an error and publishes nothing.
PROBE = "broker-spark flow-control probe (not JSON: please answer with an error)"

#: How servers describe a text that is not JSON (Zeek 8+; Broker 2.x and broker_spark).
_ECHO_CONTEXTS = ("failed to decode JSON object", "contained malformed JSON")


def is_probe_echo(context: str) -> bool:
    """Whether a server's error is its answer to a probe (a text that is not JSON)."""
    return any(text in context for text in _ECHO_CONTEXTS)


@dataclass(frozen=True)
class Rejection:
    """The server refused one data message among ``first`` to ``end`` (exclusive), in the
    order this client sent them (0 is the first data message), saying ``context``."""

    first: int
    end: int
    code: str
    context: str

    @property
    def exact(self) -> bool:
        return self.end - self.first == 1


class EchoPacer:
    """How many data messages may go now, when to probe, what the echoes confirmed."""

    def __init__(self, window: int = DEFAULT_WINDOW, group: int = DEFAULT_GROUP) -> None:
        if window < 2:
            raise ValueError(f"the window must hold a message and its probe, not {window}")
        if not 1 <= group < window:
            raise ValueError(f"a group is 1 to {window - 1} messages, not {group}")
        self.window = window
        self.group = group
        self.sent = 0  # data messages sent
        self.confirmed = 0  # data messages the server processed (all before an echoed probe)
        self.probes = 0
        self.rejections: list[Rejection] = []
        self._open = 0  # data messages sent since the last probe
        self._groups: deque[int] = deque()  # end (exclusive) of each probed group, unechoed

    @property
    def in_flight(self) -> int:
        """Messages (data and probes) sent and not known to be processed."""
        return (self.sent - self.confirmed) + len(self._groups)

    @property
    def idle(self) -> bool:
        """Everything sent was processed (no data in flight)."""
        return self.confirmed == self.sent

    def may_send(self) -> bool:
        """Whether one more data message fits, with the probe that will close its group."""
        return self._open < self.group and self.in_flight + 2 <= self.window

    def sent_data(self) -> None:
        self.sent += 1
        self._open += 1

    def should_probe(self, more_waiting: bool) -> bool:
        """Whether to send a probe now: the group is full, or nothing more can go for now
        (no more data, or the window is full) and the open group needs its echo."""
        if not self._open:
            return False
        return self._open >= self.group or not more_waiting or not self.may_send()

    def sent_probe(self) -> None:
        self._groups.append(self.sent)
        self._open = 0
        self.probes += 1

    def on_error(self, code: str, context: str) -> bool:
        """An error the server sent; True if it was a probe's echo (not to be reported)."""
        if is_probe_echo(context) and self._groups:
            self.confirmed = self._groups.popleft()
            return True
        first = self.confirmed
        end = self._groups[0] if self._groups else self.sent
        self.rejections.append(Rejection(first, max(end, first + 1), code, context))
        return False
