"""A many-rank DDP job on disk, built from the real 2 x H100 DDP rank traces in ``fixtures/``,
with faults injected that the cross-rank analysis must find without being told.

One profiled step of the real rank 0 (GPT-2 small, fp32, 13 gradient all-reduce buckets
and a buffer broadcast; its all-reduces are the real pair's transfer times, the shorter of
the two ranks' kernels) is the template of every step of every rank. ``ranks`` ranks run on
``ranks / per_node`` nodes, each node with its own host name (Kineto's trace header and the
file name, as ``tensorboard_trace_handler`` names them), every trace with Kineto's
``distributedInfo`` (rank, world size, the world process group) and every NCCL kernel with
its process group and sequence number (``Seq``), the same on every rank.

The ranks are simulated together, step by step, as a synchronous data-parallel job:

* rank r's step s runs the template's work stretched by ``c[r, s]`` (1 + a per-rank bias +
  per-step noise, ``jitter_pct``), after its input (a DataLoader ``__next__`` span);
* its k-th collective starts (its NCCL kernel begins) at the stretched launch time, or when
  its previous collective ended; the collective's transfer begins when the LAST rank has
  arrived, and lasts the template's transfer (times 2 on the slow node's ranks): so the
  ranks that arrive early wait in the kernel;
* the GPU work after the last all-reduce (the optimizer) waits for it; the next step begins
  when both the host and the GPU are done (the loss read back each step).

A collective's transfer is its message at ``busbw_gbs`` of bus bandwidth (the nodes' network,
nccl-tests' convention), never shorter than the real pair's over NVLink.

Faults (each a rank or a node, or None): ``straggler`` (compute ``straggler_pct`` % slower),
``slow_node`` (its ranks' inter-node collectives ``slow_factor`` x slower: every collective
of the world group spans nodes), ``stall`` (a rank whose input takes ``stall_pct`` % of a
step), ``truncated`` (its file cut mid-document), ``missing`` (no file). By default they are
placed on different nodes, by the seed. :func:`build` writes the folder and returns the
:class:`Job` (the truth, also written beside the folder as ``<folder>.faults.json``).

``size``: ``small`` (compute kernels merged in runs of :data:`MERGE` per stream, host work
kept to the step, input, communication and launch records: ~30 kB per rank and step
compressed), ``full`` (every GPU activity and launch of the step), ``large`` (every event of
the step, host operators and flows included: the memory figures' traces).
"""

from __future__ import annotations

import copy
import gzip
import json
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "fixtures" / "h100x2-ddp-gpt2s-b8-s128-fp32"
TEMPLATE_STEP = "ProfilerStep#3"
MERGE = 16  # small traces: consecutive compute activities of a stream merged per run
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
KEEP_OPS = ("ProfilerStep#", "nccl:", "record_param_comms", "Optimizer.step")
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
LOADER_US = 150.0  # a normal rank's input per step
GAP_US = 5.0  # between a collective's end and the GPU work that waits for it
SIZES = ("small", "full", "large")
ITEMSIZE = {"Float": 4, "BFloat16": 2, "Half": 2, "Bool": 1, "Byte": 1, "Long": 8, "Int": 4}


@dataclass(frozen=True)
class Spec:
    """What to build (``None`` for a fault: not injected; ``-1``: placed by the seed)."""

    ranks: int = 64
    per_node: int = 8
    steps: int = 3
    size: str = "small"
    seed: int = 0
    jitter_pct: float = 0.5
    straggler: int | None = -1
    straggler_pct: float = 15.0
    slow_node: int | None = -1
    slow_factor: float = 2.0
    stall: int | None = -1
    stall_pct: float = 20.0
    busbw_gbs: float = 45.0  # the inter-node links' bus bandwidth (a 400 Gb/s NIC per GPU)
    truncated: int | None = -1
    missing: int | None = -1


@dataclass
class Job:
    """The job as built: where, its nodes' host names, and the faults' ranks/node."""

    folder: str
    ranks: int
    per_node: int
    steps: int
    size: str
    hosts: list[str]
    straggler: int | None
    slow_node: int | None
    slow_node_ranks: list[int]
    stall: int | None
    truncated: int | None
    missing: int | None
    files: dict[int, str] = field(default_factory=dict)

    def node_of(self, rank: int) -> int:
        return rank // self.per_node


