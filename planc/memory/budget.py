"""The per-rank memory budget: every term of every pipeline stage's heaviest rank.

`rank_memory(job, r, i)` budgets one rank: pipeline rank r, index i in its ZeRO shard group.
`budget(job)` budgets the heaviest rank of every stage (tensor, context and data coordinates 0:
the low ranks hold the ⌈⌉ shares) and names the peak.
"""

from __future__ import annotations

from collections.abc import Callable

from planc.memory.activations import (
    StageActivations,
    StageLines,
    exchange_buffers,
    held_at_peak,
    layer_lines,
    stage_activations,
    stage_lines,
)
from planc.memory.engines import Placed, engine_terms
from planc.memory.fp8 import with_quantized
from planc.memory.params import RankParameters, padded_vocab, parameter_count, rank_parameters
from planc.memory.static import Group, StateBytes, state_bytes
from planc.memory.terms import COMPONENTS, Term
from planc.plannable import Plannable
from planc.record import record, replace
from planc.stages import StageClasses, stage_classes
from planc.vocab import Axis

#: (job, pipeline rank) → its activations at the stage's peak (`stage_activations`).
Activations = Callable[[Plannable, int], StageActivations]
#: (job, pipeline rank) → Ψ_r of one TP rank of that stage (`rank_parameters`).
Parameters = Callable[[Plannable, int], RankParameters]
#: (job, pipeline rank, its Ψ_r, bytes per parameter, shard group, expert shard group) → the
#: engine's static terms (`stage_engine_terms`; a search passes one that reuses them across
#: candidates).
Engine = Callable[[Plannable, int, RankParameters, StateBytes, Group, Group], Placed]

RESERVE_SOURCE = "spec hardware.reserve_gib: CUDA context, NCCL buffers, allocator fragmentation"


@record
class RankMemory:
    """One rank's HBM bytes by component; `terms` are the lines they add up from. `host` is what
    offload keeps in host memory for this rank (not in `total`), `host_terms` its lines."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    buffers: int
    reserve: int
    total: int
    terms: tuple[Term, ...]
    host: int = 0
    host_terms: tuple[Term, ...] = ()

    @classmethod
    def of(cls, terms: tuple[Term, ...], host_terms: tuple[Term, ...] = ()) -> RankMemory:
        sums = dict.fromkeys(COMPONENTS, 0)
        for term in terms:  # one pass: a component's bytes are the sum of its terms'
            sums[term.component] += term.bytes
        return cls(
            **sums,
            total=sum(sums.values()),
            terms=terms,
            host=sum(t.bytes for t in host_terms),
            host_terms=host_terms,
        )


@record
class StageBudget:
    """A pipeline stage's heaviest rank: its stage, global rank and memory."""

    stage: int
    rank: int
    memory: RankMemory


@record
class HeldActivations:
    """Every stage's activations at its peak (`stages`), and per stage class the heaviest."""

    classes: StageClasses
    stages: tuple[StageActivations, ...]

    @property
    def heaviest(self) -> tuple[tuple[int, int], ...]:
        """Per stage class, (the most bytes any of its stages' activations add up to, the
        lowest such stage): with the class's static terms the same on all its stages, that
        stage is the class's heaviest rank (kept on the instance: a search's candidates that
        differ in their static terms share it)."""
        cached: tuple[tuple[int, int], ...] | None = self.__dict__.get("_heaviest")
        if cached is None:
            best: dict[int, tuple[int, int]] = {}
            for stage, (k, held) in enumerate(zip(self.classes.of, self.stages, strict=True)):
                if k not in best or held.bytes > best[k][0]:
                    best[k] = (held.bytes, stage)
            cached = self.__dict__["_heaviest"] = tuple(best[k] for k in range(len(best)))
        return cached


#: job → every stage's activations at its peak (`classwise_activations`; a search passes one
#: that reuses them across candidates).
StagesActivations = Callable[[Plannable], HeldActivations]


