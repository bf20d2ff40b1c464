"""A synthetic generate run: the trace and manifest ``collect --workload generate`` writes,
with every duration and size known, for exact-number tests of the generate report.

Model: 2 layers of GPT-2-small width (C 768, 12 heads, vocab 50304, block 1024), bf16,
SDPA; batch 8, prompt 64, 4 new tokens, all 4 decode steps recorded, on the H100 of
tests/tracegen.py with measured ceilings 3.0 TB/s and 600 TFLOP/s bf16 (ridge 200).

Layout (µs from the trace start):

* ``tracekit.prefill`` 0..200: 29 operators (M = B·P = 512 rows), their kernels back to
  back from 20 µs: 156 µs of GPU work (:data:`PREFILL_US`);
* ``ProfilerStep#d`` at 200 + 100·d, 100 µs (profiled), ``tracekit.decode`` inside it:
  29 operators, their kernels back to back from 10 µs into the step: 65 µs of GPU work
  (:data:`DECODE_US`, M = 8 rows), the LM head 30 µs of it;
* ``[memory]``: the floor (weights + KV cache + prompts, :data:`FLOOR`) at the start, the
  prefill's activations, then each decode step's logits (allocated at the LM head,
  freed after the argmax).

Manifest: TTFT 0.180 ms, TPOT by step 0.070, 0.070, 0.072, 0.072 ms (median 0.071).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import tracegen as tg

L, C, H, V, BLOCK = 2, 768, 12, 50304, 1024
D = C // H
B, P, N = 8, 64, 4
BF16 = "c10::BFloat16"
TPOT_MS = [0.070, 0.070, 0.072, 0.072]
TTFT_MS = 0.180
BW, PEAK = 3.0e12, 600e12
PREFILL_START, PREFILL_DUR, PREFILL_GPU0 = 0, 200, 20
STEP0, STEP_DUR, STEP_GPU0 = 200, 100, 10
N_PARAMS = 53_597_184  # matmul parameters 52,810,752 + wpe 1024·768
WEIGHTS = 2 * N_PARAMS  # bf16
KV_ALLOC = 2 * L * B * (P + N) * C * 2  # 3,342,336
FLOOR = WEIGHTS + KV_ALLOC + 8 * B * P * 8  # + the prompt pool (8 batches of int64 ids)
PEAK_ALLOC = 125_000_000
LOGITS = B * V * 2  # 804,864


Op = tuple[str, Any, list[str], list[str], str, float]  # name, dims, types, concrete, kernel, µs
LN_KERNEL = "void at::native::vectorized_layer_norm_kernel<c10::BFloat16, float>(...)"
ADD_KERNEL = "void at::native::vectorized_elementwise_kernel<4, add>(...)"
COPY_KERNEL = "void at::native::unrolled_elementwise_kernel<copy>(...)"
GELU_KERNEL = "void at::native::vectorized_elementwise_kernel<4, gelu>(...)"
ATTN_KERNEL = "void pytorch_flash::flash_fwd_splitkv_kernel<...>(...)"
EMB_KERNEL = "void at::native::indexSelectLargeIndex<...>(...)"
ARGMAX_KERNEL = "void at::native::reduce_kernel<512, 1, argmax>(...)"
SCALARS = ["Scalar", "Scalar"]


def _ops(rows: int, t: int, ctx: int, prefill: bool) -> list[Op]:
    """One forward: ``rows`` token rows (B·t), ``t`` tokens per sequence, ``ctx`` keys
    attended to; the prefill's kernels run longer (:data:`PREFILL_US` in all)."""

    def us(decode: float, pre: float) -> float:
        return pre if prefill else decode

    def mm(n: int, k: int, t_us: float) -> Op:
        kernel = f"nvjet_sm90_tst_{'128x128' if prefill else '64x8'}_h_bz_bias_TNT"
        dims = [[n], [rows, k], [k, n], [], []]
        return ("aten::addmm", dims, [BF16] * 3 + SCALARS, ["", "", "", "1", "1"], kernel, t_us)

    ln: Op = (
        "aten::native_layer_norm",
        [[B, t, C], [], [C], [C], []],
        [BF16, "ScalarList", BF16, BF16, "Scalar"],
        ["", f"[{C}]", "", "", "1e-05"],
        LN_KERNEL,
        us(1, 2),
    )
    add: Op = ("aten::add", [[B, t, C], [B, t, C], []], [BF16, BF16, "Scalar"], [""] * 3,
               ADD_KERNEL, us(1, 2))  # fmt: skip
    copy: Op = ("aten::copy_", [[B, H, t, D], [B, H, t, D], []], [BF16, BF16, "Scalar"],
                [""] * 3, COPY_KERNEL, 1)  # fmt: skip
    attn: Op = (
        "aten::_scaled_dot_product_flash_attention",
        [[B, H, t, D], [B, H, ctx, D], [B, H, ctx, D], [], [], [], []],
        [BF16, BF16, BF16, "Scalar", "Scalar", "Scalar", ""],
        ["", "", "", "0.", "True" if prefill else "False", "False", ""],
        ATTN_KERNEL,
        us(1, 8),
    )
    gelu: Op = ("aten::gelu", [[B, t, 4 * C], []], [BF16, ""], ["", "tanh"], GELU_KERNEL,
                us(1, 3))  # fmt: skip
    layer = [ln, mm(3 * C, C, us(2, 10)), copy, copy, attn, mm(C, C, us(1, 4)), add,
             ln, mm(4 * C, C, us(2, 12)), gelu, mm(C, 4 * C, us(2, 12)), add]  # fmt: skip
    emb: Op = (
        "aten::embedding",
        [[V, C], [B, t], [], [], []],
        [BF16, "long int", "Scalar", "Scalar", "Scalar"],
        ["", "", "-1", "False", "False"],
        EMB_KERNEL,
        us(1, 2),
    )
    head: Op = ("aten::mm", [[B, C], [C, V]], [BF16, BF16], ["", ""],
                "nvjet_sm90_tst_64x8_h_bz_TNN", 30)  # fmt: skip
    argmax: Op = ("aten::argmax", [[B, V], [], []], [BF16, "Scalar", "Scalar"],
                  ["", "-1", "True"], ARGMAX_KERNEL, 2)  # fmt: skip
    return [emb, add, *layer * L, ln, head, argmax]


