"""The run manifest (``manifest.json`` of a run folder) as typed records.

The one module that knows where a manifest keeps its figures (docs/collect.md, "manifest.json
(schema_version 1)"; docs/run.md, "The run folder"). ``read_manifest`` is forgiving: a key
that is missing or of the wrong type reads as ``None``; a manifest of another schema version
is read as far as it goes. Every record keeps its ``raw`` mapping for what is not typed yet.

``write_manifest`` is the one way a collector (``collect``, ``run``, ``tracekit.profile()``,
the multi-rank launchers, the counter replay) writes a manifest: it stamps
``schema_version``, checks the dictionary against these records (a value present but of a
type the reader would drop is refused, so nothing is written that reads back as None) and
writes it atomically (a temporary file, then ``os.replace``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from tracekit.io import atomic_write_text

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
_EMPTY: Mapping[str, Any] = {}


def _map(x: Any) -> Mapping[str, Any]:
    return x if isinstance(x, Mapping) else _EMPTY


def _num(x: Any) -> float | None:
    """A finite number, else None (bools are not numbers here)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x != x:
        return None
    return float(x)


def _int(x: Any) -> int | None:
    v = _num(x)
    return int(v) if v is not None else None


def _pos(x: Any) -> int | None:
    v = _int(x)
    return v if v is not None and v > 0 else None


def _str(x: Any) -> str | None:
    return x if isinstance(x, str) else None


def _bool(x: Any) -> bool | None:
    return x if isinstance(x, bool) else None


def _sub(x: Any) -> dict[str, Any] | None:
    return dict(x) if isinstance(x, Mapping) else None


def _maps(x: Any) -> list[dict[str, Any]]:
    return [dict(e) for e in x if isinstance(e, Mapping)] if isinstance(x, list) else []


@dataclass(frozen=True)
class StepTime:
    """A step-time distribution in ms (``metrics.step_time_ms`` and its kin)."""

    median: float | None = None
    p10: float | None = None
    p90: float | None = None
    mean: float | None = None
    n: int | None = None

    def __post_init__(self) -> None:
        for v in (self.median, self.p10, self.p90, self.mean):
            if v is not None and v < 0:
                raise ValueError(f"negative step time {v} ms")

    @classmethod
    def of(cls, x: Any) -> StepTime | None:
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            return cls(median=_num(x)) if x >= 0 else None
        if not isinstance(x, Mapping):
            return None
        med, p10, p90, mean = (_num(x.get(k)) for k in ("median", "p10", "p90", "mean"))
        if any(v is not None and v < 0 for v in (med, p10, p90, mean)):
            return None
        return cls(median=med, p10=p10, p90=p90, mean=mean, n=_int(x.get("n")))


@dataclass(frozen=True)
class Config:
    """``config``: what the run was asked to do."""

    preset: str | None = None
    device: str | None = None
    dtype: str | None = None
    attention: str | None = None
    batch: int | None = None
    seq: int | None = None
    grad_accum: int | None = None
    gpus: int | None = None
    tokens_per_step: float | None = None
    samples_per_step: float | None = None
    tf32: bool | None = None
    compile: bool | None = None
    cuda_graphs: bool | None = None
    float32_matmul_precision: str | None = None
    workload: str | None = None
    optimizer: str | None = None
    model: dict[str, Any] | None = None
    profiler: dict[str, Any] | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for name in ("batch", "seq", "grad_accum"):
            v = getattr(self, name)
            if v is not None and v <= 0:
                raise ValueError(f"config.{name} must be positive, got {v}")

    @classmethod
    def of(cls, x: Any) -> Config:
        c = _map(x)
        return cls(
            preset=_str(c.get("preset")),
            device=_str(c.get("device")),
            dtype=_str(c.get("dtype")),
            attention=_str(c.get("attention")),
            batch=_pos(c.get("batch")),
            seq=_pos(c.get("seq")),
            grad_accum=_pos(c.get("grad_accum")),
            gpus=_pos(c.get("gpus")),
            tokens_per_step=_num(c.get("tokens_per_step")),
            samples_per_step=_num(c.get("samples_per_step")),
            tf32=_bool(c.get("tf32")),
            compile=_bool(c.get("compile")),
            cuda_graphs=_bool(c.get("cuda_graphs")),
            float32_matmul_precision=_str(c.get("float32_matmul_precision")),
            workload=_str(c.get("workload")),
            optimizer=_str(c.get("optimizer")) or None,
            model=_sub(c.get("model")),
            profiler=_sub(c.get("profiler")),
            raw=c,
        )


