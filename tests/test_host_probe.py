"""collect's host-issue probe on CPU, the GPU stood in: each step starts on an idle GPU,
the host's return and the GPU's end are timed apart, and the manifest entries it writes
are the ones its readers (advise's host calibration) read."""

from __future__ import annotations

import time

import pytest
import torch

from tracekit.collectors.collect import host_probe_metrics, host_probe_phase
from tracekit.collectors.display import Display
from tracekit.collectors.train import HOST_PROBE_STEPS, time_host_issue
from tracekit.manifest import RunManifest, check_manifest

HOST_S, GPU_S = 0.004, 0.012  # the host's work per step; the GPU's, queued behind it


class FakeGpu:
    """A GPU that runs the work a step queued after the host issued it: synchronize waits
    for what is left of it."""

    def __init__(self) -> None:
        self.done_at = 0.0
        self.calls: list[str] = []

    def step(self, i: int) -> torch.Tensor:
        self.calls.append(f"step {i}")
        t0 = time.perf_counter()
        time.sleep(HOST_S)  # the host issues its launches
        self.done_at = t0 + GPU_S  # the first launch started the GPU at once
        return torch.zeros(())

    def synchronize(self, device: object = None) -> None:
        self.calls.append("sync")
        left = self.done_at - time.perf_counter()
        if left > 0:
            time.sleep(left)


def test_host_and_gpu_timed_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu()
    monkeypatch.setattr(torch.cuda, "synchronize", gpu.synchronize)
    host, synced = time_host_issue(gpu.step, 3, start=7, device=torch.device("cuda"))
    # every step starts on an idle GPU and ends with it done
    assert gpu.calls == [
        "sync",
        "step 7",
        "sync",
        "sync",
        "step 8",
        "sync",
        "sync",
        "step 9",
        "sync",
    ]
    assert len(host) == len(synced) == 3
    for h, s in zip(host, synced, strict=True):
        assert HOST_S * 1e3 <= h < GPU_S * 1e3  # the host returned before the GPU was done
        assert s >= GPU_S * 1e3 > h


def test_manifest_entries_read_back() -> None:
    m = host_probe_metrics([4.2, 4.0, 4.4], [12.1, 12.0, 12.3])
    doc = {"status": "ok", "metrics": {"step_time_ms": {"median": 12.0, "n": 3}, **m}}
    man: RunManifest = check_manifest(doc, strict=True)  # nothing its readers would drop
    got = man.metrics
    assert got.host_issue_ms is not None and got.synced_step_ms is not None
    assert got.host_issue_ms.median == pytest.approx(4.2) and got.host_issue_ms.n == 3
    assert got.synced_step_ms.median == pytest.approx(12.1)
    assert got.host_issue_method is not None and "torch.cuda.synchronize" in got.host_issue_method


class _Workload:  # what host_probe_phase reads of a Workload
    def __init__(self, device: str, step: object) -> None:
        self.device = torch.device(device)
        self.step = step


def test_collects_phase_on_cuda_and_not_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """collect's phase: on CUDA (stood in) the probe's steps follow step n and its entries
    go to the manifest; on CPU neither."""
    gpu = FakeGpu()
    monkeypatch.setattr(torch.cuda, "synchronize", gpu.synchronize)
    ui = Display(quiet=True)
    n, got = host_probe_phase(_Workload("cuda", gpu.step), ui, 12)  # type: ignore[arg-type]
    assert n == 12 + HOST_PROBE_STEPS
    assert [c for c in gpu.calls if c != "sync"] == [f"step {i}" for i in range(12, n)]
    assert got["host_issue_ms"]["n"] == HOST_PROBE_STEPS
    assert got["host_issue_ms"]["median"] < got["synced_step_ms"]["median"]
    cpu = FakeGpu()
    assert host_probe_phase(_Workload("cpu", cpu.step), ui, 12) == (12, {})  # type: ignore[arg-type]
    assert cpu.calls == []