def _forward_us(prefill: bool) -> float:
    return sum(o[-1] for o in _ops(B * (P if prefill else 1), P if prefill else 1, P, prefill))


PREFILL_US = 156.0  # == _forward_us(True)
DECODE_US = 65.0  # == _forward_us(False)


class _Emit:
    def __init__(self) -> None:
        self.ev: list[dict[str, Any]] = []
        self.ext = 10_000
        self.corr = 1

    def forward(self, ops: list[Any], cpu0: float, gap: float, gpu0: float) -> None:
        """The operators from ``cpu0`` every ``gap`` µs (1 µs each, a launch inside), their
        kernels back to back on the GPU from ``gpu0``."""
        g = gpu0
        for i, (name, dims, types, concrete, kernel, us) in enumerate(ops):
            self.ext += 1
            cpu = cpu0 + gap * i
            args = {"Input Dims": dims, "Input type": types, "Concrete Inputs": concrete}
            self.ev.append(tg.op(name, cpu, 1, self.ext, **args))
            self.ev.append(tg.launch(cpu + 0.5, self.corr, self.ext, dur=0.4))
            self.ev.append(tg.kernel(kernel, g, us, self.corr, self.ext))
            if name == "aten::mm" and cpu0 >= STEP0:  # the decode step's logits
                self.ev.append(tg.memory(cpu + 0.2, LOGITS, FLOOR + LOGITS, addr=5000))
            if name == "aten::argmax" and cpu0 >= STEP0:
                self.ev.append(tg.memory(cpu + 0.9, -LOGITS, FLOOR, addr=5000))
            self.corr += 1
            g += us


