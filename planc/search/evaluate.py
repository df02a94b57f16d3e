"""Judge one candidate with the rules `planc check` runs, cheapest first, and price the feasible.

A candidate is the base job with the searched fields replaced. The rule registry's own checks
decide (nothing here re-states a rule): first every enabled rule that reads the job or the
plannable job, on the context `planc.check.context_of` builds without the analysis (world size,
divisibility, bubble, ... ; the preconditions computed once), and only a candidate they all let
through reaches `planc.check.evaluate`, which builds the analysis (memory per stage,
communication) and runs every rule on it. A candidate is feasible when no rule reports an error
at the severity the spec gives it (or a warning, with `strict`); its step is then estimated with
`estimate_step`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import itemgetter
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

from planc.analysis import Analysis, analyse, estimate_step
from planc.check import context_of, severity_of
from planc.comm.schedule import OP_KINDS, CommOp, StagedSchedule
from planc.dims import Numerics, RankDims
from planc.findings import Severity
from planc.memory.activations import (
    StageActivations,
    StageLines,
    held_at_peak,
    layer_lines,
    stage_lines,
)
from planc.memory.budget import (
    BudgetCore,
    ClassStatics,
    HeldActivations,
    budget_core,
    class_statics,
    exchanged,
)
from planc.memory.engines import Placed, engine_terms
from planc.memory.params import RankParameters, rank_parameters
from planc.memory.static import Group, StateBytes
from planc.memory.terms import Term
from planc.perf.compute import ChunkTimes, StageTimes
from planc.perf.inputs import (
    CallSeconds,
    ChunksOf,
    after_step_s,
    build_inputs,
    call_key,
    call_time_s,
    efficiency_of,
    stage_chunk_times,
    stage_times,
)
from planc.perf.step import step_lower_bound_s
from planc.perf.unpriced import unpriced_of
from planc.pipeline.registry import bubble_fraction, weight_ratios
from planc.plannable import (
    Chunks,
    Plannable,
    Refusal,
    formats_and_dims,
    layer_chunks,
    plannable,
    refusals,
)
from planc.presets.efficiency import Efficiency
from planc.record import record, replace
from planc.rules import FRAMEWORK_RULES, REGISTRY, Rule
from planc.rules.base import Context, Needs, RuleKind
from planc.run.estimate import checkpoint_cost
from planc.search.space import AXIS_NAMES, Space, Value, stage_split
from planc.sends import boundary_names
from planc.spec.fabric import Fabric
from planc.spec.job import Job, Layout, NodeNames, Training, low_precision_recipe, resolve
from planc.stages import StageClasses, stage_classes
from planc.vocab import ScheduleKind, SearchObjective, recompute_mode

Objective = SearchObjective
OBJECTIVES: tuple[Objective, ...] = ("step", "time-to-train", "cost")
T = TypeVar("T")  # what a shared sub-result is (`_shared_by`)

ERROR_RANK = Severity.ERROR.rank
WARNING_RANK = Severity.WARNING.rank


class _Step(Protocol):
    """What search reads of a step estimate (`planc.analysis.estimate_step`)."""

    @property
    def step_time_s(self) -> float: ...
    @property
    def tokens_per_s(self) -> float: ...
    @property
    def mfu(self) -> float: ...
    @property
    def compute_s(self) -> float: ...
    @property
    def bubble_s(self) -> float: ...


@record
class Metrics:
    """What a feasible candidate costs, by planc's estimate (`estimate_step`)."""

    step_time_s: float
    tokens_per_s: float
    mfu: float
    compute_s: float  # the busiest stage's compute per step (exposed TP included)
    bubble_s: float  # pipeline idle time on the critical path
    exposed_comm_s: float  # the rest of the step: DP/ZeRO tail and after-step communication
    # What the search ranks by: the step time (objective step), or the step over the goodput
    # its checkpoint leaves (time-to-train, cost: the run's steps and the world are the same
    # for every candidate). Never below step_time_s, so step bounds prune it too.
    rank_s: float = 0.0


@record
class Verdict:
    """One candidate judged by the rules: the rules that reject it (empty when feasible), and
    for a feasible one its warnings, derived degrees, memory and a lower bound on its step."""

    index: int
    rejected: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    data: int = 0
    micro_batches: int = 0
    stage_layers: tuple[int, ...] = ()  # the candidate's uneven split; () for an even one
    peak_memory_bytes: int = 0  # the heaviest rank's bytes (planc memory's peak)
    memory_headroom: float = 0.0  # fraction of HBM the heaviest rank leaves free
    bubble_fraction: float = 0.0  # the schedule's bubble, the quantity PLC006 bounds
    step_bound_s: float = 0.0  # m × the busiest stage's compute per micro-batch: ≤ the step
    # the costs planc knows the candidate spends and does not price (`planc.perf.unpriced`)
    unpriced: tuple[str, ...] = ()

    @property
    def feasible(self) -> bool:
        return not self.rejected


@record
class Setup:
    """What judging needs, as plain data a worker process can receive: the validated spec, the
    space, whether warnings reject a candidate too (`--strict`, as `planc check --strict`), and
    what loading read in beyond the spec: `hardware.calibration`'s tables (the JSON data of
    `Cluster.calibration`, None for the GPU preset's), so that every candidate is priced on the
    calibrated model `planc explain` and `planc check` use, and `hardware.topology`'s tiers."""

    spec: Mapping[str, Any]
    space: Space
    strict: bool = False
    calibration: Mapping[str, Any] | None = None
    # hardware.topology's fabric as loading built it from the file and the hosts; None: the
    # fabric the spec's own fields give.
    fabric: Fabric | None = None
    objective: Objective = "step"  # step | time-to-train | cost (planc search --objective)
    # Keep layouts with a warning from a rule in FRAMEWORK_RULES (--allow-framework-warnings);
    # by default a framework's warning rejects a candidate as an error does.
    framework_warnings: bool = False

    @property
    def rejecting(self) -> int:
        """The lowest severity rank that rejects a candidate."""
        return WARNING_RANK if self.strict else ERROR_RANK

    def rejects(self, rule_id: str, severity: Severity) -> bool:
        """Whether a finding of `rule_id` at `severity` rejects a candidate: at the rejecting
        severity, or a warning of a framework rule (FRAMEWORK_RULES) unless they are allowed."""
        if severity.rank >= self.rejecting:
            return True
        return (
            not self.framework_warnings
            and rule_id in FRAMEWORK_RULES
            and severity.rank >= WARNING_RANK
        )


