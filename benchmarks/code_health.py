"""Code-health figures for tracekit: longest functions, largest modules, import cycles.

    python benchmarks/code_health.py             # top 15 functions and modules, all cycles
    python benchmarks/code_health.py --top 40    # more rows
    python benchmarks/code_health.py --all       # also list tests/ and benchmarks/
    python benchmarks/code_health.py --module-level   # cycles of module-level imports only

Reads the source with ``ast`` only (nothing is imported), so it runs in well under a second.
tests/test_code_health.py holds the code to the limits with the same functions.

* **Functions**: every ``def`` (methods and nested functions included) in tracekit/,
  collectors/, reports/, with its length from the ``def`` line to its last line (decorators
  not counted; a nested function's lines count for its parent too). A *plain table* — a
  function whose body, after an optional docstring, is one ``return`` of a dict, list,
  tuple or set literal built only from constants, names and nested literals — is marked
  ``table``: the limit does not apply to it (data, not logic). tests/ and benchmarks/ are
  listed with ``--all`` but exempt: a test's data builder may be long and flat.
* **Modules**: lines per file.
* **Import cycles**: among tracekit's modules (tracekit/, collectors/ as tracekit.collectors,
  reports/ as tracekit.reports), from module-level imports (those in the module body, also
  inside module-level ``if``/``try`` blocks, and ``if TYPE_CHECKING:`` imports: the type
  checker follows them, and a cycle that only typing closes still ties the modules
  together) and from function-level imports: a function that imports a module which
  imports the function's module back is the same tie, only moved to run time (an import
  put inside a function to dodge a cycle does not remove it). ``--module-level`` leaves
  the function-level ones out. An import depends on the module it names: ``from p import
  n`` on ``p`` (its ``__init__``), and on ``p.n`` too when that is a module; ``import
  a.b.c`` on ``a.b.c``. Both also depend on the packages loaded on the way (``a``,
  ``a.b``), except the ones the importing module lives in. So a module that takes a
  sibling from its own package's ``__init__`` at module level (``from tracekit.classify
  import classes``) closes a cycle with an ``__init__`` that imports it; ``import
  tracekit.classify.classes as classes`` or ``from tracekit.classify.classes import X``
  does not. In a function, ``from p import sub`` taking only submodules depends on them
  alone: by the time a function runs, ``p``'s ``__init__`` has finished loading. Each
  cycle is printed with the file:line of every import in it (``in a function`` where only
  a function-level import makes that step).

Exit status 1 when a limit is broken (outside tests/ and benchmarks/), else 0.
"""

from __future__ import annotations

import argparse
import ast
import functools
import itertools
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 100
MAX_MODULE_LINES = 700
# source folder -> the package it installs as (pyproject.toml's package-dir)
PACKAGES = {
    "tracekit": "tracekit",
    "collectors": "tracekit.collectors",
    "reports": "tracekit.reports",
}
EXEMPT = ("tests", "benchmarks")  # listed with --all, not held to the limits


@dataclass(frozen=True)
class Function:
    path: str  # relative to the root, '/'-separated
    line: int
    name: str  # qualified: Class.method, outer.<locals>.inner
    lines: int
    table: bool  # a plain table: exempt from the function limit


@dataclass(frozen=True)
class Module:
    path: str
    lines: int


@dataclass
class Graph:
    """Module -> {module it depends on: line of the first import that makes it so}."""

    edges: dict[str, dict[str, int]]
    files: dict[str, str]  # module -> path relative to the root
    lazy_imports: int  # function-level imports of these modules (edges only with lazy=True)
    lazy: bool = field(default=True)
    # (module, dependency) pairs that only function-level imports make (lazy=True only)
    lazy_only: set[tuple[str, str]] = field(default_factory=set)


def source_files(
    folders: tuple[str, ...] = tuple(PACKAGES), root: Path = ROOT, suffix: str = ".py"
) -> Iterator[Path]:
    for folder in folders:
        if (root / folder).is_dir():
            yield from sorted((root / folder).rglob("*" + suffix))


@functools.cache
def _parsed(path: Path) -> tuple[str, ast.Module]:
    """A file's text and syntax tree (read once for the function scan and the import graph:
    the files do not change while this runs)."""
    text = path.read_text()
    return text, ast.parse(text, str(path))


