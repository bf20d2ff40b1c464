"""Parser tests: exact links on a known trace, bad input, formats, Parquet output."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import tracekit
from tracekit.cli import main
from tracekit.errors import TraceError
from tracekit.parse import load, parse_tables, parse_to_dir
from tracekit.schema import ARROW, TABLES

from . import tracegen as tg


@pytest.fixture
def small(tmp_path: Path) -> Path:
    return tg.write(tg.small_trace(), tmp_path / "small.pt.trace.json.gz")


def test_ops_nesting_and_flags(small: Path) -> None:
    t = load(small)
    ops = t.ops.set_index("name")
    assert list(t.ops.op_id) == list(range(len(t.ops)))
    assert list(t.ops.ts) == sorted(t.ops.ts)
    linear, addmm = ops.loc["aten::linear"], ops.loc["aten::addmm"]
    assert addmm.parent == linear.op_id and addmm.depth == 2
    assert linear.parent == ops.loc["ProfilerStep#1"].op_id
    assert ops.loc["aten::mm"].parent == ops.loc["AddmmBackward0"].op_id
    assert ops.loc["autograd::engine::evaluate_function: AddmmBackward0"].parent == -1
    assert ops.loc["aten::mm"].is_backward and ops.loc["aten::sum"].is_backward
    assert ops.loc["AddmmBackward0"].is_backward  # fwdbwd flow end and autograd frame
    assert not linear.is_backward and not ops.loc["aten::add_"].is_backward
    assert linear.step == 1 and ops.loc["aten::add_"].step == 2
    assert linear.module == "Model_0.Linear_0" and addmm.module == "Model_0.Linear_0"
    assert (
        ops.loc["aten::copy_"].module is None
        or ops.loc["aten::copy_"].module != ops.loc["aten::copy_"].module
    )  # null (outside the modules)
    assert json.loads(linear.input_dims) == [[8, 64], [32, 64], [32]]
    assert addmm.flops == 32768.0
    assert linear.sequence_number == 5 and linear.external_id == 2


def test_kernel_links(small: Path) -> None:
    t = load(small)
    k = t.kernels
    assert list(k.kind) == ["kernel", "kernel", "kernel", "memcpy", "kernel", "kernel"]
    assert list(k.op_name) == [
        "aten::addmm",
        "aten::mm",
        "aten::sum",
        "aten::copy_",
        "aten::add_",
        "aten::add_",
    ]
    bwd = "autograd::engine::evaluate_function: AddmmBackward0"
    assert list(k.top_op_name[:3]) == ["aten::linear", bwd, bwd]  # outermost cpu_op
    assert list(k.step) == [1, 1, 1, 1, 2, 2]
    # The last kernel has no launch event: linked through its External id, no runtime row.
    assert k.runtime_id.iloc[-1] == -1 and k.runtime_id.iloc[-2] >= 0
    assert k.module.iloc[0] == "Model_0.Linear_0"
    assert json.loads(k.op_input_dims.iloc[0])[1] == [8, 64]
    g = k.iloc[0]
    assert (g.grid_x, g.grid_y, g.grid_z, g.block_x, g.registers_per_thread, g.shared_memory) == (
        4,
        2,
        1,
        128,
        32,
        1024,
    )
    assert k.bytes.iloc[3] == 4096 and k.ts.iloc[0] == 20_000 and k.dur.iloc[0] == 5_000
    assert t.meta["counts"]["gpu_activities_with_launch"] == 5
    assert t.meta["counts"]["gpu_activities_linked_to_op"] == 5
    assert t.meta["link_rate"] == 1.0


def test_runtime_memory_steps_meta(small: Path) -> None:
    t = load(small)
    rt = t.runtime
    assert len(rt) == 5 and set(rt.category) == {"cuda_runtime"}
    ops = t.ops.set_index("op_id")
    assert ops.loc[rt.op_id.iloc[0], "name"] == "aten::addmm"
    m = t.memory
    assert list(m.bytes) == [1024, -1024] and list(m.op_name) == ["aten::addmm", "aten::add_"]
    assert list(m.total_allocated) == [4096, 3072] and list(m.step) == [1, 2]
    s = t.steps
    assert list(s.step) == [1, 2] and list(s.cpu_dur) == [100_000, 100_000]
    # Step 1 GPU work: 20-25, 60-64, 66-69, 90-92 us -> busy 14 us, span 20..92.
    assert s.gpu_busy.iloc[0] == 14_000 and s.gpu_ts.iloc[0] == 20_000
    assert s.gpu_dur.iloc[0] == 72_000 and list(s.kernel_count) == [4, 2]
    assert t.meta["options"] == {
        "record_shapes": True,
        "profile_memory": True,
        "with_stack": True,
        "with_modules": True,
        "with_flops": True,
    }
    assert t.device_name == "NVIDIA H100 80GB HBM3"
    assert t.meta["versions"]["cuda_runtime_version"] == 12080


def test_nanosecond_timestamps_are_exact(tmp_path: Path) -> None:
    doc = tg.small_trace()
    text = json.dumps(doc).replace('"ts": 1700000000000020,', '"ts": 1700000000000020.123,')
    p = tmp_path / "ns.json"
    p.write_text(text)
    k = load(p).kernels
    assert k.ts.iloc[0] == 20_123


def test_array_format_and_plain_json(tmp_path: Path) -> None:
    doc = tg.small_trace()
    p = tg.write(doc["traceEvents"], tmp_path / "array.json")
    t = load(p)
    assert len(t.kernels) == 6 and t.meta["source"]["format"] == "array"
    q = tg.write(doc, tmp_path / "compact.json", indent=None)
    assert len(load(q).ops) == len(t.ops)


def test_no_steps_is_one_step(tmp_path: Path) -> None:
    doc = tg.small_trace()
    doc["traceEvents"] = [
        e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep")
    ]
    t = load(tg.write(doc, tmp_path / "nosteps.json"))
    assert list(t.steps.step) == [0] and set(t.kernels.step) == {0} and set(t.ops.step) == {0}
    assert t.steps.kernel_count.iloc[0] == 6


def test_cpu_only_trace_gives_empty_gpu_tables(tmp_path: Path) -> None:
    doc = tg.small_trace()
    doc["traceEvents"] = [
        e for e in doc["traceEvents"] if e.get("cat") in ("cpu_op", "user_annotation")
    ]
    t = load(tg.write(doc, tmp_path / "cpu.json"))
    assert len(t.kernels) == 0 and len(t.ops) == 10 and t.meta["link_rate"] is None


def test_rocm_names(tmp_path: Path) -> None:
    doc = tg.small_trace()
    for e in doc["traceEvents"]:
        if e.get("name") == "cudaLaunchKernel":
            e["name"] = "hipLaunchKernel"
        if e.get("cat") == "kernel":
            e["name"] = "Cijk_Ailk_Bljk_SB_MT64x64x16_SN_1LDSB0"
    t = load(tg.write(doc, tmp_path / "rocm.json"))
    assert t.meta["link_rate"] == 1.0 and "hipLaunchKernel" in set(t.runtime.name)


def test_concatenated_gzip_members(tmp_path: Path) -> None:
    text = json.dumps(tg.small_trace()).encode()
    p = tmp_path / "multi.json.gz"
    p.write_bytes(gzip.compress(text[:500]) + gzip.compress(text[500:]))
    assert len(load(p).kernels) == 6


def test_chunking_is_invisible(small: Path, tmp_path: Path) -> None:
    """Tiny chunks (many cuts, including candidate cuts inside nested objects) give the
    same tables as one chunk."""
    from tracekit.parse.build import build
    from tracekit.parse.columns import Accumulator
    from tracekit.parse.reader import TraceStream

    doc = tg.small_trace()
    doc["traceEvents"][3]["args"]["weird"] = [{"a": "}, {"}, {"b": 1}]  # cut bait
    p = tg.write(doc, tmp_path / "bait.json")
    ref = parse_tables(p)
    stream = TraceStream(p, chunk=200)
    acc = Accumulator()
    for chunk in stream:
        acc.add(chunk)
    got = build(acc, stream.header.fields, str(p))
    for (name, a), (_, b) in zip(ref.items(), got.items(), strict=True):
        assert a.equals(b), name


BAD = {
    "empty": (b"", "empty file"),
    "whitespace": (b"  \n ", "empty file"),
    "not json": (b"hello world", "invalid or truncated JSON"),
    "json without events": (b'{"a": 1}', "without a 'traceEvents' array"),
    "json list of numbers": (b"[1, 2, 3]", "unexpected event field type"),
    "chrome trace, not pytorch": (
        b'{"traceEvents": [{"ph": "X", "cat": "v8", "name": "x", "ts": 1, "dur": 2}]}',
        "not a PyTorch profiler trace",
    ),
    "truncated": (json.dumps(tg.small_trace()).encode()[:700], "truncated"),
    "truncated header": (b'{"schemaVersion": 1, "deviceProp', "invalid or truncated JSON"),
    "wrong type": (
        json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "args": 5}]}).encode(),
        "unexpected event field type",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_one_line_error(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, needle = BAD[case]
    p = tmp_path / "bad.json"
    p.write_bytes(data)
    out = tmp_path / "out"
    with pytest.raises(TraceError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        parse_to_dir(p, out)
    rc = main(["parse", str(p), "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and err.startswith("tracekit: error: ")
    assert not out.exists() and list(tmp_path.iterdir()) == [p]  # nothing half-written


def test_corrupt_and_truncated_gzip(small: Path, tmp_path: Path) -> None:
    data = small.read_bytes()
    bad = tmp_path / "corrupt.json.gz"
    bad.write_bytes(data[:20] + bytes(b ^ 0xFF for b in data[20:60]) + data[60:])
    with pytest.raises(TraceError, match="corrupt gzip"):
        parse_tables(bad)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="truncated"):
        parse_tables(cut)


def test_missing_file_and_folder(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        load(tmp_path / "nope.json")
    with pytest.raises(TraceError, match=r"no \*\.pt\.trace\.json"):
        load(tmp_path)


def test_missing_fields_are_tolerated(tmp_path: Path) -> None:
    doc = tg.small_trace()
    ev = doc["traceEvents"]
    del ev[3]["dur"]  # an op without duration: kept with dur 0
    del ev[15]["ts"]  # a kernel without timestamp: dropped and counted
    del ev[16]["args"]  # a kernel without args: unlinked
    t = load(tg.write(doc, tmp_path / "holes.json"))
    assert t.meta["dropped_events"] == {"kernel": 1}
    assert len(t.kernels) == 5 and (t.ops.dur >= 0).all()
    assert (t.kernels.op_id == -1).sum() == 1


def test_parse_writes_parquet_matching_schema(small: Path, tmp_path: Path) -> None:
    res = parse_to_dir(small, tmp_path / "out")
    for name in TABLES:
        tab = pq.read_table(res.out / f"{name}.parquet")
        assert tab.schema.equals(ARROW[name]), name
    meta = json.loads((res.out / "meta.json").read_text())
    assert meta["counts"]["kernels"] == 5 and meta["schema_version"] == 1
    again = load(res.out)  # a parsed folder loads back
    assert len(again.kernels) == 6 and again.meta["counts"] == meta["counts"]


def test_duckdb_reads_tables(small: Path, tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    out = parse_to_dir(small, tmp_path / "out").out
    rows = duckdb.sql(
        f"SELECT op_name, count(*) AS n, sum(dur) AS ns FROM '{out}/kernels.parquet' "
        "GROUP BY op_name ORDER BY op_name"
    ).fetchall()
    assert rows == [
        ("aten::add_", 2, 4000),
        ("aten::addmm", 1, 5000),
        ("aten::copy_", 1, 2000),
        ("aten::mm", 1, 4000),
        ("aten::sum", 1, 3000),
    ]


def test_public_api(small: Path) -> None:
    t = tracekit.load(str(small))
    assert len(t.kernels) == 6 and t.path == small
