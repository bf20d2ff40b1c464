"""Measured counters in place of the modelled costs, kernel by kernel: the Nsight Compute
counters (read by :mod:`tracekit.classify.ncu`, joined to the trace's kernels by
:mod:`tracekit.classify.counters`), their FLOPs, DRAM and L2 bytes and pipe applied, and
the L2 roof they measure."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tracekit.classify.attribution import KernelCosts
from tracekit.classify.counters import join_counters
from tracekit.classify.devices import Roofline
from tracekit.classify.manifest import TraceLike, run_artifact
from tracekit.classify.ncu import read_ncu_csv

Counters = pd.DataFrame | str | Path | None


@dataclass
class Measured:
    """Counters joined to the kernels: ``joined`` (one row per matched kernel), the parsed
    ``counters`` and the kernels of either side left ``unmatched``."""

    joined: pd.DataFrame
    counters: pd.DataFrame
    unmatched: pd.DataFrame


def join_measured(
    trace: TraceLike,
    kernels: pd.DataFrame,
    counters: Counters,
    gemm_counters: Counters,
    mode: str,
    notes: list[str],
) -> Measured | None:
    """Read the counters (a file, a parsed frame, else the run folder's) and join them to
    ``kernels``; None without counters."""
    if counters is None:
        counters = run_artifact(trace, "counters")
        if gemm_counters is None:
            gemm_counters = run_artifact(trace, "counters_gemm")
    if counters is None:
        return None
    counters_df = read_ncu_csv(counters) if isinstance(counters, (str, Path)) else counters
    launches = (
        read_ncu_csv(gemm_counters) if isinstance(gemm_counters, (str, Path)) else gemm_counters
    )
    joined, unmatched, cnotes = join_counters(kernels, counters_df, mode=mode, launches=launches)
    notes.extend(cnotes)
    return Measured(joined, counters_df, unmatched)


def apply_measured(
    m: Measured,
    kernels: pd.DataFrame,
    cost: KernelCosts,
    pipe: np.ndarray,
    roof: Roofline,
    notes: list[str],
) -> Roofline:
    """Put the measured FLOPs, bytes and pipes in place of the modelled ones (in ``cost``
    and ``pipe``); returns the roofline with the measured L2 roof, where the counters
    have its peak metrics."""
    if not len(m.joined):
        return roof
    idx = pd.Index(kernels["kernel_id"].to_numpy()).get_indexer(m.joined["kernel_id"])
    ok = idx >= 0
    j, rows = m.joined[ok], idx[ok]
    cost.flops[rows] = j["flops"].to_numpy(dtype=float)
    cost.bytes[rows] = j["dram_bytes"].to_numpy(dtype=float)
    cost.l2_bytes[rows] = j["l2_bytes"].to_numpy(dtype=float)
    cost.extrapolated[rows] = j["extrapolated"].to_numpy(dtype=bool)
    cost.source[rows] = "measured"
    mp = j["pipe"].to_numpy(dtype=object)
    has_mp = np.array([p is not None and p == p for p in mp], dtype=bool)
    pipe[rows[has_mp]] = mp[has_mp]
    c = m.counters
    l2bw = c["l2_peak_bw"].to_numpy(dtype=float) if "l2_peak_bw" in c else np.zeros(0)
    if np.isfinite(l2bw).any():
        return roof.with_l2(
            float(np.nanmedian(l2bw)),
            "measured (ncu lts__t_bytes.sum.peak_sustained × lts__cycles_elapsed.avg.per_second)",
        )
    notes.append(
        "L2 roof unknown (peak metrics not in the counters): the class of "
        "measured kernels is decided by DRAM intensity alone"
    )
    return roof
