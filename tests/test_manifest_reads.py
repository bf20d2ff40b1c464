"""No raw reads of a run manifest's blocks outside tracekit/manifest.py (issue 35).

An AST scan finds ``man["config"]``, ``manifest.get("metrics")``, ``(manifest or {})
.get("ceilings")``, ``trace.manifest.get("artifacts")`` and the like: a subscript or a
``.get`` with one of the manifest's top-level block names on an expression that names a
manifest; and key-path helpers: a call ``f(man, "metrics", "step_time_ms")`` (a manifest
then a block name), and anywhere (collectors too) the definition of a ``def f(d, *keys)``
that walks ``keys`` with ``.get`` or ``[]``. Readers use ``tracekit.manifest.read_manifest``;
the collectors build the manifest as a dictionary and write it through
``tracekit.manifest.write_manifest`` (``WRITERS``: their builds, and their reads of what they
just wrote, are exempt); ``ALLOWED`` (now empty) held the modules not converted yet."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = frozenset(
    {
        *("config", "metrics", "ceilings", "artifacts", "optimizer", "distributed", "generate"),
        *("observer", "device", "versions", "model", "profiler", "schedule_shortened"),
    }
)
NAMES = frozenset({"man", "manifest", "m", "mf", "man_a", "man_b", "manifest_a", "manifest_b"})
# the collectors that build the manifest as a dict (tracekit.manifest.write_manifest writes it)
WRITERS = {
    f"collectors/{name}.py"
    for name in (
        "collect",
        "dist_manifest",
        "generate",
        "replay",
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
    if isinstance(node, ast.IfExp):  # manifest if isinstance(manifest, dict) else None
        return _names_manifest(node.body)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        # getattr(trace, "manifest", None)
        return node.func.id == "getattr" and any(
            isinstance(a, ast.Constant) and a.value == "manifest" for a in node.args[1:2]
        )
    return False


def _key(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value in BLOCKS


def _path_call(node: ast.Call) -> bool:
    """``f(man, "metrics", ...)``: a key-path helper handed a manifest and a block name."""
    return len(node.args) >= 2 and _names_manifest(node.args[0]) and _key(node.args[1])


def _reads_key(n: ast.AST, key: str) -> bool:
    """``x[key]`` (a load) or ``x.get(key)``."""
    if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load):
        return isinstance(n.slice, ast.Name) and n.slice.id == key
    return (
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "get"
        and bool(n.args)
        and isinstance(n.args[0], ast.Name)
        and n.args[0].id == key
    )


def _walks_keys(fn: ast.FunctionDef) -> bool:
    """``def f(d, *keys)`` whose body loops ``for k in keys`` reading ``.get(k)`` or ``d[k]``."""
    if fn.args.vararg is None:
        return False
    keys = fn.args.vararg.arg
    for loop in ast.walk(fn):
        if (
            isinstance(loop, ast.For)
            and isinstance(loop.iter, ast.Name)
            and loop.iter.id == keys
            and isinstance(loop.target, ast.Name)
        ):
            k = loop.target.id
            if any(_reads_key(n, k) for n in ast.walk(loop)):
                return True
    return False


def path_helpers(source: str) -> list[int]:
    """Line numbers of key-path helper definitions (``def _get(d, *keys)``) in ``source``."""
    tree = ast.parse(source)
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and _walks_keys(n)]


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
        ) or (isinstance(node, ast.Call) and _path_call(node)):
            found.append(node.lineno)
    return sorted(found)


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


def test_no_key_path_helpers() -> None:
    """The ``_get(man, "metrics", "step_time_ms", "median")`` helpers are gone: a manifest
    figure is a typed field of tracekit/manifest.py (add one there)."""
    found = {}
    for folder in ("tracekit", "reports", "collectors"):
        for f in sorted((ROOT / folder).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            if rel != "tracekit/manifest.py" and (lines := path_helpers(f.read_text())):
                found[rel] = lines
    assert not found, f"key-path helpers (use tracekit.manifest's typed fields): {found}"


def test_the_scan_finds_path_helpers() -> None:
    src = (
        "def _get(d, *keys):\n"
        "    for k in keys:\n"
        "        d = d.get(k) if isinstance(d, dict) else None\n"
        "    return d\n"
        "def dig(d, *path):\n"
        "    for k in path:\n"
        "        d = d[k]\n"
        "    return d\n"
        "def paths(*paths):\n"  # a vararg not walked as keys
        "    return [str(p) for p in paths]\n"
        "def cost(self, *names):\n"  # a vararg stored under, not read
        "    for n in names:\n"
        "        self.formulas[n] = 1\n"
    )
    assert path_helpers(src) == [1, 5]
    calls = (
        'a = _get(man, "artifacts", "memory_timeline")\n'
        'b = _get(manifest if isinstance(manifest, dict) else None, "metrics", "x")\n'
        'c = dig(trace.manifest, "observer")\n'
        'd = _get(row, "metrics")\n'  # not a manifest
        'e = f(man, "label")\n'  # not a block
        "g = manifest_or_empty(man)\n"
    )
    assert raw_reads(calls) == [1, 2, 3]


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


def test_the_fields_that_replaced_path_reads() -> None:
    """What summary/build.py and ranks/{scaling,measured}.py read, typed (a fixture)."""
    from tracekit.manifest import read_manifest

    m = read_manifest(ROOT / "fixtures/h100x2-ddp-gpt2s-b8-s128-fp32-costed")
    assert m is not None and m.distributed is not None
    assert m.config.gpus == 2 and m.metrics.world_size == 2
    assert m.metrics.tokens_per_s_per_gpu and m.metrics.tokens_per_s_per_gpu > 1000
    assert m.versions.torch and m.versions.torch.startswith("2.")
    assert (m.device_type, m.device_name) == ("cuda", "NVIDIA H100 80GB HBM3")
    assert (
        m.artifacts.memory_timeline
        and m.artifacts.memory_timeline_pass == "category step (with stacks)"
    )
    steps = m.distributed.rank_step_medians()
    assert set(steps) == {0, 1} and all(v is not None and 40 < v < 50 for v in steps.values())
    assert m.distributed.comm_cost is not None and m.distributed.comm_cost.get("status")


def test_the_new_fields_read_forgivingly() -> None:
    """A missing or mistyped value is None (or empty), never a KeyError or TypeError."""
    from tracekit.manifest import Observer, as_manifest

    bad = as_manifest(
        {
            "config": {"gpus": "2"},
            "metrics": {"tokens_per_s_per_gpu": "x", "world_size": None, "memory_method": 3,
                        "avg_allocated_bytes": [1], "exposed_comm_pct": True},
            "artifacts": {"memory_timeline": 5, "memory_timeline_absent": None},
            "observer": {"residual": "slow", "left_behind": "cuda", "rank": "1"},
            "versions": ["2.11"],
            "device": {"type": 1},
            "schedule_shortened": {"ran": 3},
            "distributed": {"ranks": [7, {"rank": "1", "metrics": {"step_time_ms": 5}},
                                      {"rank": 3, "metrics": []}], "comm_cost": "ok"},
        }
    )  # fmt: skip
    assert bad.config.gpus is None and bad.metrics.tokens_per_s_per_gpu is None
    met = bad.metrics
    assert (met.world_size, met.memory_method, met.avg_allocated_bytes) == (None,) * 3
    assert met.exposed_comm_pct is None and bad.artifacts.memory_timeline is None
    assert bad.observer == Observer(raw=bad.raw["observer"])
    assert bad.observer.residual_sentence is None and not bad.observer.residual_beyond_3pct
    assert bad.versions.torch is None and bad.device_type is None and bad.device_name is None
    assert bad.schedule_shortened == []
    assert bad.distributed is not None and bad.distributed.comm_cost is None
    assert bad.distributed.rank_step_medians() == {0: None, 1: 5.0, 3: None}
    assert as_manifest(None).observer is None and as_manifest("manifest.json").status is None
