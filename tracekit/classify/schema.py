"""Columns of the tables ``tracekit classify`` writes (same conventions as tracekit.schema).

Times are int64 ns; FLOPs, bytes and rates are float64 (NaN: unknown); ids are int64
with -1 for none. ``docs/classify.md`` embeds :func:`markdown`; a test keeps the two
and the written frames in agreement.
"""

from __future__ import annotations

import pyarrow as pa

from tracekit.schema import Column, arrow_schema
from tracekit.schema import markdown as schema_markdown

I64, I32, F64, STR, BOOL = pa.int64(), pa.int32(), pa.float64(), pa.string(), pa.bool_()

_SOURCE = (
    "'measured' (Nsight Compute counters), 'profiler' (the trace's own FLOPs or "
    "copy size), 'modelled' (tracekit's formula from recorded shapes) or 'none'."
)
_BOUND = "'memory-bound', 'compute-bound' or 'unknown' (no FLOPs/bytes, or unknown device)."

KERNEL_ROOFLINE: list[Column] = [
    Column("kernel_id", I64, "", "Row of the parsed `kernels` table."),
    Column("name", STR, "", "Kernel name."),
    Column("kind", STR, "", "'kernel', 'memcpy' or 'memset'."),
    Column("class", STR, "", "Class of work (see the class rules)."),
    Column(
        "class_source",
        STR,
        "",
        "What decided the class: 'kind', 'op' (innermost operator), "
        "'kernel' (kernel name), 'ancestor' (an enclosing operator) or 'none'.",
    ),
    Column("class_rule", STR, "", "The winning rule, '<target>:<pattern>'."),
    Column(
        "fused_ops",
        STR,
        "",
        "Inductor (torch.compile) Triton kernels: the fused op list, "
        "comma-separated; null otherwise.",
    ),
    Column("device", I32, "", "GPU index."),
    Column("stream", I64, "", "Stream id."),
    Column("op_id", I64, "", "Innermost operator that launched the kernel (-1: none)."),
    Column("op_name", STR, "", "Its name."),
    Column("autograd_node", STR, "", "Nearest enclosing autograd node (e.g. AddmmBackward0)."),
    Column("top_op", STR, "", "Outermost operator enclosing the launch."),
    Column("module", STR, "", "nn.Module path where the trace has it."),
    Column("step", I32, "", "Step of the launching CPU call (-1: none)."),
    Column("ts", I64, "ns", "Start on the GPU."),
    Column("dur", I64, "ns", "Duration on the GPU."),
    Column(
        "cost_op_id",
        I64,
        "",
        "Operator whose FLOPs/bytes this kernel carries a share of "
        "(-1: none); the innermost operator with a model, else an ancestor of the same class.",
    ),
    Column("cost_op_name", STR, "", "Its name."),
    Column(
        "flops",
        F64,
        "FLOP",
        "FLOPs of this kernel: its share (by duration) of the cost operator's, or measured.",
    ),
    Column("bytes", F64, "bytes", "Minimal DRAM bytes (modelled share) or measured DRAM bytes."),
    Column("flops_model", F64, "FLOP", "Modelled/profiler FLOPs share, kept next to measured."),
    Column("bytes_model", F64, "bytes", "Modelled bytes share, kept next to measured."),
    Column("l2_bytes", F64, "bytes", "Measured L2 traffic (lts__t_bytes; NaN if not measured)."),
    Column("intensity", F64, "FLOP/byte", "flops / bytes."),
    Column("intensity_l2", F64, "FLOP/byte", "flops / l2_bytes (measured only)."),
    Column("pipe", STR, "", "Precision pipe judged against, e.g. tensor_bf16, simt_fp32."),
    Column("peak_flops", F64, "FLOP/s", "Peak of that pipe."),
    Column("peak_bw", F64, "B/s", "Memory bandwidth roof."),
    Column("ridge", F64, "FLOP/byte", "peak_flops / peak_bw."),
    Column("bound", STR, "", _BOUND),
    Column(
        "bound_level",
        STR,
        "",
        "Which roof binds: 'dram', 'l2' (hierarchical, measured only), 'compute', or null.",
    ),
    Column("attained_flops", F64, "FLOP/s", "flops / dur."),
    Column("attained_bw", F64, "B/s", "bytes / dur."),
    Column(
        "roof_pct",
        F64,
        "%",
        "Attained fraction of the roof at this intensity: attained_bw "
        "/ peak_bw when memory-bound, attained_flops / peak_flops when compute-bound.",
    ),
    Column("source", STR, "", _SOURCE),
    Column(
        "extrapolated",
        BOOL,
        "",
        "Counters copied from another launch of the same kernel signature (profile-once mode).",
    ),
    Column(
        "cost_note",
        STR,
        "",
        "Assumptions behind the numbers (causal halving, dtype of "
        "tensor lists, missing arguments).",
    ),
]

