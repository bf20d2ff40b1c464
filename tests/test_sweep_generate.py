"""Sweep plumbing for the levers and the generate workload: points that carry extra
collect options (the rows `tracekit advise` will run), the generate command line, and a
real tiny CPU generate sweep."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd
import pytest

from tracekit.errors import UsageError
from tracekit.sweep.plan import Point, SweepPlan, options_suffix
from tracekit.sweep.runner import collect_command, default_env, run_sweep


def _flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_point_options_name_the_row_and_reach_the_command(tmp_path: Path) -> None:
    p = Point(8, 128, "fp32", "naive", options=("--optimizer", "adamw-fused", "--checkpoint"))
    assert p.key == "b8-s128-fp32-naive+optimizer=adamw-fused+checkpoint"
    assert options_suffix(["--data", "/a b/c.txt"]) == "+data=_a_b_c.txt"
    plan = SweepPlan(explicit=(Point(8, 128, "fp32", "naive"), p, p), device="cpu")
    assert [q.key for q in plan.points()] == ["b8-s128-fp32-naive", p.key]  # deduplicated
    cmd = collect_command(plan, p, tmp_path / "r", ceilings=False)
    assert cmd[-3:] == ["--optimizer", "adamw-fused", "--checkpoint"]
    assert _flag(cmd, "--seq") == "128" and "--workload" not in cmd
    assert plan.to_dict()["points"] == ["b8-s128-fp32-naive", p.key]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--batch", "4"), "--batch: set by the sweep itself"),
        (("-o", "x"), "-o: set by the sweep itself"),
        (("adamw",), "must start with an option"),
    ],
)
def test_point_options_may_not_redefine_the_point(options: tuple[str, ...], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        SweepPlan(explicit=(Point(8, 128, "fp32", "naive", options=options),))


def test_generate_command_turns_seq_into_the_context(tmp_path: Path) -> None:
    plan = SweepPlan(workload="generate", new_tokens=32, batches=(8,), seqs=(128, 1024),
                     dtypes=("bf16",), attentions=("sdpa",), base_seq=1024)  # fmt: skip
    cmd = collect_command(plan, Point(8, 1024, "bf16", "sdpa"), tmp_path, ceilings=True)
    assert _flag(cmd, "--workload") == "generate"
    assert (_flag(cmd, "--prompt"), _flag(cmd, "--new-tokens")) == ("992", "32")
    assert "--seq" not in cmd
    with pytest.raises(UsageError, match="--seq 32: a generate sweep's seq is the context"):
        SweepPlan(workload="generate", new_tokens=32, seqs=(32, 64), base_seq=64)
    with pytest.raises(UsageError, match="--workload must be one of"):
        SweepPlan(workload="serve")


def test_generate_sweep_on_cpu(tmp_path: Path) -> None:
    plan = SweepPlan(workload="generate", new_tokens=8, batches=(1, 2), seqs=(24,),
                     dtypes=("fp32",), attentions=("naive",), preset="tiny", device="cpu",
                     base_batch=1, base_seq=24, steps=1, warmup=0, timeout_s=120)  # fmt: skip
    t = run_sweep(plan, tmp_path, env=default_env(), quiet=True)
    assert list(t["key"]) == ["b1-s24-fp32-naive", "b2-s24-fp32-naive"]
    assert list(t["status"]) == ["ok", "ok"]
    assert (t["workload"] == "generate").all()
    ok = t
    assert (ok["prompt"] == 16).all() and (ok["new_tokens"] == 8).all()
    for col in ("ttft_ms", "tpot_ms", "tokens_per_s", "generated_tokens_per_s", "peak_bytes",
                "model_decode_bytes_per_step", "decode_model_bw_Bps", "model_tpot_ms"):  # fmt: skip
        assert (ok[col] > 0).all(), col
    # 2 * n_layer * batch * context * n_embd * 4 bytes (tiny: 2 layers, 64 wide)
    assert list(ok["kv_cache_bytes"]) == [2 * 2 * b * 24 * 64 * 4 for b in (1, 2)]
    assert (ok["kv_cache_bytes"] == ok["model_kv_cache_bytes"]).all()
    assert list(ok["tokens_per_s"]) == pytest.approx(list(ok["batch"] / ok["tpot_ms"] * 1e3))
    assert ok["model_peak_bytes"].isna().all()  # the training memory model does not apply
    assert (ok["dynamic_peak_bytes"] == ok["peak_bytes"] - ok["weights_bytes"]).all()

    assert list(ok["time_per_token_ms"]) == pytest.approx(list(ok["tpot_ms"] / ok["batch"]))
    assert (ok["model_kv_bytes_per_token"] == 2 * 2 * 64 * 4).all()
    assert ((ok["prefill_pct"] > 0) & (ok["prefill_pct"] < 100)).all()
    assert ok["decode_gemm_ms"].isna().all()  # CPU: no GPU kernels in the trace

    from tracekit.reports.sweep import render_section
    from tracekit.sweep import DECODE_CSV, describe, finish

    outs = finish(t, tmp_path)
    text = describe(t, outs)
    assert "TTFT ms" in text and "b2-s24-fp32-naive" in text
    assert outs.findings[0].startswith("Along batch (context 24, fp32, naive): the time per")
    assert "the time per step (no GPU GEMM times: a CPU run, or no trace)" in outs.findings[0]
    assert (tmp_path / DECODE_CSV).is_file()
    html = render_section(outs.analysis, tmp_path / "report")
    assert "Crossover and capacity wall per line" in html


def test_lever_rows_record_their_options_and_levers(tmp_path: Path) -> None:
    from tracekit.sweep.rows import run_row

    lever = Point(2, 16, "fp32", "naive", options=("--checkpoint", "--grad-accum", "2"))
    config = {"checkpoint": True, "optimizer": "adamw", "grad_accum": 2, "cuda_graphs": False,
              "workload": "train"}  # fmt: skip
    r = run_row(lever, tmp_path, {"config": config, "metrics": {}}, with_trace=False)
    assert r["key"] == "b2-s16-fp32-naive+checkpoint+grad-accum=2"
    assert r["options"] == "--checkpoint --grad-accum 2"
    assert (r["checkpoint"], r["optimizer"], r["grad_accum"], r["cuda_graphs"]) == (
        True, "adamw", 2, False)  # fmt: skip


def test_sweep_cli_generate_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[SweepPlan] = []

    class Stop(Exception):
        pass

    def fake(plan: SweepPlan, *a: object, **k: object) -> pd.DataFrame:
        seen.append(plan)
        raise Stop

    monkeypatch.setattr("tracekit.commands.sweep.run_sweep", fake)  # where the command calls it
    from tracekit.cli import main

    with pytest.raises(Stop):
        main(["sweep", "--workload", "generate", "-o", str(Path(sys.prefix) / "never")])
    p = seen[0]
    assert p.batches == (1, 2, 4, 8, 16, 32, 64, 128, 256) and p.seqs == (128, 256, 512, 1024)
    assert (p.dtypes, p.attentions, p.base_batch, p.base_seq) == (("bf16",), ("sdpa",), 8, 1024)
    assert math.isclose(p.new_tokens, 64)
