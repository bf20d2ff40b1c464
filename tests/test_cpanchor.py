"""The critical path's what-ifs on the unprofiled step (tracekit.summary.critical_path.anchor)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

import tracekit
import tracekit.summary.critical_path as CP
import tracekit.summary.critical_path.anchor as CPA
from tracekit.classify import classify
from tracekit.summary import summarize

ROOT = Path(__file__).resolve().parents[1]
# every training fixture with a manifest and GPU kernels (the generate runs are prefill +
# decode steps of different kinds: their unprofiled figure is not one step's)
RUNS = [
    "h200-gpt2s-b8-s128-fp32-naive",
    "h200-gpt2s-b8-s128-fp32-naive-stack",
    "h200-gpt2s-b8-s128-bf16-naive",
    "h200-gpt2s-b8-s128-bf16-sdpa",
    "h200-gpt2s-b8-s128-bf16-sdpa-compile",
    "h200-run-resnet50-b64-bf16",
    "h200-run-hf-gpt2s-b8-s128-bf16",
]


@cache
def _summary(name: str):  # type: ignore[no-untyped-def]
    t = tracekit.load(ROOT / "fixtures" / name)
    return t, summarize(t, classify(t, manifest=t.manifest))


@pytest.mark.parametrize("name", RUNS)
def test_what_ifs_are_on_the_unprofiled_step(name: str) -> None:
    t, sm = _summary(name)
    a = sm.cp_anchor
    measured = t.manifest["metrics"]["step_time_ms"]["median"]
    assert a is not None and a.measured_ms == pytest.approx(measured)
    # the critical path's baseline: the calibrated path is within 5 % of the real step
    # before the last scale, and exactly it after
    assert abs(a.scale - 1.0) <= 0.05
    wi = a.what_if
    assert set(wi["scenario"]) == {s.name for s in sm.critical_path.scenarios}
    host = wi[wi["scenario"].map(CPA.host_only)]
    assert len(host) == 3  # launch_free, host_x2, cuda_graphs
    # no host-only what-if beyond the unprofiled step over its GPU work
    assert (host["speedup"] <= measured / a.gpu_ms + 1e-9).all()
    assert (wi["path_ms"] > 0).all()
    doc = sm.summary["critical_path"]["unprofiled"]
    assert doc["measured_step_ms"] == pytest.approx(measured)
    assert doc["what_if"]["cuda_graphs"]["speedup"] == pytest.approx(
        float(wi.set_index("scenario").loc["cuda_graphs", "speedup"])
    )
    json.dumps(doc)


def test_resnet50_cuda_graphs_is_bounded_by_the_real_step() -> None:
    # profiled step 33.06 ms (CUDA graphs 2.02x on it); unprofiled 24.76 ms with 15.35 ms
    # of GPU work: at most 1.61x
    _, sm = _summary("h200-run-resnet50-b64-bf16")
    a = sm.cp_anchor
    assert a is not None
    raw = sm.critical_path.what_if.set_index("scenario")["speedup"]
    assert raw["cuda_graphs"] == pytest.approx(2.017, abs=0.002)
    got = a.what_if.set_index("scenario")
    assert a.basis == "calibrated" and a.host_speedup == pytest.approx(1.358, abs=0.01)
    assert got.loc["cuda_graphs", "speedup"] == pytest.approx(1.508, abs=0.005)
    assert got.loc["cuda_graphs", "speedup"] <= 24.7586 / 15.3468
    assert a.bound == "host" and sm.critical_path.summary.bound == "host"


def test_gpu_bound_run_is_scaled_not_calibrated() -> None:
    _, sm = _summary("h200-gpt2s-b8-s128-fp32-naive")
    a = sm.cp_anchor
    assert a is not None and a.basis == "scaled" and a.host_speedup == 1.0
    assert a.scale == pytest.approx(26.656 / 26.862, abs=0.002)
    assert a.bound == "gpu"
    assert any("cannot be calibrated" in n for n in a.notes)


def test_a_host_only_what_if_is_capped_at_the_gpu_work() -> None:
    _, sm = _summary("h200-gpt2s-b8-s128-bf16-sdpa")
    cp = sm.critical_path
    # pretend the GPU worked 10.5 ms of the 11.63 ms step: nothing host-only may beat it
    a = CPA.anchor(cp, 11.630256, 10.5)
    assert a is not None
    wi = a.what_if.set_index("scenario")
    assert bool(wi.loc["cuda_graphs", "capped"]) and bool(wi.loc["host_x2", "capped"])
    assert wi.loc["cuda_graphs", "path_ms"] == pytest.approx(10.5)
    assert wi.loc["cuda_graphs", "speedup"] == pytest.approx(11.630256 / 10.5)
    assert not bool(wi.loc["gemm_x2", "capped"])  # a GPU change is not bounded so
    assert any("capped at the GPU's work" in n for n in a.notes)


def test_no_anchor_without_an_unprofiled_step() -> None:
    _, sm = _summary("h200-gpt2s-b8-s128-bf16-sdpa")
    cp = sm.critical_path
    assert CPA.anchor(cp, 0.0, 7.0) is None
    assert CPA.anchor(cp, float("nan"), 7.0) is None
    saved = cp.measured_ms
    cp.measured_ms = None
    try:
        assert CPA.for_summary(None, cp) is None
    finally:
        cp.measured_ms = saved
    assert CPA.for_summary(None, None) is None
    assert CP.summary_block(None) is None


def test_one_verdict_on_the_fixtures() -> None:
    # on the unprofiled step the verdict and the path agree on every fixture; on the
    # profiled window the stacks run's path is the profiler's host time
    for name in RUNS:
        _, sm = _summary(name)
        assert CPA.disagreement(sm.verdict.verdict, sm.critical_path, sm.cp_anchor) is None
    _, sm = _summary("h200-gpt2s-b8-s128-fp32-naive-stack")
    line = CPA.disagreement(sm.verdict.verdict, sm.critical_path, None)
    assert line is not None
    assert line.startswith("the verdict says compute-bound; the profiled window's critical "
                           "path is host-bound")  # fmt: skip
    assert line.endswith("the profiled window's host time is the profiler's")


def test_a_mixed_path_is_said_in_one_line() -> None:
    _, sm = _summary("h200-gpt2s-b8-s128-bf16-sdpa")
    a = sm.cp_anchor
    assert a is not None
    mixed = CPA.Anchor(**{**a.__dict__, "bound": "mixed"})
    line = CPA.disagreement("compute-bound", sm.critical_path, mixed)
    assert line is not None and "mixed" in line and "\n" not in line
    assert CPA.disagreement(None, sm.critical_path, a) is None
    assert CPA.disagreement("communication-bound", sm.critical_path, a) is None
