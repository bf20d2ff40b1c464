"""Hand-built traces of a two-rank DDP job whose multi-rank figures are known by
construction (times in µs, PyTorch's layout from tests/tracegen.py).

Per step and rank (``s``: the step's start on that rank):

* a GEMM on stream 7 from ``s + 100`` for ``gemm[r]`` µs (rank 1 computes longer: it is
  the straggler);
* an all-reduce on stream 20: rank r's NCCL kernel starts when it arrives, ``s +
  arrive[r]``; the transfer begins when the last rank has arrived and lasts ``TRANSFER``
  µs; every rank's kernel ends then (a collective ends together);
* an optimizer kernel 100 µs after the all-reduce, 500 µs long.

The all-reduce moves ``NELEMS`` fp32 elements: 200 MB in 2 ms = 100 GB/s algbw, and on two
ranks busbw = algbw x 2(n-1)/n = 100 GB/s.

``meta``: where the collective's size comes from — ``"kernel"`` (PyTorch >= 2.1: the NCCL
kernel's args), ``"rpc"`` (only the ``record_param_comms`` operator's args) or
``"shapes"`` (only the ``nccl:all_reduce`` operator's recorded shapes).
"""

from __future__ import annotations

from typing import Any

from . import tracegen as tg

STEP = 10_000
TRANSFER = 2_000
NELEMS = 50_000_000  # fp32: 200 MB
GEMM = {0: 5_000, 1: 6_000}
ARRIVE = {0: 4_000, 1: 5_000}
SGEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32"
ADAM = "void at::native::multi_tensor_apply_kernel<at::native::FusedAdamMathFunctor>(...)"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
PG = {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 2,
      "ranks": [0, 1]}  # fmt: skip
COMM_ARGS = {
    "Collective name": "allreduce",
    "In msg nelems": NELEMS,
    "Out msg nelems": NELEMS,
    "Group size": 2,
    "dtype": "Float",
    "In split size": "[]",
    "Out split size": "[]",
    "Process Group Name": "0",
    "Process Group Description": "default_pg",
    "Process Group Ranks": "[0, 1]",
}


class Rank:
    """The events of one rank's trace."""

    def __init__(self, rank: int, shift: float = 0.0) -> None:
        self.rank = rank
        self.shift = shift  # added to every time: a clock offset
        self.ev: list[dict[str, Any]] = []
        self.ext = 1000
        self.corr = 1

    def _ids(self) -> tuple[int, int]:
        self.ext += 1
        self.corr += 1
        return self.ext, self.corr

    def _t(self, e: dict[str, Any]) -> dict[str, Any]:
        e["ts"] = e["ts"] + self.shift
        if e.get("cat") in ("kernel", "gpu_memcpy"):
            e["pid"] = self.rank
            e["args"]["device"] = self.rank
        return e

    def add(self, *events: dict[str, Any]) -> None:
        self.ev.extend(self._t(e) for e in events)

    def compute(self, name: str, op: str, cpu: float, gpu: float, dur: float) -> None:
        ext, corr = self._ids()
        self.add(
            tg.op(op, cpu, 5, ext),
            tg.launch(cpu + 1, corr, ext),
            tg.kernel(name, gpu, dur, corr, ext, stream=7),
        )

    def allreduce(self, cpu: float, gpu: float, dur: float, meta: str) -> None:
        ext, corr = self._ids()
        rpc_ext = ext + 500_000
        shapes = {"Input Dims": [[NELEMS]], "Input type": ["float"]} if meta == "shapes" else {}
        rpc_args = COMM_ARGS if meta == "rpc" else {}
        kernel = tg.kernel(NCCL, gpu, dur, corr, ext, stream=20)
        if meta == "kernel":
            kernel["args"].update(COMM_ARGS)
        self.add(
            tg.op("c10d::allreduce_", cpu, 30, ext + 700_000),
            tg.op("record_param_comms", cpu + 2, 25, rpc_ext, **rpc_args),
            {
                **tg.annot("nccl:all_reduce", cpu + 4, 20, ext),
                "args": {"External id": ext, **shapes},
            },
            tg.launch(cpu + 6, corr, ext),
            kernel,
        )

    def doc(self, world: int = 2, info: bool = True) -> dict[str, Any]:
        head: dict[str, Any] = {"schemaVersion": 1, "host_name": "node0"}
        if info:  # Kineto writes it before the events
            head["distributedInfo"] = {
                "backend": "nccl", "rank": self.rank, "world_size": world, "pg_count": 1,
                "pg_config": [PG], "nccl_version": "2.27.3",
            }  # fmt: skip
        d = tg.small_trace()
        d["traceEvents"] = self.ev
        gpu = d["deviceProperties"][0]
        d["deviceProperties"] = [{**gpu, "id": i} for i in range(world)]  # the node's GPUs
        return {**head, **d}


def step_starts(rank: int, steps: int = 2) -> list[float]:
    return [float(n * STEP) for n in range(steps)]


def two_ranks(
    meta: str = "kernel", shift: float = 0.0, steps: int = 2
) -> dict[int, dict[str, Any]]:
    """The job's two traces (rank -> document); rank 1's clock ``shift`` µs ahead."""
    ranks = {0: Rank(0), 1: Rank(1, shift)}
    for n in range(steps):
        s = float(n * STEP)
        end = s + max(ARRIVE.values()) + TRANSFER  # the collective ends together
        for r, b in ranks.items():
            b.add(tg.annot(f"ProfilerStep#{n + 1}", s, STEP, 10 + n))
            b.compute(SGEMM, "aten::mm", s + 10, s + 100, GEMM[r])
            b.allreduce(s + 60, s + ARRIVE[r], end - (s + ARRIVE[r]), meta)
            b.compute(ADAM, "aten::_fused_adam_", s + 90, end + 100, 500)
    return {r: b.doc() for r, b in ranks.items()}


# What the figures are, per step (µs), by construction.
EXPECTED = {
    0: {"busy": 6_900 + 500, "compute": 5_000 + 500, "comm": 3_000, "exposed": 1_900,
        "wait": 1_000, "idle": STEP - 7_400},
    1: {"busy": 6_900 + 500, "compute": 6_000 + 500, "comm": 2_000, "exposed": 900,
        "wait": 0, "idle": STEP - 7_400},
}  # fmt: skip


ONE_GPU_STEP = 8_000


def one_gpu(steps: int = 2) -> dict[str, Any]:
    """The same model on one GPU (rank 0's work without the all-reduce): a GEMM of
    ``GEMM[0]`` µs and the optimizer, in steps of ``ONE_GPU_STEP`` µs."""
    b = Rank(0)
    for n in range(steps):
        s = float(n * ONE_GPU_STEP)
        b.add(tg.annot(f"ProfilerStep#{n + 1}", s, ONE_GPU_STEP, 10 + n))
        b.compute(SGEMM, "aten::mm", s + 10, s + 100, GEMM[0])
        b.compute(ADAM, "aten::_fused_adam_", s + 90, s + 100 + GEMM[0] + 100, 500)
    d = tg.small_trace()
    d["traceEvents"] = b.ev
    return d
