"""The device roofline: peak FLOP/s per precision pipe and memory bandwidth.

Each number is taken, in this order, from

1. the run's measured ceilings (``manifest['ceilings']``: ``memory_bandwidth_Bps`` and
   ``matmul_flops`` per precision, measured by ``tracekit collect``);
2. the spec table :data:`SPECS`, keyed by the trace's ``deviceProperties`` name (every
   figure cites its datasheet; dense figures: where a datasheet gives "with sparsity"
   numbers they are halved);
3. the user's ``--peak-tflops`` / ``--bandwidth`` flags;

else it is unknown, and operators are classed ``unknown``.

Pipes
-----
``tensor_fp8``, ``tensor_bf16``, ``tensor_fp16``, ``tensor_tf32`` (NVIDIA TF32 / AMD
XF32), ``tensor_fp32`` (AMD matrix-core FP32), ``tensor_fp64``, ``simt_fp32``,
``simt_fp64``. The pipe of an operator follows from its class and dtype
(:func:`pipe_for`): a bf16 GEMM runs on ``tensor_bf16``; an fp32 GEMM on
``tensor_tf32`` only if the run had TF32 on (PyTorch's default since 1.12 is off for
matmuls, on for cuDNN convolutions), else ``tensor_fp32`` where the device has
matrix-core FP32 (AMD CDNA), else ``simt_fp32``; everything else on the SIMT pipe of
its compute dtype — PyTorch computes fp16/bf16 element-wise math in fp32 ("opmath"), so
that is ``simt_fp32`` except for fp64.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pandas as pd

from tracekit.classify.families.registry import MATRIX_CLASSES
from tracekit.errors import UsageError
from tracekit.manifest import read_manifest

PIPES: tuple[str, ...] = (
    "tensor_fp8", "tensor_bf16", "tensor_fp16", "tensor_tf32", "tensor_fp32", "tensor_fp64",
    "simt_fp32", "simt_fp64",
)  # fmt: skip

T = 1e12  # TFLOP/s
G = 1e9  # GB/s


@dataclass(frozen=True)
class DeviceSpec:
    key: str
    label: str
    peaks_tflops: Mapping[str, float]
    bandwidth_gbs: float
    source: str
    l2_mb: float | None = None
    note: str = ""


_A100_PEAKS = {
    "simt_fp64": 9.7,
    "tensor_fp64": 19.5,
    "simt_fp32": 19.5,
    "tensor_tf32": 156.0,
    "tensor_bf16": 312.0,
    "tensor_fp16": 312.0,
}
_A100_SRC = (
    "NVIDIA A100 Tensor Core GPU datasheet (2021): FP64 9.7, FP64 Tensor Core 19.5, "
    "FP32 19.5, TF32 Tensor Core 156, BF16/FP16 Tensor Core 312 TFLOPS (dense; the "
    "datasheet's 312/624 are with sparsity); memory bandwidth {bw} GB/s ({form})"
)
_H100_SXM = {
    "simt_fp64": 34.0,
    "tensor_fp64": 67.0,
    "simt_fp32": 67.0,
    "tensor_tf32": 494.5,
    "tensor_bf16": 989.5,
    "tensor_fp16": 989.5,
    "tensor_fp8": 1979.0,
}
_H100_SRC = (
    "NVIDIA H100 Tensor Core GPU datasheet: {form} FP64 {fp64}, FP64 Tensor Core "
    "{tfp64}, FP32 {fp32} TFLOPS; TF32 {tf32s}, BF16/FP16 {bf16s}, FP8 {fp8s} TFLOPS "
    "with sparsity, halved here to dense; GPU memory bandwidth {bw} GB/s"
)

SPECS: dict[str, DeviceSpec] = {
    "a100-sxm4-80gb": DeviceSpec(
        "a100-sxm4-80gb",
        "NVIDIA A100 SXM4 80GB",
        _A100_PEAKS,
        2039,
        _A100_SRC.format(bw="2,039", form="A100 80GB SXM"),
        40,
    ),
    "a100-sxm4-40gb": DeviceSpec(
        "a100-sxm4-40gb",
        "NVIDIA A100 SXM4 40GB",
        _A100_PEAKS,
        1555,
        _A100_SRC.format(bw="1,555", form="A100 40GB SXM, as in the A100 40GB datasheet"),
        40,
    ),
    "a100-pcie-80gb": DeviceSpec(
        "a100-pcie-80gb",
        "NVIDIA A100 PCIe 80GB",
        _A100_PEAKS,
        1935,
        _A100_SRC.format(bw="1,935", form="A100 80GB PCIe"),
        40,
    ),
    "a100-pcie-40gb": DeviceSpec(
        "a100-pcie-40gb",
        "NVIDIA A100 PCIe 40GB",
        _A100_PEAKS,
        1555,
        _A100_SRC.format(bw="1,555", form="A100 40GB PCIe"),
        40,
    ),
    "h100-sxm": DeviceSpec(
        "h100-sxm",
        "NVIDIA H100 SXM5 80GB",
        _H100_SXM,
        3350,
        _H100_SRC.format(
            form="H100 SXM",
            fp64=34,
            tfp64=67,
            fp32=67,
            tf32s=989,
            bf16s="1,979",
            fp8s="3,958",
            bw="3,350",
        ),
        50,
    ),
    "h100-pcie": DeviceSpec(
        "h100-pcie",
        "NVIDIA H100 PCIe 80GB",
        {
            "simt_fp64": 26.0,
            "tensor_fp64": 51.0,
            "simt_fp32": 51.0,
            "tensor_tf32": 378.0,
            "tensor_bf16": 756.5,
            "tensor_fp16": 756.5,
            "tensor_fp8": 1513.0,
        },
        2000,
        _H100_SRC.format(
            form="H100 PCIe",
            fp64=26,
            tfp64=51,
            fp32=51,
            tf32s=756,
            bf16s="1,513",
            fp8s="3,026",
            bw="2,000",
        ),
        50,
    ),
    "h200-sxm": DeviceSpec(
        "h200-sxm",
        "NVIDIA H200 SXM 141GB",
        _H100_SXM,
        4800,
        "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM): FP64 34, FP64 Tensor Core 67, FP32 67 "
        "TFLOPS; TF32 989, BF16/FP16 1,979, FP8 3,958 TFLOPS with sparsity, halved here to "
        "dense; GPU memory bandwidth 4.8 TB/s",
        50,
    ),
    "l4": DeviceSpec(
        "l4",
        "NVIDIA L4",
        {
            "simt_fp32": 30.3,
            "tensor_tf32": 60.0,
            "tensor_bf16": 121.0,
            "tensor_fp16": 121.0,
            "tensor_fp8": 242.5,
        },
        300,
        "NVIDIA L4 Tensor Core GPU datasheet: FP32 30.3 TFLOPS; TF32 120, BF16/FP16 242, FP8 485 "
        "TFLOPS with sparsity, halved here to dense; 300 GB/s; FP64 not given",
        48,
    ),
    "l40s": DeviceSpec(
        "l40s",
        "NVIDIA L40S",
        {
            "simt_fp32": 91.6,
            "tensor_tf32": 183.0,
            "tensor_bf16": 362.05,
            "tensor_fp16": 362.05,
            "tensor_fp8": 733.0,
        },
        864,
        "NVIDIA L40S GPU datasheet: FP32 91.6; TF32 Tensor Core 183, BF16/FP16 Tensor Core "
        "362.05, FP8 Tensor Core 733 TFLOPS (dense; 366/733/1,466 with sparsity); memory "
        "bandwidth 864 GB/s; FP64 not given",
        96,
    ),
    "rtx4090": DeviceSpec(
        "rtx4090",
        "NVIDIA GeForce RTX 4090",
        {
            "simt_fp32": 82.6,
            "tensor_tf32": 82.6,
            "tensor_bf16": 165.2,
            "tensor_fp16": 165.2,
            "tensor_fp8": 330.3,
        },
        1008,
        "NVIDIA Ada GPU Architecture whitepaper, GeForce RTX 4090 specifications: peak FP32 82.6, "
        "TF32 Tensor 82.6, FP16/BF16 Tensor with FP32 accumulate 165.2, FP8 Tensor with FP32 "
        "accumulate 330.3 TFLOPS (dense; PyTorch accumulates in FP32); memory bandwidth "
        "1,008 GB/s",
        72,
    ),
    "v100-sxm2": DeviceSpec(
        "v100-sxm2",
        "NVIDIA Tesla V100 SXM2",
        {"simt_fp64": 7.8, "simt_fp32": 15.7, "tensor_fp16": 125.0},
        900,
        "NVIDIA Tesla V100 GPU datasheet (V100 SXM2): double precision 7.8, single precision "
        "15.7, tensor performance (FP16 mixed precision) 125 TFLOPS; memory bandwidth 900 GB/s; "
        "no BF16/TF32 units",
        6,
    ),
    "v100-pcie": DeviceSpec(
        "v100-pcie",
        "NVIDIA Tesla V100 PCIe",
        {"simt_fp64": 7.0, "simt_fp32": 14.0, "tensor_fp16": 112.0},
        900,
        "NVIDIA Tesla V100 GPU datasheet (V100 PCIe): double precision 7, single precision 14, "
        "tensor performance 112 TFLOPS; memory bandwidth 900 GB/s",
        6,
    ),
    "v100s-pcie": DeviceSpec(
        "v100s-pcie",
        "NVIDIA Tesla V100S PCIe",
        {"simt_fp64": 8.2, "simt_fp32": 16.4, "tensor_fp16": 130.0},
        1134,
        "NVIDIA Tesla V100S datasheet (V100S PCIe): double precision 8.2, single precision 16.4, "
        "tensor performance 130 TFLOPS; memory bandwidth 1,134 GB/s",
        6,
    ),
    "mi250x-gcd": DeviceSpec(
        "mi250x-gcd",
        "AMD Instinct MI250X (one GCD)",
        {
            "simt_fp64": 23.95,
            "tensor_fp64": 47.85,
            "simt_fp32": 23.95,
            "tensor_fp32": 47.85,
            "tensor_bf16": 191.5,
            "tensor_fp16": 191.5,
        },
        1638.4,
        "AMD Instinct MI250X accelerator datasheet: peak FP64 vector 47.9, FP64/FP32 matrix "
        "95.7, FP32 vector 47.9, FP16/BF16 383 TFLOPS, HBM2e bandwidth 3.2768 TB/s per OAM "
        "module of two GCDs; ROCm enumerates each GCD as a device, so the figures are halved",
        8,
        "per graphics compute die",
    ),
    "mi250-gcd": DeviceSpec(
        "mi250-gcd",
        "AMD Instinct MI250 (one GCD)",
        {
            "simt_fp64": 22.65,
            "tensor_fp64": 45.25,
            "simt_fp32": 22.65,
            "tensor_fp32": 45.25,
            "tensor_bf16": 181.05,
            "tensor_fp16": 181.05,
        },
        1638.4,
        "AMD Instinct MI250 accelerator datasheet: peak FP64 vector 45.3, FP64/FP32 matrix 90.5, "
        "FP32 vector 45.3, FP16/BF16 362.1 TFLOPS, HBM2e bandwidth 3.2768 TB/s per module of "
        "two GCDs; ROCm enumerates each GCD as a device, so the figures are halved",
        8,
        "per graphics compute die; an MI210 (one die, 104 CUs) has the same figures within 0.1%",
    ),
    "mi210": DeviceSpec(
        "mi210",
        "AMD Instinct MI210",
        {
            "simt_fp64": 22.6,
            "tensor_fp64": 45.3,
            "simt_fp32": 22.6,
            "tensor_fp32": 45.3,
            "tensor_bf16": 181.0,
            "tensor_fp16": 181.0,
        },
        1638.4,
        "AMD Instinct MI210 accelerator datasheet: peak FP64 vector 22.6, FP64/FP32 matrix 45.3, "
        "FP32 vector 22.6, FP16/BF16 181.0 TFLOPS; HBM2e bandwidth 1.6384 TB/s",
        8,
    ),
    "mi300x": DeviceSpec(
        "mi300x",
        "AMD Instinct MI300X",
        {
            "simt_fp64": 81.7,
            "tensor_fp64": 163.4,
            "simt_fp32": 163.4,
            "tensor_fp32": 163.4,
            "tensor_tf32": 653.7,
            "tensor_bf16": 1307.4,
            "tensor_fp16": 1307.4,
            "tensor_fp8": 2614.9,
        },
        5300,
        "AMD Instinct MI300X accelerator datasheet: peak FP64 vector 81.7, FP64 matrix 163.4, "
        "FP32 vector/matrix 163.4, TF32 653.7, FP16/BF16 1,307.4, FP8 2,614.9 TFLOPS (dense; "
        "sparsity doubles the last three); HBM3 bandwidth 5.3 TB/s",
        256,
        "L2: 4 MB per XCD plus 256 MB AMD Infinity Cache",
    ),
}


def _first(props: Sequence[Mapping[str, Any]] | None, device: int | None) -> Mapping[str, Any]:
    if not props:
        return {}
    if device is not None:
        for p in props:
            if p.get("id") == device:
                return p
    return props[0]


def match_spec(props: Mapping[str, Any]) -> tuple[DeviceSpec | None, str]:
    """The spec of a ``deviceProperties`` entry, and how it was recognised."""
    name = str(props.get("name") or "")
    mem = float(props.get("totalGlobalMem") or 0)
    sms = props.get("numSms")
    major, minor = props.get("computeMajor"), props.get("computeMinor")
    how = f"deviceProperties name {name!r}"
    if "A100" in name:
        big = "80GB" in name or (mem > 60e9 and "40GB" not in name)
        form = "pcie" if re.search(r"pcie", name, re.I) else "sxm4"
        return SPECS[f"a100-{form}-{'80gb' if big else '40gb'}"], how + (
            f", totalGlobalMem {mem / 1e9:.1f} GB" if "GB" not in name else ""
        )
    if "H100" in name:
        if "NVL" in name:
            return None, how + " (H100 NVL: not in the spec table)"
        return SPECS["h100-pcie" if re.search(r"pcie", name, re.I) else "h100-sxm"], how
    if "H200" in name:
        if "NVL" in name:
            return None, how + " (H200 NVL: not in the spec table)"
        return SPECS["h200-sxm"], how
    if re.search(r"\bL40S\b", name):
        return SPECS["l40s"], how
    if re.search(r"\bL4\b", name):
        return SPECS["l4"], how
    if "4090" in name:
        return SPECS["rtx4090"], how
    if "V100S" in name:
        return SPECS["v100s-pcie"], how
    if "V100" in name:
        return SPECS["v100-pcie" if re.search(r"pcie", name, re.I) else "v100-sxm2"], how
    if "MI300X" in name:
        return SPECS["mi300x"], how
    if "MI250" in name:  # ROCm may say "AMD Instinct MI250X / MI250": decide by CUs
        if sms == 110 or ("MI250X" in name and "MI250X /" not in name and sms != 104):
            return SPECS["mi250x-gcd"], how + f", {sms} CUs"
        return SPECS["mi250-gcd"], how + f", {sms} CUs"
    if "MI210" in name:
        return SPECS["mi210"], how
    if props.get("warpSize") == 64 and major == 9:  # generic AMD name: recognise by arch + CUs
        arch = (major, minor, sms)
        if arch == (9, 0, 104):
            return SPECS["mi250-gcd"], how + ", gfx90a with 104 CUs (MI250 GCD or MI210)"
        if arch == (9, 0, 110):
            return SPECS["mi250x-gcd"], how + ", gfx90a with 110 CUs (MI250X GCD)"
        if arch == (9, 4, 304):
            return SPECS["mi300x"], how + ", gfx942 with 304 CUs (MI300X)"
    return None, how


_MEASURED_PIPE = {"tf32": "tensor_tf32", "bf16": "tensor_bf16", "fp16": "tensor_fp16"}


@dataclass(frozen=True)
class Roofline:
    """The roofs used for a trace, with where each number came from."""

    device_name: str | None
    spec_key: str | None
    spec_match: str
    peaks: Mapping[str, float] = field(default_factory=dict)  # FLOP/s per pipe
    peak_sources: Mapping[str, str] = field(default_factory=dict)
    bandwidth: float | None = None  # B/s
    bandwidth_source: str = ""
    l2_bandwidth: float | None = None  # B/s, from counters where measured
    l2_bandwidth_source: str = ""
    l2_bytes: float | None = None
    tf32: bool = False
    tf32_source: str = "PyTorch default (torch.backends.cuda.matmul.allow_tf32 = False)"
    conv_tf32: bool = True
    notes: tuple[str, ...] = ()

    @property
    def known(self) -> bool:
        return self.bandwidth is not None and bool(self.peaks)

    def peak(self, pipe: str | None) -> float | None:
        return self.peaks.get(pipe) if pipe else None

    def ridge(self, pipe: str | None) -> float | None:
        """Ridge point (FLOP/byte) of ``pipe``: its peak over the memory bandwidth."""
        p = self.peak(pipe)
        if p is None or not self.bandwidth:
            return None
        return p / self.bandwidth

    def with_l2(self, bandwidth: float | None, source: str) -> Roofline:
        return Roofline(
            **{**self.__dict__, "l2_bandwidth": bandwidth, "l2_bandwidth_source": source}
        )

    def frame(self) -> pd.DataFrame:
        """One row per pipe: peak FLOP/s, its source, bandwidth and ridge point."""
        rows = []
        for pipe in PIPES:
            p = self.peaks.get(pipe)
            rows.append(
                {
                    "device": self.device_name,
                    "spec": self.spec_key,
                    "pipe": pipe,
                    "peak_flops": p if p is not None else math.nan,
                    "peak_source": self.peak_sources.get(pipe, "unknown"),
                    "bandwidth": self.bandwidth if self.bandwidth is not None else math.nan,
                    "bandwidth_source": self.bandwidth_source or "unknown",
                    "ridge": r if (r := self.ridge(pipe)) is not None else math.nan,
                    "l2_bandwidth": self.l2_bandwidth
                    if self.l2_bandwidth is not None
                    else math.nan,
                }
            )
        return cast(pd.DataFrame, pd.DataFrame(rows))

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device_name,
            "spec": self.spec_key,
            "spec_match": self.spec_match,
            "known": self.known,
            "peaks_flops": dict(self.peaks),
            "peak_sources": dict(self.peak_sources),
            "ridge_flop_per_byte": {p: self.ridge(p) for p in self.peaks},
            "bandwidth_Bps": self.bandwidth,
            "bandwidth_source": self.bandwidth_source,
            "l2_bandwidth_Bps": self.l2_bandwidth,
            "l2_bandwidth_source": self.l2_bandwidth_source,
            "l2_bytes": self.l2_bytes,
            "tf32": self.tf32,
            "tf32_source": self.tf32_source,
            "conv_tf32": self.conv_tf32,
            "notes": list(self.notes),
        }


def _tf32_from_manifest(manifest: Mapping[str, Any] | None) -> tuple[bool | None, str]:
    m = read_manifest(manifest) if manifest else None
    return m.tf32_flag() if m is not None else (None, "")


def resolve_roofline(
    device_properties: Sequence[Mapping[str, Any]] | None,
    *,
    device: int | None = None,
    manifest: Mapping[str, Any] | None = None,
    peak_tflops: float | None = None,
    bandwidth_gbs: float | None = None,
    tf32: bool | None = None,
) -> Roofline:
    """Build the roofline: measured ceilings, then the spec table, then the user's flags."""
    for v, flag in ((peak_tflops, "--peak-tflops"), (bandwidth_gbs, "--bandwidth")):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise UsageError(f"{flag} must be a positive number, got {v}")
    props = _first(device_properties, device)
    name = str(props["name"]) if props.get("name") else None
    spec, how = match_spec(props) if props else (None, "no deviceProperties in the trace")
    roofs = _Roofs()
    roofs.measured(manifest, spec)
    roofs.from_spec(spec)
    notes = roofs.from_flags(spec, peak_tflops, bandwidth_gbs)
    t_on, t_src = (tf32, "classify(tf32=...) argument") if tf32 is not None else (None, "")
    if t_on is None:
        t_on, t_src = _tf32_from_manifest(manifest)
    roof = Roofline(
        device_name=name,
        spec_key=spec.key if spec else None,
        spec_match=how,
        peaks=roofs.peaks,
        peak_sources=roofs.sources,
        bandwidth=roofs.bw,
        bandwidth_source=roofs.bw_src,
        l2_bytes=spec.l2_mb * 1e6 if spec and spec.l2_mb else None,
        tf32=bool(t_on),
        tf32_source=t_src or "PyTorch default (torch.backends.cuda.matmul.allow_tf32 = False)",
        notes=tuple(notes),
    )
    if not roof.known:
        what = name or "no device name"
        unknown = (
            f"unknown device ({what}): no measured ceilings, not in the spec table "
            "and no --peak-tflops/--bandwidth given; every operator is classed 'unknown'"
        )
        roof = Roofline(**{**roof.__dict__, "notes": (*roof.notes, unknown)})
    return roof


