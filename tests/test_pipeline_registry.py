"""Pipeline schedules by name: the registry's closed forms against the simulator, the builders'
op lists, the default choice, and `parallelism.pipeline_schedule` from spec to plan.

Expected counts are Megatron-LM's published formulas written out here
(`megatron/core/pipeline_parallel/schedules.py`: forward_backward_pipelining_without_interleaving
warms up p − r − 1 micro-batches, at most m; forward_backward_pipelining_with_interleaving
warms up 2(p − r − 1) + (v − 1)·p, at most m·v), GPipe's (PyTorch ScheduleGPipe: every forward,
then every backward; Huang et al. 2019 §2.2: m micro-batches in flight) and the bubble of
Narayanan et al. 2021 §2.2, (p − 1)/(v·m + p − 1), not values read from planc.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections import Counter
from fractions import Fraction
from typing import Any

import pytest

from planc.compile.plan import pipeline_record, plan_json
from planc.findings import Severity
from planc.pipeline import registry
from planc.pipeline.schedule import Link, Op, Schedule, held_at_peak, validate_schedule
from planc.pipeline.timeline import simulate
from planc.verify import render, verify_text
from planc.vocab import ScheduleKind, ScheduleNeed

from conftest import check_text, compiled, job_of, resolved_of, spec_text, value_position

BASE = "llama3-70b-8x8.yaml"  # 80 layers, tensor 8, pipeline 4, data 2, m = 256


def megatron_warmup(kind: ScheduleKind, p: int, m: int, v: int, r: int) -> int:
    if kind is ScheduleKind.ONE_F_ONE_B:
        return min(p - r - 1, m)
    if kind is ScheduleKind.GPIPE:
        return m  # all of them
    # Megatron's get_pp_rank_microbatches: one more with overlap_moe_expert_parallel_comm.
    extra = 1 if kind is ScheduleKind.COMBINED_1F1B else 0
    return min(2 * (p - r - 1) + (v - 1) * p + extra, m * v)


def grid(kind: ScheduleKind) -> list[tuple[int, int, int]]:
    """(p, m, v) the schedule runs on: every need of it holds."""
    if kind in (ScheduleKind.ONE_F_ONE_B, ScheduleKind.GPIPE):
        return [(p, m, 1) for p in (1, 2, 3, 4, 6) for m in (1, 2, 3, 5, 8, 13)]
    return [(p, m, v) for p in (3, 4, 5) for v in (2, 3) for m in (p, 2 * p, 3 * p)]


# The flush schedules: warm-up forwards, (forward, backward) pairs, cool-down backwards. ZB-H1
# and DualPipeV, which split the backward, are held to their sources in
# tests/test_pipeline_zero_bubble.py.
FLUSH = (
    ScheduleKind.ONE_F_ONE_B,
    ScheduleKind.INTERLEAVED_1F1B,
    ScheduleKind.GPIPE,
    ScheduleKind.COMBINED_1F1B,
)
CASES = [(kind, *size) for kind in FLUSH for size in grid(kind)]


def test_every_schedule_kind_is_registered() -> None:
    assert set(registry.SCHEDULES) == set(ScheduleKind)
    for kind, entry in registry.SCHEDULES.items():
        assert entry.kind is kind


@pytest.mark.parametrize(("kind", "p", "m", "v"), CASES)
def test_warmup_is_megatrons_and_matches_the_ops(kind: ScheduleKind, p: int, m: int, v: int) -> None:
    schedule = registry.build(kind, p, m, v)
    for r, ops in enumerate(schedule.stages):
        w = megatron_warmup(kind, p, m, v, r)
        assert registry.warmup(kind, p, m, v, r) == w
        # The op list: w forwards, then (forward, backward) pairs, then w backwards.
        kinds = "".join(op.kind for op in ops)
        assert kinds == "F" * w + "FB" * (m * v - w) + "B" * w
        assert sum(op.phase == "warmup" for op in ops) == w


@pytest.mark.parametrize(("kind", "p", "m", "v"), CASES)
def test_in_flight_closed_form_equals_the_op_walk(kind: ScheduleKind, p: int, m: int, v: int) -> None:
    schedule = registry.build(kind, p, m, v)
    for r in range(p):
        for weights in [(1,) * v, tuple(range(1, v + 1)), tuple(range(v, 0, -1))]:
            walked = held_at_peak(schedule, r, weights)
            if p > 1:  # one stage holds one micro-batch at a time: the walk says so too
                assert registry.in_flight(kind, p, v, m, r, weights) == walked
        # Unit weights: warm-up + 1 activation sets, at most every one of the m·v (one stage: 1).
        expected = 1 if p == 1 else min(megatron_warmup(kind, p, m, v, r) + 1, m * v)
        assert sum(registry.in_flight(kind, p, v, m, r, (1,) * v)) == expected


@pytest.mark.parametrize(("kind", "p", "m", "v"), CASES)
def test_bubble_closed_form_equals_the_simulator(kind: ScheduleKind, p: int, m: int, v: int) -> None:
    # Equal stages, t_b = 2·t_f, no p2p time: the exact simulation's idle share is the paper's.
    timeline = simulate(registry.build(kind, p, m, v), Fraction(1), Fraction(2), 0)
    assert timeline.bubble_fraction == Fraction(p - 1, v * m + p - 1)
    assert registry.bubble_fraction(kind, p, m, v) == pytest.approx((p - 1) / (v * m + p - 1))


@pytest.mark.parametrize(("kind", "p", "m", "v"), [c for c in CASES if c[1] > 1])
def test_closed_form_ends_equal_the_bounded_simulation(
    kind: ScheduleKind, p: int, m: int, v: int
) -> None:
    entry = registry.definition(kind)
    assert entry.closed_ends is not None
    t_f, t_b = [0.5] * (p * v), [1.0] * (p * v)
    simulated = registry.run(kind, p, m, v, t_f, t_b, 0.0)
    assert simulated.method == "simulated"
    # Every stage of an equal pipeline ends at (m + (p − 1)/v) chunk-pairs of 1.5 s: m·v chunk
    # pairs of its own and the fill and drain of p − 1 stages' chunks.
    end = 1.5 * v * m + 1.5 * (p - 1)
    assert max(simulated.stage_end_s) == pytest.approx(end)
    assert max(entry.closed_ends(p, m, v, t_f, t_b, 0.0)) == pytest.approx(end)


@pytest.mark.parametrize(("kind", "p", "m", "v"), CASES)
def test_builder_runs_every_op_once_in_dependency_order(
    kind: ScheduleKind, p: int, m: int, v: int
) -> None:
    schedule = registry.build(kind, p, m, v)
    assert (schedule.p, schedule.m, schedule.v, schedule.kind) == (p, m, v, kind)
    assert not schedule.splits_backward  # today's two schedules keep the fused backward
    want = Counter((k, mb, c) for k in "FB" for mb in range(m) for c in range(v))
    for ops in schedule.stages:
        assert Counter((op.kind, op.microbatch, op.chunk) for op in ops) == want
        seen: set[tuple[int, int]] = set()
        for op in ops:
            if op.kind == "F":
                seen.add((op.microbatch, op.chunk))
            else:  # a backward only after its own forward on this stage
                assert (op.microbatch, op.chunk) in seen
    validate_schedule(schedule)
    simulate(schedule, 1)  # raises on a deadlock


@pytest.mark.parametrize(
    ("kind", "p", "m", "v", "need"),
    [
        (ScheduleKind.ONE_F_ONE_B, 4, 8, 2, ScheduleNeed.ONE_CHUNK),
        (ScheduleKind.INTERLEAVED_1F1B, 4, 8, 1, ScheduleNeed.CHUNKS),
        (ScheduleKind.INTERLEAVED_1F1B, 1, 8, 2, ScheduleNeed.SEVERAL_STAGES),
        # Two stages interleave (Megatron with overlapped p2p, its default; PLC010 checks the rest).
        (ScheduleKind.INTERLEAVED_1F1B, 2, 8, 2, None),
        (ScheduleKind.INTERLEAVED_1F1B, 4, 6, 2, ScheduleNeed.WHOLE_ROUNDS),
        (ScheduleKind.INTERLEAVED_1F1B, 4, None, 2, None),  # m unknown: PLC005's business
        (ScheduleKind.INTERLEAVED_1F1B, 4, 8, 2, None),
        (ScheduleKind.ONE_F_ONE_B, 4, 7, 1, None),
        (ScheduleKind.GPIPE, 4, 7, 1, None),
        (ScheduleKind.GPIPE, 4, 8, 2, ScheduleNeed.ONE_CHUNK),
    ],
)
def test_first_unmet_need(
    kind: ScheduleKind, p: int, m: int | None, v: int, need: ScheduleNeed | None
) -> None:
    assert registry.unmet(kind, p, m, v) is need


def test_the_builder_refuses_a_layout_it_cannot_run() -> None:
    with pytest.raises(ValueError, match="one model chunk"):
        registry.build(ScheduleKind.ONE_F_ONE_B, 4, 8, 2)
    with pytest.raises(ValueError, match="v > 1"):
        registry.build(ScheduleKind.INTERLEAVED_1F1B, 4, 8, 1)


# --------------------------------------------------------------------------- fallbacks


def test_a_schedule_without_closed_forms_falls_back_on_its_ops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The registry, not the caller, answers from the op lists and the bounded simulator."""
    bare = {
        kind: dataclasses.replace(
            entry,
            warmup=None,
            in_flight=None,
            bubble=None,
            bubble_formula=None,
            bubble_numbers=None,
            microbatches_for=None,
            closed_ends=None,
        )
        for kind, entry in registry.SCHEDULES.items()
    }
    monkeypatch.setattr(registry, "SCHEDULES", bare)
    one, inter = ScheduleKind.ONE_F_ONE_B, ScheduleKind.INTERLEAVED_1F1B
    assert [registry.warmup(one, 4, 8, 1, r) for r in range(4)] == [3, 2, 1, 0]
    assert [registry.warmup(inter, 4, 8, 2, r) for r in range(4)] == [10, 8, 6, 4]
    assert [registry.in_flight(one, 4, 1, 8, r, (1,)) for r in range(4)] == [(4,), (3,), (2,), (1,)]
    assert registry.bubble_fraction(one, 4, 8, 1) == pytest.approx(3 / 11)
    assert registry.bubble_fraction(inter, 4, 8, 2) == pytest.approx(3 / 19)
    # Smallest m with 3/(m + 3) ≤ 10 %: m = 27; interleaved 3/(2m + 3) ≤ 10 %: m ≥ 13.5, and a
    # multiple of p = 4: 16.
    assert registry.microbatches_for(one, 4, 1, 0.1) == 27
    assert registry.microbatches_for(inter, 4, 2, 0.1) == 16
    # Past the op budget, where the closed form would be used (p = 100: even the two short runs
    # pass it), a schedule without one is extrapolated from the smallest two runs, and still
    # gives the equal-stage makespan (m + p − 1)·(t_f + t_b).
    piped = registry.run(one, 100, 400, 1, [1.0] * 100, [2.0] * 100, 0.0)
    assert (piped.method, piped.simulated_m) == ("extrapolated", (200, 300))
    assert piped.makespan_s == pytest.approx(3.0 * (400 + 99))


