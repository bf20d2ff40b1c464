"""The profiled workload: a GPT training step, and how its steps are timed.

A step is one optimizer step: ``--grad-accum K`` micro-batches of ``--batch`` sequences,
each a forward and a backward (the loss divided by K, so the gradients are those of the
mean), then one AdamW step and ``zero_grad(set_to_none=True)``. The levers change how it
runs, not what it computes: ``--checkpoint`` (blocks recompute their forward in
backward), ``--optimizer`` (AdamW's loop, foreach or fused implementation) and
``--cuda-graphs`` (the whole step captured once as a CUDA graph and replayed; with
``--compile``, inductor's cudagraph trees of ``mode="reduce-overhead"`` instead).

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
import contextvars
import random
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from tracekit.collectors.config import CollectConfig, torch_dtype
from tracekit.collectors.gpt import GPT, count_params

POOL_BATCHES = 8  # distinct batches cycled through; generated once, on the device
GRAPH_WARMUP = 3  # eager steps on a side stream before a CUDA graph capture (torch's docs)


class Stepper(Protocol):
    def step(self) -> None: ...


def make_batches(
    cfg: CollectConfig, device: torch.device, seed: int | None = None
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``POOL_BATCHES`` (inputs, targets) pairs of shape (batch, seq), seeded by ``seed``
    (default ``cfg.seed``; each rank of a multi-GPU run passes its own).

    Random token ids by default; with ``cfg.data``, random windows of the file's bytes
    (token id = byte value)."""
    tokens = sample_tokens(cfg, cfg.seq + 1, device, seed)  # (POOL_BATCHES, B, T + 1)
    return [(t[:, :-1], t[:, 1:]) for t in tokens]


def sample_tokens(
    cfg: CollectConfig, length: int, device: torch.device, seed: int | None = None
) -> torch.Tensor:
    """(POOL_BATCHES, batch, length) token ids seeded by ``seed`` (default ``cfg.seed``):
    random, or random windows of ``cfg.data``'s bytes."""
    B = cfg.batch
    g = torch.Generator().manual_seed(cfg.seed if seed is None else seed)
    if cfg.data is None:
        vocab = cfg.model_config().vocab_size
        tokens = torch.randint(0, vocab, (POOL_BATCHES, B, length), generator=g)
    else:
        data = torch.frombuffer(bytearray(cfg.data.read_bytes()), dtype=torch.uint8).long()
        starts = torch.randint(0, data.numel() - length + 1, (POOL_BATCHES, B), generator=g)
        tokens = data[starts[..., None] + torch.arange(length)]  # (POOL_BATCHES, B, length)
    return tokens.to(device)


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


def make_optimizer(
    cfg: CollectConfig, params: Iterable[torch.nn.Parameter], *, capturable: bool = False
) -> torch.optim.Optimizer:
    """AdamW (weight decay 0.1) in the implementation ``cfg.optimizer`` names; without
    one, torch picks (foreach on CUDA, the per-parameter loop on CPU)."""
    kw: dict[str, Any] = {
        None: {},
        "adamw": {"foreach": False},
        "adamw-foreach": {"foreach": True},
        "adamw-fused": {"fused": True},
    }[cfg.optimizer]
    if capturable:  # step counters on the device: no host read inside the graph
        kw["capturable"] = True
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.1, **kw)


