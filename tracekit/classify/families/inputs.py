"""What an op cost model reads and returns: the recorded inputs of one operator call
decoded (:class:`Inputs`: tensors, tensor lists, concrete scalars by position), the
:class:`Cost` it gives, and the helpers the families' models share.

With ``record_shapes=True`` every CPU operator carries ``Input Dims``, ``Input type`` and
``Concrete Inputs`` (kept as JSON text in ``ops.input_dims`` / ``input_types`` /
``concrete_inputs``). FLOPs count a multiply and an add as 2 and a transcendental as 1;
bytes are the minimal DRAM traffic, every input read once and every output written once at
the element size of its dtype. Where an assumption is needed (the dtype of tensor lists,
which the profiler does not record) the cost says so in its ``note``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NAN = float("nan")

# Element size and canonical name of every dtype string the profiler writes.
TYPE_BYTES: dict[str, int] = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2,
    "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1, "c10::Float8_e8m0fnu": 1, "long int": 8, "int": 4,
    "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
    "c10::complex<float>": 8, "c10::complex<double>": 16, "c10::complex<c10::Half>": 4,
    "unsigned int": 4, "unsigned short": 2, "unsigned long": 8, "c10::qint8": 1,
    "c10::quint8": 1, "c10::qint32": 4,
}  # fmt: skip
DTYPE_NAME: dict[str, str] = {
    "float": "fp32", "double": "fp64", "c10::Half": "fp16", "c10::BFloat16": "bf16",
    "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8", "long int": "int64", "int": "int32", "short int": "int16",
    "signed char": "int8", "unsigned char": "uint8", "bool": "bool",
}  # fmt: skip
# c10::ScalarType codes, as ``Concrete Inputs`` records a dtype argument.
SCALAR_TYPE: dict[int, tuple[str, int]] = {
    0: ("uint8", 1), 1: ("int8", 1), 2: ("int16", 2), 3: ("int32", 4), 4: ("int64", 8),
    5: ("fp16", 2), 6: ("fp32", 4), 7: ("fp64", 8), 11: ("bool", 1), 15: ("bf16", 2),
    23: ("fp8", 1), 24: ("fp8", 1), 25: ("fp8", 1), 26: ("fp8", 1),
}  # fmt: skip
FLOAT_BYTES = {"fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


@dataclass(frozen=True)
class Cost:
    """FLOPs and minimal bytes of one operator call (NaN: unknown)."""

    flops: float
    bytes: float
    dtype: str | None = None  # compute dtype (fp32, bf16, …) of the main inputs
    note: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "flops", float(self.flops))
        object.__setattr__(self, "bytes", float(self.bytes))


Shape = tuple[int, ...]


@dataclass(frozen=True)
class Tensor:
    shape: Shape
    dtype: str  # canonical (fp32, bf16, int64, …)
    itemsize: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


@dataclass(frozen=True)
class TensorList:
    shapes: tuple[Shape, ...] | None  # None: the profiler did not record them

    @property
    def numel(self) -> int | None:
        return None if self.shapes is None else sum(math.prod(s) for s in self.shapes)


class Inputs:
    """Decoded inputs of one call: tensors, tensor lists and concrete scalars by position."""

    def __init__(self, dims: Sequence[Any], types: Sequence[Any], concrete: Sequence[Any]):
        self.dims = list(dims)
        self.types = [str(t) for t in types]
        self.concrete = [str(c) for c in concrete]

    def __len__(self) -> int:
        return len(self.dims)

    def tensor(self, i: int) -> Tensor | None:
        if i >= len(self.dims) or i >= len(self.types):
            return None
        t, d = self.types[i], self.dims[i]
        if t not in TYPE_BYTES or not isinstance(d, list):
            return None
        if not all(isinstance(x, int) for x in d):
            return None
        return Tensor(tuple(d), DTYPE_NAME.get(t, t), TYPE_BYTES[t])

    def tensor_list(self, i: int) -> TensorList | None:
        if i >= len(self.dims) or i >= len(self.types) or self.types[i] != "TensorList":
            return None
        d = self.dims[i]
        if d == []:  # long lists are recorded without their shapes
            return TensorList(None)
        if not isinstance(d, list) or not all(
            isinstance(s, list) and all(isinstance(x, int) for x in s) for s in d
        ):
            return None
        return TensorList(tuple(tuple(s) for s in d))

    def tensors(self) -> list[Tensor]:
        return [t for i in range(len(self.dims)) if (t := self.tensor(i)) is not None]

    def raw(self, i: int) -> str:
        return self.concrete[i] if i < len(self.concrete) else ""

    def value(self, i: int) -> Any:
        """Concrete input ``i`` decoded (int, float, bool, list) or None."""
        s = self.raw(i).strip()
        if not s:
            return None
        if s in ("True", "False"):
            return s == "True"
        if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
            return s[1:-1]
        try:
            return json.loads(s)
        except ValueError:
            pass
        if s.startswith("[") and ("True" in s or "False" in s):  # Python-style bool list
            try:
                return json.loads(s.replace("True", "true").replace("False", "false"))
            except ValueError:
                pass
        return s

    def ints(self, i: int, n: int) -> list[int] | None:
        """Concrete int list of length ``n`` (a scalar is broadcast), else None."""
        v = self.value(i)
        if isinstance(v, bool) or v is None:
            return None
        if isinstance(v, int):
            return [v] * n
        if isinstance(v, list) and all(isinstance(x, int) for x in v):
            if len(v) == 1:
                return v * n
            return v if len(v) == n else None
        return None

    def flag(self, i: int) -> bool | None:
        v = self.value(i)
        return v if isinstance(v, bool) else None


def broadcast(shapes: Sequence[Shape]) -> Shape:
    nd = max((len(s) for s in shapes), default=0)
    out = [1] * nd
    for s in shapes:
        for k, v in enumerate(s):
            j = nd - len(s) + k
            out[j] = v if out[j] == 1 else out[j]
    return tuple(out)


def op_base(name: str) -> str:
    """``aten::add_`` → ``add``; ``aten::_foreach_mul_`` → ``_foreach_mul``."""
    n = name.split("::", 1)[-1]
    return n[:-1] if n.endswith("_") and not n.endswith("__") else n


def elementwise(
    x: Inputs,
    per_elem: float,
    *,
    out_dtype: tuple[str, int] | None = None,
    writes_out: bool = True,
    extra_out_bytes: float = 0.0,
) -> Cost | None:
    """An element-wise operator: ``per_elem`` FLOPs per output element (the inputs
    broadcast), every input read once and the output written once."""
    ts = x.tensors()
    if not ts:
        return None
    out_shape = broadcast([t.shape for t in ts])
    out_n = math.prod(out_shape)
    floats = [t for t in ts if t.dtype in FLOAT_BYTES]
    # type promotion: a 0-dim tensor (a scalar) does not widen a dimensioned one
    dimmed = [t for t in floats if t.shape] or floats
    main = max(dimmed, key=lambda t: t.itemsize) if dimmed else ts[0]
    size = out_dtype[1] if out_dtype else main.itemsize
    reads = sum(t.nbytes for t in ts)
    writes = out_n * size if writes_out else 0
    return Cost(per_elem * out_n, float(reads + writes + extra_out_bytes), main.dtype)


def per_element_model(table: Mapping[str, float]) -> Callable[[str, Inputs], Cost | None]:
    """The cost model of element-wise operators: ``table[op]`` FLOPs per output element (1
    for an operator not in it), the inputs read once and the output written once."""

    def _pointwise(name: str, x: Inputs) -> Cost | None:
        return elementwise(x, table.get(op_base(name), 1.0))

    return _pointwise


def aten_inplace(names: Sequence[str]) -> list[str]:
    """``aten::name`` and its in-place form ``aten::name_`` of each name."""
    return [*(f"aten::{n}" for n in names), *(f"aten::{n}_" for n in names)]


def conv_out(size: int, k: int, s: int, p: int, d: int) -> int:
    """Output size along one spatial axis of a convolution or pooling window."""
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


# --- tensor lists (optimizer steps, cat/stack) --------------------------------------------


def tensor_lists(x: Inputs) -> list[TensorList]:
    return [tl for i in range(len(x)) if (tl := x.tensor_list(i)) is not None]


LIST_NOTE = "tensor-list dtype not recorded by the profiler: {b} B/element assumed"
LIST_SIZES_UNKNOWN = "tensor-list sizes not recorded by the profiler"


@dataclass(frozen=True)
class ListOpts:
    """Assumptions for tensor lists: element size, and element count where unrecorded."""

    bytes: int = 4
    numel: int | None = None  # per list, used only where the profiler dropped the shapes


def list_numel(tl: TensorList, opts: ListOpts) -> tuple[int | None, str]:
    """Elements of a list (recorded, else assumed) and the note to add."""
    if tl.numel is not None:
        return tl.numel, ""
    if opts.numel is not None:
        return opts.numel, f"{LIST_SIZES_UNKNOWN}: {opts.numel:,} elements per list assumed"
    return None, LIST_SIZES_UNKNOWN


def list_cost(flops: float, nbytes: float, opts: ListOpts, extra: str) -> Cost:
    note = "; ".join(n for n in (LIST_NOTE.format(b=opts.bytes), extra) if n)
    return Cost(flops, nbytes, None, note)
