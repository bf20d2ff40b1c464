"""CPU runs in `tracekit report`: the work operators stand in for kernels.

The rule on synthetic operator trees with a known answer (tests/tracegen), the golden
figures of the CPU fixture (fixtures/cpu-tiny-fp32-naive, made by `tracekit collect --device
cpu`), a `tracekit.profile()` run, and the refusal that remains: a trace whose host made
GPU runtime calls (tests/test_report_fixtures.py: a GPU run's manifest). The held-in user
scripts' CPU reports are checked in tests/test_run_script.py against tests/cpu_classes.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from tensorboard.backend.event_processing import event_accumulator as ea
from torch import nn

import tracekit
from tests import tracegen as tg
from tests.cpu_classes import PROFILE_LOOP
from tracekit.cli import main
from tracekit.commands.report import report
from tracekit.parse import load
from tracekit.parse.cpuview import (
    cpu_activities,
    cpu_view,
    not_cpu_run,
    work_ops,
)
from tracekit.schema import KERNELS

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "fixtures" / "cpu-tiny-fp32-naive"
B = tg.BWD_TID


def _events() -> list[dict[str, Any]]:
    """One step (0..200 us) with every case of the rule; comments give the verdict."""
    op, e = tg.op, iter(range(1, 100))
    return [
        tg.annot("ProfilerStep#1", 0, 200, next(e)),
        op("aten::linear", 10, 30, next(e)),  # work: dispatches, 3 us of its own
        op("aten::t", 11, 1, next(e)),  # a view: overhead
        op("aten::transpose", 11.2, 0.6, next(e)),
        op("aten::addmm", 13, 26, next(e)),  # work: 23.5 us beside its children
        op("aten::expand", 13.5, 0.5, next(e)),
        op("aten::copy_", 14, 2, next(e)),  # work: the bias copy, elementwise
        op("aten::relu", 42, 8, next(e)),
        op("aten::clamp_min", 43, 6, next(e)),
        op("aten::view", 51, 1, next(e)),  # a view at the top: overhead
        op("aten::reshape", 53, 7, next(e)),  # a view that copies through clone
        op("aten::clone", 54, 5, next(e)),
        op("aten::empty_like", 54.1, 0.5, next(e)),
        op("aten::copy_", 55, 4, next(e)),
        op("aten::mean", 62, 18, next(e)),
        op("aten::sum", 63, 7, next(e)),
        op("aten::fill_", 63.5, 0.5, next(e)),
        op("aten::div_", 71, 8, next(e)),
        tg.annot("Optimizer.step#SGD.step", 150, 40, next(e)),  # a wrapper
        op("aten::add_", 151, 9, next(e)),  # class optimizer (its ancestor)
        # backward thread: autograd frames are wrappers
        op("autograd::engine::evaluate_function: MmBackward0", 100, 40, next(e), tid=B),
        op("MmBackward0", 101, 38, next(e), tid=B),
        op("aten::mm", 102, 28, next(e), tid=B),
        op("aten::resolve_conj", 103, 1, next(e), tid=B),
        op("torch::autograd::AccumulateGrad", 141, 4, next(e), tid=B),
        op("aten::detach", 142, 1, next(e), tid=B),
        op("detach", 142.2, 0.5, next(e), tid=B),
    ]


WORK = [  # (name, start us, self time us, class), in start order
    ("aten::linear", 10, 3, "gemm"),
    ("aten::addmm", 13, 23.5, "gemm"),
    ("aten::copy_", 14, 2, "elementwise"),
    ("aten::relu", 42, 2, "activation"),
    ("aten::clamp_min", 43, 6, "activation"),
    ("aten::clone", 54, 0.5, "layout"),  # inside reshape: a layout copy
    ("aten::copy_", 55, 4, "layout"),
    ("aten::mean", 62, 3, "reduction"),
    ("aten::sum", 63, 6.5, "reduction"),
    ("aten::fill_", 63.5, 0.5, "elementwise"),
    ("aten::div_", 71, 8, "elementwise"),
    ("aten::mm", 102, 27, "gemm"),
    ("aten::add_", 151, 9, "optimizer"),
]
BUSY = sum(w[2] for w in WORK)  # 95 us: self time never overlaps


def _write(tmp_path: Path, events: list[dict[str, Any]]) -> Path:
    doc = {"schemaVersion": 1, "traceEvents": events, "displayTimeUnit": "ms"}
    return tg.write(doc, tmp_path / "cpu.pt.trace.json")


def test_work_operators_by_the_rule(tmp_path: Path) -> None:
    t = load(_write(tmp_path, _events()))
    assert not_cpu_run(t) is None
    k = cpu_activities(t.ops)
    assert list(k.columns) == [c.name for c in KERNELS]  # a kernels table
    got = list(zip(k["name"], k["ts"] / 1000, k["dur"] / 1000, strict=True))
    assert got == [w[:3] for w in WORK]  # ns from the trace start
    assert k["kernel_id"].tolist() == list(range(len(WORK)))
    assert set(k["kind"]) == {"cpu_op"} and set(k["device"]) == {-1}
    assert (k["op_name"] == k["name"]).all()
    assert (t.ops.loc[k["op_id"], "name"].to_numpy() == k["name"].to_numpy()).all()  # itself
    assert k["stream"].tolist() == [B if n == "aten::mm" else tg.TID for n in k["name"]]
    assert int(work_ops(t.ops).sum()) == len(WORK)
    # outermost cpu_op: aten::linear for addmm, the autograd frame for mm
    top = dict(zip(k["name"], k["top_op_name"], strict=True))
    assert top["aten::addmm"] == "aten::linear" and top["aten::add_"] == "aten::add_"
    assert top["aten::mm"] == "autograd::engine::evaluate_function: MmBackward0"


def test_cpu_view_steps_and_report(tmp_path: Path) -> None:
    path = _write(tmp_path, _events())
    v = cpu_view(load(path))
    assert v.activity == "cpu"
    s = v.steps.iloc[0]
    assert (s.gpu_busy, s.kernel_count) == (BUSY * 1000, len(WORK))
    assert (s.gpu_ts, s.gpu_dur) == (10_000, (160 - 10) * 1000)
    res = report(path, tmp_path / "rep", tensorboard=tmp_path / "tb")
    sm = res.summary
    assert sm.device_kind == "cpu" and sm.header.device == "CPU"
    acc = ea.EventAccumulator(str(tmp_path / "tb" / "cpu"), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"cpu_ms/gemm", "framework_overhead_pct"} <= tags
    assert not [t for t in tags if t.startswith("gpu_")]
    (over,) = acc.Scalars("framework_overhead_pct")
    assert over.value == pytest.approx(100 - 100 * BUSY / 200)
    got = dict(zip(sm.kernels["name"], sm.kernels["class"], strict=True))
    want: dict[str, set[str]] = {}
    for n, _, _, c in WORK:
        want.setdefault(n, set()).add(c)
    assert got == {n: c.pop() if len(c) == 1 else "mixed" for n, c in want.items()}
    calls = dict(zip(sm.kernels["name"], sm.kernels["calls"], strict=True))
    assert calls["aten::copy_"] == 2
    cu = sm.summary["cpu"]
    assert cu["operator_busy_pct"] == pytest.approx(100 * BUSY / 200)
    assert cu["work_ops_per_step"] == len(WORK) and cu["shares_basis"] == "profiled"
    threads = {r["tid"]: r["busy_ms_per_step"] for r in cu["threads"]}
    assert threads == pytest.approx({tg.TID: (BUSY - 27) / 1000, B: 27 / 1000})
    # 47.5 % operator work: the rest is framework overhead, and it decides
    v2 = sm.summary["step_summary"]
    assert v2["verdict"] == "framework-overhead-bound"
    assert v2["shares_pct"]["framework_overhead"] == pytest.approx(100 - 100 * BUSY / 200)
    assert "launch" not in " ".join(v2["evidence"])
    # no roofline for an unknown CPU: the note says what would give one
    assert any("no roofline for this CPU" in n for n in sm.notes)


def test_a_trace_with_runtime_calls_is_not_a_cpu_run(tmp_path: Path) -> None:
    ev = [*_events(), tg.launch(20, 1, 5)]
    t = load(_write(tmp_path, ev))
    assert "1 CUDA/HIP runtime calls" in str(not_cpu_run(t))
    out = tmp_path / "rep"
    with pytest.raises(tracekit.errors.TraceError, match="GPU activity is missing"):
        report(t.path, out, no_tensorboard=True)
    assert not out.exists()
    only = load(_write(tmp_path, [tg.annot("ProfilerStep#1", 0, 10, 1)]))
    assert "without CPU operators" in str(not_cpu_run(only))


# ------------------------------------------------------------------ the CPU fixture

SHARES = {  # time_share_pct of the CPU time per class (work operators' self time)
    "softmax": 4.441, "layernorm": 12.93, "gemm": 32.492, "activation": 2.358,
    "elementwise": 19.413, "layout": 6.682, "reduction": 9.851, "embedding": 0.036,
    "loss": 1.231, "optimizer": 10.567,
}  # fmt: skip
COUNTS = {"softmax": 9, "layernorm": 15, "gemm": 53, "activation": 4, "elementwise": 82,
          "layout": 34, "reduction": 9, "embedding": 8, "loss": 5, "optimizer": 532}  # fmt: skip


@pytest.fixture(scope="module")
def fixture_report(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return report(FIX, tmp_path_factory.mktemp("cpu") / "rep", no_tensorboard=True)


def test_cpu_fixture_golden(fixture_report: Any) -> None:
    sm = fixture_report.summary
    d = sm.summary
    assert d["device_kind"] == "cpu" and d["device"]["name"] == "CPU (x86_64, 2 threads)"
    assert {k: round(v, 3) for k, v in d["time_share_pct"].items()} == SHARES
    cl = sm.classes[sm.classes["kernel_count"] > 0]
    assert dict(zip(cl["class"], cl["kernel_count"], strict=True)) == COUNTS
    assert d["gpu_time_ms_per_step"] == pytest.approx(707.134312)
    assert d["gpu_idle_pct"] is None and d["launch_bound"] is False
    assert d["critical_path"] is None
    top = d["top_kernels"][0]
    assert (top["name"], top["class"], top["calls"]) == ("aten::mm", "gemm", 19)
    assert top["ms_per_step"] == pytest.approx(148.174593)  # the profiler's Self CPU
    cu = d["cpu"]
    assert cu["work_ops_per_step"] == 751 and cu["median_op_us"] == pytest.approx(3.653)
    assert cu["operator_busy_pct"] == pytest.approx(97.9247, abs=1e-4)
    assert cu["profiler_overhead_pct"] == pytest.approx(272.91, abs=0.01)
    assert cu["intra_op_threads"] == 2 and cu["shares_step_ms"] == pytest.approx(722.120401)
    # the roofline: the run's measured CPU ceilings
    assert d["device"]["peak_flops"] == {"simt_fp32": pytest.approx(4.2027568e9)}
    assert d["sources"]["bandwidth_Bps"] == "measured (manifest ceilings: host memory copy)"
    ss = d["step_summary"]
    assert ss["verdict"] == "memory-bandwidth-bound" and ss["basis"] == "unprofiled"
    assert ss["shares_pct"]["operator_work"] == pytest.approx(97.9247, abs=1e-4)
    assert d["bound_time_share_pct"]["memory-bound"] == pytest.approx(67.355, abs=1e-3)
    assert sm.broken == []  # the report contradicts itself nowhere (summary/invariants.py)
    assert ss["evidence"][0].endswith("of the profiled 722.12 ms step (1 thread(s) run operators)")
    assert any(n.startswith("CPU run: 751 work operators of 2051") for n in d["notes"])


def test_cpu_fixture_self_time_adds_up(fixture_report: Any) -> None:
    """Every instant of the step is some operator's self time (the ProfilerStep
    annotation's own for the gaps): the work operators' share is the operator work, the
    wrappers' and views' the framework overhead. Self time from the parsed ops table."""
    ops = load(FIX).ops
    child = ops[ops["parent"] >= 0].groupby("parent")["dur"].sum()
    own = ops["dur"] - child.reindex(ops["op_id"]).fillna(0).to_numpy()
    step = ops[ops["name"] == "ProfilerStep#2"].iloc[0]
    inside = (ops["step"] == 2).to_numpy()
    assert float(own[inside].sum()) == pytest.approx(step["dur"])
    work = inside & work_ops(ops)
    d = fixture_report.summary.summary
    assert 100 * float(own[work].sum()) / step["dur"] == pytest.approx(
        d["cpu"]["operator_busy_pct"]
    )
    # per operator name, the kernels table's time is the self time
    got = fixture_report.summary.kernels.set_index("name")["gpu_time_ns"]
    want = own[work].groupby(ops["name"][work]).sum()
    assert got.sort_index().to_dict() == want.sort_index().to_dict()


def test_cpu_fixture_renders_as_cpu(
    fixture_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(FIX), "-o", str(fixture_report.out), "--no-tensorboard"]) == 0
    text = capsys.readouterr().out
    for want in ("CPU time per class (707 ms of operator work per step)",
                 "Roofline: top operators by CPU time", "CPU utilisation",
                 "Top work operators by CPU time", "memory-bandwidth-bound (722 ms step, "
                 "profiled)", "over the 194 ms step, measured without the profiler"):  # fmt: skip
        assert want in text, want
    assert "GPU" not in text.replace("GPU streams", "")  # the critical-path note names them
    page = (fixture_report.out / "report.html").read_text()
    assert "<h2>CPU utilisation</h2>" in page and "GPU utilisation" not in page
    assert "<h2>CPU time and FLOPs per class</h2>" in page


# ------------------------------------------------------------------ tracekit.profile()


def test_profile_run_on_cpu_reports(tmp_path: Path) -> None:
    """A `tracekit.profile()` run on the CPU: ceilings measured, so the CPU has a roofline;
    memory by category from the category step that follows the profiled ones by default."""
    out = tmp_path / "p"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 8))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64), torch.randn(32, 8)
    with tracekit.profile(
        out, steps=2, warmup=1, wait=0, profile_warmup=1, active=1, quiet=True
    ) as prof:
        for _ in range(7):  # 1 warm-up, 2 timed, 2 profiled, 2 in the category step
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    sm = report(out, no_tensorboard=True).summary
    d = sm.summary
    assert d["device_kind"] == "cpu" and d["device"]["peak_flops"].keys() == {"simt_fp32"}
    assert d["device"]["bandwidth_Bps"] > 0 and sm.roofs.known
    cl = sm.classes[sm.classes["kernel_count"] > 0]
    assert dict(zip(cl["class"], cl["kernel_count"], strict=True)) == PROFILE_LOOP["classes"]
    ops = sm.operators.groupby("name")["class"].agg(lambda c: sorted(set(c)))
    want = PROFILE_LOOP["ops"]
    assert {op: ops[op] for op in want} == {op: [c] for op, c in want.items()}
    # shapes recorded, roofline known: only a few shape-less operators of a few µs each
    # (0.02 % here, 1.4 % once on a loaded 2-core host)
    # unknown: the wrappers' own dispatch time (aten::linear carries no FLOPs or bytes: its
    # aten::addmm does, classify/wrappers.py), a large share of a 64x128 MLP's operator time
    assert d["bound_time_share_pct"]["unknown"] < 35.0
    v = d["step_summary"]["verdict"]
    assert v in ("framework-overhead-bound", "compute-bound", "memory-bandwidth-bound")
    assert sm.categories is not None and d["memory"]["categories"] is True
    cats = d["memory"]["peak_by_model_category"]
    assert cats["parameters"] == (64 * 128 + 128 + 128 * 8 + 8) * 4  # fp32, live at the peak
