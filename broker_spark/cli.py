"""The ``broker-spark`` command (more subcommands arrive with the CLI issue)."""

from __future__ import annotations

import argparse
import sys

from broker_spark import __version__


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="broker-spark", description="Zeek's Broker in pure Python, for Spark."
    )
    parser.add_argument("--version", action="version", version=f"broker-spark {__version__}")
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser("demo", help="run the demo (two endpoints, synthetic Zeek events)")
    demo.add_argument("--seconds", type=float, default=5.0, help="how long to publish")
    demo.add_argument("--rate", type=int, default=20_000, help="events per second")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from broker_spark.demo import run

        result = run(args.seconds, args.rate)
        return 0 if result["received"] == result["published"] else 1
    print(f"broker-spark {__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
