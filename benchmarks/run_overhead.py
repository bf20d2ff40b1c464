"""What ``tracekit run`` adds to a step: its timed (unprofiled) step against the script's own.

Each round runs two fresh processes back to back, the order alternating (A B, B A, …) so
that drift in the host's load or the GPU's clocks hits both sides alike:

* ``plain``: the script as ``python script.py`` runs it. With ``--baseline own``
  (default) it times itself: the convention of ``benchmarks/user_scripts/``, ``--time
  --warmup K --iters N`` prints ``plain step ms: median X`` (one CUDA event per iteration,
  after the optimizer step). With ``--baseline marker`` (any script) tracekit's step
  marker alone times it, one mark per step end (:class:`BoundaryTimer`).
* ``tracekit``: ``tracekit run`` itself (``tracekit.cli.main``, in the child process), with
  one change: the profiler never starts, so the run ends with its timed steps (with
  ``--baseline own`` the script ends there by itself, and the run's status is
  ``incomplete``; its ``metrics.step_time_ms`` is what ``tracekit run`` reports). With
  ``--baseline own`` the script also times itself in that process (``own``): the round
  gives tracekit's figure and the loop's own on the very same steps.

Both sides time the same steps: from the end of step ``warmup`` to the end of step
``warmup + steps``. Prints one line per round, the medians, and the paired ratios (the
median of the per-round ratios and their interquartile range): ``tracekit/plain`` is what
``tracekit run`` reports against the plain loop; ``own/plain`` what running under
tracekit does to the loop itself; ``tracekit/own`` the difference of method, same steps,
same process. (The script's last own interval also holds tracekit's end of the timed
steps — one synchronisation and the optimizer's tensors read — as it records its event
after ``optimizer.step()`` returned: one interval of ``steps``, which the median hardly
sees.)

    python benchmarks/run_overhead.py --rounds 3 --steps 40 -- python \\
        benchmarks/user_scripts/hf_causal_lm_train.py --model llama
    python benchmarks/run_overhead.py --device cpu --threads 1 --steps 1000 -- python \\
        tests/scripts/mlp.py                                   # CPU check (own timing)
    python benchmarks/run_overhead.py --device cpu --baseline marker --threads 1 \\
        --steps 1000 -- python tests/scripts/mlp.py --iters 100000

``--hooks`` instead runs the script once, in this process, under the session with each of
tracekit's hooks timed (``perf_counter``): the host microseconds each costs per step in
the probed warm-up steps and in the timed steps (where only the step marker is left):

    python benchmarks/run_overhead.py --hooks -- python tests/scripts/mlp.py --iters 100000

``benchmarks/gpu_run_overhead.sh`` runs both on the three user scripts (one GPU call).
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tracekit.collectors import markers, script
from tracekit.collectors.session import BoundaryTimer, Probes, Session, SessionConfig

TAG = "RUN_OVERHEAD "
OWN = re.compile(r"plain step ms: median ([0-9.]+)")


def _device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def own_args(warmup: int, steps: int) -> list[str]:
    """The script's own timing over tracekit's timed steps: its events at the ends of steps
    ``warmup`` .. ``warmup + steps`` (its ``--warmup K`` skips the iterations 0..K-1, and
    iteration i ends step i + 1), and ``--iters``: it ends with the last timed step."""
    return ["--time", "--warmup", str(warmup - 1), "--iters", str(warmup + steps)]


def _script_tokens(a: argparse.Namespace) -> list[str]:
    return [*a.command, *(own_args(a.warmup, a.steps) if a.baseline == "own" else [])]


def paired(num: list[float], den: list[float]) -> tuple[float, float, float] | None:
    """The median of the per-round ratios ``num/den`` and their quartiles (None: no round)."""
    ratios = [x / y for x, y in zip(num, den, strict=True)]
    if not ratios:
        return None
    med = statistics.median(ratios)
    if len(ratios) == 1:
        return med, med, med
    q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return med, q1, q3


def _ratio_text(num: list[float], den: list[float]) -> str:
    got = paired(num, den)
    if got is None:
        return "n/a"
    return f"{got[0]:.4f} (IQR {got[1]:.4f}-{got[2]:.4f}, {len(num)} rounds)"


# ------------------------------------------------------------------- children


def child_tracekit(a: argparse.Namespace) -> dict[str, Any]:
    """``tracekit run`` over the warm-up and timed steps: the CLI as a user runs it, the
    profiler's start replaced (the run ends after the timed steps: stopped there with
    ``--baseline marker``; with ``own`` the script ends there by itself)."""
    import tracekit.cli

    stop = a.baseline != "own"

    def no_profiler(self: Session) -> None:
        if stop:
            self.complete = True

    Session._start_profiler = no_profiler  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "run"
        argv = ["run", "-q", "--warmup", str(a.warmup), "--steps", str(a.steps),
                "--device", a.device, "--step-marker", a.step_marker, "--no-ceilings",
                "--no-memory-snapshot", "-o", str(out), "--", *_script_tokens(a)]  # fmt: skip
        code = tracekit.cli.main(argv)
        sys.stdout.flush()
        man = json.loads((out / "manifest.json").read_text()) if out.is_dir() else {}
    st = (man.get("metrics") or {}).get("step_time_ms") or {}
    ended = (man.get("script") or {}).get("ended")
    return {"exit": code, "status": man.get("status"), "ended": ended,
            "tracekit": st.get("median"), "n": st.get("n"), "p10": st.get("p10"),
            "p90": st.get("p90")}  # fmt: skip


def child_marker(a: argparse.Namespace) -> dict[str, Any]:
    """tracekit's step marker alone, one mark per step end over the same steps."""
    cmd = script.parse_command(list(a.command))
    marker = markers.make_marker(a.step_marker)
    timer = BoundaryTimer(_device(a.device))
    n = 0
    ms: list[float] = []

    def on_step() -> None:
        nonlocal n, ms
        n += 1
        if n == a.warmup and timer.device.type == "cuda":
            torch.cuda.synchronize()
        if a.warmup <= n <= a.warmup + a.steps:
            timer.lap()
        if n == a.warmup + a.steps:
            ms = timer.millis()
            raise script.StopScript

    ended = script.execute(cmd, marker, on_step)
    if ended.traceback:
        sys.stderr.write(ended.traceback)
    return {"ended": ended.how, "steps": n, "plain": statistics.median(ms) if ms else None,
            "n": len(ms)}  # fmt: skip


