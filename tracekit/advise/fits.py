"""The constants of the lever models that are fitted on fixture pairs, and the fits that
give them (pure: two analysed runs of one workload in, the constants out).

The compile model (``tracekit.advise.models.compile_``) rests on one pair of real H200
traces of the same step eager and compiled: ``fixtures/h200-gpt2s-b8-s128-bf16-sdpa`` and
``fixtures/h200-gpt2s-b8-s128-bf16-sdpa-compile`` (gpt2-small b8 s128 bf16 SDPA, torch
2.11). In the forward and backward (``tracekit.advise.regions.compute_region``):

* the kernels of the classes inductor fuses (:data:`COMPILE_FUSES`) went from 566 kernels
  and 2.824781 ms to 411 kernels (387 of them ``triton_*``) and 1.545512 ms: their time
  x :data:`COMPILE_TIME` = 0.5471, their launches x :data:`COMPILE_KERNELS` = 0.7261. One
  factor for all those classes, not one per class: a fused kernel takes the class of its
  name (``triton_per_fused_add_native_layer_norm_…`` is a layernorm), so the classes after
  are not the classes before; the GEMMs (148, 1.545 -> 1.527 ms) and the flash-attention
  kernels (48) stay;
* the host's time per kernel launched in the forward and backward, without the profiler
  (the critical path's host time less the optimizer's, over the run's calibrated host
  speed-up, per kernel), went from 12.52 µs to 13.33 µs: x :data:`COMPILE_HOST_PER_LAUNCH`
  = 1.0645 (inductor's wrapper launches Triton kernels with less dispatch per kernel but
  keeps the autograd engine's work per node; the pair says the two about cancel). The
  compiled step's host is its launches x that cost: the launches saved are what it saves.

:func:`compile_fit` recomputes these from the two runs (``tests/test_advise_models.py``
checks that the constants are the pair's).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import tracekit.advise.regions as R
from tracekit.advise.baseline import Baseline

# the kernel classes inductor replaces by fused Triton kernels (GEMMs, convolutions,
# attention and the optimizer, which is not compiled, stay); the GPT has no rmsnorm,
# batchnorm or groupnorm kernels: inductor lowers them too, at the ratio taken to be the same
COMPILE_FUSES = ("elementwise", "activation", "layernorm", "rmsnorm", "batchnorm",
                 "groupnorm", "layout", "softmax", "reduction", "loss", "memcpy",
                 "memset")  # fmt: skip
COMPILE_PAIR = ("h200-gpt2s-b8-s128-bf16-sdpa", "h200-gpt2s-b8-s128-bf16-sdpa-compile")
COMPILE_TIME = 1.545512 / 2.824781  # fusible kernels' time, compiled / eager
COMPILE_KERNELS = 411 / 566  # fusible kernels' launches, compiled / eager
COMPILE_HOST_PER_LAUNCH = 13.325993 / 12.518707  # host µs per launch, compiled / eager


@dataclass(frozen=True)
class CompileFit:
    """What inductor made of the eager run's forward and backward (module docstring)."""

    fusible_before: int  # kernels of COMPILE_FUSES classes
    fusible_after: int
    fusible_ms_before: float
    fusible_ms_after: float
    triton_after: int  # triton_* kernels in the compiled run's forward and backward
    host_us_per_launch_before: float  # unprofiled host per forward/backward kernel
    host_us_per_launch_after: float

    @property
    def time(self) -> float:
        return self.fusible_ms_after / self.fusible_ms_before

    @property
    def kernels(self) -> float:
        return self.fusible_after / self.fusible_before

    @property
    def host_per_launch(self) -> float:
        return self.host_us_per_launch_after / self.host_us_per_launch_before


def fusible(b: Baseline) -> tuple[np.ndarray, R.Region]:
    """The forward/backward's kernels of the classes inductor fuses (bool per kernel row),
    and the forward/backward region."""
    r = R.compute_region(b.trace)
    out: np.ndarray = r.kernels & b.kernels["class"].isin(COMPILE_FUSES).to_numpy(bool)
    return out, r


def host_us_per_launch(b: Baseline) -> float:
    """The host's time per kernel launched in the forward and backward without the
    profiler: the critical path's host time less the optimizer's, over the calibrated host
    speed-up and the forward/backward's kernel count (µs)."""
    r = R.compute_region(b.trace)
    opt = R.optimizer_region(b.trace).host_ns / 1e6 / b.n_steps
    host_ms = b.cp.summary.host_ms - opt
    return host_ms / b.host_speedup / max(1, int(r.kernels.sum()) / b.n_steps) * 1e3


def compile_fit(eager: Baseline, compiled: Baseline) -> CompileFit:
    """The compile model's constants from one workload run eager and compiled."""
    f0, _ = fusible(eager)
    f1, r1 = fusible(compiled)
    d0, d1 = eager.kernels["dur"].to_numpy(float), compiled.kernels["dur"].to_numpy(float)
    tri = compiled.kernels["name"].astype(str).str.startswith("triton").to_numpy(bool)
    return CompileFit(
        fusible_before=int(f0.sum()) // eager.n_steps,
        fusible_after=int(f1.sum()) // compiled.n_steps,
        fusible_ms_before=float(d0[f0].sum()) / 1e6 / eager.n_steps,
        fusible_ms_after=float(d1[f1].sum()) / 1e6 / compiled.n_steps,
        triton_after=int((tri & r1.kernels).sum()) // compiled.n_steps,
        host_us_per_launch_before=host_us_per_launch(eager),
        host_us_per_launch_after=host_us_per_launch(compiled),
    )
