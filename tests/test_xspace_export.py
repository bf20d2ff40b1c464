"""export_xspace: the written .xplane.pb, parsed back with tracekit's schema, matches the tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests._xspace_data import AUTOGRAD, BWD_GEMM, GEMM, MAIN, make_trace
from tracekit.errors import TraceError, UsageError
from tracekit.xspace import (
    build_xspace,
    default_host,
    default_run_name,
    event_table,
    export_xspace,
    line_summary,
    read_xspace,
)
from tracekit.xspace.build import kernel_details, memcpy_kind


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Path, object]:
    trace = make_trace()
    return export_xspace(trace, tmp_path / "tb", run="r1"), trace


def test_layout_and_no_temp_files(exported: tuple[Path, object], tmp_path: Path) -> None:
    path, _ = exported
    assert path == tmp_path / "tb" / "plugins" / "profile" / "r1" / "localhost.xplane.pb"
    assert [p.name for p in path.parent.iterdir()] == ["localhost.xplane.pb"]
    space = read_xspace(path)
    assert list(space.hostnames) == ["localhost"]
    assert [p.name for p in space.planes] == ["/host:CPU", "/device:GPU:0", "/device:GPU:1"]


def test_round_trip_counts_and_durations_per_line(exported: tuple[Path, object]) -> None:
    path, trace = exported
    lines = line_summary(read_xspace(path)).set_index(["plane", "line"])
    # Host: one line per thread holding its operators and runtime calls.
    host = pd.concat([trace.ops[["tid", "dur"]], trace.runtime[["tid", "dur"]]])  # type: ignore[attr-defined]
    for tid, rows in host.groupby("tid"):
        got = lines.loc[("/host:CPU", f"Thread {tid}")]
        assert got["events"] == len(rows)
        assert got["dur_ns"] == rows["dur"].sum()
    # Devices: one line per stream with its kernels, memcpys and memsets.
    kernels = trace.kernels  # type: ignore[attr-defined]
    n_device_lines = 0
    for (device, stream), rows in kernels.groupby(["device", "stream"]):
        got = lines.xs(f"/device:GPU:{device}", level="plane")
        got = got[got["line_id"] == stream].iloc[0]
        assert got["events"] == len(rows)
        assert got["dur_ns"] == rows["dur"].sum()
        n_device_lines += 1
    assert sum(p.startswith("/device") for p, _ in lines.index) == n_device_lines
    # Memory: one line per allocator, one event per allocation or free.
    mem = trace.memory  # type: ignore[attr-defined]
    assert lines.loc[("/host:CPU", "Memory GPU_0"), "events"] == (mem["device_type"] == 1).sum()
    assert lines.loc[("/host:CPU", "Memory CPU"), "events"] == (mem["device_type"] == 0).sum()


def test_stream_line_names_follow_xla() -> None:
    lines = line_summary(build_xspace(make_trace()))
    names = set(lines.loc[lines["plane"] == "/device:GPU:0", "line"])
    assert names == {"Stream #7(Kernel)", "Stream #8(MemcpyH2D,Memset)"}


def test_device_events_carry_what_xprof_reads() -> None:
    trace = make_trace()
    dev = event_table(build_xspace(trace), "/device:GPU:")
    merged = dev.merge(trace.kernels, left_on="correlation_id", right_on="correlation")
    assert len(merged) == len(trace.kernels)
    assert (merged["name_x"] == merged["name_y"]).all()
    assert (merged["ts_ns"] == merged["ts"]).all() and (merged["dur_ns"] == merged["dur"]).all()
    # The launching operator, so xprof groups kernels by operator.
    assert (merged["tf_op"] == merged["op_name"]).all()
    k = merged[merged["kind"] == "kernel"]
    assert k["kernel_details"].notna().all()
    assert merged.loc[merged["kind"] != "kernel", "kernel_details"].isna().all()
    gemm = k[k["name_x"] == GEMM].iloc[0]
    assert gemm["kernel_details"] == (
        "regs:72 static_shared:0 dynamic_shared:12288 grid:64,2,1 block:256,1,1"
    )
    memcpy = merged[merged["kind"] == "memcpy"].iloc[0]
    # xprof classifies copies by a MemcpyHToD... name prefix; the trace viewer shows
    # the display name, which keeps Kineto's name.
    assert memcpy["metadata_name"] == "MemcpyHToD (Pageable -> Device)"
    assert memcpy["memcpy_details"] == "kind:MemcpyH2D\nnum_bytes:4096"
    assert merged.loc[merged["kind"] == "memset", "Memset_details"].tolist() == ["num_bytes:1024"]


def test_device_plane_capabilities() -> None:
    space = build_xspace(make_trace())
    plane = space.planes[1]
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    stats = {names[s.metadata_id]: s for s in plane.stats}
    assert stats["device_vendor"].str_value == "Nvidia"
    assert stats["gpu_device_name"].str_value == "NVIDIA H100 80GB HBM3"
    assert stats["core_count"].int64_value == 132
    assert stats["compute_cap_major"].int64_value == 9
    assert stats["memory_size"].int64_value == 85_000_000_000


def test_launches_link_to_kernels_by_correlation() -> None:
    trace = make_trace()
    space = build_xspace(trace)
    host = event_table(space, "/host:CPU")
    launches = host[host["name"] == "cudaLaunchKernel"]
    kernels = trace.kernels[trace.kernels["kind"] == "kernel"]
    assert sorted(launches["correlation_id"].astype(int)) == sorted(kernels["correlation"])
    # device_id tells xprof which GPU a launch went to.
    dev1 = launches[launches["correlation_id"] == 19]
    assert dev1["device_id"].tolist() == [1]
    assert host.loc[host["name"] == "cudaDeviceSynchronize", "device_id"].isna().all()


def test_steps_are_roots_and_other_threads_consume_them() -> None:
    host = event_table(build_xspace(make_trace()), "/host:CPU")
    markers = host[host["_r"].notna()]
    assert markers["name"].tolist() == ["ProfilerStep#1", "ProfilerStep#2"]
    assert markers["step_num"].tolist() == [1, 2] and markers["_p"].tolist() == [1, 2]
    assert (markers["_pt"] == 0).all()
    # Backward roots on the autograd thread are consumers of their step.
    bwd = host[(host["line_id"] == AUTOGRAD) & host["name"].str.startswith("autograd::")]
    assert bwd["_c"].tolist() == [1, 2] and (bwd["_ct"] == 0).all()
    # Nested events and the step thread's own events need no context stats.
    nested = host[(host["line_id"] == AUTOGRAD) & (host["name"] == "aten::mm")]
    assert nested["_c"].isna().all()
    assert host.loc[host["line_id"] == MAIN, "_c"].isna().all()


def test_memory_events_follow_xprof_memory_profile() -> None:
    trace = make_trace()
    host = event_table(build_xspace(trace), "/host:CPU")
    mem = host[host["line"].str.startswith("Memory")].reset_index(drop=True)
    src = trace.memory.sort_values("ts", kind="stable")
    gpu = mem[mem["allocator_name"] == "GPU_0"]
    src_gpu = src[src["device_type"] == 1]
    assert gpu["ts_ns"].tolist() == src_gpu["ts"].tolist()
    assert gpu["bytes_allocated"].tolist() == src_gpu["total_allocated"].tolist()
    assert gpu["allocation_bytes"].tolist() == src_gpu["bytes"].abs().tolist()
    assert gpu["name"].tolist() == [
        "MemoryAllocation",
        "MemoryAllocation",
        "MemoryDeallocation",
        "MemoryAllocation",
    ]
    assert gpu["peak_bytes_in_use"].tolist() == [1024, 3072, 3072, 3072]
    assert (gpu["bytes_reserved"] == 0).all()
    assert gpu["bytes_available"].tolist() == [
        85_000_000_000 - t for t in src_gpu["total_allocated"]
    ]
    assert (mem["dur_ns"] == 0).all() and (mem["_c"] == src["step"].to_numpy()).all()
    cpu = mem[mem["allocator_name"] == "CPU"]
    assert cpu["bytes_available"].isna().all()


def test_kernel_details_and_memcpy_kind_helpers() -> None:
    rec = dict(
        grid_x=1,
        grid_y=None,
        grid_z=3,
        block_x=32,
        block_y=1,
        block_z=1,
        registers_per_thread=None,
        shared_memory=100,
    )
    assert (
        kernel_details(rec) == "regs:0 static_shared:0 dynamic_shared:100 grid:1,1,3 block:32,1,1"
    )
    assert memcpy_kind("Memcpy DtoH (Device -> Pinned)") == "MemcpyD2H"
    assert memcpy_kind("Memcpy PtoP (Device -> Device)") == "MemcpyP2P"
    assert memcpy_kind("Memcpy DtoD (Device -> Device)") == "MemcpyD2D"
    assert memcpy_kind("something else") == "MemcpyOther"


def test_trace_without_gpu_or_steps_still_exports(tmp_path: Path) -> None:
    trace = make_trace()
    trace.kernels = trace.kernels.iloc[0:0]
    trace.steps = trace.steps.iloc[0:0]
    trace.memory = trace.memory.iloc[0:0]
    space = read_xspace(export_xspace(trace, tmp_path, run="cpu"))
    assert [p.name for p in space.planes] == ["/host:CPU"]
    host = event_table(space, "/host:CPU")
    assert "_r" not in host.columns and "_c" not in host.columns
    assert len(host) == len(trace.ops) + len(trace.runtime)


def test_reexport_replaces_file_and_clears_xprof_cache(tmp_path: Path) -> None:
    run_dir = tmp_path / "plugins" / "profile" / "r"
    run_dir.mkdir(parents=True)
    cache = [
        "localhost.SSTABLE",
        "localhost.trie.SSTABLE",
        "ALL_HOSTS.op_stats_v2.pb",
        "cache_version.txt",
    ]
    for name in cache:
        (run_dir / name).write_text("stale")
    (run_dir / "notes.txt").write_text("mine")
    (run_dir / "localhost.xplane.pb").write_bytes(b"old")
    path = export_xspace(make_trace(), tmp_path, run="r")
    assert sorted(p.name for p in run_dir.iterdir()) == ["localhost.xplane.pb", "notes.txt"]
    assert len(read_xspace(path).planes) == 3


def test_names_are_validated(tmp_path: Path) -> None:
    for bad in ("../x", "a/b", "", ".hidden", "x.xplane.pb"):
        with pytest.raises(UsageError):
            export_xspace(make_trace(), tmp_path, run=bad)
        with pytest.raises(UsageError):
            export_xspace(make_trace(), tmp_path, run="ok", host=bad)
    assert not (tmp_path / "plugins").exists()


def test_default_names(tmp_path: Path) -> None:
    trace = make_trace()
    assert default_run_name(trace) == "trace"
    trace.path = tmp_path / "gpt_h100.pt.trace.json.gz"
    assert default_run_name(trace) == "gpt_h100"
    run_dir = tmp_path / "run-2024 05"
    run_dir.mkdir()
    trace.path = run_dir / "trace.json"
    trace.path.write_text("{}")
    trace.manifest = {"status": "ok"}
    assert default_run_name(trace) == "run-2024_05"
    trace.run_dir = tmp_path / "gpt-small"  # type: ignore[attr-defined]
    assert default_run_name(trace) == "gpt-small"
    assert default_host(trace) == "localhost"
    trace.meta["distributed_info"] = {"rank": 3, "world_size": 4}
    assert default_host(trace) == "rank3"


def test_read_xspace_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError):
        read_xspace(tmp_path / "missing.xplane.pb")
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(b"\xff\xff\xff\xff")
    with pytest.raises(TraceError):
        read_xspace(bad)


def test_backward_kernel_keeps_its_name_and_operator() -> None:
    dev = event_table(build_xspace(make_trace()), "/device:GPU:0")
    bwd = dev[dev["name"] == BWD_GEMM]
    assert len(bwd) == 2 and (bwd["tf_op"] == "aten::mm").all()
