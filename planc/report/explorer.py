"""`planc search --report FILE.html`: the best layouts a search found, explorable in one page.

One control per searched axis (tensor, pipeline, ZeRO stage, micro-batch, recompute, ...) picks
among the candidates the search estimated, embedded as JSON; each candidate's panel (its memory
bars against HBM, step time, throughput, bubble) is drawn here in Python, and the script only
shows the panel whose values the controls name: the fastest candidate with the value just
chosen and as many of the other choices as exist. Without scripts every panel is shown, best
first, with the ranking table.
"""

from __future__ import annotations

from collections.abc import Mapping

from planc.analysis import Analysis, analyse
from planc.outputs.emit import write_text_atomic
from planc.plannable import plannable
from planc.record import record
from planc.report import fmt
from planc.report.assets import CSS, JS, csp_meta
from planc.report.memory import memory_svg
from planc.report.page import embedded_json
from planc.report.scatter import Point, frontier, scatter_svg
from planc.report.svg import esc
from planc.search.evaluate import Metrics, Setup, Verdict, base_job, candidate_job
from planc.search.output import order_lines
from planc.search.rank import SearchResult
from planc.search.space import Value

MAX_PAGE_CHARS = 1_800_000  # panels stop before the page would pass 2 MB


@record
class Choice:
    """One estimated candidate: its place in the ranking, its axis values, its analysis."""

    place: int
    values: Mapping[str, Value]
    verdict: Verdict
    metrics: Metrics
    analysis: Analysis


