"""One analysis per spec: memory per stage, the communication schedule and the stage compute
times of a plannable job, computed once and shared by the rules, explain, compile and verify.

The step estimate (the pipeline run with each stage's own times) is derived from an analysis by
`estimate_step`; `planc check` never needs it, so it stays off the check path, and each command
that shows it computes it once.
"""

from __future__ import annotations

from dataclasses import dataclass

from planc.comm.schedule import CommOp, WireBudget, schedule, wire_budget
from planc.comm.steptime import StageTimes, StepEstimate, estimate, stage_times
from planc.memory import MemoryBudget, budget
from planc.memory.params import RankParameters, rank_parameters
from planc.plannable import Plannable


@dataclass(frozen=True)
class Analysis:
    """What a plannable job costs, per pipeline stage (no per-rank arrays: cheap at any world)."""

    plan: Plannable
    parameters: tuple[RankParameters, ...]  # Ψ_r of one TP rank of each stage, by part
    memory: MemoryBudget
    ops: tuple[CommOp, ...]  # the communication schedule of one step
    wires: tuple[WireBudget, ...]  # bytes per step per link class, per stage
    times: tuple[StageTimes, ...]  # forward/backward compute per micro-batch, per stage


def analyse(plan: Plannable) -> Analysis:
    """The analysis of `plan`; every quantity in it computed once, here."""
    parameters = tuple(rank_parameters(plan, r) for r in range(plan.layout.p))
    ops = schedule(plan, [share.total for share in parameters])
    return Analysis(
        plan=plan,
        parameters=parameters,
        memory=budget(plan),
        ops=ops,
        wires=wire_budget(plan, ops),
        times=stage_times(plan, plan.training.efficiency),
    )


def estimate_step(analysis: Analysis) -> StepEstimate:
    """The step time, tokens/s and MFU of an analysed job."""
    plan = analysis.plan
    return estimate(plan, analysis.ops, plan.training.efficiency, plan.training.overlap_tp)
