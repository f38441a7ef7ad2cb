"""Plain-text tables for the command's reports (``status``)."""

from __future__ import annotations

__all__ = ["table"]


def table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    """``rows`` (the first one the header) as aligned lines, columns two spaces apart."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
        if r
    ]
