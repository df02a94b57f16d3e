"""planc.pipeline.bounded: the makespan for any m, against the full simulation."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planc.pipeline.bounded import run as makespan
from planc.pipeline.bubble import bubble_fraction
from planc.pipeline.schedule import build_schedule
from planc.pipeline.timeline import simulate

from conftest import analysis_of


def full(p: int, m: int, v: int, t_f: list[float], t_b: list[float], hop: float) -> float:
    return float(simulate(build_schedule(p, m, v), t_f, t_b, hop).makespan)


def test_small_steps_are_simulated_exactly() -> None:
    result = makespan(4, 16, 1, [1.0] * 4, [2.0] * 4, 0.0)
    assert result.method == "simulated"
    # Equal stages, no delay: (m + p − 1)·(t_f + t_b).
    assert result.makespan_s == (16 + 3) * 3.0
    assert result.bubble_fraction == pytest.approx(bubble_fraction(4, 16, 1))


@settings(max_examples=40, deadline=None)
@given(
    p=st.integers(2, 6),
    v=st.sampled_from([1, 2]),
    groups=st.integers(8, 40),
    times=st.lists(st.integers(1, 9), min_size=12, max_size=12),
    hop=st.integers(0, 3),
)
def test_extrapolation_is_within_one_cycle(
    p: int, v: int, groups: int, times: list[int], hop: int
) -> None:
    """Past the simulation budget the makespan is extrapolated; against the full simulation it
    is off by at most a few micro-batch times (the steady state of unequal stages cycles), and
    exact for equal stages without delay."""
    if v > 1 and p < 2:
        v = 1
    m = groups * p
    t_f = [float(x) for x in times[:p]]
    t_b = [float(x) for x in times[6 : 6 + p]]
    # Force extrapolation at these small sizes.
    result = makespan(p, m, v, t_f, t_b, float(hop), max_simulated_ops=2 * p * v * 6 * p)
    exact = full(p, m, v, t_f, t_b, float(hop))
    assert result.method == "extrapolated"
    cycle = v * max(f + b for f, b in zip(t_f, t_b, strict=True)) + 2 * hop
    assert abs(result.makespan_s - exact) <= 4 * cycle, (result.makespan_s, exact)
    if len(set(t_f)) == 1 and len(set(t_b)) == 1 and hop == 0:
        assert result.makespan_s == pytest.approx(exact, rel=1e-12)


def test_shipped_example_shapes_extrapolate_within_a_tenth_of_a_percent() -> None:
    """The 70B example's own stage times (embedding first, LM head last) and p2p time, at
    m = 2,048 (16,384 ops: simulated whole) against the extrapolation forced from the budget."""
    analysis = analysis_of(None, "llama3-70b-8x8.yaml")
    t_f = [t.forward_s for t in analysis.times]
    t_b = [t.backward_s for t in analysis.times]
    m, hop = 2048, 0.0003
    exact = full(4, m, 1, t_f, t_b, hop)
    result = makespan(4, m, 1, t_f, t_b, hop, max_simulated_ops=4_000)
    assert result.method == "extrapolated"
    assert abs(result.makespan_s - exact) / exact < 1e-3


def test_huge_pipelines_fall_back_to_the_closed_form() -> None:
    result = makespan(512, 10**6, 1, [1.0] * 512, [2.0] * 512, 0.0)
    assert result.method == "closed-form" and result.simulated_ops == 0
    assert result.bubble_fraction == pytest.approx(bubble_fraction(512, 10**6, 1))
    assert Fraction(result.makespan_s) > 0