def shown(value: Value) -> str:
    """A value as the spec writes it (booleans in lower case)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def choices(setup: Setup, result: SearchResult) -> list[Choice]:
    """The ranked candidates with their analyses, best first."""
    base = base_job(setup)
    out = []
    for place, ranked in enumerate(result.results, start=1):
        values = result.space.candidate(ranked.verdict.index)
        plan = plannable(candidate_job(base, result.space, values))
        if isinstance(plan, tuple):  # a feasible candidate always has a plan
            raise AssertionError(f"candidate {ranked.verdict.index} has no plan")
        named = result.space.named(values)
        out.append(Choice(place, named, ranked.verdict, ranked.metrics, analyse(plan)))
    return out


def _label(choice: Choice, axes: tuple[str, ...]) -> str:
    return " · ".join(f"{name} {shown(choice.values[name])}" for name in axes)


def _panel(choice: Choice, axes: tuple[str, ...]) -> str:
    plan, memory = choice.analysis.plan, choice.analysis.memory
    hbm = plan.cluster.gpu.memory_bytes
    peak = memory.peak.memory.total
    badge, word = (
        ("bad", "OOM")
        if peak > hbm
        else ("warn", "TIGHT")
        if peak > plan.usable_hbm_bytes
        else ("ok", "SAFE")
    )
    m = choice.metrics
    cards = (
        f"<div class='cards'>"
        f"<div class='card'><div class='k'>Step time</div><div class='v'>{fmt.seconds(m.step_time_s)}</div>"
        f"<div class='s'>compute (exposed TP and expert exchange included) {fmt.seconds(m.compute_s)}, "
        f"pipeline bubble {fmt.seconds(m.bubble_s)}, "
        f"exposed comm. {fmt.seconds(m.exposed_comm_s)}</div></div>"
        f"<div class='card'><div class='k'>Throughput</div><div class='v'>{m.tokens_per_s:,.0f}</div>"
        f"<div class='s'>tokens per second; MFU {fmt.percent(m.mfu)}</div></div>"
        f"<div class='card'><div class='k'>Bubble, closed form</div><div class='v'>{fmt.percent(choice.verdict.bubble_fraction)}</div>"
        f"<div class='s'>(p − 1)/(v·m + p − 1) with equal stages, m = {choice.verdict.micro_batches:,}</div></div>"
        f"<div class='card'><div class='k'>Peak memory</div><div class='v'>{fmt.gib(peak)} "
        f"<span class='badge {badge}'>{word}</span></div><div class='s'>{peak / hbm:.1%} of "
        f"{fmt.gib(hbm)}, stage {memory.peak.stage}</div></div></div>"
    )
    lay = plan.layout
    layout = f"t={lay.t} p={lay.p} d={lay.d:,} c={lay.c} v={lay.v} ZeRO-{lay.zero}"
    warnings = (
        f"<p class='note'>warnings: {esc(', '.join(choice.verdict.warnings))}</p>"
        if choice.verdict.warnings
        else ""
    )
    return (
        f"<section class='cand' id='cand-{choice.place}'><h2>#{choice.place}: {esc(_label(choice, axes))}</h2>"
        f"<p class='muted'>{esc(layout)}, micro_batch {plan.training.b}, recompute "
        f"{esc(plan.training.recompute)}</p>{cards}{memory_svg(plan, memory, titled=False)}{warnings}</section>"
    )


def _controls(items: list[Choice], axes: tuple[str, ...]) -> str:
    selects = []
    for name in axes:
        seen: list[str] = []
        for choice in items:
            value = shown(choice.values[name])
            if value not in seen:
                seen.append(value)
        options = "".join(f"<option>{esc(value)}</option>" for value in sorted(seen, key=_order))
        selects.append(
            f"<label>{esc(name)} <select id='axis-{esc(name)}' data-axis='{esc(name)}'>{options}</select></label>"
        )
    return f"<div class='controls'>{''.join(selects)}<p id='status' class='note'></p></div>"


def _scatter_section(items: list[Choice], axes: tuple[str, ...]) -> str:
    """Step time against peak memory of every candidate on the page, the frontier marked."""
    points = [
        Point(c.place, _label(c, axes), c.metrics.step_time_s, c.verdict.peak_memory_bytes)
        for c in items
    ]
    hbm = items[0].analysis.plan.cluster.gpu.memory_bytes
    front = frontier(points)
    return (
        "<section id='scatter'><h2>Step time against peak memory</h2>"
        f"<p class='note'>{len(points):,} candidates; the {len(front):,} joined by the dashed "
        "line are the Pareto frontier (no other candidate is both faster and smaller). "
        "Click a point to show that candidate.</p>"
        f"{scatter_svg(points, hbm)}</section>"
    )


def _order(value: str) -> tuple[int, float | str]:
    try:
        return (0, float(value))
    except ValueError:
        return (1, value)


def _table(items: list[Choice], axes: tuple[str, ...]) -> str:
    head = "".join(f"<th>{esc(name)}</th>" for name in axes)
    rows = "".join(
        f"<tr data-cand='{c.place}'><td class='n'>{c.place}</td>"
        + "".join(f"<td>{esc(shown(c.values[name]))}</td>" for name in axes)
        + f"<td class='n'>{fmt.seconds(c.metrics.step_time_s)}</td><td class='n'>{c.metrics.tokens_per_s:,.0f}</td>"
        f"<td class='n'>{fmt.percent(c.metrics.mfu)}</td><td class='n'>{fmt.gib(c.verdict.peak_memory_bytes)}</td>"
        f"<td class='n'>{fmt.percent(c.verdict.bubble_fraction)}</td></tr>"
        for c in items
    )
    return (
        "<table class='ranking'><thead><tr><th>#</th>"
        f"{head}<th>step</th><th>tokens/s</th><th>MFU</th><th>peak memory</th><th>bubble</th></tr>"
        f"</thead><tbody>{rows}</tbody></table>"
    )


EXPLORER_CSS = """
.controls{display:none;flex-wrap:wrap;gap:8px 18px;align-items:center;margin:10px 0}
html[data-js=on] .controls{display:flex}.controls label{font-size:13px;color:var(--muted)}
.controls select{font:inherit;margin-left:4px;padding:2px 4px;background:var(--panel);color:var(--fg);border:1px solid var(--rule);border-radius:5px}
svg .pt{fill:var(--c-weights);fill-opacity:.55;cursor:pointer}svg .pt.front{fill:var(--t-ep);fill-opacity:1}
svg .pt.on{stroke:var(--fg);stroke-width:2.5;fill-opacity:1}svg .front-line{fill:none;stroke:var(--t-ep);stroke-width:1.5;stroke-dasharray:5 3}
#status{flex-basis:100%;margin:0}.scroll{overflow-x:auto}.ranking tbody tr{cursor:pointer}.ranking tr.on td{background:var(--grid)}
"""

# Show the panel of the candidate the controls name; numbers and panels are all in the page.
EXPLORER_JS = """
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("planc-candidates").textContent);
  var selects = {};
  data.axes.forEach(function (axis) { selects[axis] = document.getElementById("axis-" + axis); });
  var status = document.getElementById("status");
  function show(candidate, changed) {
    document.querySelectorAll(".cand").forEach(function (panel) {
      panel.hidden = panel.id !== "cand-" + candidate.place;
    });
    document.querySelectorAll("tr[data-cand], circle[data-cand]").forEach(function (row) {
      row.classList.toggle("on", row.getAttribute("data-cand") === String(candidate.place));
    });
    var moved = [];
    data.axes.forEach(function (axis) {
      if (selects[axis].value !== candidate.values[axis]) { moved.push(axis + " " + candidate.values[axis]); }
      selects[axis].value = candidate.values[axis];
    });
    status.textContent = "#" + candidate.place + " of " + data.candidates.length +
      (changed && moved.length ? "; the fastest with " + changed + " " +
       candidate.values[changed] + " also has " + moved.join(", ") : "");
  }
  function pick(changed) {
    var best = null, score = -1;
    data.candidates.forEach(function (c) {
      if (c.values[changed] !== selects[changed].value) { return; }
      var same = data.axes.filter(function (a) { return c.values[a] === selects[a].value; }).length;
      if (same > score) { best = c; score = same; }
    });
    if (best) { show(best, changed); }
  }
  data.axes.forEach(function (axis) {
    selects[axis].addEventListener("change", function () { pick(axis); });
  });
  document.querySelectorAll("tr[data-cand], circle[data-cand]").forEach(function (row) {
    row.addEventListener("click", function () {
      show(data.candidates[Number(row.getAttribute("data-cand")) - 1], null);
    });
  });
  if (data.candidates.length) { show(data.candidates[0], null); }
})();
"""


def explorer_page(heading: str, setup: Setup, result: SearchResult) -> str:
    """The page: counts, controls, one panel per estimated candidate, the ranking, the data."""
    items = choices(setup, result)
    axes = tuple(
        a.name for a in result.space.axes if len({shown(c.values[a.name]) for c in items}) > 1
    )
    axes = axes or tuple(a.name for a in result.space.axes[:1])
    panels: list[str] = []
    size = 0
    for choice in items:
        panel = _panel(choice, axes)
        size += len(panel)
        if size > MAX_PAGE_CHARS:
            break
        panels.append(panel)
    items = items[: len(panels)]
    rejected = ", ".join(f"{rule} {count:,}" for rule, count in result.rejected_by_rule.items())
    counts = (
        f"{result.evaluated:,} candidates evaluated, {result.feasible:,} feasible, "
        f"{result.estimated:,} estimated; the best {len(items):,} are here"
        + (f". Rejected by rule: {esc(rejected)}" if rejected else "")
    )
    data = {
        "axes": list(axes),
        "candidates": [
            {
                "place": c.place,
                "values": {name: shown(value) for name, value in c.values.items()},
                "step_time_s": c.metrics.step_time_s,
                "tokens_per_s": c.metrics.tokens_per_s,
                "mfu": c.metrics.mfu,
                "peak_memory_bytes": c.verdict.peak_memory_bytes,
                "bubble_fraction": c.verdict.bubble_fraction,
            }
            for c in items
        ],
    }
    # how far the order is settled, as the text report says it under its table
    settled = "".join(f"<p class='note'>{esc(line)}</p>" for line in order_lines(result) if line)
    body = (
        f"<header><h1>planc search</h1><p class='muted'>{esc(heading)}</p><p class='note'>{counts}.</p></header>"
        + (
            f"{_controls(items, axes)}{_scatter_section(items, axes)}{''.join(panels)}<section><h2>Ranking</h2>"
            f"{settled}<div class='scroll'>{_table(items, axes)}</div></section>"
            if items
            else "<section><p><span class='badge bad'>none</span> No candidate is feasible.</p></section>"
        )
    )
    scripts = (JS, EXPLORER_JS) if items else (JS,)
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"{csp_meta((CSS + EXPLORER_CSS,), scripts)}"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        "<meta name='color-scheme' content='light dark'>"
        f"<title>planc search: {esc(heading)}</title><style>{CSS}{EXPLORER_CSS}</style></head>"
        f"<body><main>{body}</main>"
        f"<script type='application/json' id='planc-candidates'>{embedded_json(data)}</script>"
        f"<script>{JS}</script>"
        + (f"<script>{EXPLORER_JS}</script>" if items else "")
        + "</body></html>\n"
    )


def write_explorer(spec: str, path: str, heading: str, setup: Setup, result: SearchResult) -> str:
    """Write the explorer page atomically; the note for stderr."""
    write_text_atomic(path, explorer_page(heading, setup, result), (spec,))  # never over the spec
    return f"{spec}: wrote the search report to {path}\n"


__all__ = ["Choice", "choices", "explorer_page", "write_explorer"]
