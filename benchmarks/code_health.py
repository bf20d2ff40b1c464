"""Code-health figures for tracekit: longest functions, largest modules, import cycles.

    python benchmarks/code_health.py             # top 15 functions and modules, all cycles
    python benchmarks/code_health.py --top 40    # more rows
    python benchmarks/code_health.py --lazy      # also count function-level (lazy) imports

Reads the source with ``ast`` only (nothing is imported), so it runs in well under a second.

* **Functions**: every ``def`` (methods and nested functions included) in tracekit/,
  collectors/, reports/, with its length from the ``def`` line to its last line (decorators
  not counted, a nested function's lines count for its parent too). A *plain table* — a
  function whose body, after an optional docstring, is one ``return`` of a literal (dict,
  list, tuple or set built only from constants, names and nested literals) — is listed but
  marked ``table``: the 100-line limit does not apply to it. tests/ and benchmarks/ are
  listed with ``--all`` but are exempt from the limit.
* **Modules**: lines per file.
* **Import cycles**: among tracekit's modules (tracekit/, collectors/ as tracekit.collectors,
  reports/ as tracekit.reports), using module-level imports, the ones that run when the
  module is imported (imports under ``if TYPE_CHECKING:`` are not counted; imports inside
  ``try``/``if`` at module level are). Function-level lazy imports are *not* counted by
  default — they run after every module has finished loading, so they cannot deadlock an
  import — ``--lazy`` adds them. ``import a.b.c`` depends on ``a.b.c`` and on the packages
  ``a.b`` / ``a`` unless the importer lives inside them (a package being imported is
  already in ``sys.modules``); ``from p import n`` depends on ``p.n`` when that is a
  module, and on ``p`` itself when ``n`` is a name that ``p/__init__.py`` defines or when
  ``p`` is not an ancestor of the importer.

Exit status 1 when a limit is broken (outside tests/ and benchmarks/), else 0.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 100
MAX_MODULE_LINES = 700
# source folder -> the package it installs as (pyproject.toml's package-dir)
PACKAGES = {"tracekit": "tracekit", "collectors": "tracekit.collectors", "reports": "tracekit.reports"}
EXEMPT = ("tests", "benchmarks")  # listed, not held to the limits


@dataclass(frozen=True)
class Function:
    path: str  # relative to ROOT, '/'-separated
    line: int
    name: str  # qualified: Class.method, outer.<locals>.inner
    lines: int
    table: bool  # a plain table: exempt from the function limit


@dataclass(frozen=True)
class Module:
    path: str
    name: str  # dotted module name
    lines: int


def source_files(folders: tuple[str, ...] = tuple(PACKAGES)) -> Iterator[Path]:
    for folder in folders:
        base = ROOT / folder
        if base.is_dir():
            yield from sorted(p for p in base.rglob("*.py") if "build" not in p.parts[:-1])


def source_files_with(suffix: str) -> Iterator[Path]:
    for folder in PACKAGES:
        if (ROOT / folder).is_dir():
            yield from sorted((ROOT / folder).rglob("*" + suffix))


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    parts = [PACKAGES.get(rel.parts[0], rel.parts[0]), *rel.parts[1:]]
    parts[-1] = parts[-1].removesuffix(".py")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_literal(node: ast.expr) -> bool:
    if isinstance(node, (ast.Constant, ast.Name, ast.Attribute)):
        return True
    if isinstance(node, ast.UnaryOp):
        return _is_literal(node.operand)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_is_literal(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is None or _is_literal(k) for k in node.keys) and all(
            _is_literal(v) for v in node.values
        )
    return False


def is_plain_table(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """The body is (a docstring and) one ``return`` of a literal: data, not logic."""
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return (
        len(body) == 1
        and isinstance(body[0], ast.Return)
        and body[0].value is not None
        and isinstance(body[0].value, (ast.Dict, ast.List, ast.Tuple, ast.Set))
        and _is_literal(body[0].value)
    )


def functions(path: Path, tree: ast.Module | None = None) -> list[Function]:
    tree = tree or ast.parse(path.read_text(), str(path))
    rel = path.relative_to(ROOT).as_posix()
    found: list[Function] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                end = child.end_lineno or child.lineno
                found.append(
                    Function(
                        rel, child.lineno, prefix + child.name, end - child.lineno + 1,
                        is_plain_table(child),
                    )
                )  # fmt: skip
                visit(child, f"{prefix}{child.name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def _import_nodes(tree: ast.Module, lazy: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Module-level imports (also inside module-level if/try/with blocks, ``if
    TYPE_CHECKING:`` included); with ``lazy`` also those inside functions and classes."""

    def walk(nodes: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield node
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if lazy:
                    yield from (
                        n for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))
                    )
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    yield from walk(getattr(node, field, []))

    return walk(tree.body)


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_graph(lazy: bool = False) -> tuple[dict[str, dict[str, int]], int]:
    """Module -> {tracekit module it imports: line of the first such import}; and the number
    of function-level imports of tracekit modules (counted in the graph only with ``lazy``)."""
    files = list(source_files())
    trees = {module_name(p): (p, ast.parse(p.read_text(), str(p))) for p in files}
    known = set(trees) | {  # compiled extensions, known by their stubs
        module_name(p.with_suffix(".py")) for p in source_files_with(".pyi")
    }
    packages = {n for n, (p, _) in trees.items() if p.name == "__init__.py"}
    graph: dict[str, dict[str, int]] = {n: {} for n in trees}
    lazy_count = 0
    for name, (_path, tree) in trees.items():
        own = set(_ancestors(name))
        package = name if name in packages else name.rpartition(".")[0]
        edges = graph[name]

        def add(target: str, line: int, edges: dict[str, int] = edges, name: str = name) -> None:
            if target in trees and target != name:
                edges.setdefault(target, line)

        def named(target: str, line: int, own: set[str] = own) -> None:
            add(target, line)  # the module the statement names ...
            for mod in _ancestors(target):  # ... and the packages it loads first,
                if mod not in own:  # except those this module lives in (already loading)
                    add(mod, line)

        module_level = {id(n) for n in _import_nodes(tree, lazy=False)}
        for node in _import_nodes(tree, lazy=True):
            if id(node) not in module_level:
                targets = _targets(node, package)
                if not any(t.split(".")[0] == "tracekit" for t in targets):
                    continue
                lazy_count += 1
                if not lazy:
                    continue
            for target in _targets(node, package):
                named(target, node.lineno)
            if isinstance(node, ast.ImportFrom):
                base = _targets(node, package)[0]
                for alias in node.names:
                    if f"{base}.{alias.name}" in known:
                        add(f"{base}.{alias.name}", node.lineno)
    return graph, lazy_count


