"""What a trace event is, for every module of the parser: the msgspec structs that keep
the fields tracekit reads, their decoders, and the event kinds.

This module imports nothing else from tracekit.parse; the reader (``reader``), the
native scanner's Python side (``scan``) and the column code (``columns``) all import
their shared definitions from here, so none of them needs another.
"""

from __future__ import annotations

from typing import Any

import msgspec

_NO_RAW = msgspec.Raw()


class Args(msgspec.Struct, frozen=True, gc=False):
    """The ``args`` keys tracekit reads; every other key is skipped by the decoder."""

    external_id: Any = msgspec.field(name="External id", default=None)
    correlation: Any = None
    device: Any = None
    stream: Any = None
    grid: Any = None
    block: Any = None
    registers: Any = msgspec.field(name="registers per thread", default=None)
    shared_memory: Any = msgspec.field(name="shared memory", default=None)
    nbytes: Any = msgspec.field(name="bytes", default=None)
    seq: Any = msgspec.field(name="Sequence number", default=None)
    fwd_tid: Any = msgspec.field(name="Fwd thread id", default=None)
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=_NO_RAW)
    input_types: msgspec.Raw = msgspec.field(name="Input type", default=_NO_RAW)
    input_strides: msgspec.Raw = msgspec.field(name="Input Strides", default=_NO_RAW)
    concrete: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=_NO_RAW)
    flops: Any = None
    cbid: Any = None
    device_type: Any = msgspec.field(name="Device Type", default=None)
    device_id: Any = msgspec.field(name="Device Id", default=None)
    addr: Any = msgspec.field(name="Addr", default=None)
    mem_bytes: Any = msgspec.field(name="Bytes", default=None)
    total_allocated: Any = msgspec.field(name="Total Allocated", default=None)
    total_reserved: Any = msgspec.field(name="Total Reserved", default=None)
    name: Any = None  # metadata events: process / thread name
    python_id: Any = msgspec.field(name="Python id", default=None)
    python_parent_id: Any = msgspec.field(name="Python parent id", default=None)


_NO_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    """One trace event, reduced to what tracekit reads. ``ts``/``dur`` stay as text
    when they have decimals (see :func:`tracekit.parse.columns.to_ns`)."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    bp: Any = None
    args: Args = _NO_ARGS


EVENT_FIELDS: tuple[str, ...] = Event.__struct_fields__
# The JSON key of each field the parser reads (``Args`` renames some), for messages.
JSON_KEYS: dict[str, str] = {
    **dict(zip(Event.__struct_fields__, Event.__struct_encode_fields__, strict=True)),
    **dict(zip(Args.__struct_fields__, Args.__struct_encode_fields__, strict=True)),
}
EVENT_LIST = msgspec.json.Decoder(list[Event], float_hook=str)  # one chunk: "[" body "]"
ANY_JSON = msgspec.json.Decoder()  # header and trailer objects

# Event kinds (small ints, used as array codes; the native scanner writes the same codes).
OTHER, OP, ANNOT, KERNEL, MEMCPY, MEMSET, RUNTIME, DRIVER, PYMODULE, GPU_ANNOT, MEMORY, FLOW_END = (
    range(12)
)
KIND_NAMES = {
    OP: "cpu_op",
    ANNOT: "user_annotation",
    KERNEL: "kernel",
    MEMCPY: "memcpy",
    MEMSET: "memset",
    RUNTIME: "cuda_runtime",
    DRIVER: "cuda_driver",
}
# How meta.json's bad_values names each kind (its category or phase).
KIND_LABELS = {
    **KIND_NAMES,
    PYMODULE: "python_function",
    GPU_ANNOT: "gpu_user_annotation",
    MEMORY: "[memory]",
    FLOW_END: "fwdbwd",
}

# Category names across Kineto versions (older traces used capitalised names) and ROCm.
CAT_KIND: dict[str, int] = {
    "cpu_op": OP,
    "operator": OP,
    "user_annotation": ANNOT,
    "kernel": KERNEL,
    "gpu_memcpy": MEMCPY,
    "memcpy": MEMCPY,
    "gpu_memset": MEMSET,
    "memset": MEMSET,
    "cuda_runtime": RUNTIME,
    "runtime": RUNTIME,
    "hip_runtime": RUNTIME,
    "cuda_driver": DRIVER,
    "driver": DRIVER,
    "hip_driver": DRIVER,
    "python_function": PYMODULE,
    "gpu_user_annotation": GPU_ANNOT,
}
