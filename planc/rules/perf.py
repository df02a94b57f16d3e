"""Rules for configurations that are legal but slow: traffic that cannot hide behind compute."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from planc.analysis import Analysis
from planc.comm.schedule import CommOp, expert_tier, sharding_stage
from planc.findings import Severity
from planc.perf.inputs import dispatch_combine_s, expert_compute_s
from planc.rules import fixes
from planc.rules.base import Context, Needs, Violation, rule
from planc.rules.frameworks import dispatcher_refusals
from planc.spec.job import GB, Job, dispatcher_of
from planc.vocab import Axis, Collective, ExpertDispatcher, GroupKind

# The gradient reduction's groups: the shard group (dp_cp, or dp_shard under HSDP) and HSDP's
# replicate all-reduce.
DATA_PARALLEL = (GroupKind.DP_CP, GroupKind.DP_SHARD, GroupKind.DP_REPLICATE)


@rule("PLC019", Severity.WARNING, Needs.ANALYSIS)
def dp_traffic_hides(ctx: Context) -> Iterator[Violation]:
    """Data-parallel gradient traffic hides behind backward compute.

    The DP (ZeRO) gradient reduction runs on its own stream while backward computes, bucket by
    bucket; when its α-β time on its link is longer than the step's backward compute on that
    rank, the difference lands on the critical path every step. Slow networks, small m and
    large Ψ_r per rank cause it. Both times come from the per-operation model (`planc explain`
    shows the ops and their times): the collectives with their link's efficiency and latency,
    backward from each op's FLOPs and bytes on the GPU.

    Passes:
        hardware: {nodes: 8, hosts: "n{1..8}"}
        parallelism: {tensor: 8, data: 8, zero_stage: 1}

    Fails:
        hardware: {nodes: 8, hosts: "n{1..8}", inter_node: {bandwidth_gbs: 1}}
        parallelism: {tensor: 8, data: 8, zero_stage: 1}
    """
    if ctx.analysis is None:
        return
    job = ctx.analysis.plan
    zero = sharding_stage(job)
    # The post-step parameter all-gather of ZeRO-1/2 does not overlap backward; count the rest.
    by_stage: list[list[CommOp]] = [[] for _ in ctx.analysis.times]
    for op in ctx.analysis.ops:
        if op.group in DATA_PARALLEL and (op.op is not Collective.ALL_GATHER or zero == 3):
            by_stage[op.stage].append(op)
    for stage, t in enumerate(ctx.analysis.times):
        dp = by_stage[stage]
        reduce_s = sum(ctx.analysis.op_seconds[op] for op in dp)
        backward_s = job.m * t.backward_s
        if reduce_s > backward_s:
            sent = sum(op.calls * op.bytes_sent for op in dp)
            yield Violation(
                "parallelism.data",
                f"stage {stage}: the DP gradient reduction ({sent / GB:.2f} GB per rank on "
                f"{dp[0].link}) takes {reduce_s:.2f} s, longer than the {backward_s:.2f} s of backward "
                "compute it overlaps with",
                "raise global_batch (more micro-batches), keep DP inside NVLink, or use more "
                "tensor/pipeline parallelism to shrink Ψ per rank",
                ("hardware.inter_node", "training.global_batch"),
            )
            return


@rule("PLC020", Severity.WARNING, Needs.ANALYSIS)
def pp_traffic_hides(ctx: Context) -> Iterator[Violation]:
    """Pipeline sends take less time than the compute of one micro-batch.

    Each pipeline boundary sends one activation of [s/c, b, h] forward (and its gradient back)
    per micro-batch. When one send takes longer than a stage's forward of one micro-batch,
    the pipeline waits on the wire rather than on compute.

    Base: llama3-70b-8x8.yaml

    Passes:
        hardware: {inter_node: {bandwidth_gbs: 50}}

    Fails:
        hardware: {inter_node: {bandwidth_gbs: 0.1}}
    """
    if ctx.analysis is None or ctx.analysis.plan.layout.p == 1:
        return
    job, times = ctx.analysis.plan, ctx.analysis.times
    for op in ctx.analysis.ops:
        if op.group is not GroupKind.PP or not op.calls:
            continue
        per_send = ctx.analysis.op_seconds[op] / op.calls
        forward = times[op.stage].forward_s / job.layout.v
        if per_send > forward:
            yield Violation(
                job.cluster.fabric.tier(op.link).field,
                f"stage {op.stage}: one pipeline send of {op.buffer_bytes / 2**20:.1f} MiB on "
                f"{op.link} takes {per_send * 1e3:.1f} ms, longer than the {forward * 1e3:.1f} ms "
                "forward of a micro-batch",
                "turn on sequence parallelism (sends shrink by t), raise micro_batch, or place "
                "pipeline stages on a faster link",
                ("parallelism.pipeline",),
            )
            return


# Megatron-Core's default order, which puts ep right after tp (and cp, of size 1 in the expert
# grid): the EP groups are then ETP-strided blocks of ETP·EP consecutive ranks.
EP_AFTER_TP = "tp-cp-ep-dp-pp"


def exchange_exposed(analysis: Analysis) -> tuple[float, float] | None:
    """(dispatch + combine, expert compute) seconds of one MoE layer's forward per micro-batch
    when the EP groups cross NVLink domains and the exchange is the longer; else None."""
    plan, eff = analysis.plan, analysis.efficiency
    if plan.model.moe is None or plan.layout.ep == 1:
        return None
    if expert_tier(plan, Axis.EP) == plan.cluster.fabric.innermost:
        return None
    exchange, compute = dispatch_combine_s(plan, eff), expert_compute_s(plan, eff)
    return (exchange, compute) if exchange > compute else None


def smaller_expert_parallel(job: Job) -> list[fixes.Variant]:
    """Smaller EP degrees that divide the routed experts, largest first."""
    moe, lay = job.model.moe, job.layout
    if moe is None:
        return []
    return [
        (f"expert: {ep}", dataclasses.replace(job, layout=dataclasses.replace(lay, ep=ep)))
        for ep in range(lay.ep - 1, 0, -1)
        if moe.E % ep == 0
    ]


def expert_order(job: Job) -> list[fixes.Variant]:
    """The order that puts ep fastest after tp (Megatron-Core's default), if it is not the
    spec's already."""
    lay = job.layout
    if "-".join(lay.expert_order) == EP_AFTER_TP:
        return []
    order = tuple(axis for axis in EP_AFTER_TP.split("-") if axis != "ep")
    variant = dataclasses.replace(
        lay, order=order, expert_order=tuple(EP_AFTER_TP.split("-"))
    )
    return [(f"order: {EP_AFTER_TP}", dataclasses.replace(job, layout=variant))]


# The dispatchers that move fewer bytes across NVLink domains, in the order they are offered
# (`planc.comm.schedule`: allgather gathers every token to every rank; alltoall sends a row per
# token and expert; deepep and hybridep a row per token and destination domain).
LIGHTER_DISPATCHERS: dict[str, tuple[ExpertDispatcher, ...]] = {
    "allgather": ("alltoall", "hybridep", "deepep"),
    "alltoall": ("hybridep", "deepep"),
}


def lighter_dispatcher(job: Job) -> list[fixes.Variant]:
    """The dispatchers that move fewer bytes than the job's across domains (Megatron-Core's
    alltoall, and its flex dispatcher's backends), lightest on the network first."""
    current = dispatcher_of(job)
    if job.training.framework == "deepspeed":  # its MoE runs its own all-to-all only (PLC049)
        return []
    return [
        (
            f"expert_dispatcher: {name}",
            dataclasses.replace(
                job, layout=dataclasses.replace(job.layout, named_dispatcher=name)
            ),
        )
        for name in LIGHTER_DISPATCHERS.get(current, ())
    ]


def _hides(analysis: Analysis) -> str | None:
    """What a dispatcher variant shows when its exchange no longer outlasts the expert compute
    (and its heaviest rank still fits, and its framework runs it)."""
    plan = analysis.plan
    if analysis.memory.peak.memory.total > plan.usable_hbm_bytes:
        return None
    if any(True for _ in dispatcher_refusals(plan)):
        return None
    exchange = dispatch_combine_s(plan, analysis.efficiency)
    if exchange > expert_compute_s(plan, analysis.efficiency):
        return None
    return f"dispatch and combine {exchange * 1e3:.2f} ms"


def _inside(analysis: Analysis) -> str | None:
    """What a variant shows when its EP groups stay inside one NVLink domain (and its heaviest
    rank still fits: a fix must not trade one finding for another)."""
    plan = analysis.plan
    if analysis.memory.peak.memory.total > plan.usable_hbm_bytes:
        return None
    if plan.layout.ep == 1:
        return "no all-to-all"
    if expert_tier(plan, Axis.EP) != plan.cluster.fabric.innermost:
        return None
    return f"all-to-all on NVLink, {dispatch_combine_s(plan, analysis.efficiency) * 1e3:.2f} ms"


@rule("PLC028", Severity.WARNING, Needs.ANALYSIS)
def expert_exchange_hides(ctx: Context) -> Iterator[Violation]:
    """Expert all-to-all across NVLink domains takes no longer than the expert compute.

    Each MoE layer sends every token's k expert rows to the expert-parallel ranks that hold the
    experts (dispatch) and brings the outputs back (combine): two all-to-alls of T·k·h
    activations per micro-batch, T = b·s/c/t the rank's tokens. Megatron-Core runs them on the
    critical path between the router and the experts. When an EP group spans NVLink domains
    they go over the network, and when one layer's dispatch and combine then take longer than
    that layer's expert compute, the exchange, not the experts, sets the pace of every MoE
    layer. Megatron-Core's MoE guide: keep EP × TP inside the NVLink domain. The fix is EP
    inside the domain: a smaller expert degree, or an order that puts ep fastest after tp; or a
    dispatcher that sends less across domains (parallelism.expert_dispatcher: alltoall instead
    of Megatron-Core's default allgather, which gathers every token to every rank; deepep or
    hybridep, which send a token once to each domain that holds one of its experts). Each listed
    fix is checked with planc's own model.

    Base: mixtral-8x7b-64xh100.yaml

    Passes:
        hardware: {inter_node: {bandwidth_gbs: 10}}
        parallelism: {order: tp-cp-ep-dp-pp}

    Fails:
        hardware: {inter_node: {bandwidth_gbs: 10}}
        parallelism: {order: tp-cp-dp-ep-pp}
    """
    if ctx.analysis is None:
        return
    found = exchange_exposed(ctx.analysis)
    if found is None:
        return
    exchange, compute = found
    plan = ctx.analysis.plan
    fix = (
        "keep the EP group inside one NVLink domain: a smaller parallelism.expert, or an "
        f"order with ep right after tp ({EP_AFTER_TP})"
    )
    if ctx.suggest:
        listed = fixes.verified(ctx.job, (smaller_expert_parallel, expert_order), _inside)
        if listed:
            fix = "keep the EP group inside one NVLink domain: " + "; or ".join(listed)
        lighter = fixes.verified(ctx.job, (lighter_dispatcher,), _hides)
        if lighter:
            fix += "; or a dispatcher that sends less across domains: " + "; or ".join(lighter)
    yield Violation(
        "parallelism.expert",
        f"the EP groups of {plan.layout.ep} ranks cross NVLink domains (domain of "
        f"{plan.cluster.nvlink_domain} GPUs): one MoE layer's dispatch and combine (the "
        f"{plan.layout.dispatcher} dispatcher) takes {exchange * 1e3:.2f} ms per micro-batch "
        "on the "
        f"{expert_tier(plan, Axis.EP).shown}, longer than the "
        f"{compute * 1e3:.2f} ms of expert compute it runs beside",
        fix,
        ("parallelism.order", expert_tier(plan, Axis.EP).field),
    )


# plan.json's integers (bytes, calls) are bounded by its published schema, below 2^62, so that
# every consumer holds them in a signed 64-bit integer with room to add two of them.
MAX_PLAN_INTEGER = 2**62


@rule("PLC073", Severity.ERROR, Needs.ANALYSIS)
def step_traffic_representable(ctx: Context) -> Iterator[Violation]:
    """Every rank's traffic per step stays below 2^62 bytes, the largest count plan.json holds.

    A rank's bytes per step grow with the micro-batches it runs (m = global_batch /
    (micro_batch × data)): at about a billion micro-batches per step a rank's NVLink bytes pass
    2^62 (4.6 EB), which the plan schema (`schemas/plan.schema.json`, `bytes`) and signed 64-bit
    consumers cannot hold, so planc compile would write a plan that planc verify refuses. No
    training step moves that much; the global batch is a typo or a unit slip (tokens for
    sequences).

    Passes:
        training: {global_batch: 64}

    Fails:
        training: {global_batch: 1000000000000}
    """
    if ctx.analysis is None or ctx.analysis.wire_bytes_bound < MAX_PLAN_INTEGER:
        return  # the bound decides almost every job without the tiers' tallies
    if ctx.analysis.most_wire_bytes < MAX_PLAN_INTEGER:
        return
    for wire in ctx.analysis.wires:
        for tier, bytes_ in wire.tiers.items():
            largest = max(bytes_.sent, bytes_.received)
            if largest >= MAX_PLAN_INTEGER:
                yield Violation(
                    "training.global_batch",
                    f"a stage-{wire.stage} rank moves {largest:.3e} bytes per step on {tier} "
                    f"(m = {ctx.analysis.plan.m:,} micro-batches), above 2^62 = "
                    f"{MAX_PLAN_INTEGER:.3e}, the largest count plan.json holds",
                    "lower training.global_batch: it counts sequences per step, not tokens",
                )
                return
