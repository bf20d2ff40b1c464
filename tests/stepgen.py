"""Traces built to show each verdict: a few ``ProfilerStep``s whose GPU timeline is written
out by hand (times in µs), in PyTorch's layout (tests/tracegen.py's events), so that the
real parse and classify stages run on them.

Every step is :data:`STEP` µs long; the H100 of tracegen's ``deviceProperties`` gives the
roofs (spec sheet: fp32 SIMT 67 TFLOP/s, 3.35 TB/s, ridge 20 FLOP/B).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import tracegen as tg

STEP = 10_000  # µs
MM = ("aten::mm", [[4096, 4096], [4096, 4096]], ["float", "float"])  # 137 GFLOP, 201 MB
BIG = [16384, 16384]  # fp32: 1 GiB
ADD = ("aten::add_", [BIG, BIG, []], ["float", "float", "Scalar"])  # 3.2 GB, 0.27 GFLOP
SMALL_ADD = ("aten::add_", [[64, 64], [64, 64], []], ["float", "float", "Scalar"])
SGEMM = "ampere_sgemm_128x128_nn"
ADD_KERNEL = "void at::native::vectorized_elementwise_kernel<4, add>(...)"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
H2D = "Memcpy HtoD (Pageable -> Device)"


class Builder:
    """Events of one trace: ``step`` opens a ``ProfilerStep#n``; ``launch`` adds an operator
    (CPU span), its launch call and the GPU activity it launches."""

    def __init__(self) -> None:
        self.ev: list[dict[str, Any]] = []
        self.ext = 1000
        self.corr = 1

    def _next(self) -> int:
        self.ext += 1
        return self.ext

    def step(self, n: int) -> float:
        """Open step ``n``; returns its start."""
        t0 = float(n * STEP)
        self.ev.append(tg.annot(f"ProfilerStep#{n}", t0, STEP, self._next()))
        return t0

    def annotation(self, name: str, ts: float, dur: float) -> None:
        self.ev.append(tg.annot(name, ts, dur, self._next()))

    def launch(
        self,
        op: tuple[str, Any, Any],
        cpu: float,
        gpu: float,
        dur: float,
        *,
        kernel: str,
        stream: int = 7,
        cat: str = "kernel",
        cpu_dur: float = 4,
    ) -> None:
        name, dims, types = op
        ext, corr = self._next(), self.corr
        self.corr += 1
        api = "cudaMemcpyAsync" if cat == "gpu_memcpy" else "cudaLaunchKernel"
        self.ev += [
            tg.op(name, cpu, cpu_dur, ext, **{"Input Dims": dims, "Input type": types}),
            tg.launch(cpu + 1, corr, ext, name=api),
            tg.kernel(kernel, gpu, dur, corr, ext, stream=stream, cat=cat),
        ]

    def doc(self) -> dict[str, Any]:
        d = tg.small_trace()
        d["traceEvents"] = self.ev
        return d


def _trace(fill: Callable[[Builder, float], None], steps: int = 2) -> dict[str, Any]:
    b = Builder()
    for n in range(1, steps + 1):
        fill(b, b.step(n))
    return b.doc()


def compute_bound() -> dict[str, Any]:
    """One fp32 GEMM per step, 9.5 ms of the 10 ms step: 95 % GPU work, compute-bound."""

    def fill(b: Builder, t: float) -> None:
        b.launch(MM, t + 10, t + 50, 9500, kernel=SGEMM)

    return _trace(fill)


def memory_bound() -> dict[str, Any]:
    """Eight 1150 µs elementwise adds of 1 GiB fp32 tensors per step back to back (2.8 TB/s
    each, 83 % of the roof): 92 % GPU work, memory-bound."""

    def fill(b: Builder, t: float) -> None:
        for i in range(8):
            b.launch(ADD, t + 10 + 5 * i, t + 50 + 1150 * i, 1150, kernel=ADD_KERNEL)

    return _trace(fill)


def launch_bound() -> dict[str, Any]:
    """100 tiny 3 µs kernels per step, one every 100 µs, each launched by a 90 µs
    operator: the GPU idles 97 % of the step while the host is busy."""

    def fill(b: Builder, t: float) -> None:
        for i in range(100):
            b.launch(SMALL_ADD, t + 100 * i, t + 100 * i + 50, 3, kernel=ADD_KERNEL, cpu_dur=90)

    return _trace(fill)


def communication_bound() -> dict[str, Any]:
    """A 5 ms GEMM, then a 4.5 ms all-reduce on another stream with nothing beside it."""

    def fill(b: Builder, t: float) -> None:
        b.launch(MM, t + 10, t + 50, 5000, kernel=SGEMM)
        comm = ("c10d::allreduce_", [[4096, 4096]], ["float"])
        b.launch(comm, t + 20, t + 5050, 4500, kernel=NCCL, stream=20)

    return _trace(fill)


def input_bound() -> dict[str, Any]:
    """The DataLoader's ``__next__`` takes 4 ms at the step start while the GPU idles, a
    host-to-device copy of the batch follows (100 µs operator, 50 µs copy), then a 5 ms
    GEMM: 40.5 % input wait."""

    def fill(b: Builder, t: float) -> None:
        b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, 4000)
        to = ("aten::to", [[8, 128]], ["long int"])
        b.launch(to, t + 4000, t + 4020, 50, kernel=H2D, cat="gpu_memcpy", cpu_dur=100)
        b.launch(MM, t + 4110, t + 4120, 5000, kernel=SGEMM)

    return _trace(fill)
