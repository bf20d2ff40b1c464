"""The report's plots as PNG bytes.

* ``time_share``: GPU time share and FLOP share per class, side by side;
* ``roofline``: log-log attained FLOP/s vs arithmetic intensity, one roof per precision
  pipe, one point per operator group sized by its GPU time;
* ``memory_timeline``: allocated and reserved bytes over time with step boundaries, or the
  per-category stack when the run folder has PyTorch's category export.

This module takes the plots' data out of a :class:`tracekit.summary.Summary` as builtins
and arrays (``*_data``); :mod:`tracekit.reports.draw` draws them, in this process (the
plot functions below) or in a :class:`PlotWorker` process that draws while the report is
still classifying. matplotlib is imported only when a plot is drawn here.
"""

from __future__ import annotations

import contextlib
import pickle
import queue
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd

import tracekit.reports.fmt as fmt
from tracekit.summary import Roofs, Summary, TraceFacts
from tracekit.summary.classes import ORDER as CLASS_ORDER

NAMES = ("time_share", "roofline", "memory_timeline")  # the report's order
GENERATE_NAMES = ("decode_bandwidth",)  # generate runs only


def _draw() -> ModuleType:
    import tracekit.reports.draw as draw  # matplotlib: ~0.3 s to import

    return draw


def _color(cls: str) -> tuple[float, float, float, float]:
    return _draw().class_color(cls, CLASS_ORDER)  # type: ignore[no-any-return]


def time_share_data(cl: pd.DataFrame, words: fmt.Words = fmt.GPU_WORDS) -> dict[str, Any]:
    """From ``Summary.classes`` (``words``: :func:`tracekit.reports.fmt.words` of the run)."""
    return {
        "time": words.time,
        "summed": words.summed,
        "classes": cl["class"].tolist(),
        "order": list(CLASS_ORDER),
        "time_share_pct": cl["time_share_pct"].to_numpy(dtype=float),
        "flop_share_pct": cl["flop_share_pct"].to_numpy(dtype=float),
        "ms_per_step": [fmt.ms(v) for v in cl["ms_per_step"]],
    }


def roofline_points(ops: pd.DataFrame, max_points: int = 400) -> pd.DataFrame:
    """The operator groups a roofline can place: positive, finite intensity and FLOP/s."""
    x = ops["intensity"].to_numpy(dtype=float)
    y = ops["attained_flops"].to_numpy(dtype=float)
    frame: pd.DataFrame = ops[np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)].head(max_points)
    return frame


def roofs_data(roofs: Roofs) -> dict[str, Any]:
    """What :func:`tracekit.reports.draw.roof_lines` draws: the roofs, highest first."""
    pipes = sorted(roofs.peaks.items(), key=lambda kv: -kv[1])
    return {
        "bandwidth": roofs.bandwidth,
        "bandwidth_label": fmt.si(roofs.bandwidth, "B/s") if roofs.bandwidth else "",
        "peaks": [(pipe, peak, fmt.si(peak, "FLOP/s")) for pipe, peak in pipes],
    }


def roof_lines(ax: Any, roofs: Roofs, xs: np.ndarray, ls: str = "-", prefix: str = "") -> None:
    """One roof per precision pipe (min of peak and bandwidth × intensity) on ``ax``."""
    _draw().roof_lines(ax, roofs_data(roofs), xs, ls=ls, prefix=prefix)


def roofline_data(
    operators: pd.DataFrame,
    roofs: Roofs,
    device: str | None,
    max_points: int = 400,
    words: fmt.Words = fmt.GPU_WORDS,
) -> dict[str, Any]:
    """From ``Summary.operators``, ``Summary.roofs`` and the device name of its header."""
    pts = roofline_points(operators, max_points)
    return {
        "time": words.time,
        "intensity": pts["intensity"].to_numpy(dtype=float),
        "attained_flops": pts["attained_flops"].to_numpy(dtype=float),
        "gpu_time_ns": pts["gpu_time_ns"].to_numpy(dtype=float),
        "classes": pts["class"].tolist(),
        "order": list(CLASS_ORDER),
        "roofs": roofs_data(roofs),
        "known": roofs.known,
        "device": device or roofs.device or "unknown device",
    }


def memory_timeline_data(m: TraceFacts) -> dict[str, Any]:
    """From a :class:`Summary`, or the :class:`TraceFacts` known before classifying."""
    tl, cat = m.memory_timeline, m.categories
    return {
        "ts": tl["ts"].to_numpy(dtype=np.int64) if len(tl) else np.zeros(0, dtype=np.int64),
        "allocated": tl["allocated"].to_numpy(dtype=float) if len(tl) else np.zeros(0),
        "reserved": tl["reserved"].to_numpy(dtype=float) if len(tl) else np.zeros(0),
        "categories": None
        if cat is None
        else {
            "names": list(cat.timeline.categories),
            "times_us": cat.timeline.times_us,
            "bytes": cat.timeline.bytes,
            "offset_ns": cat.offset_ns,
        },
        "steps": [int(s) for s in m.steps],
        "step_starts_ns": [int(s) for s in m.step_starts_ns],
        "device": m.memory.device if m.memory is not None else None,
        "kv": None
        if m.kv is None or not m.kv.filled_bytes
        else {
            "starts_ns": [float(t) for t in m.kv.step_starts_ns],
            "filled": [float(b) for b in m.kv.filled_bytes],
            "allocated": float(m.kv.allocated_bytes),
        },
    }