@dataclass
class _Roofs:
    """Peaks per pipe and the bandwidth, each with its source, filled in order of
    precedence (a figure already set is kept)."""

    peaks: dict[str, float] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    bw: float | None = None
    bw_src: str = ""

    def measured(self, manifest: Mapping[str, Any] | None, spec: DeviceSpec | None) -> None:
        """The run's measured ceilings (``manifest['ceilings']``)."""
        m = read_manifest(manifest)
        ceilings = m.ceilings if m is not None else None
        if ceilings is None:
            return
        mbw = ceilings.memory_bandwidth_Bps
        if mbw is not None and mbw > 0:
            self.bw, self.bw_src = mbw, "measured (manifest ceilings: device-to-device copy)"
        fp32_pipe = "tensor_fp32" if spec and "tensor_fp32" in spec.peaks_tflops else "simt_fp32"
        for prec, value in ceilings.matmul_flops.items():
            pipe = _MEASURED_PIPE.get(prec, fp32_pipe if prec == "fp32" else None)
            if pipe and value is not None and value > 0:
                self.peaks[pipe] = value
                self.sources[pipe] = f"measured (manifest ceilings: {prec} matmul)"

    def from_spec(self, spec: DeviceSpec | None) -> None:
        """The spec table's figures where nothing was measured."""
        if spec is None:
            return
        for pipe, tf in spec.peaks_tflops.items():
            if pipe not in self.peaks:
                self.peaks[pipe], self.sources[pipe] = tf * T, f"spec: {spec.source}"
        if self.bw is None:
            self.bw, self.bw_src = spec.bandwidth_gbs * G, f"spec: {spec.source}"

    def from_flags(
        self, spec: DeviceSpec | None, peak_tflops: float | None, bandwidth_gbs: float | None
    ) -> list[str]:
        """The user's flags where neither gives a figure; notes for flags not used."""
        notes = []
        if peak_tflops is not None:
            if spec is None:
                for pipe in PIPES:
                    if pipe not in self.peaks:
                        self.peaks[pipe] = peak_tflops * T
                        self.sources[pipe] = "user flag --peak-tflops"
            else:
                notes.append(
                    f"--peak-tflops not used: the spec table gives the peaks of {spec.label} "
                    "(order: measured ceilings, spec table, flags)"
                )
        if bandwidth_gbs is not None:
            if self.bw is None:
                self.bw, self.bw_src = bandwidth_gbs * G, "user flag --bandwidth"
            else:
                notes.append(
                    f"--bandwidth not used: the bandwidth comes from {self.bw_src.split(':')[0]} "
                    "(order: measured ceilings, spec table, flags)"
                )
        return notes


