"""Offsets of the ``broker`` source as Spark sees them, and how a range is split into partitions.

Spark keeps a source's offsets as JSON text (``json.dumps`` of the dict the
reader returns) and decides whether a batch is new by comparing that text, so
equal offsets must always serialize to the same characters, built in one place
with a fixed key order:

* one spool (the reader's own, a ``spoolPath``'s receiver): ``{"offset": N}``,
  the spool's next offset (exclusive end of what a batch covers);
* relays (``relay=h1:p1,h2:p2``): ``{"relays": {ID: {"at": "h1:p1", "offset": N},
  ...}}``, one position per relay keyed by its ``relay-id``, as Spark's Kafka
  source keeps one per partition; ``at`` is where the relay was, so a relay that
  is unreachable when a query restarts is known for what it is, and one that
  left the options can be named. A checkpoint of a query that read one relay
  with an earlier release holds ``{"offset": N}``: it is that relay's position.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker_spark.errors import EC, BrokerError

__all__ = ["OffsetError", "RelayOffsets", "SpoolOffset", "plan_partitions"]

_KEY = "offset"
_RELAYS = "relays"


class OffsetError(BrokerError, ValueError):
    """An offset Spark handed back that is not one we made, or an impossible range."""

    code = EC.InvalidData


@dataclass(frozen=True, order=True)
class SpoolOffset:
    """A position in the spool: the offset of the next record (so ranges are ``[start, end)``)."""

    offset: int

    def __post_init__(self) -> None:
        if type(self.offset) is not int or self.offset < 0:
            raise OffsetError(f"an offset must be a non-negative integer, got {self.offset!r}")

    def to_dict(self) -> dict[str, int]:
        """The dict a stream reader returns to Spark (keys always in this order)."""
        return {_KEY: self.offset}

    def to_json(self) -> str:
        """The text Spark stores and compares: exactly ``json.dumps(self.to_dict())``."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any] | str) -> SpoolOffset:
        """Read back what Spark passes to ``partitions``/``commit`` (a dict, or its JSON text)."""
        if isinstance(obj, (str, bytes)):
            return cls.from_json(obj)
        if not isinstance(obj, Mapping) or set(obj) != {_KEY}:
            raise OffsetError(f'offset {obj!r} is not {{"offset": <non-negative integer>}}')
        value = obj[_KEY]
        if type(value) is not int or value < 0:
            raise OffsetError(f'offset {obj!r} is not {{"offset": <non-negative integer>}}')
        return cls(value)

    @classmethod
    def from_json(cls, text: str | bytes) -> SpoolOffset:
        """Parse offset JSON text (as found in a checkpoint)."""
        try:
            obj = json.loads(text)
        except (ValueError, TypeError) as exc:
            raise OffsetError(f"offset {text!r} is not JSON: {exc}") from None
        if isinstance(obj, (str, bytes)):
            raise OffsetError(f'offset {text!r} is not {{"offset": <non-negative integer>}}')
        return cls.from_dict(obj)


@dataclass(frozen=True)
class RelayOffsets:
    """Positions in several relays' spools: ``positions`` by relay id, ``addresses`` (the
    ``host:port`` each was read at) by relay id. ``legacy`` holds the position of a checkpoint
    written for one relay before offsets were kept per relay (no id known)."""

    positions: Mapping[str, int]
    addresses: Mapping[str, str]
    legacy: int | None = None

    def __post_init__(self) -> None:
        for key, value in self.positions.items():
            if type(value) is not int or value < 0 or not key:
                raise OffsetError(f"relay position {key!r}: {value!r} is not an offset")

    def to_dict(self) -> dict[str, Any]:
        relays = {
            key: {"at": self.addresses.get(key, ""), _KEY: self.positions[key]}
            for key in sorted(self.positions)
        }
        return {_RELAYS: relays}

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any] | str) -> RelayOffsets:
        if isinstance(obj, (str, bytes)):
            try:
                obj = json.loads(obj)
            except (ValueError, TypeError) as exc:
                raise OffsetError(f"offset {obj!r} is not JSON: {exc}") from None
        if isinstance(obj, Mapping) and set(obj) == {_KEY}:
            return cls({}, {}, legacy=SpoolOffset.from_dict(obj).offset)
        bad = OffsetError(
            f'offset {obj!r} is not {{"relays": {{ID: {{"at": HOST:PORT, "offset": N}}}}}}'
        )
        if not isinstance(obj, Mapping) or set(obj) != {_RELAYS}:
            raise bad
        relays = obj[_RELAYS]
        if not isinstance(relays, Mapping):
            raise bad
        positions: dict[str, int] = {}
        addresses: dict[str, str] = {}
        for key, entry in relays.items():
            if not isinstance(entry, Mapping) or type(entry.get(_KEY)) is not int:
                raise bad
            positions[str(key)] = entry[_KEY]
            addresses[str(key)] = str(entry.get("at") or "")
        return cls(positions, addresses)


def fair_shares(available: Mapping[str, int], limit: int) -> dict[str, int]:
    """How many of ``available`` records each source may give when ``limit`` is shared among
    them (``maxRecordsPerTrigger`` over several relays): equal shares, and what a source
    cannot use goes to the others (water filling); each source with records gets at least
    one, and the result depends only on the arguments."""
    left = max(limit, 0)
    wanting = {k: n for k, n in available.items() if n > 0}
    shares = dict.fromkeys(available, 0)
    while wanting and left > 0:
        each = max(1, left // len(wanting))
        for key in sorted(wanting):
            take = min(each, wanting[key], left)
            shares[key] += take
            wanting[key] -= take
            left -= take
            if left <= 0:
                break
        wanting = {k: n for k, n in wanting.items() if n > 0}
    for key, n in available.items():  # a source that has records is never starved
        if n > 0 and shares[key] == 0:
            shares[key] = 1
    return shares


def plan_partitions(
    start: int, end: int, max_per_partition: int, *, min_partitions: int = 1
) -> list[tuple[int, int]]:
    """Split ``[start, end)`` into contiguous ranges of at most ``max_per_partition`` offsets.

    The ranges are as even as possible (sizes differ by at most one), and there
    are at least ``min_partitions`` of them when the range has that many
    records, so a small batch still spreads over the cluster's cores. The
    split depends only on the arguments, so a re-planned batch reads the same
    ranges. An empty range gives no partitions.
    """
    for name, value in (("start", start), ("end", end)):
        if type(value) is not int or value < 0:
            raise OffsetError(f"{name} must be a non-negative integer, got {value!r}")
    for name, value in (
        ("max_per_partition", max_per_partition),
        ("min_partitions", min_partitions),
    ):
        if type(value) is not int or value < 1:
            raise OffsetError(f"{name} must be a positive integer, got {value!r}")
    if end < start:
        raise OffsetError(f"range ends before it starts: {start} to {end}")
    n = end - start
    if n == 0:
        return []
    count = max(-(-n // max_per_partition), min(min_partitions, n))
    size, extra = divmod(n, count)
    out = []
    lo = start
    for i in range(count):
        hi = lo + size + (1 if i < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out
