"""One writer of the run manifest: ``tracekit.manifest.write_manifest`` (issue 35).

``collect``, ``tracekit run``, ``tracekit.profile()``, the multi-rank launchers and the
counter replay all write ``manifest.json`` (and a rank's ``rank<R>.manifest.json``) through
it: ``schema_version`` stamped in one place, the dictionary checked against the typed
reader, the file replaced atomically. An AST scan finds any other write of a manifest file
(``atomic_write_json(tmp / MANIFEST, m)``, ``(d / "manifest.json").write_text(...)``,
``open(mpath, "w")``, ``shutil.copy2(src, d / "manifest.json")``, ...)."""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path

import pytest

from tracekit.manifest import (
    MANIFEST,
    SCHEMA_VERSION,
    ManifestError,
    check_manifest,
    read_manifest,
    write_manifest,
)

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("tracekit", "collectors", "reports", "benchmarks")
WRITER = "tracekit/manifest.py"
# writes whose target is the call's receiver (p.write_text) or an argument (f(path, ...))
METHODS = {"write_text", "write_bytes"}
FIRST_ARG = {"atomic_write_json", "atomic_write_text", "atomic_write_bytes", "atomic_file"}
SECOND_ARG = {"copy", "copy2", "copyfile", "move", "symlink", "link"}
TARGETS = {"rename", "replace", "symlink_to", "hardlink_to"}  # Path.rename(target)
MENTIONS = re.compile(r"manifest\.json|\bMANIFEST\b|manifest_name|manifest_path")


def _path_names(tree: ast.AST) -> set[str]:
    """Names bound anywhere in the module to a manifest file's path."""
    out = set()
    for node in ast.walk(tree):
        is_assign = isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
        if is_assign and MENTIONS.search(ast.unparse(node.value)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out |= {t.id for t in targets if isinstance(t, ast.Name)}
    return out - {"MANIFEST"}


def _is_manifest_path(expr: ast.expr, names: set[str]) -> bool:
    if MENTIONS.search(ast.unparse(expr)):
        return True
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(expr))


def _targets(call: ast.Call) -> list[ast.expr]:
    """The path(s) a call writes to, if it is a write."""
    f, args = call.func, call.args
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    if isinstance(f, ast.Attribute) and name in METHODS:
        return [f.value]
    if name in FIRST_ARG and args:
        return [args[0]]
    if name in SECOND_ARG and len(args) >= 2:
        return [args[1]]
    if isinstance(f, ast.Attribute) and name in TARGETS and len(args) == 1:  # not str.replace
        return [args[0]]
    if name == "replace" and isinstance(f, ast.Attribute) and len(args) == 2:  # os.replace
        return [args[1]] if ast.unparse(f.value) == "os" else []
    if name == "open" and args:
        mode = args[1] if len(args) > 1 else next((k.value for k in call.keywords), None)
        if isinstance(mode, ast.Constant) and set(str(mode.value)) & set("wax+"):
            return [args[0]]
    return []


def manifest_writes(source: str) -> list[int]:
    """Line numbers of the writes of a manifest file in ``source``."""
    tree = ast.parse(source)
    names = _path_names(tree)
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and any(_is_manifest_path(t, names) for t in _targets(node))
    )


def _scan(root: Path = ROOT) -> dict[str, list[int]]:
    out = {}
    for folder in FOLDERS:
        for f in sorted((root / folder).rglob("*.py")):
            rel = f.relative_to(root).as_posix()
            if rel != WRITER and (lines := manifest_writes(f.read_text())):
                out[rel] = lines
    return out


def test_only_write_manifest_writes_a_manifest() -> None:
    found = _scan()
    assert not found, (
        "manifest.json written outside tracekit.manifest.write_manifest:\n"
        + "\n".join(f"  {f}: lines {lines}" for f, lines in sorted(found.items()))
    )


def test_the_collectors_use_the_writer() -> None:
    """Each collector that produces a run folder calls ``write_manifest``."""
    users = {
        f.relative_to(ROOT).as_posix()
        for f in (ROOT / "collectors").rglob("*.py")
        if "write_manifest(" in f.read_text()
    }
    want = {"collect", "session", "distributed", "script_dist", "script_rank", "replay"}
    assert {f"collectors/{n}.py" for n in want} <= users


