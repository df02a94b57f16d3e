"""Vectorised numpy simulation of ring reduce-scatter, all-gather and all-reduce.

All N simulated ranks live in one array: row ``r`` of an ``(N, M)`` array is rank ``r``'s
buffer. Each ring step is a constant number of numpy operations over every rank at
once; the only Python loop is over the N−1 steps of each phase.

Chunking
    ``M`` elements are split into ``N`` contiguous chunks whose sizes differ by at most
    one, with the larger chunks first (the ``np.array_split`` boundaries): chunk ``c``
    has ``M // N + (1 if c < M % N else 0)`` elements. When ``M < N`` the trailing
    chunks are empty and the steps that carry them send zero bytes.

Ring direction and chunk schedule
    Rank ``i`` always sends to rank ``(i + 1) % N``.

    * Reduce-scatter step ``k`` (0-based, ``k < N−1``): rank ``i`` sends chunk
      ``(i − k − 1) mod N``; rank ``i + 1`` adds it into its own copy of that chunk.
      Chunk ``c`` starts at rank ``c + 1`` and travels the ring, so after N−1 steps
      **rank r holds the fully reduced chunk r**. Over the phase rank ``i`` sends every
      chunk except chunk ``i``.
    * All-gather step ``k``: rank ``i`` sends chunk ``(i − k) mod N`` (its own chunk at
      step 0, then what it received at the previous step); rank ``i + 1`` stores it.
      Over the phase rank ``i`` sends every chunk except chunk ``(i + 1) mod N``.
    * All-reduce is reduce-scatter followed by all-gather: 2(N−1) steps.

Numerical accuracy
    Chunk ``c`` is summed sequentially in ring order, starting at rank ``c + 1``,
    which is a different order from ``np.sum(axis=0)``. For int64 the result is
    bit-exact (two's-complement wrap-around is associative, so even overflow agrees
    with ``np.sum``); so is any float input whose partial sums are all integers
    representable exactly (|value| ≤ 2**24 for float32, 2**53 for float64).
    For arbitrary floats the standard bound for recursive summation applies
    (Higham, *Accuracy and Stability of Numerical Algorithms*, §4.2): elementwise
    ``|ring − exact| ≤ (N − 1) · eps(dtype) · Σ_r |x_r|``. A looser rule of thumb for
    comparing with ``np.sum``: ``np.allclose(ring, ref, rtol=1e-5 * N)`` for float32
    data that does not cancel heavily.

Implementation
    The input is copied once into a C-contiguous ``(N, M)`` working array and every step
    works in place on it, so no ``(N, M)`` temporary is allocated per step and the result
    needs no final copy. Within a step, ranks whose chunk index does not wrap around
    form runs in which rank and chunk both advance by one, so their chunks sit at a
    constant stride (one row plus one chunk): each run of equal-sized chunks is a single
    strided view, and a step is at most five numpy operations however large N is.
    Nothing is padded; byte counts come from the true chunk sizes.
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from planc.record import record

__all__ = [
    "SUPPORTED_DTYPES",
    "RingTrace",
    "chunk_sizes",
    "ring_all_gather",
    "ring_all_gather_bytes",
    "ring_all_gather_trace",
    "ring_allreduce",
    "ring_allreduce_bytes",
    "ring_allreduce_trace",
    "ring_reduce_scatter",
    "ring_reduce_scatter_bytes",
    "ring_reduce_scatter_trace",
]

SUPPORTED_DTYPES: tuple[np.dtype[Any], ...] = (
    np.dtype(np.float32),
    np.dtype(np.float64),
    np.dtype(np.int64),
)

_S = TypeVar("_S", bound=np.generic)
_Int64Array = npt.NDArray[np.int64]


@record(eq=False)
class RingTrace:
    """Per-rank, per-step traffic of one simulated collective, in bytes.

    ``sent[i, k]`` is what rank ``i`` sent at step ``k``; ``received[i, k]`` what it
    received. Both have shape ``(N, steps)`` and are read-only. Because rank ``i``
    sends to rank ``i + 1``, ``received[(i + 1) % N, k] == sent[i, k]``.
    """

    sent: _Int64Array
    received: _Int64Array

    @property
    def steps(self) -> int:
        return int(self.sent.shape[1])

    @property
    def sent_total(self) -> _Int64Array:
        """Bytes each rank sent over the whole collective (length N)."""
        return np.asarray(self.sent.sum(axis=1), dtype=np.int64)

    @property
    def received_total(self) -> _Int64Array:
        """Bytes each rank received over the whole collective (length N)."""
        return np.asarray(self.received.sum(axis=1), dtype=np.int64)


# --------------------------------------------------------------------------- formulas


def chunk_sizes(n: int, m: int) -> _Int64Array:
    """Element count of each of the ``n`` chunks of ``m`` elements (larger chunks first).

    Chunk ``c`` has ``m // n + (1 if c < m % n else 0)`` elements, the same boundaries as
    ``np.array_split(range(m), n)``.
    """
    _check_counts(n, m)
    base, extra = divmod(m, n)
    return base + (np.arange(n, dtype=np.int64) < extra).astype(np.int64)


def ring_reduce_scatter_bytes(n: int, m: int, itemsize: int) -> _Int64Array:
    """Bytes each rank sends in a ring reduce-scatter of ``m`` elements over ``n`` ranks.

    Rank ``i`` sends every chunk except the one it ends up owning (chunk ``i``), so
    ``sent_i = (m − s_i) · itemsize`` with ``s_i`` the size of chunk ``i``
    (see :func:`chunk_sizes`). For ``n | m`` this is the textbook
    ``(n − 1)/n · m · itemsize`` (Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce
    algorithms for clusters of workstations"; the ``(n−1)/n`` bus-bandwidth factor of
    NCCL's tests/doc/PERFORMANCE.md).
    """
    _check_itemsize(itemsize)
    sizes = chunk_sizes(n, m)
    return (m - sizes) * itemsize


def ring_all_gather_bytes(n: int, m: int, itemsize: int) -> _Int64Array:
    """Bytes each rank sends in a ring all-gather of ``m`` elements over ``n`` ranks.

    Rank ``i`` forwards every chunk except chunk ``(i + 1) mod n`` (its successor's own
    chunk, which would only return home), so ``sent_i = (m − s_{(i+1) mod n}) ·
    itemsize``. For ``n | m`` this is ``(n − 1)/n · m · itemsize`` (Patarasuk & Yuan
    2009; NCCL tests/doc/PERFORMANCE.md, factor ``(n−1)/n``).
    """
    _check_itemsize(itemsize)
    sizes = chunk_sizes(n, m)
    return (m - np.roll(sizes, -1)) * itemsize


def ring_allreduce_bytes(n: int, m: int, itemsize: int) -> _Int64Array:
    """Bytes each rank sends in a ring all-reduce (reduce-scatter then all-gather).

    ``sent_i = (2m − s_i − s_{(i+1) mod n}) · itemsize``; for ``n | m`` this is the
    bandwidth-optimal ``2(n − 1)/n · m · itemsize`` of Patarasuk & Yuan 2009,
    "Bandwidth optimal all-reduce algorithms for clusters of workstations", and the
    ``2(n−1)/n`` bus-bandwidth factor of NCCL's tests/doc/PERFORMANCE.md.
    """
    return ring_reduce_scatter_bytes(n, m, itemsize) + ring_all_gather_bytes(n, m, itemsize)


# --------------------------------------------------------------------------- public API


def ring_reduce_scatter(buffers: npt.NDArray[_S]) -> tuple[npt.NDArray[_S], _Int64Array]:
    """Ring reduce-scatter of ``buffers`` (shape ``(N, M)``, row ``r`` = rank ``r``).

    Returns ``(work, sent)``: ``work`` is every rank's full working buffer after N−1
    steps, with **chunk r of row r equal to the sum of chunk r over all ranks**. Any
    other chunk ``c`` of row ``r`` holds the partial sum rank ``r`` had accumulated,
    i.e. the sum of chunk ``c`` over ranks ``c+1, c+2, …, r`` (cyclically,
    ``(r − c) mod N`` ranks). ``sent`` is the int64 bytes each rank sent (length N).
    The input is never modified.
    """
    out, trace = ring_reduce_scatter_trace(buffers)
    return out, trace.sent_total


def ring_all_gather(buffers: npt.NDArray[_S]) -> tuple[npt.NDArray[_S], _Int64Array]:
    """Ring all-gather: row ``r``'s chunk ``r`` is rank ``r``'s contribution.

    Other positions of the input are ignored. Returns ``(gathered, sent)`` where every
    row of ``gathered`` is the concatenation of all ranks' own chunks and ``sent`` is
    the int64 bytes each rank sent (length N). The input is never modified.
    """
    out, trace = ring_all_gather_trace(buffers)
    return out, trace.sent_total


def ring_allreduce(buffers: npt.NDArray[_S]) -> tuple[npt.NDArray[_S], _Int64Array]:
    """Ring all-reduce: every row of the result is ``buffers.sum(axis=0)``.

    See the module docstring for the summation order and float tolerance. Returns
    ``(reduced, sent)`` with ``sent`` the int64 bytes each rank sent (length N). The
    input is never modified.
    """
    out, trace = ring_allreduce_trace(buffers)
    return out, trace.sent_total


def ring_reduce_scatter_trace(buffers: npt.NDArray[_S]) -> tuple[npt.NDArray[_S], RingTrace]:
    """Like :func:`ring_reduce_scatter`, returning the per-step :class:`RingTrace`."""
    return _run(buffers, reduce_scatter=True, all_gather=False)


def ring_all_gather_trace(buffers: npt.NDArray[_S]) -> tuple[npt.NDArray[_S], RingTrace]:
    """Like :func:`ring_all_gather`, returning the per-step :class:`RingTrace`."""
    return _run(buffers, reduce_scatter=False, all_gather=True)


def ring_allreduce_trace(buffers: npt.NDArray[_S]) -> tuple[npt.NDArray[_S], RingTrace]:
    """Like :func:`ring_allreduce`, returning the per-step :class:`RingTrace`."""
    return _run(buffers, reduce_scatter=True, all_gather=True)


# --------------------------------------------------------------------------- internals


def _run(
    buffers: npt.NDArray[_S], *, reduce_scatter: bool, all_gather: bool
) -> tuple[npt.NDArray[_S], RingTrace]:
    x = _validated(buffers)
    n, m = x.shape
    # A step is (shift, add): rank i sends chunk (i − shift) mod N; the receiver adds it
    # in (reduce-scatter) or stores it (all-gather). See the module docstring.
    steps: list[tuple[int, bool]] = []
    if reduce_scatter:
        steps += [(shift, True) for shift in range(1, n)]
    if all_gather:
        steps += [(shift, False) for shift in range(n - 1)]
    sizes = chunk_sizes(n, m)
    trace = _frozen_trace(_traffic(sizes, x.itemsize, [shift for shift, _ in steps]))

    # The one copy of the input (C order: _chunk_diagonal relies on the row layout); every
    # step then works in place in the (N, M) layout, so the result needs no further copy.
    work = x.copy(order="C")
    if m > 0:
        for shift, add in steps:
            _ring_step(work, shift, add=add)
    return work, trace


def _validated(buffers: npt.NDArray[_S]) -> npt.NDArray[_S]:
    if not isinstance(buffers, np.ndarray):
        raise ValueError(
            f"buffers must be a numpy array of shape (N, M), got {type(buffers).__name__}"
        )
    if buffers.ndim != 2:
        raise ValueError(
            f"buffers must have shape (N, M) with one row per rank, got shape {buffers.shape}"
        )
    if buffers.shape[0] < 1:
        raise ValueError("buffers must have at least one rank (N >= 1), got N = 0")
    if buffers.dtype not in SUPPORTED_DTYPES:
        names = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise ValueError(f"unsupported dtype {buffers.dtype}; supported dtypes: {names}")
    return buffers


def _traffic(sizes: _Int64Array, itemsize: int, shifts: list[int]) -> _Int64Array:
    """Bytes sent, shape (N, steps): at the step with shift s rank i sends chunk
    (i − s) mod N, counted at its true (unpadded) size."""
    n = sizes.shape[0]
    ranks = np.arange(n)[:, None]
    chunk = (ranks - np.asarray(shifts, dtype=np.int64)[None, :]) % n
    return np.asarray(sizes[chunk] * itemsize, dtype=np.int64).reshape(n, len(shifts))


def _frozen_trace(sent: _Int64Array) -> RingTrace:
    # Rank i sends to rank i+1, so what rank r received is what rank r−1 sent.
    received = np.roll(sent, 1, axis=0)
    sent.setflags(write=False)
    received.setflags(write=False)
    return RingTrace(sent=sent, received=received)


def _ring_step(work: npt.NDArray[Any], shift: int, *, add: bool) -> None:
    """One ring step over all ranks: rank i sends chunk c = (i − shift) mod N to rank i+1,
    which adds it into (``add``) or overwrites its own chunk c.

    Ranks whose chunk index does not wrap around form runs in which both the rank and the
    chunk advance by one, so sender chunks sit at a constant stride in memory (one row
    plus one chunk) and so do receiver chunks (the same, one row further on). Each run of
    equal-sized chunks is therefore a single strided view, and a step is at most five
    numpy operations whatever N is: two runs (ranks ≥ shift and ranks < shift), each
    possibly split where chunks change size, plus rank N−1, whose receiver is rank 0.
    """
    n, m = work.shape
    last_chunk = (n - 1 - shift) % n
    runs = [
        *_equal_size_runs(shift, n - 1, -shift, n, m),
        *_equal_size_runs(0, min(shift, n - 1), n - shift, n, m),
    ]
    for first_rank, count, first_chunk, size in runs:
        src = _chunk_diagonal(work, first_rank, count, first_chunk, size)
        dst = _chunk_diagonal(work, first_rank + 1, count, first_chunk, size)
        _deliver(dst, src, add=add)
    lo, hi = _chunk_bounds(n, m, last_chunk)
    _deliver(work[0, lo:hi], work[n - 1, lo:hi], add=add)


def _deliver(dst: npt.NDArray[Any], src: npt.NDArray[Any], *, add: bool) -> None:
    if add:
        np.add(dst, src, out=dst)
    else:
        # Not np.copyto: its bounds-only overlap check takes the interleaved diagonal views
        # for overlapping and stages src through a temporary (measured ~1.7x slower). The
        # identity ufunc copies bits unchanged, -0.0 included.
        np.positive(src, out=dst)


def _equal_size_runs(
    first_rank: int, stop_rank: int, chunk_offset: int, n: int, m: int
) -> list[tuple[int, int, int, int]]:
    """Split ranks [first_rank, stop_rank), each with chunk rank + chunk_offset, into
    (first_rank, count, first_chunk, chunk_size) runs of equal, non-zero chunk size."""
    base, n_long = divmod(m, n)
    # Chunks below n_long have base + 1 elements, the rest base.
    split = min(max(n_long - chunk_offset, first_rank), stop_rank)
    runs = []
    for lo, hi, size in ((first_rank, split, base + 1), (split, stop_rank, base)):
        if hi > lo and size > 0:
            runs.append((lo, hi - lo, lo + chunk_offset, size))
    return runs


def _chunk_bounds(n: int, m: int, chunk: int) -> tuple[int, int]:
    base, n_long = divmod(m, n)
    lo = chunk * base + min(chunk, n_long)
    return lo, lo + base + (1 if chunk < n_long else 0)


def _chunk_diagonal(
    work: npt.NDArray[Any], first_rank: int, count: int, first_chunk: int, size: int
) -> npt.NDArray[Any]:
    """Writable (count, size) view of chunk first_chunk + t of rank first_rank + t.

    as_strided is needed because the rows step by one rank *and* one chunk; the caller
    guarantees every addressed chunk exists and has ``size`` elements, so the view stays
    inside ``work``.
    """
    m = work.shape[1]
    lo, _ = _chunk_bounds(work.shape[0], m, first_chunk)
    start = work[first_rank, lo:]
    row_step = (m + size) * work.itemsize
    view: npt.NDArray[Any] = np.lib.stride_tricks.as_strided(
        start, shape=(count, size), strides=(row_step, work.itemsize)
    )
    return view


def _check_counts(n: int, m: int) -> None:
    if n < 1:
        raise ValueError(f"number of ranks must be >= 1, got {n}")
    if m < 0:
        raise ValueError(f"number of elements must be >= 0, got {m}")


def _check_itemsize(itemsize: int) -> None:
    if itemsize < 1:
        raise ValueError(f"itemsize must be >= 1 byte, got {itemsize}")