def decode_bandwidth_data(sm: Summary) -> dict[str, Any]:
    """A generate run's per-step bandwidths against the roof and its per-step time split
    (``Summary.generate``; empty arrays for a training run)."""
    g = sm.generate
    cols = ("context", "model_bw", "kernel_bw", "measured_bw", "model_busy_bw", "tpot_ms",
            "model_tpot_ms", "gemm_ms", "attention_ms", "other_ms")  # fmt: skip
    if g is None:
        return {c: np.zeros(0) for c in cols} | {"roof": None, "roof_label": "", "title": ""}
    out: dict[str, Any] = {c: g.per_step[c].to_numpy(dtype=float) for c in cols}
    out["roof"] = g.bandwidth
    out["roof_label"] = fmt.si(g.bandwidth, "B/s") if g.bandwidth else ""
    out["basis"] = g.basis
    m = g.model
    out["title"] = (
        f"{sm.header.device or sm.roofs.device or 'unknown device'}, batch {m.batch}, {m.dtype}"
    )
    return out


DATA: dict[str, Callable[[Summary], dict[str, Any]]] = {
    "time_share": lambda sm: time_share_data(sm.classes, fmt.words(sm)),
    "roofline": lambda sm: roofline_data(
        sm.operators, sm.roofs, sm.header.device, words=fmt.words(sm)
    ),
    "memory_timeline": memory_timeline_data,
    "decode_bandwidth": decode_bandwidth_data,
}


def names(sm: Summary) -> tuple[str, ...]:
    """The plots of this report, in order: the generate ones for a generate run."""
    return NAMES + (GENERATE_NAMES if sm.generate is not None else ())


def time_share(sm: Summary) -> bytes:
    return _draw().time_share(DATA["time_share"](sm))  # type: ignore[no-any-return]


def roofline(sm: Summary, max_points: int = 400) -> bytes:
    data = roofline_data(sm.operators, sm.roofs, sm.header.device, max_points)
    return _draw().roofline(data)  # type: ignore[no-any-return]


def memory_timeline(sm: Summary) -> bytes:
    return _draw().memory_timeline(memory_timeline_data(sm))  # type: ignore[no-any-return]


def all_plots(sm: Summary) -> dict[str, bytes]:
    """name -> PNG bytes, in the report's order."""
    return {name: _draw().PLOTS[name](DATA[name](sm)) for name in names(sm)}


class PlotWorker:
    """Draws plots in a separate Python process, so that the report's own process neither
    imports matplotlib nor waits for the drawing while it has other work.

    ``submit`` hands a plot's data to a thread that sends it, and returns at once (the
    worker reads nothing before matplotlib is imported, and a pipe holds only 64 KiB);
    ``result`` waits for the PNG. A plot the worker could not draw (or a worker that could
    not start, died or hung) is drawn in this process instead, so errors surface here as
    they would without a worker. ``close`` (or leaving the ``with`` block) ends it."""

    TIMEOUT_S = 600.0  # a worker this late is taken for hung: the plot is drawn here

    def __init__(self) -> None:
        self._pending: dict[str, Future[bytes]] = {}
        self._data: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._ended = False  # the worker is gone: every plot is drawn here
        self._outbox: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()
        draw_path = str(Path(__file__).with_name("draw.py"))
        code = (  # the draw module alone, by path: neither tracekit nor pandas is imported
            "import signal, sys, importlib.util as u\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the report ends it\n"
            "sys.path[:] = [p for p in sys.path if p not in ('', '.')]\n"
            f"s = u.spec_from_file_location('tracekit_draw_worker', {draw_path!r})\n"
            "m = u.module_from_spec(s)\n"
            "s.loader.exec_module(m)\n"
            "m.serve()\n"
            "import os\n"
            "os._exit(0)  # every answer is flushed; skip matplotlib's teardown\n"
        )
        self._proc: subprocess.Popen[bytes] | None
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
        except OSError:
            self._proc, self._ended = None, True
            return
        self._threads = [
            threading.Thread(target=self._write, args=(self._proc,), daemon=True),
            threading.Thread(target=self._read, args=(self._proc,), daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _fail_pending(self) -> None:
        """The worker is gone: whatever it still owes is drawn here."""
        with self._lock:
            self._ended = True
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(RuntimeError("plot worker ended"))

    def _write(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None
        stdin = proc.stdin
        try:
            while (job := self._outbox.get()) is not None:
                pickle.dump(job, stdin, protocol=pickle.HIGHEST_PROTOCOL)
                stdin.flush()
        except (OSError, ValueError):
            self._fail_pending()
        finally:
            with contextlib.suppress(OSError):
                stdin.close()  # the worker ends when its input does

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        try:
            while True:
                name, png, error = pickle.load(proc.stdout)
                with self._lock:
                    fut = self._pending.get(name)
                if fut is not None and not fut.done():
                    if png is not None:
                        fut.set_result(png)
                    else:
                        fut.set_exception(RuntimeError(error))
        except (EOFError, OSError, pickle.UnpicklingError, ValueError):
            pass
        finally:
            self._fail_pending()

    def submit(self, name: str, data: dict[str, Any]) -> None:
        fut: Future[bytes] = Future()
        with self._lock:
            self._pending[name] = fut
            self._data[name] = data
            if self._ended:
                fut.set_exception(RuntimeError("no plot worker"))
                return
        self._outbox.put((name, data))

    def result(self, name: str) -> bytes:
        try:
            return self._pending[name].result(timeout=self.TIMEOUT_S)
        except (RuntimeError, TimeoutError):
            return _draw().PLOTS[name](self._data[name])  # type: ignore[no-any-return]

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        self._outbox.put(None)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for t in self._threads:
            t.join(timeout=10)

    def __enter__(self) -> PlotWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "GENERATE_NAMES",
    "NAMES",
    "PlotWorker",
    "all_plots",
    "decode_bandwidth_data",
    "memory_timeline",
    "memory_timeline_data",
    "names",
    "roof_lines",
    "roofline",
    "roofline_data",
    "time_share",
    "time_share_data",
]
