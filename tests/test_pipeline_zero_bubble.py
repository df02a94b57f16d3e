"""Schedules that split the backward (ZB-H1, DualPipeV) and Megatron's combined 1F1B, held to
their sources: the exact simulation against each one's published closed form, their op lists
against the reference implementation's steps worked by hand, and the spec-to-plan path.

Sources: Qi et al. 2024, "Zero Bubble Pipeline Parallelism" (ICLR, arXiv 2401.10241) §2.1 —
ZB-H1's bubble (p − 1)(F + B − W) against 1F1B's (p − 1)(F + B + W), peak memory no higher than
1F1B's (p micro-batches); deepseek-ai/DualPipe README — DualPipe's bubble
(PP/2 − 1)(F&B + B − 3W) with B the whole backward, activations PP + 1 per rank, DualPipeV the
same for the same number of stages on PP/2 ranks — and dualpipe/dualpipev.py's DualPipeV.step.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planc.compile.frameworks import deepspeed_config, megatron_arguments, torchtitan_settings
from planc.compile.plan import pipeline_record, plan_json
from planc.perf.step import StageInputs, StepInputs, overlaps, pipeline_step
from planc.pipeline import registry
from planc.pipeline.schedule import (
    dualpipe,
    dualpipe_v,
    held_at_peak,
    in_flight,
    one_f_one_b,
    validate_schedule,
    zb_h1,
    zb_v,
)
from planc.pipeline.timeline import Timeline, simulate
from planc.verify import render, verify_text
from planc.verify.pipeline import expand_dualpipe_v, expand_zb_h1
from planc.vocab import ScheduleKind

from conftest import check_overlay, compiled, job_of, rules_fired

BASE = "llama3-70b-8x8.yaml"  # 80 layers, tensor 8, pipeline 4, data 2, m = 256

times = st.integers(min_value=1, max_value=4)


# ----------------------------------------------------------------------------- ZB-H1


@settings(deadline=None, max_examples=40)
@given(p=st.integers(2, 8), extra=st.integers(0, 12), f=times, b=times, w=times)
def test_zb_h1_bubble_is_the_papers(p: int, extra: int, f: int, b: int, w: int) -> None:
    # The paper's setting: m ≥ p and the weight gradient no longer than F or B.
    m = p + extra
    w = min(w, f, b)
    timeline = simulate(zb_h1(p, m), f, b, 0, w)
    assert timeline.makespan == m * (f + b + w) + (p - 1) * (f + b - w)
    # 1F1B with the same whole backward B + W idles (p − 1)(F + B + W).
    flush = simulate(one_f_one_b(p, m), f, b + w, 0)
    assert flush.makespan == m * (f + b + w) + (p - 1) * (f + b + w)


@settings(deadline=None, max_examples=40)
@given(p=st.integers(1, 8), m=st.integers(1, 30))
def test_zb_h1_holds_no_more_than_1f1b(p: int, m: int) -> None:
    # 1F1B's peak is stage 0's min(p, m) micro-batches; ZB-H1 holds that on every stage.
    schedule = zb_h1(p, m)
    validate_schedule(schedule)
    assert [in_flight(schedule, r) for r in range(p)] == [min(p, m)] * p
    for r in range(p):
        assert registry.in_flight(ScheduleKind.ZB_H1, p, 1, m, r, (1,)) == (
            (1,) if p == 1 else (min(p, m),)
        )


@pytest.mark.parametrize(("p", "m"), [(2, 2), (4, 8), (8, 8), (8, 40)])
def test_zb_h1_bubble_fraction_at_equal_ops(p: int, m: int) -> None:
    # F = B = W = 1: (p − 1) idle against 3m of work.
    timeline = simulate(zb_h1(p, m), 1, 1, 0, 1)
    assert timeline.bubble_fraction == Fraction(p - 1, 3 * m + p - 1)
    assert registry.bubble_fraction(ScheduleKind.ZB_H1, p, m, 1) == pytest.approx(
        (p - 1) / (3 * m + p - 1)
    )


def test_zb_h1_order_by_hand() -> None:
    # p = 2, m = 3. Stage 0: one warm-up forward, its W right after each B (lag 0). Stage 1: no
    # warm-up, each W one backward late, the last at the end.
    labels = [[f"{op.kind}{op.microbatch}" for op in ops] for ops in zb_h1(2, 3).stages]
    assert labels[0] == ["F0", "F1", "B0", "W0", "F2", "B1", "W1", "B2", "W2"]
    assert labels[1] == ["F0", "B0", "F1", "B1", "W0", "F2", "B2", "W1", "W2"]


# ----------------------------------------------------------------------------- DualPipeV


@settings(deadline=None, max_examples=40)
@given(p=st.integers(1, 8), extra=st.integers(0, 16), f=times, w=times)
def test_dualpipe_v_bubble_is_the_readmes(p: int, extra: int, f: int, w: int) -> None:
    # DualPipe README: (PP/2 − 1)(F&B + B_full − 3W) for PP = 2p stages on p ranks; the
    # simulator gives the overlapped pair no credit, F&B = F + B_full. Work per rank: two chunks
    # of m micro-batches, 2m(F + B_full). The closed form takes the forward and the
    # input-gradient backward equally long (F = B); with them unequal the critical path moves
    # (by one unit either way at p = 2, F = 1, B = 2 or F = 2, B = 1) and the simulation is the
    # answer, as planc's step model uses it.
    m = 2 * p + extra
    b = f
    w = min(w, b)
    whole = b + w
    timeline = simulate(dualpipe_v(p, m), f, b, 0, w)
    assert timeline.makespan == 2 * m * (f + whole) + (p - 1) * ((f + whole) + whole - 3 * w)


@settings(deadline=None, max_examples=40)
@given(p=st.integers(1, 8), extra=st.integers(0, 16))
def test_dualpipe_v_holds_pp_plus_one(p: int, extra: int) -> None:
    # README: activations PP + 1 per rank; PP = 2p stages of one chunk each.
    m = 2 * p + extra
    schedule = dualpipe_v(p, m)
    validate_schedule(schedule)
    for r in range(p):
        assert in_flight(schedule, r) == 2 * p + 1
        for weights in ((1, 1), (1, 3), (3, 1)) if p > 1 else ():  # one rank: no pipeline
            assert registry.in_flight(ScheduleKind.DUALPIPE_V, p, 2, m, r, weights) == (
                held_at_peak(schedule, r, weights)
            )


def _labels(p: int, m: int, r: int) -> list[str]:
    """Rank r's ops: F/B/W, chunk, micro-batch; a B that carries its W (not zero-bubble) is BW."""
    out = []
    for op in dualpipe_v(p, m).stages[r]:
        kind = "BW" if op.whole else op.kind
        out.append(f"{kind}{op.chunk}.{op.microbatch}")
    return out


