"""Topics and subscription filters.

Broker matches topics by plain string prefix: a subscriber to ``/zeek/event``
receives ``/zeek/event/foo`` and also ``/zeek/events``. A filter is a set of
prefixes kept minimal: a prefix covered by a shorter one is redundant, because
it can never match anything the shorter one does not.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

SEP = "/"

#: Topics reserved by Broker for its own traffic (store channels, pings, local events).
RESERVED = "<$>"


class Topic(str):
    """A Broker topic: a string with Broker's joining rules.

    ``/`` inserts a separator only when both sides are non-empty and the right
    side does not already start with one, then drops one trailing separator of
    the result: exactly Broker's ``topic::operator/=``, so ``Topic("") / "a"``
    is ``a`` and ``Topic("a") / "b//"`` is ``a/b/``.
    """

    __slots__ = ()

    def string(self) -> str:
        return str(self)

    def __truediv__(self, other: object) -> Topic:
        rhs = str(other)
        joined = str(self)
        if rhs and not rhs.startswith(SEP) and joined:
            joined += SEP
        joined += rhs
        return Topic(joined[:-1] if joined.endswith(SEP) else joined)

    def __repr__(self) -> str:
        return f"Topic({str(self)!r})"


def as_topic_str(topic: object) -> str:
    """Accept a ``Topic``, ``str`` or anything with ``string()`` and return plain text."""
    if isinstance(topic, str):
        return str(topic)
    string = getattr(topic, "string", None)
    if callable(string):
        return str(string())
    raise TypeError(f"expected a topic (str or Topic), got {type(topic).__name__}: {topic!r}")


def topic_list(topics: Any) -> list[str]:
    """Broker accepts one topic or an iterable of them; return plain strings."""
    if isinstance(topics, (str, Topic)) or hasattr(topics, "string"):
        return [as_topic_str(topics)]
    if isinstance(topics, Iterable):
        return [as_topic_str(t) for t in topics]
    return [as_topic_str(topics)]


def matches(prefixes: Iterable[str], topic: str) -> bool:
    """True when some prefix is a string prefix of ``topic``."""
    return any(topic.startswith(p) for p in prefixes)


class Filter:
    """A minimal set of topic prefixes.

    Adding ``/zeek/event`` to a filter holding ``/zeek/event/foo`` leaves only
    ``/zeek/event``; adding ``/zeek/event/bar`` afterwards changes nothing.
    """

    __slots__ = ("_prefixes",)

    def __init__(self, prefixes: Iterable[str] = ()) -> None:
        self._prefixes: list[str] = []
        for p in prefixes:
            self.add(p)

    def add(self, prefix: str) -> bool:
        """Add a prefix; return True when the filter changed."""
        prefix = as_topic_str(prefix)
        if any(prefix.startswith(p) for p in self._prefixes):
            return False
        self._prefixes = [p for p in self._prefixes if not p.startswith(prefix)]
        self._prefixes.append(prefix)
        self._prefixes.sort()
        return True

    def remove(self, prefix: str) -> bool:
        """Remove exactly this prefix; return True when it was present."""
        prefix = as_topic_str(prefix)
        if prefix in self._prefixes:
            self._prefixes.remove(prefix)
            return True
        return False

    def matches(self, topic: str) -> bool:
        return any(topic.startswith(p) for p in self._prefixes)

    def prefixes(self) -> list[str]:
        return list(self._prefixes)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._prefixes))

    def __len__(self) -> int:
        return len(self._prefixes)

    def __contains__(self, prefix: object) -> bool:
        return prefix in self._prefixes

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Filter):
            return self._prefixes == other._prefixes
        return NotImplemented

    def __repr__(self) -> str:
        return f"Filter({self._prefixes!r})"


def minimize(prefixes: Iterable[str]) -> list[str]:
    """The minimal sorted prefix list covering the same topics."""
    return Filter(prefixes).prefixes()
