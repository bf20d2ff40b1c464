"""The critical path (tracekit.summary.critical_path): hand-built traces whose path and
what-if answers are known by construction, the graph engine on hand-made graphs, and
golden figures on the fixtures (docs/critical-path.md)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tracekit
from tracekit.errors import TraceError
from tracekit.summary import critical_path as CP
from tracekit.summary.critical_path import graph as G
from tracekit.summary.critical_path import tables as T

from . import tracegen as tg

ROOT = Path(__file__).resolve().parents[1]
EXTERNAL = Path("/work/shared/external-traces")


class Gen:
    """Kineto events with fresh correlation and External ids (times in us)."""

    def __init__(self) -> None:
        self.ev: list[dict[str, Any]] = []
        self.id = 1000

    def _next(self) -> int:
        self.id += 1
        return self.id

    def step(self, n: int, ts: float, dur: float) -> None:
        self.ev.append(tg.annot(f"ProfilerStep#{n}", ts, dur, self._next()))

    def op(self, ts: float, dur: float, tid: int = tg.TID, name: str = "aten::add") -> None:
        self.ev.append(tg.op(name, ts, dur, self._next(), tid=tid))

    def call(self, name: str, ts: float, dur: float, tid: int = tg.TID) -> int:
        c = self._next()
        self.ev.append(tg.launch(ts, c, c, tid=tid, name=name, dur=dur))
        return c

    def launch(
        self,
        ts: float,
        dur: float,
        k_ts: float,
        k_dur: float,
        *,
        stream: int = 7,
        tid: int = tg.TID,
        cat: str = "kernel",
        name: str = "void k(float*)",
        api: str = "cudaLaunchKernel",
    ) -> None:
        c = self.call(api, ts, dur, tid)
        self.ev.append(tg.kernel(name, k_ts, k_dur, c, c, stream=stream, cat=cat))

    def load(self, tmp: Path) -> Any:
        doc = {"schemaVersion": 1, "traceEvents": self.ev, "displayTimeUnit": "ms"}
        return tracekit.load(tg.write(doc, tmp / "t.pt.trace.json"))


def whatif(cp: CP.CriticalPath) -> dict[str, float]:
    return {r.scenario: round(r.path_ms * 1e3, 3) for r in cp.what_if.itertuples()}


def on_us(cp: CP.CriticalPath) -> dict[str, float]:
    return {r.key: round(r.on_path_ms * 1e3, 3) for r in cp.on_path.itertuples() if r.on_path_ms}


def test_cpu_bound_launch_gaps_dominate(tmp_path: Path) -> None:
    """Ten 10-us operators back to back, each launching (2 us call) a 1-us kernel that
    starts 5 us after its call: the step is its CPU time, the GPU idles."""
    g = Gen()
    g.step(1, 0, 100)
    for i in range(10):
        g.op(10 * i, 10)
        g.launch(10 * i + 2, 2, 10 * i + 7, 1)
    cp = CP.analyse(
        g.load(tmp_path),
        scenarios=[
            CP.class_speedup("kernel", 2),
            CP.launch_free(),
            CP.host_speedup(2),
            CP.cuda_graphs(),
            CP.fuse(("kernel",)),
        ],
    )
    ps = cp.per_step.iloc[0]
    assert ps.path_ms * 1e3 == pytest.approx(100) and ps.traced_ms * 1e3 == pytest.approx(100)
    assert ps.replay_exact_pct == 100.0
    assert on_us(cp) == {"cpu_op": 80.0, "cpu_launch": 20.0}
    kern = cp.on_path.set_index("key").loc["kernel"]
    assert kern.gpu_ms * 1e3 == pytest.approx(10) and kern.off_path_pct == 100.0
    assert cp.summary.bound == "host"
    assert whatif(cp) == {
        "kernel_x2": 100.0,  # off the path: buys nothing
        "launch_free": 80.0,  # the ten 2-us launch calls
        "host_x2": 50.0,
        # one graph: 10 kernels of 1 us, each after a gap capped at G0 = 1 us
        "cuda_graphs": 20.0,
        "fuse_kernel": 82.0,  # nine of the ten launch calls disappear
    }


def test_gpu_bound_kernels_back_to_back(tmp_path: Path) -> None:
    """Ten 50-us kernels launched every 10 us queue up: the step is the stream's chain."""
    g = Gen()
    g.step(1, 0, 100)
    for i in range(10):
        g.op(10 * i, 10)
        g.launch(10 * i + 2, 2, 7 + 51 * i, 50)
    cp = CP.analyse(
        g.load(tmp_path),
        scenarios=[
            CP.class_speedup("kernel", 2),
            CP.class_speedup("kernel", 10),
            CP.launch_free(),
            CP.cuda_graphs(),
        ],
    )
    ps = cp.per_step.iloc[0]
    # 10 kernels + 10 gaps of 1 us (the first: after the previous step's last kernel)
    assert ps.path_ms * 1e3 == pytest.approx(510) and ps.traced_ms * 1e3 == pytest.approx(509)
    assert on_us(cp) == {"kernel": 500.0, "gpu_idle": 10.0}
    assert cp.on_path.set_index("key").loc["kernel"].off_path_pct == 0.0
    assert cp.summary.bound == "gpu"
    assert whatif(cp) == {
        "kernel_x2": 260.0,
        "kernel_x10": 100.0,  # 60 us of GPU per step: now the host's 100 us set the pace
        "launch_free": 510.0,
        "cuda_graphs": 510.0,
    }


