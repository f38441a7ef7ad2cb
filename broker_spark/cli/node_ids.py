"""How the command line shows node ids where a full one (64 hex digits) is too long.

``status`` tables and ``topology`` pictures both label endpoints this way, so
an id read in one can be found in the other; hence one place for it, which
neither of the two modules owns.
"""

from __future__ import annotations

__all__ = ["short"]


def short(node: str) -> str:
    """The first 8 hex digits of a node id: unique enough for a picture or a table."""
    return node[:8]
