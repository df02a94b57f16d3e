"""What a search result tells a user to do: where the spec's own layout ranks and what the best
layout changes and gains (`planc diff`'s rows of the two), and per rejecting rule the nearest
rejected layout and the rule's own message.

The spec's own layout is the job the spec resolves to (the fields it writes, the defaults for
the rest), judged by the same rules as every candidate and priced the same way; its rank is its
place among the results (beyond them when the top is full and it is slower than the last).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from planc.analysis import analyse, estimate_step
from planc.check import evaluate
from planc.outputs.diff import Diff, Side, rows
from planc.plannable import plannable
from planc.record import record
from planc.search.evaluate import Setup, candidate_job, make_judge, spec_job
from planc.search.output import parallelism, training
from planc.search.rank import SearchResult
from planc.search.space import offload_choice
from planc.spec.job import Job, resolved_order


@record
class Nearest:
    """The rejected layout nearest the best one for one rule: the axes it changes (name, the
    best's value, its value) and the rule's message on it."""

    rule: str
    changes: tuple[tuple[str, str, str], ...]
    message: str
    fix: str


@record
class OwnLayout:
    """The spec's own layout against the best: `rejected` the rules that leave it out (with
    the first one's message); else its rank (0: beyond the listed results), step and the diff
    of the two (`planc.outputs.diff.rows`), and the fields the best one changes."""

    rejected: tuple[str, ...]
    message: str
    rank: int
    step_time_s: float
    peak_memory_bytes: int
    changes: tuple[tuple[str, str, str], ...]
    diff_rows: tuple[tuple[str, str, str, str], ...]
    # The axes whose value the space does not try (axis, the spec's value): the layout is
    # then outside the search and has no rank.
    outside: tuple[tuple[str, str], ...] = ()


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        on = [key for key, flag in value.items() if flag]
        return "+".join(on) or "none"
    return "-" if value is None else str(value)


def _fields(par: Mapping[str, Any], tr: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **{f"parallelism.{key}": value for key, value in par.items()},
        **{f"training.{key}": value for key, value in tr.items()},
    }


def _own_fields(spec: Mapping[str, Any], job: Job) -> dict[str, Any]:
    """The spec's own values of the fields a result writes (`parallelism`, `training`)."""
    par, tr = spec["parallelism"], spec["training"]
    lay = job.layout
    return {
        "parallelism.tensor": lay.t,
        "parallelism.pipeline": lay.p,
        "parallelism.data": lay.d,
        "parallelism.context": lay.c,
        "parallelism.virtual_stages": lay.v,
        "parallelism.stage_layers": list(par["stage_layers"]),
        "parallelism.sequence_parallel": lay.sp,
        "parallelism.zero_stage": lay.zero,
        "parallelism.order": resolved_order(par),
        "parallelism.expert": lay.ep,
        "parallelism.expert_tensor": par.get("expert_tensor"),
        "parallelism.data_shard": par.get("data_shard"),
        "parallelism.pipeline_schedule": par.get("pipeline_schedule"),
        # the resolved exchange (the framework's default where the spec names none), as the
        # result writes it
        "parallelism.cp_comm_type": lay.cp_comm,
        "training.micro_batch": tr["micro_batch"],
        "training.recompute": tr["recompute"],
        "training.precision": tr["precision"],
        "training.offload": dict(tr.get("offload") or {}),
    }


def _changes(
    before: Mapping[str, Any], after: Mapping[str, Any]
) -> tuple[tuple[str, str, str], ...]:
    out = []
    for name, value in after.items():
        old = before.get(name)
        if name.endswith("stage_layers") and (not value or not old):
            continue  # an even split either way: nothing to write
        if _shown(old) != _shown(value):
            out.append((name, _shown(old), _shown(value)))
    return tuple(out)


def axis_values(job: Job, order: str) -> dict[str, Any]:
    """A job's value on every search axis (`planc.search.space.AXES`); `order` as written."""
    lay, tr = job.layout, job.training
    return {
        "tensor": lay.t,
        "expert_tensor": lay.et,
        "expert": lay.ep,
        "pipeline": lay.p,
        "virtual_stages": lay.v,
        "pipeline_schedule": lay.schedule.value,
        "context": lay.c,
        "cp_comm_type": lay.cp_comm,
        "order": order,
        "sequence_parallel": lay.sp,
        "zero_stage": lay.zero,
        "data_shard": "all" if lay.data_shard is None else lay.data_shard,
        "offload": offload_choice(tr.offload_optimizer, tr.offload_parameters),
        "micro_batch": tr.b,
        "recompute": tr.recompute,
        "precision": tr.precision,
    }


def _outside(setup: Setup, job: Job) -> tuple[tuple[str, str], ...]:
    mine = axis_values(job, resolved_order(setup.spec["parallelism"]))
    return tuple(
        (axis.name, _shown(mine[axis.name]))
        for axis in setup.space.axes
        if axis.name in mine and mine[axis.name] not in axis.values
    )


def _side(label: str, job: Job) -> Side:
    plan = plannable(job)
    if isinstance(plan, tuple):
        return Side(label, ())
    analysis = analyse(plan)
    return Side(label, (), analysis, estimate_step(analysis))


def own_layout(setup: Setup, result: SearchResult, top: int) -> OwnLayout | None:
    """The spec's own layout against the best result (`top` results listed); None without a
    result."""
    if not result.results:
        return None
    judged = make_judge(setup)
    own = spec_job(setup)
    best = result.results[0]
    best_job = candidate_job(judged.base, judged.space, judged.space.candidate(best.verdict.index))
    best_fields = _fields(parallelism(result, best, ""), training(result, best))
    changes = _changes(_own_fields(setup.spec, own), best_fields)
    evaluation = evaluate(own, suggest=False)
    blocking = [(rule, v) for rule, sev, v in evaluation.violations if setup.rejects(rule, sev)]
    refusals = [(r.rule, r.violation) for r in evaluation.context.refusals]
    stops = blocking or refusals
    if stops:
        rules = tuple(sorted({rule for rule, _ in stops}))
        return OwnLayout(rules, stops[0][1].message, 0, 0.0, 0, changes, ())
    mine, theirs = _side("your layout", own), _side("best", _hosts_of(best_job, own))
    step = mine.step
    if step is None or mine.analysis is None:
        return None
    outside = _outside(setup, own)
    faster = sum(1 for r in result.results if r.metrics.step_time_s < step.step_time_s)
    # Beyond the listed results when the top is full and every one of them is faster: the
    # search did not estimate what lies between. No rank outside the space.
    rank = 0 if outside or faster == len(result.results) >= top else faster + 1
    table = tuple(
        (r.label, r.old, r.new, r.change)
        for r in rows(Diff(mine, theirs))
        if not r.label.startswith("  stage") and r.label != "GPU"
    )
    peak = mine.analysis.memory.peak.memory.total
    return OwnLayout((), "", rank, step.step_time_s, peak, changes, table, outside)


def _hosts_of(job: Job, like: Job) -> Job:
    """`job` on `like`'s cluster hosts (the candidates carry planc's own names)."""
    return dataclasses.replace(
        job, cluster=dataclasses.replace(job.cluster, hosts=like.cluster.hosts)
    )


def nearest(setup: Setup, result: SearchResult) -> tuple[Nearest, ...]:
    """Per rejecting rule (`SearchResult.nearest`), the nearest rejected layout and why."""
    if not result.results or not result.nearest:
        return ()
    judged = make_judge(setup)
    space = judged.space
    best = space.named(space.candidate(result.results[0].verdict.index))
    out = []
    for rule, index in result.nearest.items():
        values = space.named(space.candidate(index))
        changes = tuple(
            (name, _shown(best[name]), _shown(value))
            for name, value in values.items()
            if value != best[name]
        )
        job = candidate_job(judged.base, space, space.candidate(index))
        evaluation = evaluate(job, suggest=False)
        found = [v for r, _, v in evaluation.violations if r == rule]
        found += [r.violation for r in evaluation.context.refusals if r.rule == rule]
        message, fix = (found[0].message, found[0].fix) if found else ("", "")
        out.append(Nearest(rule, changes, message, fix))
    return tuple(out)


def own_json(own: OwnLayout) -> dict[str, Any]:
    return {
        "rejected_by": list(own.rejected),
        "message": own.message or None,
        "rank": own.rank or None,
        "step_time_s": own.step_time_s or None,
        "peak_memory_bytes": own.peak_memory_bytes or None,
        "outside_space": [{"axis": a, "yours": v} for a, v in own.outside],
        "best_changes": [
            {"field": name, "yours": old, "best": new} for name, old, new in own.changes
        ],
        "diff": [
            {"row": label, "yours": old, "best": new, "change": change}
            for label, old, new, change in own.diff_rows
        ],
    }


def nearest_json(found: tuple[Nearest, ...]) -> list[dict[str, Any]]:
    return [
        {
            "rule": n.rule,
            "changes": [{"axis": a, "best": b, "rejected": c} for a, b, c in n.changes],
            "message": n.message,
            "fix": n.fix,
        }
        for n in found
    ]


def render_own(own: OwnLayout, top: int) -> list[str]:
    """The text lines on the spec's own layout."""
    change = "; ".join(f"{name} {old} → {new}" for name, old, new in own.changes)
    if own.rejected:
        return [
            f"your layout is left out by {', '.join(own.rejected)}: {own.message}",
            f"  the best layout changes: {change or 'nothing'}",
            "",
        ]
    if own.outside:
        axes = ", ".join(f"{a} {v}" for a, v in own.outside)
        where = f"is outside the searched space ({axes} not searched)"
    else:
        where = f"ranks {own.rank}" if own.rank else f"ranks below the top {top}"
    lines = [
        f"your layout {where} (step {own.step_time_s:.3f} s); the best layout changes: "
        f"{change or 'nothing'}"
    ]
    width = max(len(label) for label, *_ in own.diff_rows) if own.diff_rows else 0
    for label, old, new, delta in own.diff_rows:
        lines.append(f"  {label:<{width}}  {old} → {new}  {delta}".rstrip())
    return [*lines, ""]


def render_nearest(found: tuple[Nearest, ...]) -> list[str]:
    """The text lines on the nearest rejected layout per rule."""
    if not found:
        return []
    lines = ["nearest rejected layout, by rule (the axes it changes from the best):"]
    for n in found:
        change = ", ".join(f"{a} {b} → {c}" for a, b, c in n.changes) or "the best's own axes"
        lines.append(f"  {n.rule}  {change}: {n.message}".rstrip())
    return lines