@record
class Judge:
    """The base job of a search and the enabled rules by what they read, with their severities."""

    base: Job
    space: Space
    cheap: tuple[tuple[Rule, Severity], ...]  # rules on the job or the plannable job
    rejecting: int  # the lowest severity rank that rejects
    objective: Objective = "step"
    deep: tuple[tuple[Rule, Severity], ...] = ()  # rules on the analysis
    # The rules whose findings can reject a candidate (`rejectors`), on the job or the plannable
    # job and on the analysis: what deciding feasibility needs; the others only add warnings.
    cheap_deciding: tuple[tuple[Rule, Severity], ...] = ()
    deciding: tuple[tuple[Rule, Severity], ...] = ()
    # `cheap` and `cheap_deciding` without the precondition rules (`RuleKind.PRECONDITION`):
    # what a candidate with no refusal needs run (`planned_rules`).
    planned: tuple[tuple[Rule, Severity], ...] = ()
    planned_deciding: tuple[tuple[Rule, Severity], ...] = ()
    # The (rule, severity) pairs that reject a candidate (`Setup.rejects`), for the cheap rules
    # and after the analysis alike.
    rejectors: frozenset[tuple[str, Severity]] = frozenset()
    # Sub-results the judge's candidates share (`shared_analysis`); this judge's only.
    memo: dict[tuple[Any, ...], Any] = dataclasses.field(default_factory=dict, compare=False)


def spec_job(setup: Setup) -> Job:
    """The spec's job as `planc.spec.load` resolves it (its calibration read in), with the
    search's thresholds (the rule options: max_bubble, ...)."""
    job = resolve(setup.spec)
    if isinstance(job, list):
        raise ValueError("the spec did not resolve; load it with planc.spec.load first")
    space = setup.space
    rules = dataclasses.replace(job.rules, options=MappingProxyType(dict(space.limits)))
    calibration = None if setup.calibration is None else MappingProxyType(dict(setup.calibration))
    cluster = dataclasses.replace(job.cluster, calibration=calibration)
    if setup.fabric is not None:
        cluster = dataclasses.replace(cluster, fabric=setup.fabric)
    return dataclasses.replace(job, rules=rules, cluster=cluster)


def base_job(setup: Setup) -> Job:
    """The job every candidate starts from: `spec_job` with planc's own host names.

    Host names are the one part of PLC014 that no candidate changes and the only check whose
    cost grows with the node count; `hosts_refusal` checks them once on the spec's job, so each
    candidate carries `NodeNames` (checked in O(1)).
    """
    job = spec_job(setup)
    cluster = dataclasses.replace(job.cluster, hosts=NodeNames(job.cluster.nodes))
    return dataclasses.replace(job, cluster=cluster)


def make_judge(setup: Setup) -> Judge:
    base = base_job(setup)
    ignored = set(base.rules.ignore)
    enabled = [r for r in REGISTRY.values() if r.check is not None and r.id not in ignored]

    leveled = [(r, severity_of(r.id, r.severity, base)) for r in enabled]
    cheap = tuple((r, s) for r, s in leveled if r.needs is not Needs.ANALYSIS)
    deep = tuple((r, s) for r, s in leveled if r.needs is Needs.ANALYSIS)
    rejectors = frozenset(
        (r.id, severity)
        for r in enabled
        for severity in Severity
        if setup.rejects(r.id, severity)
    )
    cheap_deciding = tuple((r, s) for r, s in cheap if (r.id, s) in rejectors)
    return Judge(
        base,
        setup.space,
        cheap,
        setup.rejecting,
        setup.objective,
        deep=deep,
        rejectors=rejectors,
        cheap_deciding=cheap_deciding,
        deciding=tuple((r, s) for r, s in deep if (r.id, s) in rejectors),
        planned=_unconditioned(cheap),
        planned_deciding=_unconditioned(cheap_deciding),
    )


def _unconditioned(rules: tuple[tuple[Rule, Severity], ...]) -> tuple[tuple[Rule, Severity], ...]:
    """`rules` without the precondition rules (`RuleKind.PRECONDITION`)."""
    return tuple((r, s) for r, s in rules if r.kind is not RuleKind.PRECONDITION)


def planned_rules(judge: Judge, ctx: Context, every: bool) -> tuple[tuple[Rule, Severity], ...]:
    """The cheap rules to run on `ctx` (every one, or with `every` off those that can reject).

    A precondition rule (`planc.plannable.PRECONDITIONS`) reports what its precondition finds
    on the job (`Context.refused`; PLC022 runs `shard_split` again), and `refusals` ran every
    precondition on this job: with no refusal none of them fires, and only the others are
    run (tests/test_search_speed.py holds each precondition rule silent on every job that
    `refusals` passes)."""
    if ctx.refusals:
        return judge.cheap if every else judge.cheap_deciding
    return judge.planned if every else judge.planned_deciding


def hosts_refusal(job: Job, rejecting: int = ERROR_RANK) -> tuple[str, ...]:
    """The error rules the spec's own cluster fails (PLC014 on its host names), which every
    candidate would fail alike."""
    rule = REGISTRY["PLC014"]
    if rule.id in job.rules.ignore or rule.check is None:
        return ()
    if severity_of(rule.id, rule.severity, job).rank < rejecting:
        return ()
    return (rule.id,) if any(True for _ in rule.check(context_of(job, [rule]))) else ()


def candidate_job(
    base: Job,
    space: Space,
    values: Sequence[Value],
    split_of: Callable[[int, int, int], tuple[int, ...]] = stage_split,
) -> Job:
    """`base` with the candidate's values; data derived unless pinned, the layer split balanced
    when the layers do not divide evenly (`stage_split`, or `split_of` that gives the same)."""
    v = space.named(values)
    layout = candidate_layout(base, space, v, split_of)
    return replace(base, layout=layout, training=candidate_training(base, v))


# The axes `candidate_training` reads (the micro-batch, recompute, offload and the number
# format); `candidate_layout` reads every other one.
TRAINING_AXES = frozenset({"micro_batch", "recompute", "offload", "precision"})