def _two_streams(g: Gen) -> None:
    """Kernel A (50 us, stream 7); memcpy B (10 us, stream 8) waits for A through
    cudaEventRecord / cudaStreamWaitEvent and starts 1 us after A ends."""
    g.step(1, 0, 20)
    g.op(0, 20)
    g.launch(1, 2, 6, 50, stream=7)
    g.call("cudaEventRecord", 4, 1)
    g.call("cudaStreamWaitEvent", 6, 1)
    g.launch(
        8,
        2,
        57,
        10,
        stream=8,
        cat="gpu_memcpy",
        name="Memcpy DtoD (Device -> Device)",
        api="cudaMemcpyAsync",
    )


def test_two_streams_with_a_wait(tmp_path: Path) -> None:
    g = Gen()
    _two_streams(g)
    t = g.load(tmp_path)
    cp = CP.analyse(t, copies=1, scenarios=[CP.class_speedup("kernel", 2)])
    assert cp.graphs[0].counts["stream_wait_edges"] == 1
    # one step alone: 1 us of CPU, launch latency 5, A 50, the wait 1, B 10
    assert cp.per_step.iloc[0].path_ms * 1e3 == pytest.approx(67)
    assert on_us(cp) == {
        "kernel": 50.0,
        "memcpy": 10.0,
        "cpu_op": 1.0,
        "launch_latency": 5.0,
        "stream_wait": 1.0,
    }
    assert whatif(cp) == {"kernel_x2": 42.0}  # B follows A
    # the steady state: A's stream repeats every 51 us, B keeps up behind it
    steady = CP.analyse(t, scenarios=[CP.class_speedup("memcpy", 2)])
    assert steady.per_step.iloc[0].path_ms * 1e3 == pytest.approx(51)
    assert on_us(steady) == {"kernel": 50.0, "gpu_idle": 1.0}
    assert whatif(steady) == {"memcpy_x2": 51.0}


def test_device_synchronize_blocks_the_cpu(tmp_path: Path) -> None:
    g = Gen()
    g.step(1, 0, 70)
    g.op(0, 10)
    g.launch(1, 2, 6, 50)
    g.call("cudaDeviceSynchronize", 10, 47)  # returns 1 us after the kernel
    g.op(57, 10)
    t = g.load(tmp_path)
    for copies in (1, 3):  # the sync serialises the steps: no overlap between them
        cp = CP.analyse(t, copies=copies, scenarios=[CP.class_speedup("kernel", 2)])
        assert cp.graphs[0].counts["sync_latency_edges"] == 1
        assert cp.per_step.iloc[0].path_ms * 1e3 == pytest.approx(70)
        assert on_us(cp) == {
            "kernel": 50.0,
            "cpu_op": 11.0,
            "cpu_untraced": 3.0,
            "launch_latency": 5.0,
            "sync_latency": 1.0,
        }
        assert whatif(cp) == {"kernel_x2": 45.0}


