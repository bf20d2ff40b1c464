"""The light timeline pass joined to the full one (tracekit.parse.timeline,
tracekit.summary.timeline): real H200 traces with the light pass derived from them
(tests/timelinegen.py), a two-step trace built by hand whose overlap differs between the
passes, the fallbacks (never a wrong join) and the host step marks of the collector."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

import tracekit.summary.steps as S
import tracekit.summary.timeline as TL
from tracekit.classify import classify
from tracekit.collectors import passes
from tracekit.collectors.profiler import ProfilerConfig
from tracekit.errors import UsageError
from tracekit.parse import find_trace, load
from tracekit.parse import timeline as PT
from tracekit.summary import summarize

from . import stepgen as sg
from . import timelinegen as G
from . import tracegen as tg

RUN = Path(__file__).resolve().parent.parent / "fixtures" / "h200-gpt2s-b8-s128-bf16-sdpa"
UNPROFILED = 11.630256175994873  # the run's unprofiled median step (manifest), ms
FULL_MS = 24.04872  # its traced step (GPU span), with the profiler on


@pytest.fixture(scope="module")
def marked() -> dict[str, Any]:
    """The fixture's trace as collect records it now: with a marker kernel per step."""
    return G.with_markers(G.read(find_trace(RUN)[0]))


def _run(tmp: Path, marked: dict[str, Any], **light: Any) -> Path:
    return G.run_folder(RUN, tmp / "run", G.light_of(marked, **light), marked)


def _summary(path: Path, timeline: Any = "auto") -> Any:
    t = load(path)
    cls = classify(t, manifest=t.manifest)
    return summarize(t, cls, timeline=timeline)


def test_marker_names_agree() -> None:
    assert passes.MARKER_KERNEL == PT.MARKER_KERNEL
    assert passes.STEP_STARTS_FORMAT == PT.STEP_STARTS_FORMAT
    names = pd.Series([G.MARKER_NAME, "void at::native::spin_kernel_x()", "spin_kernel"])
    assert PT.is_marker(names).tolist() == [True, False, True]


def test_light_steps_from_the_marker_kernels(tmp_path: Path, marked: dict[str, Any]) -> None:
    light = PT.with_light_steps(load(G.write(G.light_of(marked), tmp_path / "l.json.gz")))
    full = load(G.write(marked, tmp_path / "f.pt.trace.json.gz"))
    assert light.meta["timeline"] == {"source": "marker kernels", "steps": 1}
    (row,) = light.steps.to_dict("records")
    in_step = full.kernels[full.kernels["step"] == 2]
    # the closing marker delimits the step and belongs to none; the opening one is in it
    assert row["kernel_count"] == len(in_step) - 1 == 823
    assert light.kernels["marker"].sum() == 2
    busy = int(full.steps["gpu_busy"].iloc[0])
    assert row["gpu_busy"] == busy - 1100  # the closing marker's 1.1 µs
    assert row["gpu_ts"] == in_step["ts"].min()
    assert row["cpu_ts"] == full.steps["cpu_ts"].iloc[0] + 500  # the marker's launch


def test_light_pass_joins_the_full_one_kernel_by_kernel(
    tmp_path: Path, marked: dict[str, Any]
) -> None:
    t = load(_run(tmp_path, marked))
    tl = TL.for_report(t, S.analysed_steps(t.steps))
    assert tl.light and tl.reason is None and tl.matched_pct == tl.joined_pct == 100.0
    assert tl.step_source == "marker kernels" and tl.notes == []
    assert tl.recorder == "kineto-cuda"  # a light trace with launch calls
    assert tl.per_step.to_dict("records") == [
        {"step": 2, "light_step": 0, "light_kernels": 822, "full_kernels": 822, "matched": 822,
         "matched_pct": 100.0, "joined_pct": 100.0}
    ]  # fmt: skip
    k = tl.kernels
    assert set(k["step"]) == {2} and list(tl.steps["step"]) == [2]
    real = k[~k["marker"]]
    assert real["matched"].all() and not k[k["marker"]]["matched"].any()
    partner = t.kernels.set_index("kernel_id").loc[real["full_kernel_id"]]
    assert (partner["name"].to_numpy() == real["name"].to_numpy()).all()
    assert (partner["dur"].to_numpy() == real["dur"].to_numpy()).all()  # the same launches
    cls = classify(t, manifest=t.manifest).kernels
    with_cls = TL.with_classes(real, cls)
    assert (with_cls["class"].to_numpy() == cls.set_index("kernel_id").loc[
        real["full_kernel_id"], "class"].to_numpy()).all()  # fmt: skip


