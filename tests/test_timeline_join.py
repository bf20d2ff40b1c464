"""The light pass joined to the full one per stream, by order and key, and its 99 % rule
(tracekit.summary.timeline_join, tracekit.summary.timeline): on real H200 runs whose light
pass is derived from their full trace (tests/timelinegen.py), as Kineto records it and as
the kernels-only CUPTI recorder does (no launch calls), and on copies of it with different
work: a missing kernel, a reordered stream, other names or grids."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tracekit.summary.steps as S
import tracekit.summary.timeline as TL
from tracekit.classify import classify
from tracekit.parse import find_trace, load
from tracekit.summary import summarize
from tracekit.summary.timeline_join import align

from . import timelinegen as G

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RUN = FIXTURES / "h200-gpt2s-b8-s128-bf16-sdpa"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def kernels_only(light: dict[str, Any]) -> dict[str, Any]:
    """A light trace as the CUPTI recorder writes it: GPU activity only, no launch calls."""
    out = {k: v for k, v in light.items() if k != "traceEvents"}
    out["tracekitRecorder"] = "cupti-kernels"
    out["traceEvents"] = G.clone([e for e in light["traceEvents"]
                                  if e.get("cat") in GPU_CATS or e.get("ph") == "M"])  # fmt: skip
    return out


@pytest.fixture(scope="module")
def marked() -> dict[str, Any]:
    return G.with_markers(G.read(find_trace(RUN)[0]))


def _join(tmp: Path, full: dict[str, Any], light: dict[str, Any], run: Path = RUN,
          recorder: str | None = "cupti-kernels") -> tuple[Any, TL.Timeline]:  # fmt: skip
    path = G.run_folder(run, tmp / "run", light, full)
    if recorder is not None:
        m = json.loads((path / "manifest.json").read_text())
        m["profiler"]["timeline"] = {"recorder": recorder, "fallback_reason": None}
        (path / "manifest.json").write_text(json.dumps(m))
    t = load(path)
    return t, TL.for_report(t, S.analysed_steps(t.steps))


def _step_kernels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The non-marker kernels of the recorded step (between the first two markers)."""
    marks = sorted(e["ts"] for e in doc["traceEvents"] if e.get("name") == G.MARKER_NAME)
    return sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel"
                   and e["name"] != G.MARKER_NAME and marks[0] < e["ts"] < marks[1]),
                  key=lambda e: e["ts"])  # fmt: skip


# ------------------------------------------------------------------ the alignment


def test_align_pairs_in_order() -> None:
    a = np.array([1, 2, 3, 4, 5])
    assert [x.tolist() for x in align(a, a)] == [[0, 1, 2, 3, 4]] * 2
    ia, ib = align(a, np.array([1, 2, 4, 5]))  # one missing: only it is lost
    assert ia.tolist() == [0, 1, 3, 4] and ib.tolist() == [0, 1, 2, 3]
    ia, ib = align(a, np.array([1, 2, 9, 4, 5]))  # one renamed
    assert ia.tolist() == [0, 1, 3, 4] and ib.tolist() == [0, 1, 3, 4]
    ia, ib = align(np.array([1, 2, 3, 4, 5, 6]), np.array([1, 5, 6, 2, 3, 4]))  # moved
    assert (np.array([1, 2, 3, 4, 5, 6])[ia] == np.array([1, 5, 6, 2, 3, 4])[ib]).all()
    assert len(ia) == 4  # the longest order kept: 1 2 3 4 (or 1 5 6)
    empty = np.zeros(0, dtype=np.int64)
    assert [len(x) for x in align(a, empty)] == [0, 0]
    assert [len(x) for x in align(empty, empty)] == [0, 0]


# -------------------------------------------------- golden: the real runs join fully


@pytest.mark.parametrize(
    "name", ["h200-gpt2s-b8-s128-bf16-sdpa", "h200-run-resnet50-b64-bf16",
             "h200-run-hf-gpt2s-b8-s128-bf16"],
)  # fmt: skip
def test_real_runs_join_fully_with_either_recorder(tmp_path: Path, name: str) -> None:
    run = FIXTURES / name
    full = G.with_markers(G.read(find_trace(run)[0]))
    light = G.light_of(full)
    _, kin = _join(tmp_path / "k", full, light, run, recorder=None)
    t, ko = _join(tmp_path / "c", full, kernels_only(light), run)
    assert kin.light and kin.recorder == "kineto-cuda" and kin.joined_pct == 100.0
    assert ko.light and ko.recorder == "cupti-kernels" and ko.joined_pct == 100.0
    assert ko.per_step.to_dict("records") == kin.per_step.to_dict("records")
    assert len(ko.runtime) == 0 and ko.step_source == "marker kernels"
    real = ko.kernels[~ko.kernels["marker"]]
    assert real["matched"].all()
    partner = t.kernels.set_index("kernel_id").loc[real["full_kernel_id"]]
    assert (partner["name"].to_numpy() == real["name"].to_numpy()).all()
    assert (partner["dur"].to_numpy() == real["dur"].to_numpy()).all()  # the same launches


