"""What a trace event is, for every module of the parser: the msgspec structs that keep
the fields tracekit reads, their decoders, and the event kinds.

This module imports nothing else from tracekit.parse; the reader (``reader``), the
native scanner's Python side (``scan``) and the column code (``columns``) all import
their shared definitions from here, so none of them needs another.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

T = TypeVar("T")

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

# A JSON escaped backslash, a valid surrogate pair escape, or a lone surrogate escape.
_ESCAPE = re.compile(
    rb"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
    rb"|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
)
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def loads(decoder: msgspec.json.Decoder[T], data: bytes) -> T:
    """``decoder.decode(data)``, reading damaged text as Python's ``json`` does with
    ``errors="replace"``: bytes that are not UTF-8 inside strings, and escapes of lone
    UTF-16 surrogates (which msgspec rejects), become U+FFFD. Only when the first decode
    fails is the text repaired and decoded again; malformed JSON still raises
    ``msgspec.DecodeError``."""
    try:
        return decoder.decode(data)
    except (UnicodeDecodeError, msgspec.DecodeError):
        # msgspec's word for invalid UTF-8 changed between releases (UnicodeDecodeError up
        # to 0.22, DecodeError("Invalid UTF-8 ...") from 0.23; a lone surrogate escape reads
        # as "truncated"), so the repair is decided by the bytes, never by the message.
        fixed = repair_text(data)
        if fixed is data:
            raise
    return decoder.decode(fixed)


def repair_text(data: bytes) -> bytes:
    """``data`` with invalid UTF-8 and lone surrogate escapes replaced by U+FFFD (JSON
    structure is ASCII, so it is never changed). Returns ``data`` itself where nothing
    needed repair."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        data = data.decode("utf-8", "replace").encode("utf-8")
    if not _SURROGATE.search(data):
        return data
    fixed = _ESCAPE.sub(_lone_surrogate, data)
    return data if fixed == data else fixed


def _lone_surrogate(m: re.Match[bytes]) -> bytes:
    text = m.group()
    return b"\\ufffd" if len(text) == 6 else text


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
