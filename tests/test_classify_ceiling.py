"""Roofs are ceilings: a measured roof an operator beats gives way to the spec sheet's; what
is still above 100 % gets a note (classify's ``raise_beaten``, the report's ``roof_note``)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tracekit.classify import classify
from tracekit.classify.ceiling import raise_beaten
from tracekit.classify.devices import Roofline, resolve_roofline
from tracekit.parse import load
from tracekit.summary import summarize
from tracekit.summary.roofs import roof_note

FIX = Path(__file__).parents[1] / "fixtures"
H200 = [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150e9}]
MEASURED = {"ceilings": {"memory_bandwidth_Bps": 4.0e12, "matmul_flops": {"fp32": 50e12}}}


def h200(manifest: dict[str, Any] | None = MEASURED) -> Roofline:
    return resolve_roofline(H200, manifest=manifest)


def ops(*rows: dict[str, Any]) -> pd.DataFrame:
    base = {
        "name": "aten::mm",
        "input_dims": "[[4096, 4096], [4096, 4096]]",
        "class": "gemm",
        "pipe": "simt_fp32",
        "gpu_dur": 1_000_000,
        "attained_flops": 10e12,
        "attained_bw": 100e9,
        "bytes": 200e6,
        "bytes_model": 200e6,
        "cost_note": "",
    }
    return pd.DataFrame([{**base, **r} for r in rows])


def test_nothing_beaten_keeps_the_roof_object() -> None:
    roof = h200()
    assert raise_beaten(roof, ops({})) == (roof, [])


def test_a_gemm_above_the_measured_fp32_roof_raises_it_to_the_spec() -> None:
    roof = h200()
    raised, notes = raise_beaten(roof, ops({"attained_flops": 53e12}))
    assert raised.peaks["simt_fp32"] == 67e12
    assert raised.peak_sources["simt_fp32"].startswith("spec, above the measured 50.0 TFLOP/s")
    assert "aten::mm [[4096, 4096], [4096, 4096]] attains 53.0 TFLOP/s" in notes[0]
    assert raised.bandwidth == 4.0e12  # untouched
    assert notes[0] in raised.notes
    assert raised.ridge("simt_fp32") == pytest.approx(67e12 / 4.0e12)


@pytest.mark.parametrize(
    ("row", "why"),
    [
        ({"class": "elementwise"}, "not a matrix operator"),  # fused Triton FLOPs: modelled
        ({"gpu_dur": 5_000}, "not a matrix operator timed"),  # too short to time a rate
        ({"cost_note": "tensor-list sizes assumed"}, "not a matrix operator"),
    ],
)
def test_weak_evidence_gives_a_note_not_a_roof(row: dict[str, Any], why: str) -> None:
    raised, notes = raise_beaten(h200(), ops({"attained_flops": 60e12, **row}))
    assert raised.peaks["simt_fp32"] == 50e12
    assert len(notes) == 1 and why in notes[0]


def test_a_spec_roof_or_a_spec_below_the_measured_one_stays() -> None:
    # no measured ceilings: the spec's 67 TFLOP/s is the roof, a GEMM at 70 stays above it
    raised, notes = raise_beaten(h200(None), ops({"attained_flops": 70e12}))
    assert raised.peaks["simt_fp32"] == 67e12 and "no higher figure is known" in notes[0]
    # a measured roof above the spec sheet's is kept
    high = {"ceilings": {"memory_bandwidth_Bps": 4.0e12, "matmul_flops": {"fp32": 68e12}}}
    raised, notes = raise_beaten(h200(high), ops({"attained_flops": 70e12}))
    assert raised.peaks["simt_fp32"] == 68e12 and "no higher figure is known" in notes[0]


def test_bandwidth_rises_only_for_traffic_beyond_the_l2_cache() -> None:
    roof = h200()
    assert roof.l2_bytes == 50e6
    # 3 MB at 4.2 TB/s: fits in L2, so the DRAM roof is not in question
    small = {"class": "elementwise", "bytes": 3e6, "bytes_model": 3e6, "attained_bw": 4.2e12}
    raised, notes = raise_beaten(roof, ops(small))
    assert raised.bandwidth == 4.0e12 and "L2 hits" in notes[0]
    # 154 MB written in 34.5 µs (the bf16 fixture's fill_): 4.47 TB/s from DRAM
    big = {"class": "elementwise", "bytes": 213e6, "bytes_model": 154.5e6, "gpu_dur": 34_560}
    big["attained_bw"] = 213e6 / 34.56e-6  # the counters' bytes: more than it writes
    raised, notes = raise_beaten(roof, ops(big))
    assert raised.bandwidth == 4.8e12
    assert raised.bandwidth_source.startswith("spec, above the measured 4.0 TB/s")
    assert "moves at least 4.5 TB/s" in notes[0]  # min(measured, modelled) bytes / time


def test_roof_note() -> None:
    t = pd.DataFrame({"name": ["a", "b", "c"], "roof_pct": [50.0, 101.5, np.nan]})
    note = roof_note(t, {"FLOP rate": 40.0, "bandwidth": None})
    assert note is not None
    assert note.startswith("1 operator above 100 % of its roof (up to 102 %, b)")
    assert roof_note(t.iloc[[0, 2]], {"FLOP rate": 99.9}) is None
    note = roof_note(t.iloc[[0]], {"bandwidth": 120.0})
    assert note is not None and note.startswith("the step's bandwidth at 120 % of its roof")


@cache
def _fp32() -> Any:
    t = load(FIX / "h200-gpt2s-b8-s128-fp32-naive")
    cls = classify(t)
    return cls, summarize(t, cls)


def test_fp32_fixture_gemm_roof_is_the_spec_and_no_gemm_shows_above_it() -> None:
    """The lm_head GEMM ran at 53.1 TFLOP/s against the run's measured 51.1 (104 %)."""
    cls, sm = _fp32()
    assert cls.device.peaks["simt_fp32"] == 67e12
    assert "aten::mm [[50304, 1024], [1024, 768]] attains 53.1 TFLOP/s" in " ".join(cls.notes)
    gemm = cls.ops[cls.ops["class"] == "gemm"]
    assert gemm["roof_pct"].max() == pytest.approx(100 * 53.1e12 / 67e12, abs=0.1)
    assert cls.device.bandwidth_source.startswith("measured")  # a 3 MB fill_ is L2
    # the one figure still above 100 %: a 3 MB fill_ (L2), said in every output
    assert sm.roof_note is not None and "(up to 102 %, aten::fill_)" in sm.roof_note
    assert sm.summary["roof_note"] == sm.roof_note