def test_microbatches_for_rounds_to_whole_rounds() -> None:
    # Interleaved p = 4, v = 2, 10 %: m ≥ 3·0.9/(2·0.1) = 13.5 → 14, rounded up to 16.
    assert registry.microbatches_for(ScheduleKind.INTERLEAVED_1F1B, 4, 2, 0.1) == 16
    assert registry.microbatches_for(ScheduleKind.ONE_F_ONE_B, 4, 1, 0.1) == 27


# --------------------------------------------------------------------------- weight-gradient ops


def split_two_stages() -> Schedule:
    """p = 2, m = 1 with the backward split into B (input gradient) and W (weight gradient)."""
    fwd, bwd = Link("fwd", 0, 0, 0, 1, 0), Link("bwd", 0, 1, 0, 0, 0)
    first = (
        Op("F", 0, 0, "warmup", send=fwd),
        Op("B", 0, 0, "cooldown", recv=bwd),
        Op("W", 0, 0, "cooldown"),
    )
    last = (
        Op("F", 0, 0, "steady", recv=fwd),
        Op("B", 0, 0, "steady", send=bwd),
        Op("W", 0, 0, "steady"),
    )
    return Schedule(p=2, m=1, v=1, stages=(first, last))


def test_simulator_runs_weight_gradient_ops() -> None:
    # By hand, F = B = W = 1, no p2p time: stage 1 runs F [1, 2], B [2, 3], W [3, 4]; stage 0
    # F [0, 1], waits for stage 1's B, then B [3, 4] and W [4, 5]. Makespan 5, each stage busy
    # 3: bubble 1 − 6/10.
    timeline = simulate(split_two_stages(), 1, 1, 0, 1)
    assert timeline.makespan == 5
    assert [(float(s.start), float(s.end)) for s in timeline.stages[0]] == [(0, 1), (3, 4), (4, 5)]
    assert timeline.bubble_fraction == Fraction(2, 5)
    # W frees the activations: one micro-batch is held from F to W on each stage.
    assert held_at_peak(split_two_stages(), 0) == (1,)


