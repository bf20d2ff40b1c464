"""tracekit collect --workload generate on CPU: the KV-cache path, the generation loop,
the trace's steps and ranges, the metrics, the manifest, validation and OOM."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

import tracekit.collectors.collect as collect_mod
import tracekit.collectors.generate as gen_mod
import tracekit.collectors.runsummary as runsummary
from tracekit.cli import main
from tracekit.collectors.config import CollectConfig
from tracekit.collectors.generate import build_generator, generate
from tracekit.collectors.gpt import GPT, PRESETS, KVCache, count_params
from tracekit.errors import OutOfMemoryError, UsageError

CPU = torch.device("cpu")
TINY = ["--device", "cpu", "--preset", "tiny", "--workload", "generate", "--batch", "2",
        "--prompt", "16", "--new-tokens", "6", "--steps", "2", "--warmup", "1",
        "--no-ceilings", "-q"]  # fmt: skip


def _cfg(**kw: Any) -> CollectConfig:
    base: dict[str, Any] = dict(preset="tiny", device="cpu", workload="generate", batch=2,
                                prompt=16, new_tokens=6, steps=2, warmup=1, quiet=True,
                                ceilings=False)  # fmt: skip
    base.update(kw)
    return CollectConfig(**base)


@pytest.mark.parametrize("attention", ["naive", "sdpa"])
def test_kv_cache_path_matches_the_full_forward(attention: str) -> None:
    torch.manual_seed(0)
    cfg = PRESETS["tiny"].replace(attention=attention)
    model = GPT(cfg).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        full = model(idx)  # (2, 20, V)
        cache = KVCache.allocate(cfg, 2, 24, dtype=torch.float32, device=CPU)
        got = [model(idx[:, :12], cache=cache, pos=0)[:, -1]]
        got.append(model(idx[:, 12:15], cache=cache, pos=12)[:, -1])  # several after a prefix
        got += [model(idx[:, p : p + 1], cache=cache, pos=p)[:, -1] for p in range(15, 20)]
    want = [full[:, 11], full[:, 14], *(full[:, p] for p in range(15, 20))]
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    assert cache.nbytes == 2 * 2 * 2 * 24 * 64 * 4  # 2·L·B·S·C·4


def test_generation_is_greedy_decoding_without_a_cache() -> None:
    cfg = _cfg(new_tokens=5)
    g = build_generator(cfg, CPU)
    last = generate(g, 3)  # prompt 3 of the pool
    seq = g.prompts[3].clone()  # (B, P)
    with torch.inference_mode():
        for _ in range(cfg.decode_steps + 1):  # the prefill's token, then one per step
            nxt = g.model(seq)[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], dim=1)
    assert torch.equal(last, seq[:, -1:])


def test_weights_and_cache_in_the_run_dtype() -> None:
    g = build_generator(_cfg(dtype="fp16"), CPU)
    assert g.cache.k.dtype == torch.float16 and g.cache.k.shape == (2, 2, 4, 22, 16)
    assert g.weight_bytes == 2 * count_params(PRESETS["tiny"])
    assert g.kv_cache_bytes == 2 * 2 * 2 * 22 * 64 * 2  # measured (CPU: the tensors)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Records the prefill and 4 of the 6 decode steps."""
    out = tmp_path_factory.mktemp("gen") / "run"
    assert main(["collect", *TINY, "--profile-active", "4", "-o", str(out)]) == 0
    return out


