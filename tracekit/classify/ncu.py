"""Nsight Compute: the command that collects the counters and the parser of its output.

Collection (``tracekit collect --counters`` runs :func:`ncu_command`): one training step is
replayed under ``ncu`` between ``cudaProfilerStart``/``Stop`` with the metrics of
:func:`ncu_metrics`, keeping the application's clocks (``--clock-control none``) and
writing ``--csv --page raw`` (one row per profiled kernel, one column per metric, a
second header row with units). With ``once_per_signature`` ncu profiles only the first
launch of each launch configuration (``--filter-mode per-launch-config --launch-count
1``), which cuts the replay time of models whose layers repeat.

FLOPs: tensor-pipe operations (``sm__ops_path_tensor_src_*``, which count 2 per
multiply-add) plus SIMT FLOPs from thread instructions (FMA counted twice: ``2·FFMA +
FADD + FMUL``, likewise for half and double). Bytes: DRAM read + write; L2 traffic
(``lts__t_bytes``) gives the second, hierarchical roofline.

Kernel names are normalised (:func:`base_name`) so that ncu's and Kineto's spellings of
one kernel compare equal (:mod:`tracekit.classify.counters` joins on them).
"""

from __future__ import annotations

import csv
import functools
import io
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd

from tracekit.errors import TraceError

TENSOR_METRICS: tuple[str, ...] = (
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    "sm__ops_path_tensor_src_fp16_dst_fp16.sum",
    "sm__ops_path_tensor_src_fp16_dst_fp32.sum",
    "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
    "sm__ops_path_tensor_src_fp64.sum",
)
SIMT_METRICS: tuple[str, ...] = tuple(
    f"sm__sass_thread_inst_executed_op_{p}{op}_pred_on.sum"
    for p in ("f", "h", "d")
    for op in ("add", "mul", "fma")
)
MEMORY_METRICS: tuple[str, ...] = (
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_bytes.sum",
)
PEAK_METRICS: tuple[str, ...] = (  # constants: no extra replay passes
    "lts__t_bytes.sum.peak_sustained",
    "lts__cycles_elapsed.avg.per_second",
    "dram__bytes.sum.peak_sustained",
    "dram__cycles_elapsed.avg.per_second",
)
TIME_METRIC = "gpu__time_duration.sum"


def ncu_metrics(tensor: Sequence[str] = TENSOR_METRICS) -> list[str]:
    """The metric list for ``ncu --metrics`` (check it with ``ncu --query-metrics``)."""
    return [*tensor, *SIMT_METRICS, *MEMORY_METRICS, TIME_METRIC, *PEAK_METRICS]


def ncu_command(
    target: Sequence[str],
    *,
    log_file: str | None = None,
    once_per_signature: bool = False,
    metrics: Sequence[str] | None = None,
    ncu: str = "ncu",
) -> list[str]:
    """The ``ncu`` command line that profiles ``target`` (e.g. ``['python', '-m', ...]``).

    The target must bracket the step to profile with ``cudaProfilerStart``/``Stop``
    (``torch.cuda.cudart().cudaProfilerStart()``), as ``--profile-from-start off`` waits
    for it. The CSV goes to ``log_file`` (else to stdout, mixed with the program's).
    """
    cmd = [
        ncu,
        "--profile-from-start",
        "off",
        "--clock-control",
        "none",
        "--metrics",
        ",".join(metrics or ncu_metrics()),
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        "--target-processes",
        "all",
    ]
    if once_per_signature:
        cmd += ["--filter-mode", "per-launch-config", "--launch-count", "1"]
    if log_file:
        cmd += ["--log-file", log_file]
    return [*cmd, *target]


# --- parsing ------------------------------------------------------------------------

_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "k": 1e3}
_TIME = {
    "nsecond": 1e-9,
    "ns": 1e-9,
    "usecond": 1e-6,
    "us": 1e-6,
    "msecond": 1e-3,
    "ms": 1e-3,
    "second": 1.0,
    "s": 1.0,
}


