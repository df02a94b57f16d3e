"""Pipeline schedules as data: op order, phases, links, warm-up and in-flight counts.

Expected values come from hand derivation (Narayanan et al. 2021 Fig. 3/4) and from
Megatron-Core's warm-up count, written out below (`megatron_warmup`), not from the code under
test.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planc.pipeline import (
    Link,
    Op,
    Schedule,
    build_schedule,
    held_at_peak,
    in_flight,
    num_warmup,
    validate_schedule,
)
from planc.pipeline.inflight import in_flight as closed_form_in_flight


def labels(ops: tuple[Op, ...]) -> list[str]:
    return [op.label for op in ops]


def seq(text: str) -> list[str]:
    """'F0 F1 B0' -> ['F0c0', 'F1c0', 'B0c0']; entries already naming a chunk stay as is."""
    return [tok if "c" in tok else f"{tok}c0" for tok in text.split()]


def megatron_warmup(p: int, m: int, v: int, r: int) -> int:
    """Forward passes rank r runs before its first backward, as Megatron-Core counts them
    (`get_pp_rank_microbatches` in megatron/core/pipeline_parallel/schedules.py): 1F1B
    `p − r − 1`; interleaved `(p − r − 1)·2 + (v − 1)·microbatch_group_size_per_vp_stage`, the
    group size defaulting to p; either capped at the total, m·v virtual micro-batches."""
    warmup = p - r - 1 if v == 1 else (p - r - 1) * 2 + (v - 1) * p
    return min(warmup, m * v)


def leading_forwards(ops: tuple[Op, ...]) -> int:
    """Forward ops before the first backward, counted in the built op list."""
    kinds = [op.kind for op in ops]
    return kinds.index("B") if "B" in kinds else len(kinds)


def valid_interleaved() -> list[tuple[int, int, int]]:
    return [(p, m, v) for p in range(3, 9) for v in range(2, 5) for m in range(p, 4 * p + 1, p)]


@st.composite
def configs(draw: st.DrawFn) -> tuple[int, int, int]:
    """A valid (p, m, v): any p, m for 1F1B; p > 1 and m a multiple of p when interleaved."""
    if draw(st.booleans()):
        return draw(st.integers(1, 10)), draw(st.integers(1, 40)), 1
    p = draw(st.integers(2, 8))
    return p, p * draw(st.integers(1, 5)), draw(st.integers(2, 4))


# --------------------------------------------------------------------------- hand-written orders


def test_1f1b_p2_m3_matches_hand_derivation() -> None:
    sched = build_schedule(2, 3)
    assert labels(sched.stages[0]) == seq("F0 F1 B0 F2 B1 B2")
    assert labels(sched.stages[1]) == seq("F0 B0 F1 B1 F2 B2")


def test_1f1b_p4_m8_matches_paper_figure() -> None:
    # Narayanan et al. 2021 Fig. 4 (top), 0-indexed: first stage warms up with 3 forwards.
    sched = build_schedule(4, 8)
    assert labels(sched.stages[0]) == seq("F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7")
    assert labels(sched.stages[3]) == seq("F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7")


def test_interleaved_p4_m8_v2_first_ops() -> None:
    # Megatron: warm-up 2(p-r-1) + (v-1)p = 10, 8, 6, 4; micro-batches in groups of p = 4,
    # forwards chunk 0 then chunk 1, backwards start with the last chunk.
    sched = build_schedule(4, 8, 2)
    group0 = "F0c0 F1c0 F2c0 F3c0 F0c1 F1c1 F2c1 F3c1"
    assert labels(sched.stages[0])[:12] == seq(group0 + " F4c0 F5c0 F6c0 B0c1")
    assert labels(sched.stages[1])[:11] == seq(group0 + " F4c0 B0c1 F5c0")
    assert labels(sched.stages[2])[:10] == seq("F0c0 F1c0 F2c0 F3c0 F0c1 F1c1 F2c1 B0c1 F3c1 B1c1")
    assert labels(sched.stages[3])[:14] == seq(
        "F0c0 F1c0 F2c0 F3c0 F0c1 B0c1 F1c1 B1c1 F2c1 B2c1 F3c1 B3c1 F4c0 B0c0"
    )


def test_interleaved_over_two_stages_matches_hand_derivation() -> None:
    # Megatron with overlapped p2p (its default) interleaves over p = 2. Warm-up
    # 2(p − r − 1) + (v − 1)p = 4 and 2; forwards in groups of p per chunk (F0c0 F1c0 F0c1 F1c1
    # F2c0 …), backwards in the same groups from the last chunk (B0c1 B1c1 B0c0 B1c0 B2c1 …),
    # one forward then one backward in the steady state.
    sched = build_schedule(2, 4, 2)
    assert labels(sched.stages[0]) == seq(
        "F0c0 F1c0 F0c1 F1c1 F2c0 B0c1 F3c0 B1c1 F2c1 B0c0 F3c1 B1c0 B2c1 B3c1 B2c0 B3c0"
    )
    assert labels(sched.stages[1]) == seq(
        "F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 F2c0 B0c0 F3c0 B1c0 F2c1 B2c1 F3c1 B3c1 B2c0 B3c0"
    )


def test_interleaved_last_ops_are_first_chunk_backwards() -> None:
    sched = build_schedule(4, 8, 2)
    for ops in sched.stages:
        assert labels(ops)[-4:] == seq("B4c0 B5c0 B6c0 B7c0")


def test_1f1b_with_fewer_microbatches_than_stages_caps_warmup() -> None:
    sched = build_schedule(4, 2)
    assert labels(sched.stages[0]) == seq("F0 F1 B0 B1")
    assert [op.phase for op in sched.stages[0]] == ["warmup", "warmup", "cooldown", "cooldown"]
    assert labels(sched.stages[3]) == seq("F0 B0 F1 B1")
    assert [num_warmup(4, 2, 1, r) for r in range(4)] == [2, 2, 1, 0]


def test_single_stage_is_plain_gradient_accumulation() -> None:
    sched = build_schedule(1, 3)
    assert labels(sched.stages[0]) == seq("F0 B0 F1 B1 F2 B2")
    assert all(op.recv is None and op.send is None for op in sched.stages[0])


# --------------------------------------------------------------------------- phases and warm-up


def test_warmup_table_from_megatron_formula() -> None:
    assert [num_warmup(4, 8, 1, r) for r in range(4)] == [3, 2, 1, 0]
    assert [num_warmup(4, 8, 2, r) for r in range(4)] == [10, 8, 6, 4]
    assert [num_warmup(4, 4, 3, r) for r in range(4)] == [12, 12, 10, 8]  # capped at m·v


@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 1), (4, 3, 1), (4, 8, 2), (5, 10, 3)])
def test_phases_are_labelled_in_order(p: int, m: int, v: int) -> None:
    sched = build_schedule(p, m, v)
    for rank, ops in enumerate(sched.stages):
        phases = [op.phase for op in ops]
        warm = megatron_warmup(p, m, v, rank)
        steady = 2 * (m * v - warm)
        assert phases == ["warmup"] * warm + ["steady"] * steady + ["cooldown"] * warm
        assert all(op.kind == "F" for op in ops[:warm])
        assert [op.kind for op in ops[warm : warm + steady]] == ["F", "B"] * (steady // 2)
        assert all(op.kind == "B" for op in ops[warm + steady :])


# --------------------------------------------------------------------------- links


def test_1f1b_links_point_to_neighbours() -> None:
    sched = build_schedule(3, 2)
    f0 = sched.stages[0][0]
    assert (f0.kind, f0.recv) == ("F", None)
    assert f0.send == Link("fwd", 0, 0, 0, 1, 0)
    mid_b = next(op for op in sched.stages[1] if op.kind == "B")
    assert mid_b.recv == Link("bwd", 0, 2, 0, 1, 0)
    assert mid_b.send == Link("bwd", 0, 1, 0, 0, 0)
    last_b = next(op for op in sched.stages[2] if op.kind == "B")
    assert last_b.recv is None  # the loss is local to the last stage


def test_interleaved_links_wrap_from_last_stage_to_next_chunk() -> None:
    sched = build_schedule(4, 4, 2)
    f_c1 = next(op for op in sched.stages[0] if op.kind == "F" and op.chunk == 1)
    assert f_c1.recv == Link("fwd", f_c1.microbatch, 3, 0, 0, 1)
    last_f = next(op for op in sched.stages[3] if op.kind == "F" and op.chunk == 0)
    assert last_f.send == Link("fwd", last_f.microbatch, 3, 0, 0, 1)
    b_c1 = next(op for op in sched.stages[0] if op.kind == "B" and op.chunk == 1)
    assert b_c1.send == Link("bwd", b_c1.microbatch, 0, 1, 3, 0)
    end = next(op for op in sched.stages[3] if op.kind == "F" and op.chunk == 1)
    assert end.send is None


@pytest.mark.parametrize(("p", "m", "v"), [(1, 4, 1), (2, 3, 1), (5, 7, 1), *valid_interleaved()])
def test_every_send_has_exactly_one_receive(p: int, m: int, v: int) -> None:
    sched = build_schedule(p, m, v)
    links = validate_schedule(sched)
    # One activation and one gradient per micro-batch per boundary between virtual stages.
    assert len(links) == len(set(links)) == 2 * m * (p * v - 1)
    sends = sorted(op.send for ops in sched.stages for op in ops if op.send is not None)
    recvs = sorted(op.recv for ops in sched.stages for op in ops if op.recv is not None)
    assert sends == recvs == sorted(links)


def test_validate_rejects_missing_op() -> None:
    sched = build_schedule(2, 2)
    broken = replace(sched, stages=(sched.stages[0][:-1], sched.stages[1]))
    with pytest.raises(ValueError, match="stage 0 must run each forward and backward once"):
        validate_schedule(broken)


def test_validate_rejects_wrong_link() -> None:
    sched = build_schedule(2, 1)
    f0 = sched.stages[1][0]
    wrong = replace(f0, recv=Link("fwd", 0, 0, 0, 0, 0))
    broken = replace(sched, stages=(sched.stages[0], (wrong, *sched.stages[1][1:])))
    with pytest.raises(ValueError, match="do not match its virtual stage"):
        validate_schedule(broken)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("p", "m", "v", "message"),
    [
        (1, 4, 2, "at least 2 pipeline stages"),
        (4, 6, 2, "m=6 is not a multiple of p=4"),
        (4, 2, 2, "m=2 is not a multiple of p=4"),
        (0, 4, 1, "pipeline p must be a positive integer"),
        (4, 0, 1, "pipeline m must be a positive integer"),
        (4, 4, 0, "pipeline v must be a positive integer"),
    ],
)
def test_bad_sizes_raise_value_error(p: int, m: int, v: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_schedule(p, m, v)
    if "positive" in message:  # num_warmup counts; only build_schedule checks Megatron's rules
        with pytest.raises(ValueError, match=message):
            num_warmup(p, m, v, 0)


def test_schedule_needs_one_op_list_per_stage() -> None:
    with pytest.raises(ValueError, match="needs 3 op lists, got 1"):
        Schedule(p=3, m=1, v=1, stages=((),))


def test_rank_out_of_range() -> None:
    with pytest.raises(ValueError, match=r"stage rank must be in 0\.\.1"):
        in_flight(build_schedule(2, 2), 2)
    with pytest.raises(ValueError, match=r"stage rank must be in 0\.\.3"):
        num_warmup(4, 4, 1, -1)


# --------------------------------------------------------------------------- in flight


@pytest.mark.parametrize("p", range(1, 9))
def test_in_flight_1f1b_is_min_p_minus_r_m(p: int) -> None:
    for m in range(1, 33):
        sched = build_schedule(p, m)
        assert [in_flight(sched, r) for r in range(p)] == [min(p - r, m) for r in range(p)]


@pytest.mark.parametrize(("p", "m", "v"), valid_interleaved())
def test_in_flight_interleaved_is_warmup_plus_one(p: int, m: int, v: int) -> None:
    sched = build_schedule(p, m, v)
    for r in range(p):
        # At the peak, Megatron-Core's warm-up + 1 chunk-micro-batches, capped at m·v.
        assert in_flight(sched, r) == min(megatron_warmup(p, m, v, r) + 1, m * v)


def test_held_at_peak_splits_in_flight_by_chunk() -> None:
    sched = build_schedule(4, 8, 2)
    # Rank 0 after its 11th forward (F6c0): chunk 0 holds micro-batches 0..6, chunk 1 0..3.
    assert held_at_peak(sched, 0) == (7, 4)
    assert sum(held_at_peak(sched, 0)) == in_flight(sched, 0)
    # Rank 3 peaks right after F0c1: micro-batches 0..3 of chunk 0 and 0 of chunk 1. Weighting
    # chunk 0 heavily moves the peak to after F4c0 (just before B0c0), chunk 1 then empty.
    assert held_at_peak(sched, 3) == (4, 1)
    assert held_at_peak(sched, 3, (100, 1)) == (5, 0)
    with pytest.raises(ValueError, match="one weight per chunk"):
        held_at_peak(sched, 0, (1,))


def test_held_at_peak_agrees_with_memory_model() -> None:
    """Cross-check the memory model's closed-form peak with the op-list walk."""
    for p, m, v in [*valid_interleaved(), (4, 2, 1), (4, 8, 1), (8, 3, 1)]:
        sched = build_schedule(p, m, v)
        for r in range(p):
            for weights in [(1,) * v, tuple(range(1, v + 1)), tuple(range(v, 0, -1))]:
                assert closed_form_in_flight(p, v, m, r, weights) == held_at_peak(sched, r, weights)


