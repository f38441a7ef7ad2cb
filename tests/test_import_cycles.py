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
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.timeout(60)


@functools.cache
def _tree(path: Path, mtime_ns: int) -> ast.Module:
    """A file's syntax tree, parsed once per version of the file (every test walks the same
    package: parsing it once saves most of these tests' time)."""
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def tree_of(path: Path) -> ast.Module:
    return _tree(path, path.stat().st_mtime_ns)


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
        for node in ast.walk(tree_of(path)):
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


def _in(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


#: The layers on top of the library, highest first. The entry points (``python -m
#: broker_spark``, and ``python -m broker_spark.demo``, which runs the demo through the
#: command) use the command, the command uses the demo, the demo uses Spark, Spark uses
#: the reader runtime, and the library below knows none of them. The node and the reader
#: runtime are two parts side by side: neither imports the other (see
#: ``test_the_node_and_the_reader_runtime_stand_apart``).
TOP_LAYERS = (
    ("broker_spark.__main__", "broker_spark.demo.__main__"),
    ("broker_spark.cli",),
    ("broker_spark.demo",),
    ("broker_spark.spark",),
    ("broker_spark.node", "broker_spark.reader"),
)


def layer_of(module: str) -> int:
    """0 for the entry points, 1 for the command, ..., ``len(TOP_LAYERS)`` for the library."""
    return next(
        (rank for rank, packages in enumerate(TOP_LAYERS) if _in(module, packages)),
        len(TOP_LAYERS),
    )


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    """The imports of a module of a layer above its own."""
    return sorted(
        f"{module} -> {dep}"
        for module, deps in graph.items()
        for dep in deps
        if layer_of(dep) < layer_of(module)
    )


def test_every_arrow_points_down_the_layers() -> None:
    """Nothing below ``spark/`` imports it, nothing below ``cli/`` imports the command (nor
    anything below ``demo/`` the demo): where a lower part needs something of an upper one,
    that something belongs below both (``tls``, ``zeromq/proxy_address``)."""
    assert upward_arrows(import_graph(ROOT, "broker_spark")) == []


def test_an_arrow_up_the_layers_is_found() -> None:
    graph = {
        "broker_spark.zeromq.x": {"broker_spark.reader.options"},
        "broker_spark.spark.y": {"broker_spark.cli.z", "broker_spark.topic"},
        "broker_spark.demo.__main__": {"broker_spark.cli"},
        "broker_spark.cli.z": {"broker_spark.demo.options", "broker_spark.spark.y"},
    }
    assert upward_arrows(graph) == [
        "broker_spark.spark.y -> broker_spark.cli.z",
        "broker_spark.zeromq.x -> broker_spark.reader.options",
    ]


def arrows_into(
    graph: dict[str, set[str]], sources: tuple[str, ...], targets: tuple[str, ...]
) -> list[str]:
    """The imports from a module in ``sources`` of a module in ``targets``."""
    return sorted(
        f"{module} -> {dep}"
        for module, deps in graph.items()
        if _in(module, sources)
        for dep in deps
        if _in(dep, targets)
    )


def test_the_command_the_demo_and_spark_reach_no_core_internals() -> None:
    """``cli/``, ``demo/`` and ``spark/`` use the public endpoint (and its extensions) and
    the shared modules of the ground floor (TLS contexts: ``broker_spark.tls``), never
    ``core/``."""
    graph = import_graph(ROOT, "broker_spark")
    above = ("broker_spark.cli", "broker_spark.demo", "broker_spark.spark")
    assert arrows_into(graph, above, ("broker_spark.core",)) == []


def test_nothing_but_the_entry_points_imports_the_command() -> None:
    """``cli/`` parses arguments and prints; the node, the reader runtime, Spark and the
    demo never import it (what they share with it lives below: ``broker_spark.exits``,
    ``broker_spark.addresses``, ``node/settings``)."""
    graph = import_graph(ROOT, "broker_spark")
    entry = ("broker_spark.__main__", "broker_spark.demo.__main__", "broker_spark.cli")
    wrong = sorted(
        f"{module} -> {dep}"
        for module, deps in graph.items()
        if not _in(module, entry)
        for dep in deps
        if _in(dep, ("broker_spark.cli",))
    )
    assert wrong == []


def test_the_command_uses_nothing_of_spark() -> None:
    """A receiver's status and stop come from the reader runtime (``reader/``), not from
    ``spark/``: the command runs where pyspark is not installed."""
    graph = import_graph(ROOT, "broker_spark")
    assert arrows_into(graph, ("broker_spark.cli",), ("broker_spark.spark",)) == []


def test_spark_imports_neither_the_command_nor_the_node() -> None:
    graph = import_graph(ROOT, "broker_spark")
    above = ("broker_spark.cli", "broker_spark.node")
    assert arrows_into(graph, ("broker_spark.spark",), above) == []


def test_the_node_and_the_reader_runtime_stand_apart() -> None:
    """Two parts on one floor: a relay node serves readers over the spool protocol, and a
    reader reaches relays over it; neither imports the other."""
    graph = import_graph(ROOT, "broker_spark")
    node, reader = ("broker_spark.node",), ("broker_spark.reader",)
    assert arrows_into(graph, node, reader) + arrows_into(graph, reader, node) == []


#: The facade on top of the core: the package root, the endpoint and what it hands itself to.
FACADE_MODULES = {
    "broker_spark",
    "broker_spark.endpoint",
    "broker_spark.introspect",
    "broker_spark.publisher",
    "broker_spark.store_api",
    "broker_spark.subscriber",
}


def test_the_transports_beside_the_endpoint_know_nothing_of_the_facade() -> None:
    """``websocket/`` and ``zeromq/`` get what they use of an endpoint as its
    ``core/transport_host.TransportHost``; they import neither the endpoint nor the facade
    around it, so a helper both need lives below (``topic.topic_list``)."""
    graph = import_graph(ROOT, "broker_spark")
    assert graph.keys() >= FACADE_MODULES
    transports = ("broker_spark.websocket", "broker_spark.zeromq")
    wrong = sorted(
        f"{module} -> {dep}"
        for module, deps in graph.items()
        if _in(module, transports)
        for dep in deps & FACADE_MODULES
    )
    assert wrong == []


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph.get(name, ()))
    return seen


