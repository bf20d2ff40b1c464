"""tracekit report on the real fixtures (H200 GPT-2-small runs and a CPU run).

Time shares are checked against an independent per-row sum of the classified kernels and
against the classify stage's own class table; the memory peak against the raw JSON.
"""

from __future__ import annotations

import gzip
import html
import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import msgspec
import pytest
from rich.console import Console

from tracekit.commands.report import report
from tracekit.parse import find_trace, load
from tracekit.reports import terminal

classify_mod = pytest.importorskip("tracekit.classify")

ROOT = Path(__file__).resolve().parents[1]
# The GPU runs; of the two generate runs only gpt2-small's: gpt2-medium's goes through the
# same report (its kernel names are among gpt2-small's), and its summary figures are
# checked in tests/test_generate_fixtures.py.
RUNS = sorted(
    p.parent
    for p in (ROOT / "fixtures").glob("h200-*/manifest.json")
    if not p.parent.name.startswith("h200-gen-gpt2m-")
)
FILES = {
    "summary.json",
    "report.html",
    "plots/time_share.png",
    "plots/roofline.png",
    "plots/memory_timeline.png",
    "classes.parquet",
    "operators.parquet",
    "kernels.parquet",
    "steps.parquet",
}


class _Event(msgspec.Struct):
    name: str = ""
    args: dict[str, Any] = {}


class _Trace(msgspec.Struct):
    traceEvents: list[_Event]


def _raw_peak(trace: Path) -> int | None:
    # the raw JSON read independently of tracekit.parse (msgspec keeps only these fields)
    events = msgspec.json.decode(gzip.decompress(trace.read_bytes()), type=_Trace).traceEvents
    vals = [
        e.args["Total Allocated"]
        for e in events
        if e.name == "[memory]" and e.args.get("Device Type") == 1
    ]
    return max(vals) if vals else None


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_fixture_report(run: Path, tmp_path: Path) -> None:
    res = report(run, tmp_path / "out", tensorboard=tmp_path / "tb")
    out = tmp_path / "out"
    gen = "-gen-" in run.name  # a generate run: one more plot, its decode steps' bandwidth
    files = FILES | ({"plots/decode_bandwidth.png"} if gen else set())
    assert {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()} == files
    assert res.events is not None and res.plugin_trace is not None
    doc = json.loads((out / "summary.json").read_text())
    assert [str(v) for v in res.summary.broken] == []  # summary/invariants.py
    if run.name.startswith("h200-gpt2s-"):  # tracekit's own GPT (run-* are user scripts)
        assert {"softmax", "layernorm", "gemm"} <= set(doc["time_share_pct"])

    trace = load(run)
    cls = classify_mod.classify(trace, manifest=trace.manifest)
    per: dict[str, int] = defaultdict(int)
    for c, d, s in zip(cls.kernels["class"], cls.kernels["dur"], cls.kernels["step"], strict=True):
        if int(s) in doc["steps"]:
            per[str(c)] += int(d)
    total = sum(per.values())
    if total == 0:  # the CPU run: no GPU activity
        assert all(v is None for v in doc["time_share_pct"].values())
        assert doc["gpu_idle_pct"] is None and not doc["launch_bound"]
    else:
        for c, d in per.items():
            assert doc["time_share_pct"][c] == pytest.approx(100 * d / total, abs=0.1)
        own = cls.classes.set_index("class")["time_share_pct"]
        for c, v in doc["time_share_pct"].items():
            assert v == pytest.approx(float(own.get(c, 0.0)), abs=0.1), c
        assert doc["gpu_time_ms_per_step"] == pytest.approx(total / 1e6 / len(doc["steps"]))

    peak = _raw_peak(find_trace(run)[0])
    if peak is not None:
        assert doc["memory"]["peak_allocated_bytes"] == peak
        dynamic = peak - doc["memory"]["floor_allocated_bytes"]
        tokens = doc["tokens_per_step"]  # b8 x s128, none known (the ResNet script), or
        assert tokens in ((8,) if gen else (1024, None))  # one new token per sequence
        per_token = doc["memory"]["activation_bytes_per_token"]
        assert per_token == (dynamic / tokens if tokens else None)

    c = Console(width=80, record=True, color_system=None)
    terminal.render(res.summary, c)
    lines = c.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    # the first screen answers: the verdict with its evidence, bandwidth and its share of the
    # roof, where the traffic and the memory go
    first = [line.split(" ")[0] for line in lines[:32]]
    for label in ("verdict", "bandwidth", "compute", "intensity", "traffic", "memory"):
        assert label in first, label
    assert doc["step_summary"]["verdict"] in lines[first.index("verdict")]
    more = len(doc["step_summary"]["evidence"]) - terminal.EVIDENCE_SHOWN
    assert any(f"· {more} more in report.html" in line for line in lines) == (more > 0)
    assert sum("launch/host-bound (the GPU waits" in n for n in res.summary.notes) <= 1
    # no share of a roof above 100 % without the note that says why, in every output
    shown = [r["roof_pct"] for r in doc["top_operators"] if r["roof_pct"] is not None]
    if max(shown, default=0.0) > 100.0:
        assert doc["roof_note"] and "above 100 % of" in doc["roof_note"]
        assert "note: " + doc["roof_note"][:30] in " ".join(lines)
        page = (out / "report.html").read_text()
        assert html.escape(doc["roof_note"][:30]) in page


