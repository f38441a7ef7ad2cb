"""No import circles in ``broker_spark/``: every arrow between modules runs one way.

Every import counts: at module level, under ``TYPE_CHECKING`` (a module that names
its owner's class for a type hint still knows its owner) and inside functions (a
deferred import is still a dependency). ``from package import name`` is an arrow
to ``package.name`` when that is a module, otherwise to the package. Where a
lower part must tell an upper one something, it declares the narrow interface it
needs on its own side (a ``typing.Protocol`` or a callback); see
``docs/architecture.md``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.timeout(60)


def modules_of(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``package`` under ``root``."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the project modules it imports (every import statement in the file)."""
    modules = modules_of(root, package)

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                deps |= {m for alias in node.names if (m := known(alias.name))}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    target = full if full in modules else known(base)
                    if target:
                        deps.add(target)
        deps.discard(name)
        graph[name] = deps
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
    return found


def describe(graph: dict[str, set[str]], group: list[str]) -> str:
    arrows = [f"{a} -> {b}" for a in group for b in sorted(graph[a] & set(group))]
    return "circle: " + "; ".join(arrows)


def test_the_package_has_no_import_circle() -> None:
    graph = import_graph(ROOT, "broker_spark")
    assert len(graph) > 100  # every module was read
    assert circles(graph) == [], "\n".join(describe(graph, g) for g in circles(graph))


def test_a_circle_through_a_type_checking_import_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "owner.py").write_text("from pkg.sub.part import Part\n")
    (pkg / "sub" / "part.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..owner import Owner\n"
    )
    (pkg / "lazy.py").write_text("def f():\n    from pkg import owner\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.sub.part"] == {"pkg.owner"}
    assert graph["pkg.lazy"] == {"pkg.owner"}
    assert circles(graph) == [["pkg.owner", "pkg.sub.part"]]


def test_the_library_below_knows_neither_spark_nor_the_command() -> None:
    """``spark/``, ``cli/`` and ``demo/`` sit on top: nothing of the library imports them."""
    top = ("broker_spark.spark", "broker_spark.cli", "broker_spark.demo", "broker_spark.__main__")
    graph = import_graph(ROOT, "broker_spark")
    upward = sorted(
        f"{module} -> {dep}"
        for module, deps in graph.items()
        if not module.startswith(top)
        for dep in deps
        if dep.startswith(top)
    )
    assert upward == []