def test_a_split_schedule_needs_every_weight_gradient_op() -> None:
    schedule = split_two_stages()
    short = dataclasses.replace(schedule, stages=(schedule.stages[0][:2], schedule.stages[1]))
    with pytest.raises(ValueError, match="missing ops"):
        validate_schedule(short)


# --------------------------------------------------------------------------- the spec


def test_the_default_is_todays_choice() -> None:
    assert ScheduleKind.default(1) is ScheduleKind.ONE_F_ONE_B
    assert ScheduleKind.default(2) is ScheduleKind.INTERLEAVED_1F1B
    assert job_of(None, BASE).layout.schedule is ScheduleKind.ONE_F_ONE_B
    interleaved = job_of({"parallelism": {"virtual_stages": 2}}, BASE)
    assert interleaved.layout.schedule is ScheduleKind.INTERLEAVED_1F1B
    assert resolved_of(None, BASE).layout.named_schedule is None


@pytest.mark.parametrize(
    ("name", "v", "kind"),
    [("1f1b", 1, ScheduleKind.ONE_F_ONE_B), ("interleaved-1f1b", 2, ScheduleKind.INTERLEAVED_1F1B)],
)
def test_a_named_schedule_reaches_the_plan(name: str, v: int, kind: ScheduleKind) -> None:
    job = job_of({"parallelism": {"virtual_stages": v, "pipeline_schedule": name}}, BASE)
    assert job.layout.schedule is kind
    pattern = pipeline_record(job)
    assert pattern["schedule"] == name
    # m = 512 / 2 = 256 on p = 4: stage 0 warms up 3 (1F1B) or 2·3 + 1·4 = 10 (interleaved).
    stages = pattern["stages"]
    assert isinstance(stages, list)
    assert stages[0]["warmup"] == (3 if v == 1 else 10)