def candidate_layout(
    base: Job,
    space: Space,
    v: Mapping[str, Value],
    split_of: Callable[[int, int, int], tuple[int, ...]] = stage_split,
) -> Layout:
    """The layout of the candidate of values `v` (by axis name, `candidate_job`): every axis
    but `TRAINING_AXES`."""
    t, p, c, chunks = (
        int(v["tensor"]),
        int(v["pipeline"]),
        int(v["context"]),
        int(v["virtual_stages"]),
    )
    inner = t * p * c
    if space.data is not None:
        d: int | None = space.data
    else:
        d = base.world // inner if base.world % inner == 0 else None
    return replace(
        base.layout,
        t=t,
        p=p,
        d=d,
        c=c,
        v=chunks,
        stage_layers=space.stage_layers or split_of(base.model.L, p, chunks),
        sp=bool(v["sequence_parallel"]),
        zero=int(v["zero_stage"]),
        d_given=space.data is not None,
        **_expert_fields(base, v, t),
        **_placed_fields(base, v, chunks),
    )


def candidate_training(base: Job, v: Mapping[str, Value]) -> Training:
    """The training section of the candidate of values `v` (`candidate_job`): the axes of
    `TRAINING_AXES` only."""
    return base.training.with_recompute(
        recompute_mode(v["recompute"]),
        b=int(v["micro_batch"]),
        **_offload_fields(v),
        **_precision_fields(base, v),
    )


def shared_candidate(judge: Judge, values: Sequence[Value]) -> Job:
    """`candidate_job` of `values`, its layout shared with the judge's earlier candidates that
    agree on every axis but `TRAINING_AXES` and its training section with those that agree on
    those (the records are immutable)."""
    memo = judge.memo
    layout_at = ("layout", _masked(judge, values, TRAINING_AXES))
    layout: Layout | None = memo.get(layout_at)
    named: dict[str, Value] | None = None
    if layout is None:
        named = judge.space.named(values)
        layout = memo[layout_at] = candidate_layout(
            judge.base, judge.space, named, _split_of(judge)
        )
    training_at = ("training", _masked(judge, values, LAYOUT_AXES))
    training: Training | None = memo.get(training_at)
    if training is None:
        named = judge.space.named(values) if named is None else named
        training = memo[training_at] = candidate_training(judge.base, named)
    return replace(judge.base, layout=layout, training=training)


def _expert_fields(base: Job, v: Mapping[str, Value], t: int) -> dict[str, Any]:
    """EP and ETP (None: ETP = tensor, as the spec leaves it) of a MoE candidate."""
    if base.model.moe is None:
        return {}
    etp = int(v["expert_tensor"])
    return {"ep": int(v["expert"]), "etp": None if etp == t else etp}


def _placed_fields(base: Job, v: Mapping[str, Value], chunks: int) -> dict[str, Any]:
    """The rank order (dense and expert), the schedule (None: the default for v), the
    context-parallel type and the shard group (None: all of data × context)."""
    order = str(v["order"])
    kind = ScheduleKind(str(v["pipeline_schedule"]))
    shard = v["data_shard"]
    return {
        "order": tuple(axis for axis in order.split("-") if axis != "ep"),
        "expert_order": tuple(order.split("-")),
        "named_schedule": (
            base.layout.named_schedule
            if kind is ScheduleKind.default(chunks) and base.layout.named_schedule is None
            else kind
        ),
        "cp_comm": v["cp_comm_type"],
        "data_shard": None if shard == "all" else int(shard),
    }


def _offload_fields(v: Mapping[str, Value]) -> dict[str, Any]:
    choice = str(v["offload"])
    return {
        "offload_optimizer": choice.startswith("optimizer"),
        "offload_parameters": choice.endswith("parameters"),
    }


def _precision_fields(base: Job, v: Mapping[str, Value]) -> dict[str, Any]:
    """bf16, or fp8 with the framework's default recipe (`planc.spec.job.low_precision_recipe`:
    Transformer Engine's delayed scaling under Megatron and DeepSpeed, torchao's rowwise under
    torchtitan/FSDP2), as a spec that names no recipe resolves; a pinned precision keeps the
    spec's recipe and options."""
    precision = str(v["precision"])
    tr = base.training
    if precision == tr.precision:
        return {}
    recipe = low_precision_recipe(precision, {}, tr.framework)
    if recipe is None:
        return {"precision": precision, "fp8_recipe": None, "param_gather": False,
                "first_last_bf16": 0, "moments_bf16": False, "recipe_named": False,
                "fp8_attention": None, "fp8_output_proj": False}
    return {"precision": precision, "fp8_recipe": recipe, "recipe_named": False}


def _failing(rules: Iterable[tuple[Rule, Severity]], ctx: Context) -> list[tuple[str, Severity]]:
    """The rules of `rules` that report on `ctx` (a first violation), with their severity."""
    return [
        (rule.id, severity)
        for rule, severity in rules
        if rule.check is not None and next(iter(rule.check(ctx)), None) is not None
    ]


def judge(judge: Judge, index: int, every: bool = True) -> Verdict:
    """The verdict of the rules on candidate `index` of the judge's space: what
    `planc.check.evaluate` finds, each rule run once on check's own contexts (the cheap rules on
    the one without the analysis, which they do not read).

    Without `every`, only the rules that can reject a candidate run (`Judge.cheap_deciding`,
    `Judge.deciding`): the verdict is the same but for a feasible candidate's warnings, which
    it then leaves out. The search judges every candidate so and judges again, with every
    rule, the few it lists (`planc.search.run.search`)."""
    values = judge.space.candidate(index)
    job = shared_candidate(judge, values)
    # check's own context without the analysis (which no rule given it reads): the refusals,
    # or the plannable job.
    ctx = context_of(
        job,
        (),
        suggest=False,
        chunks_of=_chunks_of(judge),
        refusals_of=_refusals_of(judge, values),
        derived_of=_derived_of(judge, values),
    )
    found = _failing(planned_rules(judge, ctx, every), ctx)
    failed = tuple(rule for rule, severity in found if (rule, severity) in judge.rejectors)
    if failed:
        return Verdict(index, failed)
    plan = ctx.plan
    if plan is None:  # a precondition rule the spec ignores or re-levels
        return Verdict(index, tuple(sorted({r.rule for r in ctx.refusals})))
    analysis = shared_analysis(judge, index, plan, values)
    deep = judge.deep if every else judge.deciding
    found += _failing(deep, Context(job, plan, analysis, suggest=False, brief=True))
    errors = sorted({rule for rule, severity in found if (rule, severity) in judge.rejectors})
    if errors:
        return Verdict(index, tuple(errors))
    peak = analysis.memory.peak_bytes
    lay = plan.layout
    return Verdict(
        index,
        warnings=tuple(sorted({rule for rule, _ in found})),
        data=lay.d,
        micro_batches=plan.m,
        stage_layers=job.layout.stage_layers,
        peak_memory_bytes=peak,
        memory_headroom=1 - peak / job.cluster.gpu.memory_bytes,
        bubble_fraction=bubble_fraction(lay.schedule, lay.p, plan.m, lay.v),
        step_bound_s=shared_bound(judge, index, analysis, values),
        unpriced=tuple(str(mechanism) for mechanism in unpriced_of(plan)),
    )


