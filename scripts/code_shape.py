"""Report the shape of the application code: long modules, long functions and import cycles.

Usage: ``python scripts/code_shape.py [--json]``. Reads the Python files of the apps and the
project package (``portal``, ``gpuinventory``, ``vmrequests``, ``webhooks``), migrations excepted,
as text with :mod:`ast`; runs none of them.

Rules checked (docs/CONVENTIONS.md "Sizes", docs/architecture.md):

- a module of more than ``MAX_MODULE_LINES`` lines;
- a function or method of more than ``MAX_FUNCTION_LINES`` lines (decorators excluded), unless
  its body is a data table (a single return/assignment of a literal);
- an import cycle between modules (imports inside functions included: they still tie the modules
  together, they only postpone the failure);
- the project package importing an app.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("portal", "gpuinventory", "vmrequests", "webhooks")
PROJECT = "portal"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


@dataclass
class Shape:
    """What the check found: ``(path, lines)``, ``(path:function, lines)``, cycles as module lists."""

    modules_over: list[tuple[str, int]] = field(default_factory=list)
    functions_over: list[tuple[str, int]] = field(default_factory=list)
    cycles: list[list[str]] = field(default_factory=list)
    project_imports_apps: list[tuple[str, str]] = field(default_factory=list)


def source_files(root: Path = ROOT) -> Iterator[Path]:
    """Python files of the checked packages, migrations and management commands' tests excluded."""
    for pkg in PACKAGES:
        base = root / pkg
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            if "migrations" in path.parts:
                continue
            yield path


def module_name(path: Path, root: Path = ROOT) -> str:
    """Dotted module name of ``path`` (``pkg/__init__.py`` -> ``pkg``)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_data_table(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1:
        return False
    stmt = body[0]
    value = getattr(stmt, "value", None)
    return isinstance(value, ast.Dict | ast.List | ast.Tuple | ast.Set)


def _function_lengths(tree: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
            if _is_data_table(node):
                continue
            yield f"{prefix}:{node.name}", node.end_lineno - node.lineno + 1


def _imports(tree: ast.AST, current: str, is_package: bool) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = current.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            yield mod
            for alias in node.names:
                yield f"{mod}.{alias.name}"


def _resolve(name: str, known: set[str]) -> str | None:
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def measure(root: Path = ROOT) -> Shape:
    """Measure the tree at ``root``; returns a :class:`Shape` (lists sorted, worst first)."""
    shape = Shape()
    trees: dict[str, tuple[ast.AST, bool]] = {}
    for path in source_files(root):
        text = path.read_text(encoding="utf-8")
        rel = str(path.relative_to(root))
        lines = text.count("\n")
        if lines > MAX_MODULE_LINES:
            shape.modules_over.append((rel, lines))
        tree = ast.parse(text, filename=rel)
        shape.functions_over.extend(
            (n, ln) for n, ln in _function_lengths(tree, rel) if ln > MAX_FUNCTION_LINES
        )
        trees[module_name(path, root)] = (tree, path.name == "__init__.py")
    known = set(trees)
    graph: dict[str, set[str]] = {m: set() for m in known}
    for mod, (module_tree, is_pkg) in trees.items():
        for imported in _imports(module_tree, mod, is_pkg):
            target = _resolve(imported, known)
            if target is None or target == mod:
                continue
            # importing a package's submodule does not import a sibling through the package
            if mod.startswith(target + "."):
                continue
            graph[mod].add(target)
            if mod.split(".")[0] == PROJECT and target.split(".")[0] != PROJECT:
                shape.project_imports_apps.append((mod, target))
    shape.cycles = _cycles(graph)
    shape.modules_over.sort(key=lambda t: -t[1])
    shape.functions_over.sort(key=lambda t: -t[1])
    shape.project_imports_apps = sorted(set(shape.project_imports_apps))
    return shape


def main(argv: list[str] | None = None) -> int:
    """Print the report; exit 1 when a rule is broken."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    shape = measure()
    if args.json:
        print(json.dumps(asdict(shape), indent=2))
    else:
        print(f"modules over {MAX_MODULE_LINES} lines: {len(shape.modules_over)}")
        for name, n in shape.modules_over:
            print(f"  {name}: {n}")
        print(f"functions over {MAX_FUNCTION_LINES} lines: {len(shape.functions_over)}")
        for name, n in shape.functions_over:
            print(f"  {name}: {n}")
        print(f"import cycles: {len(shape.cycles)}")
        for comp in shape.cycles:
            print("  " + " <-> ".join(comp))
        print(f"project package imports of apps: {len(shape.project_imports_apps)}")
        for src, dst in shape.project_imports_apps:
            print(f"  {src} -> {dst}")
    broken = shape.modules_over or shape.functions_over or shape.cycles or shape.project_imports_apps
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