def cuda_graphs_method(cfg: CollectConfig) -> str | None:
    """How ``--cuda-graphs`` runs for ``cfg`` (None: it is off)."""
    if not cfg.cuda_graphs:
        return None
    if cfg.compile:
        return (
            "torch.compile(mode='reduce-overhead'): inductor's cudagraph trees replay the "
            "forward and the backward; the optimizer step runs eagerly"
        )
    return (
        "torch.cuda.graph: the whole step (every micro-batch's forward and backward and "
        "the capturable AdamW step) captured once after warm-up, replayed from static "
        "input buffers"
    )


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
    model = GPT(mcfg, checkpoint=cfg.checkpoint).to(device)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == count_params(mcfg), (n_params, count_params(mcfg))
    if wrap is not None:
        model = wrap(model)
    whole_graph = cfg.cuda_graphs and not cfg.compile
    optimizer = make_optimizer(cfg, model.parameters(), capturable=whole_graph)
    scaler = torch.amp.GradScaler(device.type) if cfg.dtype == "fp16" else None
    fwd: torch.nn.Module = model
    if cfg.compile:
        mode = "reduce-overhead" if cfg.cuda_graphs else None
        fwd = torch.compile(model, mode=mode)  # type: ignore[assignment]
    batches = make_batches(cfg, device, data_seed)
    probe = MemoryProbe(device)
    dtype = torch_dtype(cfg.dtype)
    use_autocast = cfg.dtype != "fp32"
    K = cfg.grad_accum
    mark_step = cfg.compile and cfg.cuda_graphs  # cudagraph trees: a new iteration begins

    def micro(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Forward and backward of one micro-batch; the (unscaled) loss, detached."""
        if mark_step:
            torch.compiler.cudagraph_mark_step_begin()
        # Inside a graph capture autocast must not cache its weight casts (torch's docs).
        with torch.autocast(
            device.type, dtype=dtype, enabled=use_autocast, cache_enabled=not whole_graph
        ):
            loss: torch.Tensor = fwd(x, y)
        probe()  # activations held for backward
        if K > 1:
            loss = loss / K  # gradients of the mean over the K micro-batches
        if scaler is not None:
            scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
        else:
            loss.backward()  # type: ignore[no-untyped-call]
        probe()  # + gradients
        return loss.detach()

    def update() -> None:
        if scaler is not None:
            scaler.step(optimizer)  # reads the inf flag on the host (GradScaler's own sync)
            scaler.update()
        else:
            optimizer.step()

    def accumulate(micro_batches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        if K == 1:
            losses = [micro(*micro_batches[0])]
        else:  # multi-GPU: gradients are reduced once, after the last micro-batch
            losses = []
            for j, (x, y) in enumerate(micro_batches):
                with grad_sync(model, last=j == K - 1):
                    losses.append(micro(x, y))
        loss = losses[0] if K == 1 else torch.stack(losses).sum()
        update()
        return loss

    def micro_batches(i: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [batches[(i * K + j) % len(batches)] for j in range(K)]

    def step(i: int) -> torch.Tensor:
        probe()
        loss = accumulate(micro_batches(i))
        optimizer.zero_grad(set_to_none=True)
        probe()
        return loss.clone() if mark_step else loss  # cudagraph outputs are overwritten

    if whole_graph:
        graphed = _graphed_step(accumulate, micro_batches, optimizer, probe, device)
        return Workload(model, optimizer, scaler, batches, device, probe, n_params, graphed)
    return Workload(model, optimizer, scaler, batches, device, probe, n_params, step)


# True while suspend_grad_sync() holds gradient sync off for whole steps.
_SYNC_SUSPENDED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "tracekit_grad_sync_suspended", default=False
)


@contextlib.contextmanager
def suspend_grad_sync(model: torch.nn.Module) -> Iterator[None]:
    """Whole steps without gradient sync (the communication-cost measurement,
    ``collectors/commcost.py``): DDP's ``no_sync()``, or FSDP2's
    ``set_requires_gradient_sync(False)`` (turned back on at the end); an accumulating
    step's last micro-batch then does not turn it back on (:func:`grad_sync`)."""
    token = _SYNC_SUSPENDED.set(True)
    try:
        fsdp = getattr(model, "set_requires_gradient_sync", None)
        if fsdp is not None:
            fsdp(False)
            try:
                yield
            finally:
                fsdp(True)
        else:
            with model.no_sync():  # type: ignore[operator]
                yield
    finally:
        _SYNC_SUSPENDED.reset(token)


def grad_sync(model: torch.nn.Module, *, last: bool) -> contextlib.AbstractContextManager[Any]:
    """Around one micro-batch of an accumulating step: DDP's ``no_sync()`` and FSDP2's
    ``set_requires_gradient_sync(False)`` before the last one, so the gradients are
    reduced once per optimizer step; nothing for a model on one GPU. Inside
    :func:`suspend_grad_sync` no micro-batch syncs."""
    fsdp = getattr(model, "set_requires_gradient_sync", None)
    if fsdp is not None:
        fsdp(last and not _SYNC_SUSPENDED.get())
        return contextlib.nullcontext()
    no_sync = getattr(model, "no_sync", None)
    if no_sync is not None and not last:
        ctx: contextlib.AbstractContextManager[Any] = no_sync()
        return ctx
    return contextlib.nullcontext()


def _graphed_step(
    accumulate: Callable[[list[tuple[torch.Tensor, torch.Tensor]]], torch.Tensor],
    micro_batches: Callable[[int], list[tuple[torch.Tensor, torch.Tensor]]],
    optimizer: torch.optim.Optimizer,
    probe: MemoryProbe,
    device: torch.device,
) -> Callable[[int], torch.Tensor]:
    """The step as one CUDA graph (torch's "whole-network capture"), captured at the
    first call: GRAPH_WARMUP eager steps on a side stream, then the capture. Each call
    copies its micro-batches into the static inputs and replays. The gradients stay
    allocated between steps (the graph writes them in place: no zero_grad)."""
    static = [(x.clone(), y.clone()) for x, y in micro_batches(0)]
    captured: list[tuple[torch.cuda.CUDAGraph, torch.Tensor]] = []

    def capture() -> None:
        side = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream(device))  # type: ignore[no-untyped-call]
        with torch.cuda.stream(side):
            for _ in range(GRAPH_WARMUP):
                optimizer.zero_grad(set_to_none=True)
                accumulate(static)
        torch.cuda.current_stream(device).wait_stream(side)  # type: ignore[no-untyped-call]
        graph = torch.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            loss = accumulate(static)
        captured.append((graph, loss))

    def step(i: int) -> torch.Tensor:
        for (sx, sy), (x, y) in zip(static, micro_batches(i), strict=True):
            sx.copy_(x)
            sy.copy_(y)
        if not captured:
            capture()
        graph, loss = captured[0]
        probe()
        graph.replay()
        probe()
        return loss

    return step


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


HOST_PROBE_STEPS = 5  # steps of the host-issue probe (collect, on CUDA)


def time_host_issue(
    step: Callable[[int], torch.Tensor], n: int, *, start: int, device: torch.device
) -> tuple[list[float], list[float]]:
    """The host's own time per step, unprofiled: ``n`` steps, each started on an idle GPU
    (``torch.cuda.synchronize`` before it), timed with ``perf_counter`` from the step's
    start until the host returns from it (its launches issued, the GPU still running
    them) and until the GPU is done. Returns (host ms, synced step ms) per step.

    Where the host returns well before the GPU is done, the first figure is the host's
    time without the profiler — what a GPU-bound step hides from its own step time (the
    advisor's host calibration reads it). A step that waits on the GPU inside (``.item()``,
    a full launch queue) makes the two figures close: the host's time is then at most the
    first."""
    host: list[float] = []
    synced: list[float] = []
    for i in range(start, start + n):
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        step(i)
        t1 = time.perf_counter()
        torch.cuda.synchronize(device)
        t2 = time.perf_counter()
        host.append((t1 - t0) * 1e3)
        synced.append((t2 - t0) * 1e3)
    return host, synced


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
