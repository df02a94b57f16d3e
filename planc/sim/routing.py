"""How many distinct blocks of experts a routed token reaches, counted from an explicit placement:
what `planc verify` recomputes a flex dispatcher's rows from, apart from the planner's closed form
(`planc.comm.dispatch`).

The routing model is the planner's (uniform load under forced balancing): a token's k_G groups
are a uniformly random k_G-subset of the G equal groups, each chosen group gives one uniformly
random expert, and the other k − k_G experts are a uniform draw from the chosen groups' remaining
experts (G = k_G = 1: a uniform k-subset of the E experts). Here the experts' blocks are given
one by one (`block_of[e]`, e.g. the EP rank or NVLink domain holding expert e) and the groups as
consecutive runs of E/G. For each block the groups fall into classes by how many of their
experts lie in it; a k_G-subset is a choice of n_c groups from each class c (C(m_c, n_c) ways),
and the token misses the block with probability Π_c ((s − c)/s)^{n_c} · C(P − Σ n_c·c, k − k_G) /
C(P, k − k_G), P = k_G·(s − 1) the chosen groups' other experts. The expected number of blocks
reached is Σ_β (1 − P(β missed)), in exact rational arithmetic.

Under round-robin routing (NeMo AutoModel's FakeBalancedGate, training.expert_routing
round_robin) token t's experts are t·k … t·k + k − 1 mod E; its choices repeat every E tokens at
most, so the expectation is the count over E consecutive tokens' explicit expert lists
(`round_robin_assignment`), divided by E.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from math import comb

import numpy as np
import numpy.typing as npt

__all__ = [
    "expected_blocks",
    "reach_probability",
    "round_robin_assignment",
    "round_robin_blocks",
    "round_robin_reach",
]


def _compositions(total: int, limits: list[int]) -> list[tuple[int, ...]]:
    """Every (n_1, …, n_r) with 0 ≤ n_i ≤ limits[i] summing to `total`."""
    if not limits:
        return [()] if total == 0 else []
    out = []
    for first in range(min(total, limits[0]) + 1):
        out += [(first, *rest) for rest in _compositions(total - first, limits[1:])]
    return out


def _miss(overlaps: list[int], size: int, group_k: int, top_k: int) -> Fraction:
    """P(a block is missed) given each group's overlap with it (the module docstring)."""
    classes = sorted(Counter(overlaps).items())
    values, counts = [c for c, _ in classes], [m for _, m in classes]
    pool, draws = group_k * (size - 1), top_k - group_k
    total = Fraction(0)
    for picks in _compositions(group_k, counts):
        ways = 1
        first = Fraction(1)
        taken = 0
        for c, m, n in zip(values, counts, picks, strict=True):
            ways *= comb(m, n)
            first *= Fraction(size - c, size) ** n
            taken += n * c
        if first:  # a chosen group wholly inside the block: its best expert cannot miss it
            total += ways * first * Fraction(comb(pool - taken, draws), comb(pool, draws))
    return total / comb(len(overlaps), group_k)


def expected_blocks(
    block_of: npt.NDArray[np.int64], top_k: int, groups: int = 1, group_k: int = 1
) -> Fraction:
    """E[distinct blocks a token's experts lie in], expert e in block `block_of[e]`, under the
    routing model of the module docstring (groups of E/G consecutive experts)."""
    experts = len(block_of)
    size = experts // groups
    group_of = np.arange(experts) // size
    blocks = int(block_of.max()) + 1
    reached = Fraction(0)
    for beta in range(blocks):
        overlaps = np.bincount(group_of[block_of == beta], minlength=groups).tolist()
        reached += 1 - _miss(overlaps, size, group_k, top_k)
    return reached


def reach_probability(
    held: npt.NDArray[np.bool_], top_k: int, groups: int = 1, group_k: int = 1
) -> Fraction:
    """P(at least one of a token's experts is among `held` (one flag per expert)), under the
    routing model of the module docstring: what a domain holding those experts receives."""
    experts = len(held)
    size = experts // groups
    group_of = np.arange(experts) // size
    overlaps = np.bincount(group_of[held], minlength=groups).tolist()
    return 1 - _miss(overlaps, size, group_k, top_k)


def round_robin_assignment(experts: int, top_k: int) -> npt.NDArray[np.int64]:
    """[E, k]: the experts of E consecutive tokens under FakeBalancedGate,
    arange(E·k).view(E, k) % E (nemo_automodel/components/moe/layers.py, NVIDIA-NeMo/Automodel
    e45812012); every later token repeats one of these rows."""
    return np.arange(experts * top_k, dtype=np.int64).reshape(experts, top_k) % experts


def round_robin_blocks(block_of: npt.NDArray[np.int64], top_k: int) -> Fraction:
    """E[distinct blocks a token's experts lie in] under round-robin routing, expert e in block
    `block_of[e]`: counted over E tokens' explicit assignments."""
    experts = len(block_of)
    blocks = block_of[round_robin_assignment(experts, top_k)]
    distinct = sum(len(set(row.tolist())) for row in blocks)
    return Fraction(distinct, experts)


def round_robin_reach(held: npt.NDArray[np.bool_], top_k: int) -> Fraction:
    """P(at least one of a token's experts is among `held`) under round-robin routing: the share
    of E tokens' assignments that touch a held expert."""
    experts = len(held)
    hit = held[round_robin_assignment(experts, top_k)].any(axis=1)
    return Fraction(int(hit.sum()), experts)
