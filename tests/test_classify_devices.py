"""Device roofline: spec lookup by real deviceProperties, precedence, ridge points, pipes."""

from __future__ import annotations

import math

import pytest

from tracekit.classify.devices import SPECS, match_spec, pipe_for, resolve_roofline
from tracekit.errors import UsageError


def props(name: str, mem: float = 80e9, **kw: object) -> dict[str, object]:
    return {"id": 0, "name": name, "totalGlobalMem": mem, **kw}


@pytest.mark.parametrize(
    ("name", "mem", "extra", "key"),
    [
        # names as real traces write them
        ("NVIDIA A100-PG509-200", 42297524224, {}, "a100-sxm4-40gb"),  # external A100 trace
        ("NVIDIA A100-SXM4-80GB", 85e9, {}, "a100-sxm4-80gb"),
        ("NVIDIA A100-SXM4-40GB", 42e9, {}, "a100-sxm4-40gb"),
        ("NVIDIA A100 80GB PCIe", 85e9, {}, "a100-pcie-80gb"),
        ("NVIDIA A100-PCIE-40GB", 42e9, {}, "a100-pcie-40gb"),
        ("NVIDIA H100 80GB HBM3", 85018279936, {}, "h100-sxm"),  # TraceLens H100 traces
        ("NVIDIA H100 PCIe", 85e9, {}, "h100-pcie"),
        ("NVIDIA H200", 150e9, {}, "h200-sxm"),
        ("NVIDIA L4", 24e9, {}, "l4"),
        ("NVIDIA L40S", 48e9, {}, "l40s"),
        ("NVIDIA GeForce RTX 4090", 24e9, {}, "rtx4090"),
        ("Tesla V100-SXM2-32GB", 34079637504, {}, "v100-sxm2"),  # external V100 trace
        ("Tesla V100-PCIE-16GB", 16e9, {}, "v100-pcie"),
        ("AMD Instinct MI300X", 206141652992, {}, "mi300x"),
        ("AMD Instinct MI300X VF", 205571227648, {}, "mi300x"),
        ("AMD Instinct MI210", 68702699520, {}, "mi210"),
        ("AMD Instinct MI250X", 68e9, {"numSms": 110}, "mi250x-gcd"),
        ("AMD Instinct MI250X / MI250", 68e9, {"numSms": 104}, "mi250-gcd"),
        # HTA's MI250 trace: a generic name, recognised by gfx90a and 104 CUs
        (
            "AMD Radeon Graphics",
            68702699520,
            {"computeMajor": 9, "computeMinor": 0, "numSms": 104, "warpSize": 64},
            "mi250-gcd",
        ),
    ],
)
def test_spec_lookup(name: str, mem: float, extra: dict[str, object], key: str) -> None:
    spec, how = match_spec(props(name, mem, **extra))
    assert spec is not None and spec.key == key, how


@pytest.mark.parametrize("name", ["NVIDIA B200", "NVIDIA H100 NVL", "NVIDIA GeForce RTX 3060"])
def test_devices_not_in_the_table_are_unknown(name: str) -> None:
    assert match_spec(props(name))[0] is None
    roof = resolve_roofline([props(name)])
    assert not roof.known and any("unknown device" in n for n in roof.notes)


def test_every_spec_cites_a_datasheet_and_is_dense() -> None:
    for s in SPECS.values():
        assert any(w in s.source for w in ("datasheet", "whitepaper")), s.key
        assert all(v > 0 for v in s.peaks_tflops.values()) and s.bandwidth_gbs > 0
        if any("sparsity" in part for part in s.source.split(";")):
            assert "halved" in s.source or "dense" in s.source, s.key
    # the headline figures
    assert SPECS["h100-sxm"].peaks_tflops["tensor_bf16"] == 989.5
    assert SPECS["h100-sxm"].bandwidth_gbs == 3350
    assert SPECS["a100-sxm4-80gb"].peaks_tflops["tensor_tf32"] == 156
    assert SPECS["mi300x"].peaks_tflops["tensor_bf16"] == 1307.4


def test_ridge_points_per_pipe() -> None:
    roof = resolve_roofline([props("NVIDIA H100 80GB HBM3")])
    assert roof.known and roof.spec_key == "h100-sxm"
    assert roof.ridge("tensor_bf16") == pytest.approx(989.5e12 / 3.35e12)
    assert roof.ridge("simt_fp32") == pytest.approx(67e12 / 3.35e12)
    assert roof.ridge("tensor_fp32") is None  # NVIDIA has no matrix-core FP32
    frame = roof.frame()
    assert set(frame["pipe"]) >= {"tensor_bf16", "simt_fp32"}
    assert frame.set_index("pipe").loc["tensor_bf16", "peak_source"].startswith("spec: NVIDIA H100")


