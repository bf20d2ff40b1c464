"""Communication: NCCL/RCCL collectives, symmetric-memory and custom all-reduce kernels,
and the collective operators (``c10d::``, ``nccl:``, ``record_param_comms``).

A collective moves bytes over the interconnect, not through DRAM, so it has no DRAM cost
model (``@FAMILY.cost``) and is never judged against the device's memory roof. Its cost
model is the bytes it puts on the links: :data:`COLLECTIVES` registers, per kind of
collective (``@collective(...)``), which buffer is its message size and the nccl-tests
bus-bandwidth factor (nccl-tests doc/PERFORMANCE.md): ``busbw = algbw x factor(n)``,
``algbw = message bytes / time``, and each rank sends ``message x factor(n)`` bytes. The
multi-rank analysis (:mod:`tracekit.ranks`) reads the message from the collective's
``Collective name`` / ``In msg nelems`` / ``Out msg nelems`` / ``dtype`` args (or its
``nccl:*``/``gloo:*`` operator's shapes, or the NCCL kernel's name) through
:func:`collective_kind` and :func:`dtype_size`.

:data:`INTERCONNECT` is the interconnect's spec table: the busbw ceiling of one GPU (its
links' bandwidth in one direction), keyed like the device spec table
(:data:`tracekit.classify.devices.SPECS`), each figure with its datasheet.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from tracekit.classify.families.family import P_NORMAL, P_OVERRIDE, ClassSpec, Family, Rule
from tracekit.classify.families.inputs import DTYPE_NAME, TYPE_BYTES

RULES: tuple[Rule, ...] = (
    Rule(
        r"(?i)nccl|rccl|msccl",
        "kernel",
        "communication",
        P_OVERRIDE,
        "NCCL/RCCL collectives (ncclDevKernel_*, ncclKernel_*)",
    ),
    Rule(
        r"(?:multimem|one_shot|two_shot|cross_device)_all_?reduce|all_reduce_\w*_kernel"
        r"|AllReduce|all_gather\w*_kernel|reduce_scatter\w*_kernel",
        "kernel",
        "communication",
        P_OVERRIDE,
        "symmetric-memory / custom all-reduce kernels (torch SymmetricMemory, vLLM)",
    ),
    Rule(
        r"^(?:c10d::|c10d_functional::|_c10d_functional::|nccl:|gloo:)|^record_param_comms$",
        "op",
        "communication",
        P_NORMAL,
        "collective operators and their annotations",
    ),
)

FAMILY = Family(
    "communication",
    classes=(ClassSpec("communication"),),
    rules=RULES,
    fused_vocab=("all_reduce",),
)


# ------------------------------------------------------------------ collective cost models


@dataclass(frozen=True)
class CollectiveModel:
    """One kind of collective. ``message``: which buffer nccl-tests counts as the size
    ('buffer': input = output, 'output': all-gather's gathered output, 'input':
    reduce-scatter's input); ``bus_factor``: the busbw factor as nccl-tests writes it;
    ``factor(n)``: its value on ``n`` ranks."""

    kind: str
    message: str
    bus_factor: str
    factor: Callable[[int], float]

    def message_bytes(self, in_bytes: float | None, out_bytes: float | None) -> float | None:
        """The message size from the input and output sizes (either may be unknown)."""
        if self.message == "output":
            return out_bytes
        if self.message == "input":
            return in_bytes
        known = [b for b in (in_bytes, out_bytes) if b is not None]
        return max(known) if known else None

    def bytes_sent(self, message: float, n: int) -> float:
        """Bytes each rank puts on its links: ``message x factor(n)``."""
        return message * self.factor(n)


COLLECTIVES: dict[str, CollectiveModel] = {}


def collective(kind: str, *, message: str, bus_factor: str) -> Callable[[F], F]:
    """Register the decorated ``factor(n) -> float`` as the model of ``kind``."""

    def deco(fn: F) -> F:
        if kind in COLLECTIVES:
            raise ValueError(f"two cost models for the collective {kind}")
        COLLECTIVES[kind] = CollectiveModel(kind, message, bus_factor, fn)
        return fn

    return deco


F = Callable[[int], float]


@collective("all_reduce", message="buffer", bus_factor="2(n-1)/n")
def _all_reduce(n: int) -> float:
    return 2.0 * (n - 1) / n if n > 0 else 0.0


@collective("all_gather", message="output", bus_factor="(n-1)/n")
def _all_gather(n: int) -> float:
    return (n - 1) / n if n > 0 else 0.0


@collective("reduce_scatter", message="input", bus_factor="(n-1)/n")
def _reduce_scatter(n: int) -> float:
    return (n - 1) / n if n > 0 else 0.0


@collective("all_to_all", message="buffer", bus_factor="(n-1)/n")
def _all_to_all(n: int) -> float:
    return (n - 1) / n if n > 0 else 0.0


@collective("broadcast", message="buffer", bus_factor="1")
@collective("reduce", message="buffer", bus_factor="1")
@collective("send_recv", message="buffer", bus_factor="1")
def _one(n: int) -> float:
    return 1.0


# Collective names as c10d ("allreduce", "_allgather_base", "reduce_scatter_tensor_coalesced"),
# the nccl:/gloo: annotations ("nccl:all_reduce") and NCCL kernels ("ncclDevKernel_AllGather_
# RING_LL") write them, squeezed to lower-case letters, first match wins.
_KINDS: tuple[tuple[str, str], ...] = (
    ("allreduce", "all_reduce"),
    ("allgather", "all_gather"),
    ("reducescatter", "reduce_scatter"),
    ("alltoall", "all_to_all"),
    ("broadcast", "broadcast"),
    ("sendrecv", "send_recv"),
    ("send", "send_recv"),
    ("recv", "send_recv"),
    ("barrier", "barrier"),
    ("gather", "gather"),
    ("scatter", "scatter"),
    ("reduce", "reduce"),
)
_PREFIX = re.compile(
    r"(?i)^(?:c10d::|_?c10d_functional::|nccl:|gloo:|rccl:|ncclDevKernel_|ncclKernel_)"
)


def collective_kind(name: str | None) -> str | None:
    """The kind (a key of :data:`COLLECTIVES`, or barrier/gather/scatter) of a collective
    name, operator or NCCL kernel name; None if it names none."""
    if not name:
        return None
    text = _PREFIX.sub("", str(name))
    text = re.split(r"[(<]", text, maxsplit=1)[0]  # a kernel's parameter list
    squeezed = re.sub(r"[^a-z]", "", text.lower())
    for key, kind in _KINDS:
        if key in squeezed:
            return kind
    return None


# c10 ScalarType names ("dtype" arg of record_param_comms and NCCL kernels)
_C10: dict[str, tuple[str, int]] = {
    "Float": ("fp32", 4), "Double": ("fp64", 8), "Half": ("fp16", 2), "BFloat16": ("bf16", 2),
    "Byte": ("uint8", 1), "Char": ("int8", 1), "Short": ("int16", 2), "Int": ("int32", 4),
    "Long": ("int64", 8), "Bool": ("bool", 1), "Float8_e4m3fn": ("fp8", 1),
    "Float8_e5m2": ("fp8", 1), "Float8_e4m3fnuz": ("fp8", 1), "Float8_e5m2fnuz": ("fp8", 1),
    "ComplexHalf": ("complex32", 4), "ComplexFloat": ("complex64", 8),
    "ComplexDouble": ("complex128", 16), "UInt16": ("uint16", 2), "UInt32": ("uint32", 4),
    "UInt64": ("uint64", 8),
}  # fmt: skip
# NCCL kernel-name dtype tokens (ncclDevKernel_AllReduce_Sum_bf16_RING_LL; older kernels
# spell the C type: ncclKernel_AllReduce_RING_LL_Sum_float)
_NCCL_TYPES: dict[str, tuple[str, int]] = {
    "f32": ("fp32", 4), "float": ("fp32", 4), "f16": ("fp16", 2), "half": ("fp16", 2),
    "bf16": ("bf16", 2), "__nv_bfloat16": ("bf16", 2), "f64": ("fp64", 8),
    "double": ("fp64", 8), "i8": ("int8", 1), "int8_t": ("int8", 1), "u8": ("uint8", 1),
    "uint8_t": ("uint8", 1), "i32": ("int32", 4), "int32_t": ("int32", 4),
    "u32": ("uint32", 4), "uint32_t": ("uint32", 4), "i64": ("int64", 8),
    "int64_t": ("int64", 8), "u64": ("uint64", 8), "uint64_t": ("uint64", 8),
    "f8e4m3": ("fp8", 1), "f8e5m2": ("fp8", 1),
}  # fmt: skip
_SIZES = {name: size for name, size in (*_C10.values(), *_NCCL_TYPES.values())}


def dtype_size(text: str | None) -> tuple[str, int] | None:
    """(canonical dtype, bytes per element) of a c10 name (``BFloat16``), a profiler input
    type (``c10::BFloat16``, ``float``) or a canonical name (``bf16``); None if unknown."""
    if not text:
        return None
    t = str(text)
    if t in _C10:
        return _C10[t]
    if t in TYPE_BYTES:
        return DTYPE_NAME.get(t, t), TYPE_BYTES[t]
    if t in _SIZES:
        return t, _SIZES[t]
    return None


def kernel_dtype(name: str) -> tuple[str, int] | None:
    """The dtype an NCCL kernel name spells (``..._Sum_bf16_RING_LL``), else None. SendRecv
    and Broadcast kernels move bytes (``int8_t``/no type): their dtype says nothing."""
    head = re.split(r"[(<]", str(name), maxsplit=1)[0]
    for tok in head.split("_"):
        if tok in _NCCL_TYPES:
            return _NCCL_TYPES[tok]
    for tok in ("__nv_bfloat16", "int8_t", "uint8_t", "int32_t", "uint32_t", "int64_t"):
        if tok in head:
            return _NCCL_TYPES[tok]
    return None


# ------------------------------------------------------------------- interconnect spec table

G = 1e9


@dataclass(frozen=True)
class LinkSpec:
    """The busbw ceiling of one GPU: its interconnect's bandwidth in one direction."""

    device: str  # key of tracekit.classify.devices.SPECS
    link: str
    busbw_Bps: float
    source: str


def _nvlink(device: str, link: str, total_gbs: float, source: str) -> LinkSpec:
    return LinkSpec(device, link, total_gbs / 2 * G, source)


_PCIE4 = "PCIe 4.0 x16: 64 GB/s bidirectional (PCI-SIG), 32 GB/s per direction"
INTERCONNECT: dict[str, LinkSpec] = {
    s.device: s
    for s in (
        _nvlink("h100-sxm", "NVLink 4 (18 links)", 900, "NVIDIA H100 Tensor Core GPU "
                "datasheet: NVLink 900 GB/s (bidirectional), 450 GB/s per direction"),
        _nvlink("h200-sxm", "NVLink 4 (18 links)", 900, "NVIDIA H200 Tensor Core GPU "
                "datasheet: NVLink 900 GB/s (bidirectional), 450 GB/s per direction"),
        _nvlink("a100-sxm4-80gb", "NVLink 3 (12 links)", 600, "NVIDIA A100 Tensor Core GPU "
                "datasheet: NVLink 600 GB/s (bidirectional), 300 GB/s per direction"),
        _nvlink("a100-sxm4-40gb", "NVLink 3 (12 links)", 600, "NVIDIA A100 Tensor Core GPU "
                "datasheet: NVLink 600 GB/s (bidirectional), 300 GB/s per direction"),
        _nvlink("v100-sxm2", "NVLink 2 (6 links)", 300, "NVIDIA Tesla V100 GPU datasheet "
                "(SXM2): NVLink 300 GB/s (bidirectional), 150 GB/s per direction"),
        _nvlink("mi300x", "Infinity Fabric (7 links)", 896, "AMD Instinct MI300X datasheet: "
                "896 GB/s peak aggregate Infinity Fabric link bandwidth, 448 per direction"),
        LinkSpec("h100-pcie", "PCIe 5.0 x16", 64 * G, "NVIDIA H100 datasheet (PCIe): PCIe "
                 "Gen5 128 GB/s, 64 per direction; with an NVLink bridge 600 GB/s "
                 "(300 per direction): measure with tracekit collect --gpus N"),
        LinkSpec("a100-pcie-80gb", "PCIe 4.0 x16", 32 * G, _PCIE4 + "; with an NVLink bridge "
                 "600 GB/s: measure with tracekit collect --gpus N"),
        LinkSpec("a100-pcie-40gb", "PCIe 4.0 x16", 32 * G, _PCIE4 + "; with an NVLink bridge "
                 "600 GB/s: measure with tracekit collect --gpus N"),
        LinkSpec("l4", "PCIe 4.0 x16", 32 * G, "NVIDIA L4 datasheet: PCIe Gen4 x16 64 GB/s; "
                 + _PCIE4),
        LinkSpec("l40s", "PCIe 4.0 x16", 32 * G, "NVIDIA L40S datasheet: PCIe Gen4 x16 "
                 "64 GB/s; " + _PCIE4),
    )
}  # fmt: skip