# ----------------------------------------------------- different work: below 99 %


def test_a_missing_kernel_loses_its_own_time(tmp_path: Path, marked: dict[str, Any]) -> None:
    """A short kernel missing from the light pass: the rest still joins (its time lost);
    the longest one missing (2 % of the step's GPU time): refused."""
    light = kernels_only(G.light_of(marked))
    ks = _step_kernels(light)
    short = min(ks, key=lambda e: e["dur"])
    one = {**light, "traceEvents": [e for e in light["traceEvents"] if e is not short]}
    _, tl = _join(tmp_path / "a", marked, one)
    assert tl.light and tl.joined_pct is not None and 99.9 < tl.joined_pct < 100.0
    assert tl.per_step[["matched", "light_kernels"]].to_numpy().tolist() == [[821, 821]]
    longest = max(ks, key=lambda e: e["dur"])
    big = {**light, "traceEvents": [e for e in light["traceEvents"] if e is not longest]}
    _, tl = _join(tmp_path / "b", marked, big)
    assert not tl.light and tl.joined_pct is not None and 97.0 < tl.joined_pct < 99.0
    assert tl.reason == (
        f"only {tl.joined_pct:.1f} % of the GPU time joins the full pass's kernels (per stream, "
        "by order and name, grid and block; < 99 %; most of the rest on stream 7): the passes "
        "ran different work"
    )


def test_a_reordered_stream_is_refused(tmp_path: Path, marked: dict[str, Any]) -> None:
    light = kernels_only(G.light_of(marked))
    ks = _step_kernels(light)
    half = ks[len(ks) // 2 :]
    starts = [e["ts"] for e in half]
    for e, ts in zip(half, reversed(starts), strict=True):  # the second half run backwards
        e["ts"] = ts
    _, tl = _join(tmp_path, marked, light)
    assert not tl.light and tl.joined_pct is not None and tl.joined_pct < 60.0
    assert tl.reason is not None and tl.reason.startswith(f"only {tl.joined_pct:.1f} % of")


@pytest.mark.parametrize("what", ["name", "grid"])
def test_other_kernels_are_refused(tmp_path: Path, marked: dict[str, Any], what: str) -> None:
    """The same positions, other kernels: by name, or the same name with another grid."""
    light = kernels_only(G.light_of(marked))
    for e in sorted(_step_kernels(light), key=lambda e: -e["dur"])[:10]:
        if what == "name":
            e["name"] = G.RENAMED
        else:
            e["args"]["grid"] = [e["args"]["grid"][0] + 1, *e["args"]["grid"][1:]]
    t, tl = _join(tmp_path, marked, light)
    assert not tl.light and tl.joined_pct is not None and tl.joined_pct < 90.0
    assert "by order and name, grid and block" in str(tl.reason)
    sm = summarize(t, classify(t))
    doc = sm.summary["timeline"]
    assert doc["source"] == "full" and doc["joined_pct"] == pytest.approx(tl.joined_pct)
    assert doc["min_joined_pct"] == 99.0 and doc["recorder"] == "cupti-kernels"


def test_streams_with_other_ids_pair_by_first_activity(
    tmp_path: Path, marked: dict[str, Any]
) -> None:
    light = kernels_only(G.light_of(marked))
    for e in light["traceEvents"]:
        if e.get("cat") in GPU_CATS:
            e["tid"] = e["args"]["stream"] = 13
    _, tl = _join(tmp_path, marked, light)
    assert tl.light and tl.joined_pct == 100.0


# ------------------------------------------------------------ the report says which


def test_the_report_names_the_kernels_only_recorder(tmp_path: Path, marked: dict[str, Any]) -> None:
    from tracekit.reports import verdict

    t, tl = _join(tmp_path, marked, kernels_only(G.light_of(marked, host_scale=0.5)))
    assert tl.light
    sm = summarize(t, classify(t))
    text = verdict.timeline_text(sm)
    assert text is not None and text.startswith("light pass (CUPTI, kernels only), ")
    assert "822 GPU activities per step joined to the full pass (100.0 % of GPU time)" in text
    assert "in the light timeline pass (CUPTI, kernels only)" in verdict.step_time_text(sm)
    doc = sm.summary["timeline"]
    assert doc["recorder"] == "cupti-kernels" and doc["joined_pct"] == 100.0
    # no launch calls in a kernels-only pass: the launch check says none, the rest stands
    assert sm.summary["launch"]["median_launch_us"] is None
    kernels = int((tl.kernels["kind"] == "kernel").sum())  # with the opening marker
    assert sm.summary["launch"]["kernels_per_step"] == kernels == 749