# A judge's memo of what only the job's pipeline shape decides, keyed by the values it is a
# function of (the base job's fields a candidate does not change, the model's above all, are
# the same for every key of one judge): the layer split of an uneven pipeline (`stage_split`),
# each stage's layer chunks (`planc.plannable.layer_chunks`) and the stage classes
# (`planc.stages.stage_classes`).


def _split_of(judge: Judge) -> Callable[[int, int, int], tuple[int, ...]]:
    memo = judge.memo

    def split(layers: int, p: int, v: int) -> tuple[int, ...]:
        at = ("split", layers, p, v)
        found: tuple[int, ...] | None = memo.get(at)
        if found is None:
            found = memo[at] = stage_split(layers, p, v)
        return found

    return split


def _chunks_of(judge: Judge) -> Callable[[Job], tuple[Chunks, tuple[int, ...]]]:
    memo = judge.memo

    def chunks(job: Job) -> tuple[Chunks, tuple[int, ...]]:
        lay = job.layout
        # Everything `layer_chunks` reads (`chunk_split`, `chunk_ranges`).
        at = (
            "chunks",
            job.model.L,
            lay.p,
            lay.v,
            lay.schedule,
            lay.stage_layers,
            lay.pipeline_layout,
            lay.embedding_in_split,
            lay.loss_in_split,
        )
        found: tuple[Chunks, tuple[int, ...]] | None = memo.get(at)
        if found is None:
            found = memo[at] = layer_chunks(job)
        return found

    return chunks


# The axes no precondition of planning (`planc.plannable.PRECONDITIONS`, run by `refusals`)
# reads: they read the world, the model, the sequence length and global batch (the base job's)
# and of the candidate's fields the degrees, the layer split and schedule, the micro-batch (the
# batch split, the schedule's micro-batches), the shard group and the rank order (the expert
# grid's), never ZeRO, sequence parallelism, the context-parallel type, recompute, offload or
# the number format.
UNREAD_BY_REFUSALS = frozenset(
    {"zero_stage", "sequence_parallel", "cp_comm_type", "recompute", "offload", "precision"}
)


def _refusals_of(judge: Judge, values: Sequence[Value]) -> Callable[[Job], tuple[Refusal, ...]]:
    """`refusals` of the candidate of `values`, shared with the judge's earlier candidates that
    agree on the axes the preconditions read (all but `UNREAD_BY_REFUSALS`)."""
    return _shared_by(judge, values, "refusals", UNREAD_BY_REFUSALS, refusals)


# The axes neither the number formats nor a rank's dims (`planc.plannable.formats_and_dims`)
# read: they read the training section (the micro-batch, recompute, offload, the number
# format) and of the layout the tensor, context, expert and expert-tensor degrees, sequence
# parallelism and the expert dispatcher (whose default the schedule decides), never the
# pipeline or its chunks, the rank order, ZeRO, the shard group or the context-parallel type.
UNREAD_BY_DERIVED = frozenset(
    {
        "pipeline",
        "virtual_stages",
        "order",
        "zero_stage",
        "data_shard",
        "cp_comm_type",
    }
)


def _derived_of(
    judge: Judge, values: Sequence[Value]
) -> Callable[[Job], tuple[Numerics, RankDims]]:
    """`formats_and_dims` of the candidate of `values`, shared with the judge's earlier
    candidates that agree on the axes they read (all but `UNREAD_BY_DERIVED`)."""
    return _shared_by(judge, values, "derived", UNREAD_BY_DERIVED, formats_and_dims)


def _shared_by(
    judge: Judge,
    values: Sequence[Value],
    name: str,
    unread: frozenset[str],
    compute: Callable[[Job], T],
) -> Callable[[Job], T]:
    """`compute` of the candidate of `values`, kept in the judge's memo under `name` and the
    candidate's values of every axis but `unread` (those `compute` does not read)."""

    def shared(job: Job) -> T:
        at = (name, _masked(judge, values, unread))
        found: T | None = judge.memo.get(at)
        if found is None:
            found = judge.memo[at] = compute(job)
        return found

    return shared


def _classes_of(judge: Judge, plan: Plannable) -> StageClasses:
    # Everything `planc.stages.stage_key` reads but the model (the base job's).
    lay, q = plan.layout, plan.numerics.quantized
    bf16 = 0 if q is None else q.bf16_layers
    at = ("classes", lay.chunks, lay.last_stage, bf16, boundary_names(plan))
    classes = stage_classes(plan, judge.memo.get(at))
    judge.memo[at] = classes
    return classes


