"""What a search prints and writes: text, JSON and CSV reports, and the winner as a spec."""

from __future__ import annotations

import copy
import csv
import io
from collections.abc import Mapping
from typing import Any

from planc.outputs import escape
from planc.perf.unpriced import said
from planc.presets.accuracy import bar_for, category_words, model_words, ordering
from planc.record import record
from planc.search.fallback import FallbackPlan
from planc.search.rank import Ranked, SearchResult
from planc.search.space import Space, Value
from planc.spec.job import GIB, Job, matching_preset, resolved_order
from planc.vocab import ScheduleKind, Unpriced

CSV_FIELDS = (
    "rank",
    "tensor",
    "pipeline",
    "virtual_stages",
    "data",
    "context",
    "sequence_parallel",
    "zero_stage",
    "stage_layers",
    "micro_batch",
    "recompute",
    "expert",
    "expert_tensor",
    "pipeline_schedule",
    "cp_comm_type",
    "order",
    "data_shard",
    "offload",
    "precision",
    "micro_batches",
    "step_time_s",
    "tokens_per_s",
    "mfu",
    "peak_memory_bytes",
    "memory_headroom",
    "bubble_fraction",
    "exposed_comm_s",
    "warnings",
    "unpriced",
)


def parallelism(result: SearchResult, ranked: Ranked, order: str) -> dict[str, Any]:
    """The candidate's `parallelism:` section, every searched field written (None: the field's
    default, which a written spec leaves out: ETP = tensor, the shard group of all data ×
    context, the default schedule for the virtual stages). `order` is the spec's, for a space
    without the order axis."""
    values = result.values(ranked)
    chunks = int(values["virtual_stages"])
    schedule = values.get("pipeline_schedule")
    shard = values.get("data_shard", "all")
    etp = values.get("expert_tensor", values["tensor"])
    return {
        "tensor": values["tensor"],
        "pipeline": values["pipeline"],
        "data": ranked.verdict.data,
        "context": values["context"],
        "virtual_stages": values["virtual_stages"],
        "stage_layers": list(ranked.verdict.stage_layers),
        "sequence_parallel": values["sequence_parallel"],
        "zero_stage": values["zero_stage"],
        "order": values.get("order", order),
        "expert": values.get("expert", 1),
        "expert_tensor": None if etp == values["tensor"] else etp,
        "data_shard": None if shard == "all" else shard,
        "pipeline_schedule": (
            None if schedule in (None, ScheduleKind.default(chunks).value) else schedule
        ),
        "cp_comm_type": values.get("cp_comm_type", "p2p"),
    }


def training(result: SearchResult, ranked: Ranked) -> dict[str, Any]:
    """The searched fields of the candidate's `training:` section."""
    values = result.values(ranked)
    offload = str(values.get("offload", "none"))
    return {
        "micro_batch": values["micro_batch"],
        "recompute": values["recompute"],
        "precision": values.get("precision", "bf16"),
        "offload": {
            "optimizer": offload.startswith("optimizer"),
            "parameters": offload.endswith("parameters"),
        },
    }


def extras(result: SearchResult, ranked: Ranked) -> str:
    """The candidate's values on the axes the table has no column for, where they are not the
    defaults: EP, ETP, schedule, context-parallel type, order, shard group, offload, fp8."""
    par, tr = parallelism(result, ranked, ""), training(result, ranked)
    words = []
    if par["expert"] != 1:
        words.append(f"ep{par['expert']}")
    if par["expert_tensor"] is not None:
        words.append(f"etp{par['expert_tensor']}")
    if par["pipeline_schedule"] is not None:
        words.append(str(par["pipeline_schedule"]))
    if par["context"] > 1:
        words.append(f"cp:{par['cp_comm_type']}")
    if par["order"] not in ("", "tp-cp-dp-pp", "tp-cp-ep-dp-pp"):
        words.append(str(par["order"]))
    if par["data_shard"] is not None:
        words.append(f"shard{par['data_shard']}")
    if tr["offload"]["optimizer"] or tr["offload"]["parameters"]:
        words.append("offload:" + str(result.values(ranked).get("offload")))
    if tr["precision"] != "bf16":
        words.append(str(tr["precision"]))
    return " ".join(words)