def _targets(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The module names an import statement names (``from p import n``: ``p``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        up = parts[: len(parts) - node.level + 1]
        base = ".".join(up + ([base] if base else []))
    return [base]


def components(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return sorted(comps)


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Import cycles, as paths ``[a, b, ..., a]``: for every module in a cycle, one
    shortest cycle through it (rotated to start at its smallest name, duplicates dropped)."""
    found: list[list[str]] = []
    for comp in components(graph):
        members = set(comp)
        for start in comp:
            cyc = _shortest_cycle(graph, members, start)
            k = cyc.index(min(cyc[:-1]))
            cyc = [*cyc[k:-1], *cyc[:k], cyc[k]]
            if cyc not in found:
                found.append(cyc)
    return found


def _shortest_cycle(graph: dict[str, dict[str, int]], members: set[str], start: str) -> list[str]:
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v].keys() & members):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [*reversed(path), start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{start} is in no cycle")  # not for a member of a component


def describe(graph: dict[str, dict[str, int]], cycle: list[str]) -> str:
    """``a -> b (a.py:12) -> a (b.py:7)``: each step with the line of the import."""
    files = {module_name(p): p.relative_to(ROOT).as_posix() for p in source_files()}
    steps = [cycle[0]]
    for a, b in zip(cycle, cycle[1:]):
        steps.append(f"{b} ({files[a]}:{graph[a][b]})")
    return " -> ".join(steps)


def scan(folders: tuple[str, ...] = tuple(PACKAGES)) -> tuple[list[Function], list[Module]]:
    funcs: list[Function] = []
    mods: list[Module] = []
    for path in source_files(folders):
        text = path.read_text()
        funcs += functions(path, ast.parse(text, str(path)))
        mods.append(
            Module(path.relative_to(ROOT).as_posix(), module_name(path), len(text.splitlines()))
        )
    return funcs, mods


def _exempt(path: str) -> bool:
    return path.split("/")[0] in EXEMPT


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--top", type=int, default=15, help="rows per list (default 15)")
    ap.add_argument("--all", action="store_true", help="also list tests/ and benchmarks/")
    ap.add_argument("--lazy", action="store_true", help="count function-level imports too")
    args = ap.parse_args(argv)
    folders = (*PACKAGES, *EXEMPT) if args.all else tuple(PACKAGES)
    funcs, mods = scan(folders)
    funcs.sort(key=lambda f: (-f.lines, f.path, f.line))
    mods.sort(key=lambda m: (-m.lines, m.path))

    long = [f for f in funcs if f.lines > MAX_FUNCTION_LINES and not f.table]
    print(
        f"Longest functions (limit {MAX_FUNCTION_LINES} lines, plain tables exempt; "
        f"{len(long)} over, {sum(f.lines > 80 for f in funcs)} over 80):"
    )
    for f in funcs[: args.top]:
        mark = "  table" if f.table else ("  exempt" if _exempt(f.path) else "")
        flag = " *" if f.lines > MAX_FUNCTION_LINES and not f.table and not mark else "  "
        print(f" {flag}{f.lines:5d}  {f.path}:{f.line}  {f.name}{mark}")

    big = [m for m in mods if m.lines > MAX_MODULE_LINES and not _exempt(m.path)]
    print(f"\nLargest modules (limit {MAX_MODULE_LINES} lines; {len(big)} over):")
    for m in mods[: args.top]:
        flag = " *" if m.lines > MAX_MODULE_LINES and not _exempt(m.path) else "  "
        print(f" {flag}{m.lines:5d}  {m.path}")

    graph, lazy = import_graph(args.lazy)
    found = cycles(graph)
    what = "module-level and function-level" if args.lazy else "module-level"
    note = "" if args.lazy else f"; {lazy} function-level lazy imports not counted (--lazy)"
    print(f"\nImport cycles ({what} imports, {len(graph)} modules{note}): {len(found) or 'none'}")
    for c in found:
        print("   " + describe(graph, c))
    over = [f for f in long if not _exempt(f.path)]
    return 1 if over or big or found else 0


if __name__ == "__main__":
    sys.exit(main())
