"""Golden step summaries of every GPU fixture: the verdict with its evidence, bandwidth,
FLOP/s, intensity, analytic traffic and dynamic memory, with exact numbers; the main
figures are also recomputed independently from the classified kernels, the manifest and
the raw trace JSON."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tracekit.parse import find_trace, load
from tracekit.summary import Summary, summarize

classify_mod = pytest.importorskip("tracekit.classify")

ROOT = Path(__file__).resolve().parents[1]
REL = 1e-9


@dataclass(frozen=True)
class Golden:
    verdict: str
    evidence: list[str]
    pipe: str
    bytes_source: str
    figures: dict[str, Any]
    memory: dict[str, Any]


GOLDEN = {
    "h200-gpt2s-b8-s128-bf16-naive": Golden(
        verdict="launch/host-bound",
        evidence=[
            "GPU work 58.3 %, exposed communication 0.0 %, input wait 0.0 %, host idle 41.7 % of "
            "the unprofiled 14.62 ms step",
            "the GPU idles 6.10 ms per step outside data loading and communication: it waits for "
            "the host",
            "1000 kernels per step, median 4.7 µs against 3.9 µs per launch call; host busy 100 % "
            "of the profiled step",
            "the GPU work itself: 81.9 % of GPU time in memory-bound kernels, 18.1 % in "
            "compute-bound ones",
        ],
        pipe="tensor_bf16",
        bytes_source="modelled",
        figures={
            "step_time_ms": 14.615040302276611,
            "bytes_per_step": 19940389620.0,
            "bytes_modelled_per_step": 19940389620.0,
            "bytes_measured_per_step": None,
            "measured_time_pct": None,
            "bandwidth_used": 1364374589982.7488,
            "bandwidth_utilisation_pct": 28.424470624640602,
            "flops_per_s": 53174636454949.91,
            "compute_utilisation_pct": 5.812445131492558,
            "arithmetic_intensity": 38.97363440022894,
            "ridge_point": 206.14583333333334,
            "traffic_total": 6011846656,
            "kernel_bytes_ratio": 3.316849341141944,
        },
        memory={
            "floor_allocated_bytes": 1580154368,
            "dynamic_peak_bytes": 1246710272,
            "activation_bytes_per_token": 1217490.5,
            "model_peak_bytes": 2726713856,
        },
    ),
    "h200-gpt2s-b8-s128-bf16-sdpa": Golden(
        verdict="launch/host-bound",
        evidence=[
            "GPU work 64.1 %, exposed communication 0.0 %, input wait 0.0 %, host idle 35.9 % of "
            "the unprofiled 11.63 ms step",
            "the GPU idles 4.17 ms per step outside data loading and communication: it waits for "
            "the host",
            "748 kernels per step, median 4.9 µs against 3.9 µs per launch call; host busy 100 % "
            "of the profiled step",
            "the GPU work itself: 77.6 % of GPU time in memory-bound kernels, 22.4 % in "
            "compute-bound ones",
        ],
        pipe="tensor_bf16",
        bytes_source="measured",
        figures={
            "step_time_ms": 11.630256175994873,
            "bytes_per_step": 12522545032.0,
            "bytes_modelled_per_step": 17940099732.0,
            "bytes_measured_per_step": 12522545032.0,
            "measured_time_pct": 99.22784862925428,
            "bandwidth_used": 1076721341516.6926,
            "bandwidth_utilisation_pct": 22.431694614931097,
            "flops_per_s": 67685158547822.086,
            "compute_utilisation_pct": 7.728414764244181,
            "arithmetic_intensity": 62.86228008862472,
            "ridge_point": 206.14583333333334,
            "traffic_total": 5786140672,
            "kernel_bytes_ratio": 2.164231003334998,
        },
        memory={
            "floor_allocated_bytes": 1568357888,
            "dynamic_peak_bytes": 1128364544,
            "activation_bytes_per_token": 1101918.5,
            "model_peak_bytes": 2601277952,
        },
    ),
    "h200-gpt2s-b8-s128-bf16-sdpa-compile": Golden(
        verdict="launch/host-bound",
        evidence=[
            "GPU work 58.7 %, exposed communication 0.0 %, input wait 0.0 %, host idle 41.3 % of "
            "the unprofiled 10.47 ms step",
            "the GPU idles 4.33 ms per step outside data loading and communication: it waits for "
            "the host",
            "640 kernels per step, median 4.6 µs against 4.1 µs per launch call; host busy 100 % "
            "of the profiled step",
            "the GPU work itself: 75.1 % of GPU time in memory-bound kernels, 24.9 % in "
            "compute-bound ones",
        ],
        pipe="tensor_bf16",
        bytes_source="modelled",
        figures={
            "step_time_ms": 10.465471744537354,
            "bytes_per_step": 16168017020.0,
            "bytes_modelled_per_step": 16168017020.0,
            "bytes_measured_per_step": None,
            "measured_time_pct": None,
            "bandwidth_used": 1544891373715.5896,
            "bandwidth_utilisation_pct": 37.67333537808142,
            "flops_per_s": 73956861060563.3,
            "compute_utilisation_pct": 8.598262481912434,
            "arithmetic_intensity": 47.871884275391494,
            "ridge_point": 241.29699984637432,
            "traffic_total": 5786140672,
            "kernel_bytes_ratio": 2.7942661501887525,
        },
        memory={
            "floor_allocated_bytes": 1567309312,
            "dynamic_peak_bytes": 1004327424,
            "activation_bytes_per_token": 980788.5,
            "model_peak_bytes": 2601277952,
        },
    ),
    "h200-gpt2s-b8-s128-fp32-naive": Golden(
        verdict="compute-bound",
        evidence=[
            "GPU work 96.4 %, exposed communication 0.0 %, input wait 0.0 %, host idle 3.6 % of "
            "the unprofiled 26.66 ms step",
            "23.2 % of GPU time in memory-bound kernels, 76.8 % in compute-bound ones (intensity "
            "against the ridge point of their pipe)",
            "step intensity 48.7 FLOP/B, above the ridge point 16.3 of simt_fp32",
            "the step reaches 43.8 % of the simt_fp32 roof",
        ],
        pipe="simt_fp32",
        bytes_source="measured",
        figures={
            "step_time_ms": 26.656288146972656,
            "bytes_per_step": 16052151296.0,
            "bytes_modelled_per_step": 21381474508.0,
            "bytes_measured_per_step": 16052151296.0,
            "measured_time_pct": 99.40463830362123,
            "bandwidth_used": 602190042645.6426,
            "bandwidth_utilisation_pct": 14.633708302527781,
            "flops_per_s": 29348942649423.203,
            "compute_utilisation_pct": 43.80439201406448,
            "arithmetic_intensity": 48.73701086202371,
            "ridge_point": 16.281545472951468,
            "traffic_total": 5767659520,
            "kernel_bytes_ratio": 2.7831308766298326,
        },
        memory={
            "floor_allocated_bytes": 1586707968,
            "dynamic_peak_bytes": 1314007040,
            "activation_bytes_per_token": 1283210.0,
            "model_peak_bytes": 2810665472,
        },
    ),
    "h200-gpt2s-b8-s128-fp32-naive-stack": Golden(
        verdict="compute-bound",
        evidence=[
            "GPU work 96.6 %, exposed communication 0.0 %, input wait 0.0 %, host idle 3.4 % of "
            "the unprofiled 26.67 ms step",
            "21.9 % of GPU time in memory-bound kernels, 78.1 % in compute-bound ones (intensity "
            "against the ridge point of their pipe)",
            "step intensity 36.3 FLOP/B, above the ridge point 14.0 of simt_fp32",
            "the step reaches 43.5 % of the simt_fp32 roof",
        ],
        pipe="simt_fp32",
        bytes_source="modelled",
        figures={
            "step_time_ms": 26.669231414794922,
            "bytes_per_step": 21381474508.0,
            "bytes_modelled_per_step": 21381474508.0,
            "bytes_measured_per_step": None,
            "measured_time_pct": None,
            "bandwidth_used": 801728185392.643,
            "bandwidth_utilisation_pct": 16.702670529013393,
            "flops_per_s": 29140301899246.766,
            "compute_utilisation_pct": 43.492987909323524,
            "arithmetic_intensity": 36.34685973398257,
            "ridge_point": 13.958333333333334,
            "traffic_total": 5767659520,
            "kernel_bytes_ratio": 3.707131884927909,
        },
        memory={
            "floor_allocated_bytes": 1586707968,
            "dynamic_peak_bytes": 1314007040,
            "activation_bytes_per_token": 1283210.0,
            "model_peak_bytes": 2810665472,
        },
    ),
}


@cache
def _summary(name: str) -> tuple[Summary, Any]:
    trace = load(ROOT / "fixtures" / name)
    cls = classify_mod.classify(trace, manifest=trace.manifest)
    return summarize(trace, cls), cls


def _approx(v: Any) -> Any:
    return v if v is None or isinstance(v, (int, str)) else pytest.approx(v, rel=REL)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_step_summary(name: str) -> None:
    g = GOLDEN[name]
    sm, _ = _summary(name)
    doc = sm.summary["step_summary"]
    assert doc["verdict"] == g.verdict
    assert doc["evidence"] == g.evidence
    assert doc["compute_pipe"] == g.pipe and doc["bytes_source"] == g.bytes_source
    assert doc["basis"] == "unprofiled"
    got = {k: doc[k] for k in g.figures if k in doc}
    got["traffic_total"] = doc["analytic_traffic"]["total"]
    got["kernel_bytes_ratio"] = doc["analytic_traffic"]["kernel_bytes_ratio"]
    assert got == {k: _approx(v) for k, v in g.figures.items()}
    mem = sm.summary["memory"]
    got = {k: mem[k] for k in g.memory if k in mem}
    got["model_peak_bytes"] = mem["model"]["peak_bytes"]
    assert got == g.memory


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_step_summary_recomputed_independently(name: str) -> None:
    sm, cls = _summary(name)
    doc = sm.summary["step_summary"]
    man = json.loads((ROOT / "fixtures" / name / "manifest.json").read_text())
    secs = man["metrics"]["step_time_ms"]["median"] / 1e3
    steps = set(sm.steps)
    nbytes = flops = 0.0
    measured = False
    for step, b, f, src in zip(
        cls.kernels["step"], cls.kernels["bytes"],
        cls.kernels["flops"], cls.kernels["source"], strict=True,
    ):  # fmt: skip
        if int(step) in steps:
            measured |= src == "measured"
            nbytes += b if b == b else 0.0
            flops += f if f == f else 0.0
    n = len(steps)
    assert doc["bytes_source"] == ("measured" if measured else "modelled")
    assert doc["bytes_per_step"] == pytest.approx(nbytes / n, rel=1e-12)
    assert doc["bandwidth_used"] == pytest.approx(nbytes / n / secs, rel=1e-12)
    bw = man["ceilings"]["memory_bandwidth_Bps"]  # the measured ceiling first, unless beaten:
    if doc["bandwidth_roof_source"].startswith("spec, above the measured"):
        assert bw < 4.8e12  # an operator beat it: the H200's spec sheet
        bw = 4.8e12
    assert doc["bandwidth_roof"] == bw
    assert doc["bandwidth_utilisation_pct"] == pytest.approx(100 * nbytes / n / secs / bw)
    assert doc["flops_per_s"] == pytest.approx(flops / n / secs, rel=1e-12)
    assert doc["arithmetic_intensity"] == pytest.approx(flops / nbytes, rel=1e-12)
    # the unprofiled step's idle time: 1 - the trace's GPU busy time / the measured step
    busy = float(sm.step_table["gpu_busy_ms"].mean())
    idle = 100 * (1 - busy / (secs * 1e3))
    assert doc["shares_pct"]["host_idle"] == pytest.approx(idle)
    assert sm.launch.gpu_idle_unprofiled_pct == pytest.approx(idle)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_dynamic_memory_from_the_raw_json(name: str) -> None:
    """Peak minus the lowest allocated memory inside the analysed steps (from the raw
    ``[memory]`` events, before and after each), per token of the batch."""
    sm, _ = _summary(name)
    with gzip.open(find_trace(ROOT / "fixtures" / name)[0], "rt") as f:
        events = json.load(f)["traceEvents"]
    spans = [
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("name", "").startswith("ProfilerStep#")
    ]
    alloc = [
        e["args"] for e in events if e.get("name") == "[memory]" and e["args"]["Device Type"] == 1
    ]
    times = [
        e["ts"] for e in events if e.get("name") == "[memory]" and e["args"]["Device Type"] == 1
    ]
    inside = [a for a, t in zip(alloc, times, strict=True) if any(s <= t < e for s, e in spans)]
    floor = min(min(a["Total Allocated"], a["Total Allocated"] - a["Bytes"]) for a in inside)
    peak = max(a["Total Allocated"] for a in alloc)
    mem = sm.summary["memory"]
    assert mem["floor_allocated_bytes"] == floor
    assert mem["dynamic_peak_bytes"] == peak - floor
    assert mem["activation_bytes_per_token"] == (peak - floor) / (8 * 128)


def test_memory_by_category_at_the_peak() -> None:
    """The stack fixture's per-category timeline at its peak, mapped onto the model's
    categories (plus the allocator memory the timeline does not see) beside the model."""
    sm, _ = _summary("h200-gpt2s-b8-s128-fp32-naive-stack")
    mem = sm.summary["memory"]
    assert mem["peak_by_category"] == {
        "parameter": 501_050_368,
        "optimizer_state": 995_807_232,
        "input": 36_905_024,
        "temporary": 0,
        "activation": 0,
        "gradient": 0,
        "autograd_detail": 412_090_368,
        "unknown": 874_456_576,
    }
    timeline_peak = sum(mem["peak_by_category"].values())
    mapped = mem["peak_by_model_category"]
    assert mapped == {
        "parameters": 501_050_368,
        "gradients": 0,
        "optimizer_state": 995_807_232,
        "activations": 874_456_576,  # 'unknown': saved tensors without an autograd node
        # autograd_detail + input + what the allocator holds beyond the timeline's total
        "other": 412_090_368 + 36_905_024 + (mem["peak_allocated_bytes"] - timeline_peak),
    }
    assert sum(mapped.values()) == mem["peak_allocated_bytes"]
    model = mem["model"]["categories"]
    assert model["optimizer_state"] == mapped["optimizer_state"]
    assert model["activations"] == pytest.approx(mapped["activations"], rel=0.03)
    assert model["parameters"] == pytest.approx(mapped["parameters"], rel=0.01)
    assert mem["model"]["error_pct"] == pytest.approx(-3.104391, abs=1e-6)
