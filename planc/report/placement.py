"""Placement: the rank grid, nodes × GPUs, each GPU coloured by its pipeline stage, tensor-parallel
groups outlined, NVLink domains drawn behind the GPUs they join.

Ranks fill nodes in rank order (node = rank // gpus_per_node, as `planc.compile.ranks`), and a
rank's coordinates are index arithmetic on the axis strides, so the grid is a few numpy arrays
over nodes × GPUs. Up to FULL_GRID_NODES nodes every node is drawn; beyond, nodes are grouped
by what they hold (the stage of every GPU and where the TP groups break: with pipeline the
slowest axis, one node type per stage) and one row per type says how many nodes it stands for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from planc.plannable import Plannable
from planc.record import record
from planc.report.drill import expert_group_ids
from planc.report.svg import Html, group, join, markup, rect, stage_colour, svg, text
from planc.vocab import Axis

FULL_GRID_NODES = 128
ROWS_PER_COLUMN = 32
MAX_TYPES = 64
LABEL_CHARS = 16
Ints = npt.NDArray[np.int64]


@record
class PlacementGrid:
    """Per node and GPU: the pipeline stage, the TP group (its lowest rank) and the NVLink domain."""

    stage: Ints
    tp_group: Ints
    domain: Ints


def rank_grid(plan: Plannable) -> PlacementGrid:
    cl, lay = plan.cluster, plan.layout
    ranks = np.arange(plan.world, dtype=np.int64).reshape(cl.nodes, cl.gpus_per_node)
    strides = lay.strides
    tp_coord = (ranks // strides[Axis.TP]) % lay.t
    return PlacementGrid(
        stage=(ranks // strides[Axis.PP]) % lay.p,
        tp_group=ranks - tp_coord * strides[Axis.TP],
        domain=ranks // cl.nvlink_domain,
    )


@record
class Row:
    """One drawn node: which node, the label left of it, a note right of it, the tooltip."""

    node: int
    label: str
    note: str
    tip: str


@record
class NodeType:
    """Nodes that look the same in the grid: `nodes` are their indices, `first` draws them."""

    first: int
    nodes: tuple[int, ...]


def node_types(grid: PlacementGrid) -> list[NodeType]:
    """Group nodes by stage pattern, TP breaks and NVLink breaks, in order of first node."""
    breaks_tp = grid.tp_group[:, 1:] != grid.tp_group[:, :-1]
    breaks_nvl = grid.domain[:, 1:] != grid.domain[:, :-1]
    signature = np.concatenate([grid.stage, breaks_tp, breaks_nvl], axis=1)
    _, first, inverse = np.unique(signature, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    members: dict[int, list[int]] = {}
    for node, kind in enumerate(inverse.tolist()):
        members.setdefault(int(kind), []).append(node)
    return sorted(
        (NodeType(int(first[kind]), tuple(nodes)) for kind, nodes in members.items()),
        key=lambda t: t.first,
    )


def ranges(indices: tuple[int, ...], shown: int = 3) -> str:
    """`0–1023, 2048–3071, …` : contiguous runs, the first `shown` of them."""
    runs: list[tuple[int, int]] = []
    for i in indices:
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    words = [f"{a:,}" if a == b else f"{a:,}–{b:,}" for a, b in runs[:shown]]
    return ", ".join(words) + (
        f" and {len(runs) - shown:,} more ranges" if len(runs) > shown else ""
    )


def _short(name: str) -> str:
    return name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "…"


def runs(ids: list[int]) -> list[tuple[int, int, int]]:
    """(first, end, id) of each run of equal ids along a node's GPUs."""
    out: list[tuple[int, int, int]] = []
    for gpu, key in enumerate(ids):
        if out and out[-1][2] == key:
            out[-1] = (out[-1][0], gpu + 1, key)
        else:
            out.append((gpu, gpu + 1, key))
    return out


@dataclass
class Box:
    """A run of GPUs with one id (TP group or NVLink domain) over drawn rows first..last."""

    first: int
    last: int
    start: int
    end: int
    key: int


def boxes(rows: list[list[int]], per_column: int, merge: bool) -> list[Box]:
    """The runs of every drawn row; with `merge`, a run over a whole node that continues over
    the next node of the same column (a group or domain larger than a node) is one box."""
    out: list[Box] = []
    whole: Box | None = None
    for index, ids in enumerate(rows):
        previous, whole = whole, None
        for start, end, key in runs(ids):
            spans_node = start == 0 and end == len(ids)
            if (
                merge
                and spans_node
                and previous is not None
                and previous.key == key
                and index % per_column
            ):
                previous.last = index
                whole = previous
                continue
            out.append(Box(index, index, start, end, key))
            if spans_node:
                whole = out[-1]
    return out


