"""What a summary holds: the dataclasses :func:`tracekit.summary.build.summarize` fills and
the renderers read (kept apart from the code that fills them, so that ``summary.json``'s
builder and the renderers need not import it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

import tracekit.classify.models.memory as MM
import tracekit.summary.cpu as CPU
import tracekit.summary.critical_path as CP
import tracekit.summary.critical_path.anchor as CPA
import tracekit.summary.generate as GEN
import tracekit.summary.memory as M
import tracekit.summary.steps as S
import tracekit.summary.stepsummary as SS
import tracekit.summary.timeline as TL
import tracekit.summary.verdict as V
from tracekit.summary.kvcache import KVGrowth
from tracekit.summary.roofs import Roofs


@dataclass
class Header:
    title: str
    source: str
    device: str | None
    torch_version: str | None
    cuda_runtime: str | None
    config: dict[str, Any] | None
    n_params: int | None
    steps: list[int]
    step_time_ms: float | None  # trace (profiled)
    measured_step_time_ms: float | None  # manifest (unprofiled median)
    tokens_per_step: int | None
    tokens_per_s: float | None  # from the trace step time
    measured_tokens_per_s: float | None  # manifest
    options: dict[str, bool]
    missing: list[str]
    # the run's check that the profiler passes left nothing behind (manifest ``observer``):
    # the residual of the steps timed after them, or why there is none; None: not checked
    residual: str | None = None


@dataclass
class CategoryMemory:
    timeline: M.CategoryTimeline
    offset_ns: float | None  # add to times_us * 1000 to get trace time; None: not aligned
    path: str


@dataclass(kw_only=True)
class MemoryFacts:
    """Memory figures beyond the allocator totals: what persists across steps, the dynamic
    part, the categories at the peak and the analytic model."""

    floor_bytes: int | None  # lowest allocated in the analysed steps
    dynamic_peak_bytes: int | None  # peak allocated - floor
    activation_bytes_per_token: float | None  # dynamic peak / tokens per step
    category_peak: dict[str, float] | None  # timeline categories at the timeline's peak
    category_peak_model: dict[str, float] | None  # the same on the model's five + unseen
    model: MM.MemoryEstimate | None
    model_note: str  # why there is no model, or its caveat


@dataclass(kw_only=True)
class TraceFacts:
    """What the summary takes from the trace alone (no classification): known before the
    classify stage, so that a report can draw the memory timeline meanwhile."""

    steps: list[int]
    step_starts_ns: list[int]  # CPU start of each analysed step
    step_table: pd.DataFrame
    header: Header
    launch: S.LaunchCheck
    memory: M.MemoryStats | None
    memory_source: str | None
    memory_timeline: pd.DataFrame
    memory_per_step: pd.DataFrame
    categories: CategoryMemory | None
    allocators: pd.DataFrame
    memory_facts: MemoryFacts
    input_wait_ns: dict[int, int]  # per step: GPU idle while the host loads input
    notes: list[str] = field(default_factory=list)
    kv: KVGrowth | None = None  # a generate run's KV cache over its decode steps
    device_kind: str = "gpu"  # 'cpu': a CPU run, its work operators stand in for kernels
    cpu: CPU.CpuUtilisation | None = None  # a CPU run's operator busy time per thread
    timeline: TL.Timeline | None = None  # the light pass, where the timeline comes from it
    timeline_facts: TL.TimelineFacts | None = None  # which pass, the join, the step times


@dataclass(kw_only=True)
class Summary(TraceFacts):
    """Everything the report shows (``notes``: the classify stage's and the trace's)."""

    classes: pd.DataFrame
    class_per_step: pd.DataFrame
    operators: pd.DataFrame
    kernels: pd.DataFrame
    bound: dict[str, float | None]
    roofs: Roofs
    flop_sources: dict[str, float]
    step_summary: SS.StepSummary
    breakdown: V.Breakdown | None
    verdict: V.Verdict | None
    warnings: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    critical_path: CP.CriticalPath | None = None
    # the critical path's what-ifs on the unprofiled step (a run folder with its step time)
    cp_anchor: CPA.Anchor | None = None
    generate: GEN.GenerateFacts | None = None  # a generate run: prefill, decode, the model
    # the multi-rank analysis (tracekit.ranks.reduce.RanksSummary) of a multi-rank report
    ranks: Any = None
    roof_note: str | None = None  # why a figure above 100 % of its roof is shown
    broken: list[Any] = field(default_factory=list)  # report invariants broken (invariants.py)
