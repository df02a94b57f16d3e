"""The closed-form pipeline bubble of a flush schedule with equal stages.

Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", §2.2: with p stages, m micro-batches and v model chunks per stage, the bubble takes
(p − 1)·(t_f + t_b)/v against the ideal m·(t_f + t_b), so the idle fraction of the whole step
is (p − 1)/(v·m + p − 1).
"""

from __future__ import annotations

import math


def bubble_fraction(p: int, m: int, v: int = 1) -> float:
    """Idle fraction of a 1F1B (v = 1) or interleaved pipeline step: (p − 1)/(v·m + p − 1)."""
    return (p - 1) / (v * m + p - 1)


def microbatches_for(p: int, v: int, limit: float) -> int:
    """Smallest m with (p − 1)/(v·m + p − 1) ≤ limit: m ≥ (p − 1)(1 − limit)/(v·limit)."""
    if p == 1:
        return 1
    if limit <= 0:
        raise ValueError("a bubble limit of 0 cannot be met with p > 1")
    m = math.ceil((p - 1) * (1 - limit) / (v * limit) - 1e-9)
    while bubble_fraction(p, m, v) > limit:
        m += 1
    return max(m, 1)