def test_dualpipe_v_order_by_hand() -> None:
    # dualpipev.py DualPipeV.step with 2 ranks and 4 micro-batches, step by step.
    # Rank 0: step 1 F0 ×2; step 2 (F0 F1) ×1; step 3 (B1 zero-bubble, W, F1) ×1; step 4
    # (F0 B1 F1 B0) ×1; step 5 (B1 F1 B0) ×1; step 6 i = 0: B1, then zero-bubble from B0 on
    # (even rank); step 7 (W, B0 zero-bubble) ×1; step 8 W ×1.
    assert _labels(2, 4, 0) == [
        "F0.0", "F0.1", "F0.2", "F1.0", "B1.0", "W1.0", "F1.1",
        "F0.3", "BW1.1", "F1.2", "BW0.0",
        "BW1.2", "F1.3", "BW0.1",
        "BW1.3", "B0.2",
        "W0.2", "B0.3",
        "W0.3",
    ]  # fmt: skip
    # Rank 1: step 2 (F0 F1) ×2; step 4 ×2; step 6 i = 0 whole, i = 1 zero-bubble from B1 on
    # (odd rank); step 8 W ×2, first deferred first.
    assert _labels(2, 4, 1) == [
        "F0.0", "F1.0", "F0.1", "F1.1",
        "F0.2", "BW1.0", "F1.2", "BW0.0", "F0.3", "BW1.1", "F1.3", "BW0.1",
        "BW1.2", "BW0.2", "B1.3", "B0.3",
        "W1.3", "W0.3",
    ]  # fmt: skip


