"""Rules on the parallel layout and the hardware it is mapped onto."""

from __future__ import annotations

from collections.abc import Iterator

from planc.comm.schedule import within_domain
from planc.findings import Severity
from planc.pipeline.registry import definition
from planc.plannable import MAX_RANKS, Plannable
from planc.rules.base import Context, Needs, Violation, rule
from planc.spec.job import HOST_NAME, Job
from planc.vocab import Axis, ScheduleKind

__all__ = ["HOST_NAME", "MAX_RANKS"]


@rule("PLC001")
def world_size(ctx: Context) -> Iterator[Violation]:
    """World size: tensor × pipeline × data × context must equal nodes × gpus_per_node.

    Every GPU holds exactly one rank, and every rank one coordinate on each axis. When `data` is
    left out it is derived as world / (tensor × pipeline × context), which must be whole.
    (Megatron `initialize_model_parallel`; torchtitan `ParallelDims._validate`.)

    Passes:
        parallelism: {tensor: 2, pipeline: 1, data: 4}

    Fails:
        parallelism: {tensor: 2, pipeline: 1, data: 3}
        training: {global_batch: 63}
    """
    yield from ctx.refused("PLC001")


def _tp_group(rank: int, stride: int, t: int) -> list[int]:
    base = rank - ((rank // stride) % t) * stride
    return [base + j * stride for j in range(t)]


def _crossing_group(job: Plannable) -> list[int] | None:
    """A TP group that spans two NVLink domains, or None. Domains are blocks of D consecutive ranks."""
    t, domain, world = job.layout.t, job.cluster.nvlink_domain, job.world
    if within_domain(job, (Axis.TP,)):
        return None
    stride = job.layout.strides[Axis.TP]
    for boundary in range(domain, world, domain):
        for rank in (boundary - 1, boundary):
            group = _tp_group(rank, stride, t)
            if group[-1] < world and len({r // domain for r in group}) > 1:
                return group
    return None


@rule("PLC002", needs=Needs.PLAN)
def tensor_in_nvlink(ctx: Context) -> Iterator[Violation]:
    """Tensor parallelism stays inside one NVLink domain.

    TP all-reduces (or all-gathers and reduce-scatters) activations twice per layer in forward
    and twice in backward, on the critical path. Over the inter-node network they stall the
    GPUs, so every TP group must sit inside one NVLink domain (8 GPUs on HGX, 72 on GB200
    NVL72). With `order` putting another axis before `tp`, TP groups are strided and can straddle
    a domain boundary even when tensor ≤ nvlink_domain.

    Passes:
        parallelism: {tensor: 8, data: 1, zero_stage: 0}

    Fails:
        parallelism: {tensor: 2, data: 4, order: dp-tp-cp-pp}
        hardware: {nvlink_domain: 4, gpus_per_node: 4, nodes: 2, hosts: [gpu-a01, gpu-a02]}
    """
    job = ctx.plan
    if job is None:
        return
    t, domain = job.layout.t, job.cluster.nvlink_domain
    if t > domain:
        yield Violation(
            "parallelism.tensor",
            f"tensor = {t} is larger than the NVLink domain of {domain} GPUs, so TP traffic "
            "crosses the inter-node network",
            f"use tensor ≤ {domain} and move the rest into pipeline or data",
        )
        return
    group = _crossing_group(job)
    if group is not None:
        shown = ", ".join(map(str, group[:8])) + (", ..." if len(group) > 8 else "")
        yield Violation(
            "parallelism.order",
            f"under order {'-'.join(job.layout.order)} the TP group [{shown}] spans NVLink "
            f"domains {group[0] // domain} and {group[-1] // domain} ({domain} GPUs each)",
            "put tp first in parallelism.order (tp-cp-dp-pp)"
            if job.layout.strides[Axis.TP] > 1
            else f"use a tensor degree that divides the NVLink domain of {domain} GPUs",
            ("parallelism.tensor",),
        )


@rule("PLC008")
def sequence_parallel_needs_tp(ctx: Context) -> Iterator[Violation]:
    """Sequence parallelism needs tensor > 1.

    Megatron's sequence parallelism splits the norms and dropouts that TP leaves replicated
    across the TP group; with tensor = 1 there is no group to split over (Megatron
    `ModelParallelConfig`: "Cannot use sequence parallelism without tensor parallelism").

    Passes:
        parallelism: {tensor: 2, data: 4, sequence_parallel: true}

    Fails:
        parallelism: {tensor: 1, data: 8, sequence_parallel: true}
        training: {seq_len: 2048}
    """
    job = ctx.job
    if job.layout.sp and job.layout.t == 1:
        yield Violation(
            "parallelism.sequence_parallel",
            "sequence_parallel is on but tensor = 1: there is no TP group to split the sequence over",
            "set sequence_parallel: false, or tensor > 1",
        )


@rule("PLC009")
def context_parallel_sequence(ctx: Context) -> Iterator[Violation]:
    """Context parallelism: seq_len must be divisible by 2 × context.

    Causal load balancing gives every CP rank two chunks of the sequence, one from each end
    (Megatron `validate_args`).

    Passes:
        parallelism: {tensor: 2, data: 2, context: 2}

    Fails:
        parallelism: {tensor: 2, data: 2, context: 2, sequence_parallel: false}
        training: {seq_len: 8190}
    """
    job = ctx.job
    c, s = job.layout.c, job.training.s
    if c > 1 and s % (2 * c):
        good = s - s % (2 * c)
        yield Violation(
            "training.seq_len",
            f"seq_len {s} is not divisible by 2 × context = {2 * c}",
            f"use seq_len {good} or {good + 2 * c}",
            ("parallelism.context",),
        )


@rule("PLC010")
def interleaved_schedule(ctx: Context) -> Iterator[Violation]:
    """Interleaved 1F1B: virtual_stages > 1 needs a pipeline and micro-batches divisible by pipeline.

    Megatron's interleaved schedule runs micro-batches in groups of `pipeline`, so m must be a
    multiple of it (Megatron `schedules.py`). Over two stages the sends to the next and to the
    previous stage go to the same peer: Megatron interleaves them only with its overlapped p2p
    (`training.overlap_p2p_comm`, on by default), and refuses pipeline = 2 without it
    (`megatron/training/arguments.py` validate_args).

    A schedule named in `parallelism.pipeline_schedule` must fit the layout the same way: 1f1b
    runs one model chunk per stage (virtual_stages: 1), interleaved-1f1b more than one;
    combined-1f1b more than one over a pipeline, or one without a pipeline (Megatron-Core's
    combined 1F1B for no pipelining; `transformer_config.py` asserts virtual stages with
    overlap_moe_expert_parallel_comm only when the pipeline is deeper than 1). Without the field,
    virtual_stages picks the schedule (1f1b at 1, interleaved-1f1b above).

    Base: llama3-70b-8x8.yaml

    Passes:
        parallelism: {virtual_stages: 2}

    Fails:
        parallelism: {virtual_stages: 2}
        training: {global_batch: 68}
    """
    yield from ctx.refused("PLC010")


_FRAMEWORK_WORDS = {"megatron": "Megatron-LM", "deepspeed": "DeepSpeed", "fsdp2": "torchtitan"}


def _combined_needs(ctx: Context) -> Iterator[Violation]:
    """What Megatron-Core's TransformerConfig asks of --overlap-moe-expert-parallel-comm
    (Megatron-LM docs/user-guide/features/moe_a2a_overlap.md and transformer_config.py): expert
    parallelism above 1, no full recomputation and no moe in the recomputed modules, at most one
    MTP layer (the interleaved layout it also needs is PLC010's)."""
    job = ctx.job
    where = "parallelism.pipeline_schedule"
    if job.model.moe is None or job.layout.ep == 1:
        yield Violation(
            where,
            "pipeline_schedule = combined-1f1b overlaps the expert all-to-all, but "
            f"{'the model has no experts' if job.model.moe is None else 'expert = 1'} "
            "(Megatron-Core: overlap_moe_expert_parallel_comm needs expert_model_parallel_size > 1)",
            "set parallelism.expert above 1, or pipeline_schedule: interleaved-1f1b",
            ("parallelism.expert",),
        )
    if job.training.recompute == "full":
        yield Violation(
            where,
            "pipeline_schedule = combined-1f1b cannot run with full recomputation (Megatron-Core "
            "refuses overlap_moe_expert_parallel_comm with recompute_granularity full)",
            "set training.recompute: selective or none, or pipeline_schedule: interleaved-1f1b",
            ("training.recompute",),
        )
    if "moe" in job.training.recompute_modules:
        yield Violation(
            where,
            "pipeline_schedule = combined-1f1b cannot recompute the whole MoE block "
            "(Megatron-Core: 'disable moe in recompute_modules when enabling "
            "overlap_moe_expert_parallel_comm')",
            "take moe out of training.recompute_modules (moe_act recomputes the experts' "
            "activation only), or pipeline_schedule: interleaved-1f1b",
            ("training.recompute_modules",),
        )
    if job.model.mtp > 1:
        yield Violation(
            where,
            f"pipeline_schedule = combined-1f1b runs at most one MTP layer, got "
            f"model.mtp_layers = {job.model.mtp} (Megatron-LM moe_a2a_overlap.md)",
            "set model.mtp_layers: 1, or pipeline_schedule: interleaved-1f1b",
            ("model.mtp_layers",),
        )


@rule("PLC030")
def schedule_on_framework(ctx: Context) -> Iterator[Violation]:
    """Pipeline schedule: training.framework runs the schedule parallelism.pipeline_schedule names.

    Megatron-LM runs 1f1b and interleaved-1f1b (`megatron/core/pipeline_parallel/schedules.py`
    get_forward_backward_func) and has no GPipe; torchtitan (framework: fsdp2) runs PyTorch's
    schedules by name (pipeline_parallel_schedule: 1F1B, Interleaved1F1B, GPipe); DeepSpeed's
    PipelineEngine runs its TrainSchedule, a 1F1B. A plan for a schedule the framework lacks
    would be run with another schedule, whose memory and bubble are not the plan's. Without a
    named schedule, virtual_stages picks 1f1b or interleaved-1f1b, and the interleaved default
    is checked too (DeepSpeed has none, so virtual_stages > 1 is refused there); only with
    pipeline > 1 (one stage runs no pipeline schedule).
    zb-h1 runs on none of them (PyTorch's zero-bubble schedules hold two or more stages a rank;
    the zero-bubble authors' Megatron fork runs it); dualpipev and zbv on torchtitan (PyTorch
    ScheduleDualPipeV, ScheduleZBVZeroBubble); combined-1f1b on Megatron-LM, which also needs expert parallelism above
    1, no full recomputation, no moe in training.recompute_modules and at most one MTP layer
    (--overlap-moe-expert-parallel-comm).

    Base: llama3-70b-8x8.yaml

    Passes:
        parallelism: {pipeline_schedule: 1f1b}
        training: {global_batch: 8}
        rules: {max_bubble: 0.5}

    Fails:
        parallelism: {pipeline_schedule: gpipe}
        training: {global_batch: 8}
        rules: {max_bubble: 0.5}
    """
    lay, framework = ctx.job.layout, ctx.job.training.framework
    named = lay.named_schedule
    if named is ScheduleKind.COMBINED_1F1B and framework == "megatron":
        yield from _combined_needs(ctx)
    if named is None and lay.p > 1 and framework not in definition(lay.schedule).runs_on:
        yield _default_schedule_refused(ctx)
    if named is None or lay.p == 1 or framework in definition(named).runs_on:
        return
    entry = definition(named)
    able = sorted(_FRAMEWORK_WORDS.get(name, name) for name in entry.runs_on)
    choices = [f"framework: {name}" for name in sorted(entry.runs_on)]
    yield Violation(
        "parallelism.pipeline_schedule",
        f"pipeline_schedule = {named.value}, but {_FRAMEWORK_WORDS.get(framework, framework)} "
        f"(training.framework: {framework}) has no {entry.title} schedule; "
        f"{', '.join(able) or 'no framework planc emits'} runs it",
        f"set training.{' or '.join(choices)}, or another pipeline_schedule"
        if choices
        else "use another pipeline_schedule",
        ("training.framework",),
    )


def _default_schedule_refused(ctx: Context) -> Violation:
    """The default schedule of virtual_stages (interleaved 1F1B) on a framework without it."""
    lay, framework = ctx.job.layout, ctx.job.training.framework
    entry = definition(lay.schedule)
    words = _FRAMEWORK_WORDS.get(framework, framework)
    return Violation(
        "parallelism.virtual_stages",
        f"virtual_stages = {lay.v} runs the {entry.title} schedule, but {words} "
        f"(training.framework: {framework}) has none",
        f"set virtual_stages: 1, or training.framework: "
        f"{' or '.join(sorted(entry.runs_on))}",
        ("training.framework",),
    )


@rule("PLC011", Severity.WARNING)
def zero_with_pipeline(ctx: Context) -> Iterator[Violation]:
    """ZeRO-2/3 together with pipeline parallelism.

    A pipeline rank accumulates gradients over its m micro-batches. ZeRO-2 shards gradients
    and ZeRO-3 parameters, so every micro-batch reduce-scatters (and with ZeRO-3 re-gathers)
    them: m times the DP traffic of ZeRO-1. Megatron-LM runs it (megatron-core 0.19.2:
    validate_args refuses pipelines only under --use-torch-fsdp2, not with the distributed
    optimizer or Megatron-FSDP) and so does torchtitan (FSDP2 on each pipeline stage), at this
    cost; DeepSpeed's PipelineEngine refuses to start with it, which is PLC049's error, so this
    warning is not given under training.framework: deepspeed.

    Base: llama3-70b-8x8.yaml

    Passes:
        parallelism: {zero_stage: 1}

    Fails:
        parallelism: {zero_stage: 2}
    """
    job = ctx.job
    if job.layout.zero >= 2 and job.layout.p > 1 and job.training.framework != "deepspeed":
        yield Violation(
            "parallelism.zero_stage",
            f"zero_stage {job.layout.zero} with pipeline = {job.layout.p}: gradient sharding "
            "fights gradient accumulation across micro-batches",
            "use zero_stage: 1 (Megatron's distributed optimizer) with pipeline parallelism",
        )


def sequence_splits(job: Job) -> bool:
    """Whether sequence parallelism can scatter each CP rank's s/c tokens over the t TP ranks
    (s not divisible by c is PLC009's finding, not this one)."""
    lay, s = job.layout, job.training.s
    return lay.t == 1 or s % lay.c != 0 or (s // lay.c) % lay.t == 0


@rule("PLC013")
def sequence_parallel_split(ctx: Context) -> Iterator[Violation]:
    """Sequence parallelism: the sequence on each CP rank must split evenly over tensor.

    SP scatters the s/c tokens of a context-parallel rank over the t TP ranks between the
    tensor-parallel regions (Korthikanti et al. 2022, §4.2.2); torchtitan checks the same.

    Passes:
        parallelism: {tensor: 2, data: 4, sequence_parallel: true}

    Fails:
        parallelism: {tensor: 2, data: 4, sequence_parallel: true}
        training: {seq_len: 8191}
    """
    job = ctx.job
    lay, s = job.layout, job.training.s
    if lay.sp and not sequence_splits(job):
        yield Violation(
            "training.seq_len",
            f"with sequence parallelism the {s // lay.c} tokens per context rank do not split "
            f"over tensor = {lay.t}",
            f"make seq_len a multiple of context × tensor = {lay.c * lay.t}",
            ("parallelism.sequence_parallel",),
        )


@rule("PLC014")
def topology(ctx: Context) -> Iterator[Violation]:
    """Topology: NVLink domains tile the nodes, and the host list names every node once.

    An NVLink domain is either part of a node (nodes split evenly into domains) or spans whole
    nodes (GB200 NVL72: 18 trays of 4 GPUs). The host list, when given, has one distinct name
    per node, in node order, each usable in a hostfile (letters, digits, '.', '_', ':', '-').

    Passes:
        hardware: {hosts: [gpu-a01]}

    Fails:
        hardware: {hosts: [gpu-a01, gpu-a02]}
    """
    yield from ctx.refused("PLC014")


@rule("PLC015")
def world_limit(ctx: Context) -> Iterator[Violation]:
    """World size limit: planc plans at most 1,048,576 ranks.

    A spec that asks for more (a typo such as nodes: 10000000) is refused before any per-rank
    work, so a hostile or mistaken file cannot exhaust the machine.

    Passes:
        hardware: {nodes: 1}

    Fails:
        hardware: {nodes: 131073, gpus_per_node: 8, hosts: "n-{000001..131073}"}
        parallelism: {tensor: 8}
        training: {global_batch: 131073}
    """
    yield from ctx.refused("PLC015")


@rule("PLC017", Severity.WARNING)
def context_parallel_attention(ctx: Context) -> Iterator[Violation]:
    """Context parallelism needs a fused attention kernel.

    Ring attention exchanges K and V blocks and merges partial softmax results inside the
    attention kernel; Megatron implements it in Transformer Engine's fused attention and
    torchtitan requires FlexAttention. Eager attention has no context-parallel path.

    Passes:
        parallelism: {tensor: 2, data: 2, context: 2}

    Fails:
        parallelism: {tensor: 2, data: 2, context: 2}
        training: {attention: eager}
    """
    job = ctx.job
    if job.layout.c > 1 and job.training.attention == "eager":
        yield Violation(
            "training.attention",
            f"context = {job.layout.c} with eager attention: no framework splits eager attention "
            "over context-parallel ranks",
            "set attention: flash",
            ("parallelism.context",),
        )


@rule("PLC018", Severity.WARNING)
def zero_without_group(ctx: Context) -> Iterator[Violation]:
    """ZeRO over a group of one shards nothing.

    ZeRO shards over the data-parallel (× context) group; with data × context = 1 a ZeRO stage
    only adds communication calls.

    Passes:
        parallelism: {tensor: 8, data: 1, zero_stage: 0}

    Fails:
        parallelism: {tensor: 8, data: 1, zero_stage: 1}
    """
    lay = ctx.job.layout
    if lay.zero > 0 and lay.d is not None and lay.d * lay.c == 1:
        yield Violation(
            "parallelism.zero_stage",
            f"zero_stage {lay.zero} with data × context = 1: there is nothing to shard over",
            "set zero_stage: 0, or data > 1",
        )
