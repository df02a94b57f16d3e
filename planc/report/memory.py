"""Memory: one stacked bar per pipeline stage (its heaviest rank), by component, against the HBM
line and the usable line (HBM less the spec's headroom). The heaviest stage is marked; each
segment's tooltip lists its terms with bytes and formula.
"""

from __future__ import annotations

from collections.abc import Callable

from planc.memory.budget import MemoryBudget, StageBudget
from planc.memory.terms import COMPONENTS, Term
from planc.plannable import Plannable
from planc.report import fmt
from planc.report.svg import Html, group, join, label_every, line, markup, rect, svg, text
from planc.spec.job import GIB

WIDTH = 960
LEFT, RIGHT, TOP, BOTTOM = 64, 168, 28, 66
PLOT_HEIGHT = 300
TICK_STEPS_GIB = (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10_000)
MAX_TICKS = 8


def tick_step(top_gib: float) -> int:
    """The smallest round step that needs at most MAX_TICKS ticks up to `top_gib`."""
    for step in TICK_STEPS_GIB:
        if top_gib / step <= MAX_TICKS:
            return step
    return TICK_STEPS_GIB[-1] * (1 + int(top_gib / (TICK_STEPS_GIB[-1] * MAX_TICKS)))


def segment_tip(stage: StageBudget, component: str, terms: list[Term]) -> str:
    total = sum(t.bytes for t in terms)
    lines = [
        f"stage {stage.stage} (rank {stage.rank}), {component}: {fmt.gib(total)} ({total:,} bytes)"
    ]
    lines += [f"{t.name}: {fmt.gib(t.bytes)} = {t.formula}" for t in terms]
    return "\n".join(lines)


def memory_svg(plan: Plannable, memory: MemoryBudget, titled: bool = True) -> Html:
    """The bars; without `titled`, no tooltips (the search explorer draws one chart per
    candidate and stays small)."""
    hbm, usable = plan.cluster.gpu.memory_bytes, plan.usable_hbm_bytes
    stages = memory.stages
    top = max(hbm, memory.peak.memory.total) * 1.08
    plot_w = WIDTH - LEFT - RIGHT
    slot = plot_w / len(stages)
    bar = min(56.0, slot * 0.72)

    def y(n: float) -> float:
        return TOP + PLOT_HEIGHT * (1 - n / top)

    parts: list[Html] = []
    step = tick_step(top / GIB)
    tick = 0
    while tick * step * GIB <= top:
        at = y(tick * step * GIB)
        parts.append(line(LEFT, at, LEFT + plot_w, at, "grid"))
        parts.append(text(LEFT - 6, at + 4, f"{tick * step:,}", "axis", "end"))
        tick += 1
    parts.append(
        text(
            14,
            TOP + PLOT_HEIGHT / 2,
            "GiB per GPU",
            "axis",
            "middle",
            transform=f"rotate(-90 14 {TOP + PLOT_HEIGHT / 2:.0f})",
        )
    )
    parts.append(
        rect(
            LEFT,
            y(hbm),
            plot_w,
            y(usable) - y(hbm),
            "headroom",
            f"headroom: {fmt.gib(hbm - usable)} ({plan.rules.options['memory_headroom']:.0%} of HBM) kept free",
        )
    )
    every = label_every(slot, 30)
    for index, stage in enumerate(stages):
        parts.append(
            _bar(
                plan,
                stage,
                stage is memory.peak,
                LEFT + slot * index + (slot - bar) / 2,
                bar,
                y,
                hbm,
                titled,
            )
        )
        if stage.stage % every == 0:
            parts.append(
                text(
                    LEFT + slot * (index + 0.5),
                    TOP + PLOT_HEIGHT + 16,
                    str(stage.stage),
                    "axis",
                    "middle",
                )
            )
    parts.append(
        text(
            LEFT + plot_w / 2,
            TOP + PLOT_HEIGHT + 32,
            "pipeline stage (its heaviest rank)",
            "axis",
            "middle",
        )
    )
    parts.append(line(LEFT, y(hbm), LEFT + plot_w, y(hbm), "hbm"))
    parts.append(text(LEFT + plot_w + 6, y(hbm) + 4, f"HBM {fmt.gib(hbm)}", "hbm-label"))
    parts.append(line(LEFT, y(usable), LEFT + plot_w, y(usable), "usable"))
    parts.append(
        text(LEFT + plot_w + 6, y(usable) + 14, f"usable {fmt.gib(usable)}", "usable-label")
    )
    parts.append(_legend(TOP + PLOT_HEIGHT + 60))
    label = (
        f"Memory per GPU by pipeline stage: the heaviest is stage {memory.peak.stage} with "
        f"{fmt.gib(memory.peak.memory.total)} of {fmt.gib(hbm)} HBM"
    )
    return svg(WIDTH, TOP + PLOT_HEIGHT + BOTTOM + 10, parts, label, "chart memory")


