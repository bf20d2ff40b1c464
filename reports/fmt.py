"""Number formatting shared by the terminal, HTML, Markdown and plot renderers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

DASH = "–"


@dataclass(frozen=True)
class Words:
    """What a report calls the device's work: GPU kernels, or a CPU run's work operators
    (``Summary.device_kind``, docs/report.md "CPU runs")."""

    time: str  # the time the class table shares out
    activity: str  # the summed activity behind it
    kernels: str
    kernel: str
    summed: str  # what the time shares are shares of


GPU_WORDS = Words("GPU time", "GPU activity", "kernels", "kernel", "GPU activity time")
CPU_WORDS = Words("CPU time", "operator work", "work operators", "operator", "work-operator time")


def words(sm: Any) -> Words:
    """:data:`CPU_WORDS` for a CPU run's summary, else :data:`GPU_WORDS`."""
    return CPU_WORDS if getattr(sm, "device_kind", "gpu") == "cpu" else GPU_WORDS


def _ok(v: Any) -> bool:
    if v is None or isinstance(v, bool):
        return False
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def pct(v: Any, digits: int = 1) -> str:
    return f"{float(v):.{digits}f} %" if _ok(v) else DASH


def num(v: Any, digits: int = 2) -> str:
    return f"{float(v):.{digits}f}" if _ok(v) else DASH


def ms(v: Any) -> str:
    """Milliseconds with 3 significant-ish digits."""
    if not _ok(v):
        return DASH
    f = float(v)
    if abs(f) >= 100:
        return f"{f:.0f} ms"
    if abs(f) >= 1:
        return f"{f:.2f} ms"
    return f"{f:.3f} ms"


def us(v: Any) -> str:
    return f"{float(v):.1f} µs" if _ok(v) else DASH


def si(v: Any, unit: str, digits: int = 3) -> str:
    """1.23e12, 'FLOP/s' -> '1.23 TFLOP/s'."""
    if not _ok(v):
        return DASH
    f = float(v)
    for p, e in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(f) >= e:
            return f"{f / e:.{digits}g} {p}{unit}"
    return f"{f:.{digits}g} {unit}"


def nbytes(v: Any) -> str:
    """Binary units: 1536 -> '1.50 KiB'."""
    if not _ok(v):
        return DASH
    f = float(v)
    for p, e in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(f) >= e:
            return f"{f / e:.2f} {p}"
    return f"{f:.0f} B"


def count(v: Any) -> str:
    return f"{int(v):,}" if _ok(v) else DASH


def intensity(v: Any) -> str:
    return f"{float(v):.3g}" if _ok(v) else DASH


def shapes(text: Any) -> str:
    """Compact input shapes: ``[[1024,768],[768,2304],[]]`` -> ``1024x768,768x2304``
    (tensors only; scalars and empty lists dropped). Unparseable text is returned as is."""
    if not isinstance(text, str) or not text:
        return ""
    import json

    try:
        dims = json.loads(text)
    except ValueError:
        return text
    if not isinstance(dims, list):
        return text
    parts = []
    for d in dims:
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            parts.append("x".join(str(x) for x in d))
    return ",".join(parts)
