"""What the light timeline pass itself costs the step: paired against unprofiled windows.

``tracekit collect`` compares its light pass with the unprofiled steps it timed a second
earlier. On a host whose speed drifts between those moments, that one comparison mixes
the pass's own cost with the drift (``benchmarks/timeline_overhead.py --rounds``). This
script separates them: windows of the same step function with the same schedule,
unprofiled and under each light-pass recorder, interleaved round by round (the order
rotated and reversed every other round: A B C, C B A, ...), each started after
``gc.collect()``, the recorded steps timed with CUDA events (``perf_counter`` on CPU, where
a light pass has nothing to record: a smoke). The recorders (``--pass``):

* ``cupti``: the kernels-only recorder (``collectors/cupti_pass.py``: CUPTI's kernel,
  memcpy and memset records through cupti-python, no runtime/driver API records, no
  Kineto) — what collect runs where CUPTI takes it;
* ``kineto``: Kineto's CUDA-only pass (:class:`~tracekit.collectors.passes.LightProfiler`),
  the fallback;
* ``both`` (default): the two, paired against the same unprofiled windows.

    python benchmarks/light_pass_cost.py --configs fp32-naive,bf16-sdpa   # gpt2-small b8 s128
    python benchmarks/light_pass_cost.py --pass cupti --dtype bf16 --attention sdpa
    python benchmarks/light_pass_cost.py --external-correlation   # and Kineto as torch defaults
    python benchmarks/light_pass_cost.py --device cpu --preset tiny --batch 2 --seq 32 --rounds 2
    python benchmarks/light_pass_cost.py --script -- python \\
        benchmarks/user_scripts/resnet50_train.py --iters 100000      # a user's script

``--script`` runs the command in this process as ``tracekit run`` does (the script's own
loop, steps ended by ``--step-marker``, default the optimizer's step) and opens the same
windows over its steps: the script must run at least as many steps as the line it prints
asks for (it is stopped once the rounds are done).

Prints one line per round and, per configuration and recorder, two estimates: the ratio of
the medians of all recorded steps (``ratio``), and the median of the per-round ratios of
windows run back to back (``paired ratio``, with its interquartile range), which cancels
drift between rounds; then a table of the paired ratios. Also the spread of the unprofiled
windows and, on Linux, the share of CPU time the hypervisor stole during the run
(``/proc/stat``). The first round (``--discard``) absorbs one-time costs. The cupti windows
also say how many GPU records they wrote per step (0 would mean CUPTI lost its callbacks).
``--launch-cost`` first times a tiny operator on a CPU tensor (no kernel) and on a CUDA
tensor (one launch), without and under a CUDA-only Kineto profiler.
``--external-correlation`` adds the Kineto pass with external correlation on (torch's
default; collect turns it off). With ``--check`` it exits 1 when a recorder's paired ratio
exceeds ``1 + --budget`` (default 0.05, the light pass's target on the GPT configurations).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from tracekit.collectors import markers, script
from tracekit.collectors.config import CollectConfig, resolve_device
from tracekit.collectors.cupti_pass import CuptiUnavailable, KernelsPass, load_cupti
from tracekit.collectors.passes import LightProfiler, profiled_steps
from tracekit.collectors.profiler import Profiler, ProfilerConfig
from tracekit.collectors.session_windows import Window
from tracekit.collectors.train import StepTimer, Workload, build_workload, run_steps

PASSES = {"cupti": ["cupti"], "kineto": ["kineto"], "both": ["kineto", "cupti"]}


def unprofiled_window(wl: Workload, pcfg: ProfilerConfig, start: int) -> list[float]:
    """The same steps as a light window, no profiler; the ones it would record."""
    timer = StepTimer(wl.device)
    run_steps(wl.step, pcfg.steps, start=start, timer=timer)
    return [t for i, t in enumerate(timer.millis()) if pcfg.is_active(i)]


class _WithExternalCorrelation(LightProfiler):
    """The light pass with Kineto's external correlation on (torch's default)."""

    def experimental_config(self) -> Any:
        return None


def make_pass(kind: str, pcfg: ProfilerConfig, out: Path, device: torch.device,
              cupti: Any) -> Profiler:  # fmt: skip
    """The light pass of ``kind``: ``cupti`` (kernels-only), ``kineto`` (CUDA-only), or
    ``kineto+xcorr`` (with external correlation on, as before collect turned it off)."""
    if kind == "cupti":
        return KernelsPass(pcfg, out, device=device, cupti=cupti)
    cls = _WithExternalCorrelation if kind == "kineto+xcorr" else LightProfiler
    return cls(pcfg, out, device=device)


def light_window(
    wl: Workload, pcfg: ProfilerConfig, start: int, out: Path, kind: str, cupti: Any
) -> tuple[list[float], int | None]:
    """One window under the light pass of ``kind``: its recorded steps' times, and the GPU
    records it wrote (cupti; None for Kineto)."""
    if wl.device.type != "cuda":  # nothing to record: time the same loop (smoke)
        return unprofiled_window(wl, pcfg, start), None
    prof = make_pass(kind, pcfg, out, wl.device, cupti)
    ms = profiled_steps(wl.step, prof, start)
    return ms, prof.records if isinstance(prof, KernelsPass) else None


def _per_op_us(x: torch.Tensor, n: int) -> float:
    """Host µs per ``x.add(1)`` over ``n`` calls (a kernel launch each on CUDA)."""
    if x.is_cuda:
        torch.cuda.synchronize(x.device)
    t0 = time.perf_counter()
    for _ in range(n):
        x.add(1)
    if x.is_cuda:
        torch.cuda.synchronize(x.device)
    return (time.perf_counter() - t0) / n * 1e6


def launch_cost(device: torch.device, n: int = 20000, rounds: int = 3) -> dict[str, float]:
    """What a CUDA-only profiler session costs one operator on the host: median µs per op
    of a tiny op on a CPU tensor (no kernel) and on a CUDA tensor (one launch), without and
    with ``activities=[CUDA]``."""
    xs = {"cpu": torch.ones(4), "cuda": torch.ones(4, device=device)}
    for x in xs.values():
        _per_op_us(x, n // 10)
    got: dict[str, list[float]] = {}
    for _ in range(rounds):
        for k, x in xs.items():
            got.setdefault(f"{k} op", []).append(_per_op_us(x, n))
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
            for k, x in xs.items():
                got.setdefault(f"{k} op, CUDA-only profiler", []).append(_per_op_us(x, n))
    return {k: statistics.median(v) for k, v in got.items()}


def cpu_steal() -> tuple[int, int] | None:
    """(steal, total) jiffies of all CPUs from /proc/stat, None where there is none."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    if fields[0] != "cpu" or len(fields) < 9:
        return None
    ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return ticks[7], sum(ticks)


