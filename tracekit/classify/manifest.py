"""What a run folder's manifest tells the classifier: the model's parameter count, the
unprofiled step time, artifacts beside the trace, and the analytic traffic estimate of its
model (:mod:`tracekit.classify.models.traffic`) for the step table."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from tracekit.classify.models.traffic import Traffic, manifest_traffic
from tracekit.manifest import RunManifest, read_manifest


class TraceLike(Protocol):
    kernels: pd.DataFrame
    ops: pd.DataFrame
    steps: pd.DataFrame
    meta: dict[str, Any]


def run_artifact(trace: TraceLike, key: str) -> Path | None:
    """The artifact ``key`` of the trace's run folder (its manifest), if that file exists."""
    run_dir = getattr(trace, "run_dir", None)
    m = read_manifest(getattr(trace, "manifest", None) or None)
    rel = m.artifacts.get(key) if m is not None else None
    if run_dir is None or not rel:
        return None
    p = Path(run_dir) / str(rel)
    return p if p.is_file() else None


def profiler_overhead(manifest: Mapping[str, Any] | RunManifest | None) -> str:
    """A clause for the launch-bound note when profiling itself slowed the step down."""
    m = read_manifest(manifest) if isinstance(manifest, (Mapping, RunManifest)) else None
    if m is None:
        return ""
    prof, med = m.metrics.profiled_step_time_ms, m.metrics.step_median_ms
    if prof is None or med is None or med <= 0:
        return ""
    if prof < 1.2 * med:
        return ""
    return (
        f"; the profiler lengthened the step {prof / med:.1f}× (manifest: profiled against "
        "unprofiled step), so part of that idle time is the profiler's own overhead"
    )


def n_params(manifest: Mapping[str, Any] | RunManifest | None) -> int | None:
    m = read_manifest(manifest) if isinstance(manifest, (Mapping, RunManifest)) else None
    return m.n_params if m is not None else None


class FromManifest:
    """``classify(traffic=...)`` left out: classify computes the estimate from the run's
    manifest (:func:`tracekit.classify.models.traffic.manifest_traffic`)."""

    def __repr__(self) -> str:
        return "FROM_MANIFEST"


FROM_MANIFEST = FromManifest()
_NO_MODEL = "the manifest gives no model parameter count and config"
NO_TRAFFIC_NOTE = f"analytic traffic estimate unavailable: {_NO_MODEL}"


def run_traffic(
    manifest: Mapping[str, Any] | None, traffic: Traffic | FromManifest | None
) -> Traffic | None:
    """The analytic traffic of the step table: the run's own (computed from ``manifest``)
    unless the caller gave one (a test's override; ``None``: the run has none)."""
    return manifest_traffic(manifest) if isinstance(traffic, FromManifest) else traffic


def analytic_columns(traffic: Traffic | None) -> dict[str, float] | None:
    """The step table's ``analytic_*`` columns from an estimate (None: none)."""
    if traffic is None:
        return None
    return {
        "analytic_bytes": float(traffic.total),
        "analytic_param_bytes": float(traffic.parameters),
        "analytic_grad_bytes": float(traffic.gradients),
        "analytic_optim_bytes": float(traffic.optimizer_state),
        "analytic_act_bytes": float(traffic.activations),
    }