def test_sync_before_a_streams_first_kernel(tmp_path: Path) -> None:
    """A stream whose first activity comes after a device sync: the sync waited for
    nothing on it (its entry is a stand-in, not a kernel), and the replay stays exact."""
    g = Gen()
    g.step(1, 0, 80)
    g.op(0, 10)
    g.launch(1, 2, 6, 50)
    g.call("cudaDeviceSynchronize", 10, 47)
    g.op(57, 20)
    g.launch(60, 2, 65, 10, stream=8)
    cp = CP.analyse(g.load(tmp_path), copies=1, scenarios=[])
    assert cp.graphs[0].counts["sync_latency_edges"] == 1
    assert cp.per_step.iloc[0].replay_exact_pct == 100.0
    assert cp.per_step.iloc[0].path_ms * 1e3 == pytest.approx(80)


def test_thread_handoff_backward_thread(tmp_path: Path) -> None:
    """The main thread waits (no events) while the autograd thread works."""
    g = Gen()
    g.step(1, 0, 70)
    g.op(0, 10)
    g.op(15, 40, tid=tg.BWD_TID, name="autograd::engine::evaluate_function: MmBackward0")
    g.launch(20, 2, 25, 5, tid=tg.BWD_TID)
    g.op(60, 10)
    cp = CP.analyse(g.load(tmp_path), copies=1, scenarios=[CP.host_speedup(2)])
    assert cp.graphs[0].counts["thread_handoff_edges"] == 2
    assert cp.per_step.iloc[0].path_ms * 1e3 == pytest.approx(70)
    assert on_us(cp) == {"cpu_op": 58.0, "cpu_launch": 2.0, "thread_handoff": 10.0}
    # the main thread's 50-us gap is a wait, not work: it shrinks with the other thread
    assert whatif(cp) == {"host_x2": 40.0}


def test_launch_queue_back_pressure(tmp_path: Path) -> None:
    """150 launches of 100-us kernels from a fast host: after Q = 100 in flight each call
    blocks until a kernel completes. The blocked time is a wait, not host work: with the
    kernels 10x faster the host's own 2-us calls are far from the critical path."""
    g = Gen()
    q, n, k_dur = 100, 150, 100
    call, end = 0.0, []
    k_start = 0.0
    for i in range(n):
        k_start = max(call + 5, (end[-1] + 1) if end else 0)
        free = end[i - q] + 1 if i >= q else 0
        ret = max(call + 2, free)
        g.launch(call, ret - call, k_start, k_dur)
        end.append(k_start + k_dur)
        call = ret + 1
    g.step(1, 0, call)
    t = g.load(tmp_path)
    cp = CP.analyse(t, scenarios=[CP.class_speedup("kernel", 10)])
    P = T.prepare(t)
    assert P.queue == q
    assert cp.graphs[0].counts["launch_queue_edges"] == n - q
    assert cp.per_step.iloc[0].replay_exact_pct == 100.0
    assert cp.summary.bound == "gpu"
    assert cp.per_step.iloc[0].path_ms * 1e3 == pytest.approx(n * (k_dur + 1))
    assert whatif(cp) == {"kernel_x10": n * (k_dur / 10 + 1)}


# --- the graph engine on hand-made graphs ---------------------------------------------


def _graph(
    times: list[list[int]], cross: list[tuple[int, int, int]], chain_w: list[list[int]]
) -> G.Graph:
    """Chains of observed times, cross edges (src, dst, ns), chain weights into each point."""
    t = np.concatenate([np.asarray(c, np.int64) for c in times])
    cs = np.cumsum([0] + [len(c) for c in times]).astype(np.int64)
    pts = [p for p in range(len(t)) if p not in cs[:-1]]
    wc = [w for ws in chain_w for w in ws]
    src = np.array([c[0] for c in cross], np.int64)
    dst = np.array([c[1] for c in cross], np.int64)
    g = G.Graph(
        time=t,
        chain_start=cs,
        chain_name=[f"c{i}" for i in range(len(times))],
        src=src,
        dst=dst,
        comp_edge=np.r_[np.asarray(pts, np.int64), len(t) + np.arange(len(cross))],
        comp_key=np.r_[np.zeros(len(pts), np.int64), np.ones(len(cross), np.int64)],
        comp_ns=np.r_[np.asarray(wc, np.int64), np.array([c[2] for c in cross], np.int64)],
        keys=["work", "link"],
        entry=np.array([0], np.int64),
        entry_kind=np.array([G.ORIGIN], np.int8),
        entry_from=np.array([-1], np.int64),
        entry_obs=np.array([0], np.int64),
    )
    return G._sorted_edges(g)


