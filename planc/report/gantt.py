"""Pipeline: the simulated schedule as a Gantt chart, one row per stage, time left to right.

Forward, backward and (inside the backward) recompute of every micro-batch are drawn where the
discrete-event simulation (`planc.pipeline.timeline.simulate`) puts them, with each stage's own
compute times from the analysis and the p2p time of one pipeline message; what is left of a
row is idle, shaded as bubble. A step may have thousands of micro-batches: the chart simulates
the first m' (a few groups of p, bounded by MAX_DRAWN_OPS) and says so.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from math import floor, log10

from planc.analysis import Analysis
from planc.pipeline.registry import build, definition
from planc.pipeline.timeline import Span, Timeline, simulate
from planc.record import record
from planc.report import fmt
from planc.report.svg import Html, group, label_every, line, markup, rect, svg, text
from planc.vocab import GroupKind, ScheduleKind

WIDTH = 960
LEFT, RIGHT, TOP, BOTTOM = 70, 16, 10, 64
ROWS_HEIGHT = 360
MAX_ROW = 26.0
MAX_DRAWN_OPS = 6_000  # forward and backward ops simulated and drawn (2·p·m'·v)
TITLED_OPS = 3_000  # up to this many drawn ops each gets a tooltip (the page stays small)
GROUPS_DRAWN = 3  # micro-batches drawn: this many groups of p (at least 8 with p small)
DENSE_PX = 3.0  # a row whose ops average under this width is drawn as merged busy runs


@record
class Gantt:
    """What the chart draws: the simulated first `shown` of `m` micro-batches."""

    p: int
    m: int
    v: int
    shown: int
    timeline: Timeline
    recompute_share: tuple[float, ...]  # of each stage's backward time
    hop_s: float


def drawn_microbatches(p: int, m: int, v: int, kind: ScheduleKind | None = None) -> int:
    """m' ≤ m: GROUPS_DRAWN groups of p (at least 8), at most MAX_DRAWN_OPS ops; a multiple of
    the schedule's micro-batch step (p for interleaved 1F1B) where it has one. `kind`: the
    schedule (default: the one for v)."""
    entry = definition(kind or ScheduleKind.default(v))
    ops = 3 if entry.splits_backward else 2  # ops per micro-batch per chunk
    step = entry.microbatch_step(p)
    if step == 1:
        return max(1, min(m, max(GROUPS_DRAWN * p, 8), MAX_DRAWN_OPS // (ops * p * v)))
    groups = max(1, min(m // step, GROUPS_DRAWN, MAX_DRAWN_OPS // (ops * p * step * v)))
    return step * groups


def recompute_share(analysis: Analysis, stage: int) -> float:
    """The recomputed forward's share of stage `stage`'s backward time (the per-operation
    model's stage times; Korthikanti et al. 2022 §5)."""
    times = analysis.times[stage]
    return times.recompute_s / times.backward_s if times.backward_s > 0 else 0.0


def pipeline_hop_s(analysis: Analysis) -> float:
    """One pipeline message's time: the slowest PP send per call (0 without pipeline)."""
    sends = [op for op in analysis.ops if op.group is GroupKind.PP and op.calls]
    return max((analysis.op_seconds[op] / op.calls for op in sends), default=0.0)


def simulate_drawn(analysis: Analysis) -> Gantt:
    plan = analysis.plan
    lay = plan.layout
    shown = drawn_microbatches(lay.p, plan.m, lay.v, lay.schedule)
    t_f = [t.forward_s / lay.v for t in analysis.times]
    t_b = [t.backward_s / lay.v for t in analysis.times]
    hop = pipeline_hop_s(analysis)
    schedule = build(lay.schedule, lay.p, shown, lay.v)
    if schedule.splits_backward:  # B and W: half the backward each (the zero-bubble B = W)
        t_b = [t / 2 for t in t_b]
        timeline = simulate(schedule, t_f, t_b, hop, t_b)
    else:
        timeline = simulate(schedule, t_f, t_b, hop)
    shares = tuple(recompute_share(analysis, r) for r in range(lay.p))
    return Gantt(lay.p, plan.m, lay.v, shown, timeline, shares, hop)


def nice_step(total: float, ticks: int = 8) -> float:
    """1, 2 or 5 × 10^k: the smallest such step with at most `ticks` steps in `total`."""
    raw = total / ticks
    base = 10.0 ** floor(log10(raw))
    return next(k * base for k in (1, 2, 5, 10) if k * base >= raw)


_OP_WORDS = {"F": "forward", "B": "backward", "W": "weight-gradient backward"}


def _describe(span: Span, stage: int, v: int) -> str:
    kind = _OP_WORDS[span.op.kind]
    chunk = f", chunk {span.op.chunk}" if v > 1 else ""
    start, end = float(span.start), float(span.end)
    return f"stage {stage}: {kind} of micro-batch {span.op.microbatch}{chunk}, {fmt.seconds(start)} – {fmt.seconds(end)}"


def _op_rects(
    span: Span,
    stage: int,
    gantt: Gantt,
    x0: float,
    x1: float,
    top: float,
    height: float,
    titled: bool = True,
) -> list[Html]:
    odd = " odd" if span.op.chunk % 2 else ""
    tip = _describe(span, stage, gantt.v) if titled else None
    if span.op.kind == "F":
        out = [rect(x0, top, x1 - x0, height, "op-f" + odd, tip)]
    else:
        redo = (x1 - x0) * gantt.recompute_share[stage]
        out = [rect(x0, top, x1 - x0, height, "op-b" + odd, tip)]
        if redo >= 0.5:
            out.append(
                rect(
                    x0,
                    top,
                    redo,
                    height,
                    "op-r",
                    tip and tip + f" (recompute first, {gantt.recompute_share[stage]:.0%})",
                )
            )
    if x1 - x0 >= 16 and height >= 12:
        out.append(
            text((x0 + x1) / 2, top + height / 2 + 4, str(span.op.microbatch), "op-label", "middle")
        )
    return out


Scale = Callable[[Fraction | float], float]


def _dense_row(
    spans: tuple[Span, ...], stage: int, x: Scale, top: float, height: float
) -> list[Html]:
    """Merge ops that touch at pixel resolution into busy runs (a row with thousands of ops)."""
    out: list[Html] = []
    run: list[Span] = []

    def flush() -> None:
        if run:
            first, last = run[0], run[-1]
            tip = (
                f"stage {stage}: {len(run)} ops, {fmt.seconds(float(first.start))} – "
                f"{fmt.seconds(float(last.end))}"
            )
            out.append(
                rect(x(first.start), top, x(last.end) - x(first.start), height, "op-busy", tip)
            )
            run.clear()

    for span in spans:
        if run and x(span.start) - x(run[-1].end) > 0.75:
            flush()
        run.append(span)
    flush()
    return out


def gantt_svg(gantt: Gantt) -> Html:
    tl = gantt.timeline
    makespan = float(tl.makespan)
    plot_w = WIDTH - LEFT - RIGHT
    row = min(MAX_ROW, ROWS_HEIGHT / gantt.p)
    bar = max(row - (4 if row >= 12 else 1), 1.0)

    def x(t: Fraction | float) -> float:
        return LEFT + plot_w * float(t) / makespan

    parts: list[Html] = [
        markup(
            "<defs><pattern id='planc-hatch' width='6' height='6' patternUnits='userSpaceOnUse' "
            "patternTransform='rotate(45)'><rect width='6' height='6' class='hatch-bg'/>"
            "<line x1='0' y1='0' x2='0' y2='6' class='hatch-line'/></pattern></defs>"
        )
    ]
    every = label_every(row, 13)
    titled = sum(len(spans) for spans in tl.stages) <= TITLED_OPS
    for stage, spans in enumerate(tl.stages):
        top = TOP + stage * row
        busy = float(tl.busy[stage])
        idle = 1 - busy / makespan
        children = [
            rect(
                LEFT,
                top,
                plot_w,
                bar,
                "bubble",
                f"stage {stage}: idle {idle:.1%} of the drawn time (bubble)",
            )
        ]
        if spans and plot_w * busy / makespan / len(spans) < DENSE_PX:
            children += _dense_row(spans, stage, x, top, bar)
        else:
            for span in spans:
                children += _op_rects(
                    span, stage, gantt, x(span.start), x(span.end), top, bar, titled
                )
        if stage % every == 0:
            children.append(text(LEFT - 8, top + bar / 2 + 4, f"stage {stage}", "axis", "end"))
        parts.append(group(children, "gantt-row", None, data_stage=stage))
    bottom = TOP + gantt.p * row
    step = nice_step(makespan)
    tick = 0
    while tick * step <= makespan * 1.0001:
        at = x(tick * step)
        parts.append(line(at, bottom, at, bottom + 5, "tick"))
        parts.append(text(at, bottom + 18, fmt.seconds(tick * step), "axis", "middle"))
        tick += 1
    parts.append(_legend(bottom + 44))
    label = (
        f"Pipeline schedule of the first {gantt.shown} of {gantt.m} micro-batches on {gantt.p} "
        f"stages: idle time (bubble) {float(tl.bubble_fraction):.1%}"
    )
    return svg(WIDTH, bottom + BOTTOM - 8, parts, label, "chart gantt")


def _legend(at: float) -> Html:
    items = (
        ("op-f", "forward"),
        ("op-b", "backward"),
        ("op-r", "recompute (in backward)"),
        ("bubble", "idle (bubble)"),
    )
    parts: list[Html] = []
    x = float(LEFT)
    for cls, name in items:
        parts.append(rect(x, at - 10, 14, 12, cls))
        parts.append(text(x + 19, at, name, "legend"))
        x += 34 + 7.2 * len(name)
    return group(parts, "legend-row")