def _entry(result: SearchResult, ranked: Ranked, place: int, order: str) -> dict[str, Any]:
    verdict, metrics = ranked.verdict, ranked.metrics
    return {
        "rank": place,
        "parallelism": parallelism(result, ranked, order),
        "training": training(result, ranked),
        "step_time_s": metrics.step_time_s,
        "tokens_per_s": metrics.tokens_per_s,
        "mfu": metrics.mfu,
        "peak_memory_bytes": verdict.peak_memory_bytes,
        "bubble_fraction": verdict.bubble_fraction,
        "memory_headroom": verdict.memory_headroom,
        "micro_batches": verdict.micro_batches,
        "compute_s": metrics.compute_s,
        "bubble_s": metrics.bubble_s,
        "exposed_comm_s": metrics.exposed_comm_s,
        "warnings": list(verdict.warnings),
        "unpriced": list(verdict.unpriced),
    }


def space_json(space: Space) -> dict[str, Any]:
    return {
        "axes": {axis.name: list(axis.values) for axis in space.axes},
        "pinned": [axis.name for axis in space.axes if axis.pinned],
        **dict(space.limits),
    }


def to_json(result: SearchResult, order: str) -> dict[str, Any]:
    """The JSON report: counts, rejections per rule, results best first, and the space."""
    return {
        "evaluated": result.evaluated,
        "feasible": result.feasible,
        "rejected_by_rule": dict(result.rejected_by_rule),
        "results": [
            _entry(result, ranked, place, order) for place, ranked in enumerate(result.results, 1)
        ],
        "estimated": result.estimated,
        "space": space_json(result.space),
        "settled": settled_json(result),
    }


def to_csv(result: SearchResult, order: str) -> str:
    """One row per result, best first, under a header row."""
    out = io.StringIO()
    writer = csv.DictWriter(out, CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for place, ranked in enumerate(result.results, 1):
        entry = _entry(result, ranked, place, order)
        row = {**entry["parallelism"], **entry["training"], **entry}
        row["stage_layers"] = " ".join(str(n) for n in entry["parallelism"]["stage_layers"])
        row["warnings"] = " ".join(entry["warnings"])
        row["unpriced"] = " ".join(entry["unpriced"])
        row["offload"] = result.values(ranked).get("offload", "none")
        writer.writerow({name: _cell(row[name]) for name in CSV_FIELDS})
    return out.getvalue()


def _cell(value: Any) -> Any:
    return str(value).lower() if isinstance(value, bool) else value


# --- text -----------------------------------------------------------------------------------


def _values(values: tuple[Value, ...]) -> str:
    return ",".join(_cell(v) if isinstance(v, bool) else str(v) for v in values)


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ).rstrip()
        for row in rows
    ]


HEADER = [
    "#", "t", "p", "v", "d", "c", "sp", "zero", "b", "recompute", "m",
    "step s", "tokens/s", "MFU", "peak GiB", "free", "bubble", "exposed s", "warnings",
]  # fmt: skip


def _row(result: SearchResult, ranked: Ranked, place: int) -> list[str]:
    values, verdict, metrics = result.values(ranked), ranked.verdict, ranked.metrics
    return [
        str(place),
        str(values["tensor"]),
        str(values["pipeline"]),
        str(values["virtual_stages"]),
        str(verdict.data),
        str(values["context"]),
        "on" if values["sequence_parallel"] else "off",
        str(values["zero_stage"]),
        str(values["micro_batch"]),
        str(values["recompute"]),
        str(verdict.micro_batches),
        f"{metrics.step_time_s:.3f}",
        f"{metrics.tokens_per_s:,.0f}",
        f"{metrics.mfu:.1%}",
        f"{verdict.peak_memory_bytes / GIB:.2f}",
        f"{verdict.memory_headroom:.1%}",
        f"{verdict.bubble_fraction:.1%}",
        f"{metrics.exposed_comm_s:.3f}",
        ",".join(verdict.warnings) or "-",
    ]


def describe(job: Job) -> str:
    """One line naming the run a search is for: the job, the cluster, the model, the step."""
    cl, mod, tr = job.cluster, job.model, job.training
    bar = bar_for(cl.gpu.name, cl.calibration)
    # Every layout of a MoE model is of the moe category: its runs' error is the one to read.
    moe = category_words("moe", cl.calibration, cl.gpu.name) if mod.moe is not None else ""
    # Every layout is of the one model: its preset's runs, where enough are validated, too.
    preset = model_words(matching_preset(mod, tr.s), cl.calibration)
    return (
        f"{job.name}: {job.world:,} GPUs ({cl.nodes:,} × {cl.gpus_per_node} {cl.gpu.name}), "
        f"{mod.preset or 'model'} (L={mod.L}, h={mod.h}), seq_len {tr.s:,}, "
        f"global_batch {tr.B:,}"
        + (f"; step times {bar.words()} (docs/validation.md)" if bar else "")
        + (f"; {moe}" if moe else "")
        + (f"; {preset}" if preset else "")
    )


