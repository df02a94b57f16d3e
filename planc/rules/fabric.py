"""Rules on how the parallel axes sit on the fabric's tiers (hardware.fabric, hardware.topology):
the lesson's golden rule, tensor parallelism on NVLink, the pipeline across adjacent leaf
nodes, data parallelism across the spine, computed from the plan's own groups.

They only speak about fabrics with tiers between the NVLink domain and the world (a leaf, a
pod, rails): with today's two tiers there is nothing between, and PLC002, PLC019, PLC020 and
PLC028 say what there is to say. Every fix is an order planc has placed and priced.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from itertools import permutations

from planc.analysis import Analysis, analyse, estimate_step
from planc.comm.schedule import CommOp, group_tier, rail_aligned, within_span
from planc.comm.tiers import Level, hierarchical_all_reduce_s, ring_bandwidth_gbs
from planc.findings import Severity
from planc.plannable import Plannable, plannable
from planc.rules.base import Context, Needs, Violation, rule
from planc.spec.fabric import Tier
from planc.spec.job import Job
from planc.vocab import Axis, Collective, GroupKind

DENSE_AXES = ("tp", "cp", "dp", "pp")


def _ordered(job: Job, order: tuple[str, ...]) -> Plannable | None:
    """The job under another dense order, when it has a plan."""
    lay = dataclasses.replace(job.layout, order=order, expert_order=order)
    plan = plannable(dataclasses.replace(job, layout=lay))
    return None if isinstance(plan, tuple) else plan


def _index(plan: Plannable, axes: tuple[Axis, ...]) -> int:
    return plan.cluster.fabric.index(group_tier(plan, axes).name)


def _no_worse(plan: Plannable, than: Plannable, axes: tuple[Axis, ...]) -> bool:
    """Every group kind over `axes` sits on a tier no further out than under `than`."""
    return all(_index(plan, (axis,)) <= _index(than, (axis,)) for axis in axes)


def _orders(job: Job) -> Iterator[tuple[str, ...]]:
    """The other dense orders (a mixture-of-experts job keeps its own: its expert grid is
    placed by the order too, and PLC027 limits the orders Megatron-Core accepts)."""
    if job.layout.ep > 1:
        return
    for order in permutations(DENSE_AXES):
        if order != job.layout.order:
            yield order


def _shown(tier: Tier, plan: Plannable) -> str:
    return f"{tier.shown} ({ring_bandwidth_gbs(plan.cluster.fabric, tier.name):.3g} GB/s per GPU)"


@rule("PLC040", Severity.WARNING, Needs.ANALYSIS)
def pipeline_inside_tier(ctx: Context) -> Iterator[Violation]:
    """Pipeline neighbours stay inside a leaf or pod when an order keeps them there.

    The lesson's rule: pipeline parallelism runs "across adjacent leaf nodes". A pipeline send
    crosses the tier of its own pair of ranks (`planc.sends`), and the sends between neighbours
    in different blocks past the first network tier (a leaf switch, a rack, a pod) pay the
    spine or an oversubscribed aggregation layer (Llama 3's pods of 3,072 GPUs meet at 1:7);
    in 1F1B's steady state every micro-batch waits for the slowest of them. When another `parallelism.order` keeps the pipeline groups
    on a tier further in, keeps tensor and context parallelism where they are, and planc's own
    step estimate is no slower with it (data parallelism then crosses the outer tier: its
    gradients overlap backward), the finding names it. Only fabrics with a tier between the
    first network tier and the world (hardware.fabric, hardware.topology) can fire it.

    Base: llama3-70b-8x8.yaml

    Passes:
        hardware: {nodes: 8, hosts: [], fabric: [{name: leaf, nodes: 4}, {name: spine}]}
        parallelism: {tensor: 8, pipeline: 4, data: 2, order: tp-cp-pp-dp}

    Fails:
        hardware: {nodes: 8, hosts: [], fabric: [{name: leaf, nodes: 4}, {name: spine}]}
        parallelism: {tensor: 8, pipeline: 4, data: 2, order: tp-cp-dp-pp}
    """
    analysis = ctx.analysis
    if analysis is None or not ctx.suggest:
        return
    plan = analysis.plan
    fabric = plan.cluster.fabric
    if plan.layout.p == 1 or len(fabric) < 3:
        return
    tier = group_tier(plan, (Axis.PP,))
    where = fabric.index(tier.name)
    if where < 2:
        return
    step = estimate_step(analysis).step_time_s
    best: tuple[float, tuple[str, ...], Tier] | None = None
    for order in _orders(ctx.job):
        other = _ordered(ctx.job, order)
        if other is None or _index(other, (Axis.PP,)) >= where:
            continue
        if not _no_worse(other, plan, (Axis.TP, Axis.CP)):
            continue
        seconds = estimate_step(analyse(other)).step_time_s
        if seconds <= step and (best is None or seconds < best[0]):
            best = (seconds, order, group_tier(other, (Axis.PP,)))
    if best is None:
        return
    seconds, order, inner = best
    lay = plan.layout
    yield Violation(
        "parallelism.order",
        f"under order {'-'.join(lay.order)} the pipeline groups ({lay.p} stages "
        f"{lay.strides[Axis.PP]:,} ranks apart) span {lay.p * lay.strides[Axis.PP]:,} GPUs: "
        f"their sends cross {_shown(tier, plan)}, past the "
        f"{fabric.tiers[where - 1].shown} blocks of {fabric.tiers[where - 1].span:,} GPUs",
        f"use order: {'-'.join(order)}: planc places the pipeline groups on {_shown(inner, plan)} "
        f"with tensor parallelism where it is, and its step estimate is no slower ({seconds:.3f} s; "
        f"now {step:.3f} s)",
        ("parallelism.pipeline", tier.field),
    )


@rule("PLC041", Severity.WARNING, Needs.PLAN)
def data_parallel_on_rails(ctx: Context) -> Iterator[Violation]:
    """Data-parallel groups stay on their rails.

    A rail-optimised leaf (a DGX SuperPOD scalable unit: NIC i of every node on leaf switch i)
    carries a ring only between GPUs of one local index; a data-parallel group whose members on
    different nodes differ in local index (tensor < GPUs per node under order tp-cp-dp-pp)
    crosses rails, which a rail leaf cannot do: its gradients go up to the spine, and its
    reduction runs on the spine's bandwidth and ports. NCCL's PXN (hardware.pxn) moves the
    cross-rail hop onto NVLink first. The fix is an order under which the groups are
    rail-aligned on the leaf with tensor and context parallelism where they are, checked with
    planc's placement, or hardware.pxn when NCCL's PXN is on (NCCL 2.12 and later unless
    NCCL_PXN_DISABLE=1). Only rail-aligned tiers (hardware.fabric) can fire it.

    Base: llama3-70b-8x8.yaml

    Passes:
        hardware: {nodes: 8, hosts: [], fabric: [{name: leaf, nodes: 4, rail_aligned: true}, {name: spine}]}
        parallelism: {tensor: 8, pipeline: 4, data: 2, order: tp-cp-pp-dp}

    Fails:
        hardware: {nodes: 8, hosts: [], fabric: [{name: leaf, nodes: 4, rail_aligned: true}, {name: spine}]}
        parallelism: {tensor: 4, pipeline: 4, data: 4}
        training: {seq_len: 4096}
    """
    plan = ctx.plan
    if plan is None or plan.cluster.fabric.pxn or plan.layout.d * plan.layout.c == 1:
        return
    fabric, lay = plan.cluster.fabric, plan.layout
    axes = (Axis.DP, Axis.CP)
    paid = group_tier(plan, axes)
    per_node = plan.cluster.gpus_per_node
    if rail_aligned(plan.world, per_node, lay.degrees, lay.strides, axes):
        return
    rails = next(
        (
            t
            for t in fabric.tiers[: fabric.index(paid.name)]
            if t.rail_aligned and _fits(plan, t.span, axes)
        ),
        None,
    )
    if rails is None:
        return
    offsets = sorted(
        i * lay.strides[Axis.DP] + j * lay.strides[Axis.CP]
        for i in range(lay.d)
        for j in range(lay.c)
    )
    members = offsets[:4]
    shown = ", ".join(f"{m} (GPU {m % per_node} of node {m // per_node})" for m in members)
    fixes = [
        f"order: {'-'.join(order)}"
        for order in _orders(ctx.job)
        if (other := _ordered(ctx.job, order)) is not None
        and group_tier(other, axes) == rails
        and _no_worse(other, plan, (Axis.TP, Axis.CP))
    ][:1]
    fixes.append("hardware.pxn: true if NCCL's PXN is on (NCCL 2.12 and later by default)")
    yield Violation(
        "parallelism.order",
        f"the data-parallel groups ({lay.d * lay.c} ranks, e.g. {shown}{', …' if len(offsets) > 4 else ''}) "
        f"differ in local GPU index across nodes: the rail-aligned {rails.shown} (blocks of "
        f"{rails.span:,} GPUs) cannot carry them, and their gradients cross {_shown(paid, plan)}",
        "keep them on the rails: " + "; or ".join(fixes),
        ("parallelism.tensor", rails.field),
    )


def _fits(plan: Plannable, span: int, axes: tuple[Axis, ...]) -> bool:
    """Every group over `axes` lies inside one block of `span` ranks."""
    return within_span(plan.world, span, plan.layout.degrees, plan.layout.strides, axes)


# Below a hundredth of the step the oversubscription's cost is within what the efficiency tables
# can tell apart (their bus-bandwidth efficiencies are given to two digits).
MATERIAL_SHARE = 0.01


def _full_bisection(plan: Plannable) -> Plannable:
    """The plan on the same fabric with every tier at full bisection (k = 1)."""
    fabric = plan.cluster.fabric
    tiers = tuple(dataclasses.replace(t, oversubscription=1.0) for t in fabric.tiers)
    cluster = dataclasses.replace(plan.cluster, fabric=dataclasses.replace(fabric, tiers=tiers))
    return dataclasses.replace(plan, cluster=cluster)


def _hierarchical_s(analysis: Analysis, ops: list[CommOp], tier: Tier) -> float | None:
    """The seconds per step of `ops` (one group kind's collectives on `tier`) as hierarchical
    collectives: a ring inside each block of the tier below, then a ring across the blocks on
    the 1/n_in shard (`planc.comm.tiers.hierarchical_all_reduce_s`; a reduce-scatter or an
    all-gather is half an all-reduce at every level, as for the flat ring). None when the
    groups have fewer than two members in a block below (the flat ring is then the same) or
    do not split evenly over the blocks."""
    plan, eff = analysis.plan, analysis.efficiency
    fabric = plan.cluster.fabric
    below = fabric.tiers[fabric.index(tier.name) - 1]
    lay = plan.layout
    offsets = [
        i * lay.strides[Axis.DP] + j * lay.strides[Axis.CP]
        for i in range(lay.d)
        for j in range(lay.c)
    ]
    inside = sum(1 for o in offsets if o < below.span)
    n = len(offsets)
    if inside < 2 or n % inside:
        return None
    entry = eff.link(tier.efficiency)
    alpha = entry.latency_us * 1e-6
    total = 0.0
    for op in ops:
        e = entry.of(str(op.op))
        levels = (
            Level(inside, ring_bandwidth_gbs(fabric, below.name) * e, alpha),
            Level(n // inside, ring_bandwidth_gbs(fabric, tier.name) * e, alpha),
        )
        share = 1.0 if op.op is Collective.ALL_REDUCE else 0.5
        total += op.calls * share * hierarchical_all_reduce_s(levels, op.buffer_bytes)
    return total


@rule("PLC042", Severity.WARNING, Needs.ANALYSIS)
def oversubscription_exposed(ctx: Context) -> Iterator[Violation]:
    """An oversubscribed tier costs no more than a hundredth of the step.

    Under full load a tier oversubscribed k:1 gives each GPU B/k (Llama 3's aggregation layer
    above its 3,072-GPU pods: 50/7 = 7.1 GB/s). A flat ring through it, what the plan assumes,
    runs every byte at that rate; when the step planc estimates is longer by more than 1% than
    the same plan at full bisection, the finding gives the cost, the data-parallel reduction's
    time through the tier and what a hierarchical all-reduce (a ring inside each block below,
    then across the blocks on the 1/n shard; Meta's topology-aware collectives, NCCL's tree and
    CollNet) would take, and an order planc has placed and priced that brings the cost under
    the threshold when there is one. Only oversubscribed tiers (hardware.fabric) can fire it.

    Base: llama3-70b-8x8.yaml

    Passes:
        hardware: {nodes: 8, hosts: [], fabric: [{name: pod, nodes: 4}, {name: aggregation, oversubscription: 7}]}
        parallelism: {tensor: 8, pipeline: 4, data: 2, order: tp-cp-dp-pp}
        training: {global_batch: 64}

    Fails:
        hardware: {nodes: 8, hosts: [], fabric: [{name: pod, nodes: 4}, {name: aggregation, oversubscription: 7}]}
        parallelism: {tensor: 8, pipeline: 4, data: 2, order: tp-cp-pp-dp}
        training: {global_batch: 64}
    """
    analysis = ctx.analysis
    if analysis is None:
        return
    plan = analysis.plan
    fabric = plan.cluster.fabric
    if all(t.oversubscription == 1.0 for t in fabric.tiers):
        return
    step = estimate_step(analysis).step_time_s
    full = estimate_step(analyse(_full_bisection(plan))).step_time_s
    if step - full <= MATERIAL_SHARE * step:
        return
    crossed = [t for t in fabric.tiers if t.oversubscription > 1.0]
    tier = next((t for t in crossed if any(op.link == t.name for op in analysis.ops)), crossed[0])
    dp = [
        op
        for op in analysis.ops
        if op.stage == 0 and op.link == tier.name and op.group is GroupKind.DP_CP
    ]
    words = [
        f"the 1:{tier.oversubscription:g} tier {_shown(tier, plan)} costs "
        f"{step - full:.3f} s of the {step:.3f} s step ({(step - full) / step:.1%}; at full "
        f"bisection {full:.3f} s)"
    ]
    if dp:
        flat = sum(analysis.op_seconds[op] for op in dp)
        words.append(f"the data-parallel reduction through it takes {flat:.3f} s as a flat ring")
        hierarchical = _hierarchical_s(analysis, dp, tier)
        if hierarchical is not None:
            words.append(f"a hierarchical all-reduce would take {hierarchical:.3f} s")
    fix = (
        "keep the heavy groups inside the tier's blocks (parallelism.order), or run the "
        "data-parallel reduction hierarchically (NCCL_ALGO=Tree or a topology-aware collective)"
    )
    if ctx.suggest:
        found = _cheaper_order(ctx.job, plan, step)
        if found is not None:
            fix = f"use order: {'-'.join(found[1])} ({found[0]:.3f} s per step); or " + fix
    yield Violation(
        "parallelism.order",
        "; ".join(words),
        fix,
        (tier.field, "parallelism.data"),
    )


def _cheaper_order(job: Job, plan: Plannable, step: float) -> tuple[float, tuple[str, ...]] | None:
    """The fastest other order whose oversubscription cost is under the threshold and whose
    step is shorter, keeping TP and CP where they are."""
    best: tuple[float, tuple[str, ...]] | None = None
    for order in _orders(job):
        other = _ordered(job, order)
        if other is None or not _no_worse(other, plan, (Axis.TP, Axis.CP)):
            continue
        seconds = estimate_step(analyse(other)).step_time_s
        full = estimate_step(analyse(_full_bisection(other))).step_time_s
        cheap = seconds < step and seconds - full <= MATERIAL_SHARE * seconds
        if cheap and (best is None or seconds < best[0]):
            best = (seconds, order)
    return best
