"""Communication: NCCL/RCCL collectives, symmetric-memory and custom all-reduce kernels,
and the collective operators (``c10d::``, ``nccl:``, ``record_param_comms``).

Costs: none yet. A collective moves bytes over the interconnect, not through DRAM, so it
is not judged against the device's memory roof. This module is where the collective cost
models go (message size from the ``record_param_comms``/``nccl:*`` op's in/out element
counts and dtype, algbw and busbw with the nccl-tests factors): register them with
``@FAMILY.cost("nccl:all_reduce", ...)`` as the other families do.
"""

from __future__ import annotations

from tracekit.classify.families.family import P_NORMAL, P_OVERRIDE, ClassSpec, Family, Rule

RULES: tuple[Rule, ...] = (
    Rule(
        r"(?i)nccl|rccl|msccl",
        "kernel",
        "communication",
        P_OVERRIDE,
        "NCCL/RCCL collectives (ncclDevKernel_*, ncclKernel_*)",
    ),
    Rule(
        r"(?:multimem|one_shot|two_shot|cross_device)_all_?reduce|all_reduce_\w*_kernel"
        r"|AllReduce|all_gather\w*_kernel|reduce_scatter\w*_kernel",
        "kernel",
        "communication",
        P_OVERRIDE,
        "symmetric-memory / custom all-reduce kernels (torch SymmetricMemory, vLLM)",
    ),
    Rule(
        r"^(?:c10d::|c10d_functional::|_c10d_functional::|nccl:|gloo:)|^record_param_comms$",
        "op",
        "communication",
        P_NORMAL,
        "collective operators and their annotations",
    ),
)

FAMILY = Family(
    "communication",
    classes=(ClassSpec("communication"),),
    rules=RULES,
    fused_vocab=("all_reduce",),
)