def _unit_factor(unit: str) -> float:
    """Factor to base units (bytes, counts, seconds; rates per second)."""
    u = unit.strip()
    if not u or u in ("%", "inst", "cycle", "byte", "sector", "request", "warp", "thread"):
        return 1.0
    if u in _TIME:
        return _TIME[u]
    m = re.fullmatch(r"([KMGT]?)hz", u, re.I)
    if m:
        return _PREFIX[m.group(1).upper()]
    if "/" in u:
        num, den = u.split("/", 1)
        d = _TIME.get(den.strip())
        return _unit_factor(num) / d if d else _unit_factor(num)
    m = re.fullmatch(r"([KMGT]?)(byte|inst|cycle|sector|request|warp|thread|B)", u)
    if m:
        return _PREFIX[m.group(1)]
    raise TraceError(f"Nsight Compute CSV: unknown unit {unit!r}")


def _number(s: str) -> float:
    s = s.strip().strip('"')
    if not s or s.lower() in ("n/a", "nan", "-"):
        return math.nan
    if re.fullmatch(r"-?\d{1,3}(\.\d{3})+(,\d+)?", s):  # 1.234.567,8 (European locale)
        s = s.replace(".", "").replace(",", ".")
    else:
        s = s.replace(",", "")  # 1,234,567.8
    try:
        return float(s)
    except ValueError:
        return math.nan


def _dim3(s: str) -> str:
    nums = re.findall(r"\d+", s)
    nums = [*nums, "1", "1", "1"][:3] if nums else ["", "", ""]
    return ",".join(nums)


_USED_PREFIXES = ("sm__sass_thread_inst_executed", "dram__", "lts__", "gpu__time_duration")

_GENERIC_BASES = {"Kernel", "Kernel2", "kernel", "device_kernel", "kernel_entry"}


def _strip_group(s: str, close: str) -> tuple[str, str]:
    """Split a trailing ``(...)`` or ``<...>`` group off ``s`` (scanning back, nesting-aware)."""
    open_ = "(" if close == ")" else "<"
    depth = {"(": 0, "<": 0}
    for i in range(len(s) - 1, -1, -1):
        c = s[i]
        if c in ")>":
            depth["(" if c == ")" else "<"] += 1
        elif c in "(<":
            depth[c] -= 1
            if c == open_ and depth[c] == 0 and depth["(" if c == "<" else "<"] <= 0:
                return s[:i], s[i + 1 : -1]
    return s, ""


@functools.lru_cache(maxsize=65536)  # a trace has few distinct kernel names, many calls
def base_name(name: str) -> str:
    """Normalised function name of a kernel, the same for ncu's and Kineto's spellings.

    ``void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::Half, …>(…)``
    and ``void at::native::<unnamed>::cunn_SoftMaxForward<(int)8, …>(T1)`` both give
    ``cunn_SoftMaxForward``: the return type, namespaces, template arguments and
    parameters are dropped. Generic wrappers keep their first template argument
    (``cutlass::Kernel2<cutlass_80_…>`` → ``Kernel2<cutlass_80_…>``).
    """
    s = name.strip()
    s = s.replace("(anonymous namespace)", "anon")
    s = re.sub(r"<unnamed>(?=::)", "anon", s)
    targs = ""
    if s.endswith(")"):
        s, _ = _strip_group(s, ")")
    s = s.rstrip()
    if s.endswith(">"):
        s, targs = _strip_group(s, ">")
    m = re.search(r"([A-Za-z_]\w*)\s*$", s)
    if m is None:  # a truncated name ("…<(int)8, c10::BFloat16, float,..."): cut it short
        t = re.split(r"[<(]", s, maxsplit=1)[0].strip()
        m = re.search(r"([A-Za-z_]\w*)\s*$", t)
        return m.group(1) if m else t
    base = m.group(1)
    if base in _GENERIC_BASES and targs:
        first = re.match(r"\s*([\w:]+)", targs)
        if first:
            base += f"<{first.group(1).rsplit('::', 1)[-1]}>"
    return base


def _metric(cols: dict[str, np.ndarray], name: str, n: int) -> np.ndarray:
    """Values of ``name`` (``sm__`` and ``smsp__`` spellings accepted); zeros if absent."""
    for cand in (name, name.replace("sm__", "smsp__", 1), name.replace("smsp__", "sm__", 1)):
        if cand in cols:
            v = cols[cand]
            return np.where(np.isfinite(v), v, 0.0)
    return np.zeros(n)


