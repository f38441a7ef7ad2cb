"""The protocol core stays sans-I/O: no module of it imports an I/O or clock module.

``broker_spark/protocol/`` and ``broker_spark/store/`` are state machines fed
with bytes, messages and times by their callers, which is what lets the tests
drive them deterministically (SimNet, the handshake tests, store replication)
and ``broker_spark/core/`` run them on asyncio. One import of ``asyncio``,
``socket``, ``ssl``, ``time`` or ``threading`` would quietly end that, so every
module there is checked, with the project modules it imports (followed
transitively; a package's ``__init__`` is not followed, since importing
``broker_spark.data.x`` runs ``broker_spark/__init__.py``, the public API,
whose I/O the core never calls). Imports inside functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "broker_spark"
CHECKED = ("protocol", "store")
FORBIDDEN = frozenset({"asyncio", "socket", "ssl", "time", "threading", "selectors"})


def module_name(path: Path) -> str:
    if not path.is_relative_to(ROOT):
        return path.stem  # a stray file (the self-test below)
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, as absolute dotted names (relative ones resolved)."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path.parent)
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out.add(base)
            # ``from broker_spark.protocol import channel`` imports a module too.
            out |= {f"{base}.{alias.name}" for alias in node.names}
    return out


def source_of(name: str) -> Path | None:
    """The file of project module ``name`` (None for packages and non-project names)."""
    if not name.startswith("broker_spark."):
        return None
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def io_imports(start: Path) -> list[tuple[str, str]]:
    """(project module, forbidden import) pairs reachable from ``start``."""
    found: list[tuple[str, str]] = []
    seen: set[Path] = set()
    todo = [start]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in imports_of(path):
            if name.split(".")[0] in FORBIDDEN:
                found.append((module_name(path), name))
            dep = source_of(name)
            if dep is not None:
                todo.append(dep)
    return sorted(found)


#: Sans-I/O modules that live beside the I/O they are driven by (the spool protocol).
CHECKED_MODULES = ("spool/relay_protocol.py", "spool/relay_reader_session.py")
MODULES = sorted(
    [p for sub in CHECKED for p in (PACKAGE / sub).rglob("*.py")]
    + [PACKAGE / m for m in CHECKED_MODULES]
)


def test_every_core_module_is_checked() -> None:
    names = {module_name(p) for p in MODULES}
    assert {
        "broker_spark.protocol.handshake",
        "broker_spark.store.master",
        "broker_spark.spool.relay_protocol",
        "broker_spark.spool.relay_reader_session",
    } <= names
    assert len(names) >= 15  # every module, not a chosen few


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_module_does_no_io(path: Path) -> None:
    assert io_imports(path) == []


def test_the_check_can_fail(tmp_path: Path) -> None:
    """An import inside a function, and one made by a project module imported, are caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("from broker_spark.tls import looks_like_tls\ndef f():\n    import time\n")
    found = io_imports(bad)
    assert ("bad", "time") in found
    assert ("broker_spark.tls", "ssl") in found  # reached through the project import