@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("factor", [2, 3])
def test_dualpipe_v_builder_agrees_with_verifys_reading(p: int, factor: int) -> None:
    # Two readings of dualpipev.py written apart (the planner's builder, verify's expansion).
    m = factor * p
    for r in range(p):
        ops = dualpipe_v(p, m).stages[r]
        assert [(op.kind, op.microbatch, op.chunk) for op in ops] == expand_dualpipe_v(p, m, r)
    for r in range(p):
        ops = zb_h1(p, m).stages[r]
        assert [(op.kind, op.microbatch, op.chunk) for op in ops] == expand_zb_h1(p, m, r)


def test_dualpipe_v_layers_are_v_shaped() -> None:
    # 80 layers over 4 ranks × 2 chunks of 10: rank r holds blocks r and 7 − r.
    lay = job_of(
        {
            "parallelism": {"pipeline_schedule": "dualpipev", "virtual_stages": 2},
            "training": {"framework": "fsdp2"},
        },
        BASE,
    ).layout
    assert lay.chunks == (
        ((0, 10), (70, 80)),
        ((10, 20), (60, 70)),
        ((20, 30), (50, 60)),
        ((30, 40), (40, 50)),
    )


def test_dualpipe_v_stage_layers_follow_the_v() -> None:
    # stage_layers [18, 22, 22, 18] in halves: rank r's chunks are virtual stages r and 7 − r,
    # 9 or 11 layers each; run order 9, 11, 11, 9 | 9, 11, 11, 9.
    lay = job_of(
        {
            "parallelism": {
                "pipeline_schedule": "dualpipev",
                "virtual_stages": 2,
                "stage_layers": [18, 22, 22, 18],
            },
            "training": {"framework": "fsdp2"},
        },
        BASE,
    ).layout
    assert lay.chunks == (
        ((0, 9), (71, 80)),
        ((9, 20), (60, 71)),
        ((20, 31), (49, 60)),
        ((31, 40), (40, 49)),
    )
    assert lay.stage_layers == (18, 22, 22, 18)
    assert lay.last_stage == 0


def test_dualpipe_v_plan_compiles_and_verifies() -> None:
    overlay = {
        "parallelism": {"pipeline_schedule": "dualpipev", "virtual_stages": 2, "zero_stage": 3},
        "training": {"framework": "fsdp2", "global_batch": 16},
        "rules": {"max_bubble": 0.5},
    }
    plan = compiled(job_of(overlay, BASE))
    pattern = pipeline_record(plan.job)
    # m = 8 on p = 4: 2p = 8 forwards first, m − 2p + r + 1 main steps, p + r + 2 backwards last.
    assert pattern["stages"] == [
        {"warmup": 8, "steady": 1 + r, "cooldown": 6 + r} for r in range(4)
    ]
    parallelism, _, _ = torchtitan_settings(plan)
    assert parallelism["pipeline_parallel_schedule"] == "DualPipeV"
    _, notes = deepspeed_config(plan)
    assert any("and no DualPipeV schedule" in note for note in notes)
    result = verify_text(plan_json(plan))
    assert result.ok, render(result)


# ----------------------------------------------------------------------------- ZB-V


@settings(deadline=None, max_examples=30)
@given(p=st.integers(1, 8), extra=st.integers(0, 12), f=times)
def test_zb_v_idles_only_the_fill(p: int, extra: int, f: int) -> None:
    # PyTorch's ScheduleZBVZeroBubble: "zero bubble" when F = B = W. What is left is the fill no
    # schedule avoids: the last rank's first forward waits for the p − 1 before it. Work per
    # rank: two chunks × m × (F + B + W). Independent of m.
    m = 2 * p - 1 + extra
    timeline = simulate(zb_v(p, m), f, f, 0, f)
    assert timeline.makespan == 2 * m * 3 * f + (p - 1) * f
    # Memory 1× of 1F1B: 2p chunk-micro-batches of half a stage each = p micro-batches.
    assert [in_flight(timeline.schedule, r) for r in range(p)] == [2 * p] * p


@settings(deadline=None, max_examples=40)
@given(
    p=st.integers(2, 8),
    extra=st.integers(0, 10),
    w0=st.integers(1, 100),
    w1=st.integers(1, 100),
)
def test_zb_v_in_flight_closed_form_equals_the_op_walk(p: int, extra: int, w0: int, w1: int) -> None:
    m = 2 * p - 1 + extra
    schedule = zb_v(p, m)
    for r in range(p):
        walked = held_at_peak(schedule, r, (w0, w1))
        assert registry.in_flight(ScheduleKind.ZB_V, p, 2, m, r, (w0, w1)) == walked


