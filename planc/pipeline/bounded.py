"""The pipeline's finishing times for any number of micro-batches, with bounded work.

Simulating every op of a step costs O(p·m·v): about 8 µs an op to build and compile a schedule
(once per shape: `_compiled` keeps them) and 0.2 µs an op to time it (`stage_ends`;
`benchmarks/bench_pipeline.py`). A spec may ask for a billion micro-batches. Up to
`MAX_SIMULATED_OPS` ops the schedule is simulated whole, exactly. Beyond that, a flush schedule
is warm-up, a steady state and cool-down, and the steady state repeats: the dependency graph is
a max-plus linear system whose finishing times grow by a constant per period (Baccelli et al.
1992, *Synchronization and Linearity*, ch. 3). Each stage's end is extrapolated from two runs,
m₁ ≡ m (mod p) just past the warm-up transient and m₂ = m₁ + K·p with K groups as many as
`MAX_EXTRAPOLATED_OPS` allows:

    end(m) = end(m₁) + (m − m₁)·(end(m₂) − end(m₁))/(m₂ − m₁)

For equal stages this is exact. With unequal stages the steady state can cycle over several
groups of p, so the slope is the cycle mean only to within one cycle's oscillation over K groups;
`tests/test_pipeline_bounded.py` bounds the error against the full simulation. Where even the two
runs would pass the budget (p in the hundreds), the closed form over the slowest stage is used,
if the schedule has one; a schedule without one is extrapolated from the smallest two runs
however long they are. `PipelineTime.method` says which.

Which schedule runs is the caller's `build` (default: `build_schedule`, the default schedule for
v); `planc.pipeline.registry.run` passes the named schedule's builder and closed form.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

from planc.pipeline.schedule import Schedule, build_schedule
from planc.pipeline.timeline import Program, alone_counts, compile_schedule, stage_ends
from planc.record import record

#: A schedule's builder: (p, m, v) → its op lists.
Builder = Callable[[int, int, int], Schedule]
#: Every stage's end from per-virtual-stage t_f and whole-backward t_b, and the p2p time.
ClosedEnds = Callable[[int, int, int, list[float], list[float], float], tuple[float, ...]]

# Runs start this many groups of p micro-batches in, past the warm-up transient.
TRANSIENT_GROUPS = 2
# Up to this many compute ops (2·p·m·v) the step is simulated whole (about 0.16 s to build and
# compile the schedule, then 4 ms a timing).
MAX_SIMULATED_OPS = 20_000
# The two extrapolation runs together stay within this many ops; above, the closed form.
MAX_EXTRAPOLATED_OPS = 60_000


@record
class PipelineTime:
    """The pipeline part of one step with each stage's own times.

    `method`: "simulated" (every op), "extrapolated" (two runs and the steady state), or
    "closed-form" (the slowest stage, (p − 1)/(v·m + p − 1) of fill and drain).
    """

    makespan_s: float
    bubble_fraction: float  # idle share of p × makespan
    method: str
    simulated_ops: int
    stage_end_s: tuple[float, ...]
    simulated_m: tuple[int, ...]  # the micro-batch counts simulated; () for the closed form
    # In a schedule that pairs passes, the forwards and backwards each virtual stage runs alone
    # (`planc.pipeline.timeline.alone_counts`, the same at every m past the warm-up); () when
    # nothing was simulated or nothing pairs.
    alone: tuple[tuple[int, int], ...] = ()


def _per_virtual_stage(times: Sequence[float], p: int, v: int) -> list[float]:
    """Times per virtual stage (index chunk·p + stage) from p (per stage) or p·v values."""
    if len(times) == p * v:
        return [float(t) for t in times]
    if len(times) == p:
        return [float(times[i % p]) for i in range(p * v)]
    raise ValueError(f"need {p} or {p * v} times, got {len(times)}")


# The schedules last built and compiled: a search estimates many candidates whose pipelines
# have the same shape (in the 70B large-batch search, 75 runs of 6 shapes), and the validation
# table's refits time the same schedules again with other times (20 shapes, each fold in turn);
# a compiled schedule, a pure function of its builder and (p, m, v), is immutable. Building and
# compiling cost about 30 times a timing, so a miss is what counts. A program keeps about 100
# bytes an op, a third of a built schedule (about 290), so 24 of them hold what 8 schedules did:
# at most MAX_EXTRAPOLATED_OPS ops each, about 6 MB.
BUILT_KEPT = 24


@lru_cache(maxsize=BUILT_KEPT)
def _compiled(build: Builder, p: int, m: int, v: int) -> Program:
    return compile_schedule(build(p, m, v))


Times = tuple[list[float], list[float], list[float] | None]
Alone = tuple[list[float], list[float]] | None


def _ends(
    build: Builder, p: int, m: int, v: int, times: Times, hop: float, alone: Alone = None
) -> tuple[float, ...]:
    t_f, t_b, t_w = times
    program = _compiled(build, p, m, v)
    return tuple(float(end) for end in stage_ends(program, t_f, t_b, hop, t_w, alone))


@lru_cache(maxsize=BUILT_KEPT)
def _alone(build: Builder, p: int, m: int, v: int) -> tuple[tuple[int, int], ...]:
    """The passes each virtual stage runs alone at `m` (a compiled program's count, kept as
    the program is: a search times the same shapes again and again)."""
    counts = alone_counts(_compiled(build, p, m, v))
    return counts if any(f or b for f, b in counts) else ()


def closed_form_ends(
    p: int, m: int, v: int, t_f: list[float], t_b: list[float], hop: float
) -> tuple[float, ...]:
    """Every stage ends at the slowest stage's m·v chunk times plus the fill and drain of
    (p − 1)/v of them and 2(p − 1) messages (Narayanan et al. 2021 §2.2); exact for equal stages
    without p2p delay, an estimate otherwise."""
    slowest = max(sum(t_f[j * p + r] + t_b[j * p + r] for j in range(v)) for r in range(p))
    end = slowest * (m + (p - 1) / v) + 2 * (p - 1) * hop
    return (end,) * p


def run(
    p: int,
    m: int,
    v: int,
    t_f: Sequence[float],
    t_b: Sequence[float],
    hop: float,
    max_simulated_ops: int = MAX_SIMULATED_OPS,
    *,
    t_w: Sequence[float] | None = None,
    build: Builder = build_schedule,
    closed_ends: ClosedEnds | None = closed_form_ends,
    t_alone: tuple[Sequence[float], Sequence[float]] | None = None,
) -> PipelineTime:
    """The step's pipeline part; `t_f`/`t_b` per micro-batch per chunk, per stage (p values) or
    per virtual stage (p·v values, index chunk·p + stage), in seconds. `t_w` is given for a
    schedule that splits the backward (its W ops; `t_b` then the input-gradient part);
    `t_alone` the forward and backward (input-gradient) times of the passes a schedule that
    pairs runs alone (the closed form, for the largest shapes, prices them as paired)."""
    f, b = _per_virtual_stage(t_f, p, v), _per_virtual_stage(t_b, p, v)
    w = None if t_w is None else _per_virtual_stage(t_w, p, v)
    alone: Alone = None
    if t_alone is not None:
        alone = (_per_virtual_stage(t_alone[0], p, v), _per_virtual_stage(t_alone[1], p, v))
    times = (f, b, w)
    kinds = 2 if w is None else 3  # ops per micro-batch per chunk
    busy = m * (sum(f) + sum(b) + (sum(w) if w is not None else 0.0))
    ops = kinds * p * m * v
    counts: tuple[int, ...]
    lone: tuple[tuple[int, int], ...] = ()
    if p == 1 and alone is None:
        ends: tuple[float, ...] = (busy,)
        method, simulated, counts = "simulated", 0, (m,)
    elif ops <= max_simulated_ops:
        ends, method, simulated = _ends(build, p, m, v, times, hop, alone), "simulated", ops
        counts, lone = (m,), _alone(build, p, m, v) if alone is not None else ()
    else:
        base = TRANSIENT_GROUPS * p
        m1 = base + (m - base) % p
        budget = (MAX_EXTRAPOLATED_OPS // (kinds * p * v) - 2 * m1) // p
        if closed_ends is None:
            budget = max(budget, 1)  # no closed form to fall back on: the smallest two runs
        groups = min(budget, (m - m1 - 1) // p)  # m₂ < m: never simulate more than asked
        if groups >= 1:
            m2 = m1 + groups * p
            first = _ends(build, p, m1, v, times, hop, alone)
            second = _ends(build, p, m2, v, times, hop, alone)
            scale = (m - m1) / (m2 - m1)
            ends = tuple(a + scale * (c - a) for a, c in zip(first, second, strict=True))
            method, simulated, counts = "extrapolated", kinds * p * v * (m1 + m2), (m1, m2)
            lone = _alone(build, p, m2, v) if alone is not None else ()
        elif closed_ends is None:
            ends, method, simulated = _ends(build, p, m, v, times, hop, alone), "simulated", ops
            counts, lone = (m,), _alone(build, p, m, v) if alone is not None else ()
        else:
            whole = b if w is None else [x + y for x, y in zip(b, w, strict=True)]
            ends, method, simulated, counts = (
                closed_ends(p, m, v, f, whole, hop),
                "closed-form",
                0,
                (),
            )
    if alone is not None and lone:
        # The passes run alone are busy for their own time.
        fa, ba = alone
        busy += sum(
            n_f * (fa[i] - f[i]) + n_b * (ba[i] - b[i]) for i, (n_f, n_b) in enumerate(lone)
        )
    makespan = max(ends)
    idle = 1 - busy / (p * makespan) if makespan > 0 else 0.0
    return PipelineTime(makespan, idle, method, simulated, ends, counts, lone)
