"""Tests for the vectorised ring-collective simulator (planc.sim.ring).

Expected values come from hand derivations written out below, from a deliberately naive
reference ring (Python loops over ranks and chunks, np.array_split chunks) and from
exact summation (math.fsum), never from the simulator's own output.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planc.sim import (
    RingTrace,
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

Array = npt.NDArray[Any]


# --------------------------------------------------------------------------- reference


def reference_ring(
    x: Array, *, reduce_scatter: bool, all_gather: bool
) -> tuple[Array, list[list[int]]]:
    """Naive ring: explicit loops, messages collected before any is delivered.

    Schedule (the documented one): at reduce-scatter step k rank i sends chunk
    (i-k-1) mod n and the receiver adds; at all-gather step k rank i sends chunk
    (i-k) mod n and the receiver stores. Returns (buffers, sent elements [rank][step]).
    """
    n, m = x.shape
    chunks = np.array_split(np.arange(m), n)
    bufs = [x[r].copy() for r in range(n)]
    sent: list[list[int]] = [[] for _ in range(n)]
    phases = []
    if reduce_scatter:
        phases += [(k + 1, True) for k in range(n - 1)]
    if all_gather:
        phases += [(k, False) for k in range(n - 1)]
    for shift, add in phases:
        messages = []
        for i in range(n):
            idx = chunks[(i - shift) % n]
            messages.append(((i + 1) % n, idx, bufs[i][idx].copy()))
            sent[i].append(len(idx))
        for dst, idx, payload in messages:
            if add:
                bufs[dst][idx] = bufs[dst][idx] + payload
            else:
                bufs[dst][idx] = payload
    return np.stack(bufs), sent


def chunk_slices(n: int, m: int) -> list[slice]:
    bounds = np.cumsum([0, *(len(c) for c in np.array_split(np.arange(m), n))])
    return [slice(int(a), int(b)) for a, b in itertools.pairwise(bounds)]


@st.composite
def int_buffers(draw: st.DrawFn, max_n: int = 17, max_m: int = 200) -> Array:
    n = draw(st.integers(1, max_n))
    m = draw(st.integers(0, max_m))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    return rng.integers(-(10**6), 10**6, size=(n, m), dtype=np.int64)


# --------------------------------------------------------------------------- worked by hand


def test_four_workers_one_to_four() -> None:
    # Worker w holds w+1 in all 8 elements; the sum is 1+2+3+4 = 10 everywhere. Each
    # worker sends 2 phases x (4-1) steps x (8/4 elements) x 8 bytes = 96 bytes.
    x = np.repeat(np.array([[1.0], [2.0], [3.0], [4.0]]), 8, axis=1)
    reduced, sent = ring_allreduce(x)
    assert reduced.shape == (4, 8)
    assert reduced.dtype == np.float64
    assert np.max(np.abs(reduced - 10.0)) == 0.0
    assert sent.dtype == np.int64
    assert sent.tolist() == [2 * 3 * (8 // 4) * 8] * 4 == [96] * 4


# --------------------------------------------------------------------------- hand derivations


def test_uneven_chunks_n3_m10_by_hand() -> None:
    # M=10 over N=3: chunks 0,1,2 have 4,3,3 elements (np.array_split).
    # Reduce-scatter, step k: rank i sends chunk (i-k-1) mod 3.
    #   step 0: rank0->chunk2 (3), rank1->chunk0 (4), rank2->chunk1 (3)
    #   step 1: rank0->chunk1 (3), rank1->chunk2 (3), rank2->chunk0 (4)
    #   totals: rank0 6, rank1 7, rank2 7 elements (each: all chunks but its own)
    # All-gather, step k: rank i sends chunk (i-k) mod 3.
    #   step 0: rank0->chunk0 (4), rank1->chunk1 (3), rank2->chunk2 (3)
    #   step 1: rank0->chunk2 (3), rank1->chunk0 (4), rank2->chunk1 (3)
    #   totals: rank0 7, rank1 7, rank2 6
    # All-reduce: 13, 14, 13 elements. int64 -> 8 bytes each.
    x = np.arange(30, dtype=np.int64).reshape(3, 10)
    rs_steps = [[3, 3], [4, 3], [3, 4]]
    ag_steps = [[4, 3], [3, 4], [3, 3]]

    _, rs = ring_reduce_scatter_trace(x)
    _, ag = ring_all_gather_trace(x)
    _, ar = ring_allreduce_trace(x)
    assert rs.sent.tolist() == [[8 * e for e in row] for row in rs_steps]
    assert ag.sent.tolist() == [[8 * e for e in row] for row in ag_steps]
    ar_steps = [a + b for a, b in zip(rs_steps, ag_steps, strict=True)]
    assert ar.sent.tolist() == [[8 * e for e in row] for row in ar_steps]
    # Rank r receives what rank r-1 sent: rank0 gets rank2's row, and so on.
    assert rs.received.tolist() == [[8 * e for e in row] for row in [[3, 4], [3, 3], [4, 3]]]

    assert ring_reduce_scatter(x)[1].tolist() == [48, 56, 56]
    assert ring_all_gather(x)[1].tolist() == [56, 56, 48]
    assert ring_allreduce(x)[1].tolist() == [104, 112, 104]
    assert ring_reduce_scatter_bytes(3, 10, 8).tolist() == [48, 56, 56]
    assert ring_all_gather_bytes(3, 10, 8).tolist() == [56, 56, 48]
    assert ring_allreduce_bytes(3, 10, 8).tolist() == [104, 112, 104]


def test_fewer_elements_than_ranks_sends_zero_bytes_for_empty_chunks() -> None:
    # N=5, M=3: chunks have 1,1,1,0,0 elements. In reduce-scatter rank i sends every
    # chunk but chunk i: ranks 0..2 send 2 elements, ranks 3 and 4 send 3.
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    reduced, sent = ring_allreduce(x)
    np.testing.assert_array_equal(reduced, np.tile([30.0, 35.0, 40.0], (5, 1)))
    assert ring_reduce_scatter(x)[1].tolist() == [8, 8, 8, 12, 12]
    # All-gather: rank i skips chunk i+1: ranks 0,1 skip a 1-element chunk (send 2),
    # ranks 2,3 skip an empty one (send 3), rank 4 skips chunk 0 (send 2).
    assert ring_all_gather(x)[1].tolist() == [8, 8, 12, 12, 8]
    assert sent.tolist() == [16, 16, 20, 24, 20]
    _, trace = ring_allreduce_trace(x)
    # At step 0 of reduce-scatter, rank 0 sends chunk 4 (empty) and rank 4 chunk 3 (empty).
    assert trace.sent[0, 0] == 0
    assert trace.sent[4, 0] == 0


def test_one_rank_is_a_no_op() -> None:
    x = np.array([[1.5, -2.0, 3.25]])
    for fn in (ring_allreduce, ring_reduce_scatter, ring_all_gather):
        out, sent = fn(x)
        np.testing.assert_array_equal(out, x)
        assert out is not x
        assert sent.tolist() == [0]
    _, trace = ring_allreduce_trace(x)
    assert trace.sent.shape == (1, 0)
    assert trace.received.shape == (1, 0)


@pytest.mark.parametrize("n", [1, 2, 7])
def test_zero_elements(n: int) -> None:
    x = np.zeros((n, 0), dtype=np.float64)
    for fn in (ring_allreduce, ring_reduce_scatter, ring_all_gather):
        out, sent = fn(x)
        assert out.shape == (n, 0)
        assert sent.tolist() == [0] * n
    _, trace = ring_allreduce_trace(x)
    assert trace.sent.shape == (n, 2 * (n - 1))
    assert not trace.sent.any()


@pytest.mark.parametrize(("n", "m"), [(2, 2), (4, 8), (8, 1024), (16, 4096), (5, 35)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_even_chunks_match_textbook_bandwidth_factors(n: int, m: int, dtype: Any) -> None:
    # Patarasuk & Yuan 2009 / NCCL PERFORMANCE.md: 2(n-1)/n for all-reduce, (n-1)/n for
    # each of reduce-scatter and all-gather, times the buffer size in bytes.
    itemsize = np.dtype(dtype).itemsize
    half = Fraction(n - 1, n) * m * itemsize
    assert half.denominator == 1
    x = np.ones((n, m), dtype=dtype)
    assert ring_allreduce(x)[1].tolist() == [int(2 * half)] * n
    assert ring_reduce_scatter(x)[1].tolist() == [int(half)] * n
    assert ring_all_gather(x)[1].tolist() == [int(half)] * n
    assert ring_allreduce_bytes(n, m, itemsize).tolist() == [int(2 * half)] * n
    assert ring_reduce_scatter_bytes(n, m, itemsize).tolist() == [int(half)] * n
    assert ring_all_gather_bytes(n, m, itemsize).tolist() == [int(half)] * n


# --------------------------------------------------------------------------- properties


@settings(max_examples=150, deadline=None)
@given(int_buffers())
def test_allreduce_properties(x: Array) -> None:
    n, m = x.shape
    before = x.copy()
    reduced, sent = ring_allreduce(x)
    np.testing.assert_array_equal(x, before)  # input untouched

    # Every rank ends with the column sums (int64: bit-exact).
    np.testing.assert_array_equal(reduced, np.broadcast_to(x.sum(axis=0), (n, m)))
    assert reduced.dtype == np.int64

    # Bytes: the naive reference's per-step schedule, the closed form, and a sanity sum.
    _, ref_sent = reference_ring(x, reduce_scatter=True, all_gather=True)
    _, trace = ring_allreduce_trace(x)
    assert trace.sent.tolist() == [[8 * e for e in row] for row in ref_sent]
    assert sent.tolist() == [8 * sum(row) for row in ref_sent]
    np.testing.assert_array_equal(sent, ring_allreduce_bytes(n, m, 8))
    # Each step moves n distinct chunks, one per rank, i.e. all M elements: (n-1)*M per
    # phase summed over ranks.
    assert int(sent.sum()) == 2 * (n - 1) * m * 8

    # Conservation: total sent == total received, per step and overall.
    np.testing.assert_array_equal(trace.sent.sum(axis=0), trace.received.sum(axis=0))
    assert int(trace.sent.sum()) == int(trace.received.sum())
    np.testing.assert_array_equal(trace.sent_total, sent)
    np.testing.assert_array_equal(trace.sent.sum(axis=1), trace.sent_total)
    np.testing.assert_array_equal(trace.received.sum(axis=1), trace.received_total)
    for i in range(n):
        np.testing.assert_array_equal(trace.received[(i + 1) % n], trace.sent[i])
    assert trace.steps == 2 * (n - 1)


@settings(max_examples=150, deadline=None)
@given(int_buffers())
def test_reduce_scatter_properties(x: Array) -> None:
    n, m = x.shape
    before = x.copy()
    work, sent = ring_reduce_scatter(x)
    np.testing.assert_array_equal(x, before)
    assert work.shape == (n, m)

    slices = chunk_slices(n, m)
    for r, sl in enumerate(slices):
        # Rank r owns chunk r, fully reduced.
        np.testing.assert_array_equal(work[r, sl], x[:, sl].sum(axis=0))
    for r in range(n):
        for c, sl in enumerate(slices):
            if c == r:
                continue
            # Documented partial sums: chunk c of rank r = sum over ranks c+1, ..., r.
            ranks = [(c + 1 + t) % n for t in range((r - c) % n)]
            np.testing.assert_array_equal(work[r, sl], x[ranks, sl].sum(axis=0))

    ref, ref_sent = reference_ring(x, reduce_scatter=True, all_gather=False)
    np.testing.assert_array_equal(work, ref)
    assert sent.tolist() == [8 * sum(row) for row in ref_sent]
    np.testing.assert_array_equal(sent, ring_reduce_scatter_bytes(n, m, 8))
    # Rank i sends every chunk except its own: M minus the size of chunk i.
    assert sent.tolist() == [8 * (m - (sl.stop - sl.start)) for sl in slices]


@settings(max_examples=150, deadline=None)
@given(int_buffers(), st.integers(0, 2**32 - 1))
def test_all_gather_properties(x: Array, seed: int) -> None:
    n, m = x.shape
    slices = chunk_slices(n, m)
    # Only row r's chunk r is rank r's contribution; fill everything else with noise
    # that must not leak into the result.
    noisy = np.random.default_rng(seed).integers(-99, 99, size=(n, m), dtype=np.int64)
    for r, sl in enumerate(slices):
        noisy[r, sl] = x[r, sl]
    before = noisy.copy()
    gathered, sent = ring_all_gather(noisy)
    np.testing.assert_array_equal(noisy, before)

    expected = np.concatenate([x[r, sl] for r, sl in enumerate(slices)])
    np.testing.assert_array_equal(gathered, np.broadcast_to(expected, (n, m)))

    _, ref_sent = reference_ring(noisy, reduce_scatter=False, all_gather=True)
    assert sent.tolist() == [8 * sum(row) for row in ref_sent]
    np.testing.assert_array_equal(sent, ring_all_gather_bytes(n, m, 8))
    _, trace = ring_all_gather_trace(noisy)
    np.testing.assert_array_equal(trace.sent.sum(axis=1), sent)
    assert int(trace.sent.sum()) == int(trace.received.sum()) == (n - 1) * m * 8


@settings(max_examples=50, deadline=None)
@given(int_buffers(max_n=9, max_m=60))
def test_reduce_scatter_then_all_gather_is_allreduce(x: Array) -> None:
    shards, rs_sent = ring_reduce_scatter(x)
    gathered, ag_sent = ring_all_gather(shards)
    reduced, ar_sent = ring_allreduce(x)
    np.testing.assert_array_equal(gathered, reduced)
    np.testing.assert_array_equal(rs_sent + ag_sent, ar_sent)


def test_int64_overflow_wraps_like_numpy_sum() -> None:
    big = np.iinfo(np.int64).max
    x = np.array([[big, 1, -5], [big, big, 7], [3, big, big]], dtype=np.int64)
    with np.errstate(over="ignore"):
        expected = x.sum(axis=0)
    np.testing.assert_array_equal(ring_allreduce(x)[0], np.broadcast_to(expected, x.shape))


# --------------------------------------------------------------------------- floats


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("n", "m"), [(2, 17), (5, 123), (13, 1000), (17, 64)])
def test_float_random_data_within_documented_bound(dtype: Any, n: int, m: int) -> None:
    rng = np.random.default_rng(n * 1000 + m)
    x = rng.standard_normal((n, m)).astype(dtype)
    reduced, _ = ring_allreduce(x)
    assert reduced.dtype == dtype
    # Exact column sums of the stored values (correctly rounded to float64).
    exact = np.array([math.fsum(float(v) for v in x[:, j]) for j in range(m)])
    bound = (n - 1) * np.finfo(dtype).eps * np.abs(x.astype(np.float64)).sum(axis=0)
    err = np.abs(reduced.astype(np.float64) - exact)
    assert np.all(err <= bound)
    # The looser rule of thumb quoted in the module docstring, against np.sum.
    np.testing.assert_allclose(
        reduced, np.broadcast_to(x.sum(axis=0), x.shape), rtol=1e-5 * n, atol=1e-5 * n
    )
    # All ranks end bit-identical: the all-gather copies, it does not recompute.
    assert all(np.array_equal(reduced[0], row) for row in reduced)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_summation_order_is_the_documented_ring_order(dtype: Any) -> None:
    # Bit-exact against the naive reference, which adds chunk c in ring order starting
    # from rank c+1: this pins the documented order, not just the tolerance.
    x = np.random.default_rng(7).standard_normal((6, 50)).astype(dtype)
    ref, _ = reference_ring(x, reduce_scatter=True, all_gather=True)
    np.testing.assert_array_equal(ring_allreduce(x)[0], ref)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_integer_valued_floats_are_exact(dtype: Any) -> None:
    x = np.random.default_rng(3).integers(-1000, 1000, size=(11, 77)).astype(dtype)
    np.testing.assert_array_equal(ring_allreduce(x)[0], np.broadcast_to(x.sum(axis=0), x.shape))


# --------------------------------------------------------------------------- inputs


def test_non_contiguous_and_read_only_inputs() -> None:
    base = np.arange(4 * 30, dtype=np.float64).reshape(4, 30)
    fortran = np.asfortranarray(base)
    strided = np.arange(4 * 60, dtype=np.float64).reshape(4, 60)[:, ::2]
    read_only = base.copy()
    read_only.setflags(write=False)
    for x in (fortran, strided, read_only):
        reduced, _ = ring_allreduce(x)
        np.testing.assert_array_equal(reduced, np.broadcast_to(x.sum(axis=0), x.shape))
        assert reduced.flags.writeable


@pytest.mark.parametrize("dtype", [np.float16, object, np.int32, np.complex128])
def test_unsupported_dtype_is_rejected(dtype: Any) -> None:
    x = np.ones((3, 4), dtype=dtype)
    for fn in (ring_allreduce, ring_reduce_scatter, ring_all_gather, ring_allreduce_trace):
        with pytest.raises(ValueError, match=f"unsupported dtype {np.dtype(dtype)}"):
            fn(x)


@pytest.mark.parametrize(
    "x", [np.ones(8), np.ones((2, 3, 4)), np.array(1.0), np.ones((0, 5))], ids=str
)
def test_bad_shape_is_rejected(x: Array) -> None:
    for fn in (ring_allreduce, ring_reduce_scatter, ring_all_gather):
        with pytest.raises(ValueError, match=r"\(N, M\)|N >= 1"):
            fn(x)


def test_non_array_is_rejected() -> None:
    with pytest.raises(ValueError, match="numpy array"):
        ring_allreduce([[1.0, 2.0], [3.0, 4.0]])  # type: ignore[arg-type]


def test_formula_arguments_are_validated() -> None:
    with pytest.raises(ValueError, match="ranks"):
        ring_allreduce_bytes(0, 10, 4)
    with pytest.raises(ValueError, match="elements"):
        ring_reduce_scatter_bytes(2, -1, 4)
    with pytest.raises(ValueError, match="itemsize"):
        ring_all_gather_bytes(2, 10, 0)


def test_trace_is_frozen_and_read_only() -> None:
    _, trace = ring_allreduce_trace(np.ones((3, 9)))
    assert isinstance(trace, RingTrace)
    with pytest.raises(dataclasses.FrozenInstanceError):
        trace.sent = np.zeros((3, 4), dtype=np.int64)  # type: ignore[misc]
    with pytest.raises(ValueError, match="read-only"):
        trace.sent[0, 0] = 1
    with pytest.raises(ValueError, match="read-only"):
        trace.received[0, 0] = 1
