"""Device ceilings, measured once per run: copy bandwidth and matmul rate per precision.

These are the roofline's two roofs as this device actually delivers them (not the
datasheet's peaks): ``classify`` compares each kernel's achieved bytes/s and FLOP/s
against them.

* Bandwidth: ``dst.copy_(src)`` of a large random buffer on the device; every copy
  reads ``n`` bytes and writes ``n`` bytes, so it moves ``2·n`` bytes.
* Matmul: ``a @ b`` of random square ``n×n`` matrices, ``2·n³`` FLOPs each, per
  precision: ``fp32`` (TF32 off: ``float32_matmul_precision='highest'``), ``tf32``
  (``'high'``), ``bf16`` and ``fp16``.

Each measurement warms up first, then times every repeat on its own and keeps one:

* GPU: CUDA events, the **median** of the repeats (the clock is the GPU's own; a repeat is
  not slowed by the host's scheduler);
* CPU: ``perf_counter``, the **best** (fastest) of :attr:`CeilingSizes.repeats` repeats.
  The intra-op threads of a CPU matmul wait for the slowest one: a repeat during which
  another process holds a core takes a scheduler time slice longer (on a shared 2-core
  machine the median of 5 came out 2.1 GFLOP/s in one call and 118 GFLOP/s in the next);
  the fastest repeat is what the hardware delivers, and it is stable between calls. A CPU
  measurement repeats for at least :attr:`CeilingSizes.min_seconds` (0.3 s), so that a
  busy spell of another process does not cover every repeat. The
  sizes fit the cache hierarchy the way a CPU run's operators do: the matmul's three
  256×256 fp32 matrices (768 KiB) fit a core's L2, the copied buffer (8 MiB, twice)
  the last-level cache, so the roofs are the rates the operators can reach.

Inputs are random, never zeros (some GPUs clock and some kernels behave differently on
all-zero data). The same function measures them for ``collect``, ``run``, ``profile()``,
each rank of a multi-GPU run and the sweep (its first run of each precision).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16")
_DTYPE = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
          "fp16": torch.float16}  # fmt: skip


@dataclass(frozen=True)
class CeilingSizes:
    """Problem sizes; the defaults take ~1-2 s in all on an H100."""

    copy_bytes: int = 512 * 2**20
    matmul_n: int = 8192
    warmup: int = 3
    repeats: int = 10
    min_seconds: float = 0.0  # CPU: repeat until this long has passed (module doc)

    @classmethod
    def for_device(cls, device: torch.device) -> CeilingSizes:
        if device.type == "cuda":
            return cls()
        # CPU: sizes that fit the caches (module doc), best of 20 repeats (~0.1 s idle).
        return cls(copy_bytes=8 * 2**20, matmul_n=256, warmup=3, repeats=20, min_seconds=0.3)


@dataclass(frozen=True)
class Ceilings:
    memory_bandwidth_Bps: float
    matmul_flops: dict[str, float | None]
    method: str
    sizes: CeilingSizes
    samples: dict[str, list[float]] = field(default_factory=dict)  # seconds per repeat

    def to_dict(self) -> dict[str, Any]:
        return {
            "memory_bandwidth_Bps": self.memory_bandwidth_Bps,
            "matmul_flops": dict(self.matmul_flops),
            "method": self.method,
            "sizes": asdict(self.sizes),
        }


def _timer(device: torch.device) -> Callable[[Callable[[], object]], float]:
    """Returns ``time_it(fn) -> seconds`` for one call of ``fn`` on ``device``."""
    if device.type == "cuda":

        def time_cuda(fn: Callable[[], object]) -> float:
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) / 1e3

        return time_cuda

    def time_cpu(fn: Callable[[], object]) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    return time_cpu


def kept_seconds(device: torch.device, samples: list[float]) -> float:
    """The repeat a ceiling is computed from: the median on a GPU, the fastest on a CPU
    (module doc)."""
    return statistics.median(samples) if device.type == "cuda" else min(samples)


def _repeat_seconds(
    device: torch.device, fn: Callable[[], object], sizes: CeilingSizes
) -> list[float]:
    time_it = _timer(device)
    for _ in range(sizes.warmup):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    samples = [time_it(fn) for _ in range(sizes.repeats)]
    t_end = time.perf_counter() + sizes.min_seconds - sum(samples)
    while time.perf_counter() < t_end and len(samples) < 100 * sizes.repeats:
        samples.append(time_it(fn))
    return samples


def measure_copy_bandwidth(device: torch.device, sizes: CeilingSizes) -> tuple[float, list[float]]:
    """Device-to-device copy bandwidth in bytes/s (bytes read + bytes written)."""
    n = sizes.copy_bytes // 4
    g = torch.Generator(device=device).manual_seed(0)
    src = torch.rand(n, device=device, generator=g)
    dst = torch.empty_like(src)
    samples = _repeat_seconds(device, lambda: dst.copy_(src), sizes)
    moved = 2 * src.numel() * src.element_size()
    return moved / kept_seconds(device, samples), samples


def measure_matmul(
    device: torch.device, precision: str, sizes: CeilingSizes
) -> tuple[float, list[float]]:
    """Dense matmul rate in FLOP/s for ``precision`` (one of :data:`PRECISIONS`)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}")
    n = sizes.matmul_n
    g = torch.Generator(device=device).manual_seed(1)
    a = torch.randn(n, n, device=device, generator=g).to(_DTYPE[precision])
    b = torch.randn(n, n, device=device, generator=g).to(_DTYPE[precision])
    out = torch.empty(n, n, device=device, dtype=_DTYPE[precision])
    previous = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
        samples = _repeat_seconds(device, lambda: torch.mm(a, b, out=out), sizes)
    finally:
        torch.set_float32_matmul_precision(previous)
    return 2 * n**3 / kept_seconds(device, samples), samples


def measure_ceilings(
    device: torch.device, precisions: Iterable[str], sizes: CeilingSizes | None = None
) -> Ceilings:
    """Measure bandwidth and the matmul rate of each precision in ``precisions``;
    the others are ``None`` in :attr:`Ceilings.matmul_flops`."""
    sizes = sizes or CeilingSizes.for_device(device)
    wanted = list(dict.fromkeys(precisions))
    for p in wanted:
        if p not in PRECISIONS:
            raise ValueError(f"unknown precision {p!r}")
    samples: dict[str, list[float]] = {}
    bw, samples["copy"] = measure_copy_bandwidth(device, sizes)
    flops: dict[str, float | None] = dict.fromkeys(PRECISIONS)
    for p in wanted:
        flops[p], samples[p] = measure_matmul(device, p, sizes)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    clock = "CUDA events" if device.type == "cuda" else "time.perf_counter"
    kept = "median" if device.type == "cuda" else "best"
    method = (
        f"{kept} of at least {sizes.repeats} repeats (and {sizes.min_seconds:g} s) after "
        f"{sizes.warmup} warm-up, timed with {clock}; "
        f"bandwidth: copy_ of {sizes.copy_bytes} random bytes, counted read + write; "
        f"matmul: {sizes.matmul_n}^3 torch.mm on random data, 2*n^3 FLOP, "
        f"fp32 with TF32 off, for precisions {', '.join(wanted) or 'none'}"
    )
    return Ceilings(bw, flops, method, sizes, samples)