# --------------------------------------------------------------------------- properties


@settings(max_examples=60, deadline=None)
@given(configs())
def test_property_each_stage_runs_every_op_once_forward_first(cfg: tuple[int, int, int]) -> None:
    p, m, v = cfg
    sched = build_schedule(p, m, v)
    validate_schedule(sched)
    for ops in sched.stages:
        position = {(op.kind, op.microbatch, op.chunk): i for i, op in enumerate(ops)}
        assert len(position) == len(ops) == 2 * m * v
        for mb in range(m):
            for chunk in range(v):
                assert position[("F", mb, chunk)] < position[("B", mb, chunk)]


@settings(max_examples=60, deadline=None)
@given(configs())
def test_property_in_flight_matches_formula(cfg: tuple[int, int, int]) -> None:
    p, m, v = cfg
    sched = build_schedule(p, m, v)
    for r in range(p):
        # The peak is at the first backward: the warm-up's forwards plus the first steady one
        # (none when every forward is warm-up), counted in the op list and held to Megatron's
        # count.
        ops = sched.stages[r]
        expected = min(megatron_warmup(p, m, v, r) + 1, m * v)
        assert leading_forwards(ops) == expected
        assert in_flight(sched, r) == expected
        assert sum(held_at_peak(sched, r)) == expected
