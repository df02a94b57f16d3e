"""The report page: check findings, then memory, pipeline, placement and communication, each a
chart with the sentence a reviewer needs, and the numbers behind them embedded as JSON.

`render_page` is a pure function of its inputs: the same spec gives byte-identical HTML.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from planc import __version__
from planc.analysis import Analysis, StepEstimate
from planc.findings import FileResult, Finding, Severity
from planc.outputs.diff import Diff
from planc.outputs.diff import to_json as diff_json
from planc.outputs.explain import Explanation, caveats, error_bar_words, run_lines, to_json
from planc.pipeline.registry import definition
from planc.plannable import Plannable
from planc.report import fmt
from planc.report.assets import CSS, DRILL_JS, JS, csp_meta
from planc.report.comm import (
    busiest_stage,
    link_table,
    ops_svg,
    step_legend,
    step_svg,
    wire_table,
)
from planc.report.compare import compare_section
from planc.report.drill import drill_data, drill_panel
from planc.report.gantt import Gantt, gantt_legend, gantt_svg, simulate_drawn
from planc.report.memory import memory_svg, terms_table
from planc.report.placement import FULL_GRID_NODES, drawn_nodes, placement_svg, stage_legend
from planc.report.svg import NOTHING, Html, join, markup
from planc.run import RunEstimate

SEVERITY_BADGE = {
    Severity.FATAL: "bad",
    Severity.ERROR: "bad",
    Severity.WARNING: "warn",
    Severity.INFO: "info",
}


def memory_verdict(plan: Plannable, analysis: Analysis) -> tuple[str, str]:
    """(badge class, word): SAFE under the usable limit, TIGHT inside the headroom, OOM over HBM."""
    peak = analysis.memory.peak.memory.total
    if peak > plan.cluster.gpu.memory_bytes:
        return "bad", "OOM"
    if peak > plan.usable_hbm_bytes:
        return "warn", "TIGHT"
    return "ok", "SAFE"


def _card(
    key: str, value: str, sub: str, extra: Html = NOTHING, quantity: str = "", number: float = 0.0
) -> Html:
    """A headline number: `value` and `sub` are text (escaped), or Html made by `markup`;
    `quantity` names where `number` (the value shown) is in `planc explain --format json`."""
    where = (
        markup(" data-quantity='{}' data-value='{}'", quantity, repr(number))
        if quantity
        else NOTHING
    )
    return markup(
        "<div class='card'><div class='k'>{}</div><div class='v'{}>{}</div><div class='s'>{}</div>{}</div>",
        key,
        where,
        value,
        sub,
        extra,
    )


def _gauge(share: float, limit: float, badge: str) -> Html:
    """A bar of the peak's share of HBM (capped at full), the usable limit marked."""
    return markup(
        "<div class='gauge' title='{:.1%} of HBM'><span class='{}' "
        "style='width:{:.1%}'></span><i style='left:{:.1%}'></i></div>",
        share,
        badge,
        min(share, 1.0),
        limit,
    )


def cards(plan: Plannable, analysis: Analysis, step: StepEstimate) -> Html:
    hbm = plan.cluster.gpu.memory_bytes
    peak = analysis.memory.peak
    badge, word = memory_verdict(plan, analysis)
    share = peak.memory.total / hbm
    memory = _card(
        "Peak memory per GPU",
        markup("{} <span class='badge {}'>{}</span>", fmt.gib(peak.memory.total), badge, word),
        f"{share:.1%} of {fmt.gib(hbm)} HBM, stage {peak.stage} (rank {peak.rank:,})",
        _gauge(share, plan.usable_hbm_bytes / hbm, badge),
        "memory.peak.total",
        peak.memory.total,
    )
    pipe = step.pipeline
    bubble = _card(
        "Pipeline bubble",
        fmt.seconds(step.bubble_s),
        markup(
            "{} of the step (the step bar's bubble); stages idle {} of the pipeline ({}); "
            "closed form with equal stages {}",
            _share(step.bubble_s, step.step_time_s),
            _quantity("pipeline.bubble_fraction", pipe.bubble_fraction, fmt.percent),
            pipe.method,
            _quantity("bubble_fraction", step.bubble_fraction, fmt.percent),
        ),
        NOTHING,
        "step.bubble_s",
        step.bubble_s,
    )
    bars = (*error_bar_words(plan), *caveats(plan))
    time = _card(
        "Step time",
        fmt.seconds(step.step_time_s),
        "; ".join((step.model, *bars)),
        NOTHING,
        "step.step_time_s",
        step.step_time_s,
    )
    tokens = _card(
        "Throughput",
        f"{step.tokens_per_s:,.0f}",
        "tokens per second, whole cluster",
        NOTHING,
        "step.tokens_per_s",
        step.tokens_per_s,
    )
    mfu = _card(
        "MFU",
        fmt.percent(step.mfu),
        "model FLOPs (no recompute) over peak",
        NOTHING,
        "step.mfu",
        step.mfu,
    )
    return markup("<div class='cards'>{}{}{}{}{}</div>", memory, bubble, time, tokens, mfu)


