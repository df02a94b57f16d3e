"""The numpy all-to-all: every rank receives exactly what each peer addressed to it, and the
bytes are (n − 1)/n of the buffer on average, as NCCL's all-to-all bus factor says."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from planc.comm.cost import wire_bytes
from planc.sim import all_to_all, all_to_all_bytes, all_to_all_received_bytes


def test_four_ranks_by_hand() -> None:
    # Rank r's buffer [10r, 10r+1, ..., 10r+7]: two elements addressed to each rank.
    buffers = np.array([[10 * r + i for i in range(8)] for r in range(4)], dtype=np.int64)
    received, sent, got = all_to_all(buffers)
    assert received[0].tolist() == [0, 1, 10, 11, 20, 21, 30, 31]
    assert received[3].tolist() == [6, 7, 16, 17, 26, 27, 36, 37]
    # Each rank sends 3 chunks of 2 int64 and receives as many: 48 bytes.
    assert sent.tolist() == got.tolist() == [48] * 4


def test_uneven_chunks_follow_the_ring_boundaries() -> None:
    # 7 elements over 3 ranks: chunks of 3, 2, 2 (larger first).
    buffers = np.arange(21, dtype=np.int64).reshape(3, 7)
    received, sent, got = all_to_all(buffers)
    assert received[0].tolist() == [0, 1, 2, 7, 8, 9, 14, 15, 16]
    assert received[2].tolist() == [5, 6, 12, 13, 19, 20]
    assert sent.tolist() == [4 * 8, 5 * 8, 5 * 8]  # all but the own chunk
    assert got.tolist() == [2 * 3 * 8, 2 * 2 * 8, 2 * 2 * 8]  # own chunk from each peer


def test_one_rank_moves_nothing() -> None:
    received, sent, got = all_to_all(np.arange(5, dtype=np.int64)[None, :])
    assert received[0].tolist() == [0, 1, 2, 3, 4] and sent.tolist() == got.tolist() == [0]


def test_refuses_a_buffer_that_is_not_ranks_by_elements() -> None:
    with pytest.raises(ValueError, match="ranks, elements"):
        all_to_all(np.zeros(4, dtype=np.int64))


@given(n=st.integers(1, 12), m=st.integers(0, 60), seed=st.integers(0, 2**31))
def test_exchange_is_the_chunk_transpose_and_bytes_match(n: int, m: int, seed: int) -> None:
    buffers = np.random.default_rng(seed).integers(-99, 99, (n, m), dtype=np.int64)
    received, sent, got = all_to_all(buffers)
    pieces = [np.array_split(row, n) for row in buffers]  # numpy's own split, independently
    for j in range(n):
        assert np.array_equal(received[j], np.concatenate([pieces[i][j] for i in range(n)]))
    assert np.array_equal(sent, all_to_all_bytes(n, m, 8))
    assert np.array_equal(got, all_to_all_received_bytes(n, m, 8))
    assert int(sent.sum()) == int(got.sum()) == (n - 1) * m * 8
    # The mean per rank, rounded up, is the schedule's bus-factor bytes.
    assert -(-int(sent.sum()) // n) == wire_bytes("all_to_all", n, m * 8)
