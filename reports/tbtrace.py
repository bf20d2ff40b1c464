"""A copy of the trace that TensorBoard's PyTorch profiler plugin (torch-tb-profiler) reads
correctly.

The last released plugin, torch-tb-profiler 0.4.3 (June 2023; deprecated upstream since),
maps event categories to its event types through a fixed table
(``torch_tb_profiler/profiler/trace.py``, ``EventTypeMap``) in which only the old category
``runtime`` is a CUDA runtime call. Current PyTorch writes ``cuda_runtime`` (and
``cuda_driver`` for driver-API launches such as Triton's ``cuLaunchKernel``), so the
plugin never sees a launch, links no kernel to its operator and shows 0 GPU time per
operator. (pytorch/kineto added ``cuda_runtime`` to that table in December 2025, #1166,
shortly before deleting the plugin; no release carries it.)

:func:`plugin_copy` streams the trace through a byte-level substitution of the category
value, ``"cat": "cuda_runtime"`` → ``"cat": "runtime"``, and gzips it. The pattern starts
with an unescaped ``"``, which cannot occur inside a JSON string (a quote there is always
``\\"``), so it only ever matches a real ``"cat"`` key with that value. The file is never
decoded as JSON, so memory stays bounded on traces of any size.

The plugin finds traces as ``<logdir>/<run>/<worker>[.<span>].pt.trace.json[.gz]``.
"""

from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from tracekit.io import atomic_file
from tracekit.parse.reader import BLOCK, iter_bytes

# Every runtime/driver category Kineto writes for a launch or other API call.
CATEGORY = re.compile(
    rb'"cat"(\s{0,8}):(\s{0,8})"(?:cuda|hip|xpu|mtia|privateuse1)_(?:runtime|driver)"'
)
_MAX_MATCH = 64  # longer than any match: the carried tail always holds a partial one
_WORKER = re.compile(r"^(.*?)(\.\d+)?\.pt\.trace\.json(?:\.gz)?$")
LEVEL = 1  # gzip level: ~4x faster than the default 6, ~15 % larger on Kineto traces


@dataclass(frozen=True)
class CopyResult:
    path: Path
    rewritten: int  # category values rewritten
    bytes_in: int  # uncompressed JSON bytes


def plugin_name(trace: Path) -> str:
    """The copy's file name: the plugin's pattern ``<worker>[.<span>].pt.trace.json.gz``."""
    name = trace.name
    m = _WORKER.match(name)
    if m:
        return f"{m.group(1)}{m.group(2) or ''}.pt.trace.json.gz"
    for suf in (".json.gz", ".json", ".gz"):
        if name.endswith(suf):
            name = name[: -len(suf)]
            break
    return f"{name or 'trace'}.pt.trace.json.gz"


def _sub(data: bytes) -> tuple[bytes, int]:
    return CATEGORY.subn(rb'"cat"\1:\2"runtime"', data)


def plugin_copy(trace: Path, dest_dir: Path, block: int = BLOCK) -> CopyResult:
    """Write ``dest_dir/<worker>.pt.trace.json.gz`` with runtime categories renamed.

    Written under a temporary name and renamed into place (atomic)."""
    final = dest_dir / plugin_name(trace)
    n_sub = 0
    n_in = 0
    with atomic_file(final) as tmp, open(tmp, "wb") as f:
        comp = zlib.compressobj(LEVEL, zlib.DEFLATED, zlib.MAX_WBITS | 16)
        carry = b""
        for data in iter_bytes(trace, block):
            n_in += len(data)
            buf = carry + data
            cut = max(0, len(buf) - _MAX_MATCH)
            # a match that straddles the cut is completed in this round
            for m in CATEGORY.finditer(buf, max(0, cut - _MAX_MATCH)):
                if m.start() < cut < m.end():
                    cut = m.end()
            head, n = _sub(buf[:cut])
            n_sub += n
            f.write(comp.compress(head))
            carry = buf[cut:]
        tail, n = _sub(carry)
        n_sub += n
        f.write(comp.compress(tail))
        f.write(comp.flush())
        f.flush()
        os.fsync(f.fileno())
    return CopyResult(path=final, rewritten=n_sub, bytes_in=n_in)
