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

from planc.comm.schedule import CommOp, WireBudget, schedule, wire_budget
from planc.memory import MemoryBudget, budget
from planc.memory.activations import stage_activation_terms
from planc.memory.budget import Activations, Engine, Parameters, stage_engine_terms
from planc.memory.fp8 import quantized_share
from planc.memory.params import RankParameters, rank_parameters
from planc.perf.compute import StageTimes
from planc.perf.inputs import build_inputs, efficiency_of, model_flops, op_seconds, stage_times
from planc.perf.step import pipeline_step
from planc.pipeline.registry import bubble_fraction
from planc.plannable import Plannable
from planc.presets.efficiency import Efficiency
from planc.record import record

if TYPE_CHECKING:
    from planc.pipeline.bounded import PipelineTime


@record
class Analysis:
    """What a plannable job costs, per pipeline stage (no per-rank arrays: cheap at any world)."""

    plan: Plannable
    parameters: tuple[RankParameters, ...]  # Ψ_r of one TP rank of each stage, by part
    memory: MemoryBudget
    ops: tuple[CommOp, ...]  # the communication schedule of one step
    wires: tuple[WireBudget, ...]  # bytes per step on each fabric tier, per stage
    efficiency: Efficiency  # the tables the times come from
    times: tuple[StageTimes, ...]  # forward/backward compute per micro-batch, per stage
    op_seconds: Mapping[CommOp, float]  # seconds per step of each op of `ops`, on its link


#: (job, efficiency tables) → each stage's compute times (`stage_times`).
Times = Callable[[Plannable, Efficiency], tuple[StageTimes, ...]]
#: job → its efficiency tables (`efficiency_of`).
Tables = Callable[[Plannable], Efficiency]
#: (job, tables, ops) → seconds per step of each op (`op_seconds`).
Seconds = Callable[[Plannable, Efficiency, Sequence[CommOp]], tuple[float, ...]]


def analyse(
    plan: Plannable,
    activations_of: Activations = stage_activation_terms,
    times_of: Times = stage_times,
    parameters_of: Parameters = rank_parameters,
    engine_of: Engine = stage_engine_terms,
    tables_of: Tables = efficiency_of,
    seconds_of: Seconds = op_seconds,
) -> Analysis:
    """The analysis of `plan`; every quantity in it computed once, here. A search passes
    `activations_of`, `times_of`, `parameters_of`, `engine_of`, `tables_of` and `seconds_of`
    that return the same terms, times, parameter counts, static terms, tables and op seconds
    for candidates that differ only in what those do not read
    (`planc.search.evaluate.shared_analysis`)."""
    parameters = tuple(parameters_of(plan, r) for r in range(plan.layout.p))
    quantized = (
        tuple(
            (share.dense, share.experts)
            for share in (quantized_share(plan, r) for r in range(plan.layout.p))
        )
        if plan.numerics.quantized is not None
        else ()
    )
    ops = schedule(
        plan,
        [share.dense_total for share in parameters],
        [share.expert_total for share in parameters],
        quantized,
    )
    eff = tables_of(plan)
    return Analysis(
        plan=plan,
        parameters=parameters,
        memory=budget(plan, activations_of, parameters_of, engine_of),
        ops=ops,
        wires=wire_budget(plan, ops),
        efficiency=eff,
        times=times_of(plan, eff),
        op_seconds=MappingProxyType(dict(zip(ops, seconds_of(plan, eff, ops), strict=True))),
    )


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


def estimate_step(analysis: Analysis, efficiency: Efficiency | None = None) -> StepEstimate:
    """The step time, tokens/s and MFU of an analysed job: the one path every command, the
    calibration and the accuracy tests take. `efficiency` replaces the analysis's tables (what
    `planc calibrate` does while it fits them); by default the analysis's own."""
    plan, lay = analysis.plan, analysis.plan.layout
    params = [share.total for share in analysis.parameters]
    experts = [share.expert_total for share in analysis.parameters]
    eff = analysis.efficiency if efficiency is None else efficiency
    step = pipeline_step(build_inputs(plan, params, experts, eff, analysis.ops))
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
