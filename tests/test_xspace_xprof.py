"""xprof (TensorBoard's PROFILE tab) reads what export_xspace writes.

Skipped when the optional extra is not installed (``pip install 'tracekit[xprof]'``).
The converter tests call xprof's own C++ converter in process; the server test
starts TensorBoard on 127.0.0.1 and goes through the profile plugin's HTTP
endpoints, as the browser does.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests._xspace_data import make_trace
from tracekit.xspace import export_xspace

raw_to_tool_data = pytest.importorskip(
    "xprof.convert.raw_to_tool_data", reason="xprof not installed (pip install 'tracekit[xprof]')"
)

REPO = Path(__file__).resolve().parents[1]


def _tool(path: Path, tool: str, **params: Any) -> Any:
    params.setdefault("use_saved_result", False)
    data, _ = raw_to_tool_data.xspace_to_tool_data([str(path)], tool, params)
    assert data is not None, f"xprof returned no {tool} data"
    return json.loads(data)


def _trace_viewer(path: Path) -> dict[str, Any]:
    # Full time span (start = end = 0), no down-sampling (resolution 0).
    options = {"resolution": "0", "start_time_ms": "0", "end_time_ms": "0", "format": "json"}
    return _tool(path, "trace_viewer@", trace_viewer_options=options, hosts=["localhost"])  # type: ignore[no-any-return]


def kernel_stats_by_name(data: dict[str, Any]) -> pd.DataFrame:
    """xprof's kernel_stats table summed per kernel name (it splits by launch shape and op)."""
    cols = [c["id"] for c in data["cols"]]
    rows = [[cell.get("v") for cell in row["c"]] for row in data["rows"]]
    df = pd.DataFrame(rows, columns=cols)
    return df.groupby("kernel_name").agg(
        count=("occurrences", "sum"), total_us=("total_duration_us", "sum")
    )


def tracekit_kernels_by_name(kernels: pd.DataFrame) -> pd.DataFrame:
    k = kernels[kernels["kind"] == "kernel"]
    out = k.groupby("name").agg(count=("dur", "size"), total_us=("dur", "sum"))
    out["total_us"] = out["total_us"] / 1000.0
    out.index.name = "kernel_name"
    return out


def trace_viewer_lines(data: dict[str, Any]) -> pd.DataFrame:
    """Complete events per (process, thread) name of a trace viewer JSON reply."""
    names: dict[tuple[int, int | None], str] = {}
    for e in data["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") in ("process_name", "thread_name"):
            names[(e["pid"], e.get("tid"))] = e["args"]["name"]
    count: Counter[tuple[str, str]] = Counter()
    dur: Counter[tuple[str, str]] = Counter()
    for e in data["traceEvents"]:
        if e.get("ph") == "X":
            key = (names.get((e["pid"], None), ""), names.get((e["pid"], e["tid"]), ""))
            count[key] += 1
            dur[key] += float(e.get("dur", 0))
    rows = [(p, t, count[(p, t)], dur[(p, t)]) for p, t in count]
    return pd.DataFrame(rows, columns=["process", "thread", "events", "dur_us"]).set_index(
        ["process", "thread"]
    )


def check_kernel_stats(data: dict[str, Any], kernels: pd.DataFrame) -> None:
    got = kernel_stats_by_name(data).sort_index()
    want = tracekit_kernels_by_name(kernels).sort_index()
    assert list(got.index) == list(want.index)
    assert got["count"].astype(int).tolist() == want["count"].tolist()
    for g, w in zip(got["total_us"], want["total_us"], strict=True):
        assert g == pytest.approx(w, rel=1e-9, abs=1e-6)


def check_trace_viewer_streams(data: dict[str, Any], kernels: pd.DataFrame) -> None:
    lines = trace_viewer_lines(data)
    for (device, stream), rows in kernels.groupby(["device", "stream"]):
        process = f"localhost /device:GPU:{device}"
        thread = [t for p, t in lines.index if p == process and t.startswith(f"Stream #{stream}(")]
        assert len(thread) == 1, (process, stream, list(lines.index))
        got = lines.loc[(process, thread[0])]
        assert got["events"] == len(rows)
        assert got["dur_us"] == pytest.approx(rows["dur"].sum() / 1000.0, rel=1e-9, abs=1e-6)


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Path, Any]:
    trace = make_trace()
    return export_xspace(trace, tmp_path / "tb", run="fake"), trace


def test_xprof_lists_the_gpu_tools(exported: tuple[Path, Any]) -> None:
    path, _ = exported
    tools = set(raw_to_tool_data.xspace_to_tool_names([str(path)]))
    assert {"trace_viewer@", "overview_page", "kernel_stats", "memory_profile"} <= tools


def test_kernel_stats_match_tracekit(exported: tuple[Path, Any]) -> None:
    path, trace = exported
    data = _tool(path, "kernel_stats")
    check_kernel_stats(data, trace.kernels)
    # Kernels are grouped under their launching operator.
    cols = [c["id"] for c in data["cols"]]
    ops = {row["c"][cols.index("op_name")]["v"] for row in data["rows"]}
    assert ops == {"aten::mm", "aten::add"}
    shapes = {row["c"][cols.index("grid_dim")]["v"] for row in data["rows"]}
    assert shapes == {"64,2,1", "4,1,1"}


def test_trace_viewer_shows_every_stream_and_thread(exported: tuple[Path, Any]) -> None:
    path, trace = exported
    data = _trace_viewer(path)
    check_trace_viewer_streams(data, trace.kernels)
    lines = trace_viewer_lines(data)
    host = pd.concat([trace.ops[["tid", "dur"]], trace.runtime[["tid", "dur"]]])
    for tid, rows in host.groupby("tid"):
        got = lines.loc[("localhost /host:CPU", f"Thread {tid}")]
        assert got["events"] == len(rows)
    # xprof derived per-device step lines from our step grouping.
    assert lines.loc[("localhost /device:GPU:0", "Steps"), "events"] == 2


