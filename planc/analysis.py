"""One analysis per spec: memory per stage, the communication schedule, and the compute and
communication times of a plannable job, computed once and shared by the rules, explain,
compile, verify, search and the report.

Times come from the per-operation model (`planc.perf`): every op of a layer and of the model's
ends priced on the GPU with the efficiency tables of `planc/presets/efficiency.json` (or the
spec's `hardware.calibration`), every collective on its link with its efficiency and latency.
The step estimate runs the pipeline with each stage's own times (`estimate_step`); `planc check`
never needs it, so it stays off the check path, and each command that shows it computes it once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

from planc.comm.schedule import (
    CommOp,
    SentBytes,
    StagedSchedule,
    StageOps,
    WireBudget,
    class_sent_bytes,
    most_wire_bytes,
    stage_ops,
    staged_schedule,
    staged_wires,
    wire_bytes_bound,
)
from planc.memory import MemoryBudget, budget
from planc.memory.budget import (
    Core,
    Engine,
    Parameters,
    StagesActivations,
    stage_engine_terms,
)
from planc.memory.fp8 import quantized_share
from planc.memory.params import RankParameters, rank_parameters
from planc.perf.compute import StageTimes
from planc.perf.inputs import build_inputs, efficiency_of, model_flops, op_seconds, stage_times
from planc.perf.step import pipeline_step
from planc.pipeline.registry import bubble_fraction
from planc.plannable import Plannable
from planc.presets.efficiency import Efficiency
from planc.record import record
from planc.stages import stage_classes

if TYPE_CHECKING:
    from planc.pipeline.bounded import PipelineTime


@record
class Analysis:
    """What a plannable job costs, per pipeline stage (no per-rank arrays: cheap at any world).

    Per-stage results are computed once per stage class (`planc.stages`): `schedule` holds the
    ops of each class and `seconds` their times; every op of every stage (`ops`), its seconds
    (`op_seconds`) and each stage's wire bytes (`wires`) are listed on first use. The memory
    budget, the compute times and the ops' seconds are computed on first use too, with the
    functions `analyse` was given (a search decides most candidates on memory and wire bytes
    alone, and estimates a step without the memory)."""

    plan: Plannable
    parameters: tuple[RankParameters, ...]  # Ψ_r of one TP rank of each stage, by part
    schedule: StagedSchedule  # the communication schedule of one step, by stage class
    efficiency: Efficiency  # the tables the times come from

    def __eq__(self, other: object) -> bool:
        # The fields, and what is computed on first use.
        if not isinstance(other, Analysis):
            return NotImplemented
        same = (self.plan, self.parameters, self.schedule, self.efficiency) == (
            other.plan,
            other.parameters,
            other.schedule,
            other.efficiency,
        )
        return (
            same
            and self.memory == other.memory
            and self.times == other.times
            and self.seconds == other.seconds
        )

    @property
    def memory(self) -> MemoryBudget:
        """Every stage's heaviest rank and the peak (`planc.memory.budget`)."""
        cached: MemoryBudget | None = self.__dict__.get("_memory")
        if cached is None:
            of: tuple[StagesActivations | None, Parameters, Engine, Core | None] = (
                self.__dict__.get("_memory_of", (None, rank_parameters, stage_engine_terms, None))
            )
            cached = self.__dict__["_memory"] = budget(self.plan, *of)
        return cached

    @property
    def times(self) -> tuple[StageTimes, ...]:
        """Forward/backward compute per micro-batch, per stage (`stage_times`)."""
        cached: tuple[StageTimes, ...] | None = self.__dict__.get("_times")
        if cached is None:
            times_of: Times = self.__dict__.get("_times_of", stage_times)
            cached = self.__dict__["_times"] = times_of(self.plan, self.efficiency)
        return cached

    @property
    def seconds(self) -> tuple[tuple[float, ...], ...]:
        """Seconds per step of each op of `schedule.by_class` (`op_seconds`)."""
        cached: tuple[tuple[float, ...], ...] | None = self.__dict__.get("_seconds")
        if cached is None:
            seconds_of: Seconds = self.__dict__.get("_seconds_of", op_seconds)
            cached = self.__dict__["_seconds"] = tuple(
                seconds_of(self.plan, self.efficiency, ops) for ops in self.schedule.by_class
            )
        return cached

    @property
    def ops(self) -> tuple[CommOp, ...]:
        """The communication schedule of one step: every op of every stage, in stage order."""
        return self.schedule.ops

    @property
    def wires(self) -> tuple[WireBudget, ...]:
        """Bytes per step on each fabric tier, per stage (`planc.comm.schedule.wire_budget`)."""
        cached: tuple[WireBudget, ...] | None = self.__dict__.get("_wires")
        if cached is None:
            cached = self.__dict__["_wires"] = staged_wires(self.plan, self.schedule)
        return cached

    @property
    def most_wire_bytes(self) -> int:
        """The most bytes a stage's rank sends or receives per step on one tier (the largest of
        `wires`)."""
        cached: int | None = self.__dict__.get("_most_wire_bytes")
        if cached is None:
            cached = self.__dict__["_most_wire_bytes"] = most_wire_bytes(self.plan, self.schedule)
        return cached

    @property
    def wire_bytes_bound(self) -> int:
        """An upper bound on `most_wire_bytes` that reads no tier (`wire_bytes_bound`): what
        decides that no rank comes near a limit without the tiers' tallies."""
        sent_of: SentBytes = self.__dict__.get("_sent_of", class_sent_bytes)
        return wire_bytes_bound(self.schedule, sent_of)

    @property
    def op_seconds(self) -> Mapping[CommOp, float]:
        """Seconds per step of each op of `ops`, on its link."""
        cached: dict[CommOp, float] | None = self.__dict__.get("_op_seconds")
        if cached is None:
            classes, staged = self.schedule.classes, self.schedule
            cached = {
                op: seconds
                for stage, k in enumerate(classes.of)
                for op, seconds in zip(staged.stage_ops(stage), self.seconds[k], strict=True)
            }
            self.__dict__["_op_seconds"] = cached
        return MappingProxyType(cached)