_TENSOR_RE = re.compile(
    r"^sm__ops_path_tensor_(?:op_(?P<op>\w+?)_)?src_(?P<src>\w+?)(?:_dst_(?P<dst>\w+?))?"
    r"(?:_sparsity_(?P<sp>on|off))?\.sum$"
)
_SRC_PIPE = {
    "fp8": "tensor_fp8", "e4m3": "tensor_fp8", "e5m2": "tensor_fp8", "bf16": "tensor_bf16",
    "fp16": "tensor_fp16", "tf32": "tensor_tf32", "fp64": "tensor_fp64",
}  # fmt: skip
_TYPES = ("bf16", "fp16", "tf32", "fp64", "fp8", "fp6", "fp4", "e4m3", "e5m2", "int8", "int4",
          "int1", "fp32")  # fmt: skip


def _split_src(src: str) -> tuple[str, ...]:
    parts, rest = [], src
    while rest:
        t = next((t for t in _TYPES if rest == t or rest.startswith(t + "_")), None)
        if t is None:
            return (src,)
        parts.append(t)
        rest = rest[len(t) + 1 :]
    return tuple(parts)


def _tensor_columns(names: Sequence[str]) -> list[str]:
    """The tensor-op metrics to sum, without counting an operation twice.

    Chips list nested counters: ``src_bf16_dst_fp32`` contains its ``_sparsity_off`` part
    and the per-instruction ``op_hgmma_…``/``op_hmma_…`` parts; ``src_fp16`` contains
    ``src_fp16_dst_fp16`` and ``…_dst_fp32``; ``src_fp16_bf16_tf32_dst_fp32`` aggregates
    several sources. Keep the broadest of each family, sum disjoint ones.
    """
    ents = []
    for c in names:
        m = _TENSOR_RE.match(c)
        if m:
            ents.append((c, m["op"], _split_src(m["src"]), m["dst"], m["sp"]))

    def covered(e: tuple[str, str | None, tuple[str, ...], str | None, str | None]) -> bool:
        c, op, srcs, dst, sp = e
        for o in ents:
            if o[0] == c:
                continue
            _, op2, srcs2, dst2, sp2 = o
            same_src = srcs2 == srcs or (len(srcs) == 1 and len(srcs2) == 1 and srcs == srcs2)
            if not same_src:
                continue
            broader_dst = dst2 is None or dst2 == dst
            broader_op = op2 is None or op2 == op
            broader_sp = sp2 is None or sp2 == sp
            if broader_dst and broader_op and broader_sp and (op2, dst2, sp2) != (op, dst, sp):
                return True
        return False

    keep = [e for e in ents if not covered(e)]
    singles = {e[2][0] for e in keep if len(e[2]) == 1}
    keep = [e for e in keep if len(e[2]) == 1 or not (set(e[2]) & singles)]
    return [e[0] for e in keep]


def _tensor_pipe(metric: str) -> str | None:
    m = _TENSOR_RE.match(metric)
    if m is None:
        return None
    srcs = _split_src(m["src"])
    return _SRC_PIPE.get(srcs[0]) if len(srcs) == 1 else None


def read_ncu_csv(source: str | Path) -> pd.DataFrame:
    """Parse ``ncu --csv --page raw`` output (a path, or the text itself) into counters.

    Lines that are not CSV (``==PROF==`` messages, the program's own output) are skipped;
    the units row scales values to bytes, seconds and counts. Columns:
    :data:`tracekit.classify.schema.COUNTERS`.
    """
    header, units, body = _raw_rows(_csv_text(source))
    n = len(body)
    col = {h: i for i, h in enumerate(header)}

    def text_col(h: str) -> list[str]:
        i = col.get(h)
        return [r[i] if i is not None and i < len(r) else "" for r in body]

    metrics = _metrics(col, units, body)
    tensor, pipe = _tensor_flops(metrics, n)
    f32, f16, f64 = (_simt_flops(metrics, p, n) for p in ("f", "h", "d"))
    dram_r = metrics.get("dram__bytes_read.sum", np.full(n, math.nan))
    dram_w = metrics.get("dram__bytes_write.sum", np.full(n, math.nan))

    def peak(bytes_metric: str, clock_metric: str) -> np.ndarray:
        a, b = metrics.get(bytes_metric), metrics.get(clock_metric)
        return a * b if a is not None and b is not None else np.full(n, math.nan)

    names = text_col("Kernel Name")
    out = pd.DataFrame(
        {
            "ncu_id": [int(x) for x in text_col("ID")],
            "kernel_name": names,
            "base_name": [base_name(s) for s in names],
            "grid": [_dim3(s) for s in text_col("Grid Size")],
            "block": [_dim3(s) for s in text_col("Block Size")],
            "device": [int(x) if x.strip().isdigit() else -1 for x in text_col("Device")],
            "stream": [int(x) if x.strip().isdigit() else -1 for x in text_col("Stream")],
            "duration": metrics.get(TIME_METRIC, np.full(n, math.nan)) * 1e9,  # s → ns
            "tensor_flops": tensor,
            "simt_flops_fp32": f32,
            "simt_flops_fp16": f16,
            "simt_flops_fp64": f64,
            "flops": tensor + f32 + f16 + f64,
            "tensor_pipe": pipe,
            "dram_read": dram_r,
            "dram_write": dram_w,
            "dram_bytes": dram_r + dram_w,
            "l2_bytes": metrics.get("lts__t_bytes.sum", np.full(n, math.nan)),
            "l2_peak_bw": peak(
                "lts__t_bytes.sum.peak_sustained", "lts__cycles_elapsed.avg.per_second"
            ),
            "dram_peak_bw": peak(
                "dram__bytes.sum.peak_sustained", "dram__cycles_elapsed.avg.per_second"
            ),
        }
    )
    out["device"] = out["device"].astype(np.int32)
    return cast(pd.DataFrame, out)