def test_zb_v_order_by_hand() -> None:
    # ScheduleZBVZeroBubble._calculate_single_rank_operations, p = 2, m = 3, worked through.
    def labels(r: int) -> list[str]:
        return [f"{op.kind}{op.chunk}.{op.microbatch}" for op in zb_v(2, 3).stages[r]]

    # Rank 0: F0 × 3; (F1 B1 W1) × 2; one round without F0 (all 3 ran); (B0 W0) × 2.
    assert labels(0) == [
        "F0.0", "F0.1", "F0.2", "F1.0", "B1.0", "W1.0", "F1.1", "B1.1", "W1.1",
        "B0.0", "W0.0", "F1.2", "B1.2", "W1.2", "B0.1", "W0.1", "B0.2", "W0.2",
    ]  # fmt: skip
    # Rank 1: F0; (F1 F0); (F1 B1 W1); one full round; (B0 B1); (B0 W0); W1 left, W0 left.
    assert labels(1) == [
        "F0.0", "F1.0", "F0.1", "F1.1", "B1.0", "W1.0",
        "F0.2", "B0.0", "W0.0", "F1.2", "B1.1", "W1.1",
        "B0.1", "B1.2", "B0.2", "W0.1", "W1.2", "W0.2",
    ]  # fmt: skip


def test_zb_v_plan_compiles_and_verifies() -> None:
    overlay = {
        "parallelism": {"pipeline_schedule": "zbv", "virtual_stages": 2, "zero_stage": 3},
        "training": {"framework": "fsdp2", "global_batch": 14},
        "rules": {"max_bubble": 0.5},
    }
    plan = compiled(job_of(overlay, BASE))
    # m = 7 = 2p − 1 on p = 4: 2p forwards first, m − p rounds, p + r + 1 backwards last.
    assert pipeline_record(plan.job)["stages"] == [
        {"warmup": 8, "steady": 3, "cooldown": 5 + r} for r in range(4)
    ]
    parallelism, _, _ = torchtitan_settings(plan)
    assert parallelism["pipeline_parallel_schedule"] == "ZBVZeroBubble"
    result = verify_text(plan_json(plan))
    assert result.ok, render(result)
    few = check_overlay({**overlay, "training": {"framework": "fsdp2", "global_batch": 12}}, BASE)
    (finding,) = [f for f in few.findings if f.rule == "PLC010"]
    assert "needs m ≥ 2 × pipeline − 1 = 7 micro-batches, got m = 6" in finding.message


# ----------------------------------------------------------------------------- DualPipe


