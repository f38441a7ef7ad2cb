"""The demo's running table: the latest totals per 10-second window and service.

Spark's ``update`` output mode hands each micro-batch only the (window,
service) rows that changed. :class:`WindowTotals` keeps the latest value of
every row, so a printed line can show a whole window (every service, not just
the ones that moved), and so the end of the demo can compare what came back
through the topic and the store with what Spark last said.

Rendering is plain text, one line per updated window, a header now and then::

    batch   +conns  window             dns        http        ssl        ...
        3   4,012  07:33:20-07:33:30  1,603/ 290k  1,001/ 21M  ...

Nothing here imports Spark: rows are plain tuples, so this is tested alone.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["SummaryRow", "WindowTotals", "human_bytes"]

#: Services shown as columns; the rest are added up in an "other" column.
MAX_COLUMNS = 6
#: Lines between two repetitions of the header.
HEADER_EVERY = 20


@dataclass(frozen=True)
class SummaryRow:
    """One aggregate: connections and bytes of a service in a window."""

    start: dt.datetime
    end: dt.datetime
    service: str
    connections: int
    bytes: int


def human_bytes(n: int) -> str:
    """``n`` bytes in at most 4 characters plus a unit: ``950``, ``12k``, ``3.4M``, ``1.2G``."""
    value = float(n)
    for unit in ("", "k", "M", "G", "T"):
        if value < 1000 or unit == "T":
            if unit == "" or value >= 10:
                return f"{value:.0f}{unit}"
            return f"{value:.1f}{unit}"
        value /= 1000
    raise AssertionError("unreachable")


class WindowTotals:
    """Latest totals per (window start, service), fed with each micro-batch's updates."""

    def __init__(self) -> None:
        self.latest: dict[tuple[dt.datetime, str], SummaryRow] = {}
        self.updates = 0
        self._services: list[str] = []
        self._printed_header_for: list[str] | None = None
        self._lines_since_header = 0

    def update(self, rows: Iterable[SummaryRow]) -> tuple[int, list[dt.datetime]]:
        """Apply a batch's updates; return (connections added, windows touched in order)."""
        added = 0
        touched: dict[dt.datetime, None] = {}
        for row in rows:
            key = (row.start, row.service)
            before = self.latest.get(key)
            added += row.connections - (before.connections if before else 0)
            self.latest[key] = row
            touched[row.start] = None
            self.updates += 1
        return added, sorted(touched)

    @property
    def windows(self) -> int:
        return len({start for start, _ in self.latest})

    @property
    def services(self) -> list[str]:
        return sorted({service for _, service in self.latest})

    @property
    def connections(self) -> int:
        return sum(row.connections for row in self.latest.values())

    def columns(self) -> list[str]:
        """The services shown: the busiest :data:`MAX_COLUMNS`, alphabetically."""
        totals: dict[str, int] = {}
        for row in self.latest.values():
            totals[row.service] = totals.get(row.service, 0) + row.connections
        busiest = sorted(totals, key=lambda s: (-totals[s], s))[:MAX_COLUMNS]
        return sorted(busiest)

    def render(self, batch: int, added: int, windows: list[dt.datetime]) -> list[str]:
        """The lines to print for a batch that touched ``windows`` (a header when due)."""
        columns = self.columns()
        other = len(self.services) > len(columns)
        lines = []
        if columns != self._printed_header_for or self._lines_since_header >= HEADER_EVERY:
            names = [*columns, "other"] if other else columns
            lines.append(
                f"{'batch':>5} {'+conns':>7}  {'window':<17}  "
                + "  ".join(f"{name[:11]:>11}" for name in names)
                + f"  {'all':>12}"
            )
            self._printed_header_for = columns
            self._lines_since_header = 0
        for i, start in enumerate(windows):
            rows = [row for (s, _), row in self.latest.items() if s == start]
            by_service = {row.service: row for row in rows}
            cells = [self._cell(by_service.get(name)) for name in columns]
            if other:
                rest = [row for row in rows if row.service not in columns]
                cells.append(self._cell_of(rest))
            end = rows[0].end if rows else start
            prefix = f"{batch:>5} {added:>7,}" if i == 0 else " " * 13
            lines.append(
                f"{prefix}  {start:%H:%M:%S}-{end:%H:%M:%S}  "
                + "  ".join(cells)
                + f"  {self._cell_of(rows, 12)}"
            )
            self._lines_since_header += 1
        return lines

    @staticmethod
    def _cell(row: SummaryRow | None, width: int = 11) -> str:
        if row is None:
            return f"{'-':>{width}}"
        return f"{row.connections:,}/{human_bytes(row.bytes)}".rjust(width)

    @classmethod
    def _cell_of(cls, rows: list[SummaryRow], width: int = 11) -> str:
        if not rows:
            return f"{'-':>{width}}"
        conns = sum(row.connections for row in rows)
        nbytes = sum(row.bytes for row in rows)
        return f"{conns:,}/{human_bytes(nbytes)}".rjust(width)
