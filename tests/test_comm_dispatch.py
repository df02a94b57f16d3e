"""The distinct ranks and NVLink domains a routed token reaches (planc.comm.dispatch): the closed
form against brute-force enumeration of the routing model (exactly), and against a Monte Carlo of
Megatron-Core's own router under forced load balancing (within a stated tolerance)."""

from __future__ import annotations

from fractions import Fraction
from itertools import combinations, product
from math import comb

import numpy as np
import pytest

from planc.comm.dispatch import (
    Routing,
    blocks_reached,
    deepep_combine_row_bytes,
    deepep_dispatch_row_bytes,
    hybridep_dispatch_row_bytes,
    subset_weights,
)


def enumerated(routing: Routing, width: int) -> Fraction:
    """E[distinct blocks] by listing every outcome of the model, all equally likely: each
    k_G-subset of groups, each choice of one best expert in every chosen group, and each
    (k − k_G)-subset of the chosen groups' other experts."""
    size = routing.experts // routing.groups
    draws = routing.top_k - routing.group_top_k
    total, outcomes = Fraction(0), 0
    for chosen in combinations(range(routing.groups), routing.group_top_k):
        members = [range(j * size, (j + 1) * size) for j in chosen]
        for best in product(*members):
            rest = sorted(set().union(*members) - set(best))
            for others in combinations(rest, draws):
                total += len({e // width for e in (*best, *others)})
                outcomes += 1
    return total / outcomes


@pytest.mark.parametrize(
    ("routing", "width"),
    [
        (Routing(8, 2), 2),  # no groups: the hypergeometric case
        (Routing(12, 4, 4, 2), 3),  # groups of 3 = blocks: each chosen group one block
        (Routing(12, 4, 4, 2), 2),  # blocks cut across groups
        (Routing(12, 4, 4, 2), 6),  # two groups per block
        (Routing(16, 4, 2, 2), 4),  # every group chosen
        (Routing(16, 6, 4, 3), 8),
        (Routing(18, 3, 3, 1), 2),  # one group only: blocks of 2 cut groups of 6
    ],
)
def test_closed_form_equals_enumeration(routing: Routing, width: int) -> None:
    assert blocks_reached(routing, width) == enumerated(routing, width)


def test_without_groups_it_is_the_hypergeometric_miss() -> None:
    # E[blocks] = (E/b)·(1 − C(E − b, k)/C(E, k)), by hand for DeepSeek-V3's 256 experts, top 8,
    # on 8 domains of 32: 8·(1 − C(224, 8)/C(256, 8)).
    want = 8 * (1 - Fraction(comb(224, 8), comb(256, 8)))
    assert blocks_reached(Routing(256, 8), 32) == want
    assert float(want) == pytest.approx(5.2947, abs=1e-4)


def test_node_limited_routing_with_groups_on_nodes_reaches_topk_group_nodes() -> None:
    # DeepSeek-V3 on EP 64 over 8 nodes: each node is one of the 8 groups, and every chosen
    # group gives at least its best expert: exactly 4 nodes.
    assert blocks_reached(Routing(256, 8, 8, 4), 32) == 4


def test_ranks_reached_by_hand() -> None:
    # 8 experts in 2 groups of 4, top 2 from 1 group (k_G = 1): the best expert, then one of the
    # group's 3 others; ranks of 2 experts: the second lands on the best one's rank with
    # probability 1/3, so E[ranks] = 1 + 2/3.
    assert blocks_reached(Routing(8, 2, 2, 1), 2) == 1 + Fraction(2, 3)


def test_subset_weights() -> None:
    # (c, x) = (1, 1/2), (2, 1/3), (1, 1/5): pairs {1,2}: z^3·1/6, {1,3}: z^2·1/10, {2,3}: z^3·1/15.
    factors = ((1, Fraction(1, 2)), (2, Fraction(1, 3)), (1, Fraction(1, 5)))
    assert subset_weights(factors, 2) == {3: Fraction(1, 6) + Fraction(1, 15), 2: Fraction(1, 10)}
    assert subset_weights(factors, 0) == {0: 1}


def megatron_routes(rng: np.random.Generator, tokens: int, routing: Routing) -> np.ndarray:
    """The experts Megatron-Core 0.19.2 picks under --moe-router-force-load-balancing: i.i.d.
    normal logits (moe_utils.RandomSTE), sigmoid scores, and group_limited_topk: the k_G
    groups with the largest sum of their top k/k_G scores, then the top k of their experts."""
    E, k, G, kg = routing.experts, routing.top_k, routing.groups, routing.group_top_k
    scores = 1 / (1 + np.exp(-rng.standard_normal((tokens, E))))
    if G > 1:
        top = np.sort(scores.reshape(tokens, G, E // G), axis=-1)[:, :, -(k // kg) :]
        chosen = np.argsort(-top.sum(axis=-1), axis=1)[:, :kg]
        mask = np.zeros((tokens, G), dtype=bool)
        np.put_along_axis(mask, chosen, True, axis=1)
        scores = np.where(np.repeat(mask, E // G, axis=1), scores, -np.inf)
    return np.argsort(-scores, axis=1)[:, :k]


# The model (each chosen group's best expert, the rest uniform over the chosen groups) is within
# 1 % of Megatron's own top k on DeepSeek-V3's shape at every block width, the stated tolerance;
# without groups it is exact and only the sampling error remains (0.5 % at 20,000 tokens).
@pytest.mark.parametrize(
    ("routing", "width", "tolerance"),
    [
        (Routing(256, 8, 8, 4), 32, 0.01),  # DeepSeek-V3 nodes of EP 64
        (Routing(256, 8, 8, 4), 4, 0.01),  # its ranks
        (Routing(256, 8, 8, 4), 16, 0.01),  # EP 128: two nodes per group
        (Routing(256, 8, 8, 4), 64, 0.01),  # EP 32: two groups per node
        (Routing(256, 8), 32, 0.005),
        (Routing(128, 8), 16, 0.005),  # Qwen3-235B on EP 64 over 8 nodes
        (Routing(128, 8), 16 * 8, 0.005),  # one node: every token reaches it
    ],
)
def test_model_matches_megatron_routing_monte_carlo(
    routing: Routing, width: int, tolerance: float
) -> None:
    rng = np.random.default_rng(24)
    picks = megatron_routes(rng, 20_000, routing)
    blocks = np.sort(picks // width, axis=1)
    distinct = 1 + (np.diff(blocks, axis=1) != 0).sum(axis=1)
    assert float(blocks_reached(routing, width)) == pytest.approx(
        distinct.mean(), rel=tolerance
    )


def test_row_bytes() -> None:
    # DeepSeek-V3, BF16 h = 7168: 14,336 bytes, + 8 + 8·8 = 14,408, aligned to 16: 14,416;
    # the combine's 14,336 + 8 + 32 = 14,376 → 14,384. HybridEP: + 32 domain experts × 4 bytes.
    assert deepep_dispatch_row_bytes(14_336, 8) == 14_416
    assert deepep_combine_row_bytes(14_336, 8) == 14_384
    assert hybridep_dispatch_row_bytes(14_336, 32) == 14_464


def test_blocks_must_tile_the_experts() -> None:
    with pytest.raises(ValueError, match="do not tile"):
        blocks_reached(Routing(10, 2), 3)
