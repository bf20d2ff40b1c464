"""The interconnect ceiling of a multi-GPU run: bus bandwidth of collectives by message size.

Measured by all ranks together before the model is built, the way nccl-tests
(``all_reduce_perf`` and friends) measure it:

* for each message size: a barrier, ``warmup`` untimed calls, then ``iters`` calls, each
  timed on its own: CUDA events on GPU (the call is synchronous, ``async_op=False``, so
  ProcessGroupNCCL makes the current stream wait for its NCCL stream and the end event
  follows the collective's kernel), ``time.perf_counter`` on CPU (a gloo call returns
  when it is done);
* an iteration's time is the slowest rank's (a collective ends when its last rank does):
  the per-iteration times are reduced with MAX across ranks after the timed calls;
* the size's time is the median over iterations (p10 and p90 are kept);
* ``algbw = bytes / time``, where ``bytes`` is the call's full buffer as nccl-tests counts
  it (all-reduce: the buffer; all-gather: the output, n x the input; reduce-scatter: the
  input, n x the output);
* ``busbw = algbw x factor`` with nccl-tests' factors (doc/PERFORMANCE.md): all-reduce
  2(n-1)/n, all-gather and reduce-scatter (n-1)/n, broadcast 1. busbw is comparable
  across collectives and rank counts with the hardware's link bandwidth.

Buffers are float32, filled with random values before each size (never zeros), summed.
The timed region includes torch.distributed's per-call launch cost, which dominates
small messages (as in any PyTorch program, unlike nccl-tests' back-to-back kernels).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.distributed as dist

from tracekit.collectors.train import percentile

COLLECTIVES: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter")
# nccl-tests' bus-bandwidth factors, as text (for the manifest) and as functions of n.
BUS_FACTOR_TEXT: dict[str, str] = {
    "all_reduce": "2(n-1)/n",
    "all_gather": "(n-1)/n",
    "reduce_scatter": "(n-1)/n",
    "broadcast": "1",
}
_BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}
ELEMENT_BYTES = 4  # float32


def bus_factor(collective: str, n: int) -> float:
    """busbw / algbw of ``collective`` on ``n`` ranks (nccl-tests' convention)."""
    if n < 1:
        raise ValueError(f"a collective needs at least one rank, got {n}")
    return _BUS_FACTOR[collective](n)


@dataclass(frozen=True)
class SweepSizes:
    """Message sizes ``min_bytes, min_bytes*factor, ... <= max_bytes`` and repetitions."""

    min_bytes: int = 2**10
    max_bytes: int = 2**30
    factor: int = 2
    warmup: int = 5
    iters: int = 20

    @classmethod
    def for_device(cls, device: torch.device) -> SweepSizes:
        if device.type == "cuda":
            return cls()  # nccl-tests' -w 5 -n 20, 1 KiB .. 1 GiB by x2: ~1-2 s on NVLink
        return cls(max_bytes=4 * 2**20, factor=4, warmup=2, iters=5)  # gloo: ~1 s

    def sizes(self) -> list[int]:
        out, b = [], self.min_bytes
        while b <= self.max_bytes:
            out.append(b)
            b *= self.factor
        return out


def elements(collective: str, nbytes: int, n: int) -> int:
    """float32 elements of the full buffer for ``nbytes``: a multiple of ``n`` where the
    buffer is split into one chunk per rank."""
    count = nbytes // ELEMENT_BYTES
    if collective in ("all_gather", "reduce_scatter"):
        count -= count % n
    return count


def size_row(collective: str, n: int, count: int, seconds: list[float]) -> dict[str, Any]:
    """One size's figures from its per-iteration times (already the max over ranks)."""
    nbytes = count * ELEMENT_BYTES
    t = statistics.median(seconds)
    algbw = nbytes / t
    return {
        "bytes": nbytes,
        "elements": count,
        "time_us": t * 1e6,
        "time_us_p10": percentile(seconds, 10) * 1e6,
        "time_us_p90": percentile(seconds, 90) * 1e6,
        "algbw_Bps": algbw,
        "busbw_Bps": algbw * bus_factor(collective, n),
    }


def peak(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The highest busbw of a sweep and the size it was reached at."""
    best = max(rows, key=lambda r: r["busbw_Bps"])
    return {"peak_busbw_Bps": best["busbw_Bps"], "peak_at_bytes": best["bytes"]}


def _call(
    collective: str, a: torch.Tensor, b: torch.Tensor, count: int, n: int
) -> Callable[[], object]:
    if collective == "all_reduce":
        buf = a[:count]
        return lambda: dist.all_reduce(buf)
    full, part = a[:count], b[: count // n]
    # torch 2.13 renames the tensor forms *_single (the old names warn); older torch has only those.
    if collective == "all_gather":
        gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
        return lambda: gather(full, part)
    if collective == "reduce_scatter":
        scatter = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
        return lambda: scatter(part, full)
    raise ValueError(f"unknown collective {collective!r}")


def _time_calls(device: torch.device, fn: Callable[[], object], sizes: SweepSizes) -> list[float]:
    for _ in range(sizes.warmup):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        events = []
        for _ in range(sizes.iters):
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            fn()
            end.record()
            events.append((start, end))
        torch.cuda.synchronize(device)
        return [float(s.elapsed_time(e)) / 1e3 for s, e in events]
    times = []
    for _ in range(sizes.iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _slowest_rank(device: torch.device, seconds: list[float]) -> list[float]:
    t = torch.tensor(seconds, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(x) for x in t.tolist()]


def _max_bytes(device: torch.device, wanted: int) -> int:
    """``wanted``, halved until two buffers of it fit in every rank's free memory."""
    limit = wanted
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
        while limit > 2**10 and 2 * limit > free // 2:
            limit //= 2
    t = torch.tensor([limit], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def barrier_on(device: torch.device | None) -> None:
    """A process-group barrier on ``device``: NCCL's otherwise runs on the *current*
    device, which a script that never calls ``torch.cuda.set_device`` leaves at 0 on every
    rank (two ranks on one GPU: the interconnect sweep hung there under ``tracekit run
    --nproc-per-node 2`` on 2 x H100)."""
    if device is not None and device.type == "cuda" and dist.get_backend() == "nccl":
        dist.barrier(device_ids=[device.index if device.index is not None else 0])
    else:
        dist.barrier()


def measure_interconnect(
    device: torch.device,
    sizes: SweepSizes | None = None,
    collectives: Iterable[str] = COLLECTIVES,
) -> dict[str, Any]:
    """Sweep each collective over the message sizes on the default process group.
    Every rank must call it; every rank returns the same figures. ``device`` is made the
    current device for the sweep: its CUDA events and streams are the current device's,
    and a script's rank may never have made its own GPU current (rank 1's events then
    sat on GPU 0, its sweep failed and rank 0 waited for it in an all-reduce)."""
    if device.type != "cuda":
        return _sweep(device, sizes, collectives)
    with torch.cuda.device(device):
        return _sweep(device, sizes, collectives)


def _sweep(
    device: torch.device, sizes: SweepSizes | None, collectives: Iterable[str]
) -> dict[str, Any]:
    n = dist.get_world_size()
    sizes = sizes or SweepSizes.for_device(device)
    max_bytes = _max_bytes(device, sizes.max_bytes)
    sizes = SweepSizes(sizes.min_bytes, max_bytes, sizes.factor, sizes.warmup, sizes.iters)
    a = torch.empty(max_bytes // ELEMENT_BYTES, dtype=torch.float32, device=device)
    b = torch.empty_like(a)
    out: dict[str, Any] = {}
    try:
        for coll in collectives:
            rows = []
            for nbytes in sizes.sizes():
                count = elements(coll, nbytes, n)
                if count < n:
                    continue
                a[:count].uniform_()
                b[: count // n].uniform_()
                barrier_on(device)
                fn = _call(coll, a, b, count, n)
                seconds = _slowest_rank(device, _time_calls(device, fn, sizes))
                rows.append(size_row(coll, n, count, seconds))
            out[coll] = {"sizes": rows, **peak(rows)}
    finally:
        del a, b
        if device.type == "cuda":
            torch.cuda.empty_cache()
    clock = "CUDA events" if device.type == "cuda" else "time.perf_counter"
    ar = out.get("all_reduce") or {}
    return {
        "backend": dist.get_backend(),
        "world_size": n,
        "dtype": "float32",
        "op": "sum",
        "busbw_Bps": ar.get("peak_busbw_Bps"),
        "peak_at_bytes": ar.get("peak_at_bytes"),
        "bus_factor": {k: BUS_FACTOR_TEXT[k] for k in BUS_FACTOR_TEXT},
        "bus_factor_value": {k: bus_factor(k, n) for k in BUS_FACTOR_TEXT},
        "sizes_config": asdict(sizes),
        "method": (
            f"nccl-tests convention: per size a barrier, {sizes.warmup} warm-up calls, then "
            f"{sizes.iters} calls each timed with {clock}; an iteration's time is the max over "
            "ranks, the size's time the median over iterations; algbw = bytes / time (bytes: "
            "all-reduce's buffer, all-gather's output, reduce-scatter's input); busbw = algbw "
            "x bus_factor; float32, sum"
        ),
        "collectives": out,
    }
