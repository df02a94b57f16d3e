"""`planc report SPEC --compare BASE`: what `planc diff BASE SPEC` says, drawn beside the report.

The table is planc diff's own rows (`planc.outputs.diff.rows`), the findings its added and
removed ones; the pictures put the two sides' step time split (the report's step bar, one per
side, on one scale) and their memory per pipeline stage side by side. Every number is a side's
analysis and step estimate, as planc diff reads them.
"""

from __future__ import annotations

from planc.analysis import StepEstimate
from planc.findings import Finding
from planc.outputs.diff import Diff, rows
from planc.report import fmt
from planc.report.comm import step_parts
from planc.report.gantt import nice_step
from planc.report.svg import NOTHING, Html, group, join, line, markup, rect, svg, text
from planc.spec.job import GIB

WIDTH = 960
LABEL_W = 90
BAR_H = 28
MEMORY_H = 220
MAX_STAGES = 64  # more stages: the memory pairs are left to the table (planc diff's rows)


def _step_pair(old: StepEstimate, new: StepEstimate) -> Html:
    """Both sides' step bars on one scale: the longer step spans the chart."""
    longest = max(old.step_time_s, new.step_time_s) or 1.0
    width = WIDTH - LABEL_W - 110
    parts: list[Html] = []
    for index, (name, step) in enumerate((("before", old), ("after", new))):
        y = 8 + index * (BAR_H + 12)
        x = float(LABEL_W)
        parts.append(text(LABEL_W - 8, y + BAR_H / 2 + 4, name, "axis", "end"))
        for part in step_parts(step):
            w = width * part.seconds / longest
            share = part.seconds / step.step_time_s if step.step_time_s else 0.0
            tip = f"{name}: {part.name} {fmt.seconds(part.seconds)} ({share:.1%} of its step)"
            parts.append(rect(x, y, w, BAR_H, part.cls, tip))
            x += w
        parts.append(text(x + 8, y + BAR_H / 2 + 4, fmt.seconds(step.step_time_s), "op-value"))
    label = (
        f"Step time before {fmt.seconds(old.step_time_s)} and after {fmt.seconds(new.step_time_s)}"
    )
    return svg(WIDTH, 16 + 2 * BAR_H + 12, parts, label, "chart compare-step")


def _legend(old: StepEstimate, new: StepEstimate) -> Html:
    """The parts either side's bar has, by name (the numbers are in each part's tooltip)."""
    names = dict.fromkeys((p.cls, p.name) for p in (*step_parts(old), *step_parts(new)))
    return markup(
        "<ul class='legend'>{}</ul>",
        join(markup("<li><span class='swatch {}'></span>{}</li>", c, n) for c, n in names),
    )


def _memory_pairs(old: list[int], new: list[int], hbm: tuple[int, int]) -> Html:
    """Per stage, the heaviest rank's memory before (light) and after (dark), HBM marked."""
    stages = max(len(old), len(new))
    top = max([*old, *new, *hbm]) * 1.08
    left, bottom = 56.0, 30.0
    slot = (WIDTH - left - 150) / stages
    bar = min(24.0, slot * 0.38)

    def y(n: float) -> float:
        return 8 + MEMORY_H * (1 - n / top)

    parts: list[Html] = []
    right = WIDTH - 150
    sides = (("", hbm[0]),) if hbm[0] == hbm[1] else (("before ", hbm[0]), ("after ", hbm[1]))
    for name, hbm_side in sides:
        parts.append(line(left, y(hbm_side), right, y(hbm_side), "hbm"))
        parts.append(
            text(right + 6, y(hbm_side) + 4, f"HBM {name}{fmt.gib(hbm_side)}", "hbm-label")
        )
    step = nice_step(top / GIB, 5)
    tick = 0.0
    while tick * GIB <= top:
        parts.append(line(left, y(tick * GIB), right, y(tick * GIB), "grid"))
        parts.append(text(left - 6, y(tick * GIB) + 4, f"{tick:,g}", "axis", "end"))
        tick += step
    for stage in range(stages):
        x0 = left + stage * slot + slot / 2
        bars = []
        for offset, cls, name, values in (
            (-bar, "side-old", "before", old),
            (0.0, "side-new", "after", new),
        ):
            if stage < len(values):
                total = values[stage]
                bars.append(
                    rect(
                        x0 + offset,
                        y(total),
                        bar,
                        y(0) - y(total),
                        cls,
                        f"stage {stage} {name}: {fmt.gib(total)}",
                    )
                )
        bars.append(text(x0, 8 + MEMORY_H + 16, str(stage), "axis", "middle"))
        parts.append(group(bars, "pair", None, data_stage=stage))
    parts.append(
        text(
            14,
            8 + MEMORY_H / 2,
            "GiB",
            "axis",
            "middle",
            transform=f"rotate(-90 14 {8 + MEMORY_H / 2:.0f})",
        )
    )
    label = f"Memory per GPU by pipeline stage, before and after, {stages} stages"
    return svg(WIDTH, 8 + MEMORY_H + bottom, parts, label, "chart compare-memory")


