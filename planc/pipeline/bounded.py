"""The pipeline's makespan for any number of micro-batches, with bounded work.

Simulating every op of a step costs O(p·m·v) (about 12 µs an op); a spec may ask for a billion
micro-batches. Up to `MAX_SIMULATED_OPS` ops the schedule is simulated whole, exactly. Beyond
that, a flush schedule is warm-up, a steady state and cool-down, and the steady state repeats, so
the makespan grows affinely in m on average: it is extrapolated from two runs, m₁ ≡ m (mod p)
just past the warm-up transient and m₂ = m₁ + K·p with K as large as the budget allows:

    T(m) ≈ T(m₁) + (m − m₁)·(T(m₂) − T(m₁))/(m₂ − m₁)

For equal stages without p2p delay this is exact; with unequal stages the steady state of a
max-plus system can cycle over several groups of p, so the slope is the cycle mean only to within
one cycle's oscillation over K groups. `tests/test_pipeline_bounded.py` bounds the error against
the full simulation. Where even the two runs would pass the budget (p in the hundreds), the
closed form over the slowest stage is used. `PipelineTime.method` says which was used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from planc.pipeline.bubble import bubble_fraction
from planc.pipeline.schedule import build_schedule
from planc.pipeline.timeline import simulate

# Runs start this many groups of p micro-batches in, past the warm-up transient.
TRANSIENT_GROUPS = 2
# Above this many compute ops in the runs it needs, the closed form is used instead.
MAX_SIMULATED_OPS = 20_000


@dataclass(frozen=True)
class PipelineTime:
    """The pipeline part of one step with each stage's own times.

    `method` says how it was found: "simulated" (every op), "extrapolated" (two short runs and
    the affine steady state), or "closed-form" (the slowest stage, (p − 1)/(v·m + p − 1)).
    """

    makespan_s: float
    bubble_fraction: float
    method: str
    simulated_ops: int


def _run(p: int, m: int, v: int, t_f: Sequence[Fraction], t_b: Sequence[Fraction], hop: Fraction) -> Fraction:
    return simulate(build_schedule(p, m, v), t_f, t_b, hop).makespan


def makespan(
    p: int, m: int, v: int, t_f: Sequence[float], t_b: Sequence[float], hop: float
) -> PipelineTime:
    """Makespan of one step of m micro-batches; `t_f`/`t_b` per stage per chunk, in seconds."""
    f = [Fraction(x) for x in t_f]
    b = [Fraction(x) for x in t_b]
    h = Fraction(hop)
    busy = m * v * sum(x + y for x, y in zip(f, b, strict=True))
    ops = 2 * p * m * v
    if ops <= MAX_SIMULATED_OPS:
        total = _run(p, m, v, f, b, h)
        return PipelineTime(float(total), float(1 - busy / (p * total)), "simulated", ops)
    base = TRANSIENT_GROUPS * p
    m1 = base + (m - base) % p
    # K groups apart: the two runs cost 2·p·v·(2·m₁ + K·p) ops together.
    groups = (MAX_SIMULATED_OPS // (2 * p * v) - 2 * m1) // p
    if groups >= 1 and m1 + groups * p < m:
        m2 = m1 + groups * p
        first, second = _run(p, m1, v, f, b, h), _run(p, m2, v, f, b, h)
        total = first + Fraction(m - m1, m2 - m1) * (second - first)
        ops_run = 2 * p * v * (m1 + m2)
        return PipelineTime(float(total), float(1 - busy / (p * total)), "extrapolated", ops_run)
    slowest = max(x + y for x, y in zip(f, b, strict=True)) * v
    bubble = bubble_fraction(p, m, v)
    total = m * slowest / (1 - Fraction(bubble))
    return PipelineTime(float(total), float(1 - busy / (p * total)), "closed-form", 0)