@pytest.mark.parametrize(
    ("name", "v", "says"),
    [
        ("1f1b", 2, "runs one model chunk per stage, but virtual_stages = 2"),
        ("interleaved-1f1b", 1, "runs virtual_stages > 1 model chunks per stage"),
    ],
)
def test_a_schedule_that_does_not_fit_virtual_stages_is_refused(
    name: str, v: int, says: str
) -> None:
    text = spec_text({"parallelism": {"virtual_stages": v, "pipeline_schedule": name}}, BASE)
    result = check_text(text)
    (finding,) = [f for f in result.findings if f.rule == "PLC010"]
    assert finding.severity is Severity.ERROR
    assert finding.field == "parallelism.pipeline_schedule"
    assert says in finding.message
    assert "virtual_stages" in finding.fix
    assert (finding.line, finding.column) == value_position(text, f"  pipeline_schedule: {name}")


def test_an_unknown_schedule_name_is_a_bad_value() -> None:
    text = spec_text({"parallelism": {"pipeline_schedule": "zb-h1"}}, BASE)
    result = check_text(text)
    assert result.findings and all(f.rule != "PLC010" for f in result.findings)
    (finding,) = [f for f in result.findings if f.severity is Severity.ERROR]
    assert finding.field == "parallelism.pipeline_schedule"


# --------------------------------------------------------------------------- verify


@pytest.fixture(scope="module")
def interleaved_plan() -> dict[str, Any]:
    """Llama 3 70B on 64 H100s, p = 4, with interleaved-1f1b named over v = 2 chunks."""
    overlay = {"parallelism": {"virtual_stages": 2, "pipeline_schedule": "interleaved-1f1b"}}
    data: dict[str, Any] = json.loads(plan_json(compiled(job_of(overlay, BASE))))
    return data


def test_verify_expands_the_named_schedule(interleaved_plan: dict[str, Any]) -> None:
    assert interleaved_plan["communication"]["pipeline"]["schedule"] == "interleaved-1f1b"
    result = verify_text(json.dumps(interleaved_plan))
    assert result.ok, render(result)


def test_verify_refuses_a_schedule_name_that_does_not_fit_the_plan(
    interleaved_plan: dict[str, Any],
) -> None:
    plan = copy.deepcopy(interleaved_plan)
    plan["communication"]["pipeline"]["schedule"] = "1f1b"  # a known name, but v = 2
    result = verify_text(json.dumps(plan))
    assert not result.ok
    assert "'1f1b' is not a schedule verify can expand for v = 2" in render(result)


