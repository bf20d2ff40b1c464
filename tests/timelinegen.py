"""Light (CUDA-only) timeline traces built to mimic the GPU ones, from real full traces.

On a GPU, ``tracekit collect``'s light pass writes what Kineto records with
``activities=[CUDA]``: runtime and driver calls, kernels, memcpy/memset and their flow
events, no ``cpu_op``, no ``ProfilerStep#N`` (the lead's H100 probe,
``/work/gpu-notes/probe-light-pass.md``), and a ``spin_kernel`` launch (``torch.cuda._sleep(1)``)
at the start of each recorded step plus one closing the last. The full pass launches the
same markers inside its ``ProfilerStep#N`` spans. These helpers add those markers to a
real full trace and derive its light pass from it — keeping the event categories, argument
names and correlation ids Kineto writes — optionally with a shorter host side (the
light pass's point) or different work.
"""

from __future__ import annotations

import gzip
import itertools
import json
import shutil
from pathlib import Path
from typing import Any

MARKER_NAME = "at::cuda::(anonymous namespace)::spin_kernel(long)"
LIGHT_CATS = {"cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset", "ac2g"}
_CORR = 900_000_000
RENAMED = "tracekit_test_renamed_kernel"


def read(path: Path) -> dict[str, Any]:
    return json.loads(gzip.decompress(path.read_bytes()))  # type: ignore[no-any-return]


def write(doc: dict[str, Any], path: Path) -> Path:
    # json.dumps (C encoder; json.dump's chunked one is pure Python) and fast gzip: these
    # traces are test inputs, written many times per run
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
    return path


def clone(x: Any) -> Any:
    """A deep copy of JSON data (through the C codec: several times copy.deepcopy's speed)."""
    return json.loads(json.dumps(x))


def _gpu(doc: dict[str, Any]) -> tuple[int, int]:
    k = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    return k["pid"], k["args"].get("stream", 7)


def _marker(ts: float, pid: int, tid: int, gpu: tuple[int, int], corr: int) -> list[dict[str, Any]]:
    launch = {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": 2.5,
        "args": {"cbid": 211, "correlation": corr},
    }
    kernel = {"ph": "X", "cat": "kernel", "name": MARKER_NAME, "pid": gpu[0], "tid": gpu[1],
              "ts": ts + 4.0, "dur": 1.1,
              "args": {"queued": 0, "device": 0, "context": 1, "stream": gpu[1],
                       "correlation": corr, "registers per thread": 16, "shared memory": 0,
                       "grid": [1, 1, 1], "block": [1, 1, 1]}}  # fmt: skip
    return [launch, kernel]


def steps_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(
        (
            e
            for e in doc["traceEvents"]
            if str(e.get("name", "")).startswith("ProfilerStep#")
            and e.get("cat") != "gpu_user_annotation"
        ),
        key=lambda e: e["ts"],
    )


def with_markers(doc: dict[str, Any]) -> dict[str, Any]:
    """The full pass as collect records it: a marker launched at each ProfilerStep's start
    and one closing the last step (inside it), on the step's thread."""
    out = clone(doc)
    gpu = _gpu(doc)
    steps = steps_of(doc)
    corr = _CORR
    marks = [(s["ts"] + 0.5, s) for s in steps] + [
        (steps[-1]["ts"] + steps[-1]["dur"] - 3.0, steps[-1])
    ]
    for ts, s in marks:
        corr += 1
        launch, kernel = _marker(ts, s["pid"], s["tid"], gpu, corr)
        kernel["ts"] = max(kernel["ts"], _stream_free(doc, gpu, ts))
        out["traceEvents"] += [launch, kernel]
    return out


def _stream_free(doc: dict[str, Any], gpu: tuple[int, int], ts: float) -> float:
    """When a marker launched at ``ts`` runs: after everything launched before it on its
    stream, and, when the next activity on the stream waited in the queue (it started
    well after its launch: its predecessors, unrecorded ones too, kept the stream busy),
    just before that one."""
    launch = {e["args"]["correlation"]: e["ts"] for e in doc["traceEvents"]
              if e.get("cat") in ("cuda_runtime", "cuda_driver")
              and "correlation" in e.get("args", {})}  # fmt: skip
    on = [(launch[c], e) for e in doc["traceEvents"]
          if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
          and (e["pid"], e["args"].get("stream")) == gpu
          and (c := e["args"].get("correlation")) in launch]  # fmt: skip
    free = max((e["ts"] + e["dur"] for la, e in on if la < ts), default=0.0)
    nxt = min(((la, e) for la, e in on if la >= ts), key=lambda p: p[0], default=None)
    if nxt is not None and nxt[1]["ts"] > nxt[0] + 20.0:  # it queued
        free = max(free, nxt[1]["ts"] - 1.2)
    return free