def _node_row(
    plan: Plannable, grid: PlacementGrid, row: Row, x: float, y: float, cell: float
) -> Html:
    """One node: its label, its GPUs coloured by stage (with rank numbers when they fit)."""
    lay = plan.layout
    gpn = plan.cluster.gpus_per_node
    stages, groups = grid.stage[row.node].tolist(), grid.tp_group[row.node].tolist()
    # tabindex and role make each node's name and GPU reachable and pickable by keyboard
    # (Tab, then Enter or Space), as by a click.
    parts = [
        text(
            x - 8,
            y + cell / 2 + 4,
            row.label,
            "host",
            "end",
            data_node=row.node,
            tabindex=0,
            role="button",
        )
    ]
    if row.note:
        parts.append(text(x + gpn * cell + 10, y + cell / 2 + 4, row.note, "host"))
    for gpu in range(gpn):
        rank = row.node * gpn + gpu
        stage = stages[gpu]
        parts.append(
            rect(
                x + gpu * cell + 1,
                y + 1,
                cell - 2,
                cell - 2,
                "gpu",
                f"rank {rank:,} (GPU {gpu}): stage {stage}, TP group of rank {groups[gpu]:,}",
                fill=stage_colour(stage, lay.p),
                data_stage=stage,
                data_rank=rank,
                tabindex=0,
                role="button",
            )
        )
        if cell >= 30:
            parts.append(
                text(x + (gpu + 0.5) * cell, y + cell / 2 + 4, str(rank), "gpu-label", "middle")
            )
    return group(parts, "node", row.tip)


def _rows(plan: Plannable, grid: PlacementGrid, full: bool) -> list[Row]:
    cl = plan.cluster
    if full:
        return [
            Row(node, _short(cl.hosts[node]), "", f"node {node} ({cl.hosts[node]})")
            for node in range(cl.nodes)
        ]
    rows = []
    for kind in node_types(grid)[:MAX_TYPES]:
        count = len(kind.nodes)
        first, last = cl.hosts[kind.nodes[0]], cl.hosts[kind.nodes[-1]]
        hosts = f"{first} … {last}" if count > 1 else first
        stages = sorted(set(grid.stage[kind.first].tolist()))
        what = f"stage {stages[0]}" if len(stages) == 1 else f"stages {stages[0]}–{stages[-1]}"
        where = ranges(kind.nodes)
        rows.append(
            Row(
                kind.first,
                f"{count:,} nodes · {what}",
                f"nodes {where}",
                f"{count:,} nodes like node {kind.first}: nodes {where} ({hosts})",
            )
        )
    return rows


def placement_svg(plan: Plannable) -> Html:
    cl = plan.cluster
    grid = rank_grid(plan)
    full = cl.nodes <= FULL_GRID_NODES
    rows = _rows(plan, grid, full)
    gpn = cl.gpus_per_node
    cell = 40.0 if len(rows) <= 4 and gpn <= 16 else min(16.0, 520.0 / gpn)
    per_domain = max(1, cl.nvlink_domain // gpn)
    per_column = (
        len(rows)
        if len(rows) <= ROWS_PER_COLUMN
        else max(1, ROWS_PER_COLUMN // per_domain) * per_domain
    )
    columns = -(-len(rows) // per_column)
    label_w = 112.0 if full else 150.0
    block = label_w + gpn * cell + (24 if full else 260)
    pitch = cell + 6

    def at(index: int) -> tuple[float, float]:
        column, row = divmod(index, per_column)
        return 8 + column * block + label_w, 12 + row * pitch

    domains = boxes([grid.domain[r.node].tolist() for r in rows], per_column, full)
    groups = boxes([grid.tp_group[r.node].tolist() for r in rows], per_column, full)
    parts: list[Html] = []
    for box in domains:
        x, y = at(box.first)
        height = (box.last - box.first) * pitch + cell
        tip = f"NVLink domain {box.key:,}"
        parts.append(
            rect(
                x + box.start * cell - 2,
                y - 2,
                (box.end - box.start) * cell + 4,
                height + 4,
                "nvl",
                tip,
                rx=4,
            )
        )
    for index, row in enumerate(rows):
        parts.append(_node_row(plan, grid, row, *at(index), cell))
    for box in groups:
        x, y = at(box.first)
        height = (box.last - box.first) * pitch + cell
        parts.append(
            rect(
                x + box.start * cell + 0.5,
                y + 0.5,
                (box.end - box.start) * cell - 1,
                height - 1,
                "tp",
                rx=2,
            )
        )
    experts = expert_group_ids(plan)
    if experts is not None:
        ep_boxes = boxes([experts[r.node].tolist() for r in rows], per_column, full)
        for box in ep_boxes:
            x, y = at(box.first)
            height = (box.last - box.first) * pitch + cell
            parts.append(
                rect(
                    x + box.start * cell + 2.5,
                    y + 2.5,
                    (box.end - box.start) * cell - 5,
                    height - 5,
                    "ep",
                    f"expert-parallel group of rank {box.key:,}",
                    rx=3,
                )
            )
    width = max(8 + columns * block, 480.0)
    height = 12 + min(len(rows), per_column) * pitch + 8
    how = "every node" if full else f"{len(rows)} node types standing for {cl.nodes:,} nodes"
    return svg(
        width,
        height,
        parts,
        f"Rank placement, {how}: GPUs coloured by pipeline stage, TP groups outlined",
        "chart placement",
    )


def drawn_nodes(plan: Plannable) -> list[tuple[int, str]]:
    """(node, what its row stands for) of each row the view draws: every node, or each node
    type's first node."""
    rows = _rows(plan, rank_grid(plan), plan.cluster.nodes <= FULL_GRID_NODES)
    return [(row.node, row.tip) for row in rows]


def stage_legend(plan: Plannable) -> Html:
    """HTML swatches: stage → colour, and the stage's layers."""
    lay = plan.layout
    items = join(
        markup(
            "<li data-stage='{}'><span class='swatch' style='background:{}'></span>"
            "stage {} <span class='muted'>({} layers)</span></li>",
            s,
            stage_colour(s, lay.p),
            s,
            lay.stage_layers[s],
        )
        for s in range(lay.p)
    )
    return markup("<ul class='stage-legend'>{}</ul>", items)
