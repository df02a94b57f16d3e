"""Pipeline schedules by name: what each one is, how it is built, and what it needs.

A schedule is one `ScheduleDef` under its `planc.vocab.ScheduleKind`: its builder (per stage,
the ordered F, B and W ops of one step), the layouts it can run on (`needs`), and, where they
exist, its closed forms: the warm-up count of each stage, the micro-batches of each chunk a
stage holds at its activation peak, the bubble fraction and every stage's end. Callers ask the
functions of this module by name (`warmup`, `in_flight`, `bubble_fraction`, `run`, `build`);
where a schedule has no closed form they answer from its op lists or from the bounded
simulator (`planc.pipeline.bounded`), so no caller falls back on its own.

Adding a schedule (GPipe was added this way) is a `ScheduleKind` member, its builder
(`planc.pipeline.schedule`), its closed forms if any (`counts`, `inflight`, `bubble`) and one
entry in `SCHEDULES` with the frameworks that run it; then verify's own warm-up for the name
(`planc.verify.pipeline.WARMUPS`), the name in `schemas/plan.schema.json`, the spec field's
description and `python scripts/regenerate.py`. Memory, the step model, the plan, the rules
(PLC006, PLC010, PLC030), the report and search reach it by name.

Kept light: the builders and the simulator load on first use, so `planc check` (which reads
only the counts) does not import them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, TypedDict

from planc.pipeline import bubble, counts, inflight
from planc.record import record
from planc.vocab import ChunkPlacement, ScheduleKind, ScheduleNeed

if TYPE_CHECKING:
    from planc.pipeline.bounded import PipelineTime
    from planc.pipeline.schedule import Schedule

#: (p, m, v, stage) → forwards before the stage's first backward.
Warmup = Callable[[int, int, int, int], int]
#: (p, v, m, stage, weights) → micro-batches of each chunk held at the stage's weighted peak.
InFlight = Callable[[int, int, int, int, tuple[int, ...]], tuple[int, ...]]
#: (p, m, v) → the idle fraction of a step with equal stages.
Bubble = Callable[[int, int, int], float]
#: (p, v, limit) → the fewest micro-batches whose bubble is at most `limit`.
Microbatches = Callable[[int, int, float], int]
#: (p, m, v, t_f, t_b, hop) → every stage's end, t_b the whole backward.
ClosedEnds = Callable[[int, int, int, list[float], list[float], float], tuple[float, ...]]
#: (p, m, v) → the schedule's op lists.
Builder = Callable[[int, int, int], "Schedule"]


FLUSH_ORDER = (
    "stage r runs warmup forwards, then steady (forward, backward) pairs, then cooldown "
    "backwards; its k-th forward is of chunk (k // p) % v and micro-batch (k // (p·v))·p + k % p, "
    "its k-th backward the same with the chunk v − 1 − (k // p) % v (Megatron's schedule table)"
)
ZB_H1_ORDER = (
    "as 1f1b (warmup forwards, steady (forward, backward) pairs, cooldown backwards), each "
    "backward the input-gradient part; stage r runs the weight gradient W of micro-batch k right "
    "after the backward of micro-batch k + r, and the last r of them at the end"
)
DUALPIPE_V_ORDER = (
    "rank r holds virtual stages r (chunk 0) and 2p − 1 − r (chunk 1) and runs DualPipeV's eight "
    "steps (deepseek-ai/DualPipe dualpipev.py): F0 × 2(p−r−1); (F0 F1) × (r+1); (B1 W1 F1) × "
    "(p−r−1); steady (F0 B1 F1 B0) × (m − 2p + r + 1); (B1 F1 B0) × (p−r−1); (B1 B0) × (r+1), "
    "zero-bubble from pair (r+1)//2 on (at its B1 on odd ranks, its B0 on even ones); (W B0) × "
    "(p−r−1), B0 zero-bubble; W × (r+1). Micro-batches run in order on each chunk; a zero-bubble "
    "backward defers its W to the next W step (first deferred, first run), the others run it; "
    "warmup counts the 2p forwards before the first backward, steady the main step's rounds, "
    "cooldown the p + r + 2 backwards after the last forward"
)


@record
class ScheduleDef:
    """One pipeline schedule: name, words, source, builder, needs and optional closed forms.

    `runs_on`: the training frameworks (`training.framework`) that run it, each with the name
    the framework gives it (a function, class or setting). `microbatch_step(p)`: m must be a
    multiple of it (p for interleaved 1F1B, else 1), which
    the bubble rule uses to suggest a batch. `splits_backward`: the builder emits W ops (B is
    then the input-gradient backward and W the weight-gradient one); else B is the whole
    backward. `bubble_formula`: the closed-form bubble in the paper's symbols, as outputs print
    it, and `bubble_numbers(p, m, v)` the same with the numbers in (None without a closed form).
    """

    kind: ScheduleKind
    title: str
    source: str
    builder: Builder
    needs: tuple[ScheduleNeed, ...]
    runs_on: Mapping[str, str]
    microbatch_step: Callable[[int], int]
    splits_backward: bool = False
    warmup: Warmup | None = None
    in_flight: InFlight | None = None
    bubble: Bubble | None = None
    bubble_formula: str | None = None
    bubble_numbers: Callable[[int, int, int], str] | None = None
    microbatches_for: Microbatches | None = None
    closed_ends: ClosedEnds | None = None
    # Which virtual stage each chunk of a rank holds (the layers of its chunks follow it).
    placement: ChunkPlacement = ChunkPlacement.LOOP
    # (p, m, v, stage) → plan.json's (warmup, steady, cooldown) of the stage, when they are not
    # the flush order's (warm-up forwards, m·v − warm-up pairs, warm-up backwards); `order` the
    # words that expand them into the op list.
    pattern: Callable[[int, int, int, int], tuple[int, int, int]] | None = None
    order: str = FLUSH_ORDER
    # Runs one micro-batch's forward with another's backward, so that each one's expert
    # all-to-all hides behind the other's compute (combined 1F1B, DualPipeV).
    overlaps_experts: bool = False


ZB_V_ORDER = (
    "rank r holds virtual stages r (chunk 0) and 2p − 1 − r (chunk 1) and runs PyTorch's "
    "ScheduleZBVZeroBubble order: F0 × (2(p − r) − 1); (F1 F0) × r; (F1 B1 W1) × (p − r); rounds "
    "of (F0 B0 W0 F1 B1 W1) until every forward ran (F0 left out once all m ran); (B0 B1) × r; "
    "(B0 W0) × (p − r); the W of chunk 1 left, then those of chunk 0; micro-batches in order on "
    "each chunk and op kind; warmup counts the 2p forwards before the first backward, steady the "
    "m − p rounds, cooldown the p + r + 1 backwards after the last forward"
)


def _dualpipe_v_pattern(p: int, m: int, v: int, stage: int) -> tuple[int, int, int]:
    return counts.dualpipe_v_warmup(p, m, v, stage), m - 2 * p + stage + 1, p + stage + 2


# --------------------------------------------------------------------------- builders


def _build_1f1b(p: int, m: int, v: int) -> Schedule:
    from planc.pipeline.schedule import one_f_one_b  # start-up: the builder, not needed by check

    return one_f_one_b(p, m, v)


def _build_interleaved(p: int, m: int, v: int) -> Schedule:
    from planc.pipeline.schedule import interleaved_1f1b  # start-up: as above

    return interleaved_1f1b(p, m, v)


def _build_gpipe(p: int, m: int, v: int) -> Schedule:
    from planc.pipeline.schedule import gpipe  # start-up: as above

    return gpipe(p, m, v)


def _build_zb_h1(p: int, m: int, v: int) -> Schedule:
    from planc.pipeline.schedule import zb_h1  # start-up: as above

    return zb_h1(p, m, v)


def _build_dualpipe_v(p: int, m: int, v: int) -> Schedule:
    from planc.pipeline.schedule import dualpipe_v  # start-up: as above

    return dualpipe_v(p, m, v)


def _build_zb_v(p: int, m: int, v: int) -> Schedule:
    from planc.pipeline.schedule import zb_v  # start-up: as above

    return zb_v(p, m, v)


def _zb_v_bubble(p: int, m: int, v: int) -> float:
    """(p − 1)/(6m + p − 1): ZB-V with F = B = W idles only the fill no schedule avoids, the
    p − 1 forwards the last rank waits for, against 2·3m units of work (two chunks); the
    simulation gives it exactly and independently of m (tests)."""
    return (p - 1) / (6 * m + p - 1)


def _zb_v_microbatches(p: int, v: int, limit: float) -> int:
    """Smallest m with (p − 1)/(6m + p − 1) ≤ limit (and m ≥ 2p − 1, ZB-V's need)."""
    if p == 1:
        return 1
    if limit <= 0:
        raise ValueError("a bubble limit of 0 cannot be met with p > 1")
    m = max(2 * p - 1, math.ceil((p - 1) * (1 - limit) / (6 * limit) - 1e-9))
    while _zb_v_bubble(p, m, v) > limit:
        m += 1
    return m


def _zb_v_pattern(p: int, m: int, v: int, stage: int) -> tuple[int, int, int]:
    return 2 * p, m - p, p + stage + 1


def _build_combined(p: int, m: int, v: int) -> Schedule:
    from planc.pipeline.schedule import combined_1f1b  # start-up: as above

    return combined_1f1b(p, m, v)


def _split_ends(fill: Callable[[float, float], float]) -> ClosedEnds:
    """Every stage's end for a schedule that splits the backward, when even two runs of the
    simulation would be too long (p in the hundreds; `planc.pipeline.bounded`): the slowest
    stage's m micro-batches over all its chunks, the fill `fill(F, B)` once per stage before the
    last (F the slowest chunk's forward, B its whole backward, W taken as half of it) and two
    messages per stage. Exact for equal stages with F equal to the input-gradient backward and
    no p2p time (tests), an estimate otherwise."""

    def ends(
        p: int, m: int, v: int, t_f: list[float], t_b: list[float], hop: float
    ) -> tuple[float, ...]:
        slowest = max(sum(t_f[j * p + r] + t_b[j * p + r] for j in range(v)) for r in range(p))
        end = slowest * m + (p - 1) * fill(max(t_f), max(t_b)) + 2 * (p - 1) * hop
        return (end,) * p

    return ends


def _split_bubble(p: int, m: int, v: int) -> float:
    """(p − 1)/(3m + p − 1): the bubble of ZB-H1 on p stages and of DualPipeV on p devices with
    F = B = W (for DualPipeV F&B = F + B_full): the idle (p − 1)(F + B − W) of ZB-H1 (Qi et al.
    2024 §2.1) and (p − 1)(F&B + B_full − 3W) of DualPipeV (DualPipe README, PP = 2p stages)
    are p − 1 and 2(p − 1) against m·3 and m·6 units of work; valid for m ≥ p (ZB-H1) and
    m ≥ 2p (DualPipeV)."""
    return (p - 1) / (3 * m + p - 1)


def _split_microbatches(p: int, v: int, limit: float) -> int:
    """Smallest m with (p − 1)/(3m + p − 1) ≤ limit: m ≥ (p − 1)(1 − limit)/(3·limit)."""
    if p == 1:
        return 1
    if limit <= 0:
        raise ValueError("a bubble limit of 0 cannot be met with p > 1")
    m = max(1, math.ceil((p - 1) * (1 - limit) / (3 * limit) - 1e-9))
    while _split_bubble(p, m, v) > limit:
        m += 1
    return m


def _closed_ends(
    p: int, m: int, v: int, t_f: list[float], t_b: list[float], hop: float
) -> tuple[float, ...]:
    from planc.pipeline.bounded import closed_form_ends  # start-up: the simulator module

    return closed_form_ends(p, m, v, t_f, t_b, hop)


_MEGATRON = "Megatron-LM megatron/core/pipeline_parallel/schedules.py"
_FLUSH_BUBBLE = "(p − 1)/(v·m + p − 1)"


def _flush_numbers(p: int, m: int, v: int) -> str:
    return f"({p} − 1)/({v}·{m} + {p} − 1)"


class _ClosedForms(TypedDict):
    warmup: Warmup
    in_flight: InFlight
    bubble: Bubble
    bubble_formula: str
    bubble_numbers: Callable[[int, int, int], str]
    microbatches_for: Microbatches
    closed_ends: ClosedEnds


def _flush_closed_forms() -> _ClosedForms:
    """The closed forms 1F1B and interleaved 1F1B share (flush schedules: Narayanan et al. 2021
    §2.2 and §2.2.1): Megatron's warm-up, the in-flight counts, the (p − 1)/(v·m + p − 1)
    bubble and the stage ends of equal stages."""
    return {
        "warmup": counts.num_warmup,
        "in_flight": inflight.in_flight,
        "bubble": bubble.bubble_fraction,
        "bubble_formula": _FLUSH_BUBBLE,
        "bubble_numbers": _flush_numbers,
        "microbatches_for": bubble.microbatches_for,
        "closed_ends": _closed_ends,
    }


SCHEDULES: Mapping[ScheduleKind, ScheduleDef] = MappingProxyType(
    {
        ScheduleKind.ONE_F_ONE_B: ScheduleDef(
            kind=ScheduleKind.ONE_F_ONE_B,
            title="1F1B",
            source=f"Narayanan et al. 2021 §2.2 (PipeDream-Flush); {_MEGATRON}, "
            "forward_backward_pipelining_without_interleaving",
            builder=_build_1f1b,
            needs=(ScheduleNeed.ONE_CHUNK,),
            runs_on=MappingProxyType(
                {
                    "megatron": "forward_backward_pipelining_without_interleaving",
                    "deepspeed": "TrainSchedule (deepspeed/runtime/pipe/schedule.py)",
                    "fsdp2": "1F1B",
                }
            ),
            microbatch_step=lambda p: 1,
            **_flush_closed_forms(),
        ),
        ScheduleKind.INTERLEAVED_1F1B: ScheduleDef(
            kind=ScheduleKind.INTERLEAVED_1F1B,
            title="interleaved 1F1B",
            source=f"Narayanan et al. 2021 §2.2.1; {_MEGATRON}, "
            "forward_backward_pipelining_with_interleaving",
            builder=_build_interleaved,
            needs=(ScheduleNeed.CHUNKS, ScheduleNeed.SEVERAL_STAGES, ScheduleNeed.WHOLE_ROUNDS),
            runs_on=MappingProxyType(
                {
                    "megatron": "forward_backward_pipelining_with_interleaving",
                    "fsdp2": "Interleaved1F1B",
                }
            ),
            microbatch_step=lambda p: p,
            **_flush_closed_forms(),
        ),
        # Fill and drain are 1F1B's, (p − 1)/(m + p − 1) of the step with equal stages (Huang
        # et al. 2019 §2.2; v = 1), and so is the makespan; what differs is memory: all m
        # micro-batches are in flight on every stage.
        ScheduleKind.GPIPE: ScheduleDef(
            kind=ScheduleKind.GPIPE,
            title="GPipe",
            source="Huang et al. 2019 §2.2; PyTorch torch.distributed.pipelining ScheduleGPipe",
            builder=_build_gpipe,
            needs=(ScheduleNeed.ONE_CHUNK,),
            runs_on=MappingProxyType({"fsdp2": "GPipe"}),
            microbatch_step=lambda p: 1,
            warmup=counts.gpipe_warmup,
            in_flight=inflight.gpipe_in_flight,
            bubble=bubble.bubble_fraction,
            bubble_formula=_FLUSH_BUBBLE,
            bubble_numbers=_flush_numbers,
            microbatches_for=bubble.microbatches_for,
            closed_ends=_closed_ends,
        ),
        ScheduleKind.ZB_H1: ScheduleDef(
            kind=ScheduleKind.ZB_H1,
            title="ZB-H1",
            source="Qi et al. 2024, Zero Bubble Pipeline Parallelism (ICLR, arXiv 2401.10241) "
            "§2.1; sail-sg/zero-bubble-pipeline-parallelism (ZB1P)",
            builder=_build_zb_h1,
            needs=(ScheduleNeed.ONE_CHUNK,),
            # PyTorch's zero-bubble schedules are multi-stage (ScheduleInterleavedZeroBubble,
            # ScheduleZBVZeroBubble: two or more stages a rank); Megatron-LM and DeepSpeed
            # have none: the zero-bubble authors' Megatron fork runs it.
            runs_on=MappingProxyType({}),
            microbatch_step=lambda p: 1,
            splits_backward=True,
            warmup=counts.num_warmup,
            in_flight=inflight.zb_h1_in_flight,
            bubble=_split_bubble,
            bubble_formula="(p − 1)(F + B − W)/(m(F + B + W) + (p − 1)(F + B − W)), "
            "F = B = W: (p − 1)/(3m + p − 1)",
            bubble_numbers=lambda p, m, v: f"({p} − 1)/(3·{m} + {p} − 1)",
            microbatches_for=_split_microbatches,
            closed_ends=_split_ends(lambda f, b: f),  # (F + B − W) with B = W
            order=ZB_H1_ORDER,
        ),
        ScheduleKind.DUALPIPE_V: ScheduleDef(
            kind=ScheduleKind.DUALPIPE_V,
            title="DualPipeV",
            source="DeepSeek, deepseek-ai/DualPipe dualpipe/dualpipev.py (DualPipeV.step) and "
            "README; PyTorch torch.distributed.pipelining ScheduleDualPipeV",
            builder=_build_dualpipe_v,
            needs=(ScheduleNeed.TWO_CHUNKS, ScheduleNeed.TWICE_THE_STAGES),
            runs_on=MappingProxyType({"fsdp2": "DualPipeV"}),
            microbatch_step=lambda p: 1,
            splits_backward=True,
            warmup=counts.dualpipe_v_warmup,
            in_flight=inflight.dualpipe_v_in_flight,
            bubble=_split_bubble,
            bubble_formula="(p − 1)(F&B + B − 3W)/(2m(F + B) + (p − 1)(F&B + B − 3W)), B the "
            "whole backward; F = B_input = W, F&B = F + B: (p − 1)/(3m + p − 1)",
            bubble_numbers=lambda p, m, v: f"({p} − 1)/(3·{m} + {p} − 1)",
            microbatches_for=_split_microbatches,
            closed_ends=_split_ends(lambda f, b: f + b / 2),  # F&B + B − 3W, F&B = F + B
            placement=ChunkPlacement.V,
            pattern=_dualpipe_v_pattern,
            order=DUALPIPE_V_ORDER,
            overlaps_experts=True,
        ),
        ScheduleKind.ZB_V: ScheduleDef(
            kind=ScheduleKind.ZB_V,
            title="ZB-V",
            source="Qi et al. 2024, Zero Bubble Pipeline Parallelism (ICLR, arXiv 2401.10241) "
            "§6; PyTorch torch.distributed.pipelining ScheduleZBVZeroBubble",
            builder=_build_zb_v,
            needs=(ScheduleNeed.TWO_CHUNKS, ScheduleNeed.FILLED_V),
            runs_on=MappingProxyType({"fsdp2": "ZBVZeroBubble"}),
            microbatch_step=lambda p: 1,
            splits_backward=True,
            warmup=lambda p, m, v, stage: 2 * p,
            in_flight=inflight.zb_v_in_flight,
            bubble=_zb_v_bubble,
            bubble_formula="F = B = W: (p − 1)/(6m + p − 1), the last rank's fill",
            bubble_numbers=lambda p, m, v: f"({p} − 1)/(6·{m} + {p} − 1)",
            microbatches_for=_zb_v_microbatches,
            closed_ends=_split_ends(lambda f, b: f),  # the last rank's fill
            placement=ChunkPlacement.V,
            pattern=_zb_v_pattern,
            order=ZB_V_ORDER,
        ),
        ScheduleKind.COMBINED_1F1B: ScheduleDef(
            kind=ScheduleKind.COMBINED_1F1B,
            title="combined 1F1B (expert all-to-all overlap)",
            source="Megatron-LM docs/user-guide/features/moe_a2a_overlap.md; "
            f"{_MEGATRON}, combined_1f1b_schedule_for_interleaved_pipelining",
            builder=_build_combined,
            needs=(
                ScheduleNeed.ALONE_OR_CHUNKS,
                ScheduleNeed.STAGES_FOR_CHUNKS,
                ScheduleNeed.WHOLE_ROUNDS,
            ),
            runs_on=MappingProxyType(
                {"megatron": "combined 1F1B (--overlap-moe-expert-parallel-comm)"}
            ),
            microbatch_step=lambda p: p,
            warmup=counts.combined_warmup,
            in_flight=inflight.combined_in_flight,
            # One more warm-up forward moves no op off the critical path of equal stages: the
            # bubble and the stage ends are interleaved 1F1B's (tests hold the simulation to it).
            bubble=bubble.bubble_fraction,
            bubble_formula=_FLUSH_BUBBLE,
            bubble_numbers=_flush_numbers,
            microbatches_for=bubble.microbatches_for,
            closed_ends=_closed_ends,
            overlaps_experts=True,
        ),
    }
)


def definition(kind: ScheduleKind) -> ScheduleDef:
    """The registered schedule `kind`."""
    return SCHEDULES[kind]


def unmet(kind: ScheduleKind, p: int, m: int | None, v: int) -> ScheduleNeed | None:
    """The first need of `kind` the layout fails, or None when it can run."""
    return next((need for need in SCHEDULES[kind].needs if not need.holds(p, m, v)), None)


def build(kind: ScheduleKind, p: int, m: int, v: int) -> Schedule:
    """The op lists of schedule `kind` for p stages, m micro-batches and v chunks per stage."""
    return SCHEDULES[kind].builder(p, m, v)


# --------------------------------------------------------------------------- closed forms, or the ops


def pattern(kind: ScheduleKind, p: int, m: int, v: int, stage: int) -> tuple[int, int, int]:
    """plan.json's (warmup, steady, cooldown) of `stage` (see `ScheduleDef.order`)."""
    form = SCHEDULES[kind].pattern
    if form is not None:
        return form(p, m, v, stage)
    first = warmup(kind, p, m, v, stage)
    return first, m * v - first, first


def warmup(kind: ScheduleKind, p: int, m: int, v: int, stage: int) -> int:
    """The warm-up forwards of `stage` (those before its steady state or cool-down): the closed
    form, else counted on the built op list (its ops in the "warmup" phase)."""
    form = SCHEDULES[kind].warmup
    if form is not None:
        return form(p, m, v, stage)
    return sum(op.phase == "warmup" for op in build(kind, p, m, v).stages[stage])


def in_flight(
    kind: ScheduleKind, p: int, v: int, m: int, stage: int, weights: tuple[int, ...]
) -> tuple[int, ...]:
    """Micro-batches of each of `stage`'s v chunks held at its activation peak (weights: bytes
    one micro-batch of chunk c keeps): the closed form, else walked on the built op list
    (`planc.pipeline.schedule.held_at_peak`; no pipeline: 1 of each)."""
    form = SCHEDULES[kind].in_flight
    if form is not None:
        return form(p, v, m, stage, weights)
    if p == 1:
        return tuple(1 for _ in range(v))
    from planc.pipeline.schedule import held_at_peak  # start-up: the builder, not needed by check

    return held_at_peak(build(kind, p, m, v), stage, weights)


def weight_ratios(weights: tuple[int, ...]) -> tuple[int, ...]:
    """`weights` divided by their greatest common divisor (all zero: as they are). `in_flight`
    reads the chunks' weights only through their ratios: every closed form either ignores them
    or takes the step (or the moment) whose weighted sum is strictly the largest, as the walk
    of the op list does, and scaling every weight by k > 0 scales every such sum by k. So
    stages whose weights have the same ratios hold the same counts (a search shares them)."""
    g = math.gcd(*weights)
    return weights if g <= 1 else tuple(w // g for w in weights)


def bubble_fraction(kind: ScheduleKind, p: int, m: int, v: int) -> float:
    """The idle fraction of a step with equal stages: the closed form, else the bounded
    simulator's with unit times (F = 1 and B = 2, or F = B = W = 1 when the backward is split:
    the zero-bubble paper's setting) and no p2p time."""
    form = SCHEDULES[kind].bubble
    if form is not None:
        return form(p, m, v)
    if p == 1:
        return 0.0
    split = SCHEDULES[kind].splits_backward
    t_b = [1.0 if split else 2.0] * (p * v)
    t_w = [1.0] * (p * v) if split else None
    return run(kind, p, m, v, [1.0] * (p * v), t_b, 0.0, t_w).bubble_fraction


def microbatches_for(kind: ScheduleKind, p: int, v: int, limit: float) -> int:
    """The fewest micro-batches (a multiple of the schedule's `microbatch_step`) whose bubble is
    at most `limit` (> 0): the closed form's inverse, else doubling and bisection on
    `bubble_fraction` (the bubble of a flush schedule falls as m grows)."""
    entry = SCHEDULES[kind]
    step = entry.microbatch_step(p)
    if entry.microbatches_for is not None:
        need = entry.microbatches_for(p, v, limit)
        return -(-need // step) * step
    if bubble_fraction(kind, p, step, v) <= limit:
        return step
    low, high = 1, 2  # in units of step: low fails the limit, high meets it
    while bubble_fraction(kind, p, high * step, v) > limit:
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        if bubble_fraction(kind, p, middle * step, v) <= limit:
            high = middle
        else:
            low = middle
    return high * step


def run(
    kind: ScheduleKind,
    p: int,
    m: int,
    v: int,
    t_f: Sequence[float],
    t_b: Sequence[float],
    hop: float,
    t_w: Sequence[float] | None = None,
    t_alone: tuple[Sequence[float], Sequence[float]] | None = None,
) -> PipelineTime:
    """The pipeline part of a step with each stage's own times (`planc.pipeline.bounded.run`)
    under schedule `kind`. For a schedule that splits the backward, `t_b` is the input-gradient
    part and `t_w` the weight-gradient part (required); else `t_b` is the whole backward.
    `t_alone`: the forward and backward times of the passes a schedule that pairs runs alone."""
    from planc.pipeline.bounded import run as bounded  # start-up: the simulation

    entry = SCHEDULES[kind]
    if entry.splits_backward and t_w is None:
        raise ValueError(f"the {entry.title} schedule splits the backward: give t_w")
    return bounded(
        p,
        m,
        v,
        t_f,
        t_b,
        hop,
        t_w=t_w if entry.splits_backward else None,
        build=entry.builder,
        closed_ends=entry.closed_ends,
        t_alone=t_alone,
    )