def _bar(
    plan: Plannable,
    stage: StageBudget,
    peak: bool,
    x: float,
    width: float,
    y: Callable[[float], float],
    hbm: int,
    titled: bool = True,
) -> Html:
    mem = stage.memory
    children: list[Html] = []
    base = 0
    for component in COMPONENTS:
        terms = [t for t in mem.terms if t.component == component and t.bytes]
        size = sum(t.bytes for t in terms)
        if not size:
            continue
        children.append(
            rect(
                x,
                y(base + size),
                width,
                y(base) - y(base + size),
                f"m-{component}",
                segment_tip(stage, component, terms) if titled else None,
            )
        )
        base += size
    over = mem.total > plan.usable_hbm_bytes
    outline = "bar-outline over" if over else "bar-outline"
    children.append(
        rect(x, y(mem.total), width, y(0) - y(mem.total), outline + (" peak" if peak else ""))
    )
    share = mem.total / hbm
    if peak or width >= 34:
        mark = ("▼ " if peak else "") + f"{mem.total / GIB:,.1f}"
        children.append(
            text(
                x + width / 2,
                y(mem.total) - 6,
                mark,
                "bar-label peak-label" if peak else "bar-label",
                "middle",
            )
        )
    tip = (
        f"stage {stage.stage} (rank {stage.rank}, {plan.layout.stage_layers[stage.stage]} layers): "
        f"{fmt.gib(mem.total)}, {share:.1%} of HBM" + (" — the heaviest stage" if peak else "")
    )
    return group(
        children,
        "stage-bar",
        tip if titled else None,
        data_stage=stage.stage,
        data_quantity=f"memory.stages.{stage.stage}.total",
        data_value=mem.total,
    )


def _legend(at: float) -> Html:
    parts: list[Html] = []
    x = float(LEFT)
    for component in COMPONENTS:
        parts.append(rect(x, at - 9, 11, 11, f"m-{component}"))
        parts.append(text(x + 15, at, component, "legend"))
        x += 26 + 7.2 * len(component)
    parts.append(line(x + 4, at - 4, x + 24, at - 4, "hbm"))
    parts.append(text(x + 28, at, "HBM", "legend"))
    parts.append(line(x + 64, at - 4, x + 84, at - 4, "usable"))
    parts.append(text(x + 88, at, "usable (HBM less headroom)", "legend"))
    return group(parts, "legend-row")


def terms_table(plan: Plannable, stage: StageBudget) -> Html:
    """The peak stage's budget term by term, as an HTML table."""
    mem = stage.memory
    rows = join(
        markup(
            "<tr><td>{}</td><td><span class='swatch m-{}'></span>{}</td>"
            "<td class='n'>{}</td><td class='n'>{:.1%}</td>"
            "<td><code>{}</code></td><td class='src'>{}</td></tr>",
            t.name,
            t.component,
            t.component,
            fmt.gib(t.bytes),
            t.bytes / mem.total,
            t.formula,
            t.source,
        )
        for t in mem.terms
    )
    return markup(
        "<table class='terms'><thead><tr><th>term</th><th>component</th><th>GiB</th><th>share</th>"
        "<th>formula</th><th>source</th></tr></thead><tbody>{}</tbody><tfoot><tr><th>total</th>"
        "<th></th><th class='n'>{}</th><th class='n'>100.0%</th><th></th><th></th></tr></tfoot></table>",
        rows,
        fmt.gib(mem.total),
    )
