"""The tutorial and the how-to guides work as written (tests/doc_blocks.py says how).

``make test`` checks that every shell and Python block of those pages is marked as run,
live (a real Zeek, ``make test-live``) or an excerpt with its reason, and that every live
name is one the live tests read. ``make test-docs`` runs the ``run`` blocks, each page's
sessions on loopback in a folder of their own, so a documented command that stops
working fails CI.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from doc_blocks import MARKED, ROOT, Block, Session, blocks, runnable

#: The tests that read marked snippets by name: the live ones, the pipeline's (make test-slow), the service's.
LIVE_SOURCES = "\n".join(
    p.read_text(encoding="utf-8")
    for p in (
        *(ROOT / "tests/live").glob("*.py"),
        ROOT / "tests/test_spark_pipelines.py",
        ROOT / "tests/test_relay_service.py",
    )
)


def _all() -> list[Block]:
    return [b for doc in MARKED for b in blocks(doc)]


def test_every_shell_and_python_block_says_whether_it_runs() -> None:
    unmarked = [b.where for b in _all() if runnable(b) and not b.marks]
    assert not unmarked, f"blocks marked neither run, live nor excerpt: {unmarked}"
    several = [b.where for b in _all() if {"run", "excerpt"} <= set(b.marks)]
    assert not several, f"blocks marked both run and excerpt: {several}"
    silent = [b.where for b in _all() if "excerpt" in b.marks and len(b.marks["excerpt"]) < 10]
    assert not silent, f"excerpts that do not say why they are not run: {silent}"


def test_every_live_block_is_read_by_a_live_test() -> None:
    for block in _all():
        if "live" in block.marks:
            name = block.marks["live"]
            assert re.search(rf"""["']{re.escape(name)}["']""", LIVE_SOURCES), (
                f"{block.where}: no live test reads the snippet {name!r}"
            )


def test_the_pages_have_runnable_sessions() -> None:
    """The tutorial runs end to end, and so does every how-to but Databricks' (whose query
    cell the live tests run)."""
    sessions = {b.doc for b in _all() if "run" in b.marks}
    how_tos = {d for d in MARKED if d.startswith("how-to/")} - {"how-to/databricks.md"}
    assert {"tutorial.md", "command-line.md"} | how_tos <= sessions, sessions


def _sessions() -> list[tuple[str, str]]:
    seen: dict[tuple[str, str], None] = {}
    for block in _all():
        if "run" in block.marks:
            seen[(block.doc, block.session)] = None
    return list(seen)


@pytest.mark.docs
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("doc", "session"), _sessions(), ids=lambda x: str(x))
def test_a_session_runs_as_written(doc: str, session: str, tmp_path: Path) -> None:
    run = Session(tmp_path)
    mine = [b for b in blocks(doc) if "run" in b.marks and b.session == session]
    for block in mine:  # every port of the session first, whichever block names it
        run.loopback.learn(block.text)
    try:
        for block in mine:
            run.run(block)
    finally:
        run.stop()
