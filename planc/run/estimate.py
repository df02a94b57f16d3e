"""From step time to the whole run: steps, checkpoint cost, goodput, days, GPU-hours, cost.

`estimate_run(analysis, step)` reads the step time only through `planc.analysis.estimate_step`
(a batch ramp's phases each analysed at their own global batch), the checkpoint from the memory
budget (`planc.run.checkpoint`), and the failure model of `planc.run.failures`.
"""

from __future__ import annotations

import dataclasses
import math

from planc.analysis import Analysis, StepEstimate, analyse, estimate_step
from planc.dims import ceil_div
from planc.plannable import Plannable
from planc.record import record
from planc.run import failures, time
from planc.run.checkpoint import CheckpointSize, checkpoint_size, host_copy_s, transfer_s
from planc.spec.job import RunInputs


@record
class Phase:
    """One phase of the run: global batch B_i (sequences), tokens, steps, the step time at B_i
    (`estimate_step`) and m_i micro-batches (rounded up when b·d does not divide B_i)."""

    B: int
    tokens: int
    steps: int
    step_time_s: float
    m: int
    rounded: bool = False

    @property
    def compute_s(self) -> float:
        return self.steps * self.step_time_s


@record
class CheckpointCost:
    """What checkpointing costs and buys, in seconds unless named otherwise."""

    size: CheckpointSize
    save_s: float  # T_save: writing one checkpoint, max(S_total/B, S_node/B_node)
    blocking_s: float  # δ: what a save stops training for (T_save, or the host copy if async)
    background_s: float  # async: the write that follows the copy (0 when synchronous)
    load_s: float  # reading it back at a restart
    restart_s: float  # R: restart_minutes plus the load
    mtbf_s: float  # M: the job's mean time between interruptions
    optimal_s: float  # Daly's τ for δ and M
    young_s: float  # Young's √(2δM)
    interval_steps: int  # steps between saves (the spec's, or Daly's rounded, at least 1)
    interval_s: float  # τ: the compute between saves
    goodput: float  # at τ
    optimal_goodput: float  # at Daly's τ (as whole steps)
    saves: int  # checkpoints over the run
    export_s: float  # one model-only export, written synchronously
    host_bytes_per_node: int  # async: pinned host buffers on one node (0 when synchronous)


@record
class RunEstimate:
    """The whole run."""

    tokens: int
    steps: int
    phases: tuple[Phase, ...]
    compute_s: float  # Σ steps·T_step: the run without any interruption
    checkpoint: CheckpointCost | None  # None: no checkpoint section, failures not priced
    wall_s: float
    gpu_hours: float
    energy_kwh: float | None
    cost: float | None
    six_nd_flops: float  # 6·N·D, N all parameters
    model_flops: float  # Σ steps × planc's model FLOPs per step

    @property
    def goodput(self) -> float | None:
        return None if self.checkpoint is None else self.checkpoint.goodput


def phase_plan(plan: Plannable, global_batch: int) -> tuple[Plannable, bool]:
    """`plan` at another global batch: the same layout, m = ⌈B_i/(b·d)⌉ micro-batches (True
    when b·d does not divide B_i and m was rounded up)."""
    per_step = plan.training.b * plan.layout.d
    m = max(1, ceil_div(global_batch, per_step))
    training = dataclasses.replace(plan.training, B=m * per_step)
    return dataclasses.replace(plan, training=training, m=m), global_batch % per_step != 0


def phases(analysis: Analysis, step: StepEstimate) -> tuple[Phase, ...]:
    """The run's phases: the batch ramp's, each estimated at its own batch, then the main one
    at training.global_batch for the rest of the tokens (or training.steps); none when the
    spec gives neither."""
    plan, run = analysis.plan, analysis.plan.run
    s, B = plan.training.s, plan.training.B
    if run.tokens is None and run.steps is None:
        return ()  # no length given: the checkpoint and failure model alone
    out = []
    for ramp in run.ramp:
        at, rounded = phase_plan(plan, ramp.B)
        timed = estimate_step(analyse(at))
        steps = time.steps_for_tokens(ramp.tokens, ramp.B, s)
        out.append(Phase(ramp.B, ramp.tokens, steps, timed.step_time_s, at.m, rounded))
    if run.steps is not None:
        main_steps, main_tokens = run.steps, run.steps * B * s
    else:
        main_tokens = (run.tokens or 0) - sum(r.tokens for r in run.ramp)
        main_steps = time.steps_for_tokens(main_tokens, B, s)
    out.append(Phase(B, main_tokens, main_steps, step.step_time_s, plan.m))
    return tuple(out)