def _third_party(root: Path, module: str, modules: dict[str, Path]) -> set[str]:
    """The top-level names of what ``module``'s file imports outside the package."""
    out: set[str] = set()
    for node in ast.walk(tree_of(modules[module])):
        if isinstance(node, ast.Import):
            out |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out - {"broker_spark"}


@pytest.mark.parametrize(
    "package",
    [
        "broker_spark.spool",
        "broker_spark.columnar",
        "broker_spark.node",
        "broker_spark.reader",
    ],
)
def test_the_parts_below_spark_run_without_it(package: str) -> None:
    """``broker-spark node`` serves a spool on a machine without Spark, a receiver runs
    without it, and the codecs are codecs: nothing the spool, the column codecs, the node
    or the reader runtime reaches, however indirectly, imports pyspark (or any module of
    ``spark/``)."""
    graph = import_graph(ROOT, "broker_spark")
    modules = modules_of(ROOT, "broker_spark")
    starts = [m for m in graph if m == package or m.startswith(package + ".")]
    assert len(starts) >= 6
    reached = set().union(*(_reachable(graph, m) for m in starts))
    assert not any(m.startswith("broker_spark.spark") for m in reached)
    spark_users = sorted(m for m in reached if "pyspark" in _third_party(ROOT, m, modules))
    assert spark_users == []


def test_the_column_codecs_stand_on_the_data_model_only() -> None:
    """``columnar/`` sits beside the codecs: it uses ``data/``, ``zeek/`` and the ground
    floor, nothing that moves bytes or holds an endpoint."""
    allowed = ("broker_spark.columnar", "broker_spark.data", "broker_spark.zeek")
    ground = {"broker_spark", "broker_spark.errors", "broker_spark.version"}
    graph = import_graph(ROOT, "broker_spark")
    wrong = sorted(
        f"{module} -> {dep}"
        for module, deps in graph.items()
        if module.startswith("broker_spark.columnar")
        for dep in deps
        if not dep.startswith(allowed) and dep not in ground
    )
    assert wrong == []


#: The facade (the endpoint and the modules it hands itself to) and the core it owns.
FACADE = (
    "broker_spark/endpoint.py",
    "broker_spark/introspect.py",
    "broker_spark/store_api.py",
    "broker_spark/publisher.py",
    "broker_spark/subscriber.py",
    "broker_spark/core/",
)


