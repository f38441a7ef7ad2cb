"""The ``broker-spark`` command (a placeholder until the CLI issue lands)."""

from __future__ import annotations

import sys

from broker_spark import __version__


def main(argv: list[str] | None = None) -> int:
    print(f"broker-spark {__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