def exchanged(held: HeldActivations, job: Plannable) -> HeldActivations:
    """`held` of a job that differs from `job` at most in the context-parallel type, under
    `job`'s: every stage's lines with `job`'s exchange buffers (`exchange_buffers`, the only
    part of `stage_lines` the type decides). Those are the same on every stage, so every
    stage's bytes move by the same amount and each class's heaviest stage
    (`HeldActivations.heaviest`: the first of the most bytes) stays its heaviest: kept on the
    new instance, moved by that amount, without counting any stage again."""
    exchange = exchange_buffers(job)
    before = held.stages[0].lines.exchange
    if exchange == before:
        return held
    swapped: dict[int, StageLines] = {}
    stages = []
    for stage in held.stages:
        lines = swapped.get(id(stage.lines))
        if lines is None:
            lines = swapped[id(stage.lines)] = replace(stage.lines, exchange=exchange)
        stages.append(StageActivations(lines, stage.held))
    new = HeldActivations(held.classes, tuple(stages))
    moved = sum(t.bytes for t in exchange) - sum(t.bytes for t in before)
    new.__dict__["_heaviest"] = tuple((most + moved, stage) for most, stage in held.heaviest)
    return new


@record
class StagedMemory:
    """What every stage's heaviest rank is assembled from, by stage class (`planc.stages`): the
    static terms of each class (weights, gradients, optimizer state and their buffers, the
    same on every stage of a class), the activation and buffer terms of each stage (the
    micro-batches it holds in flight differ from stage to stage), the reserve, and the pp
    stride that places each stage's rank."""

    classes: StageClasses
    static: tuple[Placed, ...]  # per class
    activations: tuple[StageActivations, ...]  # per stage
    reserve: Term
    pp_stride: int

    def stage(self, stage: int) -> StageBudget:
        """The budget of pipeline rank `stage`'s heaviest rank (`rank_memory`'s)."""
        held = self.activations[stage]
        activations, transient = held.terms
        memory = assembled(
            self.static[self.classes.of[stage]], activations, transient, self.reserve, held.host
        )
        return StageBudget(stage, stage * self.pp_stride, memory)


@record
class MemoryBudget:
    """Every pipeline stage's heaviest rank (`stages`) and the peak among them (`peak`: the
    largest total; ties: the lowest stage), each assembled on first use from `staged`."""

    parameters: int
    parameters_padded: int
    staged: StagedMemory
    peak_stage: int  # the stage of the peak
    peak_bytes: int  # its total (`peak.memory.total`)
    most_host: int = 0  # the most host memory any rank offloads (the largest `RankMemory.host`)

    @property
    def peak(self) -> StageBudget:
        cached: StageBudget | None = self.__dict__.get("_peak")
        if cached is None:
            cached = self.__dict__["_peak"] = self.staged.stage(self.peak_stage)
        return cached

    @property
    def stages(self) -> tuple[StageBudget, ...]:
        cached: tuple[StageBudget, ...] | None = self.__dict__.get("_stages")
        if cached is None:
            staged, peak = self.staged, self.peak
            cached = tuple(
                peak if r == peak.stage else staged.stage(r)
                for r in range(len(staged.activations))
            )
            self.__dict__["_stages"] = cached
        return cached


def stage_engine_terms(
    job: Plannable,
    pp_rank: int,
    share: RankParameters,
    state: StateBytes,
    group: Group,
    expert_group: Group,
) -> Placed:
    """`engine_terms` of pipeline rank `pp_rank` (which it does not read: its Ψ_r, `share`, is
    that rank's)."""
    return engine_terms(job, share, state, group, expert_group)


def stage_rank(job: Plannable, pp_rank: int) -> int:
    """The global rank with coordinates tp = cp = dp = 0 on pipeline rank `pp_rank`:
    pp_rank × the pp stride (Megatron RankGenerator)."""
    return pp_rank * job.layout.strides[Axis.PP]