def _iqr(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def order_of(kinds: list[str], r: int) -> list[str]:
    """Round ``r``'s order: rotated by one each round, reversed every other round."""
    order = kinds[r % len(kinds) :] + kinds[: r % len(kinds)]
    return order if r % 2 == 0 else order[::-1]


class Rounds:
    """The windows of one configuration, round by round: each kind's recorded steps, the
    per-round ratios to the unprofiled window, the cupti windows' records per step."""

    def __init__(self, label: str, kinds: list[str], discard: int) -> None:
        self.label, self.kinds, self.discard = label, kinds, discard
        self.steps: dict[str, list[float]] = {k: [] for k in kinds}
        self.paired: dict[str, list[float]] = {k: [] for k in kinds[1:]}
        self.plain_medians: list[float] = []
        self.records: list[float] = []

    def add(self, r: int, got: dict[str, list[float]], records: list[float]) -> None:
        med = {k: statistics.median(v) for k, v in got.items()}
        kept = r >= self.discard
        rec = f"; cupti records/step {statistics.median(records):.0f}" if records else ""
        print(
            f"round {r}: unprofiled {med['plain']:.2f} ms, "
            + ", ".join(f"{k} {med[k]:.2f} ms x{med[k] / med['plain']:.3f}" for k in self.kinds[1:])
            + rec + ("" if kept else " (discarded)"),
            flush=True,
        )  # fmt: skip
        if records and min(records) == 0:
            print("  warning: a cupti window recorded no GPU activity (CUPTI lost its callbacks?)")
        if not kept:
            return
        for k in self.kinds:
            self.steps[k] += got[k]
        for k in self.kinds[1:]:
            self.paired[k].append(med[k] / med["plain"])
        self.plain_medians.append(med["plain"])
        self.records += records

    def report(self) -> list[dict[str, Any]]:
        """Print the estimates; one table row per recorder."""
        rows = []
        for k in self.kinds[1:]:
            pooled = statistics.median(self.steps[k]) / statistics.median(self.steps["plain"])
            lo, hi = _iqr(self.paired[k])
            med = statistics.median(self.paired[k])
            print(f"ratio {k}/unprofiled: {pooled:.3f} (medians of all recorded steps)")
            print(f"paired ratio {k}: {med:.3f} (IQR {lo:.3f}-{hi:.3f}, "
                  f"{len(self.paired[k])} rounds)")  # fmt: skip
            recs = statistics.median(self.records) if k == "cupti" and self.records else None
            n = len(self.paired[k])
            rows.append({"config": self.label, "pass": k, "paired": med, "lo": lo, "hi": hi,
                         "pooled": pooled, "rounds": n, "records": recs})  # fmt: skip
        pm = self.plain_medians
        print(f"unprofiled windows: median {statistics.median(pm):.2f} ms, "
              f"range {min(pm):.2f}-{max(pm):.2f} ms")  # fmt: skip
        return rows


def gpt_rounds(
    a: argparse.Namespace, label: str, kinds: list[str], cupti: Any, tmp: Path
) -> Rounds:
    """The rounds on collect's GPT workload of ``label`` (``DTYPE-ATTENTION``)."""
    dtype, _, attention = label.partition("-")
    cfg = CollectConfig(
        preset=a.preset, device=a.device, dtype=dtype, attention=attention or "naive",
        batch=a.batch, seq=a.seq, ceilings=False,
    )  # fmt: skip
    device = resolve_device(cfg)
    pcfg = ProfilerConfig(wait=1, warmup=1, active=a.active)
    wl = build_workload(cfg, device)
    run_steps(wl.step, a.warmup_steps)
    n = a.warmup_steps
    print(f"== {a.preset} b{a.batch} s{a.seq} {label}", flush=True)
    res = Rounds(label, kinds, a.discard)
    for r in range(a.rounds):
        got: dict[str, list[float]] = {}
        records: list[float] = []
        for kind in order_of(kinds, r):
            gc.collect()
            if kind == "plain":
                got[kind] = unprofiled_window(wl, pcfg, n)
            else:
                got[kind], recs = light_window(wl, pcfg, n, tmp / f"{label}-r{r}-{kind}", kind,
                                               cupti)  # fmt: skip
                if recs is not None:
                    records.append(recs / a.active)
            n += pcfg.steps
        res.add(r, got, records)
    del wl
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return res


class _Plain(Profiler):
    """No profiler at all: a script's unprofiled window (the interface :class:`Window`
    drives)."""

    def __enter__(self) -> _Plain:
        return self

    def step(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def script_rounds(a: argparse.Namespace, kinds: list[str], cupti: Any, tmp: Path) -> Rounds:
    """The rounds over a script's own steps (in this process, as ``tracekit run`` runs it):
    after ``--warmup-steps`` steps, one window after the other, each over the schedule's
    steps, opened and closed at step ends as the session's windows are."""
    cmd = script.parse_command(list(a.command))
    device = torch.device(a.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    pcfg = ProfilerConfig(wait=1, warmup=1, active=a.active)
    plan = [(r, k) for r in range(a.rounds) for k in order_of(kinds, r)]
    windows: list[Window] = []
    for j, (r, kind) in enumerate(plan):
        start = a.warmup_steps + j * pcfg.steps
        out = tmp / f"script-r{r}-{kind}"

        def make(kind: str = kind, out: Path = out) -> Profiler:
            gc.collect()
            if kind == "plain" or device.type != "cuda":
                return _Plain(pcfg, out, device=device)
            return make_pass(kind, pcfg, out, device, cupti)

        windows.append(Window(kind, start, start + pcfg.steps, make, device))
    need = a.warmup_steps + len(plan) * pcfg.steps
    print(f"== script {' '.join(a.command)}: {need} steps ({a.warmup_steps} warm-up, "
          f"{len(plan)} windows of {pcfg.steps})", flush=True)  # fmt: skip
    n = 0

    def on_step() -> None:
        nonlocal n
        n += 1
        for w in windows:
            w.end_step(n)
        if windows[-1].state == "closed":
            raise script.StopScript
        for w in windows:
            w.begin_step(n)

    ended = script.execute(cmd, markers.make_marker(a.step_marker), on_step)
    if windows[-1].state != "closed":
        if ended.traceback:
            sys.stderr.write(ended.traceback)
        raise SystemExit(
            f"light_pass_cost: the script ended ({ended.how}) after {n} of the {need} steps "
            "the rounds need; let it run longer (--iters)"
        )
    res = Rounds("script", kinds, a.discard)
    for r in range(a.rounds):
        mine = [(k, w) for (rr, k), w in zip(plan, windows, strict=True) if rr == r]
        recs = [w.profiler.records / a.active for k, w in mine
                if isinstance(w.profiler, KernelsPass)]  # fmt: skip
        res.add(r, {k: w.ms for k, w in mine}, recs)
    return res


def _table(rows: list[dict[str, Any]]) -> None:
    print("\nconfig        pass          paired  IQR            ratio  rounds  records/step")
    for x in rows:
        recs = f"{x['records']:.0f}" if x["records"] is not None else "-"
        print(f"{x['config']:<13} {x['pass']:<13} {x['paired']:.3f}   {x['lo']:.3f}-{x['hi']:.3f}"
              f"    {x['pooled']:.3f}  {x['rounds']:>6}  {recs:>12}")  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--preset", default="gpt2-small")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--attention", default="naive")
    p.add_argument("--configs", default=None,
                   help="DTYPE-ATTENTION,... run one after the other (e.g. fp32-naive,bf16-sdpa); "
                   "default: --dtype and --attention")  # fmt: skip
    p.add_argument("--pass", dest="passes", choices=sorted(PASSES), default="both")
    p.add_argument("--script", action="store_true",
                   help="time the windows over the steps of the command after --")  # fmt: skip
    p.add_argument("--step-marker", default="optimizer", help="with --script: see tracekit run")
    p.add_argument("--active", type=int, default=4, help="recorded steps per window")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--discard", type=int, default=1, help="first rounds not counted")
    p.add_argument("--warmup-steps", type=int, default=5, help="untimed steps before round 1")
    p.add_argument(
        "--external-correlation", action="store_true",
        help="also time Kineto's pass with its external correlation on (torch's default)",
    )  # fmt: skip
    p.add_argument(
        "--launch-cost", action="store_true",
        help="first measure the CUDA-only profiler's host cost per operator and per launch",
    )  # fmt: skip
    p.add_argument("--check", action="store_true")
    p.add_argument("--budget", type=float, default=0.05)
    p.add_argument("command", nargs=argparse.REMAINDER, help="with --script: -- python script.py …")
    return p


def _recorders(a: argparse.Namespace) -> tuple[list[str], Any]:
    """The light passes to time and cupti-python's module (None where it is not used)."""
    kinds = list(PASSES[a.passes]) + (["kineto+xcorr"] if a.external_correlation else [])
    cupti = None
    if "cupti" in kinds and a.device != "cpu":
        try:
            cupti = load_cupti()
        except CuptiUnavailable as e:
            print(f"cupti: not timed: {e}")
            kinds.remove("cupti")
    return kinds, cupti


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    a = p.parse_args(argv)
    if a.rounds <= a.discard:
        p.error("--rounds must exceed --discard")
    if a.command and a.command[0] == "--":
        a.command = a.command[1:]
    if a.script != bool(a.command):
        p.error("--script needs a command after -- (and a command needs --script)")
    kinds, cupti = _recorders(a)
    if not kinds:
        return 2
    kinds = ["plain", *kinds]
    name = (
        torch.cuda.get_device_name() if a.device != "cpu" and torch.cuda.is_available() else "cpu"
    )
    print(
        f"light pass cost: {name}, torch {torch.__version__}; passes {', '.join(kinds[1:])}; "
        f"schedule wait 1, warmup 1, active {a.active}; {a.rounds} rounds (first {a.discard} "
        "discarded), order rotated and reversed every other round"
    )
    if a.launch_cost and name != "cpu":
        lc = launch_cost(torch.device(a.device))
        print("host µs per operator (median of 3 x 20,000): " + ", ".join(
            f"{k} {v:.2f}" for k, v in lc.items()
        ))  # fmt: skip
    steal0, t0 = cpu_steal(), time.perf_counter()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        if a.script:
            rows += script_rounds(a, kinds, cupti, Path(tmp)).report()
        else:
            for label in (a.configs or f"{a.dtype}-{a.attention}").split(","):
                rows += gpt_rounds(a, label.strip(), kinds, cupti, Path(tmp)).report()
    steal1 = cpu_steal()
    if steal0 and steal1 and steal1[1] > steal0[1]:
        share = 100.0 * (steal1[0] - steal0[0]) / (steal1[1] - steal0[1])
        print(f"host CPU time stolen by the hypervisor during the run: {share:.1f} %")
    _table(rows)
    print(f"wall time {time.perf_counter() - t0:.0f} s")
    over = [x for x in rows if x["paired"] > 1 + a.budget]
    if a.check and over:
        for x in over:
            print(f"over budget: {x['config']} {x['pass']} paired {x['paired']:.3f} > "
                  f"{1 + a.budget:.3f}")  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