@dataclass(frozen=True)
class Metrics:
    """``metrics``: what the run measured (ms, bytes, per second)."""

    step_time_ms: StepTime | None = None
    profiled_step_time_ms: float | None = None
    profiled_step_time: StepTime | None = None
    timeline_step_time_ms: float | None = None
    timeline_step_time: StepTime | None = None
    tokens_per_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    samples_per_s: float | None = None
    world_size: int | None = None
    peak_allocated_bytes: float | None = None
    peak_reserved_bytes: float | None = None
    avg_allocated_bytes: float | None = None
    memory_method: str | None = None
    exposed_comm_pct: float | None = None
    profiler_overhead_pct: float | None = None
    timeline_overhead_pct: float | None = None
    n_params: int | None = None
    memory: dict[str, Any] | None = None
    tpot_ms_by_step: list[Any] | None = None
    ttft_ms: StepTime | None = None
    tpot_ms: StepTime | None = None
    timeline_cost: dict[str, Any] | None = None
    host_issue_ms: StepTime | None = None  # the host's own time per step (collect, CUDA)
    synced_step_ms: StepTime | None = None  # the same steps, to the GPU's end
    host_issue_method: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def number(self, key: str) -> float | None:
        """Any numeric metric by its key (None if absent or not a number)."""
        return _num(self.raw.get(key))

    @property
    def step_median_ms(self) -> float | None:
        """The unprofiled step's median (ms), if measured."""
        return self.step_time_ms.median if self.step_time_ms else None

    @classmethod
    def of(cls, x: Any) -> Metrics:
        m = _map(x)
        by = m.get("tpot_ms_by_step")
        return cls(
            step_time_ms=StepTime.of(m.get("step_time_ms")),
            profiled_step_time_ms=_num(m.get("profiled_step_time_ms")),
            profiled_step_time=StepTime.of(m.get("profiled_step_time")),
            timeline_step_time_ms=_num(m.get("timeline_step_time_ms")),
            timeline_step_time=StepTime.of(m.get("timeline_step_time")),
            tokens_per_s=_num(m.get("tokens_per_s")),
            tokens_per_s_per_gpu=_num(m.get("tokens_per_s_per_gpu")),
            samples_per_s=_num(m.get("samples_per_s")),
            world_size=_int(m.get("world_size")),
            peak_allocated_bytes=_num(m.get("peak_allocated_bytes")),
            peak_reserved_bytes=_num(m.get("peak_reserved_bytes")),
            avg_allocated_bytes=_num(m.get("avg_allocated_bytes")),
            memory_method=_str(m.get("memory_method")),
            exposed_comm_pct=_num(m.get("exposed_comm_pct")),
            profiler_overhead_pct=_num(m.get("profiler_overhead_pct")),
            timeline_overhead_pct=_num(m.get("timeline_overhead_pct")),
            n_params=_int(m.get("n_params")),
            memory=_sub(m.get("memory")),
            tpot_ms_by_step=list(by) if isinstance(by, list) else None,
            ttft_ms=StepTime.of(m.get("ttft_ms")),
            tpot_ms=StepTime.of(m.get("tpot_ms")),
            timeline_cost=_sub(m.get("timeline_cost")),
            host_issue_ms=StepTime.of(m.get("host_issue_ms")),
            synced_step_ms=StepTime.of(m.get("synced_step_ms")),
            host_issue_method=_str(m.get("host_issue_method")),
            raw=m,
        )


@dataclass(frozen=True)
class ModelInfo:
    """``model``: the model the run built (``n_params`` counted by the collector)."""

    n_params: int | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, x: Any) -> ModelInfo:
        m = _map(x)
        return cls(n_params=_int(m.get("n_params")), raw=m)


@dataclass(frozen=True)
class OptimizerInfo:
    """``optimizer``: the optimizer's parameter and state bytes."""

    n_params: int | None = None
    param_bytes: float | None = None
    grad_bytes: float | None = None
    state_bytes: float | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, x: Any) -> OptimizerInfo:
        o = _map(x)
        return cls(
            n_params=_int(o.get("n_params")),
            param_bytes=_num(o.get("param_bytes")),
            grad_bytes=_num(o.get("grad_bytes")),
            state_bytes=_num(o.get("state_bytes")),
            raw=o,
        )