def _quantity(name: str, value: float, shown: Callable[[float], str]) -> Html:
    """`value` as text, marked with where it is in `planc explain --format json`."""
    return markup(
        "<span data-quantity='{}' data-value='{}'>{}</span>", name, repr(value), shown(value)
    )


def _share(part: float, total: float) -> str:
    return fmt.percent(part / total if total else 0.0)


def findings_section(result: FileResult) -> Html:
    if not result.findings:
        return markup(
            "<section id='findings'><h2>Findings</h2><p><span class='badge ok'>clean</span> planc check found nothing.</p></section>"
        )
    rows = join(_finding_row(result.path, f) for f in result.findings)
    return markup(
        "<section id='findings'><h2>Findings</h2><p class='note'>planc check, {} "
        "finding(s); a report is drawn even when memory (PLC007) or the bubble (PLC006) fails, "
        "since that is when the pictures help most.</p>"
        "<table class='findings'><thead><tr><th>where</th><th>severity</th><th>rule</th><th>message</th></tr></thead>"
        "<tbody>{}</tbody></table></section>",
        len(result.findings),
        rows,
    )


def _finding_row(path: str, f: Finding) -> Html:
    fix = markup("<div class='fix'>fix: {}</div>", f.fix) if f.fix else NOTHING
    field = markup("<div><code>{}</code></div>", f.field) if f.field else NOTHING
    return markup(
        "<tr><td class='loc mono'>{}:{}:{}{}</td>"
        "<td><span class='badge {}'>{}</span></td>"
        "<td class='mono'>{}</td><td>{}{}</td></tr>",
        path,
        f.line,
        f.column,
        field,
        SEVERITY_BADGE[f.severity],
        f.severity.value,
        f.rule,
        f.message,
        fix,
    )


def memory_section(plan: Plannable, analysis: Analysis) -> Html:
    hbm, usable = plan.cluster.gpu.memory_bytes, plan.usable_hbm_bytes
    peak = analysis.memory.peak
    total = peak.memory.total
    if total > hbm:
        verdict = f"does not fit: {fmt.gib(total - hbm)} over HBM"
    elif total > usable:
        verdict = f"fits HBM but eats into the {plan.rules.options['memory_headroom']:.0%} headroom by {fmt.gib(total - usable)}"
    else:
        verdict = f"fits, {fmt.gib(usable - total)} under the usable limit"
    return markup(
        "<section id='memory'><h2>Memory per GPU</h2>"
        "<p>The heaviest rank is on <strong>stage {}</strong> (rank {:,}): "
        "<strong>{}</strong> of {} HBM ({:.1%}); it {}. "
        "Usable = HBM × (1 − {:g}) = {}.</p>"
        "{}"
        "<p class='note'>Each bar is the heaviest rank of a stage (TP, CP and DP coordinate 0); hover a "
        "segment for its terms, bytes and formulas.</p>"
        "<details><summary>Stage {}, term by term, with sources</summary>{}</details>"
        "</section>",
        peak.stage,
        peak.rank,
        fmt.gib(total),
        fmt.gib(hbm),
        total / hbm,
        verdict,
        plan.rules.options["memory_headroom"],
        fmt.gib(usable),
        memory_svg(plan, analysis.memory),
        peak.stage,
        terms_table(plan, peak),
    )


