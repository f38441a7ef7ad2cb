"""The README is a short front door: pip install first, the two commands, links that lead somewhere.

The details moved to docs/ (the site of ``make docs``); what the code has (every option,
every flag) is checked against the generated references by tests/test_reference.py, and
the command line page keeps a row per subcommand.
"""

from __future__ import annotations

import re
from pathlib import Path

from broker_spark.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_it_starts_with_pip_install_then_the_two_commands() -> None:
    first_block = README.split("```", 2)[1]
    lines = [line for line in first_block.splitlines()[1:] if line and not line.startswith("#")]
    assert lines[0].startswith("pip install")
    assert "make demo" in first_block and "make test" in first_block


def test_it_fits_in_about_two_hundred_lines() -> None:
    assert len(README.splitlines()) <= 210


def test_every_link_leads_to_a_file() -> None:
    links = re.findall(r"\]\(((?!https?:)[^)#]+)(?:#[^)]*)?\)", README)
    assert links
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"


def test_every_subcommand_has_a_row_on_the_command_line_page() -> None:
    page = (ROOT / "docs" / "command-line.md").read_text(encoding="utf-8")
    parser = build_parser()
    commands = next(a for a in parser._actions if a.choices and "node" in a.choices).choices
    rows = set(re.findall(r"^\| `([a-z]+)", page, re.M))
    assert set(commands) - rows == set(), f"subcommands missing: {set(commands) - rows}"


def test_the_install_page_names_every_dependency() -> None:
    """docs/deploy.md says what every node needs: each of pyproject's dependencies."""
    project = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    listed = project.split("dependencies = [", 1)[1].split("]", 1)[0]
    names = re.findall(r'^\s*"([A-Za-z0-9_.-]+)', listed, re.M)
    assert "pyzmq" in names and "prometheus_client" in names
    page = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    section = page.split("## 1. Install the package on every node", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in names if f"`{name}`" not in section]
    assert not missing, f"docs/deploy.md's install section does not name {missing}"
