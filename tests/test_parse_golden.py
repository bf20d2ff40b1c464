"""Golden guard for the parser's speed work: every table and meta field must stay
exactly what the first (single-process, unoptimised) parser produced.

``tests/data/parse_golden.json`` holds, per trace, the row count and a SHA-256 of
every column's values (as JSON text of ``to_pylist()``) and the full ``meta`` (less
the file path). It was computed with the original implementation (commit 27d9521; after
merging main's header-declared options: main's parser at 49e7a1f, via `git archive`);
regenerate it only for an intended output change:
``python -m tests.test_parse_golden --write``.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tracekit.parse import parse_tables
from tracekit.parse.build import Tables

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / "data"
GOLDEN = DATA / "parse_golden.json"
EXTERNAL = ROOT.parents[0] / "shared" / "external-traces"
if not EXTERNAL.is_dir():
    EXTERNAL = Path("/work/shared/external-traces")
SHAPES = DATA / "cpu_gpt_shapes.pt.trace.json.gz"
V100 = EXTERNAL / "v100_rank0_ns_resolution.pt.trace.json.gz"
A100 = EXTERNAL / "a100_alexnet_train.pt.trace.json.gz"


def _make_big() -> Any:
    spec = importlib.util.spec_from_file_location(
        "make_big_trace", ROOT / "benchmarks" / "make_big_trace.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# Each copies trace is built once per process (the 50 MB one takes 6 s of CPU to build and
# under 1 s to parse; three tests parse it) into the first asking test's folder, which
# lives as long as the session. The tests only read it.
_BUILT: dict[tuple[Path, float], Path] = {}


def _copies(src: Path, mb: float) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        dst = _BUILT.get((src, mb))
        if dst is None or not dst.is_file():
            dst = tmp / f"{src.name.split('.')[0]}_copies.json"
            _make_big().build(src, dst, mb)
            _BUILT[(src, mb)] = dst
        return dst

    make.builds = True  # type: ignore[attr-defined]
    return make


# name -> (source file that must exist, how to produce the trace to parse)
CASES: dict[str, tuple[Path, Callable[[Path], Path]]] = {
    "cpu_gpt_shapes": (SHAPES, lambda _t: SHAPES),
    "cpu_gpt_shapes_x3": (SHAPES, _copies(SHAPES, 9.0)),
    "v100": (V100, lambda _t: V100),
    "a100_alexnet": (A100, lambda _t: A100),
    "a100_alexnet_x3": (A100, _copies(A100, 0.8)),
}
FIXTURES = sorted((ROOT / "fixtures").glob("*/*.pt.trace.json.gz"))
for _f in FIXTURES:
    CASES[f"fixture_{_f.parent.name}"] = (_f, lambda _t, f=_f: f)
if FIXTURES:
    _big = max(FIXTURES, key=lambda p: p.stat().st_size)
    _mb = 2.0 * len(gzip.decompress(_big.read_bytes())) / 1e6  # 2-3 copies
    CASES[f"fixture_{_big.parent.name}_copies"] = (_big, _copies(_big, _mb))


def case_params() -> list[Any]:
    """``CASES`` for ``parametrize``: the built (copies) cases on one xdist worker, so that
    each is built once for the tests of both modules that parse it."""
    return [
        pytest.param(n, marks=pytest.mark.xdist_group("parse_copies"))
        if getattr(CASES[n][1], "builds", False)
        else n
        for n in sorted(CASES)
    ]


def digest(t: Tables) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, table in t.items():
        cols = {}
        for field in table.schema:
            text = json.dumps(table.column(field.name).to_pylist()).encode()
            cols[field.name] = hashlib.sha256(text).hexdigest()[:32]
        out[name] = {"rows": table.num_rows, "columns": cols}
    meta = json.loads(json.dumps(t.meta, default=str))
    meta["source"].pop("path", None)
    out["meta"] = meta
    return out


def _golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())  # type: ignore[no-any-return]


def _check(name: str, got: dict[str, Any]) -> None:
    want = _golden()[name]
    assert got["meta"] == want["meta"]
    for table in ("kernels", "ops", "memory", "steps", "runtime"):
        assert got[table]["rows"] == want[table]["rows"], table
        bad = [c for c, h in want[table]["columns"].items() if got[table]["columns"].get(c) != h]
        assert not bad, f"{table}: columns differ from the golden output: {bad}"


@pytest.mark.parametrize("name", case_params())
def test_tables_match_golden(name: str, tmp_path: Path) -> None:
    src, make = CASES[name]
    if not src.is_file():
        pytest.skip(f"{src} not available")
    _check(name, digest(parse_tables(make(tmp_path))))


@pytest.mark.parametrize("chunk", [64 << 10, 1 << 20])
def test_small_chunks_match_golden(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many chunks (many cuts, several per worker) must give the one-chunk answer."""
    if not V100.is_file():
        pytest.skip(f"{V100} not available")
    _check("v100", digest(parse_tables(V100, chunk=chunk)))


def _write() -> None:
    import tempfile

    res = {}
    with tempfile.TemporaryDirectory() as d:
        for name, (src, make) in sorted(CASES.items()):
            if src.is_file():
                res[name] = digest(parse_tables(make(Path(d))))
                print(name, {k: v["rows"] for k, v in res[name].items() if k != "meta"})
    GOLDEN.write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        _write()


@pytest.mark.parametrize("gz", [True, False], ids=["gzip", "plain"])
def test_parallel_path_is_taken_and_matches(gz: bool, tmp_path: Path) -> None:
    """The worker path itself (not its serial fallback) reproduces the golden tables, for
    gzip input (main process decompresses) and plain files (workers read byte ranges)."""
    from tracekit.parse.build import build
    from tracekit.parse.parallel import parse_parallel

    if not V100.is_file():
        pytest.skip(f"{V100} not available")
    src = V100
    if not gz:
        src = tmp_path / "v100.json"
        src.write_bytes(gzip.decompress(V100.read_bytes()))
    par = parse_parallel(src, 512 << 10, 2)
    assert par is not None, "a worker rejected its chunk: the parse fell back to serial"
    tables = build(par.acc, par.header, str(src))
    tables.meta["source"] = {
        "path": str(src),
        "bytes_on_disk": V100.stat().st_size,
        "bytes_json": par.bytes_read,
        "events": par.events,
        "format": "array" if par.array_format else "object",
    }
    _check("v100", digest(tables))


def test_bad_cut_falls_back_to_serial(tmp_path: Path) -> None:
    """A chunk boundary inside nested data is rejected by its worker and repaired by the
    serial reader: same tables as a one-chunk parse."""
    from tests import tracegen as tg

    doc = tg.small_trace()
    for e in doc["traceEvents"]:
        if isinstance(e.get("args"), dict):
            e["args"]["bait"] = [{"ph": "}, {"}, {"ph": 1}, {"name": 2}]
    p = tg.write(doc, tmp_path / "bait.json")
    ref = parse_tables(p, workers=1)
    got = parse_tables(p, chunk=300, workers=2)
    for (name, a), (_, b) in zip(ref.items(), got.items(), strict=True):
        assert a.equals(b), name
