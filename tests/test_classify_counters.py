"""Nsight Compute counters: parsing the raw CSV, joining to trace kernels, measured roofline."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests._synth import Builder
from tracekit.classify import classify
from tracekit.classify.counters import join_counters
from tracekit.classify.ncu import base_name, ncu_command, ncu_metrics, read_ncu_csv
from tracekit.errors import TraceError

DATA = Path(__file__).parent / "data"
BASE = DATA / "ncu_raw_base_units.csv"
AUTO = DATA / "ncu_raw_auto_units.csv"

GEMM = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
    "segment_k_off_kernel__5x_cublas"
)
LN = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
    "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, "
    "float*, c10::BFloat16*)"
)
SM = (
    "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 7, "
    "false, false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)"
)
CAST = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16_copy_kernel_cuda("
    "at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >(…)"
)
BF = "c10::BFloat16"


def test_parse_raw_page_with_base_units() -> None:
    c = read_ncu_csv(BASE)
    assert list(c["ncu_id"]) == [0, 1, 2, 3]
    assert list(c["base_name"]) == [
        "vectorized_elementwise_kernel",
        GEMM,
        "vectorized_layer_norm_kernel",
        "softmax_warp_forward",
    ]
    g = c.iloc[1]
    assert (g["grid"], g["block"]) == ("24,8,1", "384,1,1")
    assert g["tensor_flops"] == 4_831_838_208
    assert g["simt_flops_fp32"] == 3_145_728  # FADD only
    assert g["flops"] == 4_831_838_208 + 3_145_728
    assert g["tensor_pipe"] == "tensor_bf16"
    assert (g["dram_read"], g["dram_write"], g["dram_bytes"]) == (12_580_000, 3_150_000, 15_730_000)
    assert g["l2_bytes"] == 20_000_000 and g["duration"] == pytest.approx(30_210)
    assert g["l2_peak_bw"] == pytest.approx(4096 * 1.5e9)
    assert g["dram_peak_bw"] == pytest.approx(1288 * 2.6e9)
    ln = c.iloc[2]
    assert ln["simt_flops_fp32"] == 2 * 2_000_000 + 1_000_000 + 500_000  # FMA counted twice
    assert ln["tensor_flops"] == 0


def test_auto_scaled_units_agree_with_base_units() -> None:
    a, b = read_ncu_csv(AUTO), read_ncu_csv(BASE)
    for col in ("dram_read", "l2_bytes", "duration", "flops", "l2_peak_bw"):
        assert a[col].to_numpy() == pytest.approx(b[col].to_numpy(), rel=2e-3, abs=6e3), col


def test_text_input_and_bad_files(tmp_path: Path) -> None:
    assert len(read_ncu_csv(BASE.read_text())) == 4
    with pytest.raises(TraceError, match='no \'"ID"'):
        read_ncu_csv("==PROF== nothing profiled\n")
    details = (
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
        '"Section Name","Metric Name","Metric Unit","Metric Value"\n'
        '"0","1","p","h","k(float*)","1","7","S","dram__bytes.sum","byte","2,000"\n'
    )
    with pytest.raises(TraceError, match="raw layout"):
        read_ncu_csv(details)
    with pytest.raises(TraceError, match="cannot read"):
        read_ncu_csv(tmp_path)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (
            LN,
            "void at::native::<unnamed>::vectorized_layer_norm_kernel<c10::BFloat16, float>("
            "int, float, const T1 *, const T1 *, const T1 *, T2 *, T2 *, T1 *)",
        ),
        (
            SM,
            "void <unnamed>::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, (int)7, "
            "(bool)0, (bool)0>(T2 *, const T1 *, int, int, int, const bool *, int, bool)",
        ),
        # Kineto vs nsys/ncu spellings from public profiles (see tests/data/kernel_names.tsv)
        (
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::Half, float, "
            "c10::Half, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(c10::Half*, "
            "c10::Half const*, int)",
            "void at::native::<unnamed>::cunn_SoftMaxForward<(int)8, c10::BFloat16, float,...",
        ),
        (
            "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
            "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, float, int)",
            "fused_add_rms_norm_kernel",
        ),
        (
            "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>("
            "cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)",
            "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(T1::Params)",
        ),
    ],
)
def test_base_name_is_the_same_for_both_demanglers(a: str, b: str) -> None:
    assert base_name(a) == base_name(b)


def test_generic_wrappers_keep_their_kernel() -> None:
    assert base_name("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(x)") == (
        "Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>"
    )


def _trace(steps: int = 2, repeat_gemm: bool = False):  # type: ignore[no-untyped-def]
    b = Builder()
    for s in range(steps):
        mm = b.op("aten::mm", dims=[[1024, 768], [768, 3072]], types=[BF, BF], step=s)
        b.kernel(GEMM, mm, 30_000, step=s, grid=(24, 8, 1), block=(384, 1, 1))
        cp = b.op(
            "aten::copy_", dims=[[768, 768], [768, 768], []], types=[BF, "float", "Scalar"], step=s
        )
        b.kernel(CAST, cp, 3_000, step=s, grid=(288, 1, 1), block=(128, 1, 1))
        ln = b.op(
            "aten::native_layer_norm",
            dims=[[1024, 768], [], [768], [768], []],
            types=[BF, "ScalarList", BF, BF, "Scalar"],
            concrete=["", "[768]", "", "", ""],
            step=s,
        )
        b.kernel(LN, ln, 5_000, step=s, grid=(1024, 1, 1), block=(128, 1, 1))
        if repeat_gemm:
            b.kernel(GEMM, mm, 30_000, step=s, grid=(24, 8, 1), block=(384, 1, 1))
        sm = b.op(
            "aten::_softmax",
            dims=[[8, 12, 128, 128], [], []],
            types=[BF, "Scalar", "Scalar"],
            concrete=["", "-1", "False"],
            step=s,
        )
        b.kernel(SM, sm, 8_000, step=s, grid=(384, 1, 1), block=(128, 1, 1))
    return b.trace()


def test_launch_order_join_reports_unmatched_on_both_sides() -> None:
    t = _trace()
    joined, unmatched, notes = join_counters(t.kernels, read_ncu_csv(BASE))
    assert "launch-order" in notes[0]
    k = t.kernels.set_index("kernel_id")
    names = [k.loc[i, "name"] for i in joined["kernel_id"]]
    assert names == [GEMM, LN, SM, GEMM, LN, SM]  # both steps
    assert list(joined["ncu_id"]) == [1, 2, 3, 1, 2, 3]
    assert not joined["extrapolated"].any()
    assert list(joined["pipe"]) == ["tensor_bf16", "simt_fp32", "simt_fp32"] * 2
    tr = unmatched[unmatched["side"] == "trace"]
    nc = unmatched[unmatched["side"] == "ncu"]
    assert list(tr["name"]) == [CAST, CAST]  # not profiled
    assert list(nc["position"]) == [0, 0]  # ncu's warm-up fill kernel, per step
    assert any("2 trace kernels without counters" in n for n in notes)


def test_signature_mode_extrapolates_repeats(tmp_path: Path) -> None:
    lines = BASE.read_text().splitlines()
    once = "\n".join(ln for ln in lines if not ln.startswith('"0"'))  # one row per signature
    t = _trace(repeat_gemm=True)
    joined, unmatched, notes = join_counters(t.kernels, read_ncu_csv(once))
    assert "signature" in notes[0]
    assert len(joined) == 2 * 4  # GEMM, LN, GEMM, SM per step
    assert list(joined["extrapolated"]) == [False, False, True, False] * 2
    assert any("extrapolated" in n for n in notes)
    assert set(unmatched["name"]) == {CAST}
    with pytest.raises(TraceError):
        join_counters(t.kernels, read_ncu_csv(once), mode="bogus")


def _gemm_launches(flops: list[int]) -> pd.DataFrame:
    """The GEMM pass: one row per launch of the GEMM, each with its own FLOPs."""
    row = read_ncu_csv(BASE).iloc[[1]]
    rows = pd.concat([row] * len(flops), ignore_index=True)
    rows["ncu_id"] = range(100, 100 + len(flops))
    rows["tensor_flops"] = rows["flops"] = [float(f) for f in flops]
    return rows


def test_gemm_launches_are_joined_in_order_and_never_extrapolated() -> None:
    # One kernel and grid for two GEMMs of different depth: the signature pass profiles only
    # the first, so without the GEMM pass the second would get the first one's FLOPs.
    lines = BASE.read_text().splitlines()
    once = read_ncu_csv("\n".join(ln for ln in lines if not ln.startswith('"0"')))
    t = _trace(repeat_gemm=True)
    joined, unmatched, notes = join_counters(
        t.kernels, once, launches=_gemm_launches([4_000, 1_000])
    )
    k = t.kernels.set_index("kernel_id")
    gemm = joined[[k.loc[i, "name"] == GEMM for i in joined["kernel_id"]]]
    assert list(gemm["flops"]) == [4_000.0, 1_000.0] * 2  # per launch, in both steps
    assert list(gemm["ncu_id"]) == [100, 101] * 2
    assert not joined["extrapolated"].any()  # LN and SM are the first of their signature
    assert len(joined) == 2 * 4 and set(unmatched["name"]) == {CAST}
    assert any("2 profiled GEMM launches" in n for n in notes) and "signature" in notes[0]
    # A launch the trace does not have is reported, not forced onto another kernel.
    _, unmatched, _ = join_counters(t.kernels, once, launches=_gemm_launches([4_000, 1_000, 7]))
    extra = unmatched[unmatched["side"] == "ncu"]
    assert len(extra) == 2 and set(extra["grid"]) == {"24,8,1"}  # once per step


def test_sampled_gemm_launches_extrapolate_by_operator_shapes() -> None:
    # Two blocks of (deep GEMM, shallow GEMM) on one kernel and grid; the GEMM pass profiled
    # the first block only. Block 2 takes block 1's counters shape by shape, not the first
    # launch's (which the signature pass would give both).
    b = Builder()
    for _ in range(2):
        for k_dim in (3072, 768):
            mm = b.op("aten::mm", dims=[[1024, k_dim], [k_dim, 768]], types=[BF, BF], step=0)
            b.kernel(GEMM, mm, 30_000, step=0, grid=(24, 8, 1), block=(384, 1, 1))
    t = b.trace()
    kernels = t.kernels.assign(  # as tracekit.parse links them
        op_input_dims=t.kernels["op_id"].map(t.ops.set_index("op_id")["input_dims"])
    )
    assert kernels["op_input_dims"].nunique() == 2
    lines = BASE.read_text().splitlines()
    once = read_ncu_csv("\n".join(ln for ln in lines if not ln.startswith('"0"')))
    joined, unmatched, notes = join_counters(kernels, once, launches=_gemm_launches([4, 1]))
    assert list(joined.sort_values("kernel_id")["flops"]) == [4.0, 1.0, 4.0, 1.0]
    assert list(joined.sort_values("kernel_id")["extrapolated"]) == [False, False, True, True]
    assert any("2 GEMM launches carry the counters" in n for n in notes)
    assert not len(unmatched[unmatched["side"] == "trace"])


def test_gemm_counters_found_in_the_run_folder(tmp_path: Path) -> None:
    lines = BASE.read_text().splitlines()
    (tmp_path / "counters.csv").write_text("\n".join(ln for ln in lines if ln[:3] != '"1"'))
    gemm = [ln for ln in lines if not ln.startswith('"') or ln[:4] in ('"ID"', '"",') or
            ln.startswith('"1"')]  # fmt: skip
    (tmp_path / "counters-gemm.csv").write_text("\n".join(gemm))
    t = _trace(steps=1)
    t.run_dir = tmp_path  # type: ignore[attr-defined]
    t.manifest = {"artifacts": {"counters": "counters.csv", "counters_gemm": "counters-gemm.csv"}}
    r = classify(t)
    g = r.kernels.set_index("name").loc[GEMM]
    assert g["source"] == "measured" and g["flops"] == 4_834_983_936
    assert any("GEMM launches" in n for n in r.notes)


def test_measured_roofline_and_hierarchical_bound() -> None:
    r = classify(_trace(steps=1), counters=BASE)
    k = r.kernels.set_index("name")
    g, ln, sm, cast = k.loc[GEMM], k.loc[LN], k.loc[SM], k.loc[CAST]
    assert g["source"] == ln["source"] == sm["source"] == "measured"
    assert cast["source"] == "modelled"  # not profiled: the model stays
    assert g["flops"] == 4_834_983_936 and g["bytes"] == 15_730_000
    assert g["flops_model"] == 2 * 1024 * 768 * 3072  # side by side
    assert g["bytes_model"] == (1024 * 768 + 768 * 3072 + 1024 * 3072) * 2
    assert g["pipe"] == "tensor_bf16"
    assert (g["bound"], g["bound_level"]) == ("compute-bound", "compute")
    assert g["intensity_l2"] == pytest.approx(4_834_983_936 / 20_000_000)
    # layer norm: its output stays in L2 (DRAM bytes ~0), so L2 traffic decides
    assert ln["intensity"] == pytest.approx(5_500_000 / 10_000)
    assert (ln["bound"], ln["bound_level"]) == ("memory-bound", "l2")
    # attained rates use the trace's duration (5 µs), not ncu's replay duration (5.1 µs)
    assert ln["roof_pct"] == pytest.approx(
        100 * (5.5e6 / 5.0e-6) / (5.5e6 / 3.2e6 * 4096 * 1.5e9), rel=1e-6
    )
    assert (sm["bound"], sm["bound_level"]) == ("memory-bound", "dram")
    assert r.device.l2_bandwidth == pytest.approx(4096 * 1.5e9)
    assert r.counters is not None and len(r.counters) == 4
    assert r.unmatched is not None and len(r.unmatched) == 2


def test_counters_without_peak_metrics_decide_by_dram() -> None:
    c = read_ncu_csv(BASE).drop(columns=["l2_peak_bw"])
    r = classify(_trace(steps=1), counters=c)
    assert any("L2 roof unknown" in n for n in r.notes)
    ln = r.kernels.set_index("name").loc[LN]
    assert (ln["bound"], ln["bound_level"]) == ("compute-bound", "compute")


def test_ncu_command_line() -> None:
    cmd = ncu_command(["python", "-m", "tracekit.collectors.collect"], log_file="c.csv")
    assert cmd[:5] == ["ncu", "--profile-from-start", "off", "--clock-control", "none"]
    metrics = cmd[cmd.index("--metrics") + 1].split(",")
    assert metrics == ncu_metrics()
    assert "sm__ops_path_tensor_src_bf16_dst_fp32.sum" in metrics
    assert "sm__sass_thread_inst_executed_op_ffma_pred_on.sum" in metrics
    assert {
        "dram__bytes_read.sum",
        "dram__bytes_write.sum",
        "lts__t_bytes.sum",
        "gpu__time_duration.sum",
    } <= set(metrics)
    i = cmd.index("--csv")
    assert cmd[i : i + 5] == ["--csv", "--page", "raw", "--print-units", "base"]
    assert cmd[cmd.index("--target-processes") + 1] == "all"
    assert cmd[-3:] == ["python", "-m", "tracekit.collectors.collect"]
    assert "--filter-mode" not in cmd
    once = ncu_command(["x"], once_per_signature=True)
    j = once.index("--filter-mode")
    assert once[j : j + 4] == ["--filter-mode", "per-launch-config", "--launch-count", "1"]


def test_counters_table_has_the_documented_columns() -> None:
    from tracekit.classify.schema import TABLES

    c = read_ncu_csv(BASE)
    assert list(c.columns) == [col.name for col in TABLES["counters"]]
    assert isinstance(c, pd.DataFrame)


def test_nested_tensor_metrics_are_not_counted_twice() -> None:
    from tracekit.classify.ncu import _tensor_columns

    p = "sm__ops_path_tensor_"
    names = [
        f"{p}src_bf16_dst_fp32.sum",
        f"{p}src_bf16_dst_fp32_sparsity_off.sum",
        f"{p}op_hgmma_src_bf16_dst_fp32.sum",
        f"{p}op_hmma_src_bf16_dst_fp32.sum",
        f"{p}src_fp16.sum",
        f"{p}src_fp16_dst_fp16.sum",
        f"{p}src_fp16_dst_fp32.sum",
        f"{p}src_fp16_bf16_tf32_dst_fp32.sum",
        f"{p}src_tf32_dst_fp32.sum",
        f"{p}src_fp64.sum",
        "sm__inst_executed_pipe_tensor.sum",
    ]
    assert _tensor_columns(names) == [
        f"{p}src_bf16_dst_fp32.sum",
        f"{p}src_fp16.sum",
        f"{p}src_tf32_dst_fp32.sum",
        f"{p}src_fp64.sum",
    ]
    # per-instruction counters without their aggregate are disjoint: both are summed
    ops = [
        f"{p}op_hgmma_src_bf16_dst_fp32.sum",
        f"{p}op_hmma_src_bf16_dst_fp32.sum",
        f"{p}op_hgmma_src_bf16_dst_fp32_sparsity_off.sum",
    ]
    assert _tensor_columns(ops) == ops[:2]


def test_once_per_launch_config_with_repeated_signatures_is_signature_mode() -> None:
    lines = [ln for ln in BASE.read_text().splitlines() if not ln.startswith('"0"')]
    gemm_row = next(ln for ln in lines if ln.startswith('"1"'))
    dup = gemm_row.replace('"1"', '"4"', 1)  # same kernel, grid and block: another smem size
    text = "\n".join([*lines, dup])
    t = _trace(repeat_gemm=True)
    joined, _, notes = join_counters(t.kernels, read_ncu_csv(text))
    assert "signature" in notes[0]
    assert set(joined["ncu_id"]) == {1, 2, 3}  # the first row of a signature is used


def test_counters_found_in_the_run_folder_and_agreement(tmp_path: Path) -> None:
    import shutil

    t = _trace(steps=1)
    shutil.copy(BASE, tmp_path / "counters.csv")
    t.run_dir = tmp_path  # type: ignore[attr-defined]
    t.manifest = {"artifacts": {"counters": "counters.csv"}}
    r = classify(t)
    assert (r.kernels["source"] == "measured").sum() == 3
    a = r.agreement().set_index("class")
    assert a.loc["gemm", "flops_measured"] == 4_834_983_936
    assert a.loc["gemm", "flops_model"] == 2 * 1024 * 768 * 3072
    assert a.loc["gemm", "flops_ratio"] == pytest.approx(4_834_983_936 / (2 * 1024 * 768 * 3072))
    assert a.loc["layernorm", "kernels"] == 1
