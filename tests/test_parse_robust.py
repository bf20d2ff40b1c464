"""Property-based robustness: mutated real traces parse consistently or fail cleanly,
and parsed counts equal an independent count of the raw events."""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracekit.errors import TraceError
from tracekit.parse import load, parse_tables

from . import tracegen as tg

EXTERNAL = Path(__file__).resolve().parents[2] / "shared" / "external-traces"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _real_traces() -> list[Path]:
    found = sorted(FIXTURES.glob("*/*.pt.trace.json.gz"))  # run folders, not copies
    if EXTERNAL.is_dir():
        found += sorted(EXTERNAL.glob("*.json.gz"))
    return found


def raw_counts(doc: dict[str, Any]) -> Counter[str]:
    """Count events the way the parser's tables should, straight from json.load."""
    names = {
        "kernel": "kernel",
        "gpu_memcpy": "memcpy",
        "gpu_memset": "memset",
        "cpu_op": "ops",
        "user_annotation": "ops",
        "cuda_runtime": "runtime",
        "cuda_driver": "runtime",
    }
    c: Counter[str] = Counter()
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in names:
            c[names[e["cat"]]] += 1
        if e.get("ph") == "i" and e.get("name") == "[memory]":
            c["memory"] += 1
    return c


def _id(p: Path) -> str:
    return p.name if p.parent == EXTERNAL else p.parent.name


@pytest.mark.parametrize("path", _real_traces(), ids=_id)
def test_counts_equal_raw_event_counts(path: Path) -> None:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    want = raw_counts(doc)
    t = load(path)
    got = {
        "kernel": int((t.kernels.kind == "kernel").sum()),
        "memcpy": int((t.kernels.kind == "memcpy").sum()),
        "memset": int((t.kernels.kind == "memset").sum()),
        "ops": len(t.ops),
        "runtime": len(t.runtime),
        "memory": len(t.memory),
    }
    assert got == {k: want.get(k, 0) for k in got}
    launched = t.kernels[t.kernels.runtime_id >= 0]
    if len(launched):
        assert (launched.op_id >= 0).mean() >= 0.99  # link rate


def _mutate(doc: dict[str, Any], rnd: random.Random, how: str) -> bytes:
    ev = [dict(e) for e in doc["traceEvents"]]
    if how == "drop":
        for e in rnd.sample(ev, k=max(1, len(ev) // 5)):
            keys = list(e)
            if keys:
                e.pop(rnd.choice(keys))
    elif how == "types":
        junk: list[Any] = [None, "x", 1.5, [], {}, -7, True]
        for e in rnd.sample(ev, k=max(1, len(ev) // 5)):
            keys = list(e)
            if keys:
                e[rnd.choice(keys)] = rnd.choice(junk)
    elif how == "shuffle":
        rnd.shuffle(ev)
    text = json.dumps({**doc, "traceEvents": ev}, indent=1).encode()
    if how == "truncate":
        text = text[: rnd.randrange(1, len(text))]
    return text


def _consistent(t: Any) -> None:
    n_ops = len(t.ops)
    assert ((t.kernels.op_id >= -1) & (t.kernels.op_id < n_ops)).all()
    assert ((t.ops.parent >= -1) & (t.ops.parent < n_ops)).all()
    assert (t.ops.parent < t.ops.op_id).all()  # parents start first
    assert (t.kernels.dur >= 0).all() and (t.ops.dur >= 0).all()
    assert list(t.kernels.kernel_id) == list(range(len(t.kernels)))
    c = t.meta["counts"]
    assert c["kernels"] + c["memcpy"] + c["memset"] == len(t.kernels)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    seed=st.integers(0, 2**32 - 1), how=st.sampled_from(["drop", "types", "shuffle", "truncate"])
)
def test_mutated_traces_parse_or_fail_cleanly(seed: int, how: str, tmp_path: Path) -> None:
    rnd = random.Random(seed)
    sources = [tg.small_trace()]
    ext = EXTERNAL / "a100_alexnet_train.pt.trace.json.gz"
    if ext.is_file():
        sources.append(json.loads(gzip.decompress(ext.read_bytes())))
    doc = rnd.choice(sources)
    p = tmp_path / f"m{seed}.json"
    p.write_bytes(_mutate(doc, rnd, how))
    try:
        tables = parse_tables(p)
    except TraceError as e:
        assert "\n" not in str(e)
        return
    t = load(p)
    _consistent(t)
    if how == "shuffle":  # order of events must not matter
        ref = parse_tables(tg.write(doc, tmp_path / "ref.json"))
        for (name, a), (_, b) in zip(ref.items(), tables.items(), strict=True):
            assert a.num_rows == b.num_rows, name


# -- damaged values and bytes ------------------------------------------------------------------

BIG = ["9223372036854775808", "-9223372036854775809", "18446744073709551616", "1" + "0" * 30]
BIG += ["9.223372036854776e+18", "1e19", '"9223372036854775808"', "[1, 2]", '"x"', "1e400"]


@pytest.mark.parametrize("value", BIG)
@pytest.mark.parametrize("scanner", ["1", "0"], ids=["msgspec", "native"])
def test_out_of_range_ints_read_as_missing(
    value: str, scanner: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A correlation id (or any int field) beyond int64, or not a number at all: the value
    is read as missing (-1 / null) and counted in meta's bad_values, never a crash."""
    monkeypatch.setenv("TRACEKIT_NO_SCAN", scanner)
    doc = tg.small_trace()
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["args"]["correlation"] = "@BIG@"
    kernel["args"]["registers per thread"] = "@BIG@"
    kernel["args"]["grid"] = ["@BIG@", 1, 1]
    op = next(e for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
    op["args"]["Sequence number"] = "@BIG@"
    op["args"]["flops"] = "@BIG@"
    text = json.dumps(doc).replace('"@BIG@"', value)
    p = tmp_path / "big.json"
    p.write_text(text)
    t = load(p)
    k = t.kernels.set_index("name").loc[kernel["name"]]
    assert k.correlation == -1 and k.runtime_id == -1
    assert k.registers_per_thread is None or k.registers_per_thread != k.registers_per_thread
    assert t.meta["bad_values"]["kernel.correlation"] == 1
    assert t.meta["bad_values"]["kernel.registers per thread"] == 1
    assert t.meta["bad_values"]["kernel.grid"] == 1
    assert t.meta["bad_values"]["cpu_op.Sequence number"] == 1
    assert t.ops.set_index("name").loc[op["name"]].sequence_number == -1
    not_a_float = value in ("[1, 2]", '"x"', "1e400")  # 2**63 and 1e30 are fine as flops
    assert t.meta["bad_values"].get("cpu_op.flops", 0) == not_a_float
