"""Mutation run: damage real traces byte by byte and check that `tracekit parse` ends
every one in clean output or a one-line error.

Each mutant is a real trace (fixtures/, tests/data/, ../shared/external-traces/) with 1-4
damages inside JSON strings or numbers: a byte replaced by a random byte (mostly invalid
UTF-8), bytes inserted or deleted, a lone UTF-16 surrogate escape, a number made huge
(beyond int64) or turned into text; with ``--events``, structural damage instead
(:func:`damage_events`: events deleted or given another phase, step numbers and
correlation / External ids rewritten). Every mutant is parsed with the native scanner and
with it turned off (TRACEKIT_NO_SCAN=1), through ``tracekit.cli.main`` in worker
processes (one per path, restarted if one dies), and the outcomes are counted:

* ``ok``: exit 0 and all five tables + meta.json written;
* ``error``: exit 2 with one ``tracekit: error: ...`` line and no output folder left;
* anything else is a failure: ``traceback`` (an exception other than TracekitError),
  ``partial`` (output missing or left behind), ``hang`` (over ``--timeout`` s), ``died``
  (the worker was killed, e.g. by a segfault), ``differs`` (the two paths disagree:
  one failed, or their tables differ);
* ``slow-once``: over ``--timeout`` once, then ``ok`` or ``error`` in a fresh worker (a
  busy machine; printed, not counted as a failure).

    python benchmarks/mutate_traces.py                 # 1000 mutants, both paths
    python benchmarks/mutate_traces.py -n 200 --seed 7 --keep /tmp/mutants
    python benchmarks/mutate_traces.py -n 300 --events  # structural damage

Exit status 0 when there is no failure. Prints one line per failure and the counts.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXTERNAL = ROOT.parent / "shared" / "external-traces"  # beside the checkout
if not EXTERNAL.is_dir():
    EXTERNAL = Path("/work/shared/external-traces")
TABLES = ("kernels", "ops", "memory", "steps", "runtime")

# A JSON string (with escapes) or a number outside strings.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?')
_HUGE = (b"9223372036854775808", b"18446744073709551616", b"9.3e18", b"1e400", b"-1e19")


def sources() -> list[Path]:
    found = sorted((ROOT / "fixtures").glob("*/*.pt.trace.json.gz"))
    found += sorted((ROOT / "tests" / "data").glob("*.pt.trace.json.gz"))
    if EXTERNAL.is_dir():
        found += sorted(EXTERNAL.glob("*.json.gz"))
    return found


def _token(buf: bytearray, rnd: random.Random) -> re.Match[bytes] | None:
    """A string or number near a random position. Tokens are read from the start of that
    line, which is outside any string (JSON strings hold no raw newline), so a match is a
    real string, not the text between two of them."""
    start = buf.rfind(b"\n", 0, rnd.randrange(len(buf))) + 1
    found = None
    for k, m in enumerate(_TOKEN.finditer(buf, start)):
        found = m
        if k >= 40 or rnd.random() < 0.1:
            break
    return found


def damage(text: bytes, rnd: random.Random, n: int = 1) -> bytes:
    """``text`` with ``n`` damages, each inside one JSON string or number."""
    buf = bytearray(text)
    for _ in range(n):
        m = _token(buf, rnd)
        if m is None:
            break
        a, b = m.span()
        if buf[a : a + 1] == b'"' and b - a > 2:
            pos = rnd.randrange(a + 1, b - 1)  # inside the quotes
            how = rnd.choice(["high", "high", "byte", "insert", "delete", "surrogate"])
            if how == "high":  # invalid UTF-8: a lone continuation or lead byte
                buf[pos] = rnd.randrange(0x80, 0x100)
            elif how == "byte":
                buf[pos] = rnd.randrange(0, 0x100)
            elif how == "insert":
                buf[pos:pos] = bytes(rnd.randrange(0x80, 0x100) for _ in range(rnd.randint(1, 3)))
            elif how == "delete":
                del buf[pos]
            else:
                buf[pos:pos] = rb"\ud8%02x" % rnd.randrange(0x100)
        else:
            how = rnd.choice(["huge", "digit", "text", "insert"])
            if how == "huge":
                buf[a:b] = rnd.choice(_HUGE)
            elif how == "digit":
                buf[rnd.randrange(a, b)] = rnd.choice(b"0123456789.-eE+")
            elif how == "text":
                buf[a:b] = b'"' + bytes(buf[a:b]) + b'"'
            else:
                buf[b:b] = b"9" * rnd.randint(1, 25)
    return bytes(buf)


# Structural damage (--events): whole events lost or retyped, step numbers and ids rewritten.
_CATS = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy",
         "gpu_memset", "python_function", "ac2g", "fwdbwd", "cpu_instant_event")  # fmt: skip
_PHASES = ("i", "B", "E", "b", "f", "s", "M", "C", "", "x", None)
_IDS = (-1, 0, 1, 7, 2**31, 2**62, 2**63 - 1, -(2**63), 2**63, 2**64, "7", "x", 1.5, None)


def _step_suffix(rnd: random.Random) -> str:
    return rnd.choice([str(rnd.randrange(2**31)), str(2**31), str(2**63), "9" * rnd.randint(19, 80),
                       "", "x", "-1", "1.5", "0" * 30 + "3", str(rnd.randint(0, 3))])  # fmt: skip


def damage_events(text: bytes, rnd: random.Random, n: int = 1) -> bytes:
    """``text`` (a trace) with ``n`` structural damages: the events of a category (all, or a
    share) deleted or given another phase, step markers renumbered (beyond int32/int64,
    not numbers), correlation or External ids rewritten (pointing elsewhere, beyond int64,
    not numbers). Damages of the kinds that left a runtime table empty under kernels."""
    doc = json.loads(text)
    ev = [dict(e) for e in doc["traceEvents"] if isinstance(e, dict)]
    for _ in range(n):
        how = rnd.choice(["delete", "phase", "step", "correlation", "External id"])
        cat, share = rnd.choice(_CATS), rnd.choice([1.0, 1.0, 0.5, 0.05])
        hit = [e for e in ev if e.get("cat") == cat and rnd.random() < share]
        if how == "delete":
            gone = {id(e) for e in hit}
            ev = [e for e in ev if id(e) not in gone]
        elif how == "phase":
            for e in hit:
                e["ph"] = rnd.choice(_PHASES)
        elif how == "step":
            for e in ev:
                if str(e.get("name", "")).startswith("ProfilerStep#") and rnd.random() < 0.7:
                    e["name"] = "ProfilerStep#" + _step_suffix(rnd)
        else:
            for e in hit:
                if isinstance(e.get("args"), dict) and how in e["args"]:
                    e["args"] = {**e["args"], how: rnd.choice(_IDS)}
    return json.dumps({**doc, "traceEvents": ev}).encode()


# -- worker: parse files in-process through the CLI's main(), one JSON line per file -------

_WORKER = r"""
import contextlib, io, json, signal, sys, traceback
from tracekit.cli import main

