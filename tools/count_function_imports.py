"""Count the imports of broker_spark modules made inside functions (issue 52, item 4).

Usage: ``python tools/count_function_imports.py [ROOT] [-v]``. "Across folders" means
the importing module's folder (``broker_spark.cli``, ``broker_spark.node``, ...; the
package's own top-level modules are one folder) differs from the imported one's. ``-v``
lists each such import as ``file:line -> module``. An import inside a function should
say why it is there (an optional dependency, or measured start-up time).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def folder(dotted: str, root: Path) -> str:
    """``broker_spark.X`` for a module in (or the package of) subfolder X, else ``broker_spark``."""
    parts = [p for p in dotted.split(".") if p != "__init__"]
    if len(parts) == 2 and (root / parts[0] / parts[1]).is_dir():
        return dotted
    return ".".join(parts[:2]) if len(parts) > 2 else parts[0]


def main(argv: list[str]) -> int:
    args = [a for a in argv if a != "-v"]
    root = Path(args[0] if args else ".")
    total = 0
    rows: list[str] = []
    for path in sorted((root / "broker_spark").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        seen: set[int] = set()
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and not node.level:
                    target = node.module or ""
                elif isinstance(node, ast.Import):
                    target = node.names[0].name
                else:
                    continue
                if not target.startswith("broker_spark") or id(node) in seen:
                    continue
                seen.add(id(node))
                total += 1
                if folder(target, root) != folder(module, root):
                    rows.append(f"{path.relative_to(root)}:{node.lineno} -> {target}")
    if "-v" in argv:
        print("\n".join(rows))
    print(f"in-function imports of broker_spark: {total}; across folders: {len(rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
