"""A real tiny sweep on CPU: subprocess per configuration, a forced failure recorded while
the sweep goes on, resume, timeout, and the CLI's outputs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tracekit.sweep.plan import Point, SweepPlan
from tracekit.sweep.runner import default_env, read_table, run_point, run_sweep

# seq 256 exceeds the tiny preset's context (128): collect refuses it -> status error
PLAN = SweepPlan(batches=(2,), seqs=(16, 32, 256), dtypes=("fp32",), attentions=("naive",),
                 preset="tiny", device="cpu", base_batch=2, base_seq=16, steps=1, warmup=0,
                 timeout_s=120)  # fmt: skip


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tracekit.cli import main

    out = tmp_path_factory.mktemp("sweep") / "s"
    args = ["sweep", "--preset", "tiny", "--device", "cpu", "--batch", "2", "--seq",
            "16,32,256", "--dtype", "fp32", "--attention", "naive", "--base-batch", "2",
            "--base-seq", "16", "--steps", "1", "--warmup", "0", "--timeout", "120",
            "-o", str(out)]  # fmt: skip
    assert main(args) == 0
    return out


def test_sweep_records_ok_and_failed_rows(swept: Path) -> None:
    t = read_table(swept)
    assert list(t["key"]) == ["b2-s16-fp32-naive", "b2-s32-fp32-naive", "b2-s256-fp32-naive"]
    assert list(t["status"]) == ["ok", "ok", "error"]
    bad = t.iloc[2]
    assert "exceeds the context" in bad["error"] and bad["exit_code"] == 2
    ok = t[t["status"] == "ok"]
    assert (ok["tokens_per_s"] > 0).all() and (ok["timeline_peak_bytes"] > 0).all()
    assert (ok["peak_source"] == "memory timeline").all()  # CPU: no allocator counters
    assert (ok["model_error_pct"].abs() < 5).all()  # CPU tiny runs: ~0.2 % in practice
    assert (ok["mem_per_token_bytes"] == ok["peak_bytes"] / ok["tokens"]).all()
    csv = pd.read_csv(swept / "sweep.csv")
    assert list(csv["key"]) == list(t["key"])
    assert (swept / "runs" / "b2-s16-fp32-naive" / "manifest.json").is_file()
    assert (swept / "report" / "sweep.html").is_file()
    assert (swept / "findings.txt").read_text().count("failed") == 1
    assert any((swept / "tensorboard").iterdir())


def test_sweep_run_reports_and_fits_keep_the_invariants(swept: Path, tmp_path: Path) -> None:
    """A CPU sweep's run reports itself without contradiction; its T² shares are shares
    (0–1) or absent (tokens/s, which falls, has none)."""
    import numpy as np

    from tracekit.commands.report import report
    from tracekit.sweep.fit import fit_table

    sm = report(swept / "runs" / "b2-s32-fp32-naive", tmp_path / "r", no_tensorboard=True).summary
    assert [str(v) for v in sm.broken] == []
    share = fit_table(read_table(swept))["t2_share_at_max"].to_numpy(dtype=float)
    assert ((share >= 0) & (share <= 1) | np.isnan(share)).all()


def test_cpu_sweep_draws_no_empty_time_share_plot(swept: Path, tmp_path: Path) -> None:
    """Issue 35: a CPU sweep drew an empty "time share vs seq" plot (every share 0: no
    device time to share out), and its empty legend made matplotlib warn naming
    reports/sweep.py. The shares are absent (NaN), the plot is not drawn and says so."""
    import warnings

    from tracekit.reports.sweep import render_plots
    from tracekit.sweep.analysis import analyse_sweep

    t = read_table(swept)
    shares = t.filter(like="time_share_")
    assert len(shares.columns) and shares.isna().all().all()
    page = (swept / "report" / "sweep.html").read_text()
    assert not (swept / "report" / "sweep_time_share_vs_seq.png").exists()
    assert "Not drawn (no data for them): " in page and "time share vs seq" in page
    zeros = t.assign(**{c: 0.0 for c in shares.columns})  # as rows of earlier sweeps read
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the empty legend's UserWarning fails the test
        plots = render_plots(analyse_sweep(zeros), tmp_path)
    assert "time_share_vs_seq" not in plots and "throughput_vs_seq" in plots


def test_cpu_sweep_memory_tables_show_what_was_measured(swept: Path) -> None:
    """Issue 35: "Memory at the peak" read 0.00 GiB in every cell on CPU (a few MiB, shown
    in GiB) and the allocator's reserved memory, never measured on CPU, had a column."""
    import re

    page = (swept / "report" / "sweep.html").read_text()
    memory = page.split("Memory at the peak", 1)[1].split("</table>", 1)[0]
    assert "MiB" in memory and "GiB" not in memory
    cells = re.findall(r"<td>([0-9.]+)</td>", memory)
    assert cells and any(float(c) > 0 for c in cells)
    configurations = page.split("<h3>Configurations</h3>", 1)[1].split("</table>", 1)[0]
    assert "reserved" not in configurations and "peak MiB" in configurations