OP_ROOFLINE: list[Column] = [
    Column("op_id", I64, "", "Row of `ops` (the cost operator of its kernels)."),
    Column("name", STR, "", "Operator name."),
    Column("class", STR, "", "Class of most of its kernel time."),
    Column("step", I32, "", "Step whose CPU span holds the op."),
    Column("module", STR, "", "nn.Module path (null if not traced)."),
    Column("autograd_node", STR, "", "Nearest enclosing autograd node."),
    Column("input_dims", STR, "JSON", "Recorded input shapes."),
    Column("input_types", STR, "JSON", "Recorded input dtypes."),
    Column("gpu_dur", I64, "ns", "Sum of its kernels' durations."),
    Column("kernel_count", I64, "", "Kernels (incl. memcpy/memset) attributed to it."),
    Column("flops", F64, "FLOP", "FLOPs (sum over its kernels)."),
    Column("bytes", F64, "bytes", "Minimal DRAM bytes (modelled) or measured DRAM bytes."),
    Column("flops_model", F64, "FLOP", "Modelled/profiler FLOPs (next to measured)."),
    Column("bytes_model", F64, "bytes", "Modelled bytes (next to measured)."),
    Column("intensity", F64, "FLOP/byte", "flops / bytes."),
    Column("pipe", STR, "", "Pipe of its longest kernel."),
    Column("ridge", F64, "FLOP/byte", "Ridge point of that pipe."),
    Column("bound", STR, "", _BOUND),
    Column("attained_flops", F64, "FLOP/s", "flops / gpu_dur."),
    Column("attained_bw", F64, "B/s", "bytes / gpu_dur."),
    Column("roof_pct", F64, "%", "Attained fraction of the roof at its intensity."),
    Column("source", STR, "", _SOURCE + " (of its longest kernel)"),
    Column("cost_note", STR, "", "Assumptions behind the numbers."),
]

CLASSES: list[Column] = [
    Column("class", STR, "", "Class of work; every class has a row (zeros when absent)."),
    Column(
        "group",
        STR,
        "",
        "The heading the class is shown under: 'normalization' for layernorm, rmsnorm, "
        "batchnorm and groupnorm; else the class itself.",
    ),
    Column(
        "gpu_time",
        I64,
        "ns",
        "Summed GPU activity time (kernels + memcpy + memset) over the analysed steps.",
    ),
    Column("time_share_pct", F64, "%", "gpu_time / summed GPU activity time of all classes."),
    Column("ms_per_step", F64, "ms", "gpu_time per analysed step."),
    Column("flops", F64, "FLOP", "Summed known FLOPs."),
    Column("flop_share_pct", F64, "%", "flops / all known FLOPs."),
    Column("bytes", F64, "bytes", "Summed known bytes."),
    Column("kernel_count", I64, "", "GPU activities."),
    Column("memory_bound_pct", F64, "%", "Share of the class's time in memory-bound kernels."),
]

STEP_SUMMARY: list[Column] = [
    Column("step", I32, "", "Step number."),
    Column("gpu_span", I64, "ns", "From the step's first GPU activity start to its last end."),
    Column("gpu_busy", I64, "ns", "Union of the step's GPU activity intervals."),
    Column("kernel_time", I64, "ns", "Summed GPU activity durations."),
    Column("kernel_count", I64, "", "GPU activities launched in the step."),
    Column("flops", F64, "FLOP", "Summed known FLOPs."),
    Column("bytes", F64, "bytes", "Summed known bytes (kernel-derived traffic)."),
    Column(
        "flops_coverage_pct",
        F64,
        "%",
        "Share of the kernels' time (memcpy/memset "
        "excluded) whose FLOPs are known; flops is NaN when none are.",
    ),
    Column("intensity", F64, "FLOP/byte", "flops / bytes."),
    Column("achieved_flops", F64, "FLOP/s", "flops / gpu_span."),
    Column("achieved_bw", F64, "B/s", "bytes / gpu_span."),
    Column("bw_util_pct", F64, "%", "achieved_bw / the bandwidth roof."),
    Column("memory_bound_time_pct", F64, "%", "Share of kernel_time in memory-bound kernels."),
    Column("compute_bound_time_pct", F64, "%", "Share of kernel_time in compute-bound kernels."),
    Column("unknown_bound_time_pct", F64, "%", "Share of kernel_time not classed."),
    Column("gpu_idle_pct", F64, "%", "1 - gpu_busy / gpu_span."),
    Column("launch_bound", BOOL, "", "GPU idle more than half of the step: launch/host-bound."),
    Column(
        "analytic_bytes",
        F64,
        "bytes",
        "Analytic traffic (tracekit.classify.models.traffic, as in the report): parameters, "
        "gradients, optimizer state and saved activations each moved twice per step (NaN "
        "without a model config).",
    ),
    Column(
        "analytic_param_bytes",
        F64,
        "bytes",
        "Parameters: 2 × (fp32 master weights + autocast copies).",
    ),
    Column("analytic_grad_bytes", F64, "bytes", "Gradients: 2 × fp32."),
    Column("analytic_optim_bytes", F64, "bytes", "AdamW state: 2 × two fp32 moments."),
    Column(
        "analytic_act_bytes",
        F64,
        "bytes",
        "Saved activations: 2 × what the analytic memory model saves for backward.",
    ),
    Column("bytes_vs_analytic", F64, "", "bytes / analytic_bytes."),
]