def rank_memory(
    job: Plannable,
    pp_rank: int,
    shard_index: int = 0,
    expert_shard_index: int = 0,
    activations_of: Activations = stage_activations,
    parameters_of: Parameters = rank_parameters,
    engine_of: Engine = stage_engine_terms,
) -> RankMemory:
    """The budget of one rank: pipeline rank `pp_rank`, index `shard_index` in its shard group
    of N ranks (`training.framework` decides how its static state is laid out) (low indices hold ⌈Ψ_r/N⌉ elements, high ones ⌊Ψ_r/N⌋).
    With experts, `expert_shard_index` is its index in the expert shard group of N_e = EDP/R
    ranks, over which the routed experts' state is sharded.

    Every TP rank of a stage is charged as TP rank 0, the heaviest when a split is uneven.
    """
    static = static_terms(job, pp_rank, shard_index, expert_shard_index, parameters_of, engine_of)
    held = activations_of(job, pp_rank)
    activations, transient = held.terms
    return assembled(static, activations, transient, reserve_term(job), held.host)


def static_terms(
    job: Plannable,
    pp_rank: int,
    shard_index: int = 0,
    expert_shard_index: int = 0,
    parameters_of: Parameters = rank_parameters,
    engine_of: Engine = stage_engine_terms,
) -> Placed:
    """The static terms of one rank (`rank_memory`): the engine's weights, gradients, optimizer
    state and buffers for the stage's Ψ_r, with an FP8/FP4 recipe's weight-side terms."""
    tr, lay = job.training, job.layout
    state = state_bytes(job.numerics, tr.optimizer)
    group = Group(lay.zero, lay.shard_group, shard_index)
    expert_group = Group(lay.zero, lay.expert_shard_group, expert_shard_index, "N_e")
    share = parameters_of(job, pp_rank)
    static = engine_of(job, pp_rank, share, state, group, expert_group)
    return with_quantized(job, pp_rank, share, static, state.weights, (group, expert_group))


def reserve_term(job: Plannable) -> Term:
    """The CUDA context, NCCL buffers and allocator fragmentation (hardware.reserve_gib)."""
    return Term("reserve", "reserve", job.cluster.reserve_bytes, "reserve_gib·2³⁰", RESERVE_SOURCE)


def assembled(
    static: Placed,
    activations: tuple[Term, ...],
    transient: tuple[Term, ...],
    reserve: Term,
    host: tuple[Term, ...] = (),
) -> RankMemory:
    """One rank's budget from its static terms, its activation and transient buffer terms and
    the reserve, in the order `planc memory` lists them; `host`: the activations it offloads."""
    terms = (
        *(t for t in static.hbm if t.component != "buffers"),
        *activations,
        *(t for t in static.hbm if t.component == "buffers"),
        *transient,
        reserve,
    )
    return RankMemory.of(terms, (*static.host, *host))


@record
class BudgetCore:
    """What `budget` finds before it places each stage's rank (the pp stride, which the rank
    order decides): each stage class's static terms, every stage's activations, the peak stage
    and its bytes, the most host memory a rank offloads and the model's parameter counts."""

    static: tuple[Placed, ...]  # per class
    held: HeldActivations
    peak_stage: int
    peak_bytes: int
    most_host: int
    parameters: int
    parameters_padded: int


#: job → its `BudgetCore` (`budget_core`; a search passes one that reuses it across candidates
#: that differ only in the rank order).
Core = Callable[[Plannable], BudgetCore]


@record
class ClassStatics:
    """Each stage class's static terms (`static_terms` of its first stage's heaviest rank,
    shard index 0), their HBM bytes, and the most host bytes any class offloads."""

    placed: tuple[Placed, ...]  # per class
    hbm_bytes: tuple[int, ...]  # per class: Σ bytes of `placed[k].hbm`
    most_host: int


def class_statics(
    job: Plannable,
    parameters_of: Parameters = rank_parameters,
    engine_of: Engine = stage_engine_terms,
) -> ClassStatics:
    """The static terms of each stage class (`budget` for the arguments)."""
    placed = tuple(
        static_terms(job, stage, 0, 0, parameters_of, engine_of)
        for stage in stage_classes(job).first
    )
    return ClassStatics(
        placed,
        tuple(sum(t.bytes for t in terms.hbm) for terms in placed),
        max(sum(t.bytes for t in terms.host) for terms in placed),
    )


