"""Progress of long input on stderr: a line redrawn in place on a terminal, plain lines elsewhere.

Shown when stderr is a terminal, or always with ``--progress``; at most a few
updates per second, so it costs nothing per message. Stdout stays clean for
data.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """Counts units of work (lines, events) and bytes; redraws ``label: n units, r/s [, p%]``."""

    def __init__(
        self,
        label: str,
        enabled: bool,
        total_bytes: int | None = None,
        stream: TextIO | None = None,
        interval: float | None = None,
        unit: str = "lines",
    ) -> None:
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.enabled = enabled
        self.label = label
        self.total_bytes = total_bytes
        self.interval = interval if interval is not None else (0.2 if self.tty else 1.0)
        self.count = 0
        self.bytes = 0
        self.start = time.monotonic()
        self._next = self.start + self.interval

    def add(self, count: int, nbytes: int = 0) -> None:
        self.count += count
        self.bytes += nbytes
        if self.enabled:
            now = time.monotonic()
            if now >= self._next:
                self._next = now + self.interval
                self._draw(now)

    def _text(self, now: float) -> str:
        elapsed = max(now - self.start, 1e-9)
        text = f"{self.label}: {self.count:,} {self.unit}, {self.count / elapsed:,.0f}/s"
        if self.total_bytes:
            text += f", {min(100.0, 100.0 * self.bytes / self.total_bytes):.0f}%"
        return text

    def _draw(self, now: float) -> None:
        text = self._text(now)
        if self.tty:
            self.stream.write("\r\x1b[K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def done(self) -> None:
        """The final figure (when progress was shown at all), ending the redrawn line."""
        if not self.enabled:
            return
        now = time.monotonic()
        text = self._text(now) + f" in {now - self.start:.1f} s"
        self.stream.write(("\r\x1b[K" if self.tty else "") + text + "\n")
        self.stream.flush()
