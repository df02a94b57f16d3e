"""The tier each pipeline boundary's sends cross, from rank arithmetic.

A pipeline group can need an outer tier as a whole while most of its boundaries stay inside an
inner one. On GB200 NVL72 with a 64-GPU domain and 32 ranks a stage, stages 0 and 1 share one
domain and stages 2 and 3 the next: the group spans two domains, but only the boundary 1 → 2
(and the interleaved schedules' wrap 3 → 0) leaves NVLink. Megatron-Core's pipeline sends go
rank to rank (torch.distributed P2POp pairs in `p2p_communication.py`, torchtitan's through
torch.distributed.pipelining alike), so each send crosses the tier of its own pair of ranks, not
the one that holds the whole group.

Boundary i joins stage i and stage (i + 1) mod p; boundary p − 1 is the wrap from the last
stage to the first, which only the interleaved schedules' later chunks cross. The two
directions of a boundary cross the same tier.

The arithmetic. Stage i's ranks are x = y + i·σ + z·σ·p, σ the pp stride: y < σ runs over the
axes faster than pp (their sizes multiply to σ), z over the slower ones. Rank x's partner at
stage j is x + Δ, Δ = (j − i)·σ. For each z the σ ranks from a = i·σ + z·σ·p and their partners
lie in one block of `span` consecutive ranks iff the hull [a + min(0, Δ), a + σ + max(0, Δ))
does; a mod span repeats with period span / gcd(σ·p, span) in z, so that many values of z
decide it. A rail tier also needs the pair on one rail: Δ a multiple of the GPUs per node, or
every pair inside one node (`planc.comm.schedule.rail_aligned`, for groups).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from planc.pipeline.registry import definition
from planc.plannable import Plannable
from planc.spec.fabric import Fabric, Tier
from planc.vocab import Axis, ChunkPlacement, Direction


def tier_holds(fabric: Fabric, tier: Tier, inside: bool, aligned: bool) -> bool:
    """Tier `tier` carries traffic between ranks that lie `inside` one of its blocks: a tier of
    rails only when the ranks are rail-aligned or NCCL routes cross-rail over NVLink (PXN);
    otherwise the traffic crosses rails through the tier above (the spine)."""
    return inside and (aligned or not tier.rail_aligned or fabric.pxn)


def pairs_inside(world: int, sigma: int, p: int, i: int, j: int, span: int) -> bool:
    """Every rank of stage i and its partner at stage j lie in one block of `span` consecutive
    ranks (this module's docstring), for a grid of `world` ranks with pp stride `sigma` and
    p stages."""
    if i == j or world <= span:
        return True
    delta = (j - i) * sigma
    low, high = min(0, delta), sigma + max(0, delta)
    if high - low > span:
        return False
    period = span // math.gcd(sigma * p, span)
    z = np.arange(min(world // (sigma * p), period), dtype=np.int64)
    start = (i * sigma + z * sigma * p) % span
    return bool((start + low >= 0).all() and (start + high <= span).all())


def pair_tier(job: Plannable, i: int, j: int) -> Tier:
    """The first tier, innermost first, that carries every send between a rank of stage i and
    its partner at stage j (`pairs_inside`, `tier_holds`); the outermost when none does."""
    lay, fabric = job.layout, job.cluster.fabric
    world, sigma, g = job.world, lay.strides[Axis.PP], job.cluster.gpus_per_node
    aligned = (j - i) * sigma % g == 0 or pairs_inside(world, sigma, lay.p, i, j, g)
    for tier in fabric:
        if tier_holds(fabric, tier, pairs_inside(world, sigma, lay.p, i, j, tier.span), aligned):
            return tier
    return fabric.outermost


def boundary_tiers(job: Plannable) -> tuple[Tier, ...]:
    """The tier of each boundary i (stage i ↔ stage (i + 1) mod p), p of them; none for p = 1.
    A function of the cluster, the degrees and the rank order, kept on the cluster instance as
    `planc.comm.schedule.group_tier` keeps the groups' (a search's candidates share one
    cluster)."""
    lay = job.layout
    if lay.p == 1:
        return ()
    memo: dict[tuple[object, ...], tuple[Tier, ...]] | None = job.cluster.__dict__.get(
        "_boundary_tiers"
    )
    if memo is None:
        memo = {}
        job.cluster.__dict__["_boundary_tiers"] = memo
    at = (lay.t, lay.c, lay.d, lay.p, lay.order)
    found = memo.get(at)
    if found is None:
        found = memo[at] = tuple(pair_tier(job, i, (i + 1) % lay.p) for i in range(lay.p))
    return found


def boundary_names(job: Plannable) -> tuple[str, ...]:
    """The names of `boundary_tiers`: what a stage's sends, and so its class and a search's
    shared sub-results, read of the rank order."""
    return tuple(tier.name for tier in boundary_tiers(job))


def _two_neighbours(job: Plannable) -> bool:
    """Whether each rank sends every direction to both neighbours (the V placement: rank r
    holds virtual stages r and 2p − 1 − r)."""
    return definition(job.layout.schedule).placement is ChunkPlacement.V


def stage_boundaries(
    job: Plannable, stage: int, direction: Direction
) -> tuple[tuple[int, int], ...]:
    """(boundary, sends per step) for the sends of pipeline rank `stage` in `direction`, with
    m micro-batches: m·(v − [end stage]) in all, m·(2 − [first rank] − [last rank]) in the V
    placement.

    Chunks placed in a loop: every chunk sends forward to the next rank, over boundary r (the
    last rank's to rank 0 over the wrap, p − 1, but for the last virtual stage's), and backward
    to the one before, over boundary r − 1 mod p (but for the first virtual stage's). The V
    placement: chunk 0 passes r → r + 1 and chunk 1 r → r − 1 forward, and back the other way,
    m each, no wrap (the last rank turns locally, rank 0 ends both)."""
    lay, m, p = job.layout, job.m, job.layout.p
    if p == 1:
        return ()
    if _two_neighbours(job):
        up = [] if stage == p - 1 else [(stage, m)]  # to rank r + 1 (chunk 0 on, chunk 1 back)
        down = [] if stage == 0 else [(stage - 1, m)]  # to rank r − 1
        return tuple(up + down)
    if direction is Direction.FORWARD:
        return ((stage, m * (lay.v - (stage == p - 1))),)
    return (((stage - 1) % p, m * (lay.v - (stage == 0))),)


def stage_sends(job: Plannable, stage: int, direction: Direction) -> tuple[tuple[Tier, int], ...]:
    """(tier, sends per step) of pipeline rank `stage` in `direction`: `stage_boundaries`
    summed by tier, innermost tier first, empty tiers left out."""
    tiers = boundary_tiers(job)
    names = job.cluster.fabric.names
    calls = [0] * len(names)
    for boundary, sends in stage_boundaries(job, stage, direction):
        calls[names.index(tiers[boundary].name)] += sends
    return tuple(
        (job.cluster.fabric.tier(name), n) for name, n in zip(names, calls, strict=True) if n
    )


def crossed(job: Plannable) -> frozenset[int]:
    """The boundaries the pipeline's messages cross (`stage_boundaries`): all but the wrap,
    which only the interleaved schedules' earlier chunks cross."""
    return frozenset(
        boundary
        for stage in range(job.layout.p)
        for boundary, sends in stage_boundaries(job, stage, Direction.FORWARD)
        if sends
    )


def slowest_crossed(job: Plannable, seconds: Sequence[float]) -> float:
    """The largest of a per-boundary time `seconds[i]` over the boundaries the pipeline's
    messages cross (`crossed`); 0 for p = 1.

    The pipeline simulation puts one message delay between all stages, and the slowest
    boundary's is the one to put there: in 1F1B's steady state a stage's next forward waits for
    its neighbour's backward to come back across their boundary, so each micro-batch pays that
    boundary's delay (with p = 2, a period of t_f + t_b + δ), and the slowest boundary sets the
    pace. Only the fill and drain, which cross each boundary once, would take less."""
    through = crossed(job)
    return max((s for i, s in enumerate(seconds) if i in through), default=0.0)
