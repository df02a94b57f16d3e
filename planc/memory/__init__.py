"""The exact per-rank memory budget: weights, gradients, optimizer state, activations, buffers
and reserve for every pipeline stage, term by term, each with its formula and source.

Standard library only, so that `planc check` stays fast to start.
"""

from __future__ import annotations

from planc.memory.budget import MemoryBudget, RankMemory, StageBudget, budget, rank_memory
from planc.memory.params import ParameterCount, parameter_count
from planc.memory.terms import Term

__all__ = [
    "MemoryBudget",
    "ParameterCount",
    "RankMemory",
    "StageBudget",
    "Term",
    "budget",
    "parameter_count",
    "rank_memory",
]
