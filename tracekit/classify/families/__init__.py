"""Op families: one module per family of operators and kernels (GEMM, convolution,
attention, softmax, normalisation, pooling, activation, loss, embedding, MoE routing,
layout, reduction, element-wise, optimizer, copies, communication).

A family module declares everything tracekit knows about its family, as data:

* its **classes** (:class:`~tracekit.classify.families.family.ClassSpec`: the name, and
  whether it runs on the matrix pipes);
* its **class rules** (:class:`~tracekit.classify.families.family.Rule`: regular
  expressions over operator names, kernel names and Inductor fused-op lists);
* its **op cost models** (FLOPs and minimal bytes from the recorded shapes), registered on
  its :class:`~tracekit.classify.families.family.Family` with ``@FAMILY.cost(...)``, and
  the per-element FLOP counts they use.

:mod:`tracekit.classify.families.registry` lists the families (their order is the rule
tie-break order) and merges their tables into the ones the classifier and the cost model
read. This package's ``__init__`` imports nothing, so family modules can import its
submodules without a cycle.
"""
