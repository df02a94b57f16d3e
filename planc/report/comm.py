"""Communication: bytes and time per fabric tier and per op (the busiest stage), wire bytes of
every stage, and the step time split into compute, exposed communication and bubble."""

from __future__ import annotations

from planc.analysis import Analysis, StepEstimate
from planc.comm.schedule import CommOp
from planc.comm.tiers import ring_bandwidth_gbs
from planc.record import record
from planc.report import fmt
from planc.report.svg import NOTHING, Html, group, join, markup, rect, svg, text

WIDTH = 960
LABEL_W = 380
BAR_W = 330
ROW = 24


def busiest_stage(analysis: Analysis) -> int:
    """The stage whose ranks spend the most time communicating per step (lowest on ties)."""
    totals = [0.0] * analysis.plan.layout.p
    for op in analysis.ops:
        totals[op.stage] += analysis.op_seconds[op]
    return max(range(len(totals)), key=lambda s: (totals[s], -s))


def step_bytes(op: CommOp) -> int:
    """Bytes one rank sends per step for `op`: calls × bytes per call."""
    return op.calls * op.bytes_sent


def ops_svg(analysis: Analysis, stage: int) -> Html:
    """One row per op of `stage`: a bar of its time per step, coloured by link class."""
    ops = [op for op in analysis.ops if op.stage == stage]
    if not ops:
        return markup(
            "<p class='muted'>No communication: one GPU per model replica and no data parallelism.</p>"
        )
    longest = max(analysis.op_seconds[op] for op in ops) or 1.0
    parts: list[Html] = []
    for index, op in enumerate(ops):
        y = 8 + index * ROW
        seconds = analysis.op_seconds[op]
        tip = (
            f"{op.phase}: {op.op.value} in groups of {op.group_size} over {op.link}, "
            f"{op.calls:,} calls × {fmt.gb(op.buffer_bytes)} buffer = {fmt.gb(step_bytes(op))} sent "
            f"per step, {fmt.seconds(seconds)} (α-β); {op.formula}"
        )
        parts.append(
            group(
                [
                    text(LABEL_W - 10, y + 15, _shorten(op.phase, 54), "op-name", "end"),
                    rect(
                        LABEL_W,
                        y + 3,
                        max(BAR_W * seconds / longest, 1.0),
                        ROW - 8,
                        f"link-{op.link}",
                    ),
                    text(
                        LABEL_W + BAR_W + 10,
                        y + 15,
                        f"{fmt.seconds(seconds)} · {fmt.gb(step_bytes(op))} · {op.calls:,} calls",
                        "op-value",
                    ),
                ],
                "op-row",
                tip,
            )
        )
    label = f"Communication time per step of each op on stage {stage}, by link class"
    return svg(WIDTH, 16 + len(ops) * ROW, parts, label, "chart comm")


def _shorten(phase: str, limit: int) -> str:
    return phase if len(phase) <= limit else phase[: limit - 1] + "…"


def link_table(analysis: Analysis, stage: int) -> Html:
    """Bytes sent and time per step on each tier of the fabric, for one rank of `stage`; on a
    fabric other than the plain two tiers, also the group kinds on each tier and the bandwidth
    of a ring whose outermost tier it is (after oversubscription)."""
    plan = analysis.plan
    fabric = plan.cluster.fabric
    rows = []
    for tier in fabric:
        ops = [op for op in analysis.ops if op.stage == stage and op.link == tier.name]
        sent = sum(step_bytes(op) for op in ops)
        seconds = sum(analysis.op_seconds[op] for op in ops)
        row = markup(
            "<td><span class='swatch link-{}'></span>{}</td>"
            "<td class='n'>{}</td><td class='n'>{}</td>"
            "<td class='n'>{}</td><td class='n'>{:g} GB/s</td>",
            tier.name,
            tier.name,
            len(ops),
            fmt.gb(sent),
            fmt.seconds(seconds),
            tier.bandwidth_gbs,
        )
        if not fabric.plain:
            kinds = ", ".join(dict.fromkeys(op.group.value for op in ops)) or "-"
            row = markup(
                "{}<td class='n'>{:.3g} GB/s</td><td>{}</td>",
                row,
                ring_bandwidth_gbs(fabric, tier.name),
                kinds,
            )
        rows.append(markup("<tr>{}</tr>", row))
    extra = NOTHING if fabric.plain else markup("<th>a ring on it (B/k)</th><th>groups</th>")
    return markup(
        "<table><thead><tr><th>link class</th><th>ops</th><th>sent per step</th>"
        "<th>time per step (α-β)</th><th>bandwidth</th>{}</tr></thead><tbody>{}</tbody></table>",
        extra,
        join(rows),
    )


