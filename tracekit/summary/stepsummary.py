"""The step summary: DRAM bandwidth and FLOP rate a training step achieves, against the
device's roofs, with the analytic traffic users estimate by hand beside the kernels' bytes.

Definitions (docs/report.md repeats them):

* **bytes** of a step: the sum over its GPU activities of the classify stage's per-kernel
  DRAM bytes. *Modelled* bytes (``bytes_model``: the minimal traffic of each operator from
  its shapes, every input read once and every output written once; copy sizes for memcpy
  and memset) exist wherever shapes were recorded; *measured* bytes (Nsight Compute
  ``dram__bytes_read + dram__bytes_write``) where the run has counters: then a step's
  measured figure is the measured bytes of the kernels that have counters plus the
  modelled bytes of the rest, and ``measured_time_pct`` says how much of the GPU time had
  counters. The headline (``bytes_per_step``, ``bandwidth_used``) is measured when any
  kernel has counters, else modelled.
* **bandwidth used** = bytes / step time; **% of the bandwidth roof** = that over the roof
  (the run's measured copy bandwidth first, then the spec sheet, then ``--bandwidth``).
* **FLOP/s** = FLOPs / step time. **% of the compute roof** = the time the step's FLOPs
  need at the peak of the pipe each kernel runs on (``Σ FLOPs_pipe / peak_pipe``) over the
  step time: with one pipe (fp32 SIMT, or the bf16 tensor cores) it is FLOP/s over that
  pipe's peak. The **compute pipe** named beside it is the one that carries most FLOPs.
* **arithmetic intensity** = FLOPs / bytes of the step; the **ridge point** = compute pipe
  peak / bandwidth roof: below it the step as a whole is on the memory side of the roof.
* The **step time** of a step is the profiled one (``max(cpu_dur, gpu_dur)``, see
  ``steps.py``); the *overall* figures divide the mean bytes and FLOPs per step by the step
  time measured without the profiler where the run's manifest has it (``basis`` says
  which), because the profiler lengthens the step and rates over it are too low.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import pandas as pd

from tracekit.classify.models.traffic import DecodeTraffic, Traffic
from tracekit.schema import COMPUTE_KINDS
from tracekit.summary.roofs import Roofs

# the classified kernels' columns the step summary reads
COLUMNS = ("step", "dur", "flops", "bytes", "bytes_model", "source", "pipe")

PER_STEP_COLUMNS = [
    "step",
    "step_time_ms",
    "bytes_modelled",
    "bytes_measured",
    "bytes",
    "bandwidth_used",
    "bandwidth_utilisation_pct",
    "flops",
    "flops_per_s",
    "compute_utilisation_pct",
    "arithmetic_intensity",
]


def _sum(v: np.ndarray) -> float:
    """Sum of the finite values; NaN when there is none."""
    ok = np.isfinite(v)
    return float(v[ok].sum()) if ok.any() else float("nan")


def _div(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not np.isfinite(a) or not np.isfinite(b) or b <= 0:
        return None
    return a / b


def _pct(a: float | None, b: float | None) -> float | None:
    r = _div(a, b)
    return None if r is None else 100.0 * r


@dataclass(frozen=True)
class StepSums:
    """One step's (or the mean step's) sums over its GPU activities."""

    bytes_modelled: float  # NaN: no kernel has modelled bytes
    bytes_measured: float  # NaN: no counters
    measured_time_pct: float | None
    flops: float  # NaN: no kernel has a FLOP count
    peak_seconds: float  # Σ FLOPs / peak of their pipe (pipes with a known peak)

    @property
    def bytes(self) -> float:
        return self.bytes_measured if np.isfinite(self.bytes_measured) else self.bytes_modelled


@dataclass(frozen=True)
class _Columns:
    """The per-activity numbers the sums read, as arrays (one row per GPU activity)."""

    dur: np.ndarray
    flops: np.ndarray
    measured_bytes: np.ndarray  # measured DRAM bytes where counters exist, else modelled
    model: np.ndarray  # modelled bytes
    is_meas: np.ndarray
    at_peak: np.ndarray  # FLOPs / peak of the activity's pipe [s]
    is_kernel: np.ndarray  # kind 'kernel' (not memcpy or memset)

    def take(self, i: np.ndarray) -> _Columns:
        return _Columns(*(getattr(self, f.name)[i] for f in fields(self)))


def _columns(k: pd.DataFrame, peaks: dict[str, float]) -> _Columns:
    n = len(k)
    nan = np.full(n, np.nan)
    flops = k["flops"].to_numpy(dtype=np.float64) if "flops" in k else nan
    nbytes = k["bytes"].to_numpy(dtype=np.float64) if "bytes" in k else nan
    is_meas = (k["source"] == "measured").to_numpy(dtype=bool) if "source" in k else nan > 0
    if "bytes_model" in k:
        model = k["bytes_model"].to_numpy(dtype=np.float64)
    else:  # a classification without the column: its bytes are modelled
        model = np.where(is_meas, np.nan, nbytes)
    codes, pipes = _pipes(k)
    per_pipe = np.array([peaks.get(p, np.nan) for p in pipes] + [np.nan], dtype=np.float64)
    peak = per_pipe[codes]  # code -1 (no pipe): the appended NaN
    with np.errstate(invalid="ignore", divide="ignore"):
        at_peak = flops / peak
    return _Columns(
        dur=k["dur"].to_numpy(dtype=np.float64),
        flops=flops,
        measured_bytes=np.where(is_meas, nbytes, model),
        model=model,
        is_meas=is_meas,
        at_peak=at_peak,
        is_kernel=k["kind"].isin(COMPUTE_KINDS).to_numpy(dtype=bool) if "kind" in k else nan < 0,
    )


def _known(v: np.ndarray, c: _Columns) -> float:
    """:func:`_sum` of ``v``, NaN unless some kernel has a value: copy sizes alone (a trace
    without shapes) are not the step's traffic, nor are a copy's zero FLOPs its FLOPs."""
    return _sum(v) if bool(np.isfinite(v[c.is_kernel]).any()) else float("nan")


def _sums(c: _Columns, measured: bool) -> StepSums:
    total = float(c.dur.sum())
    return StepSums(
        bytes_modelled=_known(c.model, c),
        bytes_measured=_known(c.measured_bytes, c) if measured else float("nan"),
        measured_time_pct=(
            100.0 * float(c.dur[c.is_meas].sum()) / total if measured and total else None
        ),
        flops=_known(c.flops, c),
        peak_seconds=_known(c.at_peak, c),
    )


def _pipes(k: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Each activity's pipe as a code into the distinct pipes (-1: none)."""
    if "pipe" not in k:
        return np.full(len(k), -1, dtype=np.int64), []
    codes, uniq = pd.factorize(k["pipe"])
    return np.asarray(codes, dtype=np.int64), [str(u) for u in uniq]


