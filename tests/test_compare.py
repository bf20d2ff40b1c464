"""tracekit compare: golden deltas on the real H200 fixture pairs, unit tests on small
frames, and the rendering on a fixed-width console."""

from __future__ import annotations

import io
import json
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from rich.console import Console

from tracekit.cli import main
from tracekit.compare import build as B
from tracekit.compare import compare
from tracekit.compare import diff as D
from tracekit.reports import compare as R

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def _fx(name: str) -> Path:
    return FIX / f"h200-gpt2s-b8-s128-{name}"


@cache
def _pair(a: str, b: str) -> Any:
    from tracekit.analyse import analyse

    return compare(analyse(_fx(a)), analyse(_fx(b)))


# (A, B): step time A, B [ms]; gemm ms A, B; softmax ms A, B; kernels only in A, only in B;
# operators matched, only A, only B; config diff keys; kernel launches delta
GOLDEN = {
    ("bf16-sdpa", "bf16-sdpa-compile"): (24.04872, 19.596681, 1.545343, 1.52685, 0.182112,
                                         0.152289, 21, 38, 27, 36, 43, ["compile"], -108),
    ("fp32-naive", "bf16-naive"): (26.85713, 31.776041, 20.032978, 1.80928, 0.536802, 0.292231,
                                   19, 30, 61, 1, 11, ["dtype"], 271),
    ("bf16-naive", "bf16-sdpa"): (31.776041, 24.04872, 1.80928, 1.545343, 0.292231, 0.182112,
                                  15, 5, 59, 13, 4, ["attention", "model.attention"], -252),
}  # fmt: skip


@pytest.mark.parametrize("pair", sorted(GOLDEN))
def test_golden_fixture_pairs(pair: tuple[str, str]) -> None:
    st_a, st_b, g_a, g_b, s_a, s_b, k_a, k_b, om, oa, ob, keys, dk = GOLDEN[pair]
    c = _pair(*pair)
    m = c.metrics.set_index("metric")
    assert m.at["step_time_ms", "a"] == pytest.approx(st_a, abs=1e-9)
    assert m.at["step_time_ms", "delta"] == pytest.approx(st_b - st_a, abs=1e-9)
    cl = c.classes.set_index("class")
    assert cl.at["gemm", "delta_ms"] == pytest.approx(g_b - g_a, abs=1e-9)
    assert cl.at["softmax", "delta_ms"] == pytest.approx(s_b - s_a, abs=1e-9)
    assert c.doc["kernels"]["only_a"] == k_a
    assert c.doc["kernels"]["only_b"] == k_b
    assert (c.doc["operators"]["matched"], c.doc["operators"]["only_a"]) == (om, oa)
    assert c.doc["operators"]["only_b"] == ob
    assert [d["key"] for d in c.config_diff] == keys
    assert m.at["kernels_per_step", "delta"] == dk
    assert c.same_device and not c.notes
    # shares of each run add up; deltas are B - A
    assert cl["a_share_pct"].sum() == pytest.approx(100.0)
    assert (cl["delta_pp"] == cl["b_share_pct"] - cl["a_share_pct"]).all()


def test_compile_pair_maps_fused_kernels_to_eager_ops() -> None:
    c = _pair("bf16-sdpa", "bf16-sdpa-compile")
    assert set(c.fused["side"]) == {"B"}
    tot = c.fused_totals["B"]
    assert tot["kernels"] == 38  # every kernel only in B is a Triton kernel
    assert tot["ms"] == pytest.approx(1.561511, abs=1e-9)
    ln = c.fused[c.fused["fused_ops"] == "_to_copy,native_layer_norm_backward,view"].iloc[0]
    assert (ln["class"], ln["calls"]) == ("layernorm", 99)
    # Inductor's mm(out=) matches eager mm by the out= prefix rule
    mm = c.operators[(c.operators["name"] == "aten::mm") & (c.operators["match"] != "")]
    assert set(mm["match"]) == {"out= variant"} and (mm["status"] == "both").all()


# ------------------------------------------------------------------------ unit tests


def _classes(rows: dict[str, float]) -> pd.DataFrame:
    tot = sum(rows.values())
    return pd.DataFrame(
        {
            "class": list(rows),
            "ms_per_step": list(rows.values()),
            "time_share_pct": [100 * v / tot for v in rows.values()],
            "flops": [1e9] * len(rows),
            "kernel_count": [2] * len(rows),
            "memory_bound_pct": [100.0] * len(rows),
        }
    )


def test_class_diff_per_step_and_union() -> None:
    d = D.class_diff(_classes({"gemm": 3.0, "softmax": 1.0}), _classes({"gemm": 2.0}), 1, 2)
    d = d.set_index("class")
    assert d.at["softmax", "b_ms"] == 0 and d.at["softmax", "delta_ms"] == -1.0
    assert d.at["gemm", "delta_pp"] == pytest.approx(25.0)
    assert d.at["gemm", "b_flops"] == 5e8  # 1e9 over 2 steps
    assert list(d.index) == ["softmax", "gemm"]  # class order


def _ops(rows: list[tuple[str, str, int]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "name": [r[0] for r in rows],
            "input_dims": [r[1] for r in rows],
            "module": [None] * len(rows),
            "class": ["gemm"] * len(rows),
            "gpu_dur": [r[2] for r in rows],
            "kernel_count": [1] * len(rows),
        }
    )