def endpoint_internals() -> set[str]:
    """The underscored attributes an ``Endpoint`` has (set in its methods, or defined)."""
    tree = ast.parse((ROOT / "broker_spark" / "endpoint.py").read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Endpoint")
    names = {
        n.attr
        for n in ast.walk(cls)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
        and n.attr.startswith("_")
        and not n.attr.startswith("__")
    }
    return names | {
        n.name
        for n in cls.body
        if isinstance(n, ast.FunctionDef) and n.name.startswith("_") and not n.name.endswith("__")
    }


def internal_reads(path: Path, internals: set[str], root: Path = ROOT) -> list[str]:
    """``x._name`` reads in ``path`` of a name ``internals`` holds, where ``x`` is not self."""
    found = []
    for node in ast.walk(tree_of(path)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in internals
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            found.append(f"{path.relative_to(root)}:{node.lineno} .{node.attr}")
    return found


def test_nothing_outside_the_facade_reaches_below_the_endpoint() -> None:
    """Only the facade and ``core/`` read an ``Endpoint``'s underscored attributes; the
    rest of the package uses its public methods (``flush``, ``links``, raw subscribers)."""
    internals = endpoint_internals()
    assert {"_core", "_loop", "_publish_src", "_tcp"} <= internals
    reads = [
        read
        for path in sorted((ROOT / "broker_spark").rglob("*.py"))
        if not str(path.relative_to(ROOT)).startswith(FACADE)
        for read in internal_reads(path, internals)
    ]
    assert reads == []


def test_a_reach_below_the_facade_is_found(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f(endpoint):\n    return endpoint._core.links, self._core\n")
    found = internal_reads(bad, {"_core"}, root=tmp_path)
    assert found == ["bad.py:2 ._core"]


#: ``spark/`` by role, bottom up: a module imports only modules of its own floor or below.
SPARK_FLOORS = (
    ("compat", "requirement", "java"),
    ("zeek_schema",),
    ("read", "write"),
    ("tables",),
    ("source", "registration", "zeek_tables", "pipelines", ""),
)


def spark_floor(module: str) -> int | None:
    """The floor of a module of ``broker_spark.spark`` (None: not one of them)."""
    if module != "broker_spark.spark" and not module.startswith("broker_spark.spark."):
        return None
    part = module.removeprefix("broker_spark.spark").lstrip(".").partition(".")[0]
    for floor, parts in enumerate(SPARK_FLOORS):
        if part in parts:
            return floor
    raise AssertionError(f"{module} is on no floor of SPARK_FLOORS: place it")


def test_spark_is_arranged_by_role_and_its_arrows_point_down() -> None:
    """The data source's sub-packages stand on each other in one order: the public face
    (source, registration, zeek_tables, pipelines) on tables/, on read/ and write/, on
    the shared modules; no arrow runs back up (the runtime and the options are
    ``reader/``'s, below all of ``spark/``)."""
    graph = import_graph(ROOT, "broker_spark")
    upward = sorted(
        f"{module} -> {dep}"
        for module, deps in graph.items()
        if (here := spark_floor(module)) is not None
        for dep in deps
        if (there := spark_floor(dep)) is not None and there > here
    )
    assert upward == []


#: The modules of ``spark/`` that reach no pyspark, each with the Spark work that keeps it
#: there. Everything else of ``spark/`` imports pyspark, directly or through what it
#: imports; a runtime that needs no Spark belongs in ``reader/`` (issue 52).
SPARK_WITHOUT_PYSPARK = {
    "broker_spark.spark": "the package: names its public functions, loaded on first use",
    "broker_spark.spark.read": "a package",
    "broker_spark.spark.tables": "a package",
    "broker_spark.spark.write": "a package",
    "broker_spark.spark.java": "finds the Java that Spark's JVM needs, before pyspark starts one",
    "broker_spark.spark.requirement": "says which PySpark to install, where importing it fails",
    "broker_spark.spark.read.local_executors": "tells whether Spark's tasks run in the driver's "
    "JVM, from what the tasks report",
    "broker_spark.spark.read.parallelism": "the Spark cluster's parallelism, from what "
    "register(spark) captured or Spark's environment",
    "broker_spark.spark.tables.freshness": "refreshes a committed table in the Spark sessions "
    "it is given",
    "broker_spark.spark.tables.batch_files": "a micro-batch's staged files under Spark's "
    "checkpoint",
    "broker_spark.spark.tables.delta_stats": "the Delta statistics of the files Spark's tasks "
    "wrote for the table writer",
    "broker_spark.spark.write.row_messages": "the writers' encoder: Spark's Arrow rows into "
    "messages, in Spark's tasks",
    "broker_spark.spark.write.log_rows": "the writers' encoder for Zeek logs (as row_messages)",
    "broker_spark.spark.write.event_rows": "the writers' encoder for typed events (as "
    "row_messages)",
}


def test_spark_holds_what_spark_needs() -> None:
    """Every module of ``spark/`` reaches pyspark, or is listed with the Spark work it does
    without importing it; a listed module that now reaches pyspark leaves the list."""
    graph = import_graph(ROOT, "broker_spark")
    modules = modules_of(ROOT, "broker_spark")
    without = sorted(
        m
        for m in modules
        if spark_floor(m) is not None
        and not any("pyspark" in _third_party(ROOT, r, modules) for r in _reachable(graph, m) | {m})
    )
    assert without == sorted(SPARK_WITHOUT_PYSPARK)