def alarm(*_):
    raise TimeoutError("hang")

signal.signal(signal.SIGALRM, alarm)
for line in sys.stdin:
    src, out = json.loads(line)
    err = io.StringIO()
    rec = {"src": src}
    signal.alarm(int(sys.argv[1]))
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rec["rc"] = main(["parse", src, "-o", out])
    except TimeoutError:
        rec["rc"], rec["exc"] = None, "hang"
    except BaseException as e:
        rec["rc"], rec["exc"] = None, type(e).__name__ + ": " + str(e)[:200]
        rec["where"] = traceback.format_exc().strip().splitlines()[-3][:200]
    finally:
        signal.alarm(0)
    rec["err"] = err.getvalue()
    print(json.dumps(rec), flush=True)
"""


class Worker:
    """A process that parses files through ``tracekit.cli.main``, with the native scanner
    (``native``) or without (``msgspec``); restarted when it dies or hangs."""

    def __init__(self, path: str, timeout: int) -> None:
        self.path, self.timeout = path, timeout
        self.proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        if self.proc is None or self.proc.poll() is not None:
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
            env.pop("TRACEKIT_NO_SCAN", None)
            if self.path == "msgspec":
                env["TRACEKIT_NO_SCAN"] = "1"
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER, str(self.timeout)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
                cwd=ROOT,
            )
        return self.proc

    def parse(self, src: Path, out: Path) -> dict[str, Any]:
        proc = self._start()
        assert proc.stdin and proc.stdout
        try:
            proc.stdin.write(json.dumps([str(src), str(out)]) + "\n")
            proc.stdin.flush()
        except BrokenPipeError:
            pass
        # The worker's own alarm cannot interrupt C code that holds no Python frame: wait
        # a little longer here, then kill it.
        ready, _, _ = select.select([proc.stdout], [], [], self.timeout + 30)
        line = proc.stdout.readline() if ready else ""
        if not ready:
            proc.kill()
            proc.wait()
            return {"src": str(src), "rc": None, "exc": "hang"}
        if not line:  # the worker died (e.g. a segfault in the native scanner)
            return {"src": str(src), "rc": None, "exc": f"worker died (status {proc.wait()})"}
        return json.loads(line)  # type: ignore[no-any-return]

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin
            self.proc.stdin.close()
            self.proc.wait()


def _digest(out: Path) -> str:
    h = hashlib.sha256()
    for name in TABLES:
        h.update((out / f"{name}.parquet").read_bytes())
    meta = json.loads((out / "meta.json").read_text())
    meta.pop("source", None)
    h.update(json.dumps(meta, sort_keys=True).encode())
    return h.hexdigest()


def classify(rec: dict[str, Any], out: Path) -> tuple[str, str | None]:
    """(outcome, digest of the output or None)."""
    exc = rec.get("exc")
    if exc == "hang":
        return "hang", None
    if exc is not None and exc.startswith("worker died"):
        return "died", None
    if exc is not None:
        return "traceback", None
    err = rec.get("err", "")
    if rec["rc"] == 0:
        complete = all((out / f"{n}.parquet").is_file() for n in TABLES)
        if not complete or not (out / "meta.json").is_file():
            return "partial", None
        return "ok", _digest(out)
    one_line = err.count("\n") == 1 and err.startswith("tracekit: error: ")
    if rec["rc"] == 2 and one_line and not out.exists():
        return "error", None
    return "partial" if out.exists() else "traceback", None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=1000, help="number of mutants")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=int, default=120, help="seconds per parse before 'hang'")
    p.add_argument("--keep", type=Path, default=None, help="keep failing mutants here")
    p.add_argument("--paths", default="native,msgspec", help="native, msgspec or both")
    p.add_argument("--events", action="store_true", help="structural damage (damage_events)")
    a = p.parse_args(argv)
    srcs = sources()
    if not srcs:
        print("mutate_traces: no traces found", file=sys.stderr)
        return 2
    texts = {s: gzip.decompress(s.read_bytes()) for s in srcs}
    paths = a.paths.split(",")
    workers = {name: Worker(name, a.timeout) for name in paths}
    counts: Counter[str] = Counter()
    failures = 0
    work = Path(tempfile.mkdtemp(prefix="tracekit-mutate-"))
    t0 = time.perf_counter()
    try:
        for i in range(a.n):
            rnd = random.Random(a.seed * 1_000_003 + i)
            src = srcs[i % len(srcs)]
            mutant = work / f"m{i}.pt.trace.json"
            how = damage_events if a.events else damage
            mutant.write_bytes(how(texts[src], rnd, rnd.randint(1, 4)))
            digests = {}
            failed = False
            for name, w in workers.items():
                out = work / f"out-{name}"
                rec = w.parse(mutant, out)
                outcome, digests[name] = classify(rec, out)
                if outcome == "hang":  # once more in a fresh worker: a busy machine or real?
                    w.kill()
                    shutil.rmtree(out, ignore_errors=True)
                    retry, digests[name] = classify(w.parse(mutant, out), out)
                    if retry != "hang":
                        print(f"m{i} ({src.name}) {name}: over {a.timeout} s once, then {retry}")
                        outcome = "slow-once"
                counts[f"{name}:{outcome}"] += 1
                if outcome not in ("ok", "error", "slow-once"):
                    failed = True
                    detail = rec.get("exc") or rec.get("err", "").strip()[:200]
                    print(f"m{i} ({src.name}) {name}: {outcome}: {detail} {rec.get('where', '')}")
                shutil.rmtree(out, ignore_errors=True)
            if len(digests) == 2 and len(set(digests.values())) != 1:
                counts["differs"] += 1
                failed = True
                print(f"m{i} ({src.name}): native and msgspec disagree: {digests}")
            failures += failed
            if failed and a.keep is not None:
                a.keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(mutant, a.keep / mutant.name)
            mutant.unlink()
    finally:
        for w in workers.values():
            w.close()
        shutil.rmtree(work, ignore_errors=True)
    secs = time.perf_counter() - t0
    print(f"\n{a.n} mutants of {len(srcs)} traces, seed {a.seed}, {secs:.0f} s")
    for k in sorted(counts):
        print(f"  {k:24} {counts[k]:6}")
    print(f"mutants with a failure: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
