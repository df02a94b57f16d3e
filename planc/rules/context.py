"""Rules on context parallelism's communication type (parallelism.cp_comm_type, Megatron
`--cp-comm-type`; planc.comm.context prices each)."""

from __future__ import annotations

from collections.abc import Iterator

from planc.comm.context import a2a_sub_group
from planc.rules.base import Context, Violation, rule


@rule("PLC060")
def ulysses_heads_divide(ctx: Context) -> Iterator[Violation]:
    """Context parallelism: an all-to-all type splits whole heads over the context ranks.

    cp_comm_type a2a (DeepSpeed-Ulysses, Jacobs et al. 2023 §3) turns each rank's sequence
    shard of every head into the whole sequence of (n/t)/c heads, so the query heads and the
    key/value heads of a tensor-parallel rank must both divide by context (Transformer Engine
    AttnFuncWithCPAndQKVOA2A asserts "The number of attention heads needs to be divisible by
    CP size!"; DeepSpeed DistributedAttention splits the head dimension the same way).

    Passes:
        parallelism: {tensor: 2, data: 2, context: 2, cp_comm_type: a2a}

    Fails:
        parallelism: {tensor: 1, data: 1, context: 8, sequence_parallel: false, cp_comm_type: a2a}
        model: {kv_heads: 4}
    """
    job = ctx.job
    lay, model = job.layout, job.model
    if lay.cp_comm != "a2a" or lay.c == 1:
        return
    n_t, g_t = -(-model.n // lay.t), max(1, model.g // lay.t)
    if n_t % lay.c == 0 and g_t % lay.c == 0:
        return
    fits = [c for c in range(lay.c, 0, -1) if n_t % c == 0 and g_t % c == 0]
    yield Violation(
        "parallelism.context",
        f"cp_comm_type a2a splits heads over context = {lay.c}, but a tensor-parallel rank "
        f"holds {n_t} query and {g_t} key/value heads (n = {model.n}, g = {model.g}, "
        f"tensor = {lay.t}), which {lay.c} does not divide",
        f"use context {fits[0]} or less, cp_comm_type p2p, or a2a+p2p",
        ("parallelism.cp_comm_type",),
    )


@rule("PLC061")
def hierarchical_context_splits(ctx: Context) -> Iterator[Violation]:
    """Context parallelism: a2a+p2p needs a context group that splits in two levels.

    a2a+p2p (Megatron --hierarchical-context-parallel-sizes) runs the all-to-all over an inner
    group of a ranks and the ring over context/a groups. planc takes a as the largest divisor
    of context below it whose a·tensor ranks fit the NVLink domain and which divides the query
    and key/value heads of a tensor-parallel rank; with none (a = 1) there is no inner level.

    Passes:
        parallelism: {tensor: 1, data: 1, context: 8, sequence_parallel: false, cp_comm_type: a2a+p2p}

    Fails:
        parallelism: {tensor: 2, data: 2, context: 2, cp_comm_type: a2a+p2p}
    """
    job = ctx.job
    lay, model = job.layout, job.model
    if lay.cp_comm != "a2a+p2p" or lay.c == 1:
        return
    n_t, g_t = -(-model.n // lay.t), max(1, model.g // lay.t)
    span = job.cluster.fabric.innermost.span
    if a2a_sub_group(lay.c, lay.t, span, n_t, g_t) > 1:
        return
    yield Violation(
        "parallelism.cp_comm_type",
        f"cp_comm_type a2a+p2p over context = {lay.c}: no divisor of it below {lay.c} fits "
        f"tensor = {lay.t} in the NVLink domain of {span} and divides the {n_t} query and "
        f"{g_t} key/value heads of a rank, so there is no inner all-to-all level",
        "use cp_comm_type p2p or a2a, or a context with an inner divisor",
        ("parallelism.context",),
    )


# The frameworks' context-parallel implementations: Megatron-Core runs all four types
# (--cp-comm-type, megatron/core/transformer/dot_product_attention via Transformer Engine);
# torchtitan (FSDP2) runs ring attention (torch.distributed.tensor.experimental.context_parallel,
# its K/V rotated by all-gather or all-to-all: planc's p2p and allgather); planc compiles no
# context parallelism for DeepSpeed other than Ulysses' a2a (deepspeed.sequence.layer
# DistributedAttention).
_RUNS = {
    "megatron": ("p2p", "a2a", "allgather", "a2a+p2p"),
    "fsdp2": ("p2p", "allgather"),
    "deepspeed": ("a2a",),
}


@rule("PLC062")
def cp_type_on_framework(ctx: Context) -> Iterator[Violation]:
    """Context parallelism: the framework runs the context-parallel communication type.

    Megatron-Core runs p2p, a2a, allgather and a2a+p2p (--cp-comm-type); torchtitan's context
    parallelism (torch.distributed.tensor.experimental.context_parallel) is ring attention with
    K/V rotated by all-gather or all-to-all (p2p, allgather); DeepSpeed's sequence parallelism is
    Ulysses (deepspeed.sequence.layer.DistributedAttention: a2a).

    Passes:
        parallelism: {tensor: 2, data: 2, context: 2, cp_comm_type: allgather}

    Fails:
        parallelism: {tensor: 2, data: 2, context: 2, cp_comm_type: a2a}
        training: {framework: fsdp2}
    """
    job = ctx.job
    lay, framework = job.layout, job.training.framework
    runs = _RUNS.get(framework, ())
    if lay.c == 1 or lay.cp_comm in runs:
        return
    yield Violation(
        "parallelism.cp_comm_type",
        f"cp_comm_type {lay.cp_comm} with training.framework {framework}, which runs "
        f"{' or '.join(runs)} context parallelism",
        f"use cp_comm_type {runs[0]}, or training.framework megatron",
        ("training.framework",),
    )