def pipeline_section(plan: Plannable, gantt: Gantt, step: StepEstimate) -> Html:
    lay = plan.layout
    pipe = step.pipeline
    drawn = float(gantt.timeline.bubble_fraction)
    shown = (
        markup("the whole step, all {:,} micro-batches", gantt.m)
        if gantt.shown == gantt.m
        else markup(
            "the whole step of {:,} micro-batches: the first and last of {} simulated ones "
            "either side of a break that stands for the other <strong>{:,}</strong> "
            "(the steady state, {} of it, repeats the same pattern)",
            gantt.m,
            gantt.shown,
            gantt.m - gantt.shown,
            fmt.seconds(gantt.compressed_s),
        )
    )
    entry = definition(lay.schedule)
    closed = (
        f"Bubble, closed form {entry.bubble_formula} = "
        if entry.bubble_formula is not None
        else "Bubble with equal stages (simulated) = "
    )
    if lay.p == 1:
        intro = markup(
            "<p>One pipeline stage: no pipeline, so no bubble. The row shows the micro-batches running back to back.</p>"
        )
    else:
        intro = markup(
            "<p>{} over p = {} stages, v = {}, m = {:,} micro-batches. "
            "{}<strong>{}</strong>; "
            "over the whole step with each stage's own times and the p2p time "
            "({}), stages are idle <strong>{}</strong> of the pipeline, and the bubble "
            "adds <strong>{}</strong> ({} of the step) to the busiest stage's compute.</p>",
            entry.title,
            lay.p,
            lay.v,
            plan.m,
            closed,
            fmt.percent(step.bubble_fraction),
            pipe.method,
            fmt.percent(pipe.bubble_fraction),
            fmt.seconds(step.bubble_s),
            _share(step.bubble_s, step.step_time_s),
        )
    return markup(
        "<section id='pipeline'><h2>Pipeline schedule</h2>"
        "{}{}"
        "<p class='note'>Drawn: {}, simulated with the step model's forward and backward time "
        "per micro-batch of each stage (compute with the exposed TP, CP and expert exchanges, as "
        "the step time counts them) and {} per pipeline message; drawn pipeline {} "
        "(the step's: {}); idle share of the simulated time {}. The hatched background is "
        "idle time. Numbers in the bars are micro-batches; hover an op for its times.</p>"
        "{}</section>",
        intro,
        gantt_svg(gantt),
        shown,
        fmt.seconds(gantt.hop_s),
        _quantity(
            "pipeline.makespan_s",
            float(gantt.timeline.makespan) + gantt.compressed_s,
            fmt.seconds,
        )
        if gantt.shown == gantt.m and step.pipeline.method == "simulated"
        else fmt.seconds(float(gantt.timeline.makespan) + gantt.compressed_s),
        fmt.seconds(step.pipeline.makespan_s),
        fmt.percent(drawn),
        gantt_legend(lay.v),
    )


def placement_section(plan: Plannable) -> Html:
    cl, lay = plan.cluster, plan.layout
    how = (
        "every node"
        if cl.nodes <= FULL_GRID_NODES
        else f"one row per kind of node ({cl.nodes:,} nodes are too many to draw; each row says how many it stands for)"
    )
    order = "-".join(a.value for a in lay.order)
    return markup(
        "<section id='placement'><h2>Placement</h2>"
        "<p>{:,} node{} × {} {} GPUs, NVLink domains of "
        "{}; rank order {} (fastest first), t = {}, c = {}, "
        "d = {:,}, p = {}. Drawn: {}. GPU colour = pipeline stage, dark outline = "
        "tensor-parallel group, grey panel = NVLink domain{}.</p>"
        "{}{}{}</section>",
        cl.nodes,
        "s" if cl.nodes != 1 else "",
        cl.gpus_per_node,
        cl.gpu.name,
        cl.nvlink_domain,
        order,
        lay.t,
        lay.c,
        lay.d,
        lay.p,
        how,
        f", dashed outline = expert-parallel group (EP = {lay.ep})" if lay.ep > 1 else "",
        stage_legend(plan),
        placement_svg(plan),
        drill_panel(),
    )


def comm_section(analysis: Analysis, step: StepEstimate) -> Html:
    stage = busiest_stage(analysis)
    return markup(
        "<section id='communication'><h2>Step time and communication</h2>"
        "<p>Estimated step time {}: where it goes, split as <code>planc explain</code> splits "
        "it.</p>{}{}"
        "<h3>Stage {}, the stage that communicates longest: per link class</h3>{}"
        "<h3>Per op, stage {} (time per step, α-β model; bytes sent per step)</h3>"
        "{}"
        "<details><summary>Wire bytes per step of every stage</summary>{}</details>"
        "</section>",
        fmt.seconds(step.step_time_s),
        step_svg(step),
        step_legend(step),
        stage,
        link_table(analysis, stage),
        stage,
        ops_svg(analysis, stage),
        wire_table(analysis),
    )