@dataclass(frozen=True)
class Ceilings:
    """``ceilings``: the measured copy bandwidth (B/s) and matmul rates (FLOP/s) per precision."""

    memory_bandwidth_Bps: float | None = None
    matmul_flops: dict[str, float | None] = field(default_factory=dict)
    interconnect: dict[str, Any] | None = None
    method: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.memory_bandwidth_Bps is not None and self.memory_bandwidth_Bps < 0:
            raise ValueError("negative measured bandwidth")

    @classmethod
    def of(cls, x: Any) -> Ceilings:
        c = _map(x)
        bw = _num(c.get("memory_bandwidth_Bps"))
        mm = {str(k): _num(v) for k, v in _map(c.get("matmul_flops")).items()}
        return cls(
            memory_bandwidth_Bps=bw if bw is not None and bw >= 0 else None,
            matmul_flops=mm,
            interconnect=_sub(c.get("interconnect")),
            method=_str(c.get("method")),
            raw=c,
        )


@dataclass(frozen=True)
class Artifacts:
    """``artifacts``: files of the run folder, relative to it (a ``*_absent`` key says why not)."""

    trace: str | None = None
    traces: list[str] = field(default_factory=list)
    timeline_trace: str | None = None
    counters: str | None = None
    tensorboard: str | None = None
    memory_timeline: str | None = None
    memory_timeline_pass: str | None = None  # the pass that recorded it (its phase name)
    memory_timeline_absent: str | None = None  # why there is none
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def get(self, key: str) -> Any:
        """Any artifact entry by its key (None if absent)."""
        return self.raw.get(key)

    @classmethod
    def of(cls, x: Any) -> Artifacts:
        a = _map(x)
        tr = a.get("traces")
        return cls(
            trace=_str(a.get("trace")),
            traces=[t for t in tr if isinstance(t, str)] if isinstance(tr, list) else [],
            timeline_trace=_str(a.get("timeline_trace")),
            counters=_str(a.get("counters")) or _str(a.get("counters_csv")),
            tensorboard=_str(a.get("tensorboard")),
            memory_timeline=_str(a.get("memory_timeline")),
            memory_timeline_pass=_str(a.get("memory_timeline_pass")),
            memory_timeline_absent=_str(a.get("memory_timeline_absent")),
            raw=a,
        )


@dataclass(frozen=True)
class Distributed:
    """``distributed``: a multi-rank run's world and its per-rank entries."""

    world_size: int | None = None
    ranks: list[dict[str, Any]] = field(default_factory=list)
    comm_cost: dict[str, Any] | None = None  # measured without the profiler (commcost.py)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def rank_step_medians(self) -> dict[int, float | None]:
        """Per rank (its entry's ``rank``, else its place in the list) the median of its
        unprofiled step in ms (``ranks[i].metrics.step_time_ms``), None where unknown."""
        r = self.raw.get("ranks")
        out: dict[int, float | None] = {}
        for i, e in enumerate(r if isinstance(r, list) else []):
            rank = _int(e.get("rank")) if isinstance(e, Mapping) else None
            step = Metrics.of(e.get("metrics")).step_median_ms if isinstance(e, Mapping) else None
            out[i if rank is None else rank] = step
        return out

    @classmethod
    def of(cls, x: Any) -> Distributed | None:
        if not isinstance(x, Mapping):
            return None
        r = x.get("ranks")
        ranks = [dict(e) for e in r if isinstance(e, Mapping)] if isinstance(r, list) else []
        return cls(
            world_size=_int(x.get("world_size")),
            ranks=ranks,
            comm_cost=_sub(x.get("comm_cost")),
            raw=x,
        )


@dataclass(frozen=True)
class Observer:
    """``observer``: the residual check after the profiler passes and what they left behind."""

    residual: dict[str, Any] | None = None
    residual_absent: str | None = None  # why the residual was not checked
    left_behind: list[str] = field(default_factory=list)
    cupti_attached: str | None = None  # why CUPTI stayed attached (None: it did not)
    rank: int | None = None  # a multi-rank run's: the rank with the largest residual
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def residual_sentence(self) -> str | None:
        return _str(self.residual.get("sentence")) if self.residual else None

    @property
    def residual_beyond_3pct(self) -> bool:
        """The steps after the passes ran more than 3 % slower than before them."""
        return bool(self.residual and self.residual.get("beyond_3pct"))

    @classmethod
    def of(cls, x: Any) -> Observer | None:
        if not isinstance(x, Mapping):
            return None
        left = x.get("left_behind")
        return cls(
            residual=_sub(x.get("residual")),
            residual_absent=_str(x.get("residual_absent")),
            left_behind=[str(w) for w in left] if isinstance(left, list) else [],
            cupti_attached=_str(x.get("cupti_attached")),
            rank=_int(x.get("rank")),
            raw=x,
        )