@pytest.mark.parametrize(
    ("src", "lines"),
    [
        ('atomic_write_json(tmp / MANIFEST, m)\n', [1]),
        ('(d / "manifest.json").write_text(s)\n', [1]),
        ('mpath = run / "manifest.json"\nx = 1\natomic_write_json(mpath, m)\n', [3]),
        ('with open(run_dir / "manifest.json", "w") as f:\n    json.dump(m, f)\n', [1]),
        ('shutil.copy2(src, dest / "manifest.json")\n', [1]),
        ('os.replace(tmp, d / "manifest.json")\n', [1]),
        ("atomic_write_json(run_dir / rank_manifest_name(r), m)\n", [1]),
        # reads, and writes of other files, are not writes of a manifest
        ('m = json.loads((d / "manifest.json").read_text())\n', []),
        ('atomic_write_json(out / "summary.json", {"manifest": manifest})\n', []),
        ('msg = text.replace(f"{d}/{MANIFEST}", "x")\n', []),
        ('with open(d / "manifest.json") as f:\n    m = json.load(f)\n', []),
    ],
)  # fmt: skip
def test_the_scan_sees_a_write(src: str, lines: list[int]) -> None:
    assert manifest_writes(src) == lines


def _minimal(**extra: object) -> dict[str, object]:
    return {"status": "ok", "error": None, "config": {"batch": 8, "seq": 128}, **extra}


def test_write_manifest_stamps_checks_and_replaces(tmp_path: Path) -> None:
    path = tmp_path / MANIFEST
    path.write_text("{}")
    got = write_manifest(path, _minimal(metrics={"step_time_ms": {"median": 3.5, "n": 4}}))
    doc = json.loads(path.read_text())
    assert next(iter(doc)) == "schema_version" and doc["schema_version"] == SCHEMA_VERSION
    assert got.config.batch == 8 and got.metrics.step_median_ms == 3.5
    assert read_manifest(tmp_path) == got
    assert [p.name for p in tmp_path.iterdir()] == [MANIFEST]  # no temporary file left
    assert oct(os.stat(path).st_mode & 0o777) != oct(0o600)  # not mkstemp's private mode


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        ({"error": None}, "status"),
        (_minimal(schema_version=2), "schema_version 2"),
        (_minimal(config={"batch": "8"}), "config.batch"),
        (_minimal(config={"batch": 0}), "config.batch"),
        (_minimal(metrics={"step_time_ms": {"median": -1.0}}), "metrics.step_time_ms"),
        (_minimal(metrics={"step_time_ms": {"median": "fast"}}), "metrics.step_time_ms.median"),
        (_minimal(metrics=[1, 2]), "metrics"),
        (_minimal(ceilings={"memory_bandwidth_Bps": -5}), "ceilings.memory_bandwidth_Bps"),
        (_minimal(artifacts={"traces": ["a.json", 3]}), "artifacts.traces"),
    ],
)
def test_write_manifest_refuses_what_readers_would_misread(
    tmp_path: Path, doc: dict[str, object], why: str
) -> None:
    path = tmp_path / MANIFEST
    with pytest.raises(ManifestError, match=re.escape(why)):
        write_manifest(path, doc, strict=True)
    assert not path.exists()


def test_a_run_is_never_lost_to_an_entry_its_readers_would_drop(tmp_path: Path) -> None:
    """Outside the tests a collector's bad entry is written and named, not the run lost."""
    path = tmp_path / MANIFEST
    write_manifest(path, _minimal(config={"batch": "8"}), strict=False)
    doc = json.loads(path.read_text())
    assert doc["config"] == {"batch": "8"}
    assert len(doc["manifest_problems"]) == 1 and "config.batch" in doc["manifest_problems"][0]
    with pytest.raises(ManifestError, match="status"):  # no manifest at all: refused
        write_manifest(path, {"error": None}, strict=False)


def test_write_manifest_wants_a_manifest_name(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"ends in manifest\.json"):
        write_manifest(tmp_path / "summary.json", _minimal())
    write_manifest(tmp_path / "rank1.manifest.json", _minimal())


def test_every_fixture_passes_the_check() -> None:
    """The check accepts what the collectors wrote (every bundled run folder)."""
    found = sorted(ROOT.glob("fixtures/*/manifest.json"))
    assert len(found) >= 10
    for p in found:
        doc = json.loads(p.read_text())
        assert check_manifest(doc) == read_manifest(p), p


def test_write_manifest_keeps_the_bytes_of_a_fixture(tmp_path: Path) -> None:
    """Written again, a fixture's manifest is the same bytes (the format is unchanged)."""
    for name in ("cpu-tiny-fp32-naive", "h200-run-resnet50-b64-bf16"):
        src = ROOT / "fixtures" / name / MANIFEST
        write_manifest(tmp_path / MANIFEST, json.loads(src.read_text()))
        assert (tmp_path / MANIFEST).read_bytes() == src.read_bytes(), name
