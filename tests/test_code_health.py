"""The code stays easy to live in (issue 16): no function over 100 lines unless it is a plain
table, no module over 700 lines, no import cycle among tracekit's modules.

The figures come from benchmarks/code_health.py (``ast`` only, well under a second), which
prints them; its docstring says what counts: a *plain table* is a function whose body is
one ``return`` of a literal; cycles count module-level imports (``TYPE_CHECKING`` ones
included) and function-level ones (an import moved into a function to dodge a cycle still
ties the two modules together). tests/ and benchmarks/ are exempt from the limits.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("code_health", ROOT / "benchmarks/code_health.py")
assert _spec is not None and _spec.loader is not None
H = importlib.util.module_from_spec(_spec)
sys.modules["code_health"] = H  # dataclasses look their module up while the class is built
_spec.loader.exec_module(H)


@pytest.fixture(scope="module")
def scanned() -> Any:
    return H.scan()


@pytest.fixture(scope="module")
def graph() -> Any:
    return H.import_graph()  # module-level and function-level imports


def test_no_function_over_100_lines(scanned: Any) -> None:
    long = H.long_functions(scanned[0])
    assert not long, "split these (or make them plain tables):\n" + "\n".join(
        f"  {f.path}:{f.line} {f.name}: {f.lines} lines" for f in long
    )


def test_no_module_over_700_lines(scanned: Any) -> None:
    big = H.large_modules(scanned[1])
    assert not big, "split these:\n" + "\n".join(f"  {m.path}: {m.lines} lines" for m in big)


def test_no_import_cycle(graph: Any) -> None:
    """No cycle at any level, function-level imports included, and no allowlist: an import
    moved into a function still ties the two modules (docs/architecture.md)."""
    found = H.cycles(graph.edges)
    assert not found, "import cycles:\n" + "\n".join("  " + H.describe(graph, c) for c in found)


def test_no_import_cycle_at_module_level() -> None:
    """No exception here: a module-level cycle can fail at import time."""
    g = H.import_graph(lazy=False)
    found = H.cycles(g.edges)
    assert not found, "import cycles:\n" + "\n".join("  " + H.describe(g, c) for c in found)


def _function(src: str) -> ast.FunctionDef:
    node = ast.parse(textwrap.dedent(src)).body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


def test_plain_table_is_recognised() -> None:
    table = _function(
        '''
        def rules():
            """A data table."""
            return {"gemm": ("mm", "addmm"), "softmax": [1, -2.5, None], K.X: {"a": True}}
        '''
    )
    assert H.is_plain_table(table)
    for logic in (
        "def f():\n    return {'a': g(1)}",  # a call: logic
        "def f():\n    x = 1\n    return [x]",  # more than the return
        "def f():\n    return [i for i in range(3)]",  # a comprehension
        "def f():\n    return 'text'",  # not a collection
        "def f():\n    return",
    ):
        assert not H.is_plain_table(_function(logic)), logic


def test_function_lengths_count_nested_and_methods() -> None:
    src = "class A:\n    def m(self):\n        def inner():\n            pass\n        return 1\n"
    found = {f.name: f.lines for f in H.functions(ast.parse(src), "x.py")}
    assert found == {"A.m": 4, "A.m.<locals>.inner": 2}


def _package(root: Path, files: dict[str, str], lazy: bool = False) -> Any:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return H.import_graph(lazy=lazy, root=root, packages={"pkg": "pkg"})


def test_import_cycles_follow_the_module_each_import_names(tmp_path: Path) -> None:
    g = _package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.a import A\nfrom pkg.b import B\n",
            "pkg/a.py": "from pkg import c\nA = 1\n",  # own package's __init__: a cycle
            "pkg/b.py": "import pkg.c as c\nfrom pkg.c import C\nB = 2\n",  # not one
            "pkg/c.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from pkg.d import D\n"  # counted
                "def f():\n    from pkg.e import E\n"  # lazy: not counted
            ),
            "pkg/d.py": "from pkg.c import f\nD = 3\n",
            "pkg/e.py": "from pkg.c import f\nE = 4\n",
        },
    )
    found = H.cycles(g.edges)
    assert found == [["pkg", "pkg.a", "pkg"], ["pkg.c", "pkg.d", "pkg.c"]]
    assert H.describe(g, found[0]) == "pkg -> pkg.a (pkg/__init__.py:1) -> pkg (pkg/a.py:1)"
    assert g.lazy_imports == 1
    lazy = H.import_graph(lazy=True, root=tmp_path, packages={"pkg": "pkg"})
    assert ["pkg.c", "pkg.e", "pkg.c"] in H.cycles(lazy.edges)


def test_relative_imports_resolve_against_the_package(tmp_path: Path) -> None:
    g = _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/sub/__init__.py": "from .x import X\n",
            "pkg/sub/x.py": "from . import y\nfrom ..z import Z\nX = 1\n",
            "pkg/sub/y.py": "",
            "pkg/z.py": "Z = 1\n",
        },
    )
    assert g.edges["pkg.sub.x"] == {"pkg.sub": 1, "pkg.sub.y": 1, "pkg.z": 2}
    assert H.cycles(g.edges) == [["pkg.sub", "pkg.sub.x", "pkg.sub"]]


def test_function_level_cycles_are_seen_by_default(tmp_path: Path) -> None:
    """A cycle closed by an import inside a function (the shape of cli <-> cli_run and
    ranks.cluster <-> ranks.engine) is found, and marked so; a function taking a sibling
    submodule through its package (``from . import draw``) depends on that module only."""
    g = _package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.run import go\n",
            "pkg/run.py": "from pkg.cli_run import cmd\ndef go():\n    from . import draw\n",
            "pkg/cli_run.py": "def cmd():\n    from pkg.run import go\n    return go\n",
            "pkg/draw.py": "X = 1\n",
        },
        lazy=True,
    )
    found = H.cycles(g.edges)
    assert found == [["pkg.cli_run", "pkg.run", "pkg.cli_run"]]
    assert H.describe(g, found[0]) == (
        "pkg.cli_run -> pkg.run (pkg/cli_run.py:2, in a function) -> pkg.cli_run (pkg/run.py:1)"
    )
    assert g.lazy_only == {("pkg.cli_run", "pkg.run"), ("pkg.run", "pkg.draw")}
    assert H.cycles(H.import_graph(lazy=False, root=tmp_path, packages={"pkg": "pkg"}).edges) == []
    assert H.cycles(H.import_graph(root=tmp_path, packages={"pkg": "pkg"}).edges) == found
