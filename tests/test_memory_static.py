"""Static state: ZeRO's worked numbers (Rajbhandari et al. 2020), Megatron's 18 bytes, exact ZeRO
shards."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planc.dims import numerics_for
from planc.memory.static import (
    Group,
    gradient_bytes,
    optimizer_bytes,
    state_bytes,
    static_bytes,
    static_terms,
    weight_bytes,
)
from planc.memory.terms import shard
from planc.vocab import OptimizerName, Precision

MIXED_ADAM = state_bytes(numerics_for("bf16", False), "adam")


def gb(n: int, places: int = 2) -> Decimal:
    """Decimal GB (10^9 bytes) rounded half-up to `places` places."""
    step = Decimal(1).scaleb(-places)
    return (Decimal(n) / Decimal(10**9)).quantize(step, rounding=ROUND_HALF_UP)


PSI_70B = 70 * 10**9


@pytest.mark.parametrize(
    ("zero", "expected"),
    [(0, "1120.00"), (1, "293.13"), (2, "155.31"), (3, "17.50")],
)
def test_zero_table_for_70b_on_64(zero: int, expected: str) -> None:
    # ZeRO §5 at Ψ = 70B, N_d = 64: 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N in decimal GB, by hand:
    # 1,120; 280 + 13.125; 140 + 15.3125; 17.5.
    assert gb(static_bytes(PSI_70B, MIXED_ADAM, Group(zero, 64))) == Decimal(expected)


@pytest.mark.parametrize(
    ("zero", "published"), [(0, "120.0"), (1, "31.4"), (2, "16.6"), (3, "1.9")]
)
def test_zero_paper_figure_1(zero: int, published: str) -> None:
    # Rajbhandari et al. 2020, Fig. 1: Ψ = 7.5B, N_d = 64, K = 12: 120, 31.4, 16.6 and 1.9 GB.
    assert gb(static_bytes(7_500_000_000, MIXED_ADAM, Group(zero, 64)), 1) == Decimal(published)


def test_zero_exact_bytes() -> None:
    # 70e9/64 = 1,093,750,000 exactly, so the bytes are whole: 280e9 + 12·1.09375e9, ...
    assert static_bytes(PSI_70B, MIXED_ADAM, Group(1, 64)) == 293_125_000_000
    assert static_bytes(PSI_70B, MIXED_ADAM, Group(2, 64)) == 155_312_500_000
    assert static_bytes(PSI_70B, MIXED_ADAM, Group(3, 64)) == 17_500_000_000


def test_mixed_precision_adam_terms() -> None:
    # ZeRO §3.1: 2 + 2 + 4 + 4 + 4 bytes: 140, 140, 280, 280, 280 GB for 70B.
    group = Group(0, 1)
    assert weight_bytes(PSI_70B, MIXED_ADAM, group) == 140 * 10**9
    assert gradient_bytes(PSI_70B, MIXED_ADAM, group) == 140 * 10**9
    assert optimizer_bytes(PSI_70B, MIXED_ADAM, group) == 840 * 10**9
    terms = static_terms(PSI_70B, MIXED_ADAM, group)
    assert [t.bytes for t in terms] == [140 * 10**9, 140 * 10**9] + [280 * 10**9] * 3


def test_175b_needs_35_gpus_at_zero_3() -> None:
    # 16 × 175e9 = 2,800 GB; DDP cannot hold it on one 80 GB H100 (nor on a node's 640 GB).
    psi = 175 * 10**9
    assert static_bytes(psi, MIXED_ADAM, Group(0, 1)) == 2_800 * 10**9
    assert static_bytes(psi, MIXED_ADAM, Group(0, 8)) > 8 * 80 * 10**9
    # ZeRO-3: the fewest GPUs whose 16Ψ/N fits in 80 GB is ⌈2800/80⌉ = 35.
    fewest = next(n for n in range(1, 100) if static_bytes(psi, MIXED_ADAM, Group(3, n)) <= 80 * 10**9)
    assert fewest == 35


def test_megatron_18_bytes_and_distributed_optimizer() -> None:
    # Megatron dist_optimizer.md: bf16 params + fp32 grads: 18 bytes; 6 + 12/d with the
    # distributed optimizer (ZeRO-1).
    state = state_bytes(numerics_for("bf16", True), "adam")
    assert (state.weights, state.gradients, state.optimizer, state.total) == (2, 4, 12, 18)
    psi, d = 1_200_000, 8
    assert static_bytes(psi, state, Group(0, d)) == 18 * psi
    assert static_bytes(psi, state, Group(1, d)) == 6 * psi + 12 * psi // d


def test_fp32_training() -> None:
    # fp32/fp32 in Megatron's table: 16 bytes, 8 + 8/d distributed. No master copy.
    state = state_bytes(numerics_for("fp32", False), "adam")
    assert (state.weights, state.gradients, state.master, state.optimizer) == (4, 4, 0, 8)
    assert state_bytes(numerics_for("fp32", True), "adam") == state  # fp32 gradients already
    assert static_bytes(800, state, Group(1, 8)) == 8 * 800 + 8 * 100


def test_sgd() -> None:
    mixed = state_bytes(numerics_for("bf16", False), "sgd")
    assert (mixed.weights, mixed.gradients, mixed.optimizer) == (2, 2, 8)  # master + momentum
    full = state_bytes(numerics_for("fp32", False), "sgd")
    assert (full.weights, full.gradients, full.optimizer) == (4, 4, 4)  # momentum only
    names = [t.name for t in static_terms(10, mixed, Group(0, 1))]
    assert names == ["weights (bf16)", "gradients (bf16)", "fp32 master weights", "SGD momentum (fp32)"]


def test_shards_ceil_low_floor_high() -> None:
    # 10 elements over 4: 3, 3, 2, 2.
    assert [shard(10, 4, i) for i in range(4)] == [3, 3, 2, 2]
    state, psi = MIXED_ADAM, 1_000_003
    low = static_bytes(psi, state, Group(1, 4, 0))
    high = static_bytes(psi, state, Group(1, 4, 3))
    # 1,000,003 = 4·250,000 + 3: indices 0..2 hold 250,001, index 3 holds 250,000.
    assert low == 4 * psi + 12 * 250_001
    assert high == 4 * psi + 12 * 250_000
    with pytest.raises(ValueError):
        Group(1, 4, 4)


def test_terms_formulas_and_components() -> None:
    terms = static_terms(1000, MIXED_ADAM, Group(2, 10))
    assert [(t.component, t.formula) for t in terms] == [
        ("weights", "2·Ψ_r"),
        ("gradients", "2·Ψ_r/N"),
        ("optimizer", "4·Ψ_r/N"),
        ("optimizer", "4·Ψ_r/N"),
        ("optimizer", "4·Ψ_r/N"),
    ]
    assert all(t.source for t in terms)


def test_parts_must_add_up() -> None:
    with pytest.raises(ValueError):
        static_terms(10, MIXED_ADAM, Group(0, 1), (("a", 3, "x"),))


@settings(max_examples=200, deadline=None)
@given(
    psi=st.integers(0, 10**12),
    N=st.integers(1, 4096),
    precision=st.sampled_from(["bf16", "fp16", "fp32"]),
    optimizer=st.sampled_from(["adam", "sgd"]),
    fp32_grads=st.booleans(),
    data=st.data(),
)
def test_zero_stages_never_grow_and_shards_add_up(
    psi: int,
    N: int,
    precision: Precision,
    optimizer: OptimizerName,
    fp32_grads: bool,
    data: st.DataObject,
) -> None:
    state = state_bytes(numerics_for(precision, fp32_grads), optimizer)
    index = data.draw(st.integers(0, N - 1))
    sizes = [static_bytes(psi, state, Group(zero, N, index)) for zero in range(4)]
    assert sizes == sorted(sizes, reverse=True)
    assert all(size >= 0 for size in sizes)
    # Over the whole group, ZeRO-3 holds exactly one full copy of every buffer.
    if N <= 64:
        whole = sum(static_bytes(psi, state, Group(3, N, i)) for i in range(N))
        assert whole == state.total * psi
