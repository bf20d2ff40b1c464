"""The ncu replay runner, with a stand-in ncu (the real one needs a GPU)."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import pytest

from tracekit.collectors.replay import (
    COUNTERS_CSV,
    GEMM_CSV,
    GEMM_KERNELS,
    _csv_part,
    ncu_command,
    run_counters,
    tensor_metrics,
)
from tracekit.errors import DeviceError, TracekitError

CSV = (
    '"ID","Kernel Name","Block Size","Grid Size","gpu__time_duration.sum"\n'
    '"","","","","nsecond"\n'
    '"0","ampere_sgemm_64x32_nn","(128, 1, 1)","(4, 2, 1)","5120"\n'
)


def _fake_ncu(tmp: Path, body: str) -> Path:
    exe = tmp / "ncu"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


def test_command_profiles_each_launch_configuration_once(tmp_path: Path) -> None:
    cmd = ncu_command(tmp_path, ["a.sum", "b.sum"])
    joined = " ".join(cmd)
    for flag in (
        "--profile-from-start off",
        "--clock-control none",
        "--filter-mode per-launch-config",
        "--launch-count 1",
        "--csv",
        "--metrics a.sum,b.sum",
    ):
        assert flag in joined
    assert cmd[-3:] == ["-m", "tracekit.collectors.replay", str(tmp_path)]


def test_csv_part_drops_ncu_and_program_output() -> None:
    out = "==PROF== Connected\nhello from the program\n" + CSV + "==PROF== Disconnected\n"
    assert _csv_part(out) == CSV


def test_gemm_pass_profiles_every_launch_of_the_gemm_kernels(tmp_path: Path) -> None:
    cmd = ncu_command(tmp_path, ["a.sum"], gemm=True)
    joined = " ".join(cmd)
    assert f"--kernel-name regex:{GEMM_KERNELS}" in joined
    assert "--kernel-name-base demangled" in joined
    assert "--filter-mode" not in joined and "--launch-count" not in joined
    pattern = re.compile(GEMM_KERNELS)
    for name in (
        "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(T1::Params)",
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma",
        "nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT",
        "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float>(…)",
        "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4>(…)",
    ):
        assert pattern.search(name), name
    for name in (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(…)",
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(…)",
    ):
        assert not pattern.search(name), name


def test_run_counters_writes_csv_and_manifest(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(
        json.dumps({"status": "ok", "artifacts": {"trace": "t.json.gz"}})
    )
    exe = _fake_ncu(tmp_path, f"echo '==PROF== Connected'\ncat <<'EOF'\n{CSV}EOF\n")
    entry = run_counters(tmp_path, ["gpu__time_duration.sum"], ncu=str(exe))
    assert (tmp_path / COUNTERS_CSV).read_text() == CSV
    assert (tmp_path / GEMM_CSV).read_text() == CSV  # the stand-in answers both passes alike
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert m["artifacts"]["counters"] == COUNTERS_CSV and m["counters"] == entry
    assert m["artifacts"]["counters_gemm"] == GEMM_CSV
    assert entry["profiled_launches"] == 1 and m["artifacts"]["trace"] == "t.json.gz"
    assert entry["gemm"]["profiled_launches"] == 1 and "regex:" in entry["gemm"]["command"]
    assert entry["replay_seconds_total"] >= entry["replay_seconds"]


def test_gemm_pass_that_matches_nothing_writes_no_gemm_csv(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"status": "ok", "artifacts": {}}))
    body = (  # the CSV only for the first pass; the GEMM pass finds no kernel
        f'case "$*" in *regex:*) echo "==WARNING== No kernels were profiled.";; '
        f"*) cat <<'EOF'\n{CSV}EOF\n;; esac\n"
    )
    entry = run_counters(tmp_path, ["gpu__time_duration.sum"], ncu=str(_fake_ncu(tmp_path, body)))
    assert entry["gemm"]["csv"] is None and entry["gemm"]["profiled_launches"] == 0
    assert not (tmp_path / GEMM_CSV).exists()
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert "counters_gemm" not in m["artifacts"]


def test_run_counters_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "manifest.json").write_text("{}")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(DeviceError, match="no 'ncu' on PATH"):
        run_counters(tmp_path, ["x.sum"])
    exe = _fake_ncu(tmp_path, "echo '==ERROR== ERR_NVGPUCTRPERM' >&2\nexit 1\n")
    with pytest.raises(TracekitError, match="ERR_NVGPUCTRPERM"):
        run_counters(tmp_path, ["x.sum"], ncu=str(exe))
    assert not (tmp_path / COUNTERS_CSV).exists()


def test_only_the_broadest_tensor_counter_of_each_source_is_collected() -> None:
    # Hopper lists per-instruction (op_hgmma/op_hmma), per-destination and sparsity parts of
    # each source's counter: collecting them costs replay passes and adds nothing.
    p = "sm__ops_path_tensor"
    names = [
        f"{p}_src_bf16_dst_fp32",
        f"{p}_src_bf16_dst_fp32_sparsity_off",
        f"{p}_op_hgmma_src_bf16_dst_fp32",
        f"{p}_op_hmma_src_bf16_dst_fp32_sparsity_off",
        f"{p}_src_fp16",
        f"{p}_op_hmma_src_fp16_dst_fp16",
        f"{p}_src_fp8_sparsity_on",
        f"{p}_op_hmma_src_tf32_dst_fp32",  # no broader tf32 counter listed: kept
        "sm__inst_executed_pipe_tensor",
    ]
    assert tensor_metrics(names) == [
        f"{p}_op_hmma_src_tf32_dst_fp32.sum",
        f"{p}_src_bf16_dst_fp32.sum",
        f"{p}_src_fp16.sum",
    ]


def test_sampled_replay_brackets_the_first_block_and_the_lm_head() -> None:
    # The GEMM pass profiles between cudaProfilerStart/Stop called by module hooks; here the
    # two calls are stand-ins that flip a flag, and a dispatch mode records which matrix
    # multiplies (forward and backward) ran inside the brackets.
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from tracekit.collectors.config import CollectConfig
    from tracekit.collectors.replay import _bracket
    from tracekit.collectors.train import build_workload

    cfg = CollectConfig(preset="tiny", device="cpu", seq=32, layers=3)
    wl = build_workload(cfg, torch.device("cpu"))
    state = {"on": False, "calls": []}

    def start() -> object:
        assert not state["on"], "nested cudaProfilerStart"
        state["on"] = True
        state["calls"].append("start")
        return "cudaSuccess"  # like cudart's: not a tensor (a hook must not return it)

    def stop() -> object:
        assert state["on"], "cudaProfilerStop outside a bracket"
        state["on"] = False
        state["calls"].append("stop")
        return "cudaSuccess"

    gemms = {"aten.mm.default", "aten.addmm.default", "aten.bmm.default"}
    seen: list[bool] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if str(func) in gemms:
                seen.append(state["on"])
            return func(*args, **(kwargs or {}))

    for m in (wl.model.blocks[0], wl.model.lm_head):
        _bracket(m, start, stop)
    with Record():
        wl.step(0)
    assert state["calls"] == ["start", "stop"] * 4  # block 0 and LM head, forward and backward
    inside, total = sum(seen), len(seen)
    per_block = (total - 3) // 3  # the LM head: one forward and two backward GEMMs
    assert total == 3 * per_block + 3 and per_block > 0
    assert inside == per_block + 3  # one block's GEMMs and the head's, nothing else