# ------------------------------------------------------------------ the rounds


def parse_side(side: str, stdout: str) -> dict[str, Any]:
    """A process's figures from its output: the child's tagged line, the script's own."""
    out: dict[str, Any] = {}
    for line in stdout.splitlines():
        if line.startswith(TAG):
            got = json.loads(line[len(TAG) :])
            out.update({k: v for k, v in got.items() if k not in ("tracekit", "plain")})
            for k in ("tracekit", "plain"):
                if got.get(k) is not None:
                    out[k] = float(got[k])
        elif (m := OWN.search(line)) is not None:
            out["plain" if side == "plain" else "own"] = float(m.group(1))
    return out


def _side(a: argparse.Namespace, side: str) -> dict[str, Any]:
    """One process of ``side``: its medians (``plain``; ``tracekit`` and ``own``)."""
    if side == "plain" and a.baseline == "own":
        cmd = script.parse_command(_script_tokens(a))
        head = ["-m", str(cmd.module)] if cmd.module else [str(cmd.path)]
        argv = [sys.executable, *cmd.python_flags, *head, *cmd.args]
    else:
        kind = "tracekit" if side == "tracekit" else "marker"
        argv = [sys.executable, __file__, "--child", kind, *_shared_opts(a), "--", *a.command]
    env = dict(os.environ)
    if a.threads:  # both sides alike: a CPU shared with other work is less noisy with one
        env["OMP_NUM_THREADS"] = str(a.threads)
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=a.timeout, env=env)
    out = parse_side(side, p.stdout)
    out["wall_s"] = time.perf_counter() - t0
    want = "plain" if side == "plain" else "tracekit"
    ok = want in out and (side == "plain" or out.get("n") == a.steps)
    if a.baseline == "own" and side == "tracekit":
        ok = ok and "own" in out  # the script ran to its end, under tracekit run
    elif p.returncode != 0:
        ok = False
    if not ok:
        sys.stderr.write(p.stdout[-2000:] + p.stderr[-4000:])
        raise SystemExit(f"run_overhead: the {side} process failed (exit {p.returncode})")
    return out