DEVICE: list[Column] = [
    Column("device", STR, "", "deviceProperties name."),
    Column("spec", STR, "", "Spec-table entry used (null: none)."),
    Column("pipe", STR, "", "Precision pipe."),
    Column("peak_flops", F64, "FLOP/s", "Peak of the pipe (NaN: unknown)."),
    Column(
        "peak_source", STR, "", "Where it came from: measured, spec (with citation), user flag."
    ),
    Column("bandwidth", F64, "B/s", "Memory bandwidth roof."),
    Column("bandwidth_source", STR, "", "Where it came from."),
    Column("ridge", F64, "FLOP/byte", "peak_flops / bandwidth."),
    Column("l2_bandwidth", F64, "B/s", "L2 roof (from Nsight Compute peak metrics; NaN: unknown)."),
]

COUNTERS: list[Column] = [
    Column("ncu_id", I64, "", "Row ID in the Nsight Compute CSV (profiling order)."),
    Column("kernel_name", STR, "", "Kernel name as ncu prints it."),
    Column("base_name", STR, "", "Normalised function name used for matching."),
    Column("grid", STR, "", "Grid size 'x,y,z'."),
    Column("block", STR, "", "Block size 'x,y,z'."),
    Column("device", I32, "", "Device."),
    Column("stream", I64, "", "Stream (ncu's numbering)."),
    Column("duration", F64, "ns", "gpu__time_duration.sum under replay."),
    Column("tensor_flops", F64, "FLOP", "Tensor-pipe operations (sm__ops_path_tensor_src_*)."),
    Column("simt_flops_fp32", F64, "FLOP", "2·FFMA + FADD + FMUL thread instructions."),
    Column("simt_flops_fp16", F64, "FLOP", "2·HFMA + HADD + HMUL thread instructions."),
    Column("simt_flops_fp64", F64, "FLOP", "2·DFMA + DADD + DMUL thread instructions."),
    Column("flops", F64, "FLOP", "tensor + SIMT FLOPs."),
    Column("tensor_pipe", STR, "", "Pipe of the largest tensor metric (tensor_bf16, …)."),
    Column("dram_read", F64, "bytes", "dram__bytes_read.sum."),
    Column("dram_write", F64, "bytes", "dram__bytes_write.sum."),
    Column("dram_bytes", F64, "bytes", "Read + write."),
    Column("l2_bytes", F64, "bytes", "lts__t_bytes.sum."),
    Column(
        "l2_peak_bw",
        F64,
        "B/s",
        "L2 roof from lts__t_bytes.sum.peak_sustained × "
        "lts__cycles_elapsed.avg.per_second (NaN if not collected).",
    ),
    Column(
        "dram_peak_bw",
        F64,
        "B/s",
        "DRAM roof from dram__bytes.sum.peak_sustained × "
        "dram__cycles_elapsed.avg.per_second (NaN if not collected).",
    ),
]

TABLES: dict[str, list[Column]] = {
    "kernel_roofline": KERNEL_ROOFLINE,
    "op_roofline": OP_ROOFLINE,
    "classes": CLASSES,
    "step_summary": STEP_SUMMARY,
    "device": DEVICE,
    "counters": COUNTERS,
}

ARROW: dict[str, pa.Schema] = {name: arrow_schema(cols) for name, cols in TABLES.items()}


def markdown() -> str:
    return schema_markdown(TABLES)