def trace() -> dict[str, Any]:
    e = _Emit()
    e.ev.append(tg.memory(0.1, 1024, FLOOR, addr=4000))  # the floor, as the first total
    e.ev.append(tg.annot("tracekit.prefill", PREFILL_START, PREFILL_DUR, 1))
    e.ev.append(tg.memory(2, 8_000_000, FLOOR + 8_000_000, addr=4100))  # prefill activations
    e.forward(_ops(B * P, P, P, True), 5, 3, PREFILL_GPU0)
    e.ev.append(tg.memory(190, -8_000_000, FLOOR, addr=4100))
    for d in range(N):
        s = STEP0 + STEP_DUR * d
        e.ev.append(tg.annot(f"ProfilerStep#{d}", s, STEP_DUR, 2 + 2 * d))
        e.ev.append(tg.annot("tracekit.decode", s + 1, STEP_DUR - 2, 3 + 2 * d))
        e.forward(_ops(B, 1, P + d + 1, False), s + 2, 2, s + STEP_GPU0)
    doc = tg.small_trace()
    doc["traceEvents"] = e.ev + [ev for ev in doc["traceEvents"] if ev.get("ph") == "M"]
    return doc


def _stats(v: list[float]) -> dict[str, Any]:
    s = sorted(v)
    return {"median": (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2, "p10": s[0], "p90": s[-1],
            "mean": sum(s) / len(s), "n": len(s)}  # fmt: skip


def manifest(trace_name: str = "gen.pt.trace.json.gz") -> dict[str, Any]:
    model = {"vocab_size": V, "n_layer": L, "n_head": H, "n_embd": C, "block_size": BLOCK,
             "mlp_ratio": 4.0, "dropout": 0.0, "tie_embeddings": True, "bias": True,
             "attention": "sdpa"}  # fmt: skip
    tpot = _stats(TPOT_MS * 3)
    gen_ms = TTFT_MS + sum(TPOT_MS)
    return {
        "schema_version": 1,
        "status": "ok",
        "error": None,
        "config": {
            "preset": "gpt2-small",
            "layers": L,
            "device": "cuda",
            "dtype": "bf16",
            "attention": "sdpa",
            "compile": False,
            "batch": B,
            "seq": 128,
            "workload": "generate",
            "prompt": P,
            "new_tokens": N,
            "tf32": False,
            "model": model,
        },
        "model": {"n_params": N_PARAMS, **model},
        "device": {"type": "cuda", "name": "NVIDIA H100 80GB HBM3", "total_memory": 85_000_000_000},
        "versions": {"torch": "2.11.0+cu130"},
        "ceilings": {
            "memory_bandwidth_Bps": BW,
            "matmul_flops": {"fp32": 50e12, "tf32": None, "bf16": PEAK, "fp16": None},
        },
        "profiler": {
            "decode_steps_recorded": N,
            "record_shapes": True,
            "profile_memory": True,
            "with_flops": False,
            "with_stack": False,
        },
        "metrics": {
            "workload": "generate",
            "step_time_ms": tpot,
            "tpot_ms": tpot,
            "ttft_ms": _stats([TTFT_MS] * 3),
            "tpot_ms_by_step": TPOT_MS,
            "generation_ms": _stats([gen_ms] * 3),
            "tokens_per_s": B / (tpot["median"] / 1e3),
            "peak_allocated_bytes": PEAK_ALLOC,
            "peak_reserved_bytes": 2 * PEAK_ALLOC,
            "avg_allocated_bytes": None,
            "memory": {
                "weights_bytes": WEIGHTS,
                "kv_cache_bytes": KV_ALLOC,
                "other_bytes": PEAK_ALLOC - WEIGHTS - KV_ALLOC,
            },
        },
        "generate": {
            "prompt": P,
            "new_tokens": N,
            "batch": B,
            "context": P + N,
            "dtype": "bf16",
            "bytes_per_elem": 2,
            "weight_bytes": WEIGHTS,
            "kv_cache_bytes": KV_ALLOC,
            "kv_cache_bytes_measured": KV_ALLOC,
        },
        "artifacts": {"trace": trace_name, "traces": [trace_name], "tensorboard": "tensorboard"},
    }


def write_run(folder: Path) -> Path:
    """The run folder: trace + manifest."""
    folder.mkdir(parents=True, exist_ok=True)
    tg.write(trace(), folder / "gen.pt.trace.json.gz")
    (folder / "manifest.json").write_text(json.dumps(manifest()))
    return folder
