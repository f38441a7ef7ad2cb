"""Offsets of the ``broker`` source as Spark sees them, and how a range is split into partitions.

Spark keeps a source's offsets as JSON text (``json.dumps`` of the dict the
reader returns) and decides whether a batch is new by comparing that text, so
equal offsets must always serialize to the same characters: one key,
``offset``, the spool's next offset (exclusive end of what a batch covers),
built in one place with a fixed key order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker_spark.errors import EC, BrokerError

__all__ = ["OffsetError", "SpoolOffset", "plan_partitions"]

_KEY = "offset"


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
