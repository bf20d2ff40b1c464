"""tracekit/manifest.py: every fixture's manifest reads typed; damaged ones read forgivingly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracekit.manifest import SCHEMA_VERSION, RunManifest, StepTime, read_manifest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = sorted(p.parent for p in (ROOT / "fixtures").glob("*/manifest.json"))


@pytest.mark.parametrize("folder", FIXTURES, ids=lambda p: p.name)
def test_every_fixture_manifest_reads(folder: Path) -> None:
    m = read_manifest(folder)
    assert isinstance(m, RunManifest)
    assert m.schema_version == SCHEMA_VERSION and m.current
    assert m.status == "ok"
    assert m.raw == json.loads((folder / "manifest.json").read_text())
    assert m.artifacts.trace or m.artifacts.traces or m.distributed
    if m.metrics.step_time_ms is not None and m.metrics.step_time_ms.median is not None:
        assert m.metrics.step_median_ms is not None and m.metrics.step_median_ms > 0


def test_cpu_manifest() -> None:
    m = read_manifest(ROOT / "fixtures/cpu-tiny-fp32-naive/manifest.json")
    assert m is not None
    assert (m.config.device, m.config.dtype, m.config.attention) == ("cpu", "fp32", "naive")
    assert (m.config.batch, m.config.seq, m.config.tf32) == (8, 128, False)
    st = m.metrics.step_time_ms
    assert st is not None and st.n == 3 and st.p10 is not None and st.p90 is not None
    assert st.p10 <= (st.median or 0) <= st.p90
    assert m.metrics.peak_allocated_bytes is None  # not measured on CPU
    assert m.ceilings is not None and m.ceilings.matmul_flops["fp32"]
    assert m.ceilings.matmul_flops["bf16"] is None
    assert m.distributed is None and not m.is_generate
    assert m.artifacts.get("memory_timeline") is None
    assert m.artifacts.tensorboard == "tensorboard"


def test_multi_gpu_manifest() -> None:
    m = read_manifest(ROOT / "fixtures/h100x2-ddp-gpt2s-b8-s128-fp32")
    assert m is not None and m.distributed is not None
    assert m.distributed.world_size == 2 and len(m.distributed.ranks) == 2
    assert m.ceilings is not None and m.ceilings.interconnect is not None
    assert m.n_params and m.n_params > 100_000_000


def test_generate_manifest() -> None:
    m = read_manifest(ROOT / "fixtures/h200-gen-gpt2s-b8-p512-n64-bf16-sdpa")
    assert m is not None and m.is_generate
    assert m.metrics.tpot_ms_by_step and m.config.model is not None


def test_typed_record_passes_through() -> None:
    m = read_manifest({"config": {"batch": 4}})
    assert read_manifest(m) is m
    assert read_manifest(None) is None


def test_damaged_manifests(tmp_path: Path) -> None:
    assert read_manifest(tmp_path) is None  # no manifest.json
    (tmp_path / "manifest.json").write_text("{not json")
    assert read_manifest(tmp_path) is None
    (tmp_path / "manifest.json").write_text("[1, 2]")
    assert read_manifest(tmp_path) is None
    m = read_manifest(
        {
            "schema_version": 0,
            "config": {"batch": -3, "seq": "128", "tf32": "yes", "model": 7},
            "metrics": {"step_time_ms": {"median": -1.0}, "tokens_per_s": True},
            "ceilings": [1],
            "artifacts": None,
            "distributed": "two",
        }
    )
    assert m is not None and not m.current
    assert (m.config.batch, m.config.seq, m.config.tf32, m.config.model) == (None,) * 4
    assert m.metrics.step_time_ms is None and m.metrics.tokens_per_s is None
    assert m.ceilings is None and m.distributed is None and m.artifacts.trace is None
    empty = read_manifest({})
    assert empty is not None and empty.config.device is None and empty.n_params is None


def test_step_time_validates() -> None:
    with pytest.raises(ValueError):
        StepTime(median=-2.0)
    assert StepTime.of(12.5) == StepTime(median=12.5)