def compute_pipe(k: pd.DataFrame) -> str | None:
    """The pipe that carries most FLOPs (None without FLOP counts)."""
    if "flops" not in k or not len(k):
        return None
    codes, pipes = _pipes(k)
    flops = k["flops"].to_numpy(dtype=np.float64)
    ok = (codes >= 0) & np.isfinite(flops)
    per = np.bincount(codes[ok], weights=flops[ok], minlength=len(pipes))
    return pipes[int(np.argmax(per))] if len(per) and per.max() > 0 else None


def rates(s: StepSums, step_ms: float | None, roofs: Roofs, pipe: str | None) -> dict[str, Any]:
    """Bandwidth, FLOP/s, utilisations and intensity of step sums over a step time."""
    secs = step_ms / 1e3 if step_ms and step_ms > 0 else None
    nbytes = s.bytes if np.isfinite(s.bytes) else None
    flops = s.flops if np.isfinite(s.flops) else None
    bw = _div(nbytes, secs)
    return {
        "bandwidth_used": bw,
        "bandwidth_utilisation_pct": _pct(bw, roofs.bandwidth),
        "flops_per_s": _div(flops, secs),
        "compute_utilisation_pct": _pct(
            s.peak_seconds if np.isfinite(s.peak_seconds) else None, secs
        ),
        "arithmetic_intensity": _div(flops, nbytes),
    }


@dataclass(frozen=True)
class StepSummary:
    """The step summary (``summary.json`` ``step_summary``, less the verdict)."""

    step_time_ms: float | None
    basis: str  # 'unprofiled' (manifest) or 'profiled' (trace)
    mean: StepSums
    overall: dict[str, Any]
    pipe: str | None
    per_step: pd.DataFrame
    traffic: Traffic | DecodeTraffic | None  # training step / decode step
    ridge: float | None  # compute pipe peak / bandwidth roof
    notes: list[str] = field(default_factory=list)

    @property
    def measured(self) -> bool:
        return bool(np.isfinite(self.mean.bytes_measured))