#: job → its `ClassStatics` (`class_statics`; a search passes one that reuses them across
#: candidates that differ only in what a micro-batch keeps or how ranks are ordered).
Statics = Callable[[Plannable], ClassStatics]


def budget_core(
    job: Plannable,
    activations_of: StagesActivations | None = None,
    parameters_of: Parameters = rank_parameters,
    engine_of: Engine = stage_engine_terms,
    statics_of: Statics | None = None,
) -> BudgetCore:
    """`budget`'s terms and peak, before any rank is placed (`budget` for the arguments;
    `statics_of` gives what `class_statics` gives with them)."""
    statics = (
        class_statics(job, parameters_of, engine_of) if statics_of is None else statics_of(job)
    )
    held = (classwise_activations if activations_of is None else activations_of)(job)
    reserve = reserve_term(job).bytes
    # Each class's heaviest stage with its static terms; of those, with (total, −stage), the
    # largest total, the lowest stage among equals.
    totals = [
        (hbm + reserve + most, -stage)
        for hbm, (most, stage) in zip(statics.hbm_bytes, held.heaviest, strict=True)
    ]
    peak_bytes, peak_stage = max(totals)
    return BudgetCore(
        static=statics.placed,
        held=held,
        peak_stage=-peak_stage,
        peak_bytes=peak_bytes,
        most_host=statics.most_host
        + max((sum(t.bytes for t in stage.host) for stage in held.stages), default=0),
        parameters=parameter_count(job.model).total,
        parameters_padded=parameter_count(job.model, padded_vocab(job.model.V, job.layout.t)).total,
    )


def budget(
    job: Plannable,
    activations_of: StagesActivations | None = None,
    parameters_of: Parameters = rank_parameters,
    engine_of: Engine = stage_engine_terms,
    core_of: Core | None = None,
) -> MemoryBudget:
    """Every pipeline stage's heaviest rank, and the peak (the largest total; ties: lowest stage).
    `activations_of`, `parameters_of` and `engine_of` give what `classwise_activations`,
    `rank_parameters` and `engine_terms` give (a search's reuse them across candidates), and
    `core_of` what `budget_core` gives with them.

    The static terms and what a stage keeps per unit in flight are computed once per stage
    class (`planc.stages`), the micro-batches in flight per stage; the peak is found from the
    totals (`budget_core`), and the budgets of its rank and the others are assembled on first
    use (`MemoryBudget.peak`, `MemoryBudget.stages`)."""
    core = (
        budget_core(job, activations_of, parameters_of, engine_of)
        if core_of is None
        else core_of(job)
    )
    staged = StagedMemory(
        stage_classes(job),
        core.static,
        core.held.stages,
        reserve_term(job),
        job.layout.strides[Axis.PP],
    )
    return MemoryBudget(
        parameters=core.parameters,
        parameters_padded=core.parameters_padded,
        staged=staged,
        peak_stage=core.peak_stage,
        peak_bytes=core.peak_bytes,
        most_host=core.most_host,
    )


def classwise_activations(job: Plannable) -> HeldActivations:
    """`stage_activations` of every stage, what a stage keeps per unit in flight
    (`stage_lines`) computed once per stage class (`planc.stages`)."""
    classes = stage_classes(job)
    layer = layer_lines(job)
    lines = [stage_lines(job, stage, layer) for stage in classes.first]
    return HeldActivations(
        classes,
        tuple(
            StageActivations(kept, held_at_peak(job, stage, kept.weights))
            for stage, kept in enumerate(classes.expand(lines))
        ),
    )


def node_host_bytes(job: Plannable, b: MemoryBudget) -> int:
    """Host bytes one node holds: gpus_per_node × the most any rank offloads (conservative: the
    ranks of one node may belong to different stages)."""
    return job.cluster.gpus_per_node * b.most_host
