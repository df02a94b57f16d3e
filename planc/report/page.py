"""The report page: check findings, then memory, pipeline, placement and communication, each a
chart with the sentence a reviewer needs, and the numbers behind them embedded as JSON.

`render_page` is a pure function of its inputs: the same spec gives byte-identical HTML.
"""

from __future__ import annotations

import json
from typing import Any

from planc import __version__
from planc.analysis import Analysis, StepEstimate
from planc.findings import FileResult, Finding, Severity
from planc.outputs.explain import Explanation, to_json
from planc.pipeline.registry import definition
from planc.plannable import Plannable
from planc.report import fmt
from planc.report.assets import CSS, JS
from planc.report.comm import busiest_stage, link_table, ops_svg, step_svg, wire_table
from planc.report.gantt import Gantt, gantt_svg, simulate_drawn
from planc.report.memory import memory_svg, terms_table
from planc.report.placement import FULL_GRID_NODES, placement_svg, stage_legend
from planc.report.svg import esc

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


def _card(key: str, value: str, sub: str, extra: str = "") -> str:
    return f"<div class='card'><div class='k'>{esc(key)}</div><div class='v'>{value}</div><div class='s'>{sub}</div>{extra}</div>"


def _gauge(share: float, limit: float, badge: str) -> str:
    """A bar of the peak's share of HBM (capped at full), the usable limit marked."""
    return (
        f"<div class='gauge' title='{share:.1%} of HBM'><span class='{badge}' "
        f"style='width:{min(share, 1.0):.1%}'></span><i style='left:{limit:.1%}'></i></div>"
    )


def cards(plan: Plannable, analysis: Analysis, step: StepEstimate) -> str:
    hbm = plan.cluster.gpu.memory_bytes
    peak = analysis.memory.peak
    badge, word = memory_verdict(plan, analysis)
    share = peak.memory.total / hbm
    memory = _card(
        "Peak memory per GPU",
        f"{fmt.gib(peak.memory.total)} <span class='badge {badge}'>{word}</span>",
        f"{share:.1%} of {fmt.gib(hbm)} HBM, stage {peak.stage} (rank {peak.rank:,})",
        _gauge(share, plan.usable_hbm_bytes / hbm, badge),
    )
    bubble = _card(
        "Pipeline bubble",
        fmt.percent(step.pipeline.bubble_fraction),
        f"{esc(step.pipeline.method)}; closed form (p − 1)/(v·m + p − 1) = "
        f"{fmt.percent(step.bubble_fraction)}",
    )
    time = _card(
        "Step time", fmt.seconds(step.step_time_s), step.model
    )
    tokens = _card("Throughput", f"{step.tokens_per_s:,.0f}", "tokens per second, whole cluster")
    mfu = _card("MFU", fmt.percent(step.mfu), "model FLOPs (no recompute) over peak")
    return f"<div class='cards'>{memory}{bubble}{time}{tokens}{mfu}</div>"


def findings_section(result: FileResult) -> str:
    if not result.findings:
        return "<section id='findings'><h2>Findings</h2><p><span class='badge ok'>clean</span> planc check found nothing.</p></section>"
    rows = "".join(_finding_row(result.path, f) for f in result.findings)
    return (
        f"<section id='findings'><h2>Findings</h2><p class='note'>planc check, {len(result.findings)} "
        "finding(s); a report is drawn even when memory (PLC007) or the bubble (PLC006) fails, "
        "since that is when the pictures help most.</p>"
        "<table class='findings'><thead><tr><th>where</th><th>severity</th><th>rule</th><th>message</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></section>"
    )


def _finding_row(path: str, f: Finding) -> str:
    fix = f"<div class='fix'>fix: {esc(f.fix)}</div>" if f.fix else ""
    field = f"<div><code>{esc(f.field)}</code></div>" if f.field else ""
    return (
        f"<tr><td class='loc mono'>{esc(path)}:{f.line}:{f.column}{field}</td>"
        f"<td><span class='badge {SEVERITY_BADGE[f.severity]}'>{esc(f.severity.value)}</span></td>"
        f"<td class='mono'>{esc(f.rule)}</td><td>{esc(f.message)}{fix}</td></tr>"
    )


def memory_section(plan: Plannable, analysis: Analysis) -> str:
    hbm, usable = plan.cluster.gpu.memory_bytes, plan.usable_hbm_bytes
    peak = analysis.memory.peak
    total = peak.memory.total
    if total > hbm:
        verdict = f"does not fit: {fmt.gib(total - hbm)} over HBM"
    elif total > usable:
        verdict = f"fits HBM but eats into the {plan.rules.options['memory_headroom']:.0%} headroom by {fmt.gib(total - usable)}"
    else:
        verdict = f"fits, {fmt.gib(usable - total)} under the usable limit"
    return (
        "<section id='memory'><h2>Memory per GPU</h2>"
        f"<p>The heaviest rank is on <strong>stage {peak.stage}</strong> (rank {peak.rank:,}): "
        f"<strong>{fmt.gib(total)}</strong> of {fmt.gib(hbm)} HBM ({total / hbm:.1%}); it {verdict}. "
        f"Usable = HBM × (1 − {plan.rules.options['memory_headroom']:g}) = {fmt.gib(usable)}.</p>"
        f"{memory_svg(plan, analysis.memory)}"
        "<p class='note'>Each bar is the heaviest rank of a stage (TP, CP and DP coordinate 0); hover a "
        "segment for its terms, bytes and formulas.</p>"
        f"<details><summary>Stage {peak.stage}, term by term, with sources</summary>{terms_table(plan, peak)}</details>"
        "</section>"
    )