# The axes whose value neither a stage's activation terms (`planc.memory.activations`) nor its
# compute times (`planc.perf.inputs.stage_times`) read: ZeRO, its shard group and offload place
# weights, gradients and optimizer state, not what a micro-batch keeps or computes, and the rank
# order places ranks, not work. Candidates that differ only in them share those sub-results
# (tests/test_search_speed.py holds them equal to fresh ones).
NONE: frozenset[str] = frozenset()  # a sub-result that reads every axis
UNREAD_BY_SHARED = frozenset({"zero_stage", "data_shard", "offload", "order"})
# The stages' compute times (`planc.perf.inputs.stage_times`) read neither those nor the
# context-parallel type: the exchange is priced with the communication, the attention core is
# computed alike under every type.
UNREAD_BY_TIMES = UNREAD_BY_SHARED | {"cp_comm_type"}
# The axes `planc.memory.params.rank_parameters` does not read: it reads the model, tensor,
# expert and expert_tensor (the slices of a layer), pipeline, virtual_stages and the schedule
# (each stage's layers and chunks, which rank holds the last chunk), never the data or context
# degrees, the ZeRO or sharding fields, the micro-batch, recompute or the number format.
UNREAD_BY_PARAMETERS = frozenset(
    {
        "context",
        "cp_comm_type",
        "order",
        "sequence_parallel",
        "zero_stage",
        "data_shard",
        "offload",
        "micro_batch",
        "recompute",
        "precision",
    }
)
# The axes `planc.memory.engines.engine_terms` (weights, gradients, optimizer state and their
# buffers: the memory budget's static terms) does not read beyond its arguments (Ψ_r, the bytes
# per parameter, the shard groups, all passed in and part of the key): it reads the model, the
# framework, the tensor, expert-tensor and pipeline degrees, the data degree (Megatron's bucket)
# and the offload fields, never what a micro-batch computes or keeps (micro_batch, recompute,
# sequence_parallel, the context-parallel type) nor the rank order. The FP8 terms that read the
# micro-batch (`planc.memory.fp8.with_quantized`) are computed for each candidate afresh.
UNREAD_BY_ENGINE = frozenset(
    {"cp_comm_type", "order", "sequence_parallel", "micro_batch", "recompute"}
)
# The axes each stage class's static terms (`planc.memory.budget.class_statics`: the engine's
# terms, `engine_terms`, with an FP8 recipe's weight-side terms, `planc.memory.fp8.with_quantized`)
# do not read: those the engine's terms do not read but the micro-batch, which the FP8 operands
# in flight read (`transient_term`: b·⌈s/c⌉ rows); the FP8 terms read the number formats, the
# framework, ZeRO, the stage's chunks and the degrees, never what a micro-batch keeps beyond
# its rows (recompute, sequence parallelism), the context-parallel type or the rank order.
UNREAD_BY_STATICS = UNREAD_BY_ENGINE - {"micro_batch"}
# The axes the memory budget's terms and peak (`planc.memory.budget.budget_core`) do not read:
# those neither the activations nor the static terms read (the FP8 terms read the micro-batch
# and the number format, which both keys hold). That leaves the rank order, which places each
# stage's rank (the pp stride) but changes no byte: the budget is assembled per candidate from
# the shared core with its own stride.
UNREAD_BY_BUDGET = UNREAD_BY_SHARED & UNREAD_BY_ENGINE
# The axes one call's time (`planc.perf.inputs.call_time_s`: `comm_time_s` on its group's rails,
# `planc.comm.schedule.ring_rails`) does not read beyond the call itself (`call_key`: collective,
# group kind, group size, buffer bytes, tier, rounds and flex kernel): it reads the fabric and
# the tables (the base job's and the precision's), and the rails read the grid (the degrees, the rank order and the
# expert grid) and the shard group; never the pipeline's chunks or schedule, the context-parallel
# type, ZeRO, offload, what a micro-batch computes or keeps.
UNREAD_BY_CALLS = frozenset(
    {
        "virtual_stages",
        "pipeline_schedule",
        "cp_comm_type",
        "sequence_parallel",
        "zero_stage",
        "offload",
        "micro_batch",
        "recompute",
    }
)
# The axes each kind of op of a stage (`planc.comm.schedule.OP_KINDS`) does not read beyond its
# arguments (the stage, its Ψ_dense, Ψ_expert and quantized weights, all in the key). Every kind
# reads the degrees, the rank order (its groups' tier) and the number formats (bytes per
# element). Tensor, expert and expert-tensor parallelism's collectives and the pipeline's
# sends move activations: what a micro-batch holds (the micro-batch, sequence parallelism) and
# how often (m, and under full recompute the forward's again, but not for the sends), never
# where ZeRO puts the state or the context-parallel type. The context-parallel exchange reads
# its type, m and recompute (a recomputed attention core exchanges its forward's again). The
# data-parallel kinds move parameters and gradients: ZeRO,
# the shard group and m (ZeRO-2/3 every micro-batch), never recompute, sequence parallelism or
# the context-parallel type. The tied embedding's all-reduce moves its gradient once a step.
# A kind not named here shares nothing.
UNREAD_BY_TP_OPS = frozenset({"zero_stage", "data_shard", "offload", "cp_comm_type"})
UNREAD_BY_CP_OPS = frozenset({"zero_stage", "data_shard", "offload"})
UNREAD_BY_PP_OPS = UNREAD_BY_TP_OPS | {"recompute"}
UNREAD_BY_DP_OPS = frozenset({"recompute", "sequence_parallel", "cp_comm_type", "offload"})
UNREAD_BY_EMBEDDING_OPS = UNREAD_BY_PP_OPS | {"micro_batch", "sequence_parallel"}


def unread_by_ops() -> dict[str, frozenset[str]]:
    """Each kind of op's unread axes, by `OP_KINDS` name."""
    return {
        "tp": UNREAD_BY_TP_OPS,
        "cp": UNREAD_BY_CP_OPS,
        "ep": UNREAD_BY_TP_OPS,
        "pp": UNREAD_BY_PP_OPS,
        "dp": UNREAD_BY_DP_OPS,
        "edp": UNREAD_BY_DP_OPS,
        "embedding": UNREAD_BY_EMBEDDING_OPS,
    }


# The axes `candidate_layout` reads.
LAYOUT_AXES = frozenset(AXIS_NAMES) - TRAINING_AXES

# The one axis `planc.perf.inputs.efficiency_of` reads: the GEMMs' number format (the GPU's
# peak for it); the GPU, hardware.calibration and training.efficiency are the base job's.
READ_BY_TABLES = frozenset({"precision"})


def _masked(judge: Judge, values: Sequence[Value], unread: frozenset[str]) -> tuple[Value, ...]:
    """The candidate's values of every axis but the `unread` ones, in axis order: the key of a
    sub-result that is a function of the base job and those axes."""
    at = ("mask", unread)
    read: Callable[[Sequence[Value]], tuple[Value, ...]] | None = judge.memo.get(at)
    if read is None:
        kept = [i for i, axis in enumerate(judge.space.axes) if axis.name not in unread]
        # itemgetter of one index returns the value, of none is refused: a tuple either way.
        read = judge.memo[at] = (
            (lambda values: tuple(values[i] for i in kept))
            if len(kept) < 2
            else itemgetter(*kept)
        )
    return read(values)