@settings(deadline=None, max_examples=30)
@given(half=st.integers(1, 4), extra=st.integers(0, 8), f=times, w=times)
def test_dualpipe_bubble_is_the_readmes(half: int, extra: int, f: int, w: int) -> None:
    # DualPipe README: (PP/2 − 1)(F&B + B − 3W), B the whole backward, F&B = F + B without
    # overlap credit; each rank runs m/2 micro-batches on each of its two chunks: m(F + B) of
    # work. As for DualPipeV the closed form takes F equal to the input-gradient backward.
    p, m = 2 * half, 2 * (2 * half + extra)  # p even, m even, m ≥ 2p
    b = f
    w = min(w, b)
    whole = b + w
    timeline = simulate(dualpipe(p, m), f, b, 0, w)
    assert timeline.makespan == m * (f + whole) + (p // 2 - 1) * ((f + whole) + whole - 3 * w)


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (8, 16), (8, 24)])
def test_dualpipe_holds_pp_plus_one_and_runs_each_micro_batch_one_way(p: int, m: int) -> None:
    schedule = dualpipe(p, m)
    validate_schedule(schedule)
    assert [in_flight(schedule, r) for r in range(p)] == [p + 1] * p  # README: PP + 1
    for ops in schedule.stages:
        # Micro-batches 0 … m/2 − 1 on chunk 0 (stage r of rank 0 → p − 1), the rest on chunk 1.
        assert {(op.microbatch < m // 2, op.chunk) for op in ops} == {(True, 0), (False, 1)}


def test_the_landscape_worked_example() -> None:
    # p = 16, F = 1, B_full = 2, W = 1 (B = 1 input-gradient), F&B = F + B_full: idle per stage
    # 1F1B (p − 1)(F + B_full) = 45, ZB-H1 (p − 1)(F + B − W) = 15, DualPipe
    # (p/2 − 1)(F&B + B_full − 3W) = 14 (derived in the landscape, §4).
    m = 32

    def idle(timeline: Timeline, work: int) -> Fraction:
        return timeline.makespan - work

    assert idle(simulate(one_f_one_b(16, m), 1, 2, 0), 3 * m) == 45
    assert idle(simulate(zb_h1(16, m), 1, 1, 0, 1), 3 * m) == 15
    assert idle(simulate(dualpipe(16, m), 1, 1, 0, 1), 3 * m) == 14


# ----------------------------------------------------------------------------- bounded work


@pytest.mark.parametrize(
    ("kind", "v"), [(ScheduleKind.ZB_H1, 1), (ScheduleKind.DUALPIPE_V, 2), (ScheduleKind.ZB_V, 2)]
)
@pytest.mark.parametrize(("p", "m"), [(2, 8), (4, 8), (4, 13), (8, 16)])
def test_closed_ends_equal_the_simulation_at_equal_ops(
    kind: ScheduleKind, v: int, p: int, m: int
) -> None:
    # F = B = W = 1 on every chunk: the simulation, and the closed form the bounded run falls
    # back on for p in the hundreds (whole backward 2).
    entry = registry.definition(kind)
    assert entry.closed_ends is not None
    ones = [1.0] * (p * v)
    simulated = registry.run(kind, p, m, v, ones, ones, 0.0, ones)
    assert simulated.method == "simulated"
    closed = entry.closed_ends(p, m, v, ones, [2.0] * (p * v), 0.0)
    assert max(closed) == pytest.approx(max(simulated.stage_end_s))


# ----------------------------------------------------------------------------- rules


def test_dualpipe_v_needs_two_chunks_and_twice_the_stages() -> None:
    one = check_overlay(
        {"parallelism": {"pipeline_schedule": "dualpipev"}, "training": {"framework": "fsdp2"}},
        BASE,
    )
    (finding,) = [f for f in one.findings if f.rule == "PLC010"]
    assert "runs two model chunks per stage" in finding.message
    # global_batch 8 over data 2: m = 4 < 2 × 4.
    few = check_overlay(
        {
            "parallelism": {"pipeline_schedule": "dualpipev", "virtual_stages": 2},
            "training": {"framework": "fsdp2", "global_batch": 8},
        },
        BASE,
    )
    (finding,) = [f for f in few.findings if f.rule == "PLC010"]
    assert "needs m ≥ 2 × pipeline = 8 micro-batches, got m = 4" in finding.message
    assert "global_batch at least micro_batch × data × 2 × pipeline = 16" in finding.fix


def test_zb_h1_has_no_framework() -> None:
    result = check_overlay({"parallelism": {"pipeline_schedule": "zb-h1"}}, BASE)
    (finding,) = [f for f in result.findings if f.rule == "PLC030"]
    assert "no framework planc emits runs it" in finding.message
    assert finding.fix == "use another pipeline_schedule"


def test_combined_1f1b_needs_experts() -> None:
    result = check_overlay(
        {"parallelism": {"pipeline_schedule": "combined-1f1b", "virtual_stages": 2}}, BASE
    )
    (finding,) = [f for f in result.findings if f.rule == "PLC030"]
    assert "the model has no experts" in finding.message


MIXTRAL_COMBINED = {
    "parallelism": {"pipeline_schedule": "combined-1f1b", "virtual_stages": 2},
    "rules": {"max_bubble": 0.5},
}


def test_combined_1f1b_runs_on_megatron_with_its_flag() -> None:
    base = "mixtral-8x7b-64xh100.yaml"
    assert "PLC030" not in rules_fired(check_overlay(MIXTRAL_COMBINED, base))
    args, _ = megatron_arguments(compiled(job_of(MIXTRAL_COMBINED, base)))
    assert "--overlap-moe-expert-parallel-comm" in args
    full = {**MIXTRAL_COMBINED, "training": {"recompute": "full"}}
    (finding,) = [f for f in check_overlay(full, base).findings if f.rule == "PLC030"]
    assert "full recomputation" in finding.message


# ----------------------------------------------------------------------------- the step model


def _moe_stage(v: int) -> StageInputs:
    # Per chunk forward 1 s, backward 2 s, expert exchanges 1.5 s in the forward and 0.5 s in
    # the backward, of which 0.25 and 0.125 s stay exposed when paired.
    return StageInputs(
        forward_s=(1.0,) * v,
        backward_s=(2.0,) * v,
        tp_forward_s=(0.0,) * v,
        tp_backward_s=(0.0,) * v,
        ep_forward_s=(1.5,) * v,
        ep_backward_s=(0.5,) * v,
        ep_paired_forward_s=(0.25,) * v,
        ep_paired_backward_s=(0.125,) * v,
    )


def _inputs(schedule: ScheduleKind, usage: float = 0.0, m: int = 6) -> StepInputs:
    # 3 stages × 2 chunks of `_moe_stage`.
    return StepInputs(
        stages=(_moe_stage(2),) * 3,
        m=m,
        v=2,
        p2p_s=0.0,
        schedule=schedule,
        ep_processor_usage=usage,
    )


def _alone_passes(p: int, m: int, v: int, rank: int) -> int:
    """The forwards (and as many backwards) combined 1F1B runs alone on `rank`: its warm-up,
    Megatron-Core's get_pp_rank_microbatches, (p − r − 1)·2 + (v − 1)·p, one more with
    overlap_moe_expert_parallel_comm, capped at m·v; the cool-down runs as many backwards."""
    return min((p - rank - 1) * 2 + (v - 1) * p + 1, m * v)


def test_combined_1f1b_hides_what_the_paired_layers_hide() -> None:
    # Stage 0 runs 8 of its 12 forwards and 8 of its 12 backwards alone (warm-up and
    # cool-down): their whole exchange is exposed; the 4 paired steps leave 0.25 + 0.125 s.
    assert _alone_passes(3, 6, 2, 0) == 8
    step = pipeline_step(_inputs(ScheduleKind.COMBINED_1F1B))
    paired = 12 - 8
    assert step.ep_exposed_s == pytest.approx(8 * (1.5 + 0.5) + paired * 0.375)
    assert step.ep_hidden_s == pytest.approx(paired * (2.0 - 0.375))
    # Per virtual stage (chunk·p + stage): each stage's two chunks together run its warm-up.
    alone = step.pipeline.alone
    for r in range(3):
        n = _alone_passes(3, 6, 2, r)
        assert (alone[r][0] + alone[3 + r][0], alone[r][1] + alone[3 + r][1]) == (n, n)
    serial = pipeline_step(_inputs(ScheduleKind.INTERLEAVED_1F1B))
    assert serial.ep_hidden_s == 0.0
    assert serial.ep_exposed_s == pytest.approx(6 * 2 * 2.0)
    # Too few micro-batches for a steady state (m·v ≤ the warm-up): nothing pairs.
    short = pipeline_step(_inputs(ScheduleKind.COMBINED_1F1B, m=3))
    assert short.ep_hidden_s == 0.0
    assert short.ep_exposed_s == pytest.approx(3 * 2 * 2.0)


def test_a_hidden_exchange_slows_the_compute_beside_it() -> None:
    # A tenth of the compute lost while the 1.625 s hidden per paired chunk pass run: stage 0's
    # compute grows by 4 · 0.1625 s (its 4 paired steps).
    fast = pipeline_step(_inputs(ScheduleKind.COMBINED_1F1B))
    slowed = pipeline_step(_inputs(ScheduleKind.COMBINED_1F1B, usage=0.1))
    assert slowed.compute_s - fast.compute_s == pytest.approx(4 * 0.1625)
    assert slowed.step_time_s > fast.step_time_s
    alone = slowed.pipeline.alone
    found = overlaps(_inputs(ScheduleKind.COMBINED_1F1B, 0.1), 0, 0.0, 0.0, alone)
    (ep,) = [o for o in found if o.kind == "ep"]
    assert ep.slowdown_s == pytest.approx(0.1 * 4 * 1.625)


def test_combined_1f1b_without_a_pipeline_pairs_each_forward_with_the_backward_before() -> None:
    # Megatron-Core combined_1f1b_schedule_for_no_pipelining, m = 3: F0 alone; F1 with B0, F2
    # with B1; B2 alone.
    (ops,) = registry.build(ScheduleKind.COMBINED_1F1B, 1, 3, 1).stages
    assert [(op.kind, op.microbatch) for op in ops] == [
        ("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("B", 2)
    ]
    no_pipeline = {
        "parallelism": {"pipeline": 1, "data": 64, "pipeline_schedule": "combined-1f1b"}
    }
    assert "PLC010" not in rules_fired(check_overlay(no_pipeline, "mixtral-8x7b-64xh100.yaml"))


@pytest.mark.parametrize(
    ("layout", "field", "words"),
    [
        # A pipeline without chunks: Megatron-Core asserts virtual stages with the overlap.
        ({"pipeline": 4, "virtual_stages": 1}, "pipeline_schedule", "or no pipeline at all"),
        # Chunks without a pipeline.
        ({"pipeline": 1, "data": 32, "virtual_stages": 2}, "virtual_stages", "but pipeline = 1"),
    ],
)
def test_combined_1f1b_refuses_a_pipeline_without_chunks_and_chunks_without_one(
    layout: dict[str, int], field: str, words: str
) -> None:
    overlay = {"parallelism": {**layout, "pipeline_schedule": "combined-1f1b"}}
    found = [
        f
        for f in check_overlay(overlay, "mixtral-8x7b-64xh100.yaml").findings
        if f.rule == "PLC010"
    ]
    assert found and words in found[0].message, found
    assert found[0].field == f"parallelism.{field}"


def test_combined_1f1b_without_a_pipeline_runs_its_first_forward_and_last_backward_alone() -> None:
    # p = 1, m = 3: F0 alone, (F1, B0) and (F2, B1) paired, B2 alone. Paired passes take
    # 1 + 0.25 and 2 + 0.125 s; the two alone take their whole exchange, 1 + 1.5 and 2 + 0.5 s.
    inputs = StepInputs(
        stages=(_moe_stage(1),), m=3, v=1, p2p_s=0.0, schedule=ScheduleKind.COMBINED_1F1B
    )
    step = pipeline_step(inputs)
    assert step.pipeline.alone == ((1, 1),)
    assert step.step_time_s == pytest.approx(2 * (1.25 + 2.125) + 2.5 + 2.5)
    assert step.compute_s == pytest.approx(step.step_time_s)  # no bubble without a pipeline
    assert step.ep_exposed_s == pytest.approx(2 * 0.375 + 2.0)
    assert step.ep_hidden_s == pytest.approx(2 * 1.625)


@settings(max_examples=40, deadline=None)
@given(
    p=st.sampled_from([2, 4]),
    groups=st.integers(1, 3),
    f=st.integers(1, 5),
    b=st.integers(1, 5),
    extra_f=st.integers(0, 4),
    extra_b=st.integers(0, 4),
)
def test_passes_run_alone_take_their_own_time_and_nothing_else_moves(
    p: int, groups: int, f: int, b: int, extra_f: int, extra_b: int
) -> None:
    # Combined 1F1B (v 2): every op outside a pair is a warm-up forward or a cool-down
    # backward. Giving those their own time never shortens the step, which stays at least the
    # busiest stage's own work (its m·v pairs of passes and its alone passes' extra) and grows
    # by at most every alone pass's extra; interleaved 1F1B pairs nothing, so the same alone
    # times change nothing.
    m, v = groups * p, 2
    combined = registry.build(ScheduleKind.COMBINED_1F1B, p, m, v)
    for ops in combined.stages:
        lone = [op for i, op in enumerate(ops) if not op.paired and not (i and ops[i - 1].paired)]
        assert all((op.kind, op.phase) in {("F", "warmup"), ("B", "cooldown")} for op in lone)
    alone = (f + extra_f, b + extra_b)
    paired = simulate(combined, f, b).makespan
    longer = simulate(combined, f, b, alone=alone).makespan
    counts = [min((p - r - 1) * 2 + (v - 1) * p + 1, m * v) for r in range(p)]
    assert paired <= longer <= paired + sum(counts) * (extra_f + extra_b)
    assert longer >= m * v * (f + b) + max(counts) * (extra_f + extra_b)
    interleaved = registry.build(ScheduleKind.INTERLEAVED_1F1B, p, m, v)
    assert simulate(interleaved, f, b, alone=alone).makespan == simulate(interleaved, f, b).makespan
