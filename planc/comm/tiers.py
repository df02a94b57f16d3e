"""Collectives across fabric tiers: the bandwidth a ring gets on a tier, and the hierarchical
all-reduce it could run instead.

Symbols (landscape-2026-12-01 §3.2): tier i has per-GPU bandwidth B_i (GB/s per direction),
oversubscription k_i ≥ 1 (under full load a group crossing the tier's blocks gets B_i/k_i: Llama
3's aggregation layer above its 3,072-GPU pods is 1:7, 50/7 = 7.1 GB/s), bus-bandwidth
efficiency e_i and latency α_i per ring step; a group of n members, a buffer of M bytes.

What the plan assumes: every collective is one flat NCCL ring over the group's members (the
algorithm nccl-tests' bus bandwidth describes, and the one planc's efficiency entries are
measured on). Every link of a ring carries the same bytes, so a ring whose members span tiers
1..j runs at its slowest link after oversubscription, min_{1≤i≤j} B_i/k_i (`ring_bandwidth_gbs`).
The NVLink tier (0) is not among the links a cross-node ring is limited by: within a node the
ring's hops run on NVLink, which planc takes to be faster than the NICs. A hierarchical
all-reduce (reduce-scatter from the inside out, all-reduce of the 1/Π n shard at the top, and
all-gather back; Meta's and NCCL's tree/CollNet-style algorithms) sends only M/Π_{j<i} n_j
through tier i; `hierarchical_all_reduce_s` prices it so that rules can say what it would save.
"""

from __future__ import annotations

from collections.abc import Sequence

from planc.record import record
from planc.spec.fabric import Fabric


@record
class Level:
    """One level of a hierarchical collective: n_i members joined through a tier giving b_gbs
    (e_i·B_i/k_i, GB/s) with α_s seconds per ring step."""

    n: int
    b_gbs: float
    alpha_s: float


def effective_gbs(bandwidth_gbs: float, oversubscription: float) -> float:
    """B/k: a tier's per-GPU bandwidth under full load, GB/s (full bisection k = 1; Llama 3's
    aggregation k = 7 gives 50/7 = 7.14 GB/s; landscape §3.2)."""
    return bandwidth_gbs / oversubscription


def ring_bandwidth_gbs(fabric: Fabric, name: str) -> float:
    """min_{1≤i≤j} B_i/k_i: the per-GPU bandwidth of a flat ring over a group whose outermost
    tier is tier j = `name` (tier 0, the NVLink domain, when j = 0). Every ring link carries the
    same bytes (nccl-tests PERFORMANCE.md: busBw is per link), so the slowest tier the ring
    crosses sets its rate. GB/s."""
    j = fabric.index(name)
    crossed = fabric.tiers[1 : j + 1] if j > 0 else fabric.tiers[:1]
    return min(effective_gbs(t.bandwidth_gbs, t.oversubscription) for t in crossed)


def railed_ring_gbs(ring_gbs: float, rails: int, domain_gbs: float) -> float:
    """b = min(g·b_x, b_0): the per-member bus bandwidth of a ring over a group with g members in
    each NVLink domain whose cross-domain hops run at b_x per NIC, the domain's own ring at b_0
    (GB/s, both after their bus-bandwidth efficiency).

    NCCL builds one ring channel per NIC and sends each channel's cross-domain hop on its own
    rail, so the g members' NICs carry a ring's bytes in parallel: each carries 1/g of them,
    while every byte still takes the hops inside the domain, which bound it at b_0. NCCL's
    maintainers measure 192 GB/s all-reduce bus bandwidth across DGX A100s, eight 200 Gb/s (25
    GB/s) NICs each (NVIDIA/nccl issue #812): 0.96 of 8 × 25, where one NIC gives 25. An
    all-to-all cannot aggregate NICs (NVIDIA/nccl-tests issue #267, its maintainer: 'the
    performance you should see is the performance of a single NIC'): callers pass g = 1 for it.
    """
    return min(max(rails, 1) * ring_gbs, domain_gbs)


def ring_all_reduce_s(n: int, buffer_bytes: int, b_gbs: float, alpha_s: float) -> float:
    """T = 2(n−1)/n · M / b + 2(n−1)·α: a flat ring all-reduce of M bytes over n members at b
    GB/s per link (nccl-tests PERFORMANCE.md bus factor 2(n−1)/n; Patarasuk & Yuan 2009)."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * buffer_bytes / (b_gbs * 1e9) + 2 * (n - 1) * alpha_s


def hierarchical_all_reduce_s(levels: Sequence[Level], buffer_bytes: int) -> float:
    """T = Σ_i [2(n_i−1)/n_i · M_i / b_i + 2(n_i−1)·α_i], M_i = M / Π_{j<i} n_j: reduce-scatter
    inside out then all-gather back, each level a ring over its n_i members of the shard the
    levels below left (landscape §3.2, derived from the ring formula; 2D all-reduce as in
    Horovod's hierarchical allreduce and NCCL's CollNet). Levels innermost first, seconds."""
    total, share = 0.0, float(buffer_bytes)
    for level in levels:
        if level.n > 1:
            total += 2 * (level.n - 1) / level.n * share / (level.b_gbs * 1e9)
            total += 2 * (level.n - 1) * level.alpha_s
        share /= level.n
    return total
