"""Collective sizes: NCCL bus-bandwidth factors and ring steps.

NCCL's performance notes (nccl-tests `doc/PERFORMANCE.md`) define the bus bandwidth of a ring
collective over n ranks: all-reduce moves 2(n−1)/n of the buffer over each rank's link,
reduce-scatter and all-gather (n−1)/n (Patarasuk & Yuan 2009). A ring takes 2(n−1) steps for an
all-reduce and n−1 for the others, each paying the link latency once. The time of a call,
steps·α + wire_bytes/(β·e) with the link's efficiency and latency, is priced by the step model
(`planc.perf.validate.comm_time_s`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fractions import Fraction

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "send_recv")


def _bus_ratio(op: str, n: int) -> tuple[int, int]:
    """The bus factor as (numerator, denominator)."""
    if op == "send_recv":
        return 1, 1
    if n <= 1:
        return 0, 1
    if op == "all_reduce":
        return 2 * (n - 1), n
    if op in ("reduce_scatter", "all_gather"):
        return n - 1, n
    raise ValueError(f"unknown collective {op!r}")


def bus_factor(op: str, n: int) -> Fraction:
    """Bytes on each rank's link per byte of buffer: 2(n−1)/n, (n−1)/n, or 1 for a p2p send."""
    from fractions import Fraction

    return Fraction(*_bus_ratio(op, n))


def ring_steps(op: str, n: int) -> int:
    """Latency-bound steps of the ring algorithm: 2(n−1) for all-reduce, n−1 otherwise, 1 for p2p."""
    if op == "send_recv":
        return 1
    if n <= 1:
        return 0
    return 2 * (n - 1) if op == "all_reduce" else n - 1


def wire_bytes(op: str, n: int, buffer_bytes: int) -> int:
    """Bytes one rank sends per call: ⌈bus_factor · buffer⌉ (whole bytes; uneven chunks round up)."""
    numerator, denominator = _bus_ratio(op, n)
    return -(-numerator * buffer_bytes // denominator)
