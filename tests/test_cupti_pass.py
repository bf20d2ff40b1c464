"""The light timeline pass recorded kernels-only through CUPTI (collectors/cupti_pass.py),
on the CPU with cupti-python stood in (tests/fake_cupti.py): driven through collect and
``tracekit.profile()`` as on a GPU, its trace read by the light-trace parser, and the
fallback to Kineto's CUDA-only pass (CUPTI refusing, cupti-python missing, asked for)
said in the manifest and the summary."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import tracekit
import tracekit.collectors.collect as collect_mod
from tracekit.cli import main
from tracekit.collectors import cupti_pass as C
from tracekit.collectors import passes
from tracekit.collectors.profiler import ProfilerConfig
from tracekit.errors import UsageError
from tracekit.parse import load
from tracekit.parse import timeline as PT

from . import fake_cupti as F
from .standins import CpuLightProfiler

FAST = ["--device", "cpu", "--preset", "tiny", "--batch", "2", "--seq", "32", "--steps", "2",
        "--warmup", "1", "--quiet", "--no-ceilings", "--no-memory-timeline",
        "--no-memory-snapshot", "--light-cost-rounds", "0"]  # fmt: skip
MARKER = "at::cuda::(anonymous namespace)::spin_kernel(long)"


@pytest.fixture
def on_gpu(monkeypatch: pytest.MonkeyPatch) -> Any:
    """collect's light pass on, as on CUDA; each step's GPU work "launched" on the fake;
    returns a function installing a fake cupti (None: cupti-python missing)."""
    monkeypatch.setattr(collect_mod, "timeline_absent_reason", lambda cfg, device: None)
    monkeypatch.setattr(C, "LightProfiler", CpuLightProfiler)
    monkeypatch.delenv(C.RECORDER_ENV, raising=False)
    build = collect_mod.build_workload
    fakes: list[F.FakeCupti | None] = []

    def built(*a: Any, **kw: Any) -> Any:
        wl = build(*a, **kw)
        step = wl.step

        def stepped(i: int) -> torch.Tensor:
            if fakes[-1] is not None:
                fakes[-1].step_work()
            return step(i)

        wl.step = stepped
        return wl

    monkeypatch.setattr(collect_mod, "build_workload", built)

    def use(fake: F.FakeCupti | None) -> None:
        fakes.append(fake)
        F.install(monkeypatch, fake)

    return use


def _collect(
    out: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[dict[str, Any], str]:
    assert main(["collect", *FAST, *extra, "-o", str(out)]) == 0
    return json.loads((out / "manifest.json").read_text()), capsys.readouterr().out


def test_collect_records_the_light_pass_with_cupti(
    tmp_path: Path, on_gpu: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = F.FakeCupti()
    on_gpu(fake)
    out = tmp_path / "run"
    m, said = _collect(out, capsys)
    tl = m["profiler"]["timeline"]
    assert tl["recorder"] == "cupti-kernels" and tl["fallback_reason"] is None
    assert tl["activities"] == ["kernel", "memcpy", "memset"]
    assert tl["step_marker"].startswith("kernel: torch.cuda._sleep(1)")
    assert "light pass recorder: CUPTI, kernels/memcpy/memset only (cupti-kernels)" in said
    # CUPTI on for the pass only, its callbacks registered when it was enabled, flushed
    assert fake.enabled == set() and fake.registrations == 1 and fake.flushes == 1
    arts = m["artifacts"]
    path = out / arts["timeline_trace"]
    assert path.name.endswith(".timeline.json.gz") and arts["timeline_trace_absent"] is None
    assert arts["timeline_steps"] is None  # the markers are kernels
    doc = json.loads(gzip.decompress(path.read_bytes()))
    assert doc["tracekitRecorder"] == "cupti-kernels"
    cats = {e.get("cat") for e in doc["traceEvents"] if e["ph"] == "X"}
    assert cats == {"kernel", "gpu_memcpy", "gpu_memset"}  # no runtime, no cpu_op
    light = PT.with_light_steps(load(path))
    assert light.meta["timeline"] == {"source": "marker kernels", "steps": 2}
    assert len(light.runtime) == 0
    # each step: its opening marker, a copy, a memset and two GEMMs
    assert light.steps["kernel_count"].tolist() == [5, 5]
    k = light.kernels
    names = set(k["name"])
    assert names == {MARKER, "fake_gemm(float*, float*, float*, int)", "Memset (Device)",
                     "Memcpy HtoD (Pinned -> Device)"}  # fmt: skip
    gemm = k[k["name"].str.startswith("fake_gemm")]
    assert sorted(set(gemm["grid_x"])) == [32, 64] and set(gemm["block_x"]) == {128}
    assert set(k["stream"]) == {7} and int(k["marker"].sum()) == 3
    assert m["metrics"]["timeline_step_time"]["n"] == 2


def test_the_trace_is_on_the_unix_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CUPTI's clock is mapped onto Kineto's (Unix ns − baseTimeNanoseconds): each marker
    kernel starts 2 µs after the host mark that launched it (here: plus the host's delay)."""
    fake = F.FakeCupti()
    F.install(monkeypatch, fake)
    cfg = ProfilerConfig(wait=1, warmup=1, active=3)
    marker = passes.StepMarker(torch.device("cpu"))
    seen: list[int] = []
    mark = marker.mark

    def remembered() -> None:
        mark()
        seen.append(marker.host_ns[-1])

    marker.mark = remembered  # type: ignore[method-assign]
    rec = C.KernelsPass(cfg, tmp_path, device=torch.device("cpu"), cupti=fake, marker=marker)
    with rec:
        for _ in range(cfg.steps):
            fake.step_work()
            rec.step()
    (path,) = rec.timelines
    t = load(path)
    starts = np.sort(PT.marker_bounds(t.kernels, t.runtime))
    host = np.asarray(seen, dtype=np.int64) - t.meta["base_time_ns"] - t.meta["trace_start_ns"]
    assert len(starts) == cfg.active + 1
    lag = starts - host  # the host mark precedes its kernel (a shared CPU: by up to ms)
    error = json.loads(gzip.decompress(path.read_bytes()))["tracekitClockOffsetErrorNs"]
    assert 0 <= error == rec.recorder.offset_error_ns < 1_000_000
    assert np.all(lag >= 2_000 - error) and np.all(lag < 50_000_000)  # clocks 7 s apart
    assert rec.describe()["records"] == 3 * 4 + 4  # three steps of work, four markers
    assert rec.artifacts()["timeline_trace_absent"] is None


