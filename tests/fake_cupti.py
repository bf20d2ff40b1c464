"""A stand-in for NVIDIA's ``cupti-python`` (``from cupti import cupti``) on a machine
without a GPU: the activity API calls collectors/cupti_pass.py makes, recording what a
test "launches" while its kinds are enabled and delivering the records through the
registered buffer callbacks at each flush, as CUPTI does (records with cupti-python's
attribute names, timestamps on a clock of their own).

``install(monkeypatch, fake)`` puts it in ``sys.modules`` and makes the step marker a
"kernel" launched on it (``torch.cuda._sleep`` stood in), so the pass runs the code
paths it runs on a GPU.
"""

from __future__ import annotations

import enum
import time
import types
from contextlib import nullcontext
from typing import Any

import pytest
import torch

from tracekit.collectors import passes

SPIN = "_ZN2at4cuda12_GLOBAL__N_111spin_kernelEl"  # demangles to Kineto's marker name
GEMM = "_Z9fake_gemmPfS_S_i"  # fake_gemm(float*, float*, float*, int)
CLOCK_OFFSET_NS = -7_000_000_000  # CUPTI's clock runs 7 s behind the Unix one here


class ActivityKind(enum.IntEnum):  # CUpti_ActivityKind's values
    MEMCPY = 1
    MEMSET = 2
    KERNEL = 3
    RUNTIME = 5
    CONCURRENT_KERNEL = 10


class cuptiError(Exception):  # cupti-python's name
    def __init__(self, status: int) -> None:
        super().__init__(f"CUPTI_ERROR {status}")
        self.status = status


class FakeCupti(types.ModuleType):
    """The ``cupti.cupti`` module; ``fail_enable``: the kind whose enabling raises (as
    CUPTI does when another profiler holds it)."""

    ActivityKind = ActivityKind
    cuptiError = cuptiError

    def __init__(self, fail_enable: int | None = None) -> None:
        super().__init__("cupti.cupti")
        self.fail_enable = fail_enable
        self.enabled: set[int] = set()
        self.callbacks: tuple[Any, Any] | None = None
        self.registrations = 0
        self.flushes = 0
        self.finalizes = 0
        self.pending: list[Any] = []
        self.corr = 0

    # -- the API the pass calls
    def activity_register_callbacks(self, requested: Any, completed: Any) -> None:
        self.callbacks = (requested, completed)
        self.registrations += 1

    def activity_enable(self, kind: int) -> None:
        if kind == self.fail_enable:
            raise cuptiError(39)  # CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
        self.enabled.add(int(kind))

    def activity_disable(self, kind: int) -> None:
        self.enabled.discard(int(kind))

    def activity_flush_all(self, flag: int) -> None:
        self.flushes += 1
        if self.callbacks is None or not self.pending:
            return
        requested, completed = self.callbacks
        size, _ = requested()
        assert size > 0
        records, self.pending = self.pending, []
        completed(records)

    def finalize(self) -> None:
        """cuptiFinalize: CUPTI detached: callbacks and kinds gone until the next call."""
        self.finalizes += 1
        self.callbacks = None
        self.enabled.clear()

    def attached(self) -> bool:
        return self.callbacks is not None or bool(self.enabled)

    def get_timestamp(self) -> int:
        return time.time_ns() + CLOCK_OFFSET_NS

    # -- the test's "GPU"
    def _record(self, kind: ActivityKind, dur_ns: int, **fields: Any) -> None:
        if int(kind) not in self.enabled:
            return
        self.corr += 1
        start = self.get_timestamp() + 2_000  # it runs 2 µs after its launch
        base = dict(kind=int(kind), start=start, end=start + dur_ns, device_id=0,
                    context_id=1, stream_id=7, correlation_id=self.corr)  # fmt: skip
        self.pending.append(types.SimpleNamespace(**{**base, **fields}))

    def kernel(self, name: str, dur_ns: int = 50_000, grid: int = 64) -> None:
        self._record(ActivityKind.CONCURRENT_KERNEL, dur_ns, name=name, grid_x=grid, grid_y=1,
                     grid_z=1, block_x=128, block_y=1, block_z=1, registers_per_thread=32,
                     static_shared_memory=1024, dynamic_shared_memory=0)  # fmt: skip

    def memset(self, nbytes: int = 4) -> None:
        self._record(ActivityKind.MEMSET, 1_000, bytes=nbytes, memory_kind=3, value=0)

    def memcpy(self, nbytes: int = 4096) -> None:
        self._record(ActivityKind.MEMCPY, 3_000, bytes=nbytes, copy_kind=1, src_kind=2,
                     dst_kind=3)  # fmt: skip

    def step_work(self) -> None:
        """One step's GPU work: an input copy, a memset, two GEMMs."""
        self.memcpy()
        self.memset()
        self.kernel(GEMM)
        self.kernel(GEMM, grid=32)


def install(monkeypatch: pytest.MonkeyPatch, fake: FakeCupti | None) -> None:
    """``fake`` as ``cupti.cupti`` (None: cupti-python missing), the step marker a kernel
    launched on it."""
    if fake is None:
        monkeypatch.setitem(__import__("sys").modules, "cupti", None)  # import fails
    else:
        pkg = types.ModuleType("cupti")
        pkg.cupti = fake  # type: ignore[attr-defined]
        monkeypatch.setitem(__import__("sys").modules, "cupti", pkg)
        monkeypatch.setitem(__import__("sys").modules, "cupti.cupti", fake)
    monkeypatch.setattr(passes, "marker_available", lambda device: True)
    monkeypatch.setattr(torch.cuda, "device", lambda device: nullcontext())

    def sleep(cycles: int) -> None:
        if fake is not None:
            fake.kernel(SPIN, dur_ns=1_100, grid=1)

    monkeypatch.setattr(torch.cuda, "_sleep", sleep, raising=False)


def session_as_on_cuda(monkeypatch: pytest.MonkeyPatch, fake: FakeCupti) -> None:
    """``tracekit.profile()``/``tracekit run``'s session with the light pass on, as on CUDA,
    recorded by ``fake``."""
    from tracekit.collectors import cupti_pass, session

    install(monkeypatch, fake)
    monkeypatch.delenv(cupti_pass.RECORDER_ENV, raising=False)
    cuda = torch.device("cuda")
    monkeypatch.setattr(session, "timeline_absent_reason",
                        lambda c, d: passes.timeline_absent_reason(c, cuda))  # fmt: skip