def _csv_text(source: str | Path) -> str:
    """The CSV text of ``source``: a file's contents, or ``source`` itself."""
    if isinstance(source, Path) or (
        isinstance(source, str) and "\n" not in source and Path(source).exists()
    ):
        try:
            return Path(source).read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            raise TraceError(f"cannot read Nsight Compute CSV {source}: {e.strerror}") from e
    return str(source)


def _raw_rows(text: str) -> tuple[list[str], list[str], list[list[str]]]:
    """Header, units and the kernel rows of ``--page raw`` CSV text."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    head = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if head is None:
        raise TraceError(
            "not an Nsight Compute CSV: no '\"ID\",…' header row "
            "(expected ncu --csv --page raw output)"
        )
    rows = list(csv.reader(io.StringIO("\n".join(lines[head:]))))
    header = rows[0]
    if "Kernel Name" not in header or ("Metric Name" in header and "Metric Value" in header):
        raise TraceError("Nsight Compute CSV is not in --page raw layout (one column per metric)")
    body = rows[1:]
    units = [""] * len(header)
    if body and not body[0][0].strip():
        units, body = (body[0] + [""] * len(header))[: len(header)], body[1:]
    return header, units, [r for r in body if r and r[0].strip().isdigit()]


def _metrics(col: dict[str, int], units: list[str], body: list[list[str]]) -> dict[str, np.ndarray]:
    """Every metric column (``a__b`` names) in base units."""
    metrics: dict[str, np.ndarray] = {}
    for h, i in col.items():
        if "__" not in h:
            continue
        try:
            f = _unit_factor(units[i])
        except TraceError:
            # --page raw also prints device__attribute_* and launch__* columns in units such
            # as "block"; only the metrics the roofline reads must have a known unit.
            if h.startswith(_USED_PREFIXES) or _TENSOR_RE.match(h):
                raise
            continue
        metrics[h] = np.array([_number(r[i]) if i < len(r) else math.nan for r in body]) * f
    return metrics


def _tensor_flops(metrics: dict[str, np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Tensor-pipe FLOPs of each kernel and the pipe that did most of them."""
    tensor = np.zeros(n)
    best = np.zeros(n)
    pipe = np.full(n, None, dtype=object)
    for c in _tensor_columns(list(metrics)):
        v = _metric(metrics, c, n)
        tensor += v
        p = _tensor_pipe(c)
        better = v > best
        pipe[better] = p
        best = np.maximum(best, v)
    return tensor, pipe


def _simt_flops(metrics: dict[str, np.ndarray], p: str, n: int) -> np.ndarray:
    """SIMT FLOPs of precision ``p`` (f, h, d) from thread instructions: 2·FMA + ADD + MUL."""

    def g(op: str) -> np.ndarray:
        return _metric(metrics, f"sm__sass_thread_inst_executed_op_{p}{op}_pred_on.sum", n)

    total: np.ndarray = 2.0 * g("fma") + g("add") + g("mul")
    return total