def render_text(
    result: SearchResult, titles: Mapping[str, str], top: int, heading: str = ""
) -> str:
    """The text report: the space, the counts, the top results and the rejections per rule."""
    space = result.space
    searched = [f"{a.name} {_values(a.values)}" for a in space.axes if not a.pinned]
    pinned = [f"{a.name} {_values(a.values)}" for a in space.axes if a.pinned]
    # The heading carries the spec's own strings (its name, a custom GPU's name): one line of
    # text each, no terminal escape or bidirectional override (outputs/escape.line).
    lines = [escape.line(heading)] if heading else []
    lines += [
        "searched: " + ("; ".join(searched) or "nothing"),
        "pinned: " + ("; ".join(pinned) or "nothing"),
        "limits: " + ", ".join(f"{name} {value:g}" for name, value in space.limits),
        f"{result.evaluated:,} candidates, {result.feasible:,} feasible; {result.estimated:,} "
        f"step times estimated (the other feasible candidates cannot reach the top {top})",
        "",
    ]
    if result.results:
        rows = [HEADER, *(_row(result, r, i) for i, r in enumerate(result.results, 1))]
        more = [extras(result, r) for r in result.results]
        if any(more):  # the axes without a column, where a result leaves their defaults
            rows = [[*row, word or "-"] for row, word in zip(rows, ["also", *more], strict=True)]
        lines += _table(rows, right={0, 1, 2, 3, 4, 5, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17})
        lines.append("")
        lines += order_lines(result)
        lines += unpriced_lines(result)
    else:
        lines += ["no candidate is feasible", ""]
    if result.rejected_by_rule:
        lines.append("rejected, by rule (a candidate several rules reject counts under each):")
        width = max(len(f"{n:,}") for n in result.rejected_by_rule.values())
        for rule, count in result.rejected_by_rule.items():
            lines.append(f"  {rule}  {count:>{width},}  {titles.get(rule, '')}".rstrip())
    return "\n".join(lines) + "\n"


@record
class Settled:
    """How far a search's order is settled: `within` places (#1 included) lie within
    planc's mean error on the ratio of two published layouts' throughputs (`margin`,
    docs/validation.md "Ranking") of #1's ranked quantity, and #2 lies `gap` behind #1."""

    margin: float
    within: int
    gap: float
    pairs: int  # the published pairs the margin was measured on
    right: int  # of them, ordered as measured
    categories: tuple[str, ...]  # the paired runs' categories (moe absent: no MoE pair)


def settled(result: SearchResult) -> Settled | None:
    """`Settled` of `result`; None with fewer than two results or no recorded ranking
    (`planc.presets.accuracy.ordering`)."""
    found = ordering()
    if found is None or len(result.results) < 2:
        return None
    first = result.results[0].metrics.rank_s
    if first <= 0.0:  # no step estimated: nothing to compare
        return None
    margin = found.mean_ratio_error
    within = sum(r.metrics.rank_s <= first * (1 + margin) for r in result.results)
    gap = result.results[1].metrics.rank_s / first - 1
    return Settled(margin, within, gap, found.pairs, found.right, found.categories)


def settled_json(result: SearchResult) -> dict[str, Any] | None:
    """`settled` as data (None where there is none)."""
    found = settled(result)
    if found is None:
        return None
    return {
        "ratio_error": found.margin,
        "places_within": found.within,
        "second_behind": found.gap,
        "published_pairs": found.pairs,
        "published_pairs_ordered": found.right,
        "published_pair_categories": list(found.categories),
    }


def order_lines(result: SearchResult) -> list[str]:
    """How far the listed order can be trusted (`settled`): the places within planc's mean
    error on the ratio of two published layouts of #1, or how far #2 lies beyond it; then a
    blank line. None where `settled` has nothing."""
    found = settled(result)
    if found is None:
        return []
    evidence = (
        f"planc's mean error on the ratio of two published layouts' throughputs "
        f"({found.right} of {found.pairs} pairs ordered as measured, of "
        f"{', '.join(found.categories)} layouts; docs/validation.md#ranking)"
    )
    if found.within >= 2:
        line = (
            f"order: #1 to #{found.within} lie within {found.margin:.1%} of #1, {evidence}: "
            "planc does not settle their order; measure them"
        )
    else:
        line = f"order: #2 is {found.gap:.1%} behind #1, more than {found.margin:.1%}, {evidence}"
    return [line, ""]