def shared_analysis(
    judge: Judge, index: int, plan: Plannable, values: Sequence[Value] | None = None
) -> Analysis:
    """`analyse(plan)` of candidate `index`, with the sub-results an earlier candidate of this
    judge computed for the same values of the axes each reads: every stage's activation terms
    (all axes but `UNREAD_BY_SHARED`; but for the context-parallel exchange's buffers, the same
    on every stage, they read no more than the compute times do), the stages' compute times
    (`UNREAD_BY_TIMES`), each stage's parameters (`UNREAD_BY_PARAMETERS`), each stage's static terms (weights, gradients, optimizer state
    and their buffers: `UNREAD_BY_ENGINE`), each stage class's with an FP8 recipe's
    (`UNREAD_BY_STATICS`), the memory budget's terms and peak
    (`UNREAD_BY_BUDGET`), the efficiency tables (`READ_BY_TABLES`), each
    call's seconds (`call_seconds`) and the stage classes. `values`: the candidate's, when the
    caller has them."""
    space, memo = judge.space, judge.memo
    values = space.candidate(index) if values is None else values
    _classes_of(judge, plan)
    key = _masked(judge, values, UNREAD_BY_SHARED)
    times_key = _masked(judge, values, UNREAD_BY_TIMES)
    parameters_key = _masked(judge, values, UNREAD_BY_PARAMETERS)
    engine_key = _masked(judge, values, UNREAD_BY_ENGINE)
    budget_key = _masked(judge, values, UNREAD_BY_BUDGET)
    # The sub-results kept per stage class (the held activations, the classes' static terms,
    # the budget's core) read the rank order only through the classes: through the tiers the
    # pipeline sends cross (`planc.sends`). Their keys hold those tiers.
    sends = boundary_names(plan)
    tables_key = _masked(judge, values, frozenset(AXIS_NAMES) - READ_BY_TABLES)

    # Each kind's results for this candidate's key, by stage (one lookup of the key each).
    lines_by_class: dict[int, StageLines] = memo.setdefault(("lines", times_key), {})
    shares: dict[int, RankParameters] = memo.setdefault(("parameters", parameters_key), {})
    statics: dict[tuple[int, int, int], Placed] = memo.setdefault(("engine", engine_key), {})
    priced: list[CallSeconds] = []

    def activations_of(job: Plannable) -> HeldActivations:
        at = ("activations", key, sends)
        found: HeldActivations | None = memo.get(at)
        if found is None:
            # The context-parallel type decides only the exchange's buffers, the same on every
            # stage (`planc.memory.budget.exchanged`): every stage's lines and in-flight counts
            # are shared by the times' key, which leaves the type out.
            unexchanged = ("unexchanged", times_key, sends)
            held: HeldActivations | None = memo.get(unexchanged)
            if held is None:
                stages = tuple(stage_activations(job, r) for r in range(job.layout.p))
                held = memo[unexchanged] = HeldActivations(stage_classes(job), stages)
            found = memo[at] = exchanged(held, job)
        return found

    def stage_activations(job: Plannable, stage: int) -> StageActivations:
        # What the stage keeps per unit in flight is its class's (`planc.stages`), the
        # micro-batches in flight a function of the schedule, m and the chunks' weights.
        classes = stage_classes(job)
        first = classes.first[classes.of[stage]]
        lines = lines_by_class.get(first)
        if lines is None:
            # One layer's lines, the same on every stage.
            # `layer_lines` reads neither the context-parallel type (only the stage's
            # exchange buffers do) nor what the times do not: shared by the times' key.
            layer: tuple[tuple[Term, bool], ...] | None = memo.get(("layer", times_key))
            if layer is None:
                layer = memo[("layer", times_key)] = layer_lines(job)
            lines = lines_by_class[first] = stage_lines(job, first, layer)
        lay = job.layout
        # The counts read the weights only through their ratios (`weight_ratios`).
        held_at = ("held", lay.schedule, lay.p, lay.v, job.m, stage, weight_ratios(lines.weights))
        held: tuple[int, ...] | None = memo.get(held_at)
        if held is None:
            held = memo[held_at] = held_at_peak(job, stage, lines.weights)
        return StageActivations(lines, held)

    def times_of(job: Plannable, eff: Efficiency) -> tuple[StageTimes, ...]:
        at = ("times", times_key)
        if at not in memo:
            memo[at] = stage_times(job, eff)
        times: tuple[StageTimes, ...] = memo[at]
        return times

    def parameters_of(job: Plannable, stage: int) -> RankParameters:
        share = shares.get(stage)
        if share is None:
            share = shares[stage] = rank_parameters(job, stage)
        return share

    def engine_of(
        job: Plannable,
        stage: int,
        share: RankParameters,
        state: StateBytes,
        group: Group,
        experts: Group,
    ) -> Placed:
        # Ψ_r, the bytes per parameter and the groups are functions of the stage, the shard
        # indices and the axes of the key (UNREAD_BY_ENGINE ⊆ UNREAD_BY_PARAMETERS).
        at = (stage, group.index, experts.index)
        placed = statics.get(at)
        if placed is None:
            placed = statics[at] = engine_terms(job, share, state, group, experts)
        return placed

    def statics_of(job: Plannable) -> ClassStatics:
        at = ("statics", _masked(judge, values, UNREAD_BY_STATICS), sends)
        found: ClassStatics | None = memo.get(at)
        if found is None:
            found = memo[at] = class_statics(job, parameters_of, engine_of)
        return found

    def core_of(job: Plannable) -> BudgetCore:
        at = ("budget", budget_key, sends)
        core: BudgetCore | None = memo.get(at)
        if core is None:
            core = memo[at] = budget_core(
                job, activations_of, parameters_of, engine_of, statics_of
            )
        return core

    def tables_of(job: Plannable) -> Efficiency:
        at = ("tables", tables_key)
        if at not in memo:
            memo[at] = efficiency_of(job)
        eff: Efficiency = memo[at]
        return eff

    unread = unread_by_ops()
    keys = {hidden: _masked(judge, values, hidden) for hidden in {*unread.values(), NONE}}
    kinds = [
        (kind, memo.setdefault(("ops", name, keys[unread.get(name, NONE)]), {}))
        for name, kind in OP_KINDS
    ]

    sent: dict[int, int] = {}  # each class's bytes per step by its first stage, as ops_of sums them

    def ops_of(
        job: Plannable, stage: int, params: int, experts: int, quantized: tuple[int, int]
    ) -> list[CommOp]:
        # `planc.comm.schedule.stage_ops`: each kind's ops, shared by the axes it reads, with
        # the bytes they send per step (`class_sent_bytes` sums them by kind).
        out: list[CommOp] = []
        total = 0
        at = (stage, params, experts, quantized)
        for kind, known in kinds:
            found = known.get(at)
            if found is None:
                ops = tuple(kind(job, stage, params, experts, quantized))
                found = known[at] = (ops, sum(op.step_bytes for op in ops))
            out += found[0]
            total += found[1]
        sent[stage] = total
        return out

    def sent_of(staged: StagedSchedule) -> Sequence[int]:
        # `planc.comm.schedule.class_sent_bytes`: the sums ops_of took of this schedule.
        return [sent[stage] for stage in staged.classes.first]

    def seconds_of(job: Plannable, eff: Efficiency, ops: Sequence[CommOp]) -> tuple[float, ...]:
        # `planc.perf.inputs.op_seconds`: each op's calls × one call, a call priced once.
        if not priced:
            priced.append(call_seconds(judge, index, job, eff, values))
        one = priced[0]
        return tuple(op.calls * one(op) for op in ops)

    return analyse(
        plan,
        activations_of,
        times_of,
        parameters_of,
        engine_of,
        tables_of,
        seconds_of,
        ops_of,
        core_of,
        sent_of,
    )