def _findings(title: str, sign: str, items: tuple[Finding, ...]) -> Html:
    listed = join(
        markup(
            "<li><code>{}</code> {} <span class='mono'>{}</span>{}: {}</li>",
            sign,
            f.severity.value,
            f.rule,
            markup(" (<code>{}</code>)", f.field) if f.field else NOTHING,
            f.message,
        )
        for f in items
    )
    return markup(
        "<h3>{} ({})</h3>{}",
        title,
        len(items),
        markup("<ul class='diff-findings'>{}</ul>", listed) if items else markup("<p>none</p>"),
    )


# planc diff's row names the report words otherwise; here in the report's words (the report's
# "pipeline bubble" is the step's bubble time, diff's the stages' idle share of the pipeline).
REPORT_WORDS = {"pipeline bubble": "stages idle, share of the pipeline (diff: pipeline bubble)"}


def compare_section(result: Diff) -> Html:
    """The section: planc diff's table, both step bars, the memory pairs, the findings."""
    table = join(
        markup(
            "<tr><td>{}</td><td class='n'>{}</td><td class='n'>{}</td><td class='n'>{}</td></tr>",
            REPORT_WORDS.get(r.label, r.label),
            r.old,
            r.new,
            r.change,
        )
        for r in rows(result)
    )
    old, new = result.old, result.new
    pictures = NOTHING
    if old.step is not None and new.step is not None:
        pictures = markup(
            "<h3>Step time, both sides on one scale</h3>{}{}",
            _step_pair(old.step, new.step),
            _legend(old.step, new.step),
        )
    if old.analysis is not None and new.analysis is not None:
        before = [s.memory.total for s in old.analysis.memory.stages]
        after = [s.memory.total for s in new.analysis.memory.stages]
        if max(len(before), len(after)) <= MAX_STAGES:
            hbm = (
                old.analysis.plan.cluster.gpu.memory_bytes,
                new.analysis.plan.cluster.gpu.memory_bytes,
            )
            pictures = markup(
                "{}<h3>Memory per stage (heaviest rank): <span class='swatch side-old'></span>before "
                "<span class='swatch side-new'></span>after</h3>{}",
                pictures,
                _memory_pairs(before, after, hbm),
            )
    return markup(
        "<section id='compare'><h2>Compared with {}</h2>"
        "<p class='note'>What <code>planc diff {} {}</code> says: before is {}, after is this "
        "report's spec.</p>"
        "<table class='diff'><thead><tr><th></th><th class='n'>before</th><th class='n'>after</th>"
        "<th class='n'>change</th></tr></thead><tbody>{}</tbody></table>{}{}{}</section>",
        old.label,
        old.label,
        new.label,
        old.label,
        table,
        pictures,
        _findings("Findings added", "+", result.added),
        _findings("Findings removed", "−", result.removed),
    )
