"""The verdict of a multi-rank report splits the detailed rank's own step: its GPU work and
exposed communication agree with that rank's row of the per-rank table, whichever rank is
detailed (not the mean over ranks set against one rank's busy time, which gave a host-bound
rank "GPU work 0.0 %")."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from tests import rankgen as rg
from tests import tracegen as tg
from tracekit.cli import main

# A lopsided job (µs, steps of rg.STEP = 10 ms): rank 0 computes 50 µs and waits in its
# all-reduce from 200 µs; rank 1's host is late, its all-reduce arrives at 6 ms. Both end
# at 8 ms, then the 500 µs optimizer kernel.
#   rank 0: busy 50 + 7800 + 500 = 8350, exposed 7800 (78 % of the step)
#   rank 1: busy 50 + 2000 + 500 = 2550, exposed 2000 (20 %)
# The mean over ranks, 49 % of rank 1's step, is more than rank 1's whole busy time.
GEMM = {0: 50, 1: 50}
ARRIVE = {0: 200, 1: 6_000}
EXPECTED = {0: {"busy": 8_350, "exposed": 7_800}, 1: {"busy": 2_550, "exposed": 2_000}}


def _report(folder: Path, out: Path, rank: int) -> dict[str, object]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["report", str(folder), "-o", str(out), "--rank", str(rank),
                     "--no-tensorboard"])  # fmt: skip
    assert code == 0, err.getvalue()
    doc: dict[str, object] = json.loads((out / "summary.json").read_text())
    return doc


@pytest.mark.parametrize("rank", [0, 1])
def test_verdict_splits_the_detailed_ranks_own_step(
    rank: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rg, "GEMM", GEMM)
    monkeypatch.setattr(rg, "ARRIVE", ARRIVE)
    folder = tmp_path / "job"  # a bare folder: the two traces, no manifest
    folder.mkdir()
    for r, doc in rg.two_ranks("kernel").items():
        tg.write(doc, folder / f"rank{r}.node0_1{r}.9.pt.trace.json.gz")
    doc = _report(folder, tmp_path / "rep", rank)
    ranks = doc["ranks"]
    assert isinstance(ranks, dict) and ranks["detail_rank"] == rank
    row = next(r for r in ranks["per_rank"] if r["rank"] == rank)
    want = EXPECTED[rank]
    assert row["gpu_busy_ms"] * 1e3 == pytest.approx(want["busy"])
    assert row["exposed_comm_ms"] * 1e3 == pytest.approx(want["exposed"])
    assert ranks["exposed_comm_pct"] == pytest.approx(49.0)  # the mean, for the ranks section
    shares = doc["step_summary"]["shares_pct"]  # type: ignore[index]
    step = rg.STEP
    assert shares["exposed_communication"] == pytest.approx(100 * want["exposed"] / step)
    assert shares["gpu_work"] == pytest.approx(100 * (want["busy"] - want["exposed"]) / step)
    assert shares["gpu_work"] > 0
    assert sum(shares.values()) == pytest.approx(100.0)
