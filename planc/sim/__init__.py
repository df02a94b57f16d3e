"""Embedded numpy simulator of ring collectives (reduce-scatter, all-gather, all-reduce) and of
the all-to-all exchange.

Used to check the plan compiler's communication-volume formulas against an executable
model: see :mod:`planc.sim.ring` for the chunk schedule, byte accounting and tolerances, and
:mod:`planc.sim.alltoall` for the pairwise exchange.
"""

from planc.sim.alltoall import all_to_all, all_to_all_bytes, all_to_all_received_bytes
from planc.sim.ring import (
    SUPPORTED_DTYPES,
    RingTrace,
    chunk_sizes,
    ring_all_gather,
    ring_all_gather_bytes,
    ring_all_gather_trace,
    ring_allreduce,
    ring_allreduce_bytes,
    ring_allreduce_trace,
    ring_reduce_scatter,
    ring_reduce_scatter_bytes,
    ring_reduce_scatter_trace,
)
from planc.sim.routing import (
    expected_blocks,
    reach_probability,
    round_robin_blocks,
    round_robin_reach,
)

__all__ = [
    "SUPPORTED_DTYPES",
    "RingTrace",
    "all_to_all",
    "all_to_all_bytes",
    "all_to_all_received_bytes",
    "chunk_sizes",
    "expected_blocks",
    "reach_probability",
    "ring_all_gather",
    "ring_all_gather_bytes",
    "ring_all_gather_trace",
    "ring_allreduce",
    "ring_allreduce_bytes",
    "ring_allreduce_trace",
    "ring_reduce_scatter",
    "ring_reduce_scatter_bytes",
    "ring_reduce_scatter_trace",
    "round_robin_blocks",
    "round_robin_reach",
]