def run_section(ex: Explanation) -> Html:
    """The whole run (only when the spec asks for it): time to train, GPU-hours, goodput and
    the checkpoint, as cards, then explain's lines."""
    run = ex.run
    if run is None:
        return NOTHING
    ckpt = run.checkpoint
    good = (
        _card("Goodput", "not priced", "add checkpoint: and hardware.storage")
        if ckpt is None
        else _card(
            "Goodput",
            fmt.percent(ckpt.goodput),
            f"checkpoint every {ckpt.interval_steps:,} steps; job MTBF {ckpt.mtbf_s / 3600:.2f} h",
        )
    )
    length = (
        markup(
            "{}{}",
            _card("Time to train", f"{run.wall_s / 86_400:,.1f} days", f"{run.steps:,} steps"),
            _card("GPU-hours", f"{run.gpu_hours:,.0f}", f"{ex.analysis.plan.world:,} GPUs"),
        )
        if run.phases
        else NOTHING
    )
    cards = markup("<div class='cards'>{}{}</div>", length, good)
    return markup(
        "<section id='run'><h2>The whole run</h2>{}<pre class='mono'>{}</pre></section>",
        cards,
        "\n".join(run_lines(ex)),
    )


def embedded_json(data: dict[str, Any]) -> Html:
    """JSON safe inside a `<script>` element: `<`, `>` and `&` as \\u escapes (JSON's own
    escaping, so the data reads back unchanged; no `</script>` can end the element)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return Html(text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def render_page(
    result: FileResult,
    analysis: Analysis,
    step: StepEstimate,
    run: RunEstimate | None = None,
    compare: Diff | None = None,
) -> str:
    plan = analysis.plan
    lay, cl, tr = plan.layout, plan.cluster, plan.training
    gantt = simulate_drawn(analysis, step.pipeline.makespan_s)
    explained = Explanation(analysis, step, run)
    data = {
        "planc": __version__,
        "explain": to_json(explained),
        "drawn_pipeline": {
            "microbatches": gantt.shown,
            "bubble_fraction": float(gantt.timeline.bubble_fraction),
            "makespan_s": float(gantt.timeline.makespan),
            "p2p_s": gantt.hop_s,
        },
        "drill": drill_data(analysis, drawn_nodes(plan)),
        **({} if compare is None else {"compare": diff_json(compare)}),
    }
    subtitle = (
        f"{plan.world:,} × {cl.gpu.name} ({cl.nodes:,} node{'s' if cl.nodes != 1 else ''} × {cl.gpus_per_node}) · "
        f"t={lay.t} p={lay.p} d={lay.d:,} c={lay.c} v={lay.v} · ZeRO-{lay.zero} · "
        f"m={plan.m:,} micro-batches of {tr.b} × {tr.s:,} tokens · recompute {tr.recompute}"
    )
    body = markup(
        "<header><h1>planc report: {}</h1><p class='muted'>{}</p>"
        "<p class='muted mono'>{}</p></header>{}{}{}{}{}{}{}{}"
        "<footer>planc {} · every number on this page is computed by planc and "
        "embedded below as JSON (<code>#planc-data</code>); the script only highlights a stage.</footer>",
        plan.name,
        subtitle,
        result.path,
        cards(plan, analysis, step),
        NOTHING if compare is None else compare_section(compare),
        findings_section(result),
        memory_section(plan, analysis),
        pipeline_section(plan, gantt, step),
        placement_section(plan),
        comm_section(analysis, step),
        run_section(explained),
        __version__,
    )
    return page(f"planc report: {plan.name}", CSS, body, embedded_json(data), JS + DRILL_JS)


def page(title: str, css: str, body: Html, data: Html, *scripts: str) -> str:
    """The document: `title` (text), the page's own stylesheet and scripts (constants of
    planc.report.assets), the body, the numbers as JSON (`embedded_json`), and the
    Content-Security-Policy that lets only that stylesheet and those scripts run."""
    return markup(
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>{}"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        "<meta name='color-scheme' content='light dark'>"
        "<title>{}</title><style>{}</style></head>"
        "<body><main>{}</main>"
        "<script type='application/json' id='planc-data'>{}</script>{}</body></html>\n",
        csp_meta((css,), scripts),
        title,
        Html(css),
        body,
        data,
        join(markup("<script>{}</script>", Html(script)) for script in scripts),
    )
