"""The model's parameters as a bare trace shows them, for the optimizer's tensor lists.

The profiler drops the shapes of long tensor lists, so a foreach/fused optimizer step
(``_foreach_lerp_``, ``_fused_adamw_`` over 148 tensors) has no recorded size. The trace
still tells: every backward pass calls ``torch::autograd::AccumulateGrad`` once per
parameter, with the parameter's shape and dtype; and PyTorch's ``multi_tensor_apply``
runs one block per 64 Ki-element chunk of each tensor, so a list of tensors of sizes
``n_i`` takes exactly ``Σ ceil(n_i / 65536)`` blocks. A list operator whose
multi_tensor_apply kernels ran that many blocks holds those tensors.

Candidates: all parameters, those with two or more dimensions and those with fewer (the
usual weight-decay / no-decay parameter groups of nanoGPT and Hugging Face), each of one
backward pass (with gradient accumulation, AccumulateGrad runs once per micro-batch). A
candidate whose tensors are all under one chunk is left out: it takes as many blocks as a
list of as many scalars (a capturable optimizer's step counts), so the count would not
tell them apart.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass

import pandas as pd

from tracekit.classify.families.inputs import TYPE_BYTES

MTA_CHUNK = 65536  # elements per block of PyTorch's multi_tensor_apply (kChunkSize)
ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"


@dataclass(frozen=True)
class ParamLists:
    """What an optimizer tensor list can hold: ``by_blocks`` maps the multi_tensor_apply
    block count of a list to its element count and a description; ``itemsize`` is the
    parameters' element size where they share one."""

    by_blocks: dict[int, tuple[int, str]]
    itemsize: int | None


def _shapes(ops: pd.DataFrame) -> tuple[list[tuple[int, ...]], set[str]] | None:
    """Shapes and dtypes of the AccumulateGrad calls of the first step that has any."""
    acc = ops[ops["name"] == ACCUMULATE_GRAD]
    if not len(acc) or "input_dims" not in acc:
        return None
    if "step" in acc and (acc["step"] >= 0).any():
        acc = acc[acc["step"] == acc.loc[acc["step"] >= 0, "step"].min()]
    shapes: list[tuple[int, ...]] = []
    for text in acc["input_dims"]:
        try:
            dims = json.loads(str(text))
        except ValueError:
            return None
        first = dims[0] if isinstance(dims, list) and dims else None
        if not isinstance(first, list) or not all(isinstance(d, int) for d in first):
            return None
        shapes.append(tuple(first))
    types: set[str] = set()
    if "input_types" in acc:
        for text in acc["input_types"].dropna():
            try:
                t = json.loads(str(text))
            except ValueError:
                continue
            if t:
                types.add(str(t[0]))
    return shapes, types


def trace_params(ops: pd.DataFrame | None) -> ParamLists | None:
    """The candidate optimizer lists of the trace's parameters (None: no AccumulateGrad
    call with shapes)."""
    if ops is None or not len(ops):
        return None
    got = _shapes(ops)
    if got is None:
        return None
    shapes, types = got
    counts = Counter(shapes)
    passes = math.gcd(*counts.values())  # backward passes (micro-batches) per step
    by_blocks: dict[int, tuple[int, str]] = {}
    ambiguous: set[int] = set()
    for k in (d for d in range(1, passes + 1) if passes % d == 0):
        groups = {
            "parameters": list(counts.items()),
            "parameters with 2+ dims": [(s, c) for s, c in counts.items() if len(s) >= 2],
            "parameters with < 2 dims": [(s, c) for s, c in counts.items() if len(s) < 2],
        }
        for what, members in groups.items():
            if not members:
                continue
            numel = sum(math.prod(s) * c // k for s, c in members)
            blocks = sum(math.ceil(math.prod(s) / MTA_CHUNK) * c // k for s, c in members)
            if blocks == sum(c // k for _, c in members):
                # every tensor under one chunk: as many blocks as a list of as many scalars
                # (a capturable optimizer's step counts) would take
                continue
            if blocks in by_blocks and by_blocks[blocks][0] != numel:
                ambiguous.add(blocks)
            by_blocks.setdefault(blocks, (numel, what))
    for b in ambiguous:
        del by_blocks[b]
    sizes = {TYPE_BYTES[t] for t in types if t in TYPE_BYTES}
    itemsize = sizes.pop() if len(sizes) == 1 else None
    return ParamLists(by_blocks, itemsize)