def light_of(marked: dict[str, Any], *, host_scale: float = 1.0, drop_kernels: int = 0,
             rename_kernels: int = 0) -> dict[str, Any]:  # fmt: skip
    """The light pass of a full trace with markers: only CUDA activity and launches.
    ``host_scale`` < 1 shrinks every host timestamp about the first marker (a lighter
    host side: the GPU events keep their durations and move with their launches, as far
    as the stream allows); ``drop_kernels`` removes that many non-marker kernels from
    each step (different work); ``rename_kernels`` gives that many kernels of each step
    another name (another kernel at the same launch position)."""
    ev = clone([e for e in marked["traceEvents"]
                if e.get("cat") in LIGHT_CATS or e.get("ph") == "M"])  # fmt: skip
    header = {k: v for k, v in marked.items() if k != "traceEvents"}
    for k in ("record_shapes", "profile_memory", "with_flops", "with_stack", "with_modules"):
        header.pop(k, None)
    if host_scale != 1.0:
        _scale_host(ev, host_scale)
    if drop_kernels:
        _drop(ev, drop_kernels)
    if rename_kernels:
        for e in _per_step(ev, rename_kernels):
            e["name"] = RENAMED
    return {**header, "traceEvents": ev}


def without_markers(light: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    """The light trace of a torch without ``torch.cuda._sleep``: no marker kernels, and
    the host times (``time.time_ns()``) at which they were launched, for the sidecar."""
    marks = [e for e in light["traceEvents"] if e.get("name") == MARKER_NAME]
    corr = {e["args"]["correlation"] for e in marks}
    launches = [e for e in light["traceEvents"] if e.get("cat") == "cuda_runtime"
                and e.get("args", {}).get("correlation") in corr]  # fmt: skip
    base = int(light["baseTimeNanoseconds"])
    starts = sorted(base + round(e["ts"] * 1000) for e in launches)
    gone = {id(e) for e in marks + launches}
    return {**light, "traceEvents": [e for e in light["traceEvents"] if id(e) not in gone]}, starts


def run_folder(src: Path, dst: Path, light: dict[str, Any] | None, full: dict[str, Any],
               *, sidecar: list[int] | None = None,
               metrics: dict[str, Any] | None = None) -> Path:  # fmt: skip
    """A copy of the run folder ``src`` whose trace is ``full`` and whose light timeline
    pass is ``light`` (and its step-start ``sidecar``), as collect writes them."""
    shutil.copytree(src, dst)
    m = json.loads((dst / "manifest.json").read_text())
    arts = m["artifacts"]
    write(full, dst / arts["trace"])
    if light is not None:
        arts["timeline_trace"] = "w.1.timeline.json.gz"
        write(light, dst / arts["timeline_trace"])
    if sidecar is not None:
        arts["timeline_steps"] = "w.1.timeline_steps.json"
        doc = {"format": "tracekit.step_starts", "version": 1, "starts_ns": sidecar}
        (dst / arts["timeline_steps"]).write_text(json.dumps(doc))
    m["metrics"].update(metrics or {})
    (dst / "manifest.json").write_text(json.dumps(m))
    return dst


def _scale_host(ev: list[dict[str, Any]], f: float) -> None:
    """Host calls at ``t0 + f·(t − t0)``; each GPU activity starts no earlier than its
    launch allows (launch + 5 µs) and than its stream's previous activity ends."""
    launches = {e["args"]["correlation"]: e for e in ev
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "args" in e}  # fmt: skip
    t0 = min(e["ts"] for e in launches.values())
    for e in launches.values():
        e["ts"] = t0 + f * (e["ts"] - t0)
    gpu = sorted((e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                 key=lambda e: e["ts"])  # fmt: skip
    free: dict[Any, float] = {}
    for e in gpu:
        la = launches.get(e["args"].get("correlation"))
        ready = la["ts"] + 5.0 if la is not None else e["ts"]
        key = (e["pid"], e["tid"])
        e["ts"] = max(ready, free.get(key, 0.0))
        free[key] = e["ts"] + e["dur"]
    for e in ev:
        if e.get("cat") == "ac2g" and e.get("id") in launches and e.get("ph") == "s":
            e["ts"] = launches[e["id"]]["ts"]


def _per_step(ev: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """``n`` non-marker kernels from the middle of each step (between two markers)."""
    kernels = [e for e in ev if e.get("cat") == "kernel" and e["name"] != MARKER_NAME]
    marks = sorted(e["ts"] for e in ev if e.get("name") == MARKER_NAME)
    out = []
    for a, b in itertools.pairwise(marks):
        inside = [e for e in kernels if a < e["ts"] < b]
        out += inside[len(inside) // 2 : len(inside) // 2 + n]
    return out


def _drop(ev: list[dict[str, Any]], n: int) -> None:
    gone = {id(e) for e in _per_step(ev, n)}
    ev[:] = [e for e in ev if id(e) not in gone]