@dataclass(frozen=True)
class Versions:
    """``versions``: the software the run used."""

    torch: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, x: Any) -> Versions:
        v = _map(x)
        return cls(torch=_str(v.get("torch")), raw=v)


@dataclass(frozen=True)
class RunManifest:
    """A run folder's manifest, typed where the analysis reads it; ``raw`` is the whole."""

    schema_version: int | None = None
    status: str | None = None
    workload: str | None = None
    error: str | None = None
    config: Config = field(default_factory=Config)
    metrics: Metrics = field(default_factory=Metrics)
    model: ModelInfo = field(default_factory=ModelInfo)
    optimizer: OptimizerInfo = field(default_factory=OptimizerInfo)
    ceilings: Ceilings | None = None
    artifacts: Artifacts = field(default_factory=Artifacts)
    distributed: Distributed | None = None
    observer: Observer | None = None
    versions: Versions = field(default_factory=Versions)
    generate: dict[str, Any] | None = None
    device: dict[str, Any] | None = None
    profiler: dict[str, Any] | None = None
    schedule_steps: int | None = None
    total_steps: int | None = None
    # the windows of a fitted schedule that the loop cut short (``tracekit run``)
    schedule_shortened: list[dict[str, Any]] = field(default_factory=list)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def is_generate(self) -> bool:
        """A ``collect --workload generate`` run."""
        return (self.config.workload or self.workload) == "generate"

    @property
    def n_params(self) -> int | None:
        """The model's parameter count: ``model``, else ``metrics``, else the top level."""
        for where in (self.model.raw, self.metrics.raw, self.raw):
            for k in ("n_params", "params", "num_params", "parameters"):
                v = _int(where.get(k))
                if v is not None and v > 0:
                    return v
        return None

    @property
    def has_config(self) -> bool:
        """The manifest has a ``config`` block (a run that tracekit configured)."""
        return isinstance(self.raw.get("config"), Mapping)

    @property
    def device_threads(self) -> float | None:
        """The CPU threads the run used (``device.threads``), if recorded."""
        return _num(self.device.get("threads")) if self.device else None

    @property
    def device_name(self) -> str | None:
        """The device's name (``device.name``), if recorded."""
        return _str(self.device.get("name")) if self.device else None

    @property
    def device_type(self) -> str | None:
        """The device's type (``device.type``: ``cuda``, ``cpu``), if recorded."""
        return _str(self.device.get("type")) if self.device else None

    def tf32_flag(self) -> tuple[bool | None, str]:
        """Whether the run let fp32 matmuls use TF32, and the manifest entry that says so."""
        for where in (self.raw, self.config.raw):
            for key in ("tf32", "allow_tf32", "matmul_allow_tf32"):
                if isinstance(where.get(key), bool):
                    return bool(where[key]), f"manifest {key} = {where[key]}"
            prec = where.get("float32_matmul_precision")
            if isinstance(prec, str):
                return prec in ("high", "medium"), f"manifest float32_matmul_precision = {prec!r}"
        if self.ceilings is not None and self.ceilings.matmul_flops.get("tf32"):
            return True, "manifest ceilings measured a tf32 matmul rate (TF32 enabled in the run)"
        return None, ""

    @property
    def current(self) -> bool:
        """Written by this schema version (another one is read as far as it goes)."""
        return self.schema_version == SCHEMA_VERSION

    @classmethod
    def of(cls, x: Mapping[str, Any]) -> RunManifest:
        return cls(
            schema_version=_int(x.get("schema_version")),
            status=_str(x.get("status")),
            workload=_str(x.get("workload")),
            error=_str(x.get("error")),
            config=Config.of(x.get("config")),
            metrics=Metrics.of(x.get("metrics")),
            model=ModelInfo.of(x.get("model")),
            optimizer=OptimizerInfo.of(x.get("optimizer")),
            ceilings=Ceilings.of(x["ceilings"]) if isinstance(x.get("ceilings"), Mapping) else None,
            artifacts=Artifacts.of(x.get("artifacts")),
            distributed=Distributed.of(x.get("distributed")),
            observer=Observer.of(x.get("observer")),
            versions=Versions.of(x.get("versions")),
            generate=_sub(x.get("generate")),
            device=_sub(x.get("device")),
            profiler=_sub(x.get("profiler")),
            schedule_steps=_int(x.get("schedule_steps")),
            total_steps=_int(x.get("total_steps")),
            schedule_shortened=_maps(x.get("schedule_shortened")),
            raw=x,
        )