def call_seconds(
    judge: Judge,
    index: int,
    job: Plannable,
    eff: Efficiency,
    values: Sequence[Value] | None = None,
) -> CallSeconds:
    """One call's seconds of an op of candidate `index` (`planc.perf.inputs.call_time_s`),
    shared with the judge's earlier candidates that agree on the axes a call reads (all but
    `UNREAD_BY_CALLS`) and on the call itself (`call_key`). `values`: the candidate's, when the
    caller has them."""
    values = judge.space.candidate(index) if values is None else values
    calls_key = _masked(judge, values, UNREAD_BY_CALLS)
    calls: dict[tuple[Any, ...], float] = judge.memo.setdefault(("call", calls_key), {})

    def one(op: CommOp) -> float:
        at = call_key(op)
        seconds = calls.get(at)
        if seconds is None:
            seconds = calls[at] = call_time_s(job, eff, op)
        return seconds

    return one


def step_lower_bound(analysis: Analysis, call_s: CallSeconds | None = None) -> float:
    """A lower bound on the estimated step, from the analysis alone (no pipeline run).

    The busiest stage r* runs its m micro-batches (m·T*, T = forward + backward compute per
    micro-batch); before its first op the first micro-batch passes the stages before it, and
    after its last backward the gradient passes them again (Σ_{r<r*} T_r/v: chunk 0 of each);
    after the pipeline, the step still runs the always-exposed after-step communication (ZeRO-1/2
    parameter all-gather, tied embedding all-reduce, offload copies). The estimate adds exposed
    TP, p2p, the DP tail and the optimizer on top, so it never comes out below this.
    `call_s`: one call's seconds of an op, as the judge has priced them (`call_seconds`).
    """
    return pipeline_bound(analysis) + after_bound(analysis, call_s)


def pipeline_bound(analysis: Analysis) -> float:
    """The pipeline's part of `step_lower_bound`: m·T* + Σ_{r<r*} T_r/v, seconds."""
    plan, times = analysis.plan, analysis.times
    per_stage = [t.forward_s + t.backward_s for t in times]
    # The busiest stage, the last of equals (the largest (T_r, r)).
    most = max(per_stage)
    busiest = len(per_stage) - 1 - per_stage[::-1].index(most)
    fill = sum(per_stage[:busiest]) / plan.layout.v
    return plan.m * per_stage[busiest] + fill


def after_bound(analysis: Analysis, call_s: CallSeconds | None = None) -> float:
    """The after-step part of `step_lower_bound`: the most any stage's always-exposed
    communication and offload copies take after the pipeline (`after_step_s`), seconds."""
    plan = analysis.plan
    classes = analysis.schedule.classes
    params = classes.expand([analysis.parameters[r].total for r in classes.first])
    return max(
        after_step_s(
            plan, analysis.efficiency, analysis.schedule.first_ops, params, analysis.times, call_s
        ),
        default=0.0,
    )


# The axes the step's lower bound (`step_lower_bound`) does not read: it reads the stages'
# compute times (`UNREAD_BY_TIMES`), their parameters (`UNREAD_BY_PARAMETERS`), the data-parallel
# and embedding ops after the step (`planc.perf.inputs.after_step_s` reads only the groups of
# `DP_GROUPS`: `UNREAD_BY_DP_OPS`, `UNREAD_BY_EMBEDDING_OPS`) with each call's seconds
# (`UNREAD_BY_CALLS`), and the offload copies (the offload). What none of them reads is the
# context-parallel type: candidates that differ only in it share their bound.
UNREAD_BY_BOUND = (
    UNREAD_BY_TIMES
    & UNREAD_BY_PARAMETERS
    & UNREAD_BY_DP_OPS
    & UNREAD_BY_EMBEDDING_OPS
    & UNREAD_BY_CALLS
) - {"offload"}


# The axes the after-step part of the bound (`after_bound`: `planc.perf.inputs.after_step_s`
# on each class's first stage) does not read: it reads the data-parallel and embedding ops
# (`UNREAD_BY_DP_OPS`, `UNREAD_BY_EMBEDDING_OPS`) with each call's seconds (`UNREAD_BY_CALLS`;
# FSDP2's ends price their calls directly, on the same fields), the stages' parameters
# (`UNREAD_BY_PARAMETERS`), the offload copies (the offload, the shard group, m), and of the
# compute times only each class's forward seconds (how much of ZeRO-1/2's parameter all-gather
# the next forward hides), which its key holds as numbers (`shared_after`). None of them reads
# recompute, sequence parallelism or the context-parallel type.
UNREAD_BY_AFTER = (
    UNREAD_BY_DP_OPS & UNREAD_BY_EMBEDDING_OPS & UNREAD_BY_CALLS & UNREAD_BY_PARAMETERS
) - {"offload"}


