"""FLOP and byte formulas against hand-computed shapes and the profiler's own GEMM FLOPs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from tracekit.classify.costs import model_ops, op_cost

DATA = Path(__file__).parent / "data"
RECORDS = json.loads((DATA / "cpu_profile_ops.json").read_text())["ops"]


def rec(name: str, dims_prefix: str = "") -> dict[str, object]:
    for r in RECORDS:
        if r["name"] == name and r["input_dims"].startswith(dims_prefix):
            return dict(r)
    raise KeyError((name, dims_prefix))


def cost(r: dict[str, object]):  # type: ignore[no-untyped-def]
    c = op_cost(
        str(r["name"]),
        str(r["input_dims"]),
        str(r["input_types"]),
        str(r["concrete_inputs"]) if r.get("concrete_inputs") else None,
    )
    assert c is not None
    return c


def j(x: object) -> str:
    return json.dumps(x)


# --- GEMMs against torch.profiler's own FLOPs (real CPU records) ---------------------


def test_gemm_formulas_agree_with_the_profiler() -> None:
    checked = 0
    for r in RECORDS:
        if not r["flops"]:
            continue
        name, prof = r["name"], float(r["flops"])
        dims = json.loads(r["input_dims"])
        c = cost(r)
        if name in ("aten::mm", "aten::bmm"):
            assert c.flops == prof, r
        elif name == "aten::addmm":  # we add the bias (beta·C), the profiler does not
            m, n = dims[1][0], dims[2][1]
            assert c.flops - m * n == prof, r
            assert abs(c.flops / prof - 1) < 1 / dims[1][1]  # bias is 1/(2K) of the GEMM
        elif name == "aten::baddbmm":
            b, m, n = dims[1][0], dims[1][1], dims[2][2]
            assert c.flops - b * m * n == prof, r
        elif name == "aten::conv2d":  # profiler excludes the bias add
            assert c.flops - 2 * 8 * 8 * 8 == prof, r
        else:
            continue
        checked += 1
    assert checked >= 8


def test_mm_hand_computed_bf16() -> None:
    c = op_cost("aten::mm", j([[1024, 768], [768, 3072]]), j(["c10::BFloat16"] * 2))
    assert c is not None
    assert c.flops == 2 * 1024 * 768 * 3072 == 4_831_838_208
    assert c.bytes == (1024 * 768 + 768 * 3072 + 1024 * 3072) * 2 == 12_582_912
    assert c.dtype == "bf16"


def test_linear_and_matmul_records() -> None:
    c = cost(rec("aten::linear"))  # x [2,10,96] · W[48,96]ᵀ + b[48]
    assert c.flops == 2 * 20 * 48 * 96 + 20 * 48
    assert c.bytes == (1920 + 48 * 96 + 48 + 20 * 48) * 4
    c = cost(rec("aten::matmul"))  # [3,7,24] @ [24,100]
    assert c.flops == 2 * 21 * 100 * 24
    assert c.bytes == (504 + 2400 + 2100) * 4


def test_conv_forward_and_backward_records() -> None:
    c = cost(rec("aten::convolution"))
    # x [2,3,16,16], w [8,3,3,3], stride 2, pad 1 → out [2,8,8,8]
    assert c.flops == 2 * 2 * 8 * 64 * 3 * 9 + 2 * 8 * 64
    assert c.bytes == (1536 + 216 + 8 + 1024) * 4
    c = cost(rec("aten::convolution_backward"))  # output_mask [True, True, True]
    assert c.note == ""
    assert c.flops == 2 * (2 * 2 * 8 * 64 * 3 * 9) + 1024
    assert c.bytes == (1024 + 216 + 1536) * 4 + (1536 + 216 + 8) * 4


def test_cudnn_convolution_argument_order() -> None:
    # cudnn_convolution(self, weight, padding, stride, dilation, groups, …)
    c = op_cost(
        "aten::cudnn_convolution",
        j([[8, 64, 56, 56], [64, 64, 3, 3], [], [], [], []]),
        j(["float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar"]),
        j(["", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"]),
    )
    assert c is not None
    assert c.flops == 2 * 8 * 64 * 56 * 56 * 64 * 9


# --- attention ---------------------------------------------------------------------


def test_sdpa_causal_halving_and_backward_factor() -> None:
    f = cost(rec("aten::_scaled_dot_product_flash_attention_for_cpu"))  # q,k,v [2,4,32,16]
    full = 2 * 2 * 4 * 32 * 32 * 16 * 2  # QKᵀ and PV
    assert f.flops == full / 2
    assert "causal" in f.note
    assert f.bytes == 4 * (2 * 4 * 32 * 16) * 4 + 2 * 4 * 32 * 4  # q,k,v,out + logsumexp
    pub = cost(rec("aten::scaled_dot_product_attention"))
    assert pub.flops == full / 2
    bwd = cost(rec("aten::_scaled_dot_product_flash_attention_for_cpu_backward"))
    assert bwd.flops == 2.5 * full / 2


def test_flash_attention_forward_blhe_layout() -> None:
    q = [2, 128, 12, 64]  # B, L, H, E
    dims = [q, q, q, [], [], [], [], [], [], []]
    types = ["c10::BFloat16"] * 3 + [""] * 2 + ["Scalar"] * 5
    conc = ["", "", "", "", "", "128", "128", "0.", "True", "False"]
    c = op_cost("aten::_flash_attention_forward", j(dims), j(types), j(conc))
    assert c is not None
    assert c.flops == 4 * 2 * 12 * 128 * 128 * 64 / 2
    t = 2 * 128 * 12 * 64 * 2
    assert c.bytes == 4 * t + 2 * 12 * 128 * 4
    conc[8] = "False"
    c2 = op_cost("aten::_flash_attention_forward", j(dims), j(types), j(conc))
    assert c2 is not None and c2.flops == 2 * c.flops


def test_attention_without_recorded_causal_flag_says_so() -> None:
    q = [1, 2, 8, 4]
    c = op_cost("aten::_scaled_dot_product_flash_attention", j([q, q, q]), j(["float"] * 3))
    assert c is not None and "not recorded" in c.note


# --- normalisation, softmax, activations ----------------------------------------------


def test_layer_norm_backward_output_mask() -> None:
    dims = j([[4, 8], [4, 8], [], [4, 1], [4, 1], [8], [8], []])
    types = j(["float"] * 2 + ["ScalarList"] + ["float"] * 4 + ["ScalarList"])
    conc = j([""] * 7 + ["[True, False, False]"])
    c = op_cost("aten::native_layer_norm_backward", dims, types, conc)
    assert c is not None and c.flops == 10 * 32
    assert c.bytes == (32 + 32 + 4 + 4 + 8) * 4 + 32 * 4


def test_layer_norm_forward_and_backward() -> None:
    c = cost(rec("aten::native_layer_norm"))  # [2,10,96], w, b [96]
    assert c.flops == 8 * 1920
    assert c.bytes == 2 * 1920 * 4 + 2 * 96 * 4 + 2 * 20 * 4
    b = cost(rec("aten::native_layer_norm_backward"))
    assert b.flops == (10 + 2 + 1) * 1920
    reads = 1920 * 4 * 2 + 20 * 4 * 2 + 96 * 4  # grad, x, mean, rstd, weight (not bias)
    writes = 1920 * 4 + 2 * 96 * 4
    assert b.note == ""  # output_mask [True, True, True] was read
    assert b.bytes == reads + writes


def test_softmax_and_backward() -> None:
    c = cost(rec("aten::_softmax"))  # [6,50]
    assert (c.flops, c.bytes) == (5 * 300, 2 * 300 * 4)
    b = cost(rec("aten::_softmax_backward_data"))
    assert (b.flops, b.bytes) == (4 * 300, 3 * 300 * 4)
    ls = cost(rec("aten::_log_softmax"))  # [21,100]
    assert (ls.flops, ls.bytes) == (5 * 2100, 2 * 2100 * 4)


def test_softmax_half_to_float_writes_fp32() -> None:
    c = op_cost(
        "aten::_softmax",
        j([[4, 8], [], []]),
        j(["c10::BFloat16", "Scalar", "Scalar"]),
        j(["", "-1", "True"]),
    )
    assert c is not None and c.bytes == 32 * 2 + 32 * 4


def test_gelu_forward_backward() -> None:
    c = cost(rec("aten::gelu", "[[2, 10, 48]"))
    assert (c.flops, c.bytes) == (5 * 960, 2 * 960 * 4)
    b = cost(rec("aten::gelu_backward"))
    assert (b.flops, b.bytes) == (10 * 960, 3 * 960 * 4)


def test_elementwise_casts_and_masks() -> None:
    cp = cost(rec("aten::copy_", "[[8, 3]"))  # bf16 dst ← fp32 src
    assert (cp.flops, cp.bytes) == (0, 24 * 4 + 24 * 2)
    tc = cost(rec("aten::_to_copy", "[[8, 3]"))  # to(bfloat16): dtype code 15
    assert (tc.bytes, tc.dtype) == (24 * 4 + 24 * 2, "bf16")
    mf = cost(rec("aten::masked_fill"))
    assert (mf.flops, mf.bytes) == (0, 16 * 4 + 16 + 16 * 4)
    add = cost(rec("aten::add_", "[[2, 10, 96]"))
    assert (add.flops, add.bytes) == (1920, 3 * 1920 * 4)
    d = op_cost("aten::native_dropout", j([[5, 6], [], []]), j(["float", "Scalar", "Scalar"]))
    assert d is not None and (d.flops, d.bytes) == (60, 2 * 30 * 4 + 30)


def test_broadcasting_add_writes_the_broadcast_shape() -> None:
    c = op_cost("aten::add", j([[8, 1, 128], [128], []]), j(["float", "float", "Scalar"]))
    assert c is not None
    assert c.flops == 8 * 128 and c.bytes == (8 * 128 + 128 + 8 * 128) * 4


# --- reductions, pooling, embedding, loss --------------------------------------------


def test_bias_gradient_sum_and_full_sum() -> None:
    c = cost(rec("aten::sum", "[[20, 48], [], [], []]"))  # dim [0]
    assert (c.flops, c.bytes) == (960, 960 * 4 + 48 * 4)
    full = cost(rec("aten::sum", "[[2, 10, 48], []]"))  # sum(self, dtype): to a scalar
    assert full.bytes == 960 * 4 + 4


def test_max_pool() -> None:
    c = cost(rec("aten::max_pool2d_with_indices"))  # [2,8,8,8], k 2 → [2,8,4,4]
    assert c.flops == 256 * 4
    assert c.bytes == 1024 * 4 + 256 * 4 + 256 * 8  # in, out, int64 indices


def test_embedding_and_dense_backward() -> None:
    e = cost(rec("aten::embedding"))  # table [100,24], idx [3,7]: only looked-up rows
    assert (e.flops, e.bytes) == (0, 2 * 21 * 24 * 4 + 21 * 8)
    b = cost(rec("aten::embedding_dense_backward"))
    assert (b.flops, b.bytes) == (504, 2 * 504 * 4 + 21 * 8)


def test_nll_loss() -> None:
    f = cost(rec("aten::nll_loss_forward"))  # [21,100], target [21]
    assert (f.flops, f.bytes) == (21, 21 * 4 + 21 * 8 + 8)
    b = cost(rec("aten::nll_loss_backward"))
    assert (b.flops, b.bytes) == (21, 21 * 8 + 21 * 4)


# --- optimizer (tensor lists) ---------------------------------------------------------


def test_fused_adamw_from_tensor_list_sizes() -> None:
    c = cost(rec("aten::_fused_adamw_"))  # params [10,20] and [5]: 205 parameters
    assert c.flops == 13 * 205
    assert c.bytes == 7 * 205 * 4  # read p, g, m, v; write p, m, v
    assert "tensor-list dtype" in c.note


def test_foreach_ops() -> None:
    lerp = cost(rec("aten::_foreach_lerp_"))
    assert (lerp.flops, lerp.bytes) == (2 * 205, 3 * 205 * 4)
    acm = cost(rec("aten::_foreach_addcmul_"))
    assert (acm.flops, acm.bytes) == (3 * 205, 4 * 205 * 4)
    sq = cost(rec("aten::_foreach_sqrt"))
    assert (sq.flops, sq.bytes) == (205, 2 * 205 * 4)
    dv = cost(rec("aten::_foreach_div_"))  # ScalarList divisor
    assert (dv.flops, dv.bytes) == (205, 2 * 205 * 4)


# --- missing data: never invented ------------------------------------------------------


def test_no_shapes_gives_nan_and_unknown_op_gives_none() -> None:
    c = op_cost("aten::mm", None, None)
    assert c is not None and math.isnan(c.flops) and math.isnan(c.bytes)
    assert "no shapes" in c.note
    assert op_cost("aten::some_unknown_op", "[[1]]", '["float"]') is None
    bad = op_cost("aten::mm", j([[2, 3]]), j(["float"]))
    assert bad is not None and math.isnan(bad.flops)


def test_model_ops_prefers_the_profiler_flops() -> None:
    ops = pd.DataFrame(
        {
            "name": ["aten::mm", "aten::mm", "aten::relu", "aten::mm"],
            "input_dims": [j([[4, 8], [8, 2]]), j([[4, 8], [8, 2]]), j([[3]]), None],
            "input_types": [j(["float"] * 2), j(["float"] * 2), j(["float"]), None],
            "concrete_inputs": [None] * 4,
            "flops": [None, 999.0, None, None],
        }
    )
    m = model_ops(ops)
    assert list(m["source"]) == ["modelled", "profiler", "modelled", "none"]
    assert list(m["flops"][:2]) == [128.0, 999.0]
    assert m["flops_model"][1] == 128.0
    assert m["bytes"][0] == (32 + 16 + 8) * 4
    assert bool(m["has_model"][3]) and math.isnan(m["flops"][3])


@pytest.mark.parametrize(
    "name",
    [
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::native_layer_norm",
        "aten::_softmax",
        "aten::gelu",
        "aten::embedding",
        "aten::nll_loss_forward",
        "aten::_fused_adamw_",
    ],
)
def test_every_real_record_of_a_modelled_op_gets_a_finite_cost(name: str) -> None:
    rs = [r for r in RECORDS if r["name"] == name]
    assert rs
    for r in rs:
        c = cost(r)
        assert math.isfinite(c.flops) and math.isfinite(c.bytes) and c.bytes > 0, r


# --- Inductor kernels, tensor lists ------------------------------------------------------


def test_inductor_fused_kernel_cost() -> None:
    x = [8, 128, 768]
    c = op_cost(
        "triton_red_fused_add_mean_mul_pow_rsqrt_0",
        j([x, [768], x, [8, 128, 1], [], []]),
        j(["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "float", "Scalar", "Scalar"]),
        j(["", "", "", "", "1024", "768"]),
    )
    assert c is not None
    n = 8 * 128 * 768
    assert c.flops == 5 * n  # add, mean, mul, pow, rsqrt: one FLOP per element each
    assert c.bytes == 2 * n * 2 + 768 * 2 + 1024 * 4  # every argument once
    assert c.dtype == "bf16" and "Inductor" in c.note
    cast = op_cost(
        "triton_poi_fused__to_copy_3",
        j([[2304, 768], [2304, 768], []]),
        j(["float", "c10::BFloat16", "Scalar"]),
    )
    assert cast is not None and cast.flops == 0 and cast.bytes == 2304 * 768 * 6


def test_inductor_gemm_template() -> None:
    c = op_cost(
        "triton_tem_fused_addmm_0",
        j([[1024, 768], [768, 3072], [3072], [1024, 3072]]),
        j(["c10::BFloat16"] * 4),
    )
    assert c is not None and c.flops == 2 * 1024 * 768 * 3072


def test_cat_of_a_tensor_list() -> None:
    dims, types = j([[[2, 3], [2, 3]], []]), j(["TensorList", "Scalar"])
    c = op_cost("aten::cat", dims, types)
    assert c is not None and (c.flops, c.bytes) == (0, 2 * 12 * 4)
    assert "4 B/element assumed" in c.note
    c2 = op_cost("aten::cat", dims, types, None, 2)
    assert c2 is not None and c2.bytes == 2 * 12 * 2


def test_tensor_lists_without_shapes_are_unknown_unless_sized() -> None:
    dims, types = j([[], []]), j(["TensorList", "Scalar"])
    c = op_cost("aten::_foreach_mul_", dims, types, j(["", "0.9"]))
    assert c is not None and math.isnan(c.flops) and math.isnan(c.bytes)
    assert c.note.startswith("tensor-list sizes not recorded")
    sized = op_cost("aten::_foreach_mul_", dims, types, j(["", "0.9"]), 4, 1000)
    assert sized is not None and (sized.flops, sized.bytes) == (1000, 2 * 1000 * 4)
    assert "1,000 elements per list assumed" in sized.note


def test_scalar_tensor_does_not_widen_the_dtype() -> None:
    c = op_cost("aten::mul", j([[], [10, 20], [10, 20]]), j(["double", "float", "float"]))
    assert c is not None and c.dtype == "fp32"
    assert c.bytes == 8 + 2 * 200 * 4 + 200 * 4
    b = op_cost("aten::bitwise_not", j([[12, 128]]), j(["bool"]))
    assert b is not None and b.bytes == 2 * 12 * 128