def test_cpu_sweep_terminal_table_shows_what_was_measured(swept: Path, tmp_path: Path) -> None:
    """Issue 35: the CLI's table read "peak GiB 0.02 / act GiB 0.00" and "idle % nan" on a
    CPU sweep: memory is in the unit that shows it, GPU idle (not measured) is absent."""
    from tracekit.sweep import describe, finish

    t = read_table(swept)
    head, *rows = describe(t, finish(t, tmp_path)).split("\n\n")[0].splitlines()
    assert "peak MiB" in head and "GiB" not in head and "idle" not in head
    ok = [r for r in rows if " ok " in r]
    assert ok and not any("nan" in r for r in ok)
    peak = float(ok[0].split()[4])  # key, status, step ms, tokens/s, peak
    assert peak == pytest.approx(t.loc[t["status"] == "ok", "peak_bytes"].iloc[0] / 2**20, abs=0.01)


def test_one_step_sweep_says_its_trends_are_indicative(swept: Path) -> None:
    """Issue 35: fits and findings from 1 timed step per configuration, without a word."""
    t = read_table(swept)
    assert (t.loc[t["status"] == "ok", "timed_steps"] == 1).all()
    text = (swept / "findings.txt").read_text()
    assert text.startswith("1 timed step per configuration: ") and "indicative only" in text
    page = (swept / "report" / "sweep.html").read_text()
    assert "1 timed step per configuration" in page


def _replay(swept: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each configuration's row as the fixture's sweep recorded it, instead of a new
    subprocess (run_point's own subprocess is the fixture's)."""
    import tracekit.sweep.runner as runner

    real = {str(r["key"]): r for r in read_table(swept).to_dict("records")}

    def replay(plan: SweepPlan, point: Point, out: Path, **_: Any) -> tuple[dict[str, Any], None]:
        return dict(real[point.key]), None

    monkeypatch.setattr(runner, "run_point", replay)


def test_resume_skips_done_rows_and_retries_errors(
    swept: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _replay(swept, monkeypatch)
    ran: list[str] = []
    t = run_sweep(PLAN, swept, resume=True, env=default_env(),
                  on_row=lambda r: ran.append(r["key"]))  # fmt: skip
    assert ran == ["b2-s256-fp32-naive"]
    assert list(t["status"]) == ["ok", "ok", "error"]


def test_existing_sweep_needs_resume(swept: Path) -> None:
    from tracekit.errors import UsageError

    with pytest.raises(UsageError, match="--resume"):
        run_sweep(PLAN, swept)


def test_timeout_is_an_error_row(tmp_path: Path) -> None:
    plan = SweepPlan(**{**PLAN.__dict__, "timeout_s": 0.2})
    row: dict[str, Any]
    row, _ = run_point(plan, Point(2, 16, "fp32", "naive"), tmp_path, measure_ceilings=False,
                       env=default_env())  # fmt: skip
    assert row["status"] == "error" and row["error"] == "timed out after 0.2 s"
    assert math.isnan(row["exit_code"])


def test_interrupt_keeps_finished_rows_and_resume_finishes(
    swept: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C after the first configuration, then --resume: on the real sweep's rows,
    replayed."""
    _replay(swept, monkeypatch)
    plan = SweepPlan(**{**PLAN.__dict__, "seqs": (16, 256)})  # b2-s16 ok, b2-s256 error

    def interrupt(row: dict[str, Any]) -> None:
        raise KeyboardInterrupt  # as Ctrl-C after the first configuration

    with pytest.raises(KeyboardInterrupt):
        run_sweep(plan, tmp_path, env=default_env(), on_row=interrupt)
    assert list(read_table(tmp_path)["key"]) == ["b2-s16-fp32-naive"]
    ran: list[str] = []
    t = run_sweep(plan, tmp_path, resume=True, env=default_env(),
                  on_row=lambda r: ran.append(r["key"]))  # fmt: skip
    assert ran == ["b2-s256-fp32-naive"] and list(t["status"]) == ["ok", "error"]