def test_report_takes_step_idle_and_launch_from_the_light_pass(
    tmp_path: Path, marked: dict[str, Any]
) -> None:
    """A lighter host side: step time, idle and the launch check from the light pass;
    classes, bytes, FLOPs and memory from the full pass, exactly as without it."""
    path = _run(tmp_path, marked, host_scale=0.5)
    sm, full = _summary(path), _summary(path, "full")
    light = PT.with_light_steps(load(path / "w.1.timeline.json.gz"))
    want = S.step_table(light.steps)
    assert sm.step_table["step_time_ms"].tolist() == want["step_time_ms"].tolist()
    assert sm.step_table["step"].tolist() == [2]
    doc, fdoc = sm.summary, full.summary
    light_ms, full_ms = want["step_time_ms"].iloc[0], FULL_MS
    assert doc["step_time_ms"] == pytest.approx(light_ms) and light_ms < 0.75 * full_ms
    assert fdoc["step_time_ms"] == pytest.approx(full_ms)
    assert doc["gpu_idle_pct"] == pytest.approx(want["gpu_idle_pct"].iloc[0])
    assert doc["gpu_idle_pct"] < fdoc["gpu_idle_pct"] - 10
    assert doc["launch"]["host_busy_pct"] == pytest.approx(100 * want["cpu_ms"].iloc[0] / light_ms)
    for key in ("time_share_pct", "ms_per_step", "bound_time_share_pct", "memory", "top_kernels"):
        assert doc[key] == fdoc[key], key
    for key in ("bytes_per_step", "flops_per_step", "arithmetic_intensity", "bandwidth_used"):
        assert doc["step_summary"][key] == fdoc["step_summary"][key], key
    tl = doc["timeline"]
    assert tl["source"] == "light" and tl["requested"] == "auto" and tl["reason"] is None
    assert tl["light_step_time_ms"] == pytest.approx(light_ms)
    assert tl["full_step_time_ms"] == pytest.approx(full_ms)
    assert tl["unprofiled_step_time_ms"] == UNPROFILED
    assert tl["light_vs_unprofiled_pct"] == pytest.approx(100 * (light_ms / UNPROFILED - 1), 1e-3)
    assert tl["faithful"] is (abs(tl["light_vs_unprofiled_pct"]) <= 10)
    assert fdoc["timeline"]["source"] == "full"
    assert fdoc["timeline"]["reason"] == "the full pass was asked for (--timeline full)"
    assert doc["sources"]["step_time_ms"].startswith("measured: the light timeline pass")
    assert "light timeline pass" in doc["sources"]["gpu_idle_pct"]


def test_faithful_within_ten_percent_or_a_warning(tmp_path: Path, marked: dict[str, Any]) -> None:
    path = _run(tmp_path, marked, host_scale=0.5)
    light_ms = _summary(path).timeline_facts.light_step_time_ms
    m = json.loads((path / "manifest.json").read_text())
    for unprofiled, faithful in ((light_ms / 1.2, False), (light_ms / 0.95, True)):
        m["metrics"]["step_time_ms"]["median"] = unprofiled
        (path / "manifest.json").write_text(json.dumps(m))
        sm = _summary(path)
        tf = sm.timeline_facts
        assert tf.vs_unprofiled_pct == pytest.approx(100 * light_ms / unprofiled - 100)
        assert tf.faithful is faithful and sm.summary["timeline"]["faithful"] is faithful
        warned = [w for w in sm.warnings if w.startswith("the light timeline pass's step")]
        assert len(warned) == (0 if faithful else 1)
    assert warned == [] and "20 % longer" not in str(sm.warnings)


