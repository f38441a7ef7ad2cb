"""The README describes what is really there: every data source option and every subcommand.

A new option or subcommand without a line in the README fails here, and so does
a README row for an option that no longer exists.
"""

from __future__ import annotations

import re
from pathlib import Path

from broker_spark.cli import build_parser
from broker_spark.spark.options import text as option_text

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    start = README.index(title)
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def test_every_data_source_option_has_a_row() -> None:
    section = _section("## The data source `broker`: options")
    documented = set(re.findall(r"^\| `([A-Za-z.]+)`(?:, `([A-Za-z.]+)`)? \|", section, re.M))
    names = {name for pair in documented for name in pair if name}
    real = {*option_text.SHARED_OPTIONS, *option_text.READER_OPTIONS, *option_text.WRITER_OPTIONS}
    assert real - names == set(), f"options without a README row: {sorted(real - names)}"
    assert names - real == set(), f"README rows for unknown options: {sorted(names - real)}"


def test_every_subcommand_is_in_the_cli_table() -> None:
    section = _section("## The command line")
    parser = build_parser()
    commands = next(a for a in parser._actions if a.choices and "node" in a.choices).choices
    rows = set(re.findall(r"^\| `([a-z]+)", section, re.M))
    assert set(commands) - rows == set(), f"subcommands missing: {set(commands) - rows}"


def test_the_two_commands_come_first() -> None:
    first_block = README.split("```", 2)[1]
    assert "make demo" in first_block and "make test" in first_block
