"""The training levers of ``tracekit collect`` on CPU: --checkpoint, --optimizer,
--grad-accum (and --cuda-graphs' validation): each changes what runs (the trace shows it)
and none changes what is computed."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

import tracekit.collectors.collect as collect_mod
from tracekit.cli import main
from tracekit.collectors.config import CollectConfig
from tracekit.collectors.profiler import ProfilerConfig
from tracekit.collectors.train import build_workload, run_steps
from tracekit.errors import UsageError

CPU = torch.device("cpu")


def _cfg(**kw: Any) -> CollectConfig:
    base: dict[str, Any] = dict(preset="tiny", device="cpu", batch=2, seq=32, steps=1, warmup=1,
                                quiet=True, ceilings=False, memory_snapshot=False)  # fmt: skip
    base.update(kw)
    return CollectConfig(**base)


def _op_counts(run: Path) -> Counter[str]:
    """Operator and annotation counts of the run's (one) profiled step."""
    m = json.loads((run / "manifest.json").read_text())
    doc = json.loads(gzip.decompress((run / m["artifacts"]["trace"]).read_bytes()))
    return Counter(e.get("name", "") for e in doc["traceEvents"] if e.get("ph") == "X")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One profiled step each: the baseline and the levers (tiny, batch 2 x 128)."""
    root = tmp_path_factory.mktemp("levers")
    prof = ProfilerConfig(wait=0, warmup=1, active=1)
    levers: dict[str, dict[str, Any]] = {
        "base": {},
        "ckpt": {"checkpoint": True},
        "accum": {"grad_accum": 3, "optimizer": "adamw-fused"},
    }
    return {
        name: collect_mod.collect(_cfg(seq=128, profiler=prof, out=root / name, **kw))
        for name, kw in levers.items()
    }


def _step_peak(run: Path) -> int:
    """Largest allocated total during the profiled step (the profiler's [memory] events:
    on CPU, bytes allocated since the profiler started)."""
    from tracekit.parse import load

    mem = load(run).memory
    return int(mem[mem["step"] >= 0]["total_allocated"].max())


def test_checkpoint_recomputes_the_blocks_and_saves_memory(runs: dict[str, Path]) -> None:
    base, ckpt = _op_counts(runs["base"]), _op_counts(runs["ckpt"])
    # tiny: 2 blocks x 2 LayerNorms + ln_f; the recompute runs the blocks' forward again
    assert base["aten::layer_norm"] == 5 and ckpt["aten::layer_norm"] == 9
    assert ckpt["aten::softmax"] == 2 * base["aten::softmax"] == 4
    assert base["aten::embedding"] == ckpt["aten::embedding"] == 2  # no recompute outside
    # the attention matrices (2 x 4 x 128 x 128 fp32 = 512 KiB per block) are not held
    assert _step_peak(runs["ckpt"]) < 0.7 * _step_peak(runs["base"])
    m = json.loads((runs["ckpt"] / "manifest.json").read_text())
    assert m["config"]["checkpoint"] is True
    assert "use_reentrant=False" in m["step"]["activation_checkpointing"]


def test_grad_accum_runs_k_micro_batches_per_optimizer_step(runs: dict[str, Path]) -> None:
    base, accum = _op_counts(runs["base"]), _op_counts(runs["accum"])
    for c in (base, accum):  # one recorded step
        assert sum(v for k, v in c.items() if k.startswith("ProfilerStep#")) == 1
    assert accum["aten::embedding"] == 3 * base["aten::embedding"] == 6  # 3 forwards
    assert accum["autograd::engine::evaluate_function: EmbeddingBackward0"] == 6  # 3 backwards
    assert accum["Optimizer.step#AdamW.step"] == base["Optimizer.step#AdamW.step"] == 1
    m = json.loads((runs["accum"] / "manifest.json").read_text())
    assert m["step"]["micro_batches"] == 3 and m["step"]["tokens"] == 3 * 2 * 128
    met = m["metrics"]
    assert met["tokens_per_s"] == pytest.approx(3 * 2 * 128 / met["step_time_ms"]["median"] * 1e3)
    assert met["samples_per_s"] == pytest.approx(met["tokens_per_s"] / 128)


def _optimizer_ops(optimizer: str | None) -> Counter[str]:
    """Operators of one optimizer step (after a first one has made AdamW's state)."""
    wl = build_workload(_cfg(optimizer=optimizer), CPU)
    run_steps(wl.step, 1)
    wl.model(*wl.batches[0]).backward()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        wl.optimizer.step()
    return Counter(e.name for e in prof.events())


def test_optimizer_implementations_show_in_the_trace(runs: dict[str, Path]) -> None:
    loop, foreach, fused = (_op_counts(runs["base"]), _optimizer_ops("adamw-foreach"),
                            _op_counts(runs["accum"]))  # fmt: skip
    assert not any(k.startswith("aten::_foreach") for k in loop)  # CPU default: the loop
    assert loop["aten::_fused_adamw_"] == 0 and loop["aten::addcdiv_"] > 0
    assert foreach["aten::_foreach_sqrt"] == 1 and foreach["aten::_fused_adamw_"] == 0
    assert fused["aten::_fused_adamw_"] == 1 and fused["aten::_foreach_sqrt"] == 0
    assert _optimizer_ops("adamw")["aten::_foreach_sqrt"] == 0
    names = {k: json.loads((runs[k] / "manifest.json").read_text())["config"]["optimizer"]
             for k in ("base", "accum")}  # fmt: skip
    assert names == {"base": "adamw", "accum": "adamw-fused"}


def _grads_of_first_step(cfg: CollectConfig, batch: tuple[torch.Tensor, torch.Tensor] | None,
                         ) -> list[torch.Tensor]:  # fmt: skip
    wl = build_workload(cfg, CPU)
    if batch is not None:
        wl.batches[0] = batch
    grads: list[torch.Tensor] = []
    real = wl.optimizer.step

    def spy(*a: Any, **k: Any) -> Any:
        grads.extend(p.grad.clone() for p in wl.model.parameters() if p.grad is not None)
        return real(*a, **k)

    wl.optimizer.step = spy  # type: ignore[method-assign]
    run_steps(wl.step, 1)
    return grads


def test_grad_accum_gradients_are_those_of_the_whole_batch() -> None:
    accum = _cfg(batch=2, grad_accum=2)
    wl = build_workload(accum, CPU)
    x = torch.cat([wl.batches[0][0], wl.batches[1][0]])
    y = torch.cat([wl.batches[0][1], wl.batches[1][1]])
    whole = _grads_of_first_step(_cfg(batch=4), (x, y))
    micro = _grads_of_first_step(accum, None)
    assert len(whole) == len(micro) > 0
    for a, b in zip(whole, micro, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_checkpoint_and_optimizers_do_not_change_the_maths() -> None:
    base = _grads_of_first_step(_cfg(), None)
    ckpt = _grads_of_first_step(_cfg(checkpoint=True), None)
    for a, b in zip(base, ckpt, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    weights = []
    for opt in ("adamw", "adamw-foreach", "adamw-fused"):
        wl = build_workload(_cfg(optimizer=opt), CPU)
        run_steps(wl.step, 2)
        weights.append(wl.model.lm_head.weight.detach().clone())
    torch.testing.assert_close(weights[0], weights[1])
    torch.testing.assert_close(weights[0], weights[2])


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"optimizer": "sgd"}, "--optimizer must be one of adamw, adamw-foreach, adamw-fused"),
        ({"grad_accum": 0}, "--grad-accum must be an integer >= 1"),
        ({"cuda_graphs": True}, "--cuda-graphs needs --device cuda"),
        ({"device": "cuda", "cuda_graphs": True, "dtype": "fp16"}, "GradScaler reads"),
        ({"device": "cuda", "cuda_graphs": True, "warmup": 0}, "needs --warmup >= 1"),
    ],
)
def test_lever_validation(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        _cfg(**kw)


def test_cuda_graphs_on_cpu_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r"
    argv = ["collect", "--device", "cpu", "--preset", "tiny", "--cuda-graphs", "-o", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tracekit: error: --cuda-graphs needs --device cuda")
    assert len(err.strip().splitlines()) == 1 and not out.exists()


def test_cuda_graphs_compiled_with_fp16_is_allowed() -> None:
    # reduce-overhead keeps the GradScaler outside the graphs
    cfg = _cfg(device="cuda", cuda_graphs=True, compile=True, dtype="fp16")
    assert cfg.run_name().endswith("-compile-cudagraphs")


def test_run_names_and_manifest_config_of_the_levers() -> None:
    cfg = _cfg(checkpoint=True, optimizer="adamw-fused", grad_accum=4)
    assert cfg.run_name() == "tiny-b2-s32-fp32-naive-ckpt-adamw-fused-ga4-cpu"
    # the device's default implementation is not spelled out (names stay as before)
    assert _cfg(optimizer="adamw").run_name() == "tiny-b2-s32-fp32-naive-cpu"
    assert _cfg(device="cuda", optimizer="adamw-foreach").run_name() == "tiny-b2-s32-fp32-naive"
    assert _cfg(device="cuda").to_dict()["optimizer"] == "adamw-foreach"
    d = cfg.to_dict()
    assert (d["checkpoint"], d["optimizer"], d["grad_accum"], d["cuda_graphs"]) == (
        True, "adamw-fused", 4, False)  # fmt: skip
    assert cfg.tokens_per_step == 4 * 2 * 32


def test_whole_step_graph_plumbing_with_stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    """--cuda-graphs (eager) on stand-ins for torch.cuda's graph API: warm-up steps on a
    side stream, one capture at the first step, then per step the batch copied into the
    static inputs and one replay. (The real capture needs a GPU: benchmarks/gpu_workloads.sh.)"""
    import contextlib

    import tracekit.collectors.train as train

    log: list[str] = []

    class Stream:
        def wait_stream(self, other: object) -> None:
            log.append("wait")

    class Graph:
        def replay(self) -> None:
            log.append("replay")

    @contextlib.contextmanager
    def graph(g: Graph) -> Any:
        log.append("capture")
        yield

    monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    real = train.make_optimizer  # capturable AdamW needs CUDA parameters
    monkeypatch.setattr(train, "make_optimizer", lambda cfg, ps, capturable=False: real(cfg, ps))
    cfg = _cfg(device="cuda", cuda_graphs=True, grad_accum=2)
    wl = build_workload(cfg, CPU)
    counted: list[int] = []
    real_step = wl.optimizer.step
    wl.optimizer.step = lambda *a, **k: counted.append(1) or real_step(*a, **k)  # type: ignore[method-assign]
    losses = [wl.step(i) for i in range(3)]
    # 3 warm-up steps + the captured one ran eagerly; then 3 replays
    assert log == ["wait", "wait", "capture", "replay", "replay", "replay"]
    assert len(counted) == train.GRAPH_WARMUP + 1
    assert losses[0] is losses[2]  # the graph's static output
    assert wl.model.lm_head.weight.grad is not None  # gradients stay between steps


def test_memory_model_says_what_it_does_not_count() -> None:
    from tracekit.classify.models.memory import from_manifest

    cfg = _cfg(checkpoint=True, grad_accum=2).to_dict()
    est, caveat = from_manifest({"config": cfg})
    assert est is not None and est.options.checkpoint and est.options.grad_accum == 2
    assert "one micro-batch" in caveat and "checkpoint" not in caveat
    gen = CollectConfig(device="cpu", workload="generate", preset="tiny", prompt=8)
    est, why = from_manifest({"config": gen.to_dict()})
    assert est is None and "this run generates" in why
    script = {**cfg, "batch": None, "seq": None}  # a script run whose inputs were not read
    est, why = from_manifest({"config": script})
    assert est is None and why.startswith("the run's config has no batch or seq")
    assert "NoneType" not in why


def test_grad_accum_reduces_once_per_step_on_several_gpus() -> None:
    """DDP: no_sync() around every micro-batch but the last; FSDP2:
    set_requires_gradient_sync(False) before them, True for the last."""
    import contextlib

    from tracekit.collectors.train import grad_sync

    calls: list[object] = []

    class DDPLike(torch.nn.Module):
        @contextlib.contextmanager
        def no_sync(self) -> Any:
            calls.append("no_sync")
            yield

    class FSDPLike(torch.nn.Module):
        def set_requires_gradient_sync(self, on: bool) -> None:
            calls.append(on)

    for model in (DDPLike(), FSDPLike(), torch.nn.Linear(1, 1)):
        for j in range(3):
            with grad_sync(model, last=j == 2):
                pass
    assert calls == ["no_sync", "no_sync", False, False, True]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"device": "cuda", "cuda_graphs": True, "gpus": 2}, "--cuda-graphs runs on one GPU"),
        ({"workload": "generate", "gpus": 2, "seq": 128}, "--gpus: training options"),
    ],
)
def test_levers_and_generate_with_several_gpus(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        _cfg(**kw)


def test_multi_gpu_throughput_counts_every_micro_batch() -> None:
    from tracekit.collectors.dist_manifest import merge_metrics

    def rank(median: float) -> dict[str, Any]:
        st = {"median": median, "p10": median, "p90": median, "mean": median, "n": 3}
        mem = {"peak_allocated_bytes": None, "peak_reserved_bytes": None, "memory_method": "m"}
        return {"step_time_ms": st, "profiled_step_time": st, "avg_allocated_bytes": None,
                "final_loss": 1.0, **mem}  # fmt: skip

    met = merge_metrics(_cfg(gpus=2, grad_accum=3), [rank(10.0), rank(10.0)])
    assert met["tokens_per_s"] == pytest.approx(2 * 3 * 2 * 32 / 10e-3)  # ranks x K x B x T
    assert met["samples_per_s"] == pytest.approx(2 * 3 * 2 / 10e-3)


def test_cuda_graphs_peak_covers_the_capture() -> None:
    """A graph's replay allocates nothing: its peak is read from the warm-up (the capture)."""
    graphs, eager = _cfg(device="cuda", cuda_graphs=True), _cfg(device="cuda")
    assert collect_mod.peak_from_warmup(graphs) and not collect_mod.peak_from_warmup(eager)
    assert "over the warm-up (which captures the CUDA graph" in collect_mod.memory_method(
        graphs, "cuda"
    )
    assert "over the timed steps after" in collect_mod.memory_method(eager, "cuda")
    assert collect_mod.memory_method(graphs, "cpu").startswith("not measured on CPU")