@pytest.mark.parametrize(
    ("light", "reason"),
    [
        ({"drop_kernels": 30}, "only 98.8 % of the GPU time joins the full pass's kernels (per "
         "stream, by order and name, grid and block; < 99 %; most of the rest on stream 7): "
         "the passes ran different work"),
        ({"rename_kernels": 50}, "only 96.3 % of the GPU time joins the full pass's kernels (per "
         "stream, by order and name, grid and block; < 99 %; most of the rest on stream 7): "
         "the passes ran different work"),
    ],
)  # fmt: skip
def test_different_work_falls_back_to_the_full_pass(
    tmp_path: Path, marked: dict[str, Any], light: dict[str, int], reason: str
) -> None:
    """Never a wrong join: the report is the full pass's, with the reason."""
    path = _run(tmp_path, marked, **light)
    sm, full = _summary(path), _summary(path, "full")
    tl = sm.summary["timeline"]
    assert tl["source"] == "full" and tl["reason"] == reason
    assert sm.timeline_facts.light_step_time_ms is not None  # still shown beside the full
    for key in ("step_time_ms", "gpu_idle_pct", "launch", "time_share_pct", "step_summary"):
        assert sm.summary[key] == full.summary[key], key
    with pytest.raises(UsageError, match="--timeline light: the light pass does not match"):
        _summary(path, "light")


def test_one_renamed_kernel_stays_unmatched(tmp_path: Path, marked: dict[str, Any]) -> None:
    t = load(_run(tmp_path, marked, rename_kernels=1))
    tl = TL.for_report(t, S.analysed_steps(t.steps))
    assert tl.light and tl.matched_pct == pytest.approx(100 * 821 / 822)
    odd = tl.kernels[~tl.kernels["matched"] & ~tl.kernels["marker"]]
    assert len(odd) == 1
    assert odd["name"].iloc[0] == G.RENAMED  # classed by its own name, not its partner's
    assert TL.with_classes(odd, classify(t).kernels)["class"].tolist() == ["other"]


def test_steps_from_host_starts_without_marker_kernels(
    tmp_path: Path, marked: dict[str, Any]
) -> None:
    """A torch without ``_sleep``: the sidecar's host times give the same steps."""
    light, starts = G.without_markers(G.light_of(marked))
    path = G.run_folder(RUN, tmp_path / "run", light, marked, sidecar=starts)
    t = load(path)
    tl = TL.for_report(t, S.analysed_steps(t.steps))
    assert tl.light and tl.step_source == "host step starts" and tl.matched_pct == 100.0
    ref = TL.for_report(load(_run(tmp_path / "m", marked)), [2])
    a, b = tl.steps.iloc[0], ref.steps.iloc[0]
    assert a["cpu_ts"] == pytest.approx(b["cpu_ts"], abs=1000)  # rounding to the ns
    assert a["kernel_count"] == b["kernel_count"] - 1  # the opening marker kernel
    without = G.run_folder(RUN, tmp_path / "bare", light, marked)  # and no sidecar
    tl = TL.for_report(load(without), [2])
    assert not tl.light and tl.reason is not None
    assert tl.reason.startswith("the light timeline pass is unreadable: the light trace has 0")
    with pytest.raises(UsageError, match="--timeline light: the light trace has 0 step marker"):
        TL.for_report(load(without), [2], "light")


def test_runs_without_a_light_pass_keep_todays_figures(tmp_path: Path) -> None:
    t = load(RUN)
    tl = TL.for_report(t, [2])
    assert not tl.light and tl.reason == (
        "no light timeline pass (the run was collected without one)"
    )
    sm, full = _summary(RUN), _summary(RUN, "full")
    for key in ("step_time_ms", "gpu_idle_pct", "launch", "step_summary", "warnings"):
        assert sm.summary[key] == full.summary[key], key
    tf = sm.summary["timeline"]
    assert tf["full_vs_unprofiled_pct"] == pytest.approx(100 * (FULL_MS / UNPROFILED - 1), 1e-3)
    assert tf["faithful"] is False and tf["light_step_time_ms"] is None
    bare = load(find_trace(RUN)[0])
    assert TL.for_report(bare, [2]).reason == (
        "a bare trace has no light timeline pass (tracekit collect records one)"
    )
    with pytest.raises(UsageError, match="--timeline light: a bare trace"):
        TL.for_report(bare, [2], "light")
    with pytest.raises(UsageError, match="--timeline must be one of auto, light, full"):
        TL.for_report(bare, [2], "fast")


