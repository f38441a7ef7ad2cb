"""What the docs and the shipped files say, as text to check against the code
(tests/test_doc_facts.py): the pages, the shipped files, their paragraphs and headings.

The generated references (docs/reference/, tools/gen_reference.py) are the code's own
words and are left out of what is checked, except where a test reads them as the code's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference"

#: The pages written by hand, the README and the changelog.
PAGES = sorted(
    [p for p in DOCS.rglob("*.md") if REFERENCE not in p.parents]
    + [ROOT / "README.md", ROOT / "CHANGELOG.md"]
)
#: What an operator installs or runs: configuration, units, images, compose.
SHIPPED = sorted(
    [p for p in (ROOT / "conf").rglob("*") if p.is_file()]
    + [p for p in (ROOT / "docker").iterdir() if p.is_file()]
    + [ROOT / "docker-compose.yml"]
)
#: The command's help and messages, where they point at pages.
CODE = sorted((ROOT / "broker_spark").rglob("*.py"))


@dataclass(frozen=True)
class Paragraph:
    """A paragraph (or table row, list item) of a file: where it starts, its text on one line."""

    path: Path
    line: int
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


_COMMENT = re.compile(r"\n[ \t]*(?:#|//)[ \t]*")


def unwrapped(text: str) -> str:
    """``text`` with comment markers at line starts dropped, so a comment reads as prose."""
    return _COMMENT.sub("\n", "\n" + text)[1:]


def paragraphs(paths: list[Path]) -> Iterator[Paragraph]:
    """Blank-line separated paragraphs; list items and table rows are paragraphs of their own."""
    for path in paths:
        lines = unwrapped(path.read_text(encoding="utf-8")).splitlines()
        start, body = 0, []
        for i, line in enumerate([*lines, ""]):
            item = re.match(r"\s*(?:[-*|]|\d+\.)\s", line) is not None
            if (not line.strip() or item) and body:
                yield Paragraph(path, start + 1, " ".join(s.strip() for s in body))
                body = []
            if line.strip():
                if not body:
                    start = i
                body.append(line)


def headings(path: Path) -> dict[str, str]:
    """A Markdown page's headings (their text) -> the prose under each, up to the next."""
    out: dict[str, str] = {}
    current: str | None = None
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not fenced and re.match(r"#{1,6} ", line):
            current = line.lstrip("#").strip()
            out[current] = ""
        elif current is not None:
            out[current] += line + "\n"
    return out


def fenced_blocks(path: Path) -> list[str]:
    """The fenced blocks of a Markdown page, their text."""
    return re.findall(
        r"^\s*```[\w+-]*\n(.*?)^\s*```", path.read_text(encoding="utf-8"), re.M | re.S
    )
