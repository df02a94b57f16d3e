"""Rules on where the sharded state lives: the shard group (HSDP) and the host memory that
offload fills."""

from __future__ import annotations

from collections.abc import Iterator

from planc import plannable as pre
from planc.analysis import Analysis
from planc.memory.budget import node_host_bytes
from planc.rules import fixes
from planc.rules.base import Context, Needs, Violation, rule
from planc.run.checkpoint import checkpoint_size
from planc.spec.job import GB


@rule("PLC021", needs=Needs.ANALYSIS)
def host_memory_fits(ctx: Context) -> Iterator[Violation]:
    """Offload: what a node's GPUs offload fits in its host memory.

    With `training.offload`, the optimizer state (DeepSpeed ZeRO-Offload, Megatron-Core's
    optimizer CPU offload, FSDP2) and the sharded parameters (DeepSpeed ZeRO-3 offload_param,
    FSDP2 CPUOffloadPolicy) live in host memory: 16 bytes per parameter of each rank's shard for
    mixed-precision Adam under DeepSpeed, 18 with the parameters. A node holds gpus_per_node
    times the heaviest rank's offloaded bytes (`planc memory` lists them), which must stay
    within `hardware.host_memory_gb` (default: the GPU preset's node, e.g. 2,000 GB on a DGX
    H100). An asynchronous checkpoint (`checkpoint.async_save`) copies each rank's saved
    state into pinned host buffers first, gpus_per_node times the most any rank saves, which
    counts here too. Pinned buffers, the data loader and the OS need host memory too.

    The fix lists the smallest larger shard group (data_shard), ZeRO stage and node count that
    fit, each verified with planc's memory model: the node's offload fits its host memory and
    every GPU still fits its HBM.

    Passes:
        training: {framework: deepspeed, offload: {optimizer: true}}

    Fails:
        hardware: {host_memory_gb: 100}
        training: {framework: deepspeed, offload: {optimizer: true}}
    """
    if ctx.analysis is None:
        return
    plan, memory = ctx.analysis.plan, ctx.analysis.memory
    offload = node_host_bytes(plan, memory)
    staged = async_staging_bytes(ctx.analysis)
    need = offload + staged
    have = plan.cluster.host_memory_bytes
    if need == 0 or need <= have:
        return
    if offload == 0:
        yield Violation(
            "checkpoint.async_save",
            f"an asynchronous checkpoint stages {staged / GB:,.1f} GB per node in pinned host "
            f"memory ({plan.cluster.gpus_per_node} × {staged // plan.cluster.gpus_per_node / GB:,.1f} "
            f"GB), above its {have / GB:,.1f} GB of host memory",
            "save synchronously (checkpoint.async_save: false), shard the state over more ranks "
            "(zero_stage, data_shard) or set hardware.host_memory_gb to the node's memory",
            ("hardware.host_memory_gb",),
        )
        return
    per_rank = max(stage.memory.host for stage in memory.stages)
    also = f", and an asynchronous checkpoint stages {staged / GB:,.1f} GB more" if staged else ""
    yield Violation(
        "training.offload",
        f"the GPUs of one node offload {offload / GB:,.1f} GB ({plan.cluster.gpus_per_node} × "
        f"{per_rank / GB:,.1f} GB){also}, above its {have / GB:,.1f} GB of host memory",
        _host_fix(ctx),
        ("hardware.host_memory_gb",),
    )


def async_staging_bytes(analysis: Analysis) -> int:
    """Pinned host bytes one node's asynchronous checkpoint copies its state into: G × the
    most any rank saves (`planc.run.checkpoint`); 0 without checkpoint.async_save."""
    checkpoint = analysis.plan.run.checkpoint
    if checkpoint is None or not checkpoint.async_save:
        return 0
    size = checkpoint_size(analysis.plan, analysis.memory)
    return analysis.plan.cluster.gpus_per_node * max(s.resident for s in size.stages)


def _host_fix(ctx: Context) -> str:
    """Shard over more ranks (a larger data_shard, a higher ZeRO stage, more nodes), each change
    verified: the node's offload fits its host memory and the GPUs still fit their HBM."""
    told = "set hardware.host_memory_gb to the node's memory if it is larger"
    if not ctx.suggest:
        return (
            f"{told}, shard over more ranks (parallelism.data_shard, zero_stage), or offload less"
        )
    job = ctx.job

    def fits(analysis: Analysis) -> str | None:
        host = node_host_bytes(analysis.plan, analysis.memory)
        ok = host <= analysis.plan.cluster.host_memory_bytes
        ok = ok and analysis.memory.peak.memory.total <= analysis.plan.usable_hbm_bytes
        return f"{host / GB:,.1f} GB per node" if ok else None

    found = fixes.verified(job, (fixes.data_shard, fixes.zero_stage, fixes.nodes), fits)
    if not found:
        return f"{told}, or offload less (no larger shard group, ZeRO stage or node count fits)"
    return f"{told}; or, each alone fits (host memory after it): " + "; ".join(found)


@rule("PLC022")
def data_shard_divides(ctx: Context) -> Iterator[Violation]:
    """Sharding: parallelism.data_shard divides data × context; the groups left over replicate.

    ZeRO, Megatron's distributed optimizer and FSDP shard their state over `data_shard` ranks
    (default data × context). A smaller group shards less and replicates the shards across
    data × context / data_shard groups, whose gradients are all-reduced (HSDP; torchtitan's
    dp_replicate × dp_shard; Megatron's num_distributed_optimizer_instances). The shard groups
    are contiguous slices of each data × context group. With experts, the replicas
    (data × context / data_shard) must also divide the expert data-parallel size EDP, over
    whose EDP / replicas ranks the experts' state is sharded (Megatron-Core parallel_state
    asserts it).

    Passes:
        parallelism: {data_shard: 2}

    Fails:
        parallelism: {data_shard: 3}
    """
    yield from pre.shard_split(ctx.job)
