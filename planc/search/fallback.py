"""Fallback plans: what to run when nodes are lost, found before the failure.

For the world less k = 1 … K nodes (landscape 2026-12-01 §5.5; Fast-LLM #241 simulated the
same by hand), two searches through the search loop of `planc.search.run`:

- **keep**: the spec's model-parallel layout (tensor, pipeline, context, virtual stages,
  sequence parallelism, recompute) kept, so no checkpoint is resharded across model-parallel
  ranks; only the data degree (derived), the micro-batch and the ZeRO stage change. The global
  batch becomes the multiple of the new data degree nearest the spec's, and the plan is kept
  only when that is within the tolerance. Megatron's distributed optimizer loads under another
  data-parallel size (Megatron-LM #2829), torch DCP reshards at load.
- **re-layout**: every axis over planc's default range, at the keep plan's global batch (the
  spec's when keep has none): the fastest layout however the checkpoint must be resharded.

Each plan carries its step and its time-to-train (`planc.run.estimate_run` on the new plan:
the remaining run at the new batch, with its own checkpoint cost and goodput). The keep space
has at most 4 × 4 candidates; the re-layout space is the plain search's, estimated for its top
place only (`TOP`), so K re-layouts cost about K plain searches' judging.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from planc.analysis import analyse, estimate_step
from planc.plannable import plannable
from planc.record import record
from planc.run import RunEstimate, estimate_run
from planc.search.evaluate import Setup, base_job, candidate_job
from planc.search.rank import Ranked, SearchResult
from planc.search.run import Progress, search, silent
from planc.search.space import (
    AXES,
    MICRO_BATCHES,
    SearchAxis,
    Space,
    Value,
    grouped,
    offload_choice,
)
from planc.spec.job import Job
from planc.vocab import FallbackKind

Kind = FallbackKind
TOP = 1
# The spec's global batch may move by this fraction by default (Fast-LLM #241: ±10 %).
DEFAULT_TOLERANCE = 0.10
KEPT = ("tensor", "pipeline", "context", "virtual_stages", "sequence_parallel", "recompute")


@record
class FallbackPlan:
    """The fastest plan of one kind for the world less `lost` nodes, or why there is none."""

    lost: int
    nodes: int  # the nodes the plan uses (at most the nodes left; a keep plan may idle some)
    kind: Kind
    global_batch: int
    drift: float  # (B' − B)/B: how far the global batch moved
    values: Mapping[str, Value] | None  # the layout, by search axis; None: none found
    data: int = 0
    step_time_s: float = 0.0
    run: RunEstimate | None = None  # the whole run on this plan (when the spec gives tokens)
    reason: str = ""


def keep_data(world: int, inner: int, gpus_per_node: int) -> int:
    """d': the largest data degree whose t·p·c·d' GPUs fit in `world` on whole nodes (the
    nodes left over idle; 0 when not even one replica fits)."""
    d = world // inner
    while d > 0 and (d * inner) % gpus_per_node:
        d -= 1
    return d


def nearest_batch(batch: int, data: int) -> int:
    """B' = the multiple of the data degree d' nearest B (at least d'): the batch a keep plan
    runs with b = 1 (ties: the larger)."""
    low = max(data, batch // data * data)
    high = low + data
    return high if high - batch <= batch - low else low


def _spec_at(spec: Mapping[str, Any], nodes: int, batch: int) -> dict[str, Any]:
    return {
        **spec,
        "hardware": {**spec["hardware"], "nodes": nodes, "hosts": []},
        "training": {**spec["training"], "global_batch": batch},
    }


def keep_space(job: Job, space: Space) -> Space:
    """The keep search: the job's model-parallel degrees pinned, micro-batch and ZeRO stage
    over their default ranges, data derived."""
    lay, tr = job.layout, job.training
    kept: dict[str, Value] = {
        "tensor": lay.t,
        "pipeline": lay.p,
        "context": lay.c,
        "virtual_stages": lay.v,
        "sequence_parallel": lay.sp,
        "recompute": tr.recompute,
        "expert": lay.ep,
        "expert_tensor": lay.et,
        "pipeline_schedule": lay.schedule.value,
        "cp_comm_type": lay.cp_comm,
        "order": "-".join(lay.expert_order if lay.ep > 1 else lay.order),
        "data_shard": "all" if lay.data_shard is None else lay.data_shard,
        "offload": offload_choice(tr.offload_optimizer, tr.offload_parameters),
        "precision": tr.precision,
    }
    axes = []
    for axis in AXES:
        if axis.name in kept:
            axes.append(SearchAxis(axis.name, axis.section, (kept[axis.name],), True))
        elif axis.name == "micro_batch":
            values = tuple(sorted({*MICRO_BATCHES, tr.b}))
            axes.append(SearchAxis(axis.name, axis.section, values, False))
        else:
            axes.append(SearchAxis(axis.name, axis.section, axis.default(job), False))
    kept_axes = tuple(axes)
    return Space(kept_axes, None, lay.stage_layers, space.limits, grouped(kept_axes, job))


def relayout_space(job: Job, space: Space) -> Space:
    """The re-layout search: every axis over planc's default range for the smaller world."""
    tr = job.training
    # The run's numerics and offload stay the spec's: a re-layout changes the layout only.
    kept: dict[str, Value] = {
        "precision": tr.precision,
        "offload": offload_choice(tr.offload_optimizer, tr.offload_parameters),
    }
    axes = tuple(
        SearchAxis(axis.name, axis.section, (kept[axis.name],), True)
        if axis.name in kept
        else SearchAxis(axis.name, axis.section, tuple(axis.default(job)), False)
        for axis in AXES
    )
    return Space(axes, None, (), space.limits, grouped(axes, job))


def _plan_of(
    setup: Setup, result: SearchResult, lost: int, kind: Kind, drift: float
) -> FallbackPlan:
    nodes = setup.spec["hardware"]["nodes"]
    batch = setup.spec["training"]["global_batch"]
    if not result.results:
        return FallbackPlan(lost, nodes, kind, batch, drift, None, reason="no feasible layout")
    top: Ranked = result.results[0]
    job = candidate_job(base_job(setup), result.space, result.space.candidate(top.verdict.index))
    plan = plannable(job)
    run = None
    if not isinstance(plan, tuple) and plan.run.asked:
        analysis = analyse(plan)
        run = estimate_run(analysis, estimate_step(analysis))
    return FallbackPlan(
        lost,
        nodes,
        kind,
        batch,
        drift,
        result.values(top),
        data=top.verdict.data,
        step_time_s=top.metrics.step_time_s,
        run=run,
    )


def _searched(setup: Setup, space: Space, progress: Progress, jobs: int) -> SearchResult:
    return search(dataclasses.replace(setup, space=space), TOP, jobs, progress)


def _relayout(
    setup: Setup,
    job: Job,
    nodes: tuple[int, ...],
    lost: int,
    batch: int,
    jobs: int,
    progress: Progress,
) -> FallbackPlan:
    """The fastest full re-layout on the first of `nodes` that has one (the nodes left, then
    the keep plan's count)."""
    drift = (batch - job.training.B) / job.training.B
    plan = FallbackPlan(
        lost, nodes[0], "re-layout", batch, drift, None, reason="no feasible layout"
    )
    for count in dict.fromkeys(nodes):
        smaller = dataclasses.replace(setup, spec=_spec_at(setup.spec, count, batch))
        result = _searched(smaller, relayout_space(base_job(smaller), setup.space), progress, jobs)
        plan = _plan_of(smaller, result, lost, "re-layout", drift)
        if plan.values is not None:
            return plan
    return plan


def fallbacks_for(
    setup: Setup,
    job: Job,
    lost: int,
    tolerance: float = DEFAULT_TOLERANCE,
    jobs: int = 1,
    progress: Progress = silent,
) -> tuple[FallbackPlan, FallbackPlan]:
    """The keep and re-layout plans for `job`'s world less `lost` nodes."""
    left, per_node, batch = job.cluster.nodes - lost, job.cluster.gpus_per_node, job.training.B
    if left < 1:
        none = FallbackPlan(lost, 0, "keep", batch, 0.0, None, reason="no node left")
        return none, dataclasses.replace(none, kind="re-layout")
    inner = job.layout.t * job.layout.p * job.layout.c
    data = keep_data(left * per_node, inner, per_node)
    keep_nodes = data * inner // per_node
    keep_batch = nearest_batch(batch, data) if data else batch
    drift = (keep_batch - batch) / batch
    within = data > 0 and abs(drift) <= tolerance
    relayout_batch = keep_batch if within else batch
    relayout = _relayout(
        setup,
        job,
        (left, keep_nodes) if keep_nodes else (left,),
        lost,
        relayout_batch,
        jobs,
        progress,
    )
    if not within:
        why = (
            f"no t·p·c = {inner} replica fits on {left:,} nodes"
            if data == 0
            else f"the nearest batch, {keep_batch:,}, is {abs(drift):.1%} from {batch:,}, "
            f"beyond ±{tolerance:.0%}"
        )
        return FallbackPlan(lost, keep_nodes, "keep", keep_batch, drift, None, reason=why), relayout
    at_keep = dataclasses.replace(setup, spec=_spec_at(setup.spec, keep_nodes, keep_batch))
    kept_result = _searched(at_keep, keep_space(base_job(at_keep), setup.space), progress, jobs)
    return _plan_of(at_keep, kept_result, lost, "keep", drift), relayout


def fallbacks(
    setup: Setup,
    job: Job,
    most: int,
    tolerance: float = DEFAULT_TOLERANCE,
    jobs: int = 1,
    progress: Progress = silent,
) -> tuple[FallbackPlan, ...]:
    """Keep and re-layout plans for the world less 1 … `most` nodes, in that order."""
    out: list[FallbackPlan] = []
    for lost in range(1, most + 1):
        out += fallbacks_for(setup, job, lost, tolerance, jobs, progress)
    return tuple(out)