# ------------------------------------------------------------------------------ template


@dataclass
class Template:
    """One step of the source rank: events with times relative to the step's start (µs)."""

    header: dict[str, Any]
    meta: list[dict[str, Any]]  # 'M' events
    events: list[dict[str, Any]]  # ph X, ts relative
    comm: list[int]  # indices into events of the NCCL kernels, in order
    transfer_us: list[float]  # per collective: the pair's shorter kernel
    message_bytes: list[float]  # per collective
    kinds: list[str]  # per collective: Kineto's "Collective name"
    step_us: float  # the step's host span
    tail_us: float  # GPU work at or after this (relative) waits for the last collective


def _load(path: Path) -> dict[str, Any]:
    import msgspec

    with gzip.open(path, "rb") as f:
        return msgspec.json.decode(f.read())  # type: ignore[no-any-return]


def _step_events(trace: dict[str, Any]) -> tuple[list[dict[str, Any]], float, float]:
    ev = trace["traceEvents"]
    step = next(
        e for e in ev if e.get("name") == TEMPLATE_STEP and e.get("cat") == "user_annotation"
    )
    t0, t1 = float(step["ts"]), float(step["ts"]) + float(step["dur"])
    inside = [e for e in ev if e.get("ph") == "X" and t0 <= float(e["ts"]) < t1]
    return inside, t0, float(step["dur"])


