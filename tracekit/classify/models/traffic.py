"""The analytic per-step DRAM traffic users estimate by hand, the figure the classify
stage's step table (``analytic_*`` columns), the report and the sweep show.

A training step (:func:`traffic`, from :mod:`tracekit.classify.models.memory`'s estimate):
every byte of the parameters (with their autocast copies), gradients, AdamW state and saved
activations is moved twice per step, ``2·(4P + 4P + 8P + A)``: weights are read in the
forward and the backward, gradients written by the backward and read by the optimizer, both
AdamW moments read and written by the optimizer, saved activations written by the forward
and read by the backward. A floor: tensors that are not saved (logits, temporaries,
attention scores of the backward) and re-reads are not counted.

A run whose model tracekit does not know (:func:`traffic_from_optimizer`): the same terms
from the optimizer's tensors and the measured dynamic memory (the summary's). A decode step
(:class:`DecodeTraffic`, from :mod:`tracekit.classify.models.decode`'s steps): weights and
KV cache. :func:`manifest_traffic` is the estimate ``classify`` computes from the run's
manifest for its step table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tracekit.classify.models.decode import DecodeStep
from tracekit.classify.models.memory import MemoryEstimate, from_manifest

TRAFFIC_FORMULA = (
    "2 × (parameters + gradients + AdamW state + saved activations): each written once "
    "and read once per step"
)


@dataclass(frozen=True)
class Traffic:
    """Analytic DRAM bytes of one training step, per term (see the module docstring)."""

    parameters: int  # 2 × (fp32 weights + autocast copies)
    gradients: int  # 2 × 4P
    optimizer_state: int  # 2 × 2·4P
    activations: int  # 2 × saved activations
    formula: str = TRAFFIC_FORMULA
    basis: str = "model"  # "model": tracekit's GPT config; "optimizer": a script's optimizer

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer_state + self.activations

    def terms(self) -> dict[str, int]:
        return {
            "parameters": self.parameters,
            "gradients": self.gradients,
            "optimizer_state": self.optimizer_state,
            "activations": self.activations,
        }


def traffic(est: MemoryEstimate) -> Traffic:
    """The per-step traffic estimate from a memory estimate: each term moved twice."""
    return Traffic(
        parameters=2 * (est.parameters + est.autocast_weights),
        gradients=2 * est.gradients_total,
        optimizer_state=2 * est.optimizer_state,
        activations=2 * est.activations_saved,
    )


OPTIMIZER_TRAFFIC_FORMULA = (
    "2 × (parameters + gradients + optimizer state, from the optimizer's tensors, + "
    "activations, the measured dynamic memory): each written once and read once per step"
)


def traffic_from_optimizer(optimizer: Any, dynamic_bytes: int | None) -> Traffic | None:
    """The same estimate for a run whose model tracekit does not know (``tracekit run``,
    ``tracekit.profile``): parameter, gradient and optimizer-state bytes as the run's
    manifest read them from the optimizer (``optimizer.param_bytes``, ``grad_bytes``,
    ``state_bytes``), and the saved activations taken as the measured dynamic memory (peak
    minus the floor of the analysed steps). None when the manifest lacks those sizes."""
    if not isinstance(optimizer, Mapping) or dynamic_bytes is None:
        return None
    try:
        sizes = [int(optimizer[k]) for k in ("param_bytes", "grad_bytes", "state_bytes")]
    except (KeyError, TypeError, ValueError):
        return None
    params, grads, state = sizes
    return Traffic(
        parameters=2 * params,
        gradients=2 * grads,
        optimizer_state=2 * state,
        activations=2 * max(0, int(dynamic_bytes)),
        formula=OPTIMIZER_TRAFFIC_FORMULA,
        basis="optimizer",
    )


def manifest_traffic(manifest: Mapping[str, Any] | None) -> Traffic | None:
    """:func:`traffic` of a ``tracekit collect`` run's model (None: no estimate), the one
    figure the report, the sweep and ``tracekit classify``'s step table show."""
    est, _ = from_manifest(manifest)
    return traffic(est) if est is not None else None


DECODE_TRAFFIC_FORMULA = (
    "weights (every multiplied weight once) + KV cache read 2·L·B·c·C·b + KV cache "
    "write 2·L·B·C·b, c = the cached tokens a decode step attends to"
)


@dataclass(frozen=True)
class DecodeTraffic:
    """Analytic DRAM bytes of a decode step (the mean of the steps given): what the
    report puts beside the kernels' bytes, as :class:`Traffic` does for a
    training step."""

    weights: float
    kv_cache_read: float
    kv_cache_write: float
    formula: str = DECODE_TRAFFIC_FORMULA
    basis: str = "decode"  # the decode model (Traffic: "model" / "optimizer")

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache_read + self.kv_cache_write

    def terms(self) -> dict[str, float]:
        return {
            "weights": self.weights,
            "kv_cache_read": self.kv_cache_read,
            "kv_cache_write": self.kv_cache_write,
        }

    @classmethod
    def mean_of(cls, steps: list[DecodeStep]) -> DecodeTraffic:
        n = max(1, len(steps))
        return cls(
            sum(s.weight_bytes for s in steps) / n,
            sum(s.kv_read_bytes for s in steps) / n,
            sum(s.kv_write_bytes for s in steps) / n,
        )