def _shared_opts(a: argparse.Namespace) -> list[str]:
    return ["--warmup", str(a.warmup), "--steps", str(a.steps), "--baseline", a.baseline,
            "--device", a.device, "--step-marker", a.step_marker]  # fmt: skip


def rounds(a: argparse.Namespace) -> int:
    load0 = os.getloadavg()
    print(f"script: {' '.join(a.command)}; {a.warmup} warm-up + {a.steps} timed steps; "
          f"baseline {a.baseline}; {a.rounds} rounds (+{a.discard} discarded); "
          f"OMP_NUM_THREADS {a.threads or os.environ.get('OMP_NUM_THREADS', 'unset')}; "
          f"load average {load0[0]:.2f} on {os.cpu_count()} CPUs", flush=True)  # fmt: skip
    got: dict[str, list[float]] = collections.defaultdict(list)
    for r in range(-a.discard, a.rounds):
        order = ("plain", "tracekit") if r % 2 == 0 else ("tracekit", "plain")
        res = {side: _side(a, side) for side in order}
        pl, tk = res["plain"], res["tracekit"]
        own = tk.get("own")
        spread = (f" (p10 {tk['p10']:.3f}, p90 {tk['p90']:.3f})"
                  if tk.get("p10") is not None else "")  # fmt: skip
        print(f"round {r}: {order[0]} first; plain {pl['plain']:.3f} ms, tracekit "
              f"{tk['tracekit']:.3f} ms{spread}"
              + (f", own under tracekit {own:.3f} ms" if own is not None else "")
              + f"; run status {tk.get('status')}, wall {pl['wall_s']:.1f} s + "
              f"{tk['wall_s']:.1f} s" + (" (discarded)" if r < 0 else ""), flush=True)  # fmt: skip
        if r < 0:
            continue
        got["plain"].append(pl["plain"])
        got["tracekit"].append(tk["tracekit"])
        if own is not None:
            got["own"].append(own)
    load1 = os.getloadavg()
    med = {k: statistics.median(v) for k, v in got.items()}
    print(f"medians of the rounds: plain {med['plain']:.3f} ms, tracekit {med['tracekit']:.3f} ms"
          + (f", own under tracekit {med['own']:.3f} ms" if "own" in med else ""))  # fmt: skip
    print(f"paired ratio tracekit/plain = {_ratio_text(got['tracekit'], got['plain'])}")
    if len(got["own"]) == len(got["plain"]):
        print(f"paired ratio own/plain = {_ratio_text(got['own'], got['plain'])}  (the loop "
              "itself under tracekit run)")  # fmt: skip
        print(f"paired ratio tracekit/own = {_ratio_text(got['tracekit'], got['own'])}  "
              "(method: same steps, same process)")  # fmt: skip
    print(f"load average at the end {load1[0]:.2f}")
    return 0


# ---------------------------------------------------------------------- --hooks