def unpriced_lines(result: SearchResult) -> list[str]:
    """Per cost planc knows some listed results spend and does not price (`planc.perf.
    unpriced`): which of them, what it is, and planc's error on the validated runs that have
    it; then a blank line. None where no listed result has one."""
    places: dict[str, list[int]] = {}
    for place, ranked in enumerate(result.results, 1):
        for mechanism in ranked.verdict.unpriced:
            places.setdefault(mechanism, []).append(place)
    lines = []
    for mechanism in Unpriced:
        found = places.get(str(mechanism))
        if not found:
            continue
        ranks = ", ".join(f"#{place}" for place in found)
        lines.append(f"not priced in {ranks}: {said(mechanism)}")
    return [*lines, ""] if lines else []


# --- the winner as a spec ---------------------------------------------------------------------


def _pruned(data: Any) -> Any:
    """`data` without None values and empty mappings or lists (every one a default)."""
    if isinstance(data, dict):
        kept = {key: _pruned(value) for key, value in data.items()}
        return {key: value for key, value in kept.items() if value not in (None, {}, [])}
    if isinstance(data, list):
        return [_pruned(item) for item in data]
    return data


def winner_spec(spec: Mapping[str, Any], result: SearchResult, ranked: Ranked) -> dict[str, Any]:
    """The spec with the candidate's layout written out in full: every parallelism and searched
    training field, and the search's thresholds as `rules`; the `search` section is dropped."""
    data: dict[str, Any] = copy.deepcopy(dict(spec))
    data.pop("search", None)
    order = resolved_order(data["parallelism"])
    data["parallelism"] = {**data["parallelism"], **parallelism(result, ranked, order)}
    searched = training(result, ranked)
    # The searched offload is its two switches; what else the spec offloads (activations) stays.
    offload = {**(data["training"].get("offload") or {}), **searched["offload"]}
    data["training"] = {**data["training"], **searched, "offload": offload}
    if data["training"]["precision"] not in ("fp8", "fp4"):
        data["training"]["fp8"] = None
    data["rules"] = {**data["rules"], **dict(result.space.limits)}
    pruned: dict[str, Any] = _pruned(data)
    return pruned


def spec_yaml(data: Mapping[str, Any], header: str) -> str:
    """`data` as a YAML spec under `header` comment lines."""
    import yaml  # start-up: only --write needs the emitter

    body = yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True, width=100)
    comments = "".join(f"# {line}\n" for line in header.splitlines())
    return comments + body


# --- fallback plans (`planc search --lost-nodes K`, planc.search.fallback) -----------------------


def _layout_words(plan: FallbackPlan) -> str:
    v = plan.values or {}
    sp = " SP" if v.get("sequence_parallel") else ""
    return (
        f"t{v.get('tensor')} p{v.get('pipeline')} v{v.get('virtual_stages')} "
        f"c{v.get('context')} d{plan.data}{sp} ZeRO-{v.get('zero_stage')} "
        f"b{v.get('micro_batch')} {v.get('recompute')}"
    )


def _fallback_line(plan: FallbackPlan) -> str:
    lost = f"−{plan.lost} node{'s' if plan.lost > 1 else ''}"
    head = f"  {lost:<10} {plan.kind:<9}"
    if plan.values is None:
        return f"{head}  none: {plan.reason}"
    run = ""
    if plan.run is not None:
        run = f"  run {plan.run.wall_s / 86_400:,.1f} days, {plan.run.gpu_hours:,.0f} GPU-hours"
    return (
        f"{head}  {plan.nodes:>6,} nodes  {_layout_words(plan)}  B {plan.global_batch:,} "
        f"({plan.drift:+.1%})  step {plan.step_time_s:.3f} s{run}"
    )


def render_fallbacks(plans: tuple[FallbackPlan, ...], tolerance: float) -> str:
    """The fallback plans as text: one line per lost-node count and kind."""
    lines = [
        "",
        f"fallback plans (keep: the model-parallel layout kept, only d, micro-batch and ZeRO "
        f"change, the global batch within ±{tolerance:.0%}; re-layout: every axis searched):",
        *(_fallback_line(plan) for plan in plans),
    ]
    return "\n".join(lines) + "\n"


def fallback_json(plan: FallbackPlan) -> dict[str, Any]:
    """One fallback plan as plain data."""
    run = plan.run
    return {
        "lost_nodes": plan.lost,
        "kind": plan.kind,
        "nodes": plan.nodes,
        "global_batch": plan.global_batch,
        "batch_drift": plan.drift,
        "layout": None if plan.values is None else {**plan.values, "data": plan.data},
        "step_time_s": plan.step_time_s if plan.values is not None else None,
        "wall_s": None if run is None else run.wall_s,
        "gpu_hours": None if run is None else run.gpu_hours,
        "reason": plan.reason or None,
    }