def test_operator_diff_matches_shapes_and_out_variants() -> None:
    a = _ops(
        [
            ("aten::mm", "[[2, 3], [3, 4]]", 1000),
            ("aten::mm", "[[2,3],[3,4]]", 1000),
            ("aten::add", "[[4]]", 500),
            ("aten::bmm", "[[1,2,3],[1,3,4]]", 100),
        ]
    )
    b = _ops([("aten::mm", "[[2,3],[3,4],[2,4]]", 4000), ("aten::add", "[[8]]", 200)])  # fmt: skip
    d = D.operator_diff(a, b, 1, 2).set_index(["name", "input_dims"])
    mm = d.loc[("aten::mm", "[[2,3],[3,4]]")]
    assert (mm["status"], mm["match"]) == ("both", "out= variant")
    assert (mm["a_calls"], mm["b_calls"], mm["delta_ms"]) == (2, 0.5, 0.0)
    assert d.loc[("aten::add", "[[4]]"), "status"] == "only A"
    assert d.loc[("aten::add", "[[8]]"), "status"] == "only B"
    d1 = D.operator_diff(a, b, 1, 1)
    worse, better = D.top_changes(d1[d1["status"] == "both"])
    assert list(worse["delta_ms"]) == [pytest.approx(0.002)]
    assert better.empty


def test_fused_groups_and_config_diff() -> None:
    fused = pd.DataFrame(
        {
            "name": ["triton_a", "triton_a", "x"],
            "fused_ops": ["gelu,add", "gelu,add", None],
            "class": ["activation"] * 3,
            "dur": [1000, 3000, 7],
            "op_name": ["t", "t", "y"],
        }
    )
    eager = pd.DataFrame(
        {
            "name": ["k1", "k2", "k3"],
            "fused_ops": [None] * 3,
            "class": ["x"] * 3,
            "dur": [10_000, 20_000, 5],
            "op_name": ["aten::gelu", "aten::add", "aten::mm"],
        }
    )
    g = D.fused_groups(fused, eager, 2, 1).iloc[0]
    assert (g["kernels"], g["calls"], g["ms"], g["other_ms"]) == (1, 1.0, 0.002, 0.03)
    assert D.fused_total(fused, eager, 2, 1)["other_calls"] == 2
    assert D.config_diff(None, {"a": 1}) == []  # no manifest: the notes say so, no key list
    cfg = D.config_diff({"a": 1, "out": "x", "p": {"q": 1}}, {"a": 1, "out": "y", "p": {"q": 2}})
    assert cfg == [{"key": "p.q", "a": 1, "b": 2}]


# ------------------------------------------------------------------------- rendering


def test_terminal_fits_80_columns_and_escapes_markup() -> None:
    c = _pair("bf16-sdpa", "bf16-sdpa-compile")
    buf = io.StringIO()
    R.render(c, Console(file=buf, width=80, force_terminal=False, color_system=None))
    out = buf.getvalue()
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "compile: False → True" in out
    assert "_to_copy,native_layer_norm_backward,view" in out
    assert "-4.45 ms" in out  # step time delta


def test_cli_writes_every_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    a, b = _fx("bf16-naive"), _fx("bf16-sdpa")
    assert main(["compare", str(a), str(b), "-o", str(out), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == json.loads((out / "compare.json").read_text())
    assert doc["format"] == "tracekit.compare" and doc["config_diff"][0]["key"] == "attention"
    page = (out / "compare.html").read_text()
    assert "<script" not in page and "data:image/png;base64," in page
    assert (out / "plots" / "roofline.png").read_bytes()[:4] == b"\x89PNG"
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))


def test_html_escapes_trace_strings() -> None:
    c = _pair("bf16-sdpa", "bf16-sdpa-compile")
    c.label_a = "<img src=x onerror=alert(1)>"
    page = R.render_html(c, {})
    assert "<img src=x" not in page and "&lt;img src=x" in page


def test_bad_input_is_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(tmp_path / "nope"), str(_fx("bf16-sdpa"))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tracekit: error:") and err.count("\n") == 1
    assert main(["compare", str(_fx("bf16-sdpa")), str(_fx("bf16-sdpa")), "--format", "x"]) == 2


def test_two_cpu_runs_are_compared_on_their_cpu_view(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 35: two CPU runs printed "0 FLOP", an empty class table and "0 matched" with
    no word why. Through the pipeline's CPU view they are compared per class, operator and
    FLOP, in CPU words; one note says so, and what does not apply on a CPU is absent."""
    cpu = FIX / "cpu-tiny-fp32-naive"
    assert main(["compare", str(cpu), str(cpu), "-o", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    text = " ".join(out.split())
    assert " ".join(f"note: {B.CPU_NOTE}".split()) in text
    table = out.split("Per analysed step")[1]
    for gone in ("GPU time per class", "GPU busy", "GPU idle", "peak reserved", "kernels  "):
        assert gone not in table, gone
    assert " 0 FLOP " not in text  # the FLOPs are the CPU view's: 1.04 GFLOP per step
    assert "CPU time per class" in out and "gemm" in out and "159 matched" in out
    assert "step time (unprofiled)" in out and "peak allocated" in out and "GFLOP" in out
    doc = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert doc["notes"][0] == B.CPU_NOTE