# --------------------------------------------------------------------------- GPipe


def test_gpipe_is_all_forwards_then_all_backwards() -> None:
    schedule = registry.build(ScheduleKind.GPIPE, 3, 4, 1)
    for ops in schedule.stages:
        assert [op.label for op in ops] == [
            "F0c0", "F1c0", "F2c0", "F3c0", "B0c0", "B1c0", "B2c0", "B3c0"
        ]
    # Every stage holds all m = 4 micro-batches at its peak, the last one too (1F1B: 1).
    assert [registry.in_flight(ScheduleKind.GPIPE, 3, 1, 4, r, (1,)) for r in range(3)] == [(4,)] * 3
    assert registry.in_flight(ScheduleKind.ONE_F_ONE_B, 3, 1, 4, 2, (1,)) == (1,)


def test_gpipe_memory_holds_m_microbatches_on_the_last_stage() -> None:
    """The memory model follows the schedule: the last stage of 1F1B holds one micro-batch's
    activations, GPipe's all m = 4 (llama3-70b-8x8 with global_batch 8: m = 8 / 2)."""
    from planc.memory.activations import stage_activation_terms

    def held(name: str) -> int:
        overlay = {"parallelism": {"pipeline_schedule": name}, "training": {"global_batch": 8}}
        terms, _ = stage_activation_terms(job_of(overlay, BASE), 3)
        return sum(term.bytes for term in terms)

    one, gpipe = held("1f1b"), held("gpipe")
    assert gpipe > one
    # The per-layer part scales with the micro-batches held: 4× (the one-layer working set of
    # selective recompute is held once either way, so the ratio is a little under 4).
    assert 3 * one < gpipe <= 4 * one


def test_gpipe_reaches_the_plan_and_torchtitan() -> None:
    from planc.compile.frameworks import megatron_arguments, torchtitan_settings

    overlay = {
        "parallelism": {"pipeline_schedule": "gpipe"},
        "training": {"global_batch": 8, "framework": "fsdp2"},
    }
    plan = compiled(job_of(overlay, BASE))
    pattern = pipeline_record(plan.job)
    assert pattern["schedule"] == "gpipe"
    # m = 4 on p = 4: every stage runs 4 forwards, no steady state, 4 backwards.
    assert pattern["stages"] == [{"warmup": 4, "steady": 0, "cooldown": 4}] * 4
    parallelism, _, _ = torchtitan_settings(plan)
    assert parallelism["pipeline_parallel_schedule"] == "GPipe"
    _, notes = megatron_arguments(plan)
    assert any("no GPipe schedule" in note for note in notes)
    result = verify_text(plan_json(plan))
    assert result.ok, render(result)


@pytest.mark.parametrize("kind", list(ScheduleKind))
def test_in_flight_reads_the_weights_only_through_their_ratios(kind: ScheduleKind) -> None:
    # A search shares the counts between stages whose chunks' weights have the same ratios
    # (`weight_ratios`): scaling every weight by k > 0 moves no count, for every schedule.
    checked = 0
    for p in (2, 3, 4, 5):
        for v in (1, 2, 3):
            for m in (p, 2 * p, 3 * p, 8):
                if registry.unmet(kind, p, m, v) is not None:
                    continue
                for base in [(1,) * v, tuple(range(1, v + 1)), tuple(range(2 * v, v, -1))]:
                    weights = tuple(7 * w + 3 * (c == 0) for c, w in enumerate(base))
                    for r in range(p):
                        held = registry.in_flight(kind, p, v, m, r, weights)
                        for k in (2, 3, 1000):
                            scaled = tuple(k * w for w in weights)
                            assert registry.in_flight(kind, p, v, m, r, scaled) == held
                            assert registry.weight_ratios(scaled) == registry.weight_ratios(weights)
                        ratios = registry.weight_ratios(weights)
                        assert registry.in_flight(kind, p, v, m, r, ratios) == held
                        checked += 1
    assert checked > 20


def test_weight_ratios_divide_by_the_greatest_common_divisor() -> None:
    assert registry.weight_ratios((6, 9, 12)) == (2, 3, 4)
    assert registry.weight_ratios((5,)) == (1,)
    assert registry.weight_ratios((0, 0)) == (0, 0)
    assert registry.weight_ratios((4, 0)) == (1, 0)
    assert registry.weight_ratios((7, 5)) == (7, 5)