def optimal_steps(optimal_s: float, floor_s: float, step_s: float) -> int:
    """Daly's optimum in whole steps: rounded, at least one step and at least the background
    write `floor_s` (an asynchronous save must finish before the next one starts)."""
    steps = max(1, round(optimal_s / step_s))
    return max(steps, math.ceil(floor_s / step_s - 1e-9))


def interval_steps(run: RunInputs, optimal_s: float, floor_s: float, step_s: float) -> int:
    """Steps between saves: the spec's checkpoint.interval, or `optimal_steps`."""
    checkpoint = run.checkpoint
    if checkpoint is not None and checkpoint.interval is not None:
        return checkpoint.interval
    return optimal_steps(optimal_s, floor_s, step_s)


def checkpoint_cost(analysis: Analysis, step_s: float, steps: int) -> CheckpointCost | None:
    """Save, copy, load and restart times of the plan's checkpoint, the optimal interval and
    the goodput; None without a checkpoint section (or storage)."""
    plan = analysis.plan
    run = plan.run
    checkpoint, storage = run.checkpoint, run.storage
    if checkpoint is None or storage is None:
        return None
    size = checkpoint_size(plan, analysis.memory)
    save = transfer_s(size.total_bytes, size.node_bytes, storage.write_gbs, storage.node_write_gbs)
    load = transfer_s(size.total_bytes, size.node_bytes, storage.read_gbs, storage.node_read_gbs)
    staged = max(s.resident for s in size.stages)  # what an async save copies to the host
    if checkpoint.async_save:
        blocking = host_copy_s(staged, plan.cluster.host_bandwidth_gbs)
        background = save
    else:
        blocking, background = save, 0.0
    restart = run.reliability.restart_s + load
    # A failure during an asynchronous write loses the segment before it too: on average the
    # background write's length more work (added to R).
    lost = restart + background
    mtbf = failures.job_mtbf_s(run.reliability.gpu_mtbf_hours, plan.world)
    optimal = failures.daly_interval_s(blocking, mtbf)
    n = interval_steps(run, optimal, background, step_s)
    best = optimal_steps(optimal, background, step_s)
    export = transfer_s(
        size.model_only_bytes,
        ceil_div(size.model_only_bytes * plan.cluster.gpus_per_node, plan.world),
        storage.write_gbs,
        storage.node_write_gbs,
    )
    return CheckpointCost(
        size=size,
        save_s=save,
        blocking_s=blocking,
        background_s=background,
        load_s=load,
        restart_s=restart,
        mtbf_s=mtbf,
        optimal_s=optimal,
        young_s=failures.young_interval_s(blocking, mtbf),
        interval_steps=n,
        interval_s=n * step_s,
        goodput=failures.goodput(n * step_s, blocking, lost, mtbf),
        optimal_goodput=failures.goodput(best * step_s, blocking, lost, mtbf),
        saves=steps // n,
        export_s=export,
        host_bytes_per_node=plan.cluster.gpus_per_node * staged if checkpoint.async_save else 0,
    )


def estimate_run(analysis: Analysis, step: StepEstimate) -> RunEstimate:
    """The whole run of an analysed plan whose step is `step` (`estimate_step(analysis)`)."""
    plan = analysis.plan
    parts = phases(analysis, step)
    steps = sum(p.steps for p in parts)
    tokens = sum(p.tokens for p in parts)
    compute = sum(p.compute_s for p in parts)
    ckpt = checkpoint_cost(analysis, step.step_time_s, steps)
    exports = 0.0
    good = 1.0
    if ckpt is not None and plan.run.checkpoint is not None:
        exports = plan.run.checkpoint.model_only_exports * ckpt.export_s
        good = ckpt.goodput
    wall = time.wall_s(compute, good, exports)
    hours = time.gpu_hours(plan.world, wall)
    price = plan.run.cost
    per_b = step.model_flops / plan.training.B
    return RunEstimate(
        tokens=tokens,
        steps=steps,
        phases=parts,
        compute_s=compute,
        checkpoint=ckpt,
        wall_s=wall,
        gpu_hours=hours,
        energy_kwh=None
        if price is None or price.gpu_power_w is None
        else time.energy_kwh(plan.world, price.gpu_power_w, wall, price.pue),
        cost=None
        if price is None or price.price_per_gpu_hour is None
        else time.cost(hours, price.price_per_gpu_hour),
        six_nd_flops=time.six_nd(analysis.memory.parameters, tokens),
        model_flops=sum(p.steps * per_b * p.B for p in parts),
    )