def module_name(path: Path, root: Path = ROOT, packages: Mapping[str, str] = PACKAGES) -> str:
    rel = path.relative_to(root)
    parts = [packages.get(rel.parts[0], rel.parts[0]), *rel.parts[1:]]
    parts[-1] = parts[-1].rsplit(".", 1)[0]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


# ---------------------------------------------------------------------------- functions


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
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        return False
    value = body[0].value
    return isinstance(value, (ast.Dict, ast.List, ast.Tuple, ast.Set)) and _is_literal(value)


def _block(node: ast.AST) -> Iterator[ast.AST]:
    """The statements directly inside ``node``'s blocks (body, else, finally, except
    handlers, match cases). Definitions only occur there, so expressions are never walked."""
    for name in ("body", "orelse", "finalbody", "handlers", "cases"):
        block = getattr(node, name, None)
        if isinstance(block, list):
            yield from block


def functions(tree: ast.Module, path: str) -> list[Function]:
    """Every function and method in ``tree``, nested ones included."""
    found: list[Function] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in _block(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (child.end_lineno or child.lineno) - child.lineno + 1
                name = prefix + child.name
                found.append(Function(path, child.lineno, name, length, is_plain_table(child)))
                visit(child, f"{name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def scan(
    folders: tuple[str, ...] = tuple(PACKAGES), root: Path = ROOT
) -> tuple[list[Function], list[Module]]:
    """Functions and modules of ``folders``, longest first."""
    funcs: list[Function] = []
    mods: list[Module] = []
    for path in source_files(folders, root):
        text, tree = _parsed(path)
        rel = path.relative_to(root).as_posix()
        funcs += functions(tree, rel)
        mods.append(Module(rel, len(text.splitlines())))
    funcs.sort(key=lambda f: (-f.lines, f.path, f.line))
    mods.sort(key=lambda m: (-m.lines, m.path))
    return funcs, mods


def exempt(path: str) -> bool:
    return path.split("/")[0] in EXEMPT


def long_functions(funcs: list[Function]) -> list[Function]:
    return [f for f in funcs if f.lines > MAX_FUNCTION_LINES and not f.table and not exempt(f.path)]


def large_modules(mods: list[Module]) -> list[Module]:
    return [m for m in mods if m.lines > MAX_MODULE_LINES and not exempt(m.path)]


# ---------------------------------------------------------------------------- imports


def _import_nodes(tree: ast.Module, lazy: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Module-level imports (also inside module-level if/try/with blocks and class bodies,
    ``if TYPE_CHECKING:`` included); with ``lazy`` also those inside functions."""

    def walk(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
        for child in _block(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child
            elif not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) or lazy:
                yield from walk(child)

    return walk(tree)


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _named(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The modules an import statement names (``from p import n``: ``p``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        up = parts[: len(parts) - node.level + 1]
        base = ".".join(up + ([base] if base else []))
    return [base]


def import_graph(
    lazy: bool = True, root: Path = ROOT, packages: Mapping[str, str] = PACKAGES
) -> Graph:
    """The import graph of the modules under ``packages`` (see the module docstring);
    ``lazy``: with function-level imports."""
    folders = tuple(packages)
    trees: dict[str, ast.Module] = {}
    files: dict[str, str] = {}
    inits: set[str] = set()
    for p in source_files(folders, root):
        name = module_name(p, root, packages)
        trees[name] = _parsed(p)[1]
        files[name] = p.relative_to(root).as_posix()
        if p.name == "__init__.py":
            inits.add(name)
    # compiled extensions count as modules, known by their stubs
    stubs = source_files(folders, root, ".pyi")
    known = set(trees) | {module_name(p, root, packages) for p in stubs}
    graph = Graph({n: {} for n in trees}, files, 0, lazy)
    module_level_edges: set[tuple[str, str]] = set()
    for name, tree in trees.items():
        own = set(_ancestors(name))
        package = name if name in inits else name.rpartition(".")[0]
        edges = graph.edges[name]

        def need(
            target: str, line: int, lazy: bool, edges: dict[str, int] = edges, me: str = name
        ) -> None:
            if target in trees and target != me:
                edges.setdefault(target, line)
                if not lazy:
                    module_level_edges.add((me, target))

        module_level = {id(n) for n in _import_nodes(tree, lazy=False)}
        for node in _import_nodes(tree, lazy=True):
            named = _named(node, package)
            in_function = id(node) not in module_level
            if in_function:
                if not any(t in known or t.split(".")[0] in inits for t in named):
                    continue  # not one of ours
                graph.lazy_imports += 1
                if not lazy:
                    continue
            for target in _targets(node, named, known, in_function):
                need(target, node.lineno, in_function)  # the module the statement names ...
                for mod in _ancestors(target):  # ... the packages loaded on the way,
                    if mod not in own:  # except those this module lives in
                        need(mod, node.lineno, in_function)
    graph.lazy_only = {(a, b) for a, deps in graph.edges.items() for b in deps}
    graph.lazy_only -= module_level_edges
    return graph


def _targets(
    node: ast.Import | ast.ImportFrom, named: list[str], known: set[str], in_function: bool
) -> list[str]:
    """The modules an import depends on: those it names, and a submodule taken by name
    (``from p import sub``). In a function, a statement that takes only submodules depends
    on them, not on ``p``'s ``__init__``: it runs once every module-level import is done."""
    if not isinstance(node, ast.ImportFrom):
        return named
    subs = [f"{named[0]}.{a.name}" for a in node.names]
    known_subs = [m for m in subs if m in known]
    if in_function and len(known_subs) == len(subs):
        return known_subs
    return [*named, *known_subs]


def components(edges: Mapping[str, Mapping[str, int]]) -> list[list[str]]:
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
        for w in sorted(edges[v]):
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

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(edges) + 100))
    for v in sorted(edges):
        if v not in index:
            strong(v)
    return sorted(comps)


