"""Discrete-event simulation of pipeline schedules: bubble formulas, matching, deadlock.

Expected values: the bubble fractions (p−1)/(m+p−1) (1F1B) and (p−1)/(v·m+p−1)
(interleaved with per-chunk time t/v), Narayanan et al. 2021 §2.2; small timelines
worked out by hand below.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planc.pipeline import (
    DeadlockError,
    Schedule,
    build_schedule,
    render,
    simulate,
)


def valid_interleaved() -> list[tuple[int, int, int]]:
    return [(p, m, v) for p in range(3, 9) for v in range(2, 5) for m in range(p, 4 * p + 1, p)]


def swap(schedule: Schedule, stage: int, i: int, j: int) -> Schedule:
    """A copy of `schedule` with ops i and j of `stage` exchanged."""
    ops = list(schedule.stages[stage])
    ops[i], ops[j] = ops[j], ops[i]
    stages = list(schedule.stages)
    stages[stage] = tuple(ops)
    return replace(schedule, stages=tuple(stages))


# --------------------------------------------------------------------------- bubble formulas


@pytest.mark.parametrize("p", range(1, 9))
def test_1f1b_bubble_is_exact_formula(p: int) -> None:
    for m in range(1, 33):
        timeline = simulate(build_schedule(p, m), t_f=1, t_b=2)
        assert timeline.bubble_fraction == Fraction(p - 1, m + p - 1)
        # Makespan (m + p − 1)(t_f + t_b): m steps of work plus p − 1 of fill and drain.
        assert timeline.makespan == (m + p - 1) * 3


@pytest.mark.parametrize(("p", "m", "v"), valid_interleaved())
def test_interleaved_bubble_is_exact_formula(p: int, m: int, v: int) -> None:
    # Same total work per stage as 1F1B with t_f = 1: each of v chunks takes 1/v.
    timeline = simulate(build_schedule(p, m, v), t_f=Fraction(1, v), t_b=Fraction(2, v))
    assert timeline.bubble_fraction == Fraction(p - 1, v * m + p - 1)
    assert timeline.makespan == 3 * m + Fraction(3 * (p - 1), v)


def test_float_times_agree_with_formula_to_rounding() -> None:
    timeline = simulate(build_schedule(4, 8, 3), t_f=0.1 / 3, t_b=0.2 / 3)
    assert abs(float(timeline.bubble_fraction) - 3 / (24 + 3)) < 1e-12


def test_backward_defaults_to_twice_forward() -> None:
    sched = build_schedule(3, 5)
    assert simulate(sched, 1.5) == simulate(sched, 1.5, 3.0)


@settings(max_examples=40, deadline=None)
@given(
    p=st.integers(1, 10),
    m=st.integers(1, 40),
    t_f=st.fractions(Fraction(1, 10), 10, max_denominator=50),
    ratio=st.integers(1, 4),
)
def test_property_1f1b_bubble(p: int, m: int, t_f: Fraction, ratio: int) -> None:
    timeline = simulate(build_schedule(p, m), t_f=t_f, t_b=ratio * t_f)
    assert timeline.bubble_fraction == Fraction(p - 1, m + p - 1)


@settings(max_examples=30, deadline=None)
@given(
    p=st.integers(3, 8),
    groups=st.integers(1, 5),
    v=st.integers(2, 4),
    ratio=st.integers(1, 4),
)
def test_property_interleaved_bubble(p: int, groups: int, v: int, ratio: int) -> None:
    m = p * groups
    timeline = simulate(build_schedule(p, m, v), t_f=Fraction(1, v), t_b=Fraction(ratio, v))
    assert timeline.bubble_fraction == Fraction(p - 1, v * m + p - 1)


# --------------------------------------------------------------------------- hand timelines


def test_p2_m3_timeline_by_hand() -> None:
    # t_f = 1, t_b = 2. Stage 0: F0 [0,1] F1 [1,2] idle, B0 [4,6] (gradient from stage 1 at 4),
    # F2 [6,7], B1 [7,9], idle, B2 [10,12]. Stage 1: F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7]
    # F2 [7,8] B2 [8,10].
    timeline = simulate(build_schedule(2, 3), 1, 2)
    got = [[(s.op.label, s.start, s.end) for s in spans] for spans in timeline.stages]
    assert got[0] == [
        ("F0c0", 0, 1),
        ("F1c0", 1, 2),
        ("B0c0", 4, 6),
        ("F2c0", 6, 7),
        ("B1c0", 7, 9),
        ("B2c0", 10, 12),
    ]
    assert got[1] == [
        ("F0c0", 1, 2),
        ("B0c0", 2, 4),
        ("F1c0", 4, 5),
        ("B1c0", 5, 7),
        ("F2c0", 7, 8),
        ("B2c0", 8, 10),
    ]
    assert timeline.makespan == 12
    assert timeline.busy == (9, 9)
    assert timeline.bubble_fraction == Fraction(1, 4)


def test_uneven_stages_by_hand() -> None:
    # p = 2, m = 2, t_f = [1, 2], t_b = 2·t_f. Stage 1: F0 [1,3] B0 [3,7] F1 [7,9] B1 [9,13];
    # stage 0: F0 [0,1] F1 [1,2] B0 [7,9] B1 [13,15]. Busy 6 + 12 of 2 × 15.
    timeline = simulate(build_schedule(2, 2), t_f=[1, 2])
    assert timeline.makespan == 15
    assert timeline.busy == (6, 12)
    assert timeline.bubble_fraction == Fraction(2, 5)
    assert [(s.start, s.end) for s in timeline.stages[0]] == [(0, 1), (1, 2), (7, 9), (13, 15)]


def test_p2p_time_on_a_single_microbatch_by_hand() -> None:
    # m = 1: the micro-batch crosses p − 1 boundaries each way.
    for p in range(1, 6):
        timeline = simulate(build_schedule(p, 1), 1, 2, t_p2p=Fraction(1, 4))
        assert timeline.makespan == 3 * p + Fraction(2 * (p - 1), 4)


@pytest.mark.parametrize(("p", "m", "v"), [(2, 4, 1), (4, 8, 1), (4, 8, 2), (6, 12, 3)])
def test_p2p_time_only_adds_bubble(p: int, m: int, v: int) -> None:
    sched = build_schedule(p, m, v)
    free = simulate(sched, Fraction(1, v))
    slow = simulate(sched, Fraction(1, v), t_p2p=Fraction(1, 10))
    assert slow.busy == free.busy
    assert slow.makespan >= free.makespan + 2 * (p - 1) * Fraction(1, 10)
    assert slow.bubble_fraction > free.bubble_fraction


def test_per_virtual_stage_times() -> None:
    # p·v values index virtual stage chunk·p + stage; equal values reproduce the scalar run.
    sched = build_schedule(3, 6, 2)
    assert simulate(sched, [1] * 6).makespan == simulate(sched, 1).makespan
    skewed = simulate(sched, [1, 1, 1, 1, 1, 3])
    assert skewed.busy[2] == 6 * (1 + 2) + 6 * (3 + 6)


# --------------------------------------------------------------------------- messages


@pytest.mark.parametrize(("p", "m", "v"), [(3, 2, 1), (4, 8, 1), (4, 8, 2), (5, 15, 3)])
def test_every_send_meets_its_receive(p: int, m: int, v: int) -> None:
    t_p2p = Fraction(1, 7)
    timeline = simulate(build_schedule(p, m, v), 1, t_p2p=t_p2p)
    assert len(timeline.messages) == 2 * m * (p * v - 1)
    assert len({msg.link for msg in timeline.messages}) == len(timeline.messages)
    spans = {
        (r, s.op.kind, s.op.microbatch, s.op.chunk): s for r in range(p) for s in timeline.stages[r]
    }
    for msg in timeline.messages:
        link = msg.link
        kind = "F" if link.direction == "fwd" else "B"
        sender = spans[(link.src_stage, kind, link.microbatch, link.src_chunk)]
        receiver = spans[(link.dst_stage, kind, link.microbatch, link.dst_chunk)]
        assert sender.op.send == link == receiver.op.recv
        assert msg.sent == sender.end
        assert msg.arrived == sender.end + t_p2p <= receiver.start == msg.consumed


# --------------------------------------------------------------------------- deadlock


@pytest.mark.parametrize("p", range(1, 9))
def test_no_deadlock_1f1b_grid(p: int) -> None:
    for m in range(1, 33):
        timeline = simulate(build_schedule(p, m), 1, 2, t_p2p=Fraction(1, 3))
        assert all(len(spans) == 2 * m for spans in timeline.stages)


@pytest.mark.parametrize(("p", "m", "v"), valid_interleaved())
def test_no_deadlock_interleaved_uneven(p: int, m: int, v: int) -> None:
    # Uneven stages and a p2p cost: only data dependencies decide, never a lucky tie.
    t_f = [1 + (r * 7) % 5 for r in range(p)]
    timeline = simulate(build_schedule(p, m, v), t_f, t_p2p=Fraction(1, 2))
    assert all(len(spans) == 2 * m * v for spans in timeline.stages)


def test_backward_before_its_forward_deadlocks_the_last_stage() -> None:
    broken = swap(build_schedule(2, 1), stage=1, i=0, j=1)  # stage 1: B0 then F0
    with pytest.raises(DeadlockError) as info:
        simulate(broken, 1)
    blocked = {(stage, op.label, waits) for stage, op, waits in info.value.blocked}
    assert blocked == {
        (0, "B0c0", ("B", 0, 1, 0)),  # stage 0 waits for stage 1's gradient
        (1, "B0c0", ("F", 0, 1, 0)),  # stage 1 waits for its own forward, queued behind
    }
    assert "stage 1 at B0c0 waits for F0c0 on stage 1" in str(info.value)


def test_cyclic_wait_between_stages_deadlocks() -> None:
    # Stage 0 insists on B0 before F1, stage 1 on F1 before B0 (1F1B has the opposite order).
    sched = build_schedule(2, 2)
    broken = swap(swap(sched, 0, 1, 2), 1, 1, 2)
    assert [op.label for op in broken.stages[0]] == ["F0c0", "B0c0", "F1c0", "B1c0"]
    assert [op.label for op in broken.stages[1]] == ["F0c0", "F1c0", "B0c0", "B1c0"]
    with pytest.raises(DeadlockError, match="pipeline schedule deadlocks") as info:
        simulate(broken, 1)
    assert {stage for stage, _, _ in info.value.blocked} == {0, 1}
    assert isinstance(info.value, ValueError)


def test_unmatched_schedule_is_rejected_before_simulating() -> None:
    sched = build_schedule(3, 2)
    broken = replace(sched, stages=(sched.stages[0], sched.stages[1][1:], sched.stages[2]))
    with pytest.raises(ValueError, match="stage 1 must run each forward and backward once"):
        simulate(broken, 1)


# --------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"t_f": 0}, "t_f must be positive"),
        ({"t_f": -1.0}, "t_f must be positive"),
        ({"t_f": float("nan")}, "t_f must be finite"),
        ({"t_f": float("inf")}, "t_f must be finite"),
        ({"t_f": [1, 2]}, r"t_f needs one value, 3 \(per stage\) or 3"),
        ({"t_f": 1, "t_b": [1, 0, 1]}, "t_b must be positive"),
        ({"t_f": 1, "t_p2p": -0.5}, "t_p2p must be non-negative"),
        ({"t_f": "1"}, "t_f must be a number"),
        ({"t_f": True}, "t_f must be a number"),
    ],
)
def test_bad_times_raise_value_error(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        simulate(build_schedule(3, 3), **kwargs)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- output


def test_to_json_is_plain_data() -> None:
    timeline = simulate(build_schedule(2, 3), 1, 2)
    data = timeline.to_json()
    assert json.loads(json.dumps(data)) == data
    assert data["stages"][0][:2] == [["F", 0, 0, 0.0, 1.0], ["F", 1, 0, 1.0, 2.0]]
    assert data["makespan"] == 12.0
    assert data["bubble_fraction"] == 0.25
    assert data["busy"] == [9.0, 9.0]
    assert data["p2p_messages"] == 6
    assert (data["p"], data["m"], data["v"]) == (2, 3, 1)


def test_render_p2_m3_by_hand() -> None:
    # One column per time unit (width = makespan = 12), from the hand timeline above.
    picture = render(simulate(build_schedule(2, 3), 1, 2), width=12)
    rows = picture.splitlines()
    assert rows[0] == "stage 0 |FF..BBFBB.BB|"
    assert rows[1] == "stage 1 |.FBBFBBFBB..|"
    assert "bubble 25.0%" in rows[2]


def test_render_interleaved_marks_odd_chunks_lowercase() -> None:
    picture = render(simulate(build_schedule(4, 8, 2), Fraction(1, 2)), width=80)
    rows = picture.splitlines()
    assert len(rows) == 5
    assert all(len(row) == len("stage 0 |") + 80 + 1 for row in rows[:4])
    assert set("FBfb") <= set(picture)
    with pytest.raises(ValueError, match="render width must be positive"):
        render(simulate(build_schedule(4, 8, 2), 1), width=0)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 4),
    st.integers(1, 3),
    st.lists(st.integers(1, 5), min_size=6, max_size=6),
    st.integers(0, 3),
)
def test_property_uneven_runs_respect_order_and_dependencies(
    p: int, groups: int, v: int, costs: list[int], hop: int
) -> None:
    if v > 1 and p < 2:
        v = 1
    m = p * groups if v > 1 else groups
    t_f = costs[:p]
    timeline = simulate(build_schedule(p, m, v), t_f, t_p2p=hop)
    ends = {}
    for r, spans in enumerate(timeline.stages):
        # A stage runs one op at a time, in schedule order.
        assert [s.op for s in spans] == list(timeline.schedule.stages[r])
        for before, after in itertools.pairwise(spans):
            assert before.end <= after.start
        for s in spans:
            ends[(s.op.kind, s.op.microbatch, r, s.op.chunk)] = s.end
        assert timeline.busy[r] == m * v * 3 * t_f[r]
    for r, spans in enumerate(timeline.stages):
        for s in spans:
            if s.op.kind == "B":
                assert ends[("F", s.op.microbatch, r, s.op.chunk)] <= s.start
    assert 0 <= timeline.bubble_fraction < 1
