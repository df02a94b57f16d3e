"""The compiled pipeline engine (compile once, time many) against a straightforward reference.

The reference below is written from the model's rules alone (docs/pipeline.md, "The
simulation"), in Fractions, with no ordering of its own: every op's start is the latest of its
stage's previous end and its inputs' arrivals, relaxed over all ops until nothing moves
(Bellman-Ford on the longest path). An order that deadlocks is a cycle of waits, which never
settles. The engine must give the same numbers, exactly, for every registered schedule.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from planc.pipeline import registry
from planc.pipeline.schedule import Op, Schedule
from planc.pipeline.timeline import DeadlockError, compile_schedule, simulate, stage_ends
from planc.vocab import ScheduleKind

#: (stage, position in the stage's op list) of one op.
Place = tuple[int, int]

LAYOUTS = tuple(
    (kind, p, m, v)
    for kind in registry.SCHEDULES
    for p, m, v in itertools.product(range(1, 6), range(1, 13), range(1, 4))
    if registry.unmet(kind, p, m, v) is None
)


# --------------------------------------------------------------------------- the reference


def groups(ops: tuple[Op, ...]) -> list[tuple[int, ...]]:
    """Positions launched together: a paired op and the one after it, else one op."""
    out: list[tuple[int, ...]] = []
    k = 0
    while k < len(ops):
        size = 2 if ops[k].paired else 1
        out.append(tuple(range(k, k + size)))
        k += size
    return out


def inputs(
    schedule: Schedule, stage: int, op: Op, hop: Fraction
) -> list[tuple[tuple[str, int, int, int], Fraction]]:
    """(kind, micro-batch, stage, chunk) of each op ``op`` needs, with the delay after its end."""
    needed = []
    if op.kind == "B":
        needed.append((("F", op.microbatch, stage, op.chunk), Fraction(0)))
    if op.kind == "W":
        needed.append((("B", op.microbatch, stage, op.chunk), Fraction(0)))
    if op.recv is not None:
        link = op.recv
        producer = ("F" if link.direction == "fwd" else "B", link.microbatch)
        delay = Fraction(0) if link.src_stage == link.dst_stage else hop
        needed.append(((*producer, link.src_stage, link.src_chunk), delay))
    return needed


def reference(
    schedule: Schedule,
    times: dict[str, list[Fraction]],
    hop: Fraction,
) -> dict[Place, tuple[Fraction, Fraction]] | None:
    """Every op's (start, end), or None when the waits form a cycle (a deadlock)."""
    p = schedule.p
    place: dict[tuple[str, int, int, int], Place] = {
        (op.kind, op.microbatch, stage, op.chunk): (stage, k)
        for stage, ops in enumerate(schedule.stages)
        for k, op in enumerate(ops)
    }

    def duration(stage: int, op: Op) -> Fraction:
        where = op.chunk * p + stage
        return times[op.kind][where] + (times["W"][where] if op.whole else 0)

    start: dict[Place, Fraction] = dict.fromkeys(place.values(), Fraction(0))
    end = {
        (r, k): duration(r, op) for r, ops in enumerate(schedule.stages) for k, op in enumerate(ops)
    }
    for _ in range(len(place) + 2):
        moved = False
        for stage, ops in enumerate(schedule.stages):
            for group in groups(ops):
                first = group[0]
                ready = end[(stage, first - 1)] if first else Fraction(0)
                for k in group:
                    for key, delay in inputs(schedule, stage, ops[k], hop):
                        if place[key] != (stage, first):  # the pair's second after its first
                            ready = max(ready, end[place[key]] + delay)
                for k in group:  # the members one after the other
                    if start[(stage, k)] != ready:
                        start[(stage, k)], moved = ready, True
                    end[(stage, k)] = ready + duration(stage, ops[k])
                    ready = end[(stage, k)]
        if not moved:
            return {key: (start[key], end[key]) for key in start}
    return None


# --------------------------------------------------------------------------- strategies

positive = st.one_of(
    st.integers(1, 20).map(Fraction),
    st.fractions(min_value=Fraction(1, 16), max_value=10, max_denominator=16),
    st.floats(min_value=1e-3, max_value=10.0).map(Fraction),
)