def _comm(overlap: bool) -> dict[str, Any]:
    """Two steps of a 5 ms GEMM and a 4.5 ms all-reduce on its own stream: after the GEMM
    (exposed) or beside it (overlapped)."""

    def fill(b: sg.Builder, t: float) -> None:
        b.launch(sg.MM, t + 10, t + 50, 5000, kernel=sg.SGEMM)
        comm = ("c10d::allreduce_", [[4096, 4096]], ["float"])
        b.launch(comm, t + 20, t + (60 if overlap else 5050), 4500, kernel=sg.NCCL, stream=20)

    b = sg.Builder()
    for n in (1, 2):
        fill(b, b.step(n))
    return b.doc()


def test_overlap_is_measured_on_the_light_timeline(tmp_path: Path) -> None:
    """The profiler serialised the all-reduce after the GEMM in the full pass; the light
    pass shows it beside the GEMM: exposed communication and the verdict follow the light."""
    full = G.with_markers(_comm(overlap=False))
    light = G.light_of(G.with_markers(_comm(overlap=True)))
    run = tmp_path / "run"
    run.mkdir()
    tg.write(full, run / "f.pt.trace.json.gz")
    tg.write(light, run / "f.timeline.json.gz")
    man = {"artifacts": {"trace": "f.pt.trace.json.gz", "timeline_trace": "f.timeline.json.gz"},
           "metrics": {"step_time_ms": {"median": 5.2}}}  # fmt: skip
    (run / "manifest.json").write_text(json.dumps(man))
    t = load(run)
    cls = classify(t)
    sm, sm_full = summarize(t, cls), summarize(t, cls, timeline="full")
    assert sm_full.verdict.verdict == "communication-bound"
    assert sm_full.breakdown.exposed_comm_ms == pytest.approx(4.5)
    assert sm.timeline_facts.source == "light"
    assert [r["light_kernels"] for r in sm.timeline_facts.per_step] == [2, 2]
    assert sm.breakdown.exposed_comm_ms == 0.0
    assert sm.verdict.verdict == "compute-bound"
    # the GEMM and its step's opening marker (1.1 µs) against GEMM + all-reduce + markers
    assert sm.breakdown.busy_ms == pytest.approx(5.0011)
    assert sm_full.breakdown.busy_ms == pytest.approx(9.50165)


def test_collect_marks_each_recorded_step_on_the_trace_clock(tmp_path: Path) -> None:
    """The host marks (the sidecar's times without a marker kernel) fall where torch opens
    each recorded ProfilerStep, once mapped onto the trace clock; one more closes the
    last step."""
    cfg = ProfilerConfig(wait=1, warmup=1, active=3, record_shapes=False,
                         profile_memory=False, with_flops=False, memory_timeline=False)  # fmt: skip
    dev = torch.device("cpu")
    marker = passes.StepMarker(dev, kernel=False)
    prof = passes.MarkedProfiler(cfg, tmp_path, device=dev, marker=marker)
    x = torch.randn(64, 64)
    with prof:
        for _ in range(cfg.steps):
            for _ in range(3):
                x = torch.tanh(x @ x)
            prof.step()
    t = load(prof.traces[0])
    bounds = PT.host_bounds(marker.host_ns, t.meta)
    st = t.steps.sort_values("step")
    assert len(bounds) == cfg.active + 1 == len(st) + 1
    starts = st["cpu_ts"].to_numpy()
    assert np.all(np.abs(bounds[:-1] - starts) < 2_000_000)  # within 2 ms of each start
    last_end = int(starts[-1] + st["cpu_dur"].iloc[-1])
    assert starts[-1] < bounds[-1] <= last_end + 2_000_000


