"""The baseline of ``tracekit advise``: a ``tracekit collect`` training run, parsed,
classified and summarised, with its critical path calibrated to the unprofiled step."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import tracekit.summary.critical_path as CP
from tracekit.classify.models.memory import MemoryEstimate, StepOptions, estimate
from tracekit.classify.models.shape import ModelShape
from tracekit.errors import UsageError
from tracekit.manifest import Metrics, manifest_or_empty
from tracekit.summary.roofs import Roofs, roofs_from

# Host speed-up assumed when the unprofiled step cannot calibrate it (a GPU-bound step
# hides its host): the mean of the H200 fixtures that can be calibrated, 2.25, 2.16 and
# 1.95 (bf16 naive, SDPA, SDPA compiled; docs/critical-path.md).
ASSUMED_HOST_SPEEDUP = 2.1
WHAT_IF_STEPS = 8  # at most this many profiled steps are analysed
# The host-issue probe calibrates the host where the host returned from the step at least
# this share of the step before the GPU was done (else it waited on the GPU inside it).
HOST_AHEAD = 0.10


@dataclass
class Baseline:
    """Everything the predictions read."""

    run_dir: Path
    manifest: dict[str, Any]
    config: dict[str, Any]
    trace: Any  # tracekit.parse.Trace
    cls: Any  # tracekit.classify.Classification
    summary: Any  # tracekit.summary.Summary
    cp: CP.CriticalPath  # the lever models' step graph (a CPU run's: its threads)
    host_speedup: float
    host_basis: str  # 'calibrated', 'probed', 'assumed' or 'none' (the trace is not slower)
    step_ms: float  # unprofiled median (manifest)
    tokens: int  # per step (all micro-batches)
    peak_bytes: float  # measured peak (NaN: unknown)
    peak_source: str
    shape: ModelShape
    roofs: Roofs
    kernels: pd.DataFrame  # classified kernels, one row per row of trace.kernels
    notes: list[str] = field(default_factory=list)

    @property
    def device(self) -> str:
        return str(self.config.get("device") or "cuda")

    @property
    def gpu(self) -> bool:
        """The trace has GPU activity (else the step's work is all host time)."""
        return bool(len(self.trace.kernels))

    @property
    def has_path(self) -> bool:
        """The report computes a critical path for the run (none on a CPU run: the step
        graph behind the predictions is then the advise models' own, not a figure)."""
        return getattr(self.summary, "critical_path", None) is not None

    @property
    def verdict(self) -> str | None:
        v = getattr(self.summary, "verdict", None)
        return None if v is None else str(v.verdict)

    def model(self, cfg: dict[str, Any] | None = None) -> MemoryEstimate | None:
        """The analytic memory of ``cfg`` (default: the baseline's config)."""
        c = cfg if cfg is not None else self.config
        try:
            return estimate(
                self.shape,
                batch=int(c["batch"]),
                seq=int(c["seq"]),
                dtype=str(c.get("dtype") or "fp32"),
                attention=str(c.get("attention") or "naive"),
                device=self.device,
                options=StepOptions.from_config(c),
            )
        except (KeyError, ValueError, UsageError):
            return None

    @property
    def n_steps(self) -> int:
        return max(1, len(self.cp.steps))


def read_manifest(run: Path) -> dict[str, Any]:
    """The manifest of a ``tracekit collect`` training run, or a one-line error."""
    run = Path(run)
    if not run.is_dir():
        raise UsageError(
            f"{run}: not a run folder (tracekit advise takes a `tracekit collect` run)"
        )
    path = run / "manifest.json"
    if not path.is_file():
        raise UsageError(
            f"{run}: no manifest.json (tracekit advise takes a `tracekit collect` run)"
        )
    try:
        man = json.loads(path.read_text())
    except ValueError as e:
        raise UsageError(f"{path}: not JSON ({e})") from None
    typed = manifest_or_empty(man) if isinstance(man, dict) else None
    cfg = typed.config.raw if typed is not None and typed.has_config else None
    if typed is not None and typed.workload == "script":
        raise UsageError(
            f"{run}: a `tracekit run` of a script: advise measures levers by re-running the "
            "workload with each lever as a collect flag, which it can only do for `tracekit "
            "collect` runs (docs/advise.md, supported runs)"
        )
    if cfg is None or "preset" not in cfg or "model" not in cfg:
        raise UsageError(
            f"{run}: not a `tracekit collect` run (its manifest has no preset and model "
            "config): advise measures levers by re-running the workload, which it owns only "
            "for collect runs; for `tracekit run` scripts see docs/advise.md"
        )
    if (cfg.get("workload") or "train") != "train":
        raise UsageError(f"{run}: a generate run: advise ranks training levers (collect's "
                         "default workload)")  # fmt: skip
    if man.get("status", "ok") != "ok":
        raise UsageError(f"{run}: the run did not finish (status {man.get('status')!r}): "
                         "nothing to advise on")  # fmt: skip
    return dict(man)


def _num(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f if math.isfinite(f) else math.nan


def _peak(manifest: dict[str, Any], summary: Any) -> tuple[float, str]:
    """The measured peak: the allocator's (CUDA, unprofiled steps), else the trace's
    ``[memory]`` events (CPU)."""
    peak = _num(manifest_or_empty(manifest).metrics.peak_allocated_bytes)
    if peak == peak:
        return peak, "allocator (torch.cuda.max_memory_allocated)"
    mem = getattr(summary, "memory", None)
    if mem is not None and mem.peak_allocated_bytes:
        return float(mem.peak_allocated_bytes), f"the trace's [memory] events ({mem.device})"
    return math.nan, "not measured"


def aligned_kernels(trace: Any, cls: Any) -> pd.DataFrame:
    """The classified kernels in the row order of ``trace.kernels`` (row = kernel_id)."""
    k = cls.kernels.set_index("kernel_id").reindex(np.arange(len(trace.kernels)))
    k["is_backward"] = False
    op = trace.kernels["op_id"].to_numpy(np.int64)
    ok = (op >= 0) & (op < len(trace.ops))
    bwd = np.zeros(len(op), bool)
    bwd[ok] = trace.ops["is_backward"].to_numpy(bool)[op[ok]]
    k["is_backward"] = bwd
    k["top_op_id"] = trace.kernels["top_op_id"].to_numpy(np.int64)
    out: pd.DataFrame = k
    return out


def probed_host(cp: CP.CriticalPath, m: Metrics) -> tuple[float, str] | None:
    """The host's speed-up without the profiler from ``collect``'s host-issue probe, for a
    step whose unprofiled time cannot calibrate it (the GPU binds): the k for which the
    traced step's host path, the GPU's side free (:func:`~tracekit.summary.critical_path.
    gpu_free`), takes the probe's host time per step. None without a probe, or where the
    host returned less than :data:`HOST_AHEAD` before the GPU was done (it waited on the
    GPU inside the step: its own time is not seen apart)."""
    host, synced = m.host_issue_ms, m.synced_step_ms
    if host is None or synced is None or host.median is None or synced.median is None:
        return None
    if not 0 < host.median <= (1.0 - HOST_AHEAD) * synced.median:
        return None
    k = CP.calibrate_host(cp, host.median, given=CP.gpu_free())
    if k is None:
        return None
    return k, "probed" if k > 1.0 else "none"


def probe_note(m: Metrics, k: float) -> str:
    assert m.host_issue_ms is not None and m.synced_step_ms is not None
    return (
        f"the host calibrated by collect's host-issue probe: the host returns from a step "
        f"{m.host_issue_ms.median:.2f} ms after its start without the profiler (the GPU done "
        f"at {m.synced_step_ms.median:.2f} ms; median of {m.host_issue_ms.n} steps), the traced "
        f"step's host path x{k:.2f} longer"
    )


def analyse(run: Path | str) -> Baseline:
    """Parse, classify and summarise the run; its critical path calibrated to the
    unprofiled step time of the manifest."""
    from tracekit.analyse import Options, host_and_report

    run = Path(run)
    man = read_manifest(run)
    typed = manifest_or_empty(man)
    cfg = dict(typed.config.raw)
    # the lever models read the run's own trace (a CPU run's threads); the verdict, its
    # step and whether there is a critical path are the report's (a CPU run's view)
    own, rep = host_and_report(run, Options(manifest=man))
    trace, cls, sm = own.trace, own.classification, rep.summary
    assert sm is not None
    step_ms = _num(typed.metrics.step_median_ms)
    if not step_ms > 0:
        raise UsageError(f"{run}: the manifest has no unprofiled step time (metrics.step_time_ms)")
    cp = sm.critical_path
    notes: list[str] = []
    if cp is None:  # a CPU run: the step's graph is its threads
        steps = [int(s) for s in trace.steps["step"] if s >= 0][:WHAT_IF_STEPS]
        cp = CP.analyse(trace, cls, steps=steps, scenarios=[])
        cp.measured_ms = step_ms
        cp.host_speedup = CP.calibrate_host(cp, step_ms) if cp.steps else None
    if not cp.steps:
        raise UsageError(f"{run}: no profiled step in the trace: nothing to predict from")
    k = cp.host_speedup
    basis = "calibrated" if k is not None and k > 1.0 else "none"
    if k is None and (probed := probed_host(cp, typed.metrics)) is not None:
        k, basis = probed
        notes.append(probe_note(typed.metrics, k))
    if k is None:
        k, basis = ASSUMED_HOST_SPEEDUP, "assumed"
        notes.append(
            f"the unprofiled step ({step_ms:.2f} ms) cannot calibrate the host: the traced step "
            f"is GPU-bound; the host is taken to run {ASSUMED_HOST_SPEEDUP:g}x faster without "
            "the profiler (the calibrated H200 fixtures: 1.95-2.25x)"
        )
    peak, source = _peak(man, sm)
    shape = ModelShape.from_mapping(cfg["model"])
    micro = int(cfg.get("grad_accum") or 1)
    return Baseline(
        run_dir=run,
        manifest=man,
        config=cfg,
        trace=trace,
        cls=cls,
        summary=sm,
        cp=cp,
        host_speedup=float(k),
        host_basis=basis,
        step_ms=step_ms,
        tokens=int(cfg["batch"]) * int(cfg["seq"]) * micro * int(cfg.get("gpus") or 1),
        peak_bytes=peak,
        peak_source=source,
        shape=shape,
        roofs=roofs_from(cls.device),
        kernels=aligned_kernels(trace, cls),
        notes=notes,
    )