#: (job, efficiency tables) → each stage's compute times (`stage_times`).
Times = Callable[[Plannable, Efficiency], tuple[StageTimes, ...]]
#: job → its efficiency tables (`efficiency_of`).
Tables = Callable[[Plannable], Efficiency]
#: (job, tables, ops) → seconds per step of each op (`op_seconds`).
Seconds = Callable[[Plannable, Efficiency, Sequence[CommOp]], tuple[float, ...]]


def analyse(
    plan: Plannable,
    activations_of: StagesActivations | None = None,
    times_of: Times = stage_times,
    parameters_of: Parameters = rank_parameters,
    engine_of: Engine = stage_engine_terms,
    tables_of: Tables = efficiency_of,
    seconds_of: Seconds = op_seconds,
    ops_of: StageOps = stage_ops,
    core_of: Core | None = None,
    sent_of: SentBytes = class_sent_bytes,
) -> Analysis:
    """The analysis of `plan`; every quantity in it computed once, here, and every per-stage
    one once per stage class (`planc.stages`). A search passes `activations_of`, `times_of`,
    `parameters_of`, `engine_of`, `tables_of`, `seconds_of`, `ops_of`, `core_of` and `sent_of`
    that return the same terms, times, parameter counts, static terms, tables, op seconds, ops,
    memory peak (`planc.memory.budget.budget_core`) and bytes each class sends for candidates
    that differ only in what those do not read (`planc.search.evaluate.shared_analysis`)."""
    classes = stage_classes(plan)
    shares = tuple(parameters_of(plan, r) for r in classes.first)
    quantized = (
        tuple(
            (share.dense, share.experts)
            for share in (quantized_share(plan, r) for r in classes.first)
        )
        if plan.numerics.quantized is not None
        else ()
    )
    staged = staged_schedule(
        plan,
        classes,
        [share.dense_total for share in shares],
        [share.expert_total for share in shares],
        quantized,
        ops_of,
    )
    analysis = Analysis(
        plan=plan,
        parameters=classes.expand(shares),
        schedule=staged,
        efficiency=tables_of(plan),
    )
    # What `memory`, `times` and `seconds` compute with, on first use (not fields: functions).
    analysis.__dict__["_memory_of"] = (activations_of, parameters_of, engine_of, core_of)
    analysis.__dict__["_times_of"] = times_of
    analysis.__dict__["_seconds_of"] = seconds_of
    analysis.__dict__["_sent_of"] = sent_of
    return analysis