def test_overview_page_has_our_steps(exported: tuple[Path, Any]) -> None:
    path, trace = exported
    tables = _tool(path, "overview_page")
    step_table = next(t for t in tables if "steptime_ms_average" in t.get("p", {}))
    assert len(step_table["rows"]) == len(trace.steps)
    # The host-to-device copy of step 1 counts as input time (its only copy).
    cols = [c["id"] for c in step_table["cols"]]
    memcpy_ms = trace.kernels.loc[trace.kernels["kind"] == "memcpy", "dur"].sum() / 1e6
    infeed = [row["c"][cols.index("infeedTimeMs")]["v"] for row in step_table["rows"]]
    assert infeed == [pytest.approx(memcpy_ms), 0.0]
    env = next(t for t in tables if "device_type" in t.get("p", {}))["p"]
    assert env["device_type"] == "Nvidia GPU (Hopper)"
    assert env["device_core_count"] == "2"
    top_ops = next(t for t in tables if "device_tf_op_percent" in t.get("p", {}))
    assert {row["c"][3]["v"] for row in top_ops["rows"]} >= {"aten::mm", "aten::add"}


def test_memory_profile_reads_our_allocations(exported: tuple[Path, Any]) -> None:
    path, trace = exported
    data = _tool(path, "memory_profile")
    assert data["memoryIds"] == ["CPU", "GPU_0"]
    gpu = data["memoryProfilePerAllocator"]["GPU_0"]["profileSummary"]
    mem = trace.memory[trace.memory["device_type"] == 1]
    assert int(gpu["peakStats"]["heapAllocatedBytes"]) == mem["total_allocated"].max()
    assert int(gpu["memoryCapacity"]) == 85_000_000_000


# Traces that add no shape of their own to the converter test: the second rank of the DDP
# runs (rank 1 of the FSDP run stays, for a second device's planes and FSDP's collectives),
# and the gpt2-medium generate run (its 17 kernel names are among gpt2-small's 20, on the
# same stream, with as many events).
SAME_SHAPE = ("h100x2-ddp-*/rank1.*", "h200-gen-gpt2m-*/*")


def _fixture_traces() -> list[Path]:
    found = sorted((REPO / "fixtures").glob("*/*.pt.trace.json.gz"))
    return [p for p in found if not any(p.match(pattern) for pattern in SAME_SHAPE)]


@pytest.mark.parametrize("trace_path", _fixture_traces(), ids=lambda p: p.name)
def test_real_fixture_kernel_stats_and_streams(trace_path: Path, tmp_path: Path) -> None:
    parse = pytest.importorskip("tracekit.parse")
    if not hasattr(parse, "load"):
        pytest.skip("tracekit.parse.load not available yet")
    trace = parse.load(trace_path)
    path = export_xspace(trace, tmp_path, run="fixture", host="localhost")
    check_kernel_stats(_tool(path, "kernel_stats"), trace.kernels)
    check_trace_viewer_streams(_trace_viewer(path), trace.kernels)
    gpu_mem = trace.memory[trace.memory["device_type"] == 1]
    if not gpu_mem.empty:  # recorded with profile_memory: the memory profile's peaks
        profile = _tool(path, "memory_profile")["memoryProfilePerAllocator"]
        for device, rows in gpu_mem.groupby("device"):
            peak = profile[f"GPU_{device}"]["profileSummary"]["peakStats"]
            assert int(peak["heapAllocatedBytes"]) == rows["total_allocated"].max()


# ---------------------------------------------------------------- TensorBoard


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(base: str, route: str, timeout: float = 60.0, **query: str) -> Any:
    url = f"{base}/data/plugin/profile/{route}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        body = resp.read()
        if resp.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
    return json.loads(body)


@pytest.fixture
def tensorboard(exported: tuple[Path, Any], tmp_path: Path) -> Iterator[str]:
    logdir = exported[0].parents[3]
    port = _free_port()
    log = (tmp_path / "tensorboard.log").open("wb")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    cmd = [
        sys.executable,
        "-m",
        "tensorboard.main",
        "--logdir",
        str(logdir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--load_fast=false",
    ]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"tensorboard exited with {proc.returncode}; see {log.name}")
            try:
                _get(base, "runs", timeout=5)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    pytest.fail(f"tensorboard did not answer within 90 s; see {log.name}")
                time.sleep(0.5)
        yield base
    finally:
        proc.kill()
        proc.wait(timeout=30)
        log.close()


def test_tensorboard_profile_plugin_serves_the_run(
    tensorboard: str, exported: tuple[Path, Any]
) -> None:
    _, trace = exported
    assert _get(tensorboard, "runs") == ["fake"]
    tools = _get(tensorboard, "run_tools", run="fake")
    assert {"trace_viewer@", "overview_page", "kernel_stats", "memory_profile"} <= set(tools)
    assert _get(tensorboard, "hosts", run="fake", tag="kernel_stats") == [{"hostname": "localhost"}]
    kstats = _get(tensorboard, "data", run="fake", tag="kernel_stats", host="localhost")
    check_kernel_stats(kstats, trace.kernels)
    tv = _get(
        tensorboard, "data", run="fake", tag="trace_viewer@", host="localhost", resolution="0"
    )
    assert tv["returnedEventsSize"] > 0
    check_trace_viewer_streams(tv, trace.kernels)
