"""Pipeline: the simulated schedule as a Gantt chart, one row per stage, time left to right.

Forward, backward and (inside the backward) recompute of every micro-batch are drawn where the
discrete-event simulation (`planc.pipeline.timeline.simulate`) puts them, with each stage's own
compute times from the analysis and the p2p time of one pipeline message; what is left of a
row is idle, shaded as bubble. A step may have thousands of micro-batches: the chart simulates
the first m' (a few groups of p, bounded by MAX_DRAWN_OPS) and says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from fractions import Fraction
from math import floor, log10

from planc.analysis import Analysis
from planc.perf.inputs import build_inputs
from planc.perf.step import virtual_times, weight_times
from planc.pipeline.registry import build, definition
from planc.pipeline.timeline import Span, Timeline, simulate
from planc.record import record
from planc.report import fmt
from planc.report.svg import Html, group, join, label_every, line, markup, rect, svg, text
from planc.vocab import ScheduleKind

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
    # The whole step's pipeline makespan (the analysis's); beyond the drawn makespan when
    # shown < m, the middle of the chart stands for the steady state repeated for that long.
    total_s: float = 0.0

    @property
    def compressed_s(self) -> float:
        """Seconds of repeated steady state the chart leaves out (0 when it draws all of m)."""
        if self.shown >= self.m:
            return 0.0
        return max(0.0, self.total_s - float(self.timeline.makespan))


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


def simulate_drawn(analysis: Analysis, total_s: float = 0.0) -> Gantt:
    """Simulate the schedule with the step model's own per-micro-batch times (compute with the
    exposed TP, CP and expert exchanges and the overlap slowdowns, as `planc.perf.step` runs
    it) and its p2p time: all m micro-batches when that is at most MAX_DRAWN_OPS ops, so the
    drawn makespan is the analysis's pipeline; else the first m' (`drawn_microbatches`), the
    chart then standing for `total_s` (the analysis's pipeline makespan) with the steady state
    in the middle left out."""
    plan = analysis.plan
    lay = plan.layout
    entry = definition(lay.schedule)
    per_microbatch = (3 if entry.splits_backward else 2) * lay.p * lay.v
    whole = plan.m * per_microbatch <= MAX_DRAWN_OPS
    shown = plan.m if whole else drawn_microbatches(lay.p, plan.m, lay.v, lay.schedule)
    inputs = build_inputs(
        plan,
        [share.total for share in analysis.parameters],
        [share.expert_total for share in analysis.parameters],
        analysis.efficiency,
        analysis.ops,
    )
    t_f, t_b = virtual_times(inputs)
    hop = inputs.p2p_s
    schedule = build(lay.schedule, lay.p, shown, lay.v)
    if schedule.splits_backward:  # B and W: the step model's input and weight gradients
        t_w = weight_times(inputs)
        t_in = [b - w for b, w in zip(t_b, t_w, strict=True)]
        timeline = simulate(schedule, t_f, t_in, hop, t_w)
    else:
        timeline = simulate(schedule, t_f, t_b, hop)
    shares = tuple(recompute_share(analysis, r) for r in range(lay.p))
    return Gantt(lay.p, plan.m, lay.v, shown, timeline, shares, hop, total_s)


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


GAP = 36.0  # px: the break standing for the steady state a compressed chart leaves out


@record
class Cut:
    """Where a compressed chart breaks: drawn time `at` (s), and the seconds left out there."""

    at: float
    left_out_s: float


def _shift(span: Span, by: float, microbatches: int) -> Span:
    """`span` as it runs later in the whole step: `by` seconds and `microbatches` later."""
    op = dataclasses.replace(span.op, microbatch=span.op.microbatch + microbatches)
    return Span(op, span.start + Fraction(by), span.end + Fraction(by))


def whole_step(gantt: Gantt) -> tuple[tuple[tuple[Span, ...], ...], Cut | None]:
    """Every stage's spans in the whole step's time: as simulated, or, compressed, those after
    the middle of the drawn time moved by the steady state left out (their micro-batches
    numbered as in the step; an op across the middle split in two)."""
    tl = gantt.timeline
    left_out = gantt.compressed_s
    if left_out <= 0:
        return tl.stages, None
    at = Fraction(tl.makespan) / 2
    later = gantt.m - gantt.shown
    stages = []
    for spans in tl.stages:
        out: list[Span] = []
        for span in spans:
            if span.end <= at:
                out.append(span)
            elif span.start >= at:
                out.append(_shift(span, left_out, later))
            else:
                out.append(Span(span.op, span.start, at))
                out.append(_shift(Span(span.op, at, span.end), left_out, later))
        stages.append(tuple(out))
    return tuple(stages), Cut(float(at), left_out)


def gantt_svg(gantt: Gantt) -> Html:
    tl = gantt.timeline
    drawn = float(tl.makespan)
    stages, cut = whole_step(gantt)
    plot_w = WIDTH - LEFT - RIGHT
    row = min(MAX_ROW, ROWS_HEIGHT / gantt.p)
    bar = max(row - (4 if row >= 12 else 1), 1.0)
    span_w = plot_w - (GAP if cut else 0.0)

    def x(t: Fraction | float) -> float:
        at = float(t)
        if cut is None or at <= cut.at:
            return LEFT + span_w * at / drawn
        return LEFT + GAP + span_w * (at - cut.left_out_s) / drawn

    parts: list[Html] = [
        markup(
            "<defs><pattern id='planc-hatch' width='6' height='6' patternUnits='userSpaceOnUse' "
            "patternTransform='rotate(45)'><rect width='6' height='6' class='hatch-bg'/>"
            "<line x1='0' y1='0' x2='0' y2='6' class='hatch-line'/></pattern></defs>"
        )
    ]
    every = label_every(row, 13)
    titled = sum(len(spans) for spans in stages) <= TITLED_OPS
    for stage, spans in enumerate(stages):
        top = TOP + stage * row
        busy = float(tl.busy[stage])
        idle = 1 - busy / drawn
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
        if spans and span_w * busy / drawn / len(spans) < DENSE_PX:
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
    parts += _ticks(x, drawn, cut, bottom)
    if cut is not None:
        parts.append(_break(x(cut.at), bottom, gantt, cut))
    label = (
        f"Pipeline schedule of the whole step, {gantt.m} micro-batches on {gantt.p} stages"
        + (
            f" (the middle {gantt.m - gantt.shown} micro-batches of steady state left out)"
            if cut
            else ""
        )
        + f": idle time (bubble) {float(tl.bubble_fraction):.1%} of the drawn time"
    )
    return svg(WIDTH, bottom + (BOTTOM - 8 if cut else 34), parts, label, "chart gantt")


def _ticks(x: Scale, drawn: float, cut: Cut | None, bottom: float) -> list[Html]:
    """Time ticks in the whole step's seconds: round steps, on each side of a cut."""
    step = nice_step(drawn)
    pieces = (
        [(0.0, drawn)]
        if cut is None
        else [(0.0, cut.at), (cut.at + cut.left_out_s, drawn + cut.left_out_s)]
    )
    out: list[Html] = []
    for low, high in pieces:
        tick = step * -(-low // step)
        while tick <= high * 1.0001:
            if cut is None or abs(x(tick) - x(cut.at)) > 24 or tick == 0:
                at = x(tick)
                out.append(line(at, bottom, at, bottom + 5, "tick"))
                out.append(text(at, bottom + 18, fmt.seconds(tick), "axis", "middle"))
            tick += step
    return out


def _break(at: float, bottom: float, gantt: Gantt, cut: Cut) -> Html:
    """The gap of a compressed chart: edges and what it stands for."""
    tip = (
        f"{gantt.m - gantt.shown:,} micro-batches of steady state left out: "
        f"{fmt.seconds(cut.left_out_s)} of the step, the same pattern repeated"
    )
    words = f"⋯ {gantt.m - gantt.shown:,} micro-batches, {fmt.seconds(cut.left_out_s)} ⋯"
    return group(
        [
            rect(at + 2, TOP - 4, GAP - 4, bottom - TOP + 8, "cut"),
            line(at + 2, TOP - 4, at + 2, bottom + 4, "cut-edge"),
            line(at + GAP - 2, TOP - 4, at + GAP - 2, bottom + 4, "cut-edge"),
            text(at + GAP / 2, bottom + 36, words, "axis", "middle"),
        ],
        "cut-mark",
        tip,
    )


def gantt_legend(v: int) -> Html:
    """The chart's legend as HTML (it wraps)."""
    items = [
        ("op-f", "forward"),
        ("op-b", "backward"),
        ("op-r", "recompute (in backward)"),
        ("bubble", "idle (bubble)"),
    ]
    if v > 1:
        items.insert(1, ("op-f odd", "forward, odd chunks"))
        items.insert(3, ("op-b odd", "backward, odd chunks"))
    return markup(
        "<ul class='legend'>{}</ul>",
        join(
            markup("<li><span class='swatch g-{}'></span>{}</li>", cls.replace(" ", "-"), name)
            for cls, name in items
        ),
    )