@record
class StepEstimate:
    """One optimizer step: its time and where it goes (seconds), throughput and MFU.

    `compute_s` is the busiest stage's own compute, exposed TP communication and the MoE
    layers' expert exchanges included;
    `bubble_s` the pipeline's makespan beyond it (fill, drain, uneven stages, p2p on the
    path); `exposed_comm_s` the data-parallel tail and the communication after the optimizer step;
    `optimizer_s` the optimizer update.
    """

    step_time_s: float
    compute_s: float
    bubble_s: float
    exposed_comm_s: float
    optimizer_s: float
    tp_comm_s: float  # exposed TP communication, inside compute_s
    cp_comm_s: float  # exposed ring-attention exchange
    ep_comm_s: float  # expert all-to-all and ETP exchanges, inside compute_s (serialised)
    pp_comm_s: float  # pipeline sends on the critical path, inside bubble_s
    tokens_per_s: float
    mfu: float  # model FLOPs (no recompute, no causal discount) over peak
    model_flops: float
    pipeline: PipelineTime
    bubble_fraction: float  # the schedule's closed form, e.g. (p − 1)/(v·m + p − 1), for comparison
    model: str  # where the efficiency tables came from
    ep_hidden_s: float = (
        0.0  # expert exchanges the schedule hides behind compute (not in ep_comm_s)
    )
    # The release's time per local expert beyond the GPU's work, inside compute_s
    # (`planc.perf.expert_host`).
    expert_host_s: float = 0.0
    # The forward that recompute runs again in backward, inside compute_s (the busiest stage).
    recompute_s: float = 0.0
    # What the passes wait on offload.activations' copies, inside compute_s (`planc.perf.offload`).
    offload_wait_s: float = 0.0
    # Megatron's deferred LM-head weight gradients beyond the pipeline flush they fill, after
    # the pipeline and before the data-parallel tail (`planc.deferral`).
    flush_s: float = 0.0


def estimate_step(analysis: Analysis, efficiency: Efficiency | None = None) -> StepEstimate:
    """The step time, tokens/s and MFU of an analysed job: the one path every command, the
    calibration and the accuracy tests take. `efficiency` replaces the analysis's tables (what
    `planc calibrate` does while it fits them); by default the analysis's own."""
    plan, lay = analysis.plan, analysis.plan.layout
    params = [share.total for share in analysis.parameters]
    experts = [share.expert_total for share in analysis.parameters]
    eff = analysis.efficiency if efficiency is None else efficiency
    step = pipeline_step(build_inputs(plan, params, experts, eff, analysis.schedule.first_ops))
    return StepEstimate(
        step_time_s=step.step_time_s,
        compute_s=step.compute_s,
        bubble_s=step.bubble_s,
        exposed_comm_s=step.dp_exposed_s,
        optimizer_s=step.optimizer_s,
        tp_comm_s=step.tp_exposed_s,
        cp_comm_s=step.cp_exposed_s,
        ep_comm_s=step.ep_exposed_s,
        pp_comm_s=step.pp_exposed_s,
        tokens_per_s=step.tokens_per_s,
        mfu=step.mfu,
        model_flops=model_flops(plan),
        pipeline=step.pipeline,
        bubble_fraction=bubble_fraction(lay.schedule, lay.p, plan.m, lay.v),
        model=_model_words(plan),
        ep_hidden_s=step.ep_hidden_s,
        expert_host_s=step.expert_host_s,
        recompute_s=step.recompute_s,
        offload_wait_s=step.offload_wait_s,
        flush_s=step.flush_exposed_s,
    )


def _model_words(plan: Plannable) -> str:
    if plan.training.efficiency is not None:
        return f"flat GEMM efficiency {plan.training.efficiency:.0%} (training.efficiency)"
    if plan.cluster.calibration is not None:
        return "per-operation model, efficiency from hardware.calibration"
    return f"per-operation model, efficiency tables of {plan.cluster.gpu.name} (efficiency.json)"


def predictor(analysis: Analysis) -> Callable[[Efficiency], float]:
    """The step time of an analysed job as a function of the efficiency tables, priced per
    call by `estimate_step` (what `planc calibrate` fits)."""
    return lambda eff: estimate_step(analysis, eff).step_time_s