def shared_bound(
    judge: Judge, index: int, analysis: Analysis, values: Sequence[Value] | None = None
) -> float:
    """`step_lower_bound` of candidate `index` (its `analysis`), shared with the judge's
    earlier candidates that agree on the axes it reads (all but `UNREAD_BY_BOUND`), its calls
    priced by `call_seconds` and its after-step part shared by `shared_after`. `values`: the
    candidate's, when the caller has them."""
    values = judge.space.candidate(index) if values is None else values
    at = ("bound", _masked(judge, values, UNREAD_BY_BOUND))
    bound: float | None = judge.memo.get(at)
    if bound is None:
        after = shared_after(judge, index, analysis, values)
        bound = judge.memo[at] = pipeline_bound(analysis) + after
    return bound


def forward_by_class(analysis: Analysis) -> tuple[float, ...]:
    """Each stage class's forward seconds per micro-batch (of its first stage): what of the
    compute times `after_bound` reads."""
    times = analysis.times
    return tuple(times[r].forward_s for r in analysis.schedule.classes.first)


def shared_after(
    judge: Judge, index: int, analysis: Analysis, values: Sequence[Value] | None = None
) -> float:
    """`after_bound` of candidate `index`, its calls priced by `call_seconds`, shared with the
    judge's earlier candidates that agree on the axes it reads (all but `UNREAD_BY_AFTER`) and
    on each stage class's forward seconds."""
    values = judge.space.candidate(index) if values is None else values
    at = ("after", _masked(judge, values, UNREAD_BY_AFTER), forward_by_class(analysis))
    after: float | None = judge.memo.get(at)
    if after is None:
        call_s = call_seconds(judge, index, analysis.plan, analysis.efficiency, values)
        after = judge.memo[at] = after_bound(analysis, call_s)
    return after


def _analysis(judge: Judge, index: int, values: Sequence[Value] | None = None) -> Analysis:
    """The analysis of a judged candidate, sharing what the judge's earlier ones computed
    (`shared_analysis`). `values`: the candidate's, when the caller has them."""
    values = judge.space.candidate(index) if values is None else values
    job = candidate_job(judge.base, judge.space, values)
    plan = plannable(job)
    if isinstance(plan, tuple):
        raise ValueError(f"candidate {index} has no plan; judge it first")
    return shared_analysis(judge, index, plan, values)


def price(judge: Judge, index: int) -> Metrics:
    """The estimated step of a feasible candidate (`estimate_step` on its analysis)."""
    analysis = _analysis(judge, index)
    return _metrics(estimate_step(analysis), _ranked_s(judge, analysis))


def inputs_bound(analysis: Analysis, chunks_of: ChunksOf | None = None) -> float:
    """The step's lower bound from the inputs its pipeline would run on
    (`planc.perf.step.step_lower_bound_s` of `build_inputs`: TP, CP and expert exposure, the DP
    tail and the optimizer included), tighter than the judge's `step_lower_bound`. `chunks_of`:
    each stage's chunk times, as `build_inputs` takes them."""
    params = [share.total for share in analysis.parameters]
    experts = [share.expert_total for share in analysis.parameters]
    inputs = build_inputs(
        analysis.plan,
        params,
        experts,
        analysis.efficiency,
        analysis.schedule.first_ops,
        chunks_of,
    )
    return step_lower_bound_s(inputs)


def shared_inputs_bound(judge: Judge, index: int) -> float:
    """`inputs_bound` of feasible candidate `index`, its analysis shared (`shared_analysis`) and
    each stage's chunk times shared with the judge's earlier candidates that agree on the axes
    the times read (all but `UNREAD_BY_TIMES`: `stage_times` sums the same chunk times)."""
    values = judge.space.candidate(index)
    times_key = _masked(judge, values, UNREAD_BY_TIMES)
    memo = judge.memo

    def chunks_of(job: Plannable, eff: Efficiency, stage: int) -> tuple[ChunkTimes, ...]:
        at = ("chunk times", times_key, stage)
        found: tuple[ChunkTimes, ...] | None = memo.get(at)
        if found is None:
            found = memo[at] = stage_chunk_times(job, eff, stage)
        return found

    return inputs_bound(_analysis(judge, index, values), chunks_of)


def _ranked_s(judge: Judge, analysis: Analysis) -> Callable[[float], float]:
    """What the search ranks a step of `step_s` seconds by: itself, or for time-to-train and
    cost the step over the goodput of the candidate's checkpoint (`planc.run`; the step alone
    without a checkpoint section)."""
    if judge.objective == "step" or analysis.plan.run.checkpoint is None:
        return lambda step_s: step_s

    def effective(step_s: float) -> float:
        cost = checkpoint_cost(analysis, step_s, 0)
        return step_s if cost is None else step_s / cost.goodput

    return effective


def _metrics(step: _Step, ranked: Callable[[float], float]) -> Metrics:
    return Metrics(
        step_time_s=step.step_time_s,
        tokens_per_s=step.tokens_per_s,
        mfu=step.mfu,
        compute_s=step.compute_s,
        bubble_s=step.bubble_s,
        exposed_comm_s=max(step.step_time_s - step.compute_s - step.bubble_s, 0.0),
        rank_s=ranked(step.step_time_s),
    )


def judge_range(setup: Setup, start: int, stop: int) -> tuple[Verdict, ...]:
    """Candidates start … stop − 1 judged (one task of a worker process): their feasibility,
    without warnings (`judge` without `every`)."""
    judged = make_judge(setup)
    return tuple(judge(judged, index, every=False) for index in range(start, stop))


def price_all(setup: Setup, indices: tuple[int, ...]) -> tuple[Metrics, ...]:
    """The estimated steps of feasible candidates (one task of a worker process)."""
    judged = make_judge(setup)
    return tuple(price(judged, index) for index in indices)


def bound_all(setup: Setup, indices: tuple[int, ...]) -> tuple[float, ...]:
    """`inputs_bound` of feasible candidates (one task of a worker process), their analyses
    sharing what the task's earlier ones computed (`shared_analysis`)."""
    judged = make_judge(setup)
    return tuple(shared_inputs_bound(judged, index) for index in indices)