def hooks(a: argparse.Namespace) -> int:
    """Each hook's host time per step, in the probed warm-up steps and the timed ones.

    Each call is counted in the step in progress when it began (a step end belongs to the
    step it ends); the first step (discovery: one ``gc.get_objects()`` scan) and the step
    ends that change phase (one synchronisation each) are left out of the medians."""
    calls: dict[str, list[tuple[int, float]]] = collections.defaultdict(list)
    sess: Session | None = None

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            step = (sess.n if sess is not None else 0) + 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                calls[name].append((step, time.perf_counter() - t0))

        return wrapper

    names = {
        "Probes._pre_forward (input + memory)": (Probes, "_pre_forward"),
        "Probes._post_forward (memory)": (Probes, "_post_forward"),
        "Probes._pre_step (memory)": (Probes, "_pre_step"),
        "Probes._post_step": (Probes, "_post_step"),
        "OptimizerMarker._post_step": (markers.OptimizerMarker, "_post_step"),
        "step end (the marker's callback)": (markers, "_guarded"),
        "  of which Session.boundary": (Session, "boundary"),
    }
    saved = {k: getattr(obj, attr) for k, (obj, attr) in names.items()}
    for k, (obj, attr) in names.items():
        if attr == "_guarded":  # times the guarded callback it returns
            setattr(obj, attr, lambda f, k=k: timed(k, saved[k](f)))
        else:
            setattr(obj, attr, timed(k, saved[k]))
    try:
        cmd = script.parse_command(list(a.command))
        marker = markers.make_marker(a.step_marker)
        with tempfile.TemporaryDirectory() as d:
            cfg = SessionConfig(out=Path(d) / "run", warmup=a.warmup, steps=a.steps,
                                device=a.device, ceilings=False, memory_snapshot=False,
                                quiet=True)  # fmt: skip
            sess = Session(cfg, workload="script")
            sess.open()

            def on_step() -> None:
                assert sess is not None
                sess.boundary()
                if sess.n == a.warmup + a.steps:
                    raise script.StopScript

            ended = script.execute(cmd, marker, on_step)
            sess.abandon(RuntimeError("benchmark done"))
    finally:
        for k, (obj, attr) in names.items():
            setattr(obj, attr, saved[k])
    if ended.how != "stopped":
        sys.stderr.write(ended.traceback or "")
        raise SystemExit(f"run_overhead: the script ended after {sess.n} steps ({ended.how})")
    print(f"script: {' '.join(a.command)}; device {sess.device}; load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")  # fmt: skip
    print("host us per step: calls per step x the median call")
    w, s = a.warmup, a.steps
    windows = {f"probed warm-up steps 2-{w}": range(2, w + 1),
               f"timed steps {w + 1}-{w + s}": range(w + 1, w + s + 1)}  # fmt: skip
    for label, steps in windows.items():
        print(f"{label} ({len(steps)} steps):")
        total = 0.0
        for k in names:
            got = [t for step, t in calls.get(k, []) if step in steps]
            inner = [t for step, t in calls.get(k, []) if step in steps[:-1]]  # no phase end
            us = len(got) / len(steps) * statistics.median(inner or got) * 1e6 if got else 0.0
            total += 0.0 if k.startswith(" ") else us
            print(f"  {k:40s} {len(got) / len(steps):5.2f} calls {us:9.1f} us")
        print(f"  {'total':40s} {'':11s} {total:9.1f} us")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4, help="processes per side, interleaved")
    ap.add_argument("--discard", type=int, default=0, help="first rounds not counted")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up steps (>= 2), both sides")
    ap.add_argument("--steps", type=int, default=20, help="timed steps, both sides")
    ap.add_argument("--baseline", choices=("own", "marker"), default="own")
    ap.add_argument("--device", default="auto", help="auto, cuda or cpu (tracekit's side)")
    ap.add_argument("--step-marker", default="optimizer")
    ap.add_argument("--threads", type=int, help="OMP_NUM_THREADS for both sides (CPU runs)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per process")
    ap.add_argument("--hooks", action="store_true", help="each hook's cost, in this process")
    ap.add_argument("--child", choices=("tracekit", "marker"), help=argparse.SUPPRESS)
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- python script.py ARGS")
    a = ap.parse_args(argv)
    a.command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not a.command:
        ap.error("give the script after --: -- python script.py ARGS")
    if a.warmup < 2 or a.steps < 2 or a.rounds < 1:
        ap.error("--warmup must be >= 2 (the first step is discovery), --steps >= 2, "
                 "--rounds >= 1")  # fmt: skip
    if a.child:
        res = child_tracekit(a) if a.child == "tracekit" else child_marker(a)
        print(TAG + json.dumps(res), flush=True)
        return 0
    return hooks(a) if a.hooks else rounds(a)


if __name__ == "__main__":
    sys.exit(main())