_NAME_PIPE = (
    (re.compile(r"e4m3|e5m2|fp8|F8F8|_f8f8", re.I), "tensor_fp8"),
    (re.compile(r"tf32|xf32|s1688(?:gemm|fprop|dgrad|wgrad)", re.I), "tensor_tf32"),
    (re.compile(r"bf16|bfloat16", re.I), "tensor_bf16"),
    (re.compile(r"hgemm|h1688|h16816|f16f16|fp16|_f16_", re.I), "tensor_fp16"),
    (re.compile(r"dgemm|d884|dmma", re.I), "tensor_fp64"),
    (re.compile(r"sgemm|scudnn|simt_sgemm|cgemm|_simt_"), "simt_fp32"),
)


def pipe_from_kernel_name(name: str) -> str | None:
    """The pipe a GEMM/attention kernel's name reveals (NVIDIA library names), if any."""
    for rx, pipe in _NAME_PIPE:
        if rx.search(name):
            return pipe
    return None


def pipe_for(
    cls: str,
    dtype: str | None,
    roof: Roofline,
    *,
    conv: bool = False,
    kernel_name: str | None = None,
    named: str | None = None,
) -> str | None:
    """The precision pipe an operator of class ``cls`` and compute dtype ``dtype`` uses."""
    if cls in MATRIX_CLASSES:
        if named is None and kernel_name:
            named = pipe_from_kernel_name(kernel_name)
        if dtype in ("bf16", "fp16", "fp8"):
            return f"tensor_{dtype}"  # the operator's dtype (cuDNN says "f16" for both)
        if dtype == "fp64":
            return "tensor_fp64" if "tensor_fp64" in roof.peaks else "simt_fp64"
        if dtype == "fp32":
            if named in ("tensor_tf32", "simt_fp32"):  # the library's choice, when it says
                return named
            if (roof.conv_tf32 if conv else roof.tf32) and "tensor_tf32" in roof.peaks:
                return "tensor_tf32"
            return "tensor_fp32" if "tensor_fp32" in roof.peaks else "simt_fp32"
        if named == "tensor_fp64" and "tensor_fp64" not in roof.peaks:
            return "simt_fp64"
        return named
    return "simt_fp64" if dtype == "fp64" else "simt_fp32"


def specs_markdown() -> str:
    """The spec table as Markdown (docs/classify.md embeds it)."""
    cols = [
        "tensor_fp8",
        "tensor_bf16",
        "tensor_fp16",
        "tensor_tf32",
        "tensor_fp32",
        "tensor_fp64",
        "simt_fp32",
        "simt_fp64",
    ]
    out = [
        "| key | device | " + " | ".join(cols) + " | GB/s | source |",
        "| --- | --- | " + " | ".join("---" for _ in cols) + " | --- | --- |",
    ]
    for s in SPECS.values():
        vals = " | ".join(f"{s.peaks_tflops[c]:g}" if c in s.peaks_tflops else "" for c in cols)
        out.append(f"| `{s.key}` | {s.label} | {vals} | {s.bandwidth_gbs:g} | {s.source} |")
    return "\n".join(out)