@st.composite
def runs(draw: st.DrawFn) -> tuple[Schedule, dict[str, list[Fraction]], Fraction]:
    kind, p, m, v = draw(st.sampled_from(LAYOUTS))
    schedule = registry.build(kind, p, m, v)
    times = {kind: draw(st.lists(positive, min_size=p * v, max_size=p * v)) for kind in "FBW"}
    hop = draw(st.one_of(st.just(Fraction(0)), positive))
    return schedule, times, hop


Args = tuple[list[Fraction], list[Fraction], Fraction, list[Fraction]]


def timed(times: dict[str, list[Fraction]], hop: Fraction) -> Args:
    """The engine's arguments: t_f, t_b, t_p2p and t_w (read only with W ops)."""
    return times["F"], times["B"], hop, times["W"]


# --------------------------------------------------------------------------- properties


@settings(max_examples=150, deadline=None)
@given(runs())
def test_the_engine_equals_the_reference_on_every_registered_schedule(
    run: tuple[Schedule, dict[str, list[Fraction]], Fraction],
) -> None:
    schedule, times, hop = run
    want = reference(schedule, times, hop)
    assert want is not None  # a registered builder never deadlocks
    args = timed(times, hop)
    timeline = simulate(schedule, *args)
    got = {
        (stage, k): (span.start, span.end)
        for stage, spans in enumerate(timeline.stages)
        for k, span in enumerate(spans)
    }
    assert got == want
    last = tuple(
        max((end for (r, _), (_, end) in want.items() if r == stage), default=Fraction(0))
        for stage in range(schedule.p)
    )
    assert stage_ends(compile_schedule(schedule), *args) == last
    assert timeline.makespan == max(last)


@settings(max_examples=60, deadline=None)
@given(runs(), st.data())
def test_a_reordered_stage_deadlocks_exactly_when_its_waits_form_a_cycle(
    run: tuple[Schedule, dict[str, list[Fraction]], Fraction], data: st.DataObject
) -> None:
    """Swap two ops of one stage: the links still pair up, but the order may now wait on
    itself. The engine raises DeadlockError exactly when the reference never settles, and
    otherwise still agrees with it."""
    schedule, times, hop = run
    stage = data.draw(st.integers(0, schedule.p - 1))
    ops = list(schedule.stages[stage])
    i, j = data.draw(st.lists(st.integers(0, len(ops) - 1), min_size=2, max_size=2, unique=True))
    ops[i], ops[j] = ops[j], ops[i]
    # A pair's flag stays with its position: an op runs paired where the schedule pairs.
    ops[i], ops[j] = (
        replace(ops[i], paired=schedule.stages[stage][i].paired),
        replace(ops[j], paired=schedule.stages[stage][j].paired),
    )
    stages = (*schedule.stages[:stage], tuple(ops), *schedule.stages[stage + 1 :])
    swapped = replace(schedule, stages=stages)
    want = reference(swapped, times, hop)
    event("deadlocks" if want is None else "runs")
    if want is None:
        with pytest.raises(DeadlockError, match="pipeline schedule deadlocks") as info:
            simulate(swapped, *timed(times, hop))
        blocked = info.value.blocked
        assert blocked and len({r for r, _, _ in blocked}) == len(blocked)
        keys = {(op.kind, op.microbatch, r, op.chunk) for r, ops in enumerate(stages) for op in ops}
        for r, op, awaited in blocked:  # a stuck stage is at one of its ops, waiting for an op
            assert op in swapped.stages[r] and awaited in keys
    else:
        timeline = simulate(swapped, *timed(times, hop))
        got = {
            (r, k): (span.start, span.end)
            for r, spans in enumerate(timeline.stages)
            for k, span in enumerate(spans)
        }
        assert got == want


def test_the_reference_finds_the_hand_made_deadlock() -> None:
    """Stage 1 runs B0 before F0 (test_pipeline_simulate's case): the reference must not settle,
    or the property above would test nothing."""
    schedule = registry.build(ScheduleKind.ONE_F_ONE_B, 2, 1, 1)
    ops = schedule.stages[1]
    broken = replace(schedule, stages=(schedule.stages[0], (ops[1], ops[0])))
    ones = [Fraction(1)] * 2
    assert reference(broken, {"F": ones, "B": ones, "W": ones}, Fraction(0)) is None
