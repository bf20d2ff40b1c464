"""Every table tracekit writes: column name, Arrow type, unit and meaning.

This module is the single source of truth for the Parquet tables; the schema
section of docs/schema.md is generated from it (``python -m tracekit.schema``)
and a test checks that the two agree and that every written table matches its
schema.

Conventions
-----------
* Timestamps are ``int64`` nanoseconds relative to the trace start (the
  earliest timestamp of any timed event in the trace); durations are ``int64``
  nanoseconds. Kineto writes microseconds (with three decimals on
  nanosecond-resolution traces); tracekit parses the decimal text exactly, so
  no precision is lost to floating point.
* Ids are ``int64`` row ids of the table they name (``op_id`` is a row of
  ``ops``); ``-1`` means "none" for id columns, nulls mean "not in the trace"
  for measured values.
* ``step`` is the ``ProfilerStep#N`` number that the row belongs to (GPU rows:
  the step whose CPU code launched them); ``-1`` is outside every step. A trace
  without step markers is treated as one step, number 0.
* Shapes (``input_dims`` …) are kept as the trace's JSON text, because
  operators taking tensor lists have ragged nesting that no flat Arrow type
  holds; ``tracekit.parse.shapes`` decodes them.
* ``comms`` holds the args c10d writes on ``record_param_comms`` operators and NCCL
  kernels (collective, message elements, dtype, process group); it is filled only for
  traces of distributed jobs (a ``distributedInfo`` header) and joins ``kernels`` on
  ``correlation`` and ``ops`` on ``external_id``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    unit: str
    doc: str


def arrow_schema(cols: list[Column]) -> pa.Schema:
    return pa.schema([pa.field(c.name, c.type) for c in cols])


I64, I32, F64, STR, BOOL = pa.int64(), pa.int32(), pa.float64(), pa.string(), pa.bool_()
# kernels-table kinds that compute (not copies): GPU kernels, and a CPU run's work operators
# in its CPU view (tracekit.parse.cpuview)
COMPUTE_KINDS = ("kernel", "cpu_op")

KERNELS: list[Column] = [
    Column("kernel_id", I64, "", "Row id, in GPU start-time order."),
    Column("kind", STR, "", "'kernel', 'memcpy' or 'memset'."),
    Column("name", STR, "", "Kernel name as the trace gives it (demangled by the profiler)."),
    Column("device", I32, "", "GPU index."),
    Column("stream", I64, "", "CUDA/HIP stream id."),
    Column("ts", I64, "ns", "Start on the GPU, relative to the trace start."),
    Column("dur", I64, "ns", "Duration on the GPU."),
    Column("correlation", I64, "", "CUPTI/roctracer correlation id, shared with the launch."),
    Column("external_id", I64, "", "Kineto 'External id' of the launching operator (-1: none)."),
    Column("grid_x", I32, "", "Grid size, x (null for memcpy/memset)."),
    Column("grid_y", I32, "", "Grid size, y."),
    Column("grid_z", I32, "", "Grid size, z."),
    Column("block_x", I32, "", "Block size, x."),
    Column("block_y", I32, "", "Block size, y."),
    Column("block_z", I32, "", "Block size, z."),
    Column("registers_per_thread", I32, "", "Registers per thread."),
    Column("shared_memory", I64, "bytes", "Shared memory per block (static + dynamic)."),
    Column("bytes", I64, "bytes", "Bytes copied or set (memcpy/memset only)."),
    Column("step", I32, "", "Step of the launching CPU call (-1: none)."),
    Column("runtime_id", I64, "", "Row of `runtime` holding the launch call (-1: none)."),
    Column("op_id", I64, "", "Innermost CPU operator enclosing the launch (-1: none)."),
    Column("op_name", STR, "", "Name of that operator."),
    Column("op_input_dims", STR, "JSON", "Its input shapes (null without record_shapes)."),
    Column("op_input_types", STR, "JSON", "Its input dtypes."),
    Column("top_op_id", I64, "", "Outermost operator (cpu_op) enclosing the launch (-1: none)."),
    Column("top_op_name", STR, "", "Name of that operator."),
    Column(
        "module",
        STR,
        "",
        "nn.Module path of the launch where the trace has it (with_stack/"
        "with_modules), e.g. 'GPT_0.Block_3.MLP_0.Linear_1'; null otherwise.",
    ),
]

OPS: list[Column] = [
    Column("op_id", I64, "", "Row id, in start-time order."),
    Column("category", STR, "", "'cpu_op' or 'user_annotation'."),
    Column("name", STR, "", "Operator or annotation name."),
    Column("pid", I64, "", "Process id."),
    Column("tid", I64, "", "Thread id."),
    Column("ts", I64, "ns", "Start, relative to the trace start."),
    Column("dur", I64, "ns", "Duration on the CPU."),
    Column("parent", I64, "", "Enclosing operator on the same thread, by time nesting (-1: root)."),
    Column("depth", I32, "", "Nesting depth (0: root)."),
    Column("external_id", I64, "", "Kineto 'External id' (-1: none)."),
    Column("sequence_number", I64, "", "Autograd sequence number (-1: none)."),
    Column("fwd_thread_id", I64, "", "Forward thread id for backward ops (-1: none)."),
    Column("input_dims", STR, "JSON", "Input shapes (null without record_shapes)."),
    Column("input_types", STR, "JSON", "Input dtypes."),
    Column("input_strides", STR, "JSON", "Input strides."),
    Column("concrete_inputs", STR, "JSON", "Scalar inputs as recorded."),
    Column("flops", F64, "FLOP", "Profiler's own FLOP estimate (with_flops; null if absent)."),
    Column(
        "is_backward",
        BOOL,
        "",
        "True for backward-pass work: on the autograd thread, under "
        "an autograd node, or the end of a 'fwdbwd' flow.",
    ),
    Column("step", I32, "", "Step whose CPU span holds the op (-1: none)."),
    Column("module", STR, "", "Innermost nn.Module path enclosing the op (null if not traced)."),
]

MEMORY: list[Column] = [
    Column("ts", I64, "ns", "Time of the allocation or free."),
    Column("device_type", I32, "", "0 = CPU, 1 = CUDA (c10::DeviceType)."),
    Column("device", I32, "", "Device index (-1 for CPU)."),
    Column("addr", I64, "", "Address of the block."),
    Column("bytes", I64, "bytes", "Change in allocated bytes: + allocation, - free."),
    Column("total_allocated", I64, "bytes", "Bytes allocated on the device after the event."),
    Column("total_reserved", I64, "bytes", "Bytes reserved by the caching allocator after it."),
    Column("op_id", I64, "", "Innermost operator running on the thread at that time (-1: none)."),
    Column("op_name", STR, "", "Name of that operator."),
    Column("step", I32, "", "Step whose CPU span holds the event (-1: none)."),
]

STEPS: list[Column] = [
    Column("step", I32, "", "Step number N of ProfilerStep#N (0 for a trace without steps)."),
    Column("name", STR, "", "Annotation name."),
    Column("cpu_ts", I64, "ns", "CPU span start."),
    Column("cpu_dur", I64, "ns", "CPU span duration."),
    Column("gpu_ts", I64, "ns", "First GPU activity launched in the step (null: none)."),
    Column("gpu_dur", I64, "ns", "From that start to the end of the step's last GPU activity."),
    Column("gpu_busy", I64, "ns", "Union of the step's GPU activity intervals (all devices)."),
    Column("kernel_count", I64, "", "GPU activities launched in the step."),
]

RUNTIME: list[Column] = [
    Column("runtime_id", I64, "", "Row id, in start-time order."),
    Column("category", STR, "", "'cuda_runtime' or 'cuda_driver'."),
    Column("name", STR, "", "API call, e.g. cudaLaunchKernel, cudaDeviceSynchronize."),
    Column("pid", I64, "", "Process id."),
    Column("tid", I64, "", "Thread id."),
    Column("ts", I64, "ns", "Start on the CPU."),
    Column("dur", I64, "ns", "Duration on the CPU."),
    Column("correlation", I64, "", "Correlation id shared with the GPU activity (-1: none)."),
    Column("external_id", I64, "", "Kineto 'External id' (-1: none)."),
    Column("cbid", I64, "", "CUPTI callback id (-1: none)."),
    Column("op_id", I64, "", "Innermost operator enclosing the call (-1: none)."),
    Column("step", I32, "", "Step whose CPU span holds the call (-1: none)."),
]

COMMS: list[Column] = [
    Column("category", STR, "", "Category of the event that carried them: 'kernel' or 'cpu_op'."),
    Column("name", STR, "", "Event name (an NCCL kernel, 'record_param_comms', ...)."),
    Column("pid", I64, "", "Process id (of a kernel: its device's)."),
    Column("tid", I64, "", "Thread id (of a kernel: its stream's)."),
    Column("ts", I64, "ns", "Start, relative to the trace start."),
    Column("dur", I64, "ns", "Duration."),
    Column("external_id", I64, "", "Kineto 'External id' (-1: none)."),
    Column("correlation", I64, "", "Correlation id: a kernel's `kernels.correlation` (-1: none)."),
    Column(
        "collective",
        STR,
        "",
        "'Collective name' as c10d writes it: allreduce, "
        "_allgather_base, reduce_scatter_tensor, broadcast, send, ...",
    ),
    Column("in_nelems", I64, "", "'In msg nelems': elements of the input (null: absent)."),
    Column("out_nelems", I64, "", "'Out msg nelems': elements of the output."),
    Column("dtype", STR, "", "'dtype' of the message (c10 name: Float, BFloat16, ...)."),
    Column("group_size", I64, "", "'Group size': ranks in the process group."),
    Column("pg_name", STR, "", "'Process Group Name' (the group's id, '0' = default)."),
    Column("pg_desc", STR, "", "'Process Group Description' (default_pg, ...)."),
    Column("pg_ranks", STR, "JSON", "'Process Group Ranks': the group's global ranks."),
    Column("in_split", STR, "JSON", "'In split size' (all_to_all_v)."),
    Column("out_split", STR, "JSON", "'Out split size'."),
    Column(
        "seq",
        I64,
        "",
        "'Seq': the collective's sequence number in its group, where "
        "the profiler writes it (null: absent).",
    ),
    Column("src_rank", I64, "", "'Src Rank' of a point-to-point receive (null: none)."),
    Column("dst_rank", I64, "", "'Dst Rank' of a point-to-point send (null: none)."),
]

TABLES: dict[str, list[Column]] = {
    "kernels": KERNELS,
    "ops": OPS,
    "memory": MEMORY,
    "steps": STEPS,
    "runtime": RUNTIME,
    "comms": COMMS,
}

ARROW: dict[str, pa.Schema] = {name: arrow_schema(cols) for name, cols in TABLES.items()}


def markdown(tables: dict[str, list[Column]] | None = None) -> str:
    """Tables' columns as Markdown (default: the parsed tables, for docs/schema.md)."""
    out: list[str] = []
    for table, cols in (TABLES if tables is None else tables).items():
        out.append(f"#### `{table}`\n")
        out.append("| column | type | unit | meaning |")
        out.append("| --- | --- | --- | --- |")
        for c in cols:
            out.append(f"| `{c.name}` | {c.type} | {c.unit} | {c.doc} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(markdown())