def _nccl(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(
        (e for e in events if e.get("cat") == "kernel" and "nccl" in str(e["name"]).lower()),
        key=lambda e: float(e["ts"]),
    )


def _merge_runs(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Compute activities of each (stream, category) merged in runs of :data:`MERGE`: one
    activity at the run's first start, as long as the run's summed durations, named as the
    run's longest activity; only the launches of the kept activities stay."""
    gpu: dict[tuple[Any, str], list[dict[str, Any]]] = {}
    for e in events:
        if e.get("cat") in GPU_CATS and "nccl" not in str(e["name"]).lower():
            gpu.setdefault((e.get("tid"), str(e["cat"])), []).append(e)
    kept: list[dict[str, Any]] = []
    for run in gpu.values():
        run.sort(key=lambda e: float(e["ts"]))
        for i in range(0, len(run), MERGE):
            part = run[i : i + MERGE]
            head = copy.deepcopy(max(part, key=lambda e: float(e["dur"])))
            head["ts"] = part[0]["ts"]
            head["dur"] = sum(float(e["dur"]) for e in part)
            head["args"]["correlation"] = part[0]["args"].get("correlation")
            kept.append(head)
    corr = {e["args"].get("correlation") for e in kept} | {
        e["args"].get("correlation") for e in _nccl(events)
    }
    rest = []
    for e in events:
        cat = e.get("cat")
        if cat in GPU_CATS:
            if "nccl" in str(e["name"]).lower():
                rest.append(e)
        elif cat in ("cuda_runtime", "cuda_driver"):
            if e.get("args", {}).get("correlation") in corr:
                rest.append(e)
        elif str(e.get("name", "")).startswith(KEEP_OPS) or cat == "gpu_user_annotation":
            rest.append(e)
    return rest + kept


def _select(events: list[dict[str, Any]], size: str) -> list[dict[str, Any]]:
    if size == "large":
        return events
    if size == "small":
        return _merge_runs(events)
    keep = ("cuda_runtime", "cuda_driver", "gpu_user_annotation", *GPU_CATS)
    return [e for e in events if e.get("cat") in keep or str(e["name"]).startswith(KEEP_OPS)]


def template(size: str, source: Path = SOURCE) -> Template:
    """The source's rank 0 step, its collectives timed by the pair's transfers."""
    traces = sorted(source.glob("rank*.pt.trace.json.gz"))
    if len(traces) < 2:
        raise SystemExit(f"{source}: the two rank traces are missing")
    main, other = _load(traces[0]), _load(traces[1])
    events, t0, step_us = _step_events(main)
    comm0 = _nccl(events)
    comm1 = _nccl([e for e in other["traceEvents"] if e.get("ph") == "X"])[-len(comm0) :]
    transfer = [min(float(a["dur"]), float(b["dur"])) for a, b in zip(comm0, comm1, strict=True)]
    tail = float(comm0[-1]["ts"]) + float(comm0[-1]["dur"]) - t0
    sizes = [
        float(e["args"]["In msg nelems"]) * ITEMSIZE.get(str(e["args"].get("dtype")), 4)
        for e in comm0
    ]
    kinds = [str(e["args"].get("Collective name")) for e in comm0]
    kept = copy.deepcopy(_select(events, size))
    for e in kept:
        e["ts"] = float(e["ts"]) - t0
    kept.sort(key=lambda e: float(e["ts"]))
    ids = {id(e): i for i, e in enumerate(kept)}
    by_corr = {e["args"].get("correlation"): ids[id(e)] for e in kept if e.get("cat") == "kernel"}
    comm = [by_corr[e["args"]["correlation"]] for e in comm0]
    header = {k: v for k, v in main.items() if k != "traceEvents"}
    meta = [e for e in main["traceEvents"] if e.get("ph") == "M"]
    return Template(header, meta, kept, comm, transfer, sizes, kinds, step_us, tail)


# ---------------------------------------------------------------------------- simulation


def place_faults(spec: Spec) -> dict[str, int | None]:
    """Each fault's rank (the slow node's index) on a node of its own, from the seed."""
    nodes = max(1, spec.ranks // spec.per_node)
    rng = np.random.default_rng(spec.seed + 1)
    order = [int(n) for n in rng.permutation(nodes)]
    names = ("slow_node", "straggler", "stall", "truncated", "missing")
    out: dict[str, int | None] = {}
    for i, name in enumerate(names):
        given = getattr(spec, name)
        if given is None or given >= 0:
            out[name] = given
            continue
        node = order[i % len(order)]
        out[name] = (
            node if name == "slow_node" else node * spec.per_node + int(rng.integers(spec.per_node))
        )
    return out


@dataclass
class Timing:
    """Per rank and step: start (µs, common clock), stretch, input; per collective: start
    and end; the GPU tail's shift."""

    start: np.ndarray  # [ranks, steps]
    stretch: np.ndarray  # [ranks, steps]
    loader: np.ndarray  # [ranks, steps] µs
    coll_start: np.ndarray  # [ranks, steps, K]
    coll_end: np.ndarray  # [ranks, steps, K]
    tail_shift: np.ndarray  # [ranks, steps]


def simulate(spec: Spec, tpl: Template, faults: dict[str, int | None]) -> Timing:
    n, steps, k = spec.ranks, spec.steps, len(tpl.comm)
    rng = np.random.default_rng(spec.seed)
    jit = spec.jitter_pct / 100.0
    bias = 1.0 + rng.normal(0.0, jit, n)
    stretch = bias[:, None] * (1.0 + rng.normal(0.0, jit, (n, steps)))
    if faults["straggler"] is not None:
        stretch[faults["straggler"]] *= 1.0 + spec.straggler_pct / 100.0
    loader = LOADER_US * (1.0 + rng.normal(0.0, 0.05, (n, steps))).clip(0.5)
    if faults["stall"] is not None:
        loader[faults["stall"]] = tpl.step_us * spec.stall_pct / 100.0
    factor = np.ones(n)
    if faults["slow_node"] is not None:
        lo = faults["slow_node"] * spec.per_node
        factor[lo : lo + spec.per_node] = spec.slow_factor
    launch = np.array([float(tpl.events[i]["ts"]) for i in tpl.comm])
    transfer = np.array(transfers_us(tpl, n, spec.busbw_gbs))
    start = np.zeros((n, steps))
    cs, ce = np.zeros((n, steps, k)), np.zeros((n, steps, k))
    shift = np.zeros((n, steps))
    now = np.zeros(n)
    for s in range(steps):
        start[:, s] = now
        local = now + loader[:, s]
        prev = np.zeros(n)
        for j in range(k):
            arrive = np.maximum(local + stretch[:, s] * launch[j], prev)
            noise = 1.0 + rng.uniform(0.0, 0.02, n)
            end = arrive.max() + transfer[j] * factor * noise
            cs[:, s, j], ce[:, s, j], prev = arrive, end, end
        natural = local + stretch[:, s] * tpl.tail_us
        shift[:, s] = np.maximum(0.0, prev + GAP_US - natural)
        gpu_end = natural + shift[:, s] + stretch[:, s] * (_gpu_end(tpl) - tpl.tail_us)
        now = np.maximum(local + stretch[:, s] * tpl.step_us, gpu_end) + GAP_US
    return Timing(start, stretch, loader, cs, ce, shift)


def transfers_us(tpl: Template, ranks: int, busbw_gbs: float) -> list[float]:
    """Each collective's transfer on ``ranks`` ranks at ``busbw_gbs`` of bus bandwidth
    (nccl-tests: an all-reduce moves 2(n-1)/n of its message per rank, a broadcast 1), never
    shorter than the real pair's."""
    out = []
    for real, size, kind in zip(tpl.transfer_us, tpl.message_bytes, tpl.kinds, strict=True):
        factor = 2.0 * (ranks - 1) / ranks if kind in ("allreduce", "all_reduce") else 1.0
        out.append(max(real, 1e6 * size * factor / (busbw_gbs * 1e9)))
    return out


def _gpu_end(tpl: Template) -> float:
    return max(float(e["ts"]) + float(e["dur"]) for e in tpl.events if e.get("cat") in GPU_CATS)


# ------------------------------------------------------------------------------ writing


def _pg(ranks: int) -> dict[str, Any]:
    return {
        "pg_name": "0",
        "pg_desc": "default_pg",
        "backend_config": "cuda:nccl",
        "pg_size": ranks,
        "ranks": list(range(ranks)),
    }


def _comm_args(args: dict[str, Any], ranks: int, seq: int) -> None:
    if "Group size" in args:
        args["Group size"] = ranks
        args["Process Group Ranks"] = f"[0, ..., {ranks - 1}]"
        args["Seq"] = seq


def rank_events(
    tpl: Template, t: Timing, rank: int, pid: int, base_us: float
) -> list[dict[str, Any]]:
    """Every event of ``rank``'s trace (absolute µs from ``base_us``)."""
    out: list[dict[str, Any]] = []
    comm_at = {i: j for j, i in enumerate(tpl.comm)}
    k = len(tpl.comm)
    steps = t.start.shape[1]
    for s in range(steps):
        c, t0 = float(t.stretch[rank, s]), base_us + float(t.start[rank, s])
        local = t0 + float(t.loader[rank, s])
        off = (s + 1) * 10_000_000  # correlation and external ids unique per step
        out.append(_loader_span(pid, t0, float(t.loader[rank, s]), off))
        for i, e0 in enumerate(tpl.events):
            e = dict(e0)  # shallow: only ts, dur, pid, name and the args' ids change
            if isinstance(e0.get("args"), dict):
                e["args"] = dict(e0["args"])
            rel = float(e0["ts"])
            ts, dur = local + c * rel, c * float(e0.get("dur", 0.0))
            if i in comm_at:
                j = comm_at[i]
                ts = base_us + float(t.coll_start[rank, s, j])
                dur = float(t.coll_end[rank, s, j] - t.coll_start[rank, s, j])
            elif e.get("cat") in GPU_CATS and rel >= tpl.tail_us:
                ts += float(t.tail_shift[rank, s])
            name = str(e.get("name", ""))
            if name == TEMPLATE_STEP:
                e["name"] = f"ProfilerStep#{s + 2}"
                ts, dur = t0, c * tpl.step_us + float(t.loader[rank, s])
            if e.get("ph") == "X" and e.get("pid") != 0:
                e["pid"] = pid
            e["ts"], e["dur"] = round(ts, 3), round(max(dur, 0.0), 3)
            args = e.get("args")
            if isinstance(args, dict):
                for key in ("correlation", "External id"):
                    if isinstance(args.get(key), int) and args[key] > 0:
                        args[key] += off
                seq = s * k + comm_at.get(i, 0)
                _comm_args(args, t.start.shape[0], seq)
            out.append(e)
    return out


def _loader_span(pid: int, ts: float, dur: float, off: int) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "user_annotation",
        "name": LOADER,
        "pid": pid,
        "tid": 999,
        "ts": round(ts, 3),
        "dur": round(dur, 3),
        "args": {"External id": off + 9_999_999},
    }


def _seq_fix(events: list[dict[str, Any]], k: int) -> None:
    """record_param_comms / nccl ops carry the sequence number of the kernel they launch:
    the i-th communication operator of a step is the i-th collective."""
    per_step: dict[int, int] = {}
    for e in events:
        a = e.get("args")
        if e.get("cat") == "cpu_op" and isinstance(a, dict) and "Seq" in a:
            step = int(a["Seq"]) // k if k else 0
            i = per_step.get(step, 0)
            a["Seq"] = step * k + min(i, k - 1)
            per_step[step] = i + 1


def trace_text(tpl: Template, t: Timing, rank: int, world: int, host: str, pid: int) -> str:
    header = copy.deepcopy(tpl.header)
    header["distributedInfo"] = {
        **header.get("distributedInfo", {}),
        "rank": rank,
        "world_size": world,
        "pg_count": 1,
        "pg_config": [_pg(world)],
    }
    header["host_name"] = host
    header["trace_id"] = f"{zlib.crc32(f'{host}{rank}'.encode()):08X}{rank:024X}"
    base = float(tpl.events[0]["ts"])  # relative: 0-based times are shifted below
    origin = 4_969_503_800_000.0 - base
    events = rank_events(tpl, t, rank, pid, origin)
    _seq_fix(events, len(tpl.comm))
    meta = copy.deepcopy(tpl.meta)
    for e in meta:
        if e.get("pid") not in (0, None) and isinstance(e.get("pid"), int) and e["pid"] > 100:
            e["pid"] = pid
    doc = {**header, "traceEvents": meta + events}
    return json.dumps(doc, separators=(",", ":"))


def write_rank(path: Path, text: str, *, truncate: bool = False) -> None:
    if truncate:
        text = text[: int(len(text) * 0.6)]
    with gzip.open(path, "wt", compresslevel=1) as f:
        f.write(text)


def build(folder: Path, spec: Spec, *, source: Path = SOURCE) -> Job:
    """Write ``spec``'s job into ``folder`` (made; must be empty or absent)."""
    if spec.size not in SIZES:
        raise SystemExit(f"--size must be one of {', '.join(SIZES)}")
    if spec.ranks < 2 or spec.ranks % spec.per_node:
        raise SystemExit("--ranks must be at least 2 and a multiple of --per-node")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tpl = template(spec.size, source)
    faults = place_faults(spec)
    timing = simulate(spec, tpl, faults)
    nodes = spec.ranks // spec.per_node
    hosts = [f"node{n:04d}" for n in range(nodes)]
    slow = faults["slow_node"]
    job = Job(
        folder=str(folder),
        ranks=spec.ranks,
        per_node=spec.per_node,
        steps=spec.steps,
        size=spec.size,
        hosts=hosts,
        straggler=faults["straggler"],
        slow_node=slow,
        slow_node_ranks=[]
        if slow is None
        else list(range(slow * spec.per_node, (slow + 1) * spec.per_node)),
        stall=faults["stall"],
        truncated=faults["truncated"],
        missing=faults["missing"],
    )
    for r in range(spec.ranks):
        if r == job.missing:
            continue
        host, pid = hosts[r // spec.per_node], 4000 + r % spec.per_node
        path = folder / f"rank{r}.{host}_{pid}.{1795826530285621249 + r}.pt.trace.json.gz"
        text = trace_text(tpl, timing, r, spec.ranks, host, pid)
        write_rank(path, text, truncate=r == job.truncated)
        job.files[r] = path.name
    truth = folder.with_name(folder.name + ".faults.json")
    truth.write_text(json.dumps(asdict(job), indent=1))
    return job