def step_summary(
    kernels: pd.DataFrame,
    step_table: pd.DataFrame,
    roofs: Roofs,
    *,
    measured_step_ms: float | None,
    traffic: Traffic | DecodeTraffic | None,
) -> StepSummary:
    """The step summary of the classified GPU activities of the analysed steps
    (``kernels``: :data:`COLUMNS`; ``step_table``: :func:`steps.step_table`)."""
    measured = "source" in kernels and bool((kernels["source"] == "measured").any())
    pipe = compute_pipe(kernels)
    rows = []
    sums = []
    times = dict(zip(step_table["step"].tolist(), step_table["step_time_ms"].tolist(), strict=True))
    cols = _columns(kernels, roofs.peaks)
    step_of = kernels["step"].to_numpy()
    order = np.argsort(step_of, kind="stable")
    bounds = np.flatnonzero(np.diff(step_of[order])) + 1
    for idx in np.split(order, bounds) if len(order) else []:
        step = step_of[idx[0]]
        s = _sums(cols.take(idx), measured)
        sums.append(s)
        ms = times.get(int(step))
        rows.append(
            {
                "step": int(step),
                "step_time_ms": ms,
                "bytes_modelled": s.bytes_modelled,
                "bytes_measured": s.bytes_measured,
                "bytes": s.bytes,
                "flops": s.flops,
                **rates(s, ms, roofs, pipe),
            }
        )
    per_step = pd.DataFrame(rows, columns=PER_STEP_COLUMNS).astype(
        {c: "float64" for c in PER_STEP_COLUMNS if c != "step"}
    )
    mean = _mean(sums, _sums(cols, measured).measured_time_pct)
    profiled = float(step_table["step_time_ms"].mean()) if len(step_table) else None
    step_ms = measured_step_ms if measured_step_ms else profiled
    basis = "unprofiled" if measured_step_ms else "profiled"
    notes = []
    if basis == "profiled":
        notes.append(
            "step summary over the profiled step (no unprofiled step time: not a run "
            "folder): the profiler lengthens the step, so bandwidth and FLOP/s are low"
        )
    peak = roofs.peaks.get(pipe) if pipe else None
    ridge = peak / roofs.bandwidth if peak and roofs.bandwidth else None
    return StepSummary(
        step_time_ms=step_ms,
        basis=basis,
        mean=mean,
        overall=rates(mean, step_ms, roofs, pipe),
        pipe=pipe,
        per_step=per_step,
        traffic=traffic,
        ridge=ridge,
        notes=notes,
    )


def _mean(sums: list[StepSums], measured_time_pct: float | None) -> StepSums:
    """The mean step (``measured_time_pct``: over all the steps' GPU time)."""
    if not sums:
        nan = float("nan")
        return StepSums(nan, nan, None, nan, nan)

    def m(name: str) -> float:
        v = np.array([getattr(s, name) for s in sums], dtype=np.float64)
        return float(v.mean()) if np.isfinite(v).all() else _sum(v) / len(v)

    return StepSums(
        bytes_modelled=m("bytes_modelled"),
        bytes_measured=m("bytes_measured"),
        measured_time_pct=measured_time_pct,
        flops=m("flops"),
        peak_seconds=m("peak_seconds"),
    )


def memory_bound_roof_pct(k: pd.DataFrame, bandwidth: float | None) -> float | None:
    """The memory-bound kernels' bytes over their GPU time, as % of the bandwidth roof
    (how close the kernels that the bandwidth limits come to it)."""
    if not bandwidth or "bound" not in k or "bytes" not in k:
        return None
    m = ((k["bound"] == "memory-bound") & k["kind"].isin(COMPUTE_KINDS)).to_numpy()
    nbytes = k["bytes"].to_numpy(dtype=np.float64)[m]
    dur = k["dur"].to_numpy(dtype=np.float64)[m]
    ok = np.isfinite(nbytes)
    secs = float(dur[ok].sum()) / 1e9
    return 100.0 * float(nbytes[ok].sum()) / secs / bandwidth if secs > 0 else None