def test_every_output_says_where_the_timeline_comes_from(
    tmp_path: Path, marked: dict[str, Any]
) -> None:
    from rich.console import Console
    from tensorboard.backend.event_processing import event_accumulator as ea

    from tracekit.cli import main
    from tracekit.commands.report import report
    from tracekit.reports import terminal

    path = _run(tmp_path, marked, host_scale=0.5)
    res = report(path, tmp_path / "out", tensorboard=tmp_path / "tb")
    tf = res.summary.timeline_facts
    c = Console(width=80, record=True, color_system=None)
    terminal.render(res.summary, c)
    text = c.export_text()
    lines = text.splitlines()
    at = [i for i, line in enumerate(lines) if line.startswith("timeline ")]
    mem = [i for i, line in enumerate(lines) if line.startswith("memory ")]
    assert at and mem and mem[0] < at[0] < 40  # after the step summary, on the first screen
    shown = " ".join(line.strip() for line in lines[at[0] : at[0] + 4])
    assert shown.startswith(
        f"timeline   light pass (Kineto, CUDA only), {tf.vs_unprofiled_pct:+.1f} % vs "
        "unprofiled (within 10 %); 822 GPU activities per step joined to the full pass "
        "(100.0 % of GPU time)"
    )
    assert "in the light timeline pass (Kineto, CUDA only)" in text
    assert "GPU idle" in text and "of the light pass's step" in text
    html = (tmp_path / "out" / "report.html").read_text()
    assert "light pass (Kineto, CUDA only)" in html
    assert "light timeline pass, CUDA activity only" in html
    doc = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert doc["timeline"]["source"] == "light" and doc["timeline"]["faithful"] is True
    acc = ea.EventAccumulator(str(res.events.parent), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    sc = {t: {e.step: e.value for e in acc.Scalars(t)} for t in acc.Tags()["scalars"]}
    assert sc["step_summary/timeline/light_vs_unprofiled_pct"] == pytest.approx(
        {2: tf.light_vs_unprofiled_pct}
    )
    assert sc["step_summary/timeline/full_vs_unprofiled_pct"] == pytest.approx(
        {2: tf.full_vs_unprofiled_pct}
    )
    assert sc["step_time_ms"] == pytest.approx({2: tf.light_step_time_ms})
    # --timeline full: today's single-pass figures, labelled
    code = main(["report", str(path), "-o", str(tmp_path / "o2"), "--no-tensorboard",
                 "--timeline", "full", "--format", "json"])  # fmt: skip
    assert code == 0
    doc2 = json.loads((tmp_path / "o2" / "summary.json").read_text())
    assert doc2["timeline"]["source"] == "full" and "--timeline full" in doc2["timeline"]["reason"]
    assert doc2["step_time_ms"] == pytest.approx(FULL_MS)


def test_the_category_step_is_decided_by_the_options_alone() -> None:
    """Every rank of a multi-GPU run runs the same steps: a main window whose export
    failed on one rank must not send that rank alone into two more DDP steps."""
    assert passes.category_pass_needed(ProfilerConfig())  # no with_stack: the extra step
    assert not passes.category_pass_needed(ProfilerConfig(with_stack=True))  # the window's
    assert not passes.category_pass_needed(ProfilerConfig(memory_timeline=False))
    assert not passes.category_pass_needed(ProfilerConfig(with_stack=True, record_shapes=True))


def test_the_light_pass_turns_external_correlation_off(tmp_path: Path) -> None:
    """It has no CPU operators to correlate kernels with, and each correlation costs every
    operator two CUPTI calls; kernels keep CUPTI's correlation with their launch calls."""
    assert passes.light_experimental_kwargs() == {"disable_external_correlation": True}
    ec = torch._C._profiler._ExperimentalConfig
    on, off = ec(disable_external_correlation=True).__getstate__(), ec().__getstate__()
    assert on != off
    light = passes.LightProfiler(ProfilerConfig(), tmp_path, device=torch.device("cpu"))
    assert light.build().experimental_config.__getstate__() == on
    assert light.describe()["external_correlation"] is False
    full = passes.MarkedProfiler(ProfilerConfig(), tmp_path, device=torch.device("cpu"))
    assert full.build().experimental_config is None  # the full pass keeps torch's defaults