def test_the_clock_offset_comes_from_the_narrowest_read() -> None:
    """The OS interrupts the first two tries (windows of 4 ms and 60 µs); the third, 200 ns
    wide, sets the offset to within 100 ns."""
    unix = iter([1_000, 4_001_000, 5_000_000, 5_060_000, 7_000_000, 7_000_200, 9_000_000,
                 9_000_300])  # fmt: skip
    other = iter([10, 2_000_000, 30, 40])  # the other clock: when each try read it
    offset, error = C.clock_offset(lambda: next(other), reads=4, unix=lambda: next(unix))
    assert (offset, error) == (7_000_100 - 30, 100)
    assert C.clock_offset(lambda: 5, reads=1, unix=iter([10, 10]).__next__) == (5, 0)


@pytest.mark.parametrize(
    ("fake", "reason"),
    [
        (F.FakeCupti(fail_enable=F.ActivityKind.MEMSET),
         "CUPTI refused the kernels-only recorder (cuptiError: CUPTI_ERROR 39): another "
         "profiler may hold CUPTI, or the driver is too old"),
        (None, "cupti-python is not installed (ModuleNotFoundError"),
    ],
)  # fmt: skip
def test_collect_falls_back_to_kineto_and_says_why(
    tmp_path: Path, on_gpu: Any, capsys: pytest.CaptureFixture[str], fake: Any, reason: str
) -> None:
    on_gpu(fake)
    m, said = _collect(tmp_path / "run", capsys)
    tl = m["profiler"]["timeline"]
    assert tl["recorder"] == "kineto-cuda" and tl["fallback_reason"].startswith(reason)
    assert tl["activities"] == ["cuda"]  # Kineto's light pass, as before
    head = "light pass recorder: Kineto, CUDA activity (kineto-cuda); not CUPTI kernels-only"
    assert f"{head}: {reason}" in said
    assert m["artifacts"]["timeline_trace"].endswith(".timeline.json.gz")
    if fake is not None:  # the kinds enabled before the refusal are off again
        assert fake.enabled == set() and fake.pending == []
    if fake is None:
        assert "pip install 'tracekit[cupti]'" in tl["fallback_reason"]