def test_measured_ceilings_come_first_then_spec() -> None:
    manifest = {
        "ceilings": {
            "memory_bandwidth_Bps": 3.0e12,
            "matmul_flops": {"fp32": 50e12, "tf32": None, "bf16": 700e12, "fp16": 710e12},
        }
    }
    roof = resolve_roofline([props("NVIDIA H100 80GB HBM3")], manifest=manifest)
    assert roof.bandwidth == 3.0e12 and roof.bandwidth_source.startswith("measured")
    assert roof.peaks["tensor_bf16"] == 700e12
    assert roof.peaks["simt_fp32"] == 50e12  # fp32 matmul with TF32 off
    assert roof.peak_sources["tensor_fp8"].startswith("spec")  # not measured: from the table
    assert roof.tf32 is False


def test_flags_only_fill_what_nothing_else_gives() -> None:
    unknown = resolve_roofline([props("NVIDIA B200")], peak_tflops=2000, bandwidth_gbs=8000)
    assert unknown.known
    assert unknown.peaks["tensor_bf16"] == 2000e12 and unknown.bandwidth == 8000e9
    assert unknown.peak_sources["simt_fp32"] == "user flag --peak-tflops"
    known = resolve_roofline([props("NVIDIA H100 80GB HBM3")], peak_tflops=1, bandwidth_gbs=1)
    assert known.peaks["tensor_bf16"] == 989.5e12 and known.bandwidth == 3350e9
    assert sum("not used" in n for n in known.notes) == 2
    nothing = resolve_roofline([])
    assert not nothing.known and "no deviceProperties" in nothing.spec_match


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_bad_flags_are_usage_errors(bad: float) -> None:
    with pytest.raises(UsageError):
        resolve_roofline([], peak_tflops=bad)


def test_tf32_from_the_manifest() -> None:
    on = resolve_roofline([props("NVIDIA H100 80GB HBM3")], manifest={"config": {"tf32": True}})
    assert on.tf32 and "manifest" in on.tf32_source
    measured = resolve_roofline(
        [props("NVIDIA H100 80GB HBM3")], manifest={"ceilings": {"matmul_flops": {"tf32": 400e12}}}
    )
    assert measured.tf32
    prec = resolve_roofline(
        [props("NVIDIA H100 80GB HBM3")],
        manifest={"config": {"float32_matmul_precision": "highest"}},
    )
    assert not prec.tf32


def test_pipe_of_an_operator() -> None:
    h100 = resolve_roofline([props("NVIDIA H100 80GB HBM3")])
    h100_tf32 = resolve_roofline([props("NVIDIA H100 80GB HBM3")], tf32=True)
    mi300 = resolve_roofline([props("AMD Instinct MI300X")])
    assert pipe_for("gemm", "bf16", h100) == "tensor_bf16"
    assert pipe_for("attention", "fp16", h100) == "tensor_fp16"
    assert pipe_for("gemm", "fp32", h100) == "simt_fp32"  # TF32 off: PyTorch's default
    assert pipe_for("gemm", "fp32", h100_tf32) == "tensor_tf32"
    assert pipe_for("gemm", "fp32", h100, conv=True) == "tensor_tf32"  # cuDNN default
    assert pipe_for("gemm", "fp32", mi300) == "tensor_fp32"
    assert pipe_for("gemm", "fp64", h100) == "tensor_fp64"
    assert pipe_for("elementwise", "bf16", h100) == "simt_fp32"  # opmath is fp32
    assert pipe_for("layernorm", "fp64", h100) == "simt_fp64"
    assert pipe_for("optimizer", None, h100) == "simt_fp32"
    assert pipe_for("gemm", None, h100) is None
    # the kernel name reveals the precision where NVIDIA libraries say it
    assert pipe_for("gemm", "fp32", h100, kernel_name="ampere_sgemm_32x32_sliced1x4_tn") == (
        "simt_fp32"
    )
    assert pipe_for(
        "gemm",
        "fp32",
        h100,
        kernel_name=("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw"),
    ) == ("tensor_tf32")
    assert (
        pipe_for(
            "gemm",
            None,
            h100,
            kernel_name=("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"),
        )
        == "tensor_bf16"
    )
