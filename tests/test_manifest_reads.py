"""No raw reads of a run manifest's blocks outside tracekit/manifest.py (issue 35).

An AST scan finds ``man["config"]``, ``manifest.get("metrics")``, ``(manifest or {})
.get("ceilings")``, ``trace.manifest.get("artifacts")`` and the like: a subscript or a
``.get`` with one of the manifest's top-level block names on an expression that names a
manifest. Readers use ``tracekit.manifest.read_manifest``; the collectors write the
manifest as a dictionary (``WRITERS``: their writes, and their reads of what they just
wrote, are exempt); ``ALLOWED`` (now empty) held the modules not converted yet."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = frozenset(
    {"config", "metrics", "ceilings", "artifacts", "optimizer", "distributed", "generate"}
)
NAMES = frozenset({"man", "manifest", "m", "mf", "man_a", "man_b", "manifest_a", "manifest_b"})
# the collectors that build and write the manifest (dict-based this session)
WRITERS = {
    f"collectors/{name}.py"
    for name in (
        "dist_manifest",
        "generate",
        "replay",
        "run",
        "script",
        "script_dist",
        "script_rank",
    )
}
EXEMPT = {"tracekit/manifest.py"} | WRITERS
# readers not converted yet: raw reads may only shrink (none left: every reader is typed)
ALLOWED: dict[str, int] = {}


def _names_manifest(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in NAMES
    if isinstance(node, ast.Attribute):
        return node.attr == "manifest"
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        return _names_manifest(node.values[0])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        # getattr(trace, "manifest", None)
        return node.func.id == "getattr" and any(
            isinstance(a, ast.Constant) and a.value == "manifest" for a in node.args[1:2]
        )
    return False


def _key(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value in BLOCKS


def raw_reads(source: str) -> list[int]:
    """Line numbers of raw manifest-block reads in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if _key(node.slice) and _names_manifest(node.value):
                found.append(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and _key(node.args[0])
            and _names_manifest(node.func.value)
        ):
            found.append(node.lineno)
    return found


def _scan() -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for folder in ("tracekit", "reports", "collectors"):
        for f in sorted((ROOT / folder).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            if rel in EXEMPT:
                continue
            if lines := raw_reads(f.read_text()):
                out[rel] = lines
    return out


def test_no_new_raw_manifest_reads() -> None:
    found = _scan()
    grown = {f: lines for f, lines in found.items() if len(lines) > ALLOWED.get(f, 0)}
    assert not grown, (
        "raw manifest reads (use tracekit.manifest.read_manifest and its typed fields):\n"
        + "\n".join(f"  {f}: lines {lines}" for f, lines in sorted(grown.items()))
    )


def test_allowlist_is_not_stale() -> None:
    """A converted module leaves ALLOWED (the list only shrinks)."""
    found = _scan()
    stale = [f for f in ALLOWED if f not in found]
    assert not stale, f"no raw manifest reads left in {stale}: remove them from ALLOWED"


def test_the_scan_finds_raw_reads() -> None:
    src = (
        'a = man["config"]\n'
        'b = (manifest or {}).get("metrics")\n'
        'c = trace.manifest.get("artifacts")\n'
        'd = getattr(t, "manifest", None)["ceilings"]\n'
        'e = m.get("distributed")\n'
        'f = row["config"]\n'  # not a manifest
        'g = man.get("status_line")\n'  # not a block
    )
    assert raw_reads(src) == [1, 2, 3, 4, 5]
