"""Collective sizes: NCCL bus-bandwidth factors and ring steps.

NCCL's performance notes (nccl-tests `doc/PERFORMANCE.md`) define the bus bandwidth of a ring
collective over n ranks: all-reduce moves 2(n−1)/n of the buffer over each rank's link,
reduce-scatter and all-gather (n−1)/n (Patarasuk & Yuan 2009), all-to-all (n−1)/n: each rank
keeps its own 1/n of the buffer and sends the rest, one chunk to each peer ("alltoall: busBw =
algBw · (n−1)/n"). A ring takes 2(n−1) steps for an all-reduce and n−1 for the others, each
paying the link latency once. An all-to-all as MPICH's pairwise exchange would take n−1 steps,
one per peer (Thakur, Rabenseifner & Gropp 2005, "Optimization of collective communication
operations in MPICH", §3: α·(n−1) + (n−1)/n·M/β); NCCL runs eight peers at a time per channel,
⌈(n−1)/8⌉ latencies (`all_to_all_rounds`). The time of a call,
steps·α + wire_bytes/(β·e) with the link's efficiency and latency, is priced by the step model
(`planc.perf.inputs.comm_time_s`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fractions import Fraction

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "send_recv", "all_to_all")


def _bus_ratio(op: str, n: int) -> tuple[int, int]:
    """The bus factor as (numerator, denominator)."""
    if op == "send_recv":
        return 1, 1
    if n <= 1:
        return 0, 1
    if op == "all_reduce":
        return 2 * (n - 1), n
    if op in ("reduce_scatter", "all_gather", "all_to_all"):
        return n - 1, n
    raise ValueError(f"unknown collective {op!r}")


def bus_factor(op: str, n: int) -> Fraction:
    """Bytes on each rank's link per byte of buffer: 2(n−1)/n (all-reduce), (n−1)/n
    (reduce-scatter, all-gather, all-to-all), or 1 for a p2p send."""
    from fractions import Fraction

    return Fraction(*_bus_ratio(op, n))


# Peer operations one NCCL channel runs together in one work batch (NCCL
# src/include/device.h NCCL_MAX_DEV_WORK_P2P_PER_BATCH, 8 since v2.22.3-1; v2.26.2-1 as the
# corpus's NeMo 25.04 containers run it).
NCCL_P2P_PER_BATCH = 8


def all_to_all_rounds(n: int) -> int:
    """Latency-bound rounds of an NCCL all-to-all over n ranks: ⌈(n−1)/8⌉.

    NCCL runs an all-to-all as one group of n−1 sends and receives (nccl-tests
    src/alltoall.cu), and its planner does not send them one peer after another: it places
    the peers' operations in work batches of up to NCCL_P2P_PER_BATCH = 8 per channel, which
    the kernel runs at the same time (src/enqueue.cc addP2pToPlan, maxConcurrent =
    p2pnChannels/nChannelsPerOp · NCCL_MAX_DEV_WORK_P2P_PER_BATCH, v2.26.2-1). With at least
    one channel, 8 peers progress together, so the call pays at most ⌈(n−1)/8⌉ latencies,
    not MPICH's pairwise n−1 (Thakur et al. 2005 §3): an upper bound, as more channels run
    more peers at once. Unitless; 0 for n ≤ 1."""
    if n <= 1:
        return 0
    return -(-(n - 1) // NCCL_P2P_PER_BATCH)


def ring_steps(op: str, n: int) -> int:
    """Latency-bound steps: 2(n−1) for a ring all-reduce, n−1 for the other rings, NCCL's
    ⌈(n−1)/8⌉ rounds for an all-to-all (`all_to_all_rounds`), 1 for p2p."""
    if op == "send_recv":
        return 1
    if n <= 1:
        return 0
    if op == "all_to_all":
        return all_to_all_rounds(n)
    return 2 * (n - 1) if op == "all_reduce" else n - 1


def wire_bytes(op: str, n: int, buffer_bytes: int) -> int:
    """Bytes one rank sends per call: ⌈bus_factor · buffer⌉ (whole bytes; uneven chunks round up)."""
    numerator, denominator = _bus_ratio(op, n)
    return -(-numerator * buffer_bytes // denominator)
