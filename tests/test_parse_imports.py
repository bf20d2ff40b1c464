"""`tracekit parse` stays lean: its import time counts in every run; its modules import
each other without a cycle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from . import tracegen as tg

ROOT = Path(__file__).resolve().parents[1]


def test_parse_command_imports_no_pandas_matplotlib_torch(tmp_path: Path) -> None:
    p = tg.write(tg.small_trace(), tmp_path / "t.json")
    code = (
        "import sys; from tracekit.cli import main; "
        f"rc = main(['parse', {str(p)!r}, '-o', {str(tmp_path / 'out')!r}]); "
        "heavy = sorted(m for m in ('pandas', 'matplotlib', 'torch') if m in sys.modules); "
        "print(rc, heavy)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.strip().splitlines()[-1] == "0 []", r.stdout + r.stderr


def test_pandas_still_available_after_the_probe_is_skipped() -> None:
    code = (
        "import sys; from tracekit.parse import skip_pandas_probe; skip_pandas_probe(); "
        "assert 'pandas' not in sys.modules; import pyarrow as pa; "
        "print(type(pa.table({'a': [1]}).to_pandas()).__name__)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.strip() == "DataFrame", r.stdout + r.stderr


PARSE = ROOT / "tracekit" / "parse"


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _edges(path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``path`` imports anywhere in it (TYPE_CHECKING and
    function-level imports too); ``from pkg import sub`` counts as importing ``pkg.sub``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.add(sub if sub in modules else node.module)
    return found & modules


def test_parse_modules_import_each_other_without_a_cycle() -> None:
    files = {_module(p): p for p in PARSE.glob("*.py")}
    native = {_module(p) for p in PARSE.glob("*.pyi")} - set(files)  # the C scanner: a leaf
    graph = {m: _edges(p, set(files) | native) - {m} for m, p in files.items()}
    graph.update((m, set()) for m in native)
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            assert state.get(n) != 1, "import cycle: " + " -> ".join([*path, m, n])
            if n not in state:
                visit(n, [*path, m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