def test_kineto_can_be_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = F.FakeCupti()
    F.install(monkeypatch, fake)
    monkeypatch.setenv(C.RECORDER_ENV, "kineto")
    p = C.TimelinePass(ProfilerConfig(wait=0, warmup=0, active=1), tmp_path,
                       device=torch.device("cpu"), kineto=CpuLightProfiler)  # fmt: skip
    with p:
        p.step()
    assert p.recorder == "kineto-cuda" and p.fallback_reason == f"{C.RECORDER_ENV}=kineto"
    assert fake.registrations == 0 and p.describe()["recorder"] == "kineto-cuda"
    monkeypatch.setenv(C.RECORDER_ENV, "nsys")
    with pytest.raises(UsageError, match="TRACEKIT_TIMELINE_RECORDER must be auto or kineto"):
        C.TimelinePass(ProfilerConfig(), tmp_path, device=torch.device("cpu"))


def test_an_aborted_window_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = F.FakeCupti()
    F.install(monkeypatch, fake)
    rec = C.KernelsPass(ProfilerConfig(), tmp_path, device=torch.device("cpu"), cupti=fake)
    with pytest.raises(KeyboardInterrupt), rec:
        rec.step()
        rec.step()
        fake.step_work()
        raise KeyboardInterrupt
    assert fake.enabled == set() and rec.timelines == [] and not list(tmp_path.iterdir())
    assert rec.artifacts()["timeline_trace_absent"] == "no recorded cycle ended"


def test_each_cycle_registers_again_and_writes_its_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kineto replaces CUPTI's buffer callbacks when it runs: each cycle registers them."""
    fake = F.FakeCupti()
    F.install(monkeypatch, fake)
    cfg = ProfilerConfig(wait=0, warmup=1, active=1, repeat=2)
    rec = C.KernelsPass(cfg, tmp_path, device=torch.device("cpu"), cupti=fake)
    with rec:
        for _ in range(cfg.steps):
            fake.step_work()
            rec.step()
    assert fake.registrations == 2 and len(rec.timelines) == 2
    # each cycle detaches CUPTI when it ends (cuptiFinalize): nothing stays attached
    assert fake.finalizes == 2 and not fake.attached()
    for path in rec.timelines:  # the warm-up step's work is left out
        t = PT.with_light_steps(load(path))
        assert t.steps["kernel_count"].tolist() == [5]
        assert len(t.kernels) == 6  # and the closing marker


def test_nothing_recorded_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = F.FakeCupti()
    F.install(monkeypatch, fake)
    fake.activity_flush_all = lambda flag: None  # type: ignore[method-assign]
    rec = C.KernelsPass(ProfilerConfig(wait=0, warmup=0, active=1), tmp_path,
                        device=torch.device("cpu"), cupti=fake)  # fmt: skip
    with rec:
        fake.step_work()
        rec.step()
    assert rec.timelines == []
    assert rec.artifacts()["timeline_trace_absent"].startswith(
        "the kernels-only CUPTI pass recorded no GPU activity"
    )


def test_records_are_named_as_kineto_names_them() -> None:
    ns = __import__("types").SimpleNamespace
    cp = ns(start=0, end=2000, device_id=1, context_id=1, stream_id=3, correlation_id=9,
            bytes=4000, copy_kind=2, src_kind=3, dst_kind=1)  # fmt: skip
    ev = C.to_event("gpu_memcpy", cp)
    assert ev["name"] == "Memcpy DtoH (Device -> Pageable)" and ev["pid"] == 1 and ev["tid"] == 3
    assert ev["args"]["bytes"] == 4000 and ev["args"]["memory bandwidth (GB/s)"] == 2.0
    ms = ns(start=0, end=10, device_id=0, context_id=1, stream_id=7, correlation_id=1,
            bytes=8, memory_kind=2)  # fmt: skip
    assert C.to_event("gpu_memset", ms)["name"] == "Memset (Pinned)"
    assert C.demangle(F.SPIN) == MARKER
    assert C.demangle("nvjet_sm90_tst_128x64") == "nvjet_sm90_tst_128x64"
    assert C.demangle("_Zbroken") == "_Zbroken"


def test_profile_session_records_with_cupti(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tracekit.profile()`` (and ``tracekit run``) run the same pass."""
    fake = F.FakeCupti()
    F.session_as_on_cuda(monkeypatch, fake)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    opts: dict[str, Any] = dict(steps=2, warmup=1, wait=1, profile_warmup=1, active=2,
                                ceilings=False, quiet=True, memory_timeline=False)  # fmt: skip
    with tracekit.profile(tmp_path / "p", **opts) as prof:
        for _ in range(13):
            fake.step_work()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    m = prof.manifest
    assert m is not None and m["status"] == "ok"
    assert m["profiler"]["timeline"]["recorder"] == "cupti-kernels"
    light = PT.with_light_steps(load(tmp_path / "p" / m["artifacts"]["timeline_trace"]))
    assert light.steps["kernel_count"].tolist() == [5, 5]
