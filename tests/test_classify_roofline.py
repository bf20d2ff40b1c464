"""classify() on small hand-built traces: cost split, bounds, per-op/class/step tables, output."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests._synth import Builder, Trace
from tracekit.classify import classify, write_classification
from tracekit.classify.families.registry import CLASSES
from tracekit.classify.models.traffic import Traffic, manifest_traffic
from tracekit.classify.schema import ARROW, TABLES
from tracekit.errors import TraceError

BF = "c10::BFloat16"
TINY_GPT = {"vocab_size": 512, "n_layer": 2, "n_head": 4, "n_embd": 64, "block_size": 128}
GEMM = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas"
)
SPLITK = "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float>(…)"
LN = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
    "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, "
    "float*, c10::BFloat16*)"
)
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float>(…)"
GELU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl("
    "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}(…)"
)
CAST = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16_copy_kernel_cuda("
    "at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >(…)"
)
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"

ADDMM_FLOPS = 2 * 1024 * 3072 * 768 + 1024 * 3072
ADDMM_BYTES = (3072 + 1024 * 768 + 768 * 3072 + 1024 * 3072) * 2


def gpt_block(gap: int = 100, shapes: bool = True) -> tuple[Builder, dict[str, int]]:
    b = Builder()
    ids: dict[str, int] = {}

    def op(
        name: str, parent: int = -1, dims: object = None, types: object = None, conc: object = None
    ) -> int:
        if not shapes:
            dims = types = conc = None
        return b.op(name, parent, dims=dims, types=types, concrete=conc)

    b.op("ProfilerStep#0", category="user_annotation")
    lin = op("aten::linear", -1, [[8, 128, 768], [3072, 768], [3072]], [BF, BF, BF])
    mm = op(
        "aten::addmm",
        lin,
        [[3072], [1024, 768], [768, 3072], [], []],
        [BF, BF, BF, "Scalar", "Scalar"],
        ["", "", "", "1", "1"],
    )
    ids["gemm"] = b.kernel(GEMM, mm, 30_000, gap=gap)
    ids["splitk"] = b.kernel(SPLITK, mm, 10_000, gap=gap)
    ln = op(
        "aten::native_layer_norm",
        -1,
        [[1024, 768], [], [768], [768], []],
        [BF, "ScalarList", BF, BF, "Scalar"],
        ["", "[768]", "", "", "1e-05"],
    )
    ids["ln"] = b.kernel(LN, ln, 5_000, gap=gap)
    sm = op(
        "aten::_softmax",
        -1,
        [[8, 12, 128, 128], [], []],
        [BF, "Scalar", "Scalar"],
        ["", "-1", "False"],
    )
    ids["softmax"] = b.kernel(SOFTMAX, sm, 8_000, gap=gap)
    ge = op("aten::gelu", -1, [[1024, 3072], []], [BF, ""], ["", ""])
    ids["gelu"] = b.kernel(GELU, ge, 12_000, gap=gap)
    lin2 = op("aten::linear")
    to = op("aten::to", lin2)
    tc = op("aten::_to_copy", to)
    cp = op(
        "aten::copy_", tc, [[768, 768], [768, 768], []], [BF, "float", "Scalar"], ["", "", "False"]
    )
    ids["cast"] = b.kernel(CAST, cp, 3_000, gap=gap)
    ids["memcpy"] = b.kernel(
        "Memcpy DtoD (Device -> Device)", cp, 1_000, kind="memcpy", nbytes=1 << 20, gap=gap
    )
    ids["memset"] = b.kernel("Memset (Device)", mm, 500, kind="memset", nbytes=4096, gap=gap)
    ids["nccl"] = b.kernel(NCCL, -1, 2_000, gap=gap)
    ids["addmm_op"], ids["ln_op"] = mm, ln
    return b, ids


@pytest.fixture(scope="module")
def result():  # type: ignore[no-untyped-def]
    b, ids = gpt_block()
    return classify(b.trace()), ids


def test_kernel_table_has_the_documented_columns(result) -> None:  # type: ignore[no-untyped-def]
    r, _ = result
    for table, df in (
        ("kernel_roofline", r.kernels),
        ("op_roofline", r.ops),
        ("classes", r.classes),
        ("step_summary", r.steps),
        ("device", r.device_frame()),
    ):
        assert list(df.columns) == [c.name for c in TABLES[table]], table


def test_gemm_cost_is_split_over_its_kernels_by_duration(result) -> None:  # type: ignore[no-untyped-def]
    r, ids = result
    k = r.kernels.set_index("kernel_id")
    g, s = k.loc[ids["gemm"]], k.loc[ids["splitk"]]
    assert g["cost_op_id"] == s["cost_op_id"] == ids["addmm_op"]
    assert g["flops"] == pytest.approx(0.75 * ADDMM_FLOPS)
    assert s["flops"] == pytest.approx(0.25 * ADDMM_FLOPS)
    assert g["bytes"] + s["bytes"] == pytest.approx(ADDMM_BYTES)
    assert (
        g["intensity"] == pytest.approx(s["intensity"]) == pytest.approx(ADDMM_FLOPS / ADDMM_BYTES)
    )
    assert g["pipe"] == "tensor_bf16" and g["source"] == "modelled"
    assert g["bound"] == "compute-bound"  # intensity 384 > H100 bf16 ridge 295
    assert g["ridge"] == pytest.approx(989.5e12 / 3.35e12)
    assert g["attained_flops"] == pytest.approx(0.75 * ADDMM_FLOPS / 30e-6)
    assert g["roof_pct"] == pytest.approx(100 * 0.75 * ADDMM_FLOPS / 30e-6 / 989.5e12)


def test_normalisation_softmax_gelu_and_casts_are_memory_bound(result) -> None:  # type: ignore[no-untyped-def]
    r, ids = result
    k = r.kernels.set_index("kernel_id")
    for name, cls in (
        ("ln", "layernorm"),
        ("softmax", "softmax"),
        ("gelu", "activation"),
        ("cast", "elementwise"),
    ):
        row = k.loc[ids[name]]
        assert row["class"] == cls
        assert row["bound"] == "memory-bound", name
        assert row["pipe"] == "simt_fp32"
        assert row["roof_pct"] == pytest.approx(100 * row["attained_bw"] / 3.35e12)
    ln = k.loc[ids["ln"]]
    assert ln["flops"] == 8 * 1024 * 768
    assert ln["bytes"] == 2 * 1024 * 768 * 2 + 2 * 768 * 2 + 2 * 1024 * 4


def test_copies_carry_their_own_bytes(result) -> None:  # type: ignore[no-untyped-def]
    r, ids = result
    k = r.kernels.set_index("kernel_id")
    mc, ms = k.loc[ids["memcpy"]], k.loc[ids["memset"]]
    assert (mc["class"], mc["bytes"], mc["flops"], mc["source"]) == (
        "memcpy",
        2 * (1 << 20),
        0.0,
        "profiler",
    )  # device-to-device: read + write
    assert mc["bound"] == "memory-bound" and mc["cost_op_id"] == -1
    assert (ms["class"], ms["bytes"]) == ("memset", 4096)
    nc = k.loc[ids["nccl"]]
    assert nc["class"] == "communication" and nc["source"] == "none"
    assert nc["bound"] == "unknown"


def test_op_table_sums_its_kernels(result) -> None:  # type: ignore[no-untyped-def]
    r, ids = result
    o = r.ops.set_index("op_id")
    mm = o.loc[ids["addmm_op"]]
    assert mm["name"] == "aten::addmm" and mm["class"] == "gemm"
    # the GEMM's two kernels and the memset it launched
    assert mm["kernel_count"] == 3 and mm["gpu_dur"] == 40_500
    assert mm["flops"] == pytest.approx(ADDMM_FLOPS)
    assert mm["bytes"] == pytest.approx(ADDMM_BYTES + 4096)
    assert mm["bound"] == "compute-bound" and mm["pipe"] == "tensor_bf16"
    assert mm["input_dims"].startswith("[[3072]")
    assert list(r.ops["gpu_dur"]) == sorted(r.ops["gpu_dur"], reverse=True)


def test_class_shares(result) -> None:  # type: ignore[no-untyped-def]
    r, _ = result
    c = r.classes.set_index("class")
    assert list(r.classes["class"]) == list(CLASSES)
    assert c["time_share_pct"].sum() == pytest.approx(100.0)
    total = 30_000 + 10_000 + 5_000 + 8_000 + 12_000 + 3_000 + 1_000 + 500 + 2_000
    assert c.loc["gemm", "gpu_time"] == 40_000
    assert c.loc["gemm", "time_share_pct"] == pytest.approx(100 * 40_000 / total)
    assert c.loc["gemm", "ms_per_step"] == pytest.approx(0.04)
    assert c.loc["gemm", "flop_share_pct"] > 99
    assert c.loc["layernorm", "memory_bound_pct"] == 100.0
    assert c.loc["attention", "kernel_count"] == 0


def test_step_summary(result) -> None:  # type: ignore[no-untyped-def]
    r, _ = result
    s = r.steps.iloc[0]
    busy = 30_000 + 10_000 + 5_000 + 8_000 + 12_000 + 3_000 + 1_000 + 500 + 2_000
    span = busy + 9 * 100 - 100  # gaps between the 9 activities
    assert (s["step"], s["gpu_busy"], s["gpu_span"]) == (0, busy, span)
    assert s["gpu_idle_pct"] == pytest.approx(100 * (1 - busy / span))
    assert not s["launch_bound"]
    assert s["flops"] == pytest.approx(r.kernels["flops"].sum())
    assert s["achieved_flops"] == pytest.approx(s["flops"] / (span * 1e-9))
    assert s["bw_util_pct"] == pytest.approx(100 * s["bytes"] / (span * 1e-9) / 3.35e12)
    assert s["memory_bound_time_pct"] + s["compute_bound_time_pct"] + s[
        "unknown_bound_time_pct"
    ] == pytest.approx(100)
    assert s["unknown_bound_time_pct"] == pytest.approx(100 * 2_000 / busy)  # the NCCL kernel
    assert math.isnan(s["analytic_bytes"])


def test_idle_gpu_is_called_launch_bound() -> None:
    b, _ = gpt_block(gap=50_000)
    r = classify(b.trace())
    assert bool(r.steps["launch_bound"].iloc[0])
    assert any("launch/host-bound" in n for n in r.notes)


def test_unknown_device_classes_nothing() -> None:
    b, _ = gpt_block()
    r = classify(b.trace(props=[{"id": 0, "name": "NVIDIA B200"}]))
    assert set(r.kernels["bound"]) == {"unknown"}
    assert set(r.ops["bound"]) == {"unknown"}
    assert any("unknown device" in n for n in r.notes)
    # the flags make it known
    r2 = classify(
        b.trace(props=[{"id": 0, "name": "NVIDIA B200"}]), peak_tflops=2250, bandwidth_gbs=8000
    )
    assert "compute-bound" in set(r2.kernels["bound"])


def test_no_shapes_no_flops() -> None:
    b, _ = gpt_block(shapes=False)
    r = classify(b.trace())
    k = r.kernels[r.kernels["kind"] == "kernel"]
    assert k["flops"].isna().all() and set(k["source"]) == {"none"}
    assert set(k["bound"]) == {"unknown"}
    assert set(r.kernels["class"]) >= {"gemm", "layernorm", "softmax", "activation"}
    assert any("no shapes recorded" in n for n in r.notes)


def test_kernels_of_zero_duration_share_equally() -> None:
    b = Builder()
    mm = b.op("aten::mm", dims=[[64, 64], [64, 64]], types=["float", "float"])
    b.kernel("ampere_sgemm_64x64_nn", mm, 0)
    b.kernel("ampere_sgemm_64x64_nn", mm, 0)
    r = classify(b.trace())
    assert list(r.kernels["flops"]) == [64**3, 64**3]
    assert r.kernels["pipe"].iloc[0] == "simt_fp32"


def test_measured_ceilings_change_the_roofline() -> None:
    b, ids = gpt_block()
    manifest = {"ceilings": {"memory_bandwidth_Bps": 3.0e12, "matmul_flops": {"bf16": 600e12}}}
    r = classify(b.trace(manifest=manifest))
    g = r.kernels.set_index("kernel_id").loc[ids["gemm"]]
    assert g["peak_flops"] == 600e12 and g["peak_bw"] == 3.0e12
    assert r.device.bandwidth_source.startswith("measured")


def test_analytic_traffic_comes_from_the_manifest() -> None:
    """classify computes the step table's analytic traffic from the run's manifest (the
    model config: tracekit.classify.models.traffic, which the report and the sweep show
    too); without one, NaN and a note; ``traffic=`` overrides it."""
    cfg = {"model": TINY_GPT, "batch": 2, "seq": 16, "dtype": "bf16", "attention": "sdpa"}
    manifest = {"config": cfg}
    want = manifest_traffic(manifest)
    assert want is not None and want.total > 0
    b, _ = gpt_block()
    s = classify(b.trace(manifest=manifest)).steps.iloc[0]
    assert s["analytic_bytes"] == want.total and s["analytic_act_bytes"] == want.activations
    assert s["analytic_param_bytes"] == want.parameters
    assert s["bytes_vs_analytic"] == pytest.approx(s["bytes"] / want.total)
    r = classify(b.trace())  # a bare trace: no model config, no estimate
    assert math.isnan(r.steps["analytic_bytes"].iloc[0])
    assert any("analytic traffic estimate unavailable" in n for n in r.notes)
    traffic = Traffic(parameters=10, gradients=20, optimizer_state=40, activations=30)
    s = classify(b.trace(manifest=manifest), traffic=traffic).steps.iloc[0]
    assert s["analytic_param_bytes"] == 10 and s["analytic_grad_bytes"] == 20
    assert s["analytic_optim_bytes"] == 40 and s["analytic_act_bytes"] == 30
    assert s["analytic_bytes"] == 100
    r = classify(b.trace(manifest=manifest), traffic=None)  # the override: the run has none
    assert math.isnan(r.steps["analytic_bytes"].iloc[0])
    assert any("analytic traffic estimate unavailable" in n for n in r.notes)


def test_trace_without_operators() -> None:
    b = Builder()
    b.kernel(GEMM, -1, 1000)
    b.kernel(GELU, -1, 500)
    t = b.trace()
    t = Trace(t.kernels, t.ops.iloc[:0], t.steps, t.meta)
    r = classify(t)
    assert list(r.kernels["class"]) == ["gemm", "activation"]
    assert len(r.ops) == 0
    assert any("kernel names only" in n for n in r.notes)


def test_write_classification(tmp_path: Path, result) -> None:  # type: ignore[no-untyped-def]
    r, _ = result
    out = write_classification(r, tmp_path / "cls")
    for table, fname in (
        ("kernel_roofline", "kernel_roofline.parquet"),
        ("op_roofline", "op_roofline.parquet"),
        ("classes", "classes.parquet"),
        ("step_summary", "step_summary.parquet"),
        ("device", "device.parquet"),
    ):
        t = pq.read_table(out / fname)
        assert t.schema.equals(ARROW[table]), table
    k = pd.read_parquet(out / "kernel_roofline.parquet")
    assert len(k) == len(r.kernels)
    assert np.allclose(k["flops"].fillna(-1), r.kernels["flops"].fillna(-1))
    summary = json.loads((out / "classify.json").read_text())
    assert summary["device"]["spec"] == "h100-sxm"
    assert {c["class"] for c in summary["classes"]} == set(CLASSES)
    assert not list(tmp_path.glob(".cls*"))  # no temporary folder left behind


def test_write_failure_leaves_nothing(tmp_path: Path, result, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    r, _ = result
    import tracekit.classify.output as out_mod

    def boom(*a: object, **k: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(out_mod, "atomic_write_json", boom)
    with pytest.raises(RuntimeError):
        write_classification(r, tmp_path / "cls")
    assert list(tmp_path.iterdir()) == []


# --- tensor lists: element size from kernel names, sizes from the parameter count -------

CAT_KERNEL = (
    "void at::native::(anonymous namespace)::CatArrayBatchedCopy_vectorized<at::native::"
    "(anonymous namespace)::OpaqueType<2u>, unsigned int, 3, 128, 1, 16, 8>(char*, …)"
)
LERP_KERNEL = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
    "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::"
    "PointwiseOpScalarFunctor<float, 2, 2, 0>, …>(…)"
)


def test_cat_element_size_from_its_kernel() -> None:
    b = Builder()
    cat = b.op("aten::cat", dims=[[[8, 128, 768]] * 3, []], types=["TensorList", "Scalar"])
    b.kernel(CAT_KERNEL, cat, 3000)
    r = classify(b.trace())
    k = r.kernels.iloc[0]
    assert k["bytes"] == 2 * 3 * 8 * 128 * 768 * 2  # OpaqueType<2u>: 2-byte elements
    assert "from the kernel names" in k["cost_note"]
    assert k["bound"] == "memory-bound"


def _adamw_step(groups: int = 1, grid: int = 16) -> Trace:
    b = Builder()
    step = b.op("Optimizer.step#AdamW.step", category="user_annotation")
    for _ in range(groups):
        lerp = b.op(
            "aten::_foreach_lerp_",
            step,
            dims=[[], [], []],
            types=["TensorList", "TensorList", "Scalar"],
            concrete=["", "", "0.1"],
        )
        b.kernel(LERP_KERNEL, lerp, 10_000, grid=(grid, 1, 1))
    return b.trace(manifest={"model": {"n_params": 1_000_000}})


def test_optimizer_lists_get_the_parameter_count() -> None:
    r = classify(_adamw_step())
    k = r.kernels.iloc[0]
    assert (k["flops"], k["bytes"]) == (2 * 1_000_000, 3 * 1_000_000 * 4)  # lerp: 2 FLOP/elt
    assert "1,000,000 elements per list assumed" in k["cost_note"]
    assert k["bound"] == "memory-bound" and k["source"] == "modelled"
    assert any("parameter count" in n for n in r.notes)


@pytest.mark.parametrize(("groups", "grid"), [(2, 16), (1, 1)])
def test_optimizer_lists_stay_unknown_when_the_count_may_be_wrong(groups: int, grid: int) -> None:
    # two parameter groups; or kernels that ran too few 64 Ki-element blocks
    r = classify(_adamw_step(groups, grid))
    assert r.kernels["flops"].isna().all()
    assert set(r.kernels["bound"]) == {"unknown"}
    assert any("dropped the shapes" in n for n in r.notes)


def test_profiler_flops_file_is_preferred(tmp_path: Path) -> None:
    import gzip

    b, ids = gpt_block()
    rows = [
        {
            "name": "aten::addmm",
            "input_shapes": [[3072], [1024, 768], [768, 3072], [], []],
            "count": 2,
            "flops": 2 * 4_831_838_208,
        }
    ]
    p = tmp_path / "x.profiler_flops.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump({"format": "tracekit.profiler_flops", "version": 1, "rows": rows}, f)
    r = classify(b.trace(), profiler_flops=p)
    mm = r.ops.set_index("op_id").loc[ids["addmm_op"]]
    assert mm["flops"] == 4_831_838_208 and mm["source"] == "profiler"
    # our model of the same call (with the bias) agrees within 1/(2K)
    assert abs(ADDMM_FLOPS / mm["flops"] - 1) < 1 / 768
    assert any("profiler_flops" in n for n in r.notes)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(TraceError, match=r"not a tracekit\.profiler_flops file"):
        classify(b.trace(), profiler_flops=tmp_path / "bad.json")


def test_cpu_only_trace_says_so() -> None:
    b = Builder()
    b.op("aten::mm", dims=[[4, 4], [4, 4]], types=["float", "float"])
    r = classify(b.trace())
    assert len(r.kernels) == 0 and len(r.steps) == 0
    assert any("no GPU activity" in n for n in r.notes)


def test_launch_bound_steps_share_one_note() -> None:
    from tracekit.classify.roofline import _launch_bound_note

    steps = pd.DataFrame(
        {"step": range(12), "launch_bound": [True] * 11 + [False], "gpu_idle_pct": 91.0}
    )
    steps.loc[3, "gpu_idle_pct"] = 92.4
    assert _launch_bound_note(steps, "") == (
        "steps 0–10 (11 of 12): GPU idle 91–92% of the step's span — launch/host-bound "
        "(the GPU waits for the CPU)"
    )
    two = steps.iloc[[0, 1]].assign(gpu_idle_pct=50.0)
    assert _launch_bound_note(two, "!").startswith("steps 0, 1: GPU idle 50% of")
    assert _launch_bound_note(steps.assign(launch_bound=False), "") is None