def test_stack_fixture_has_aligned_category_timeline(tmp_path: Path) -> None:
    run = ROOT / "fixtures" / "h200-gpt2s-b8-s128-fp32-naive-stack"
    res = report(run, tmp_path / "out", no_tensorboard=True)
    cat = res.summary.categories
    assert cat is not None and cat.offset_ns is not None
    t_ms = (cat.timeline.times_us * 1e3 + cat.offset_ns) / 1e6
    step = res.summary.step_table.iloc[0]
    start = res.summary.step_starts_ns[0] / 1e6
    # the export covers the profiled step (allow 1 ms either side)
    assert t_ms.min() >= start - 1 and t_ms.max() <= start + step.step_time_ms + 1
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["memory"]["categories"]


def test_gpu_run_without_gpu_events_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CPU run is reported on its operators (tests/test_report_cpu.py); a run on a GPU
    whose trace lost its GPU events is an error, in one line."""
    from tracekit.cli import main

    run, out = tmp_path / "run", tmp_path / "rep"
    shutil.copytree(ROOT / "fixtures" / "cpu-tiny-fp32-naive", run)
    m = json.loads((run / "manifest.json").read_text())
    m["device"]["type"] = "cuda"
    (run / "manifest.json").write_text(json.dumps(m))
    rc = main(["report", str(run), "-o", str(out), "--no-tensorboard"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "device is 'cuda' (manifest)" in err and "no GPU activity" in err
    assert not out.exists()


def test_script_run_traffic_comes_from_its_optimizer(tmp_path: Path) -> None:
    """A `tracekit run` fixture has no GPT config: the traffic estimate takes the optimizer's
    tensor sizes from the manifest and the measured dynamic memory for the activations."""
    run = ROOT / "fixtures" / "h200-run-hf-gpt2s-b8-s128-bf16"
    report(run, tmp_path / "out", no_tensorboard=True)
    doc = json.loads((tmp_path / "out" / "summary.json").read_text())
    t = doc["step_summary"]["analytic_traffic"]
    opt = json.loads((run / "manifest.json").read_text())["optimizer"]
    assert t["basis"] == "optimizer"
    assert (t["parameters"], t["gradients"], t["optimizer_state"]) == (
        2 * 497_759_232,
        2 * 497_759_232,
        2 * 995_519_056,
    )
    assert opt["param_bytes"] == 497_759_232 and opt["state_bytes"] == 995_519_056
    assert t["activations"] == 2 * doc["memory"]["dynamic_peak_bytes"]
    assert t["total"] == sum(
        t[k] for k in ("parameters", "gradients", "optimizer_state", "activations")
    )
    assert doc["sources"]["analytic_traffic"].startswith("estimated: ")
