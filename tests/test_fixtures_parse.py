"""Golden figures of the parser on tracekit's own fixtures (H200 GPT-2-small and CPU runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracekit.parse import load

FIX = Path(__file__).resolve().parents[1] / "fixtures"

# folder: kernels, memcpy, memset, ops, runtime, memory events, GPU activity without launch,
#         summed GPU time (ns), backward ops
GOLDEN = {
    "h200-gpt2s-b8-s128-fp32-naive": (1024, 31, 111, 6343, 894, 1862, 340, 34504835, 3796),
    "h200-gpt2s-b8-s128-fp32-naive-stack": (995, 30, 107, 6343, 894, 1862, 306, 33768716, 3796),
    "h200-gpt2s-b8-s128-bf16-naive": (1023, 24, 50, 8021, 1080, 2496, 23, 9698425, 4774),
    "h200-gpt2s-b8-s128-bf16-sdpa": (770, 0, 74, 6113, 936, 2088, 22, 8583408, 3634),
    "h200-gpt2s-b8-s128-bf16-sdpa-compile": (662, 0, 26, 2230, 780, 1272, 22, 7269261, 1038),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_gpu_fixture_golden(name: str) -> None:
    t = load(FIX / name)
    kern, cpy, mset, ops, rt, mem, unlaunched, gpu_ns, bwd = GOLDEN[name]
    c = t.meta["counts"]
    assert (c["kernels"], c["memcpy"], c["memset"], c["ops"], c["runtime"], c["memory"]) == (
        kern,
        cpy,
        mset,
        ops,
        rt,
        mem,
    )
    assert len(t.kernels) == kern + cpy + mset
    no_launch = int((t.kernels.runtime_id < 0).sum())
    assert no_launch == unlaunched
    # GPU work launched before the recorded step (spill-over) has no operator and no step.
    assert (t.kernels[t.kernels.runtime_id < 0].step == -1).all()
    assert t.meta["link_rate"] == 1.0
    assert int(t.kernels.dur.sum()) == gpu_ns
    assert int(t.ops.is_backward.sum()) == bwd
    assert t.device_name == "NVIDIA H200" and t.manifest is not None
    assert list(t.steps.step) == [2]
    assert t.meta["options"]["record_shapes"] and t.meta["options"]["profile_memory"]
    assert t.meta["options"]["with_flops"]  # declared in the header by torch 2.11


def test_stack_fixture_has_module_paths() -> None:
    t = load(FIX / "h200-gpt2s-b8-s128-fp32-naive-stack")
    mods = set(t.ops.module.dropna())
    assert "GPT_0.Block_11.MLP_0.Linear_1" in mods or any(".Block_11." in m for m in mods)
    fwd = t.kernels[(t.kernels.op_id >= 0)]
    assert fwd.module.notna().sum() > 0


def test_cpu_fixture() -> None:
    t = load(FIX / "cpu-tiny-fp32-naive")
    assert len(t.kernels) == 0 and len(t.ops) == 2054 and len(t.memory) == 957
    assert t.meta["link_rate"] is None and t.manifest["device"]["type"] == "cpu"  # type: ignore[index]