def read_manifest(src: RunManifest | Mapping[str, Any] | str | Path | None) -> RunManifest | None:
    """The typed manifest of a dictionary, a ``manifest.json`` path or a run folder.

    None when there is none (no file, unreadable JSON, not an object); a typed record is
    returned unchanged, so a reader may take either."""
    if src is None or isinstance(src, RunManifest):
        return src
    if isinstance(src, Mapping):
        return RunManifest.of(src)
    p = Path(src)
    if p.is_dir():
        p = p / "manifest.json"
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return RunManifest.of(doc) if isinstance(doc, Mapping) else None


def manifest_or_empty(src: RunManifest | Mapping[str, Any] | str | Path | None) -> RunManifest:
    """``read_manifest``, with an empty record (every field None) where there is none."""
    return read_manifest(src) or RunManifest()


def as_manifest(x: Any) -> RunManifest:
    """The typed manifest of a record or a dictionary; an empty one (every field None) for
    anything else. Reads no file: for readers handed ``trace.manifest`` or None."""
    if isinstance(x, RunManifest):
        return x
    return RunManifest.of(x) if isinstance(x, Mapping) else RunManifest()


class ManifestError(ValueError):
    """A manifest a collector was about to write that its readers would misread."""


def _dropped(record: Any, raw: Mapping[str, Any], where: str) -> list[str]:
    """``where.key = value`` for each key of ``raw`` whose value (not null) ``record``, the
    typed reading of ``raw``, dropped as of the wrong type, out of range or partly unreadable."""
    out: list[str] = []
    for f in fields(record):
        if f.name == "raw" or raw.get(f.name) is None:
            continue
        value, got = raw[f.name], getattr(record, f.name)
        lost = (
            got is None
            or (isinstance(got, list) and isinstance(value, list) and len(got) != len(value))
            or (hasattr(got, "raw") and not isinstance(value, Mapping))  # a block, not an object
        )
        if lost:
            out.append(f"{where}{f.name} = {value!r:.80}")
        elif is_dataclass(got) and isinstance(value, Mapping):
            out += _dropped(got, value, f"{where}{f.name}.")
    return out


def check_manifest(data: Mapping[str, Any], *, strict: bool = True) -> RunManifest:
    """The typed reading of a manifest about to be written, or :class:`ManifestError` when
    it is no manifest (not an object with string keys, no ``status`` string, another
    ``schema_version``) or, ``strict``, has a typed entry whose value the readers would
    drop (:func:`dropped`)."""
    if not isinstance(data, Mapping) or not all(isinstance(k, str) for k in data):
        raise ManifestError("a manifest is an object with string keys")
    version = data.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise ManifestError(f"schema_version {version!r}: this tracekit writes {SCHEMA_VERSION}")
    if not isinstance(data.get("status"), str) or not data["status"]:
        raise ManifestError(f"status {data.get('status')!r}: a manifest needs a status string")
    man = RunManifest.of(data)
    if strict and (bad := _dropped(man, data, "")):
        raise ManifestError("entries its readers would read as missing: " + "; ".join(bad))
    return man


def dropped(data: Mapping[str, Any]) -> list[str]:
    """The typed entries of ``data`` (a manifest) whose values the readers would read as
    missing, in words (empty: none)."""
    return _dropped(RunManifest.of(data), data, "")


STRICT_ENV = "TRACEKIT_STRICT_MANIFEST"  # "1": write_manifest refuses (the test suite)


def write_manifest(
    path: str | Path, data: Mapping[str, Any], *, strict: bool | None = None
) -> RunManifest:
    """Write ``data`` as the manifest ``path`` (a ``manifest.json``, or a rank's
    ``rank<R>.manifest.json``): ``schema_version`` stamped first, checked by
    :func:`check_manifest`, through a temporary file and an atomic rename. The one place
    a manifest is written (tests/test_manifest_writes.py); returns its typed reading.

    A run is never lost to its manifest: entries the readers would drop (a collector's
    bug) are listed in ``manifest_problems`` and the run is written; ``strict`` (the
    tests; default: :data:`STRICT_ENV` set to ``1``) refuses them with
    :class:`ManifestError` instead."""
    if strict is None:
        strict = os.environ.get(STRICT_ENV) == "1"
    p = Path(path)
    if not p.name.endswith(MANIFEST):
        raise ManifestError(f"{p}: a manifest's file name ends in {MANIFEST}")
    doc = {"schema_version": SCHEMA_VERSION, **data}
    man = check_manifest(doc, strict=strict)  # strict: refused there
    if not strict and (bad := dropped(doc)):
        doc["manifest_problems"] = bad
    atomic_write_text(p, json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")
    return man