def wire_table(analysis: Analysis) -> Html:
    """Bytes sent and received per step by one rank of each stage, on each tier."""
    fabric = analysis.plan.cluster.fabric
    rows = join(
        markup(
            "<tr data-stage='{}'><td>{}</td>{}</tr>",
            w.stage,
            w.stage,
            join(
                markup(
                    "<td class='n'>{}</td><td class='n'>{}</td>",
                    fmt.gb(w.on(tier.name).sent),
                    fmt.gb(w.on(tier.name).received),
                )
                for tier in fabric
            ),
        )
        for w in analysis.wires
    )
    heads = join(
        markup("<th>{} sent</th><th>{} received</th>", tier.shown, tier.shown) for tier in fabric
    )
    return markup(
        "<table><thead><tr><th>stage</th>{}</tr></thead><tbody>{}</tbody></table>", heads, rows
    )


@record
class StepPart:
    """One segment of the step bar: its css class, its name, its seconds, and where the number
    is in `planc explain --format json`: `quantity` names the fields of its "step" object,
    `-`-separated when the segment is the first field less the others (compute without the
    exposed communication explain counts inside it)."""

    cls: str
    name: str
    seconds: float
    quantity: str


def step_parts(step: StepEstimate) -> list[StepPart]:
    """The step, split as `planc explain` splits it: compute, the exposed tensor-parallel,
    ring-attention and expert exchanges and the release's expert host time explain counts inside
    compute, the pipeline bubble, Megatron's deferred LM-head weight gradients beyond the flush
    they fill, the exposed DP communication, the optimizer step, and whatever the step time holds
    beyond them. A part of zero seconds is left out (compute and the bubble always stay)."""
    inside = [
        ("t-tp", "exposed TP communication", step.tp_comm_s, "tp_comm_s"),
        ("t-cp", "exposed CP (ring attention)", step.cp_comm_s, "cp_comm_s"),
        ("t-ep", "expert all-to-all (serialised with compute)", step.ep_comm_s, "ep_comm_s"),
        ("t-host", "expert host time (per local expert)", step.expert_host_s, "expert_host_s"),
    ]
    shown = [part for part in inside if part[2] > 0]
    less = "".join(f"-step.{part[3]}" for part in shown)
    parts = [
        StepPart(
            "t-compute",
            "compute",
            step.compute_s - sum(part[2] for part in shown),
            f"step.compute_s{less}",
        ),
        *(StepPart(cls, name, s, f"step.{q}") for cls, name, s, q in shown),
        StepPart("t-bubble", "pipeline bubble", step.bubble_s, "step.bubble_s"),
    ]
    rest = [
        StepPart(
            "t-flush",
            "deferred LM-head weight gradients (beyond the flush)",
            step.flush_s,
            "step.flush_s",
        ),
        StepPart("t-dp", "exposed DP communication", step.exposed_comm_s, "step.exposed_comm_s"),
        StepPart("t-opt", "optimizer step", step.optimizer_s, "step.optimizer_s"),
    ]
    shown_rest = [part for part in rest if part.seconds > 0]
    parts += shown_rest
    other = step.step_time_s - sum(part.seconds for part in parts)
    if other > 1e-9 * step.step_time_s:
        parts.append(
            StepPart(
                "t-other",
                "other (stages waiting for the slowest one's tail)",
                other,
                "step.step_time_s-step.compute_s-step.bubble_s"
                + "".join(f"-{part.quantity}" for part in shown_rest),
            )
        )
    return parts


def _share(seconds: float, total: float) -> float:
    return seconds / total if total else 0.0


def step_svg(step: StepEstimate) -> Html:
    """The step time as one stacked bar, each part labelled with its share where it fits; the
    legend is HTML below it (`step_legend`) so that it wraps."""
    total = step.step_time_s
    parts: list[Html] = []
    x, width = 10.0, WIDTH - 20.0
    for part in step_parts(step):
        w = width * _share(part.seconds, total)
        tip = f"{part.name}: {fmt.seconds(part.seconds)} ({_share(part.seconds, total):.1%} of the step)"
        parts.append(
            rect(
                x,
                10,
                w,
                34,
                part.cls,
                tip,
                data_quantity=part.quantity,
                data_value=repr(part.seconds),
            )
        )
        if w >= 90:
            parts.append(
                text(
                    x + w / 2,
                    32,
                    f"{part.name.split(' (')[0]} {_share(part.seconds, total):.0%}",
                    "step-label",
                    "middle",
                )
            )
        x += w
    return svg(
        WIDTH,
        54,
        parts,
        f"Step time {fmt.seconds(total)}: compute, exposed communication, bubble",
        "chart step",
    )


def step_legend(step: StepEstimate) -> Html:
    """The step bar's legend as an HTML list (it wraps on a narrow page or a long list)."""
    total = step.step_time_s
    items = join(
        markup(
            "<li><span class='swatch {}'></span>{} <span class='muted' data-quantity='{}' "
            "data-value='{}'>{} ({:.1%})</span></li>",
            part.cls,
            part.name,
            part.quantity,
            repr(part.seconds),
            fmt.seconds(part.seconds),
            _share(part.seconds, total),
        )
        for part in step_parts(step)
    )
    return markup("<ul class='legend'>{}</ul>", items)