def test_longest_path_on_a_small_dag() -> None:
    # chain 0: 0 -(10)-> 1 -(10)-> 2 ; chain 1: 3 -(5)-> 4 ; 1 -> 3 (2), 4 -> 2 (1)
    g = _graph([[0, 10, 20], [12, 17]], [(1, 3, 2), (4, 2, 1)], [[10, 10], [5]])
    w = G.weights(g)
    t = G.solve(g, w, np.array([0], np.int64))
    assert t.tolist() == [0, 10, 20, 12, 17]
    slow = G.weights(g, G.Weights(key_mult={"link": 10.0}))  # links 20 and 10 ns
    t = G.solve(g, slow, np.array([0], np.int64))
    assert t.tolist() == [0, 10, 45, 30, 35]  # 2 now waits for chain 1
    bind = G.binding(g, slow, t)
    assert bind[2] >= g.n_points and g.src[bind[2] - g.n_points] == 4


def test_a_cycle_is_an_error() -> None:
    g = _graph([[0, 10], [0, 10]], [(1, 2, 0), (3, 0, 0)], [[10], [10]])
    g.entry = np.array([], np.int64)
    g.entry_kind = np.array([], np.int8)
    g.entry_from = np.array([], np.int64)
    g.entry_obs = np.array([], np.int64)
    rel = np.full(g.n_points, 0, np.int64)
    g.entry = np.arange(g.n_points, dtype=np.int64)
    with pytest.raises(TraceError, match="cycle"):
        G.solve(g, G.weights(g), rel)


def test_collectives_tie_ranks() -> None:
    """Rank 0 reaches an all-reduce at 10, rank 1 at 30; each instance's kernel ran until
    40 on its own trace. Tied, neither ends before the later arrival plus the transfer
    (10 ns): if rank 1 arrives 20 ns later, both end 20 ns later."""
    r0 = _graph([[0, 10, 40]], [], [[10, 30]])
    r1 = _graph([[0, 30, 40]], [], [[30, 10]])
    g, off = G.combine([r0, r1])
    g = G.tie_collective(g, off + 1, off + 2, "collective")
    rel = np.array([0, 0], np.int64)
    t = G.solve(g, G.weights(g), rel)
    assert t[off + 2].tolist() == [40, 40]
    late = G.Weights(comp_mult={int(np.flatnonzero(g.comp_edge == off[1] + 1)[0]): 50 / 30})
    t = G.solve(g, G.weights(g, late), rel)
    assert t[off + 2].tolist() == [60, 60]


# --- fixtures -------------------------------------------------------------------------


@cache
def _fixture(name: str) -> CP.CriticalPath:
    from tracekit.classify import classify

    t = tracekit.load(ROOT / "fixtures" / name)
    return CP.analyse(t, classify(t, manifest=t.manifest))