def pipeline_section(plan: Plannable, gantt: Gantt, step: StepEstimate) -> str:
    lay = plan.layout
    pipe = step.pipeline
    drawn = float(gantt.timeline.bubble_fraction)
    shown = (
        f"all {gantt.m} micro-batches"
        if gantt.shown == gantt.m
        else f"the first <strong>{gantt.shown} of {gantt.m:,}</strong> micro-batches (m′ = {gantt.shown}; a longer step repeats the steady state in the middle)"
    )
    entry = definition(lay.schedule)
    closed = (
        f"Bubble, closed form {entry.bubble_formula} = "
        if entry.bubble_formula is not None
        else "Bubble with equal stages (simulated) = "
    )
    if lay.p == 1:
        intro = "<p>One pipeline stage: no pipeline, so no bubble. The row shows the micro-batches running back to back.</p>"
    else:
        intro = (
            f"<p>{entry.title} over p = {lay.p} stages, v = {lay.v}, m = {plan.m:,} micro-batches. "
            f"{closed}<strong>{fmt.percent(step.bubble_fraction)}</strong>; "
            f"simulated over the whole step with each stage's own times and the p2p time "
            f"({esc(pipe.method)}): <strong>{fmt.percent(pipe.bubble_fraction)}</strong>.</p>"
        )
    return (
        "<section id='pipeline'><h2>Pipeline schedule</h2>"
        f"{intro}{gantt_svg(gantt)}"
        f"<p class='note'>Drawn: {shown}, simulated with each stage's forward and backward time per "
        f"micro-batch from the analysis (compute only) and {fmt.seconds(gantt.hop_s)} per pipeline message; "
        f"idle share of the drawn time {fmt.percent(drawn)}. The hatched background is idle time. "
        f"{' Lighter bars are the odd model chunks.' if lay.v > 1 else ''} "
        "Numbers in the bars are micro-batches; hover an op for its times.</p></section>"
    )


def placement_section(plan: Plannable) -> str:
    cl, lay = plan.cluster, plan.layout
    how = (
        "every node"
        if cl.nodes <= FULL_GRID_NODES
        else f"one row per kind of node ({cl.nodes:,} nodes are too many to draw; each row says how many it stands for)"
    )
    order = "-".join(a.value for a in lay.order)
    return (
        "<section id='placement'><h2>Placement</h2>"
        f"<p>{cl.nodes:,} node{'s' if cl.nodes != 1 else ''} × {cl.gpus_per_node} {esc(cl.gpu.name)} GPUs, NVLink domains of "
        f"{cl.nvlink_domain}; rank order {esc(order)} (fastest first), t = {lay.t}, c = {lay.c}, "
        f"d = {lay.d:,}, p = {lay.p}. Drawn: {how}. GPU colour = pipeline stage, dark outline = "
        "tensor-parallel group, grey panel = NVLink domain.</p>"
        f"{stage_legend(plan)}{placement_svg(plan)}</section>"
    )


def comm_section(analysis: Analysis, step: StepEstimate) -> str:
    stage = busiest_stage(analysis)
    return (
        "<section id='communication'><h2>Step time and communication</h2>"
        f"<p>Estimated step time {fmt.seconds(step.step_time_s)}: where it goes.</p>{step_svg(step)}"
        f"<h3>Stage {stage}, the stage that communicates longest: per link class</h3>{link_table(analysis, stage)}"
        f"<h3>Per op, stage {stage} (time per step, α-β model; bytes sent per step)</h3>"
        f"{ops_svg(analysis, stage)}"
        f"<details><summary>Wire bytes per step of every stage</summary>{wire_table(analysis)}</details>"
        "</section>"
    )


def embedded_json(data: dict[str, Any]) -> str:
    """JSON safe inside a `<script>` element: `<`, `>` and `&` as \\u escapes."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_page(result: FileResult, analysis: Analysis, step: StepEstimate) -> str:
    plan = analysis.plan
    lay, cl, tr = plan.layout, plan.cluster, plan.training
    gantt = simulate_drawn(analysis)
    data = {
        "planc": __version__,
        "explain": to_json(Explanation(analysis, step)),
        "drawn_pipeline": {
            "microbatches": gantt.shown,
            "bubble_fraction": float(gantt.timeline.bubble_fraction),
            "makespan_s": float(gantt.timeline.makespan),
            "p2p_s": gantt.hop_s,
        },
    }
    subtitle = (
        f"{plan.world:,} × {esc(cl.gpu.name)} ({cl.nodes:,} node{'s' if cl.nodes != 1 else ''} × {cl.gpus_per_node}) · "
        f"t={lay.t} p={lay.p} d={lay.d:,} c={lay.c} v={lay.v} · ZeRO-{lay.zero} · "
        f"m={plan.m:,} micro-batches of {tr.b} × {tr.s:,} tokens · recompute {esc(tr.recompute)}"
    )
    body = (
        f"<header><h1>planc report: {esc(plan.name)}</h1><p class='muted'>{subtitle}</p>"
        f"<p class='muted mono'>{esc(result.path)}</p></header>"
        f"{cards(plan, analysis, step)}"
        f"{findings_section(result)}"
        f"{memory_section(plan, analysis)}"
        f"{pipeline_section(plan, gantt, step)}"
        f"{placement_section(plan)}"
        f"{comm_section(analysis, step)}"
        f"<footer>planc {esc(__version__)} · every number on this page is computed by planc and "
        "embedded below as JSON (<code>#planc-data</code>); the script only highlights a stage.</footer>"
    )
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        "<meta name='color-scheme' content='light dark'>"
        f"<title>planc report: {esc(plan.name)}</title><style>{CSS}</style></head>"
        f"<body><main>{body}</main>"
        f"<script type='application/json' id='planc-data'>{embedded_json(data)}</script>"
        f"<script>{JS}</script></body></html>\n"
    )
