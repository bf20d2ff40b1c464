"""The profiled workload: a GPT training step, and how its steps are timed.

One step function serves every phase (warm-up, timed, profiled, snapshot), so the
profiled step is the measured step. Inside a step nothing waits for the device:
batches are pre-generated on the device, the loss stays a tensor, and the only
probe, ``torch.cuda.memory_allocated``, reads a host-side counter of the caching
allocator. (One exception is inherent: with ``--dtype fp16`` the GradScaler reads
its inf/NaN flag on the host in ``scaler.step``.) Step timing surrounds the call
with CUDA events that are read only after the last step (``perf_counter`` on CPU,
where a step is synchronous).
"""

from __future__ import annotations

import contextlib
import random
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from tracekit.collectors.config import TORCH_DTYPE, CollectConfig
from tracekit.collectors.gpt import GPT, count_params

POOL_BATCHES = 8  # distinct batches cycled through; generated once, on the device


class Stepper(Protocol):
    def step(self) -> None: ...


def make_batches(
    cfg: CollectConfig, device: torch.device, seed: int | None = None
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``POOL_BATCHES`` (inputs, targets) pairs of shape (batch, seq), seeded by ``seed``
    (default ``cfg.seed``; each rank of a multi-GPU run passes its own).

    Random token ids by default; with ``cfg.data``, random windows of the file's bytes
    (token id = byte value)."""
    B, T = cfg.batch, cfg.seq
    vocab = cfg.model_config().vocab_size
    g = torch.Generator().manual_seed(cfg.seed if seed is None else seed)
    if cfg.data is None:
        tokens = torch.randint(0, vocab, (POOL_BATCHES, B, T + 1), generator=g)
    else:
        data = torch.frombuffer(bytearray(cfg.data.read_bytes()), dtype=torch.uint8).long()
        starts = torch.randint(0, data.numel() - T, (POOL_BATCHES, B), generator=g)
        offsets = torch.arange(T + 1)
        tokens = data[starts[..., None] + offsets]  # (POOL_BATCHES, B, T + 1)
    tokens = tokens.to(device)
    return [(t[:, :-1], t[:, 1:]) for t in tokens]


@dataclass
class MemoryProbe:
    """Samples ``torch.cuda.memory_allocated`` (a host-side counter: no device sync)."""

    device: torch.device
    samples: list[int] = field(default_factory=list)
    enabled: bool = True

    def __call__(self) -> None:
        if self.enabled and self.device.type == "cuda":
            self.samples.append(torch.cuda.memory_allocated(self.device))


@dataclass
class Workload:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler | None
    batches: list[tuple[torch.Tensor, torch.Tensor]]
    device: torch.device
    probe: MemoryProbe
    n_params: int
    step: Callable[[int], torch.Tensor]


def build_workload(
    cfg: CollectConfig,
    device: torch.device,
    *,
    wrap: Callable[[torch.nn.Module], torch.nn.Module] | None = None,
    data_seed: int | None = None,
) -> Workload:
    """Model, optimizer and the step function, seeded by ``cfg.seed``. ``wrap`` (multi-GPU:
    DDP or FSDP2's ``fully_shard``) is applied to the model before the optimizer sees its
    parameters; ``data_seed`` seeds the batches (default ``cfg.seed``)."""
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    torch.set_float32_matmul_precision("high" if cfg.tf32 else "highest")
    mcfg = cfg.model_config()
    model = GPT(mcfg).to(device)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == count_params(mcfg), (n_params, count_params(mcfg))
    if wrap is not None:
        model = wrap(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.1)
    scaler = torch.amp.GradScaler(device.type) if cfg.dtype == "fp16" else None
    fwd: torch.nn.Module = model
    if cfg.compile:
        fwd = torch.compile(model)  # type: ignore[assignment]
    batches = make_batches(cfg, device, data_seed)
    probe = MemoryProbe(device)
    dtype = TORCH_DTYPE[cfg.dtype]
    use_autocast = cfg.dtype != "fp32"

    def step(i: int) -> torch.Tensor:
        x, y = batches[i % len(batches)]  # (B, T) each, already on the device
        probe()
        with torch.autocast(device.type, dtype=dtype, enabled=use_autocast):
            loss: torch.Tensor = fwd(x, y)
        probe()  # activations held for backward
        if scaler is not None:
            scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
            probe()
            scaler.step(optimizer)  # reads the inf flag on the host (GradScaler's own sync)
            scaler.update()
        else:
            loss.backward()  # type: ignore[no-untyped-call]
            probe()  # + gradients
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        probe()
        return loss.detach()

    return Workload(model, optimizer, scaler, batches, device, probe, n_params, step)


class StepTimer:
    """Times calls without synchronising between them; :meth:`millis` syncs once."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._events: list[tuple[Any, Any]] = []
        self._cpu: list[float] = []

    @contextlib.contextmanager
    def time(self) -> Iterator[None]:
        if self.device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            yield
            end.record()
            self._events.append((start, end))
        else:
            t0 = time.perf_counter()
            yield
            self._cpu.append((time.perf_counter() - t0) * 1e3)

    def millis(self) -> list[float]:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return [float(s.elapsed_time(e)) for s, e in self._events]
        return list(self._cpu)


def run_steps(
    step: Callable[[int], torch.Tensor],
    n: int,
    *,
    start: int = 0,
    timer: StepTimer | None = None,
    stepper: Stepper | None = None,
    on_step: Callable[[], None] | None = None,
) -> torch.Tensor | None:
    """Run ``n`` steps, each timed by ``timer`` (if any) and followed by
    ``stepper.step()`` (a profiler, if any). Returns the last loss tensor."""
    loss = None
    for i in range(start, start + n):
        if timer is not None:
            with timer.time():
                loss = step(i)
        else:
            loss = step(i)
        if stepper is not None:
            stepper.step()
        if on_step is not None:
            on_step()
    return loss


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), ``q`` in [0, 100]."""
    xs = sorted(values)
    if not xs:
        raise ValueError("percentile of no values")
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize_ms(values: list[float]) -> dict[str, float | int]:
    return {
        "median": statistics.median(values),
        "p10": percentile(values, 10),
        "p90": percentile(values, 90),
        "mean": statistics.fmean(values),
        "n": len(values),
    }
