"""Vectorised numpy simulation of an all-to-all exchange (the expert-parallel token dispatch).

All N simulated ranks live in one array: row ``r`` of an ``(N, M)`` array is rank ``r``'s send
buffer, cut into N contiguous chunks with the ring simulator's boundaries (``chunk_sizes``: sizes
differ by at most one, larger first); chunk ``j`` is addressed to rank ``j``.

Schedule (pairwise exchange; Thakur, Rabenseifner & Gropp 2005, §3): at step ``k`` (1 ≤ k < N)
rank ``i`` sends its chunk for rank ``(i + k) mod N`` and receives from rank ``(i − k) mod N``
the chunk that rank addressed to it. A rank's own chunk never leaves it. After N − 1 steps
**rank j holds, at source position i, the chunk rank i addressed to j**: the exchange is the
permutation (i, j) → (j, i) of the chunk grid. The result row of rank ``j`` is the
concatenation over sources i of their chunk j (N·|chunk j| elements).

Bytes: rank ``i`` sends every chunk but its own, M − |chunk i| elements, and receives
(N − 1)·|chunk i| elements: summed over the ranks both are (N − 1)·M, so the mean per rank is
(N − 1)/N of the buffer, NCCL's all-to-all bus factor (nccl-tests ``doc/PERFORMANCE.md``).
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import numpy.typing as npt

from planc.sim.ring import chunk_sizes

__all__ = ["all_to_all", "all_to_all_bytes", "all_to_all_received_bytes"]

_S = TypeVar("_S", bound=np.generic)
_Int64Array = npt.NDArray[np.int64]


def all_to_all_bytes(n: int, m: int, itemsize: int) -> _Int64Array:
    """Bytes each of `n` ranks sends in an all-to-all of `m`-element buffers: (m − |chunk i|)·itemsize."""
    _check(n, m, itemsize)
    return ((m - chunk_sizes(n, m)) * itemsize).astype(np.int64)


def all_to_all_received_bytes(n: int, m: int, itemsize: int) -> _Int64Array:
    """Bytes each of `n` ranks receives: (n − 1)·|chunk i|·itemsize (its chunk from every peer)."""
    _check(n, m, itemsize)
    return ((n - 1) * chunk_sizes(n, m) * itemsize).astype(np.int64)


def all_to_all(
    buffers: npt.NDArray[_S],
) -> tuple[list[npt.NDArray[_S]], _Int64Array, _Int64Array]:
    """Exchange the chunks of `buffers` (N ranks × M elements) by pairwise steps.

    Returns (received, sent bytes per rank, received bytes per rank): `received[j]` is the
    concatenation of chunk j of every rank's buffer, in source order.
    """
    work = np.ascontiguousarray(buffers)
    if work.ndim != 2:
        raise ValueError(f"buffers must be (ranks, elements), got shape {work.shape}")
    n, m = work.shape
    sizes = chunk_sizes(n, m)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    widest = int(sizes.max()) if n else 0
    # inbox[j, i, :|chunk j|] is what rank i sent rank j; one strided gather per step.
    inbox = np.zeros((n, n, widest), dtype=work.dtype)
    offsets = np.arange(widest)
    ranks = np.arange(n)
    sent = np.zeros(n, dtype=np.int64)
    received = np.zeros(n, dtype=np.int64)
    for k in range(n):  # step 0 is the chunk each rank keeps: it moves no bytes
        to = (ranks + k) % n
        columns = np.minimum(starts[to][:, None] + offsets, max(m - 1, 0))
        inbox[to, ranks] = work[ranks[:, None], columns] if m else inbox[to, ranks]
        if k:
            moved = sizes[to] * work.itemsize
            sent += moved
            received[to] += moved
    out = [inbox[j, :, : sizes[j]].reshape(-1) for j in range(n)]
    return out, sent, received


def _check(n: int, m: int, itemsize: int) -> None:
    if n < 1 or m < 0:
        raise ValueError(f"need n ≥ 1 ranks and m ≥ 0 elements, got n={n}, m={m}")
    if itemsize < 1:
        raise ValueError(f"itemsize must be at least 1 byte, got {itemsize}")
