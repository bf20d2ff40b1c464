"""The step's verdict: one trace built to show each verdict (tests/stepgen.py) through the
real parse and classify stages, the thresholds at their edges, the unprofiled step and an
exposed-communication share from outside the trace."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tracekit.parse import Trace, load
from tracekit.summary import summarize
from tracekit.summary import verdict as V

from . import stepgen as sg
from . import tracegen as tg

classify_mod = pytest.importorskip("tracekit.classify")


def _summary(tmp_path: Path, doc: dict[str, Any], manifest: dict[str, Any] | None = None) -> Any:
    t = load(tg.write(doc, tmp_path / "v.pt.trace.json.gz"))
    if manifest is not None:
        t = dataclasses.replace(t, manifest=manifest)
    return summarize(t, classify_mod.classify(t, manifest=manifest))


def _check(sm: Any, verdict: str, evidence: list[str], lever_starts: str) -> None:
    v = sm.verdict
    assert v.verdict == verdict
    assert v.evidence == evidence
    assert v.lever.startswith(lever_starts)
    doc = sm.summary["step_summary"]
    assert doc["verdict"] == verdict and doc["evidence"] == evidence
    assert doc["next_lever"] == v.lever
    assert sum(doc["shares_pct"].values()) == pytest.approx(100.0)


HEAD = (
    "GPU work {:.1f} %, exposed communication {:.1f} %, input wait {:.1f} %, host idle {:.1f} % of "
)
PROFILED = "the profiled 10.00 ms step"


def test_compute_bound(tmp_path: Path) -> None:
    sm = _summary(tmp_path, sg.compute_bound())
    _check(
        sm,
        "compute-bound",
        [
            HEAD.format(95, 0, 0, 5) + PROFILED,
            "0.0 % of GPU time in memory-bound kernels, 100.0 % in compute-bound ones "
            "(intensity against the ridge point of their pipe)",
            "step intensity 682.7 FLOP/B, above the ridge point 20.0 of simt_fp32",
            # 2·4096³ FLOP per 10 ms step against the H100's 67 TFLOP/s fp32 SIMT roof
            "the step reaches 20.5 % of the simt_fp32 roof",
        ],
        "the FLOPs run on the fp32 SIMT pipe: TF32",
    )
    ss = sm.summary["step_summary"]
    assert ss["flops_per_s"] == pytest.approx(2 * 4096**3 / 10e-3)
    assert ss["compute_utilisation_pct"] == pytest.approx(100 * 2 * 4096**3 / 10e-3 / 67e12)
    assert ss["bytes_per_step"] == 3 * 4096**2 * 4 and ss["bytes_source"] == "modelled"
    assert ss["arithmetic_intensity"] == pytest.approx(2 * 4096**3 / (3 * 4096**2 * 4))
    assert ss["ridge_point"] == pytest.approx(67e12 / 3.35e12)
    assert ss["roofline_side"] == "compute" and ss["basis"] == "profiled"


def test_memory_bandwidth_bound(tmp_path: Path) -> None:
    sm = _summary(tmp_path, sg.memory_bound())
    _check(
        sm,
        "memory-bandwidth-bound",
        [
            HEAD.format(92, 0, 0, 8) + PROFILED,
            "100.0 % of GPU time in memory-bound kernels, 0.0 % in compute-bound ones "
            "(intensity against the ridge point of their pipe)",
            "step intensity 0.1 FLOP/B, below the ridge point 20.0 of simt_fp32",
            "the step moves 76.9 % of the bandwidth roof; memory-bound kernels run at 83.6 % of it",
        ],
        "fewer bytes: fuse elementwise chains",
    )
    assert "far below the roof" not in sm.verdict.lever
    ss = sm.summary["step_summary"]
    moved = 8 * 3 * 16384**2 * 4  # eight adds, two 1 GiB inputs and one output each
    assert ss["bytes_per_step"] == moved
    assert ss["bandwidth_used"] == pytest.approx(moved / 10e-3)
    assert ss["bandwidth_utilisation_pct"] == pytest.approx(100 * moved / 10e-3 / 3.35e12)


def test_launch_bound(tmp_path: Path) -> None:
    sm = _summary(tmp_path, sg.launch_bound())
    _check(
        sm,
        "launch/host-bound",
        [
            HEAD.format(3, 0, 0, 97) + PROFILED,
            "the GPU idles 9.70 ms per step outside data loading and communication: it "
            "waits for the host",
            "100 kernels per step, median 3.0 µs against 1.0 µs per launch call; host busy "
            "100 % of the profiled step",
            "the GPU work itself: 100.0 % of GPU time in memory-bound kernels, 0.0 % in "
            "compute-bound ones",
        ],
        "fewer, larger kernels: CUDA graphs",
    )


def test_communication_bound(tmp_path: Path) -> None:
    sm = _summary(tmp_path, sg.communication_bound())
    _check(
        sm,
        "communication-bound",
        [
            HEAD.format(50, 45, 0, 5) + PROFILED,
            "communication runs with no other GPU work beside it for 4.50 ms per step",
            "the GPU work itself: 0.0 % of GPU time in memory-bound kernels, 52.6 % in "
            "compute-bound ones",
        ],
        "overlap communication with compute",
    )
    assert sm.breakdown.comm_source == "trace"


def test_input_bound(tmp_path: Path) -> None:
    sm = _summary(tmp_path, sg.input_bound())
    # DataLoader 4000 µs + aten::to 100 µs, less the 50 µs the copy keeps the GPU busy
    _check(
        sm,
        "input-bound",
        [
            HEAD.format(50.5, 0, 40.5, 9) + PROFILED,
            "the GPU runs nothing for 4.05 ms per step while the host loads data "
            "(DataLoader __next__ spans, host-to-device copies)",
            "the GPU work itself: 1.0 % of GPU time in memory-bound kernels, 99.0 % in "
            "compute-bound ones",
        ],
        "feed the GPU ahead of time",
    )
    assert sm.input_wait_ns == {1: 4_050_000, 2: 4_050_000}


def test_unprofiled_step_decides(tmp_path: Path) -> None:
    """The profiled launch-bound step idles 97 %; measured without the profiler the step
    is 0.33 ms for 0.3 ms of kernels: GPU-bound, and its kernels are memory-bound."""
    manifest = {"metrics": {"step_time_ms": {"median": 0.3 / 0.9}}}
    sm = _summary(tmp_path, sg.launch_bound(), manifest)
    assert sm.verdict.verdict == "memory-bandwidth-bound"
    assert sm.verdict.evidence[0] == HEAD.format(90, 0, 0, 10) + "the unprofiled 0.33 ms step"
    ss = sm.summary["step_summary"]
    assert ss["basis"] == "unprofiled" and ss["step_time_ms"] == pytest.approx(1 / 3)
    # per step the profiled 10 ms step, overall the unprofiled one
    assert ss["per_step"][0]["step_time_ms"] == pytest.approx(10.0)
    assert ss["bandwidth_used"] == pytest.approx(ss["per_step"][0]["bandwidth_used"] * 30)


def test_exposed_communication_from_outside(tmp_path: Path) -> None:
    """A multi-rank analysis (argument) or a multi-GPU collect (manifest) gives the share
    of the step in which communication is exposed; the compute-bound trace then becomes
    communication-bound."""
    path = tg.write(sg.compute_bound(), tmp_path / "c.pt.trace.json.gz")
    t = load(path)
    cls = classify_mod.classify(t)
    sm = summarize(t, cls, exposed_comm_pct=30.0)
    assert sm.verdict.verdict == "communication-bound"
    assert sm.breakdown.comm_source == "multi-rank analysis"
    assert sm.verdict.shares_pct["exposed_communication"] == pytest.approx(30.0)
    assert sm.verdict.evidence[1] == (
        "communication runs with no other GPU work beside it for 3.00 ms per step "
        "(multi-rank analysis)"
    )
    t2: Trace = dataclasses.replace(t, manifest={"metrics": {"exposed_comm_pct": 12.0}})
    sm = summarize(t2, cls)
    assert sm.breakdown.comm_source == "run manifest metrics.exposed_comm_pct"
    assert sm.verdict.verdict == "compute-bound"  # 12 + 5 % idle < 20 %
    assert sm.verdict.shares_pct["exposed_communication"] == pytest.approx(12.0)
    # a verdict that is not communication-bound still says where its figure came from
    assert sm.verdict.evidence[1] == (
        "communication 1.20 ms per step: run manifest metrics.exposed_comm_pct"
    )


def test_communication_measured_on_the_step_replaces_the_traces(tmp_path: Path) -> None:
    """``comm_ms`` (a cost measured without the profiler, say) replaces the trace's exposed
    communication inside the busy time: the GPU work stays the trace's, the idle time is
    what is left of the step; it wins over ``exposed_comm_pct``."""
    path = tg.write(sg.compute_bound(), tmp_path / "c.pt.trace.json.gz")
    t = load(path)
    cls = classify_mod.classify(t)
    base = summarize(t, cls)
    work = base.breakdown.gpu_work_ms
    words = "rank 0's communication cost measured without the profiler"
    sm = summarize(t, cls, exposed_comm_pct=30.0, comm_ms=(0.3, words))
    bd = sm.breakdown
    assert bd.comm_source == words and bd.exposed_comm_ms == pytest.approx(0.3)
    assert bd.gpu_work_ms == pytest.approx(work)  # 9.5 ms of a 10 ms step
    assert bd.busy_ms + bd.host_idle_ms + bd.input_wait_ms == pytest.approx(bd.step_ms)
    assert bd.host_idle_ms == pytest.approx(0.2)
    assert sm.verdict.verdict == "compute-bound"  # 3 % + 2 % outside the GPU work
    assert sm.verdict.evidence[1] == f"communication 0.30 ms per step: {words}"
    big = summarize(t, cls, comm_ms=(1e3, words)).breakdown  # never more than the step
    assert big.busy_ms == pytest.approx(big.step_ms) and big.host_idle_ms == 0.0


# --------------------------------------------------------------------------- thresholds


def _bd(comm: float = 0.0, wait: float = 0.0, host: float = 0.0) -> V.Breakdown:
    """A 100 ms step with the given outside parts (ms), the rest GPU work."""
    return V.Breakdown(
        step_ms=100.0,
        basis="unprofiled",
        busy_ms=100.0 - wait - host,
        exposed_comm_ms=comm,
        input_wait_ms=wait,
        host_idle_ms=host,
        comm_source="trace",
    )


def _ev(mem: float, comp: float, intensity: float | None = None) -> V.Evidence:
    return V.Evidence(
        bound_pct={"memory-bound": mem, "compute-bound": comp, "unknown": 100 - mem - comp},
        intensity=intensity,
        ridge=20.0 if intensity is not None else None,
        pipe="tensor_bf16",
        compute_utilisation_pct=50.0,
        bandwidth_utilisation_pct=50.0,
        memory_bound_roof_pct=80.0,
        kernels_per_step=100,
        median_kernel_us=50.0,
        median_launch_us=5.0,
        short_kernels=False,
        host_busy_pct=40.0,
    )


def test_outside_threshold_edges() -> None:
    assert V.OUTSIDE_PCT == 20.0
    assert V.decide(_bd(host=20.0), _ev(10, 90)).verdict == "launch/host-bound"
    assert V.decide(_bd(host=19.99), _ev(10, 90)).verdict == "compute-bound"
    # the parts add up; the largest decides
    assert V.decide(_bd(comm=8, wait=7, host=6), _ev(10, 90)).verdict == "communication-bound"
    assert V.decide(_bd(comm=6, wait=8, host=7), _ev(10, 90)).verdict == "input-bound"
    v = V.decide(_bd(host=30), _ev(10, 90))
    assert v.lever.startswith("the host code between kernels")  # kernels are not short


def test_memory_threshold_edges() -> None:
    assert V.MEMORY_PCT == 50.0 and V.KNOWN_PCT == 50.0
    assert V.decide(_bd(), _ev(50, 50)).verdict == "memory-bandwidth-bound"
    assert V.decide(_bd(), _ev(49.9, 50.1)).verdict == "compute-bound"
    # share of the *known* time: 30 % memory-bound of 55 % known is 55 % of it
    assert V.decide(_bd(), _ev(30, 25)).verdict == "memory-bandwidth-bound"
    # under half the time known: the step's intensity decides
    assert V.decide(_bd(), _ev(40, 5, intensity=25.0)).verdict == "compute-bound"
    assert V.decide(_bd(), _ev(5, 40, intensity=15.0)).verdict == "memory-bandwidth-bound"
    v = V.decide(_bd(), _ev(5, 40))
    assert v.verdict == "unknown" and v.lever.startswith("profile with record_shapes=True")
    assert set(V.VERDICTS) >= {v.verdict}


def test_without_shapes_or_step_markers(tmp_path: Path) -> None:
    """No record_shapes: no FLOP or byte counts, so neither bandwidth nor a compute/memory
    split (copy sizes alone are not the step's traffic); no ProfilerStep markers: one step,
    and the evidence says so."""
    doc = sg.compute_bound()
    doc["traceEvents"] = [
        e for e in doc["traceEvents"] if not e["name"].startswith("ProfilerStep#")
    ]
    for e in doc["traceEvents"]:
        e.get("args", {}).pop("Input Dims", None)
    sm = _summary(tmp_path, doc)
    assert sm.verdict.verdict == "unknown"
    assert sm.verdict.evidence[-1].startswith("the trace has no ProfilerStep markers")
    assert sm.verdict.lever.startswith("profile with record_shapes=True")
    ss = sm.summary["step_summary"]
    assert ss["bandwidth_used"] is None and ss["flops_per_s"] is None
    assert ss["arithmetic_intensity"] is None and ss["roofline_side"] is None


def test_an_unknown_bound_names_only_what_is_missing() -> None:
    """A run with FLOP and byte counts but no roofline is not told record_shapes was off
    (a CPU run with --no-ceilings printed that beside record_shapes✓)."""
    from dataclasses import replace

    roof, lever = "a roofline for this device", "give --peak-tflops/--bandwidth"
    counted = replace(_ev(0, 0), intensity=3.4, ridge=None)
    assert V.unknown_bound(counted, roof, lever) == (f"without {roof}", lever)
    shapeless = replace(_ev(0, 0), intensity=None, ridge=20.0)
    assert V.unknown_bound(shapeless, roof, lever) == (
        "without FLOP and byte counts (no shapes)",
        "profile with record_shapes=True",
    )
    neither = replace(_ev(0, 0), intensity=None, ridge=None)
    why, both = V.unknown_bound(neither, roof, lever)
    assert why == f"without FLOP and byte counts (no shapes) or {roof}"
    assert both == f"profile with record_shapes=True; {lever}"
    v = V.decide(_bd(), counted)
    assert v.verdict == "unknown" and "record_shapes" not in " ".join(v.evidence) + v.lever


def test_a_model_without_a_transformer_config_gets_no_seq_caveat() -> None:
    from tracekit.classify.models.memory import from_manifest

    cnn = {"status": "ok", "config": {"batch": 8, "seq": None},
           "model": {"class": "__main__.Net", "config": None, "n_params": 1610}}  # fmt: skip
    est, why = from_manifest(cnn)
    assert est is None and why == (
        "the analytic memory model is of a GPT-style transformer; Net has no configuration "
        "tracekit could read"
    )
    assert "seq" not in why