def _events(run: Path) -> list[dict[str, Any]]:
    m = json.loads((run / "manifest.json").read_text())
    doc = json.loads(gzip.decompress((run / m["artifacts"]["trace"]).read_bytes()))
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def test_trace_has_a_step_per_decode_step_and_the_prefill_apart(run: Path) -> None:
    ev = _events(run)
    steps = sorted((e for e in ev if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    assert [e["name"] for e in steps] == [f"ProfilerStep#{d}" for d in range(4)]
    decode = [e for e in ev if e["name"] == "tracekit.decode"]
    prefill = [e for e in ev if e["name"] == "tracekit.prefill"]
    assert len(decode) == 4 and len(prefill) == 1
    p = prefill[0]
    assert all(p["ts"] + p["dur"] <= s["ts"] for s in steps)  # before, in no step
    for s, d in zip(steps, sorted(decode, key=lambda e: e["ts"]), strict=True):
        assert s["ts"] <= d["ts"] and d["ts"] + d["dur"] <= s["ts"] + s["dur"]
    # the prefill embeds the 16 prompt tokens, a decode step one token (recorded shapes)
    emb = [e["args"]["Input Dims"][:2] for e in sorted(ev, key=lambda e: e["ts"])
           if e["name"] == "aten::embedding"]  # fmt: skip
    wte = [dims for dims in emb if dims[0] == [512, 64]]
    assert wte == [[[512, 64], [2, 16]]] + [[[512, 64], [2, 1]]] * 4

    from tracekit.parse import load

    t = load(run)
    assert list(t.steps["step"]) == list(range(4))
    ops = t.ops
    assert int(ops.loc[ops["name"] == "tracekit.prefill", "step"].iloc[0]) == -1


def test_manifest_metrics_and_kv_cache(run: Path) -> None:
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "ok" and m["config"]["workload"] == "generate"
    assert (m["config"]["prompt"], m["config"]["new_tokens"], m["config"]["optimizer"]) == (
        16, 6, None)  # fmt: skip
    g = m["generate"]
    L, B, ctx, C = 2, 2, 22, 64
    assert g["kv_cache_bytes"] == 2 * L * B * ctx * C * 4 == g["kv_cache_bytes_measured"]
    assert g["kv_cache_formula"] == "2 * n_layer * batch * context * n_embd * bytes_per_elem"
    assert (g["prompt"], g["new_tokens"], g["batch"], g["context"]) == (16, 6, 2, 22)
    assert g["ranges"]["prefill"] == "tracekit.prefill" and g["bytes_per_elem"] == 4
    assert m["step"]["tokens"] == 2 and m["profiler"]["decode_steps_recorded"] == 4
    met = m["metrics"]
    for key in ("ttft_ms", "tpot_ms", "generation_ms", "step_time_ms", "profiled_step_time"):
        assert set(met[key]) == {"median", "p10", "p90", "mean", "n"}, key
    assert met["ttft_ms"]["n"] == 2 and met["tpot_ms"]["n"] == 2 * 6
    assert met["step_time_ms"] == met["tpot_ms"] and met["profiled_step_time"]["n"] == 4
    assert len(met["tpot_ms_by_step"]) == 6
    tp = met["tpot_ms"]
    assert tp["p10"] <= tp["median"] <= tp["p90"]
    assert met["tokens_per_s"] == pytest.approx(2 / tp["median"] * 1e3)
    assert met["generated_tokens_per_s"] == pytest.approx(
        2 * 7 / met["generation_ms"]["median"] * 1e3
    )
    assert met["memory"]["weights_bytes"] == 4 * count_params(PRESETS["tiny"])
    assert met["memory"]["kv_cache_bytes"] == g["kv_cache_bytes"]
    assert met["peak_allocated_bytes"] is None and met["memory"]["other_bytes"] is None  # CPU
    assert math.isfinite(met["model_flops_per_s"]) and met["final_loss"] is None
    assert m["total_generations"] == 1 + 2 + 2  # warm-up, timed, profiler warm-up + profiled


def test_report_of_a_cpu_generate_run(run: Path, tmp_path: Path) -> None:
    """A CPU run has no GPU activity, but a generate run's report still has its prefill,
    decode steps, KV cache and decode model (a training run's CPU-only trace is refused:
    tests/test_report_fixtures.py)."""
    out = tmp_path / "rep"
    assert main(["report", str(run), "-o", str(out), "--no-tensorboard"]) == 0
    doc = json.loads((out / "summary.json").read_text())
    g = doc["generate"]
    assert g["steps"] == [0, 1, 2, 3] and g["basis"] == "unprofiled"
    W = 4 * (2 * (12 * 64 * 64 + 13 * 64) + 2 * 64 + 512 * 64)  # fp32 matmul weights
    kv = 2 * 2 * 2 * 64 * 4  # one token of both sequences, 2 layers, K and V
    ctx = [17, 18, 19, 20]
    assert [r["model_bytes"] for r in g["per_step"]] == [W + kv * c + kv for c in ctx]
    m = json.loads((run / "manifest.json").read_text())
    tpot = m["metrics"]["tpot_ms_by_step"][:4]
    assert [r["tpot_ms"] for r in g["per_step"]] == tpot
    assert [r["model_bw"] for r in g["per_step"]] == pytest.approx(
        [(W + kv * c + kv) / (t / 1e3) for c, t in zip(ctx, tpot, strict=True)]
    )
    assert g["kv_cache"]["per_token_bytes"] == kv // 2 and g["kv_cache"]["prefill_bytes"] == 16 * kv
    assert g["time"]["ttft_ms"] == m["metrics"]["ttft_ms"]["median"]
    assert g["prefill"]["kernels"] == 0 and g["gemm"]["ms_per_step"] == 0.0
    assert doc["step_summary"]["analytic_traffic"]["weights"] == W
    assert (out / "plots" / "decode_bandwidth.png").is_file()
    assert [w for w in doc["warnings"] if w.startswith("report invariant broken")] == []


def test_cpu_generate_summary_and_report_tell_one_story(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 35: collect's summary has no "none (None)" (a generate run has no light pass)
    and names the overhead's basis; the report asks about record_shapes only where it was
    off, gives no rate line where no kernel ran, and names the statistic of each
    unprofiled decode-step time (median of every timed step, mean of the recorded ones)."""
    said = runsummary.summary(run)
    assert "(None)" not in said and "timeline trace" not in said
    prof = next(x for x in said.splitlines() if x.startswith("profiled decode step"))
    tpot = json.loads((run / "manifest.json").read_text())["metrics"]["tpot_ms"]["median"]
    assert f"the unprofiled {tpot:.3f} ms median" in prof, prof
    assert "n/a" not in said and f"memory: {runsummary.NO_CPU_PEAK}" in said  # the report has it
    capsys.readouterr()
    assert main(["report", str(run), "-o", str(tmp_path / "rep"), "--no-tensorboard"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "record_shapes✓" in text and "record_shapes off" not in text
    assert "no kernel has" not in text  # a CPU generate run has no kernel: no rate line
    assert "measured without profiler (median of every timed decode step)" in text
    assert "per decode step (unprofiled, mean of the 4 recorded steps)" in text
    assert "ms per step (mean of the 4 recorded steps)" in text


@pytest.mark.filterwarnings("ignore:Profiler won.t be using warmup")
def test_cli_profiles_every_decode_step_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[CollectConfig] = []

    class Stop(Exception):
        pass

    def fake_collect(cfg: CollectConfig) -> Path:
        seen.append(cfg)
        raise Stop  # before anything runs

    monkeypatch.setattr("tracekit.collectors.collect_run", fake_collect)
    # generate with 6 new tokens; training; generate with the default 64
    for argv in (TINY, TINY[:4], [*TINY[:6], "--prompt", "16"]):
        with pytest.raises(Stop):
            main(["collect", *argv])
    assert [c.profiler.active for c in seen] == [6, 2, 64]
    from tracekit.collectors.generate import profiler_schedule
    from tracekit.collectors.profiler import ProfilerConfig

    sched, active, warm = profiler_schedule(_cfg(profiler=ProfilerConfig(active=6)))
    # a warm-up generation (prefill + 6 steps): the last interval warms up, then the
    # prefill and the 6 decode steps of the next are recorded
    actions = [sched(i).name for i in range(15)]
    assert actions == ["NONE"] * 6 + ["WARMUP"] + ["RECORD"] * 6 + ["RECORD_AND_SAVE", "NONE"]
    assert (active, warm) == (6, True)
    sched, active, warm = profiler_schedule(_cfg(profiler=ProfilerConfig(warmup=0, active=9)))
    assert [sched(i).name for i in range(8)] == ["RECORD"] * 6 + ["RECORD_AND_SAVE", "NONE"]
    assert (active, warm) == (6, False)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"prompt": 100, "new_tokens": 29}, "100 \\+ --new-tokens 29 = 129 exceeds the context"),
        ({"prompt": 0}, "--prompt must be an integer >= 1"),
        ({"new_tokens": 0}, "--new-tokens must be an integer >= 1"),
        ({"checkpoint": True, "grad_accum": 2}, "--checkpoint, --grad-accum: training options"),
        ({"workload": "serve"}, "--workload must be one of train, generate"),
        ({"workload": "train"}, "--prompt and --new-tokens need --workload generate"),
    ],
)
def test_generate_validation(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        _cfg(**kw)


def test_generate_defaults_and_run_name() -> None:
    cfg = CollectConfig(device="cpu", workload="generate")
    assert (cfg.prompt, cfg.new_tokens, cfg.context) == (128, 64, 192)
    assert cfg.run_name() == "gpt2-small-generate-b8-p128-n64-fp32-naive-cpu"
    assert _cfg(dtype="bf16", attention="sdpa", compile=True).run_name() == (
        "tiny-generate-b2-p16-n6-bf16-sdpa-compile-cpu"
    )


@pytest.mark.parametrize(
    ("kw", "lengths"),
    [
        ({}, (64, 32)),  # 128 + 64 halved once to fit tiny's 128
        ({"prompt": 100}, (100, 28)),  # the unset one takes what the other leaves
        ({"new_tokens": 100}, (28, 100)),
        ({"prompt": 16, "new_tokens": 6}, (16, 6)),  # given values stay as given
        ({"block_size": 1024}, (128, 64)),  # the defaults fit: unchanged
    ],
)
def test_unset_lengths_fit_the_preset(kw: dict[str, Any], lengths: tuple[int, int]) -> None:
    cfg = CollectConfig(preset="tiny", device="cpu", workload="generate", **kw)
    assert (cfg.prompt, cfg.new_tokens) == lengths
    assert cfg.context <= (kw.get("block_size") or PRESETS["tiny"].block_size)


@pytest.mark.parametrize(
    ("kw", "message"),
    [  # values given that cannot fit stay an error
        ({"prompt": 128, "new_tokens": 64}, "--prompt 128 \\+ --new-tokens 64 = 192 exceeds"),
        ({"prompt": 128}, "--prompt 128 \\+ --new-tokens 1 = 129 exceeds"),
        ({"new_tokens": 200}, "--prompt 1 \\+ --new-tokens 200 = 201 exceeds"),
    ],
)
def test_given_lengths_past_the_context_stay_an_error(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        CollectConfig(preset="tiny", device="cpu", workload="generate", **kw)


@pytest.mark.filterwarnings("ignore:Profiler won.t be using warmup")
def test_cpu_generate_on_tiny_with_its_default_lengths(tmp_path: Path) -> None:
    """The command of issue 25 with only the run's size cut (batch 1, one timed generation,
    two recorded decode steps): --prompt and --new-tokens left to their defaults."""
    out = tmp_path / "run"
    argv = ["collect", "--device", "cpu", "--preset", "tiny", "--workload", "generate",
            "--batch", "1", "--steps", "1", "--warmup", "1", "--profile-warmup", "0",
            "--profile-active", "2", "--no-ceilings", "-q"]  # fmt: skip
    assert main([*argv, "-o", str(out)]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "ok" and (m["config"]["prompt"], m["config"]["new_tokens"]) == (64, 32)
    assert m["generate"]["context"] == 96 and m["profiler"]["decode_steps_recorded"] == 2


def test_cli_refuses_seq_with_generate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collect", *TINY, "--seq", "64", "-o", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "--seq is the training length" in err and len(err.strip().splitlines()) == 1


def test_kv_cache_oom_is_status_oom_and_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def too_big(*a: Any, **k: Any) -> KVCache:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

    monkeypatch.setattr(gen_mod.KVCache, "allocate", too_big)
    out = tmp_path / "oom"
    assert main(["collect", *TINY, "-o", str(out)]) == 3
    err = capsys.readouterr().err
    assert "out of memory generating" in err and "KV cache alone needs" in err
    assert len(err.strip().splitlines()) == 1
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "oom" and "Tried to allocate 80.00 GiB" in m["error"]
    with pytest.raises(OutOfMemoryError):
        collect_mod.collect(_cfg(out=tmp_path / "again"))


@pytest.mark.parametrize("sample", [False, True])
def test_counter_replay_of_a_generate_run(monkeypatch: pytest.MonkeyPatch, sample: bool) -> None:
    """--counters replays the prefill and the first decode step (sampled: what the first
    block and the LM head launch there), bracketed by cudaProfilerStart/Stop."""
    from types import SimpleNamespace

    from tracekit.collectors.replay import _replay_generate

    calls: list[str] = []
    cudart = SimpleNamespace(cudaProfilerStart=lambda: calls.append("start"),
                             cudaProfilerStop=lambda: calls.append("stop"))  # fmt: skip
    monkeypatch.setattr(torch.cuda, "cudart", lambda: cudart)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    _replay_generate(_cfg(warmup=1), CPU, sample=sample)
    # sampled: blocks[0] and lm_head, each in the prefill and in one decode step
    assert calls == ["start", "stop"] * (4 if sample else 1)


def test_block_size_takes_a_context_past_the_preset() -> None:
    """--block-size: the tiny preset's 128 positions become 256, so a 200-token prompt
    decodes; the KV path still equals the full forward there."""
    with pytest.raises(UsageError, match="--block-size sets another"):
        _cfg(prompt=200, new_tokens=4)
    cfg = _cfg(prompt=200, new_tokens=4, block_size=256)
    assert cfg.model_config().block_size == 256 and cfg.to_dict()["model"]["block_size"] == 256
    assert cfg.run_name() == "tiny-generate-b2-p200-n4-fp32-naive-ctx256-cpu"
    g = build_generator(cfg, CPU)
    assert g.model.wpe.weight.shape[0] == 256
    assert g.cache.k.shape[3] == 204
    last = generate(g, 0)
    seq = g.prompts[0].clone()
    with torch.inference_mode():
        for _ in range(cfg.decode_steps + 1):
            seq = torch.cat([seq, g.model(seq)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(last, seq[:, -1:])
    with pytest.raises(UsageError, match="--block-size must be an integer >= 1"):
        _cfg(block_size=0)


def test_block_size_reaches_the_sweep_command() -> None:
    from tracekit.sweep.plan import Point, SweepPlan
    from tracekit.sweep.runner import collect_command

    plan = SweepPlan(workload="generate", block_size=2048, new_tokens=32, seqs=(2048,))
    cmd = collect_command(plan, Point(8, 2048, "bf16", "sdpa"), Path("x"), ceilings=False)
    i = cmd.index("--block-size")
    assert cmd[i + 1] == "2048" and cmd[cmd.index("--prompt") + 1] == "2016"
