"""tracekit.summary: exact figures on tests/reportgen.py's trace, computed independently."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracekit.parse import Trace, load
from tracekit.summary import classes as C
from tracekit.summary import memory as M
from tracekit.summary import steps as S
from tracekit.summary import summarize

from . import contract
from . import reportgen as rg
from . import tracegen as tg


@pytest.fixture
def trace(tmp_path: Path) -> Trace:
    return load(tg.write(rg.report_trace(), tmp_path / "r.pt.trace.json.gz"))


def independent_shares(kernels: pd.DataFrame, steps: list[int]) -> dict[str, float]:
    """Percent of summed GPU activity time per class, by a plain loop over the rows."""
    per: dict[str, int] = defaultdict(int)
    total = 0
    for cls, dur, step in zip(kernels["class"], kernels["dur"], kernels["step"], strict=True):
        if int(step) in steps:
            per[str(cls)] += int(dur)
            total += int(dur)
    return {c: 100.0 * d / total for c, d in per.items()}


def test_time_shares_equal_independent_sum(trace: Trace) -> None:
    cls = contract.classification(trace)
    sm = summarize(trace, cls)
    got = sm.summary["time_share_pct"]
    want = independent_shares(cls.kernels, sm.steps)
    for c, v in want.items():
        assert got[c] == pytest.approx(v, abs=0.1)
    # and the hand-computed figures of reportgen's docstring
    for c, us in rg.EXPECTED_US.items():
        assert got[c] == pytest.approx(100.0 * us / rg.TOTAL_US, abs=1e-9)
    assert sum(v for v in got.values() if v is not None) == pytest.approx(100.0)
    ms = sm.summary["ms_per_step"]
    assert ms["layernorm"] == pytest.approx(8e-3 / 2)  # 8 µs over 2 steps


def test_class_order_first_three_always_present(tmp_path: Path) -> None:
    t = load(tg.write(tg.small_trace(), tmp_path / "s.pt.trace.json.gz"))
    k = t.kernels.assign(
        **{"class": ["gemm", "gemm", "reduction", "memcpy", "elementwise", "elementwise"]},
        flops=np.nan,
        bound="unknown",
    )
    table = C.class_table(k, 2)
    assert list(table["class"][:3]) == ["softmax", "layernorm", "gemm"]
    assert list(table["class"]) == [
        "softmax",
        "layernorm",
        "gemm",
        "elementwise",
        "reduction",
        "memcpy",
    ]
    soft = table.set_index("class").loc["softmax"]
    assert soft.gpu_time_ns == 0 and soft.time_share_pct == 0.0
    assert table["flop_share_pct"].isna().all()  # no FLOP count anywhere


def test_flop_and_bound_shares(trace: Trace) -> None:
    sm = summarize(trace, contract.classification(trace))
    fl = sm.summary["flop_share_pct"]
    total = sum(f for c, f, *_ in contract.OPS.values() if f is not None)
    assert fl["gemm"] == pytest.approx(100.0 * (32768.0 + 4.0e6) / total)
    assert fl["other"] == 0.0
    b = sm.summary["bound_time_share_pct"]
    assert b["compute-bound"] == pytest.approx(100.0 * 4 / 33)  # only aten::mm's 4 µs
    assert b["unknown"] == pytest.approx(100.0 * 1 / 33)  # the hostile kernel
    assert b["memory-bound"] == pytest.approx(100.0 * 28 / 33)
    per_class = sm.classes.set_index("class")
    assert per_class.loc["gemm", "compute_bound_pct"] == pytest.approx(100 * 4 / 9)
    assert np.isnan(per_class.loc["other", "memory_bound_pct"])  # no kernel with a bound
    src = sm.summary["sources"]["flop_source_time_pct"]
    assert src["profiler"] == pytest.approx(100.0 * 5 / 33)  # addmm's FLOPs: with_flops


def test_memory_stats_by_hand(trace: Trace) -> None:
    sm = summarize(trace, contract.classification(trace))
    m = sm.summary["memory"]
    assert m["peak_allocated_bytes"] == 3072 + 8192
    assert m["peak_reserved_bytes"] == 2 * 1024 * 1024
    # step function: 4096 on [13,115), 3072 on [115,151), 11264 on [151,172),
    # 3072 on [172,200) µs; 200 µs = end of the last step
    avg = (4096 * 102 + 3072 * 36 + 11264 * 21 + 3072 * 28) / 187
    assert m["avg_allocated_bytes"] == pytest.approx(avg)
    top = sm.allocators
    assert list(top["op_name"]) == ["aten::_softmax", "aten::addmm"]
    assert list(top["bytes_per_step"]) == [4096, 512]
    assert top["pct"].iloc[0] == pytest.approx(100 * 8192 / 9216)
    per = sm.memory_per_step.set_index("step")
    assert per.loc[1, "peak_allocated"] == 4096 and per.loc[2, "peak_allocated"] == 11264


def test_steps_idle_and_launch_bound(trace: Trace) -> None:
    sm = summarize(trace, contract.classification(trace))
    st = sm.step_table.set_index("step")
    assert st.loc[1, "step_time_ms"] == pytest.approx(0.1)
    assert st.loc[1, "gpu_busy_ms"] == pytest.approx(0.014)  # 5 + 4 + 3 + 2 µs
    assert st.loc[2, "gpu_idle_pct"] == pytest.approx(100 * (1 - 19 / 100))
    assert sm.summary["gpu_idle_pct"] == pytest.approx(100 * (1 - 33 / 200))
    lc = sm.launch
    assert lc.median_kernel_us == pytest.approx(3.5)  # kernels only, not the memcpy
    assert lc.launch_bound and sm.warnings and "launch-bound" in sm.warnings[0]


def test_not_launch_bound_when_gpu_is_busy() -> None:
    steps = pd.DataFrame(
        {
            "step": [0],
            "name": ["s"],
            "cpu_ts": [0],
            "cpu_dur": [1000_000],
            "gpu_ts": [0],
            "gpu_dur": [1000_000],
            "gpu_busy": [950_000],
            "kernel_count": [2],
        }
    )
    kernels = pd.DataFrame(
        {"kind": ["kernel"] * 2, "step": [0, 0], "dur": [500_000, 450_000], "runtime_id": [0, 1]}
    )
    runtime = pd.DataFrame({"name": ["cudaLaunchKernel"] * 2, "step": [0, 0], "dur": [5000] * 2})
    lc = S.launch_check(S.step_table(steps), kernels, runtime)
    assert lc.gpu_idle_pct == pytest.approx(5.0)
    assert not lc.launch_bound and lc.message is None
    assert lc.shorter_than_launch_pct == 0.0


def test_operator_table_groups_calls() -> None:
    ops = pd.DataFrame(
        {
            "name": ["aten::mm", "aten::mm", "aten::mm"],
            "class": ["gemm"] * 3,
            "input_dims": ["[[2, 3], [3, 4]]", "[[2,3],[3,4]]", "[[5,5],[5,5]]"],
            "input_types": ['["float", "float"]'] * 3,
            "gpu_dur": [1000, 3000, 500],
            "flops": [48.0, 48.0, 250.0],
            "bytes": [80.0, 80.0, 300.0],
            "roof_pct": [10.0, 30.0, 1.0],
            "pipe": ["simt_fp32"] * 3,
            "bound": ["memory-bound"] * 3,
            "source": ["modelled", "measured", "modelled"],
        }
    )
    # the first two differ only in whitespace: grouped by the trace's text, then shown compact
    ops.loc[1, "input_dims"] = ops.loc[0, "input_dims"]
    t = C.operator_table(ops, n_steps=1)
    first = t.iloc[0]
    assert first.calls == 2 and first.gpu_time_ns == 4000
    assert first.input_dims == "[[2,3],[3,4]]"
    assert first.roof_pct == pytest.approx((10 * 1000 + 30 * 3000) / 4000)
    assert first.attained_flops == pytest.approx(96.0 / 4e-6)
    assert first.source == "mixed"
    assert t.iloc[1].calls == 1


def test_compact_json() -> None:
    assert C.compact_json("[\n [8, 64],\n []\n]") == "[[8,64],[]]"
    assert C.compact_json(None) == "" and C.compact_json("not json  x") == "not json x"


def test_thin_keeps_peaks() -> None:
    n = 10_000
    tl = pd.DataFrame(
        {"ts": np.arange(n, dtype=np.int64) * 10, "allocated": np.zeros(n), "reserved": np.zeros(n)}
    )
    tl.loc[4321, "allocated"] = 99.0
    out = M.thin(tl, 100)
    assert len(out) <= 100 and out["allocated"].max() == 99.0


def _timeline_file(path: Path, n: int) -> Path:
    doc = {
        "format": "tracekit.memory_timeline",
        "version": 1,
        "device": "cuda:0",
        "time_unit": "us",
        "categories": ["parameter", "activation"],
        "times_us": [float(i) for i in range(n)],
        "bytes": [[100, (5000 if i == n // 3 else i)] for i in range(n)],
    }
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def test_category_timeline(tmp_path: Path) -> None:
    tl = M.load_category_timeline(_timeline_file(tmp_path / "m.json.gz", 5000))
    assert tl.categories == ["parameter", "activation"] and tl.bytes.shape == (5000, 2)
    small = M.downsample_categories(tl, 200)
    assert len(small.times_us) <= 200
    assert small.bytes.sum(axis=1).max() == 5100  # the peak row survives
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(gzip.compress(b'{"format": "other"}'))
    with pytest.raises(Exception, match="not a tracekit memory timeline"):
        M.load_category_timeline(bad)


def test_no_gpu_activity(tmp_path: Path) -> None:
    doc = tg.small_trace()
    doc["traceEvents"] = [
        e for e in doc["traceEvents"] if e.get("cat") not in ("kernel", "gpu_memcpy")
    ]
    t = load(tg.write(doc, tmp_path / "cpu.pt.trace.json"))
    cls = contract.StandIn(
        kernels=t.kernels.assign(**{"class": []}, flops=[], bound=[]),
        ops=pd.DataFrame(
            {
                "name": [],
                "class": [],
                "step": [],
                "gpu_dur": [],
                "flops": [],
                "bytes": [],
                "roof_pct": [],
            }
        ),
        classes=pd.DataFrame(),
        steps=pd.DataFrame(),
        device=pd.DataFrame(),
    )
    sm = summarize(t, cls)
    ts = sm.summary["time_share_pct"]
    assert ts == {}  # no activity: no class row (absent, not a share of None)
    assert sm.summary["flop_share_pct"] is None
    assert any("no GPU activity" in n for n in sm.notes)


def test_unprofiled_step_time_decides_launch_bound(trace: Trace) -> None:
    table = S.step_table(trace.steps)
    busy_ms = float(table["gpu_busy_ms"].mean())  # 16.5 µs
    # the traced steps look host-bound, the unprofiled step is hardly longer than GPU work
    lc = S.launch_check(table, trace.kernels, trace.runtime, measured_step_ms=busy_ms / 0.97)
    assert lc.gpu_idle_pct == pytest.approx(83.5)
    assert lc.gpu_idle_unprofiled_pct == pytest.approx(3.0)
    assert not lc.launch_bound
    lc = S.launch_check(table, trace.kernels, trace.runtime, measured_step_ms=busy_ms * 2)
    assert lc.launch_bound and lc.message is not None and "without the profiler" in lc.message


def test_cpu_only_trace_has_no_gpu_idle(tmp_path: Path) -> None:
    doc = tg.small_trace()
    doc["traceEvents"] = [
        e for e in doc["traceEvents"] if e.get("cat") not in ("kernel", "gpu_memcpy")
    ]
    t = load(tg.write(doc, tmp_path / "cpu.pt.trace.json"))
    lc = S.launch_check(S.step_table(t.steps), t.kernels, t.runtime, measured_step_ms=1.0)
    assert lc.gpu_idle_pct is None and lc.gpu_idle_unprofiled_pct is None
    assert not lc.launch_bound


def test_category_timeline_aligned_by_base_time(tmp_path: Path) -> None:
    """Recent PyTorch writes ts relative to baseTimeNanoseconds; the category export uses
    the epoch clock. tracekit aligns the two through the base time."""
    from tracekit.summary.build import _category_offset

    doc = rg.report_trace()
    shift = tg.T0 - 5_000_000  # ts become ~5 s: a steady clock, not the epoch
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] -= shift
    doc["baseTimeNanoseconds"] = shift * 1000
    t = load(tg.write(doc, tmp_path / "b.pt.trace.json"))
    epoch_us = np.asarray([tg.T0 + 20.0, tg.T0 + 150.0])  # 20 and 150 µs into the trace
    off = _category_offset(t, epoch_us)
    assert off is not None
    # float64 epoch nanoseconds resolve 256 ns: plenty for a plot in ms
    assert (epoch_us * 1e3 + off).tolist() == pytest.approx([20_000.0, 150_000.0], abs=500)
    assert _category_offset(t, epoch_us + 3.6e9) is None  # an hour later: not this trace