def cycles(edges: Mapping[str, Mapping[str, int]]) -> list[list[str]]:
    """Import cycles, as paths ``[a, b, ..., a]``: for every module in a cycle, one
    shortest cycle through it (rotated to start at its smallest name, duplicates dropped)."""
    found: list[list[str]] = []
    for comp in components(edges):
        members = set(comp)
        for start in comp:
            cyc = _shortest_cycle(edges, members, start)
            k = cyc.index(min(cyc[:-1]))
            cyc = [*cyc[k:-1], *cyc[:k], cyc[k]]
            if cyc not in found:
                found.append(cyc)
    return found


def _shortest_cycle(
    edges: Mapping[str, Mapping[str, int]], members: set[str], start: str
) -> list[str]:
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges[v].keys() & members):
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


def describe(graph: Graph, cycle: list[str]) -> str:
    """``a -> b (a.py:12) -> a (b.py:7)``: each step with the import that makes it."""
    steps = [cycle[0]]
    for a, b in itertools.pairwise(cycle):
        how = ", in a function" if (a, b) in graph.lazy_only else ""
        steps.append(f"{b} ({graph.files[a]}:{graph.edges[a][b]}{how})")
    return " -> ".join(steps)


# ---------------------------------------------------------------------------- report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--top", type=int, default=15, help="rows per list (default 15)")
    ap.add_argument("--all", action="store_true", help="also list tests/ and benchmarks/")
    ap.add_argument(
        "--module-level", action="store_true", help="cycles of module-level imports only"
    )
    args = ap.parse_args(argv)
    funcs, mods = scan((*PACKAGES, *EXEMPT) if args.all else tuple(PACKAGES))

    long, big = long_functions(funcs), large_modules(mods)
    print(
        f"Longest functions (limit {MAX_FUNCTION_LINES} lines, plain tables exempt; "
        f"{len(long)} over, {sum(f.lines > 80 and not exempt(f.path) for f in funcs)} over 80):"
    )
    for f in funcs[: args.top]:
        mark = "  (table)" if f.table else "  (exempt)" if exempt(f.path) else ""
        flag = " *" if f in long else "  "
        print(f" {flag}{f.lines:5d}  {f.path}:{f.line}  {f.name}{mark}")

    print(f"\nLargest modules (limit {MAX_MODULE_LINES} lines; {len(big)} over):")
    for m in mods[: args.top]:
        flag = " *" if m in big else "  "
        print(f" {flag}{m.lines:5d}  {m.path}{'  (exempt)' if exempt(m.path) else ''}")

    graph = import_graph(lazy=not args.module_level)
    found = cycles(graph.edges)
    what = (
        f"module-level imports; {graph.lazy_imports} function-level ones not counted"
        if args.module_level
        else f"module-level and {graph.lazy_imports} function-level imports"
    )
    print(f"\nImport cycles among {len(graph.edges)} modules ({what}): {len(found) or 'none'}")
    for c in found:
        print("   " + describe(graph, c))
    return 1 if long or big or found else 0


if __name__ == "__main__":
    sys.exit(main())