# name: path ms, traced ms, bound, {key: on-path share %} (the largest), what-ifs ms
GOLDEN: dict[str, tuple[float, float, str, dict[str, float], dict[str, float]]] = {
    "h200-gpt2s-b8-s128-fp32-naive": (
        26.862,
        26.857,
        "gpu",
        {
            "gemm": 74.6,
            "optimizer": 10.3,
            "elementwise": 2.8,
            "layout": 1.3,
            "softmax": 2.0,
            "reduction": 1.6,
            "layernorm": 1.3,
            "gpu_idle": 4.4,
        },
        {
            "gemm_x2": 26.118,
            "optimizer_x2": 26.118,
            "elementwise_x2": 26.482,
            "softmax_x2": 26.593,
            "reduction_x2": 26.641,
            "layout_x2": 26.68,
            "launch_free": 26.862,
            "host_x2": 26.862,
            "cuda_graphs": 26.667,
            "fuse_elementwise+activation": 26.725,
        },
    ),
    "h200-gpt2s-b8-s128-fp32-naive-stack": (
        30.028,
        30.028,
        "host",
        {"cpu_op": 52.8, "cpu_untraced": 31.5, "cpu_launch": 12.3, "thread_handoff": 3.3},
        {
            "gemm_x2": 30.028,
            "optimizer_x2": 30.028,
            "elementwise_x2": 30.028,
            "softmax_x2": 30.028,
            "reduction_x2": 30.028,
            "layout_x2": 30.028,
            "launch_free": 26.921,
            "host_x2": 26.921,
            "cuda_graphs": 26.729,
            "fuse_elementwise+activation": 29.9,
        },
    ),
    "h200-gpt2s-b8-s128-bf16-naive": (
        31.776,
        31.776,
        "host",
        {"cpu_op": 60.8, "cpu_untraced": 22.2, "cpu_launch": 14.3, "thread_handoff": 2.7},
        {
            "optimizer_x2": 31.776,
            "elementwise_x2": 31.776,
            "gemm_x2": 31.776,
            "reduction_x2": 31.776,
            "layernorm_x2": 31.776,
            "layout_x2": 31.776,
            "launch_free": 27.246,
            "host_x2": 16.318,
            "cuda_graphs": 10.464,
            "fuse_elementwise+activation": 30.817,
        },
    ),
    "h200-gpt2s-b8-s128-bf16-sdpa": (
        24.049,
        24.049,
        "host",
        {"cpu_op": 60.7, "cpu_untraced": 21.7, "cpu_launch": 13.8, "thread_handoff": 3.6},
        {
            "optimizer_x2": 24.049,
            "elementwise_x2": 24.049,
            "gemm_x2": 24.049,
            "reduction_x2": 24.049,
            "layernorm_x2": 24.049,
            "attention_x2": 24.049,
            "launch_free": 20.729,
            "host_x2": 12.456,
            "cuda_graphs": 8.682,
            "fuse_elementwise+activation": 23.257,
        },
    ),
    "h200-gpt2s-b8-s128-bf16-sdpa-compile": (
        19.597,
        19.597,
        "host",
        {"cpu_op": 67.2, "cpu_launch": 15.1, "cpu_untraced": 13.6, "thread_handoff": 3.9},
        {
            "optimizer_x2": 19.597,
            "gemm_x2": 19.597,
            "elementwise_x2": 19.597,
            "layernorm_x2": 19.597,
            "attention_x2": 19.597,
            "activation_x2": 19.597,
            "launch_free": 16.646,
            "host_x2": 10.185,
            "cuda_graphs": 6.928,
            "fuse_elementwise+activation": 19.254,
        },
    ),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_fixture_golden(name: str) -> None:
    cp = _fixture(name)
    path, traced, bound, shares, what = GOLDEN[name]
    ps = cp.per_step.iloc[0]
    assert round(ps.path_ms, 3) == path and round(ps.traced_ms, 3) == traced
    assert abs(ps.path_ms - ps.traced_ms) <= 0.001 * ps.traced_ms  # within 0.1 %
    assert ps.replay_exact_pct == 100.0
    assert cp.summary.bound == bound
    got = {r.key: r.on_path_pct for r in cp.on_path.itertuples()}
    for k, v in shares.items():
        assert got[k] == pytest.approx(v, abs=0.1), k
    assert sum(v for v in got.values() if v == v) == pytest.approx(100.0, abs=1e-6)
    w = {r.scenario: round(r.path_ms, 3) for r in cp.what_if.itertuples()}
    for k, v in what.items():
        assert w[k] == v, k


def test_summary_block_is_json() -> None:
    cp = _fixture("h200-gpt2s-b8-s128-bf16-sdpa")
    doc = CP.summary_block(cp)
    assert doc is not None
    json.dumps(doc, allow_nan=False)
    assert {"path_ms", "step_ms", "on_path_ms", "off_path_pct", "what_if"} <= set(doc)
    assert set(doc["off_path_pct"]) >= {"gemm", "optimizer", "elementwise"}
    assert doc["what_if"]["cuda_graphs"]["path_ms"] < doc["path_ms"]
    assert CP.summary_block(None) is None


@pytest.mark.skipif(not EXTERNAL.is_dir(), reason="external traces not present")
def test_external_a100_no_step_markers_two_streams() -> None:
    path = EXTERNAL / "a100_alexnet_train.pt.trace.json.gz"
    if not path.is_file():
        pytest.skip("a100 trace absent")
    cp = CP.analyse(tracekit.load(path), scenarios=[])
    c = cp.graphs[0].counts
    assert cp.copies == 1 and c["stream_wait_edges"] > 0 and c["sync_latency_edges"] > 0
    ps = cp.per_step.iloc[0]
    assert ps.replay_exact_pct == 100.0 and ps.path_ms == pytest.approx(ps.traced_ms)


@pytest.mark.skipif(not EXTERNAL.is_dir(), reason="external traces not present")
def test_external_v100_gpu_bound_with_a_full_launch_queue() -> None:
    path = EXTERNAL / "v100_rank0_ns_resolution.pt.trace.json.gz"
    if not path.is_file():
        pytest.skip("v100 trace absent")
    t = tracekit.load(path)
    assert T.prepare(t).queue == 1022
    cp = CP.analyse(t, steps=[102, 103, 104, 105], scenarios=[])
    assert cp.summary.bound == "gpu"
    ps = cp.per_step
    assert (abs(ps.path_ms - ps.traced_ms) <= 0.005 * ps.traced_ms).all()
    assert (ps.replay_exact_pct == 100.0).all()


def test_host_calibration_against_the_unprofiled_step() -> None:
    cp = _fixture("h200-gpt2s-b8-s128-bf16-sdpa")  # measured 11.63 ms, traced 24.05 ms
    k = CP.calibrate_host(cp, 11.630256)
    assert k is not None and k == pytest.approx(2.15, rel=0.01)
    assert CP.predict(cp, CP.host_speedup(k)) == pytest.approx(11.63, rel=0.005)
    assert CP.calibrate_host(cp, 30.0) == 1.0  # slower than traced: nothing to remove
    assert CP.calibrate_host(cp, 5.0) is None  # below even a free host (GPU 8.7 ms)
    # just under a free host's time (within the tolerance): no finite speed-up gets there
    floor = CP.predict(cp, CP.host_speedup(1e6))
    assert CP.calibrate_host(cp, floor * 0.999) is None  # not 2**20 (an H100 run said so)
    k = CP.calibrate_host(cp, floor * 1.01)
    assert k is not None and 1.0 < k < 1e3
    gpu = _fixture("h200-gpt2s-b8-s128-fp32-naive")  # GPU-bound: the host is not the limit
    assert CP.calibrate_host(gpu, 26.656) is None


def test_report_sections() -> None:
    from rich.console import Console

    from tracekit.classify import classify
    from tracekit.reports import html, terminal
    from tracekit.summary import summarize

    t = tracekit.load(ROOT / "fixtures" / "h200-gpt2s-b8-s128-bf16-sdpa")
    sm = summarize(t, classify(t, manifest=t.manifest))
    assert sm.critical_path is not None
    assert sm.summary["critical_path"]["unprofiled"]["host_speedup"] == pytest.approx(
        2.15, rel=0.01
    )
    c = Console(width=80, record=True, color_system=None, force_terminal=False)
    c.print(terminal.critical_path(sm))
    text = c.export_text()
    assert max(len(x) for x in text.splitlines()) <= 80
    flat = " ".join(text.split())
    assert (
        "Critical path 24.05 ms per step (profiled window; traced 24.05 ms, +0.00 %): "
        "host-bound; unprofiled step 11.63 ms: host-bound" in flat
    )
    # the what-ifs are on the unprofiled step: CUDA graphs 8.70 ms of 11.63, not of 24.05
    assert "cuda_graphs" in text and "8.70 ms" in text and "1.34x" in text
    page = html.critical_path(sm)
    assert page.startswith("<h2>Critical path</h2>")
    assert page.count("<tr>") == 1 + len(sm.critical_path.on_path) + 1 + len(
        sm.critical_path.what_if
    ) + 1 + len(sm.critical_path.per_step)
