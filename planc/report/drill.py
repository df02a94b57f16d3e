"""The placement view's drill-down: click a GPU, read its rank's process groups, its stage's
memory and its traffic per step.

The groups are the plan's own (`planc.compile.groups.process_groups`, the slices of the rank
grid `planc compile` writes to plan.json), the memory and traffic the analysis's (what
`planc explain` prints per stage), all written here as text into the page's JSON for the GPUs
the placement view draws; the script only puts the text of the clicked GPU into the panel.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise
from typing import Any

import numpy as np
import numpy.typing as npt

from planc.analysis import Analysis
from planc.compile.groups import expert_grid, orthogonal_groups, process_groups
from planc.compile.ranks import grid_of
from planc.memory.terms import COMPONENTS
from planc.plannable import Plannable
from planc.record import record
from planc.report import fmt
from planc.report.svg import Html, markup
from planc.vocab import Axis

Ints = npt.NDArray[np.int64]

# The group kinds the panel lists, in this order, and their names.
KINDS = (
    ("tp", "tensor-parallel (TP)"),
    ("cp", "context-parallel (CP)"),
    ("dp", "data-parallel (DP)"),
    ("pp", "pipeline (PP)"),
    ("ep", "expert-parallel (EP)"),
    ("etp", "expert tensor-parallel (ETP)"),
    ("edp", "expert data-parallel (EDP)"),
)
LISTED = 8  # members listed one by one up to this many (beyond, a progression or a sample)


@record(eq=False)
class Membership:
    """One group kind: its groups (rows of ranks) and, per rank, the row holding it."""

    kind: str
    name: str
    groups: Ints
    row: Ints


def memberships(plan: Plannable) -> list[Membership]:
    """Every group kind of more than one rank, with each rank's group."""
    lay = plan.layout
    experts = expert_grid(lay) if plan.model.moe is not None else None
    groups = dict(process_groups(grid_of(lay), lay.shard_group, experts).items())
    out = []
    for kind, name in KINDS:
        rows = groups.get(kind)
        if rows is None or rows.shape[1] < 2:
            continue
        row = np.empty(plan.world, dtype=np.int64)
        row[rows] = np.arange(rows.shape[0], dtype=np.int64)[:, None]
        out.append(Membership(kind, name, rows, row))
    return out


def expert_group_ids(plan: Plannable) -> Ints | None:
    """Per node and GPU, the lowest rank of its expert-parallel group; None without EP > 1."""
    lay = plan.layout
    if plan.model.moe is None or lay.ep < 2:
        return None
    rows = orthogonal_groups(expert_grid(lay), ("ep",))
    ids = np.empty(plan.world, dtype=np.int64)
    ids[rows] = rows.min(axis=1)[:, None]
    return ids.reshape(plan.cluster.nodes, plan.cluster.gpus_per_node)


def members_words(members: Iterable[int]) -> str:
    """A group's ranks for a reader: `0–7`, `3, 11, 19, …, 1019 (stride 8)` or a list."""
    ranks = sorted(int(r) for r in members)
    count = len(ranks)
    steps = {b - a for a, b in pairwise(ranks)}
    if len(steps) == 1:
        step = steps.pop()
        if step == 1:
            return f"{count} ranks: {ranks[0]:,}–{ranks[-1]:,}"
        if count > 4:
            return (
                f"{count} ranks: {ranks[0]:,}, {ranks[1]:,}, {ranks[2]:,}, …, {ranks[-1]:,} "
                f"(stride {step:,})"
            )
    listed = ", ".join(f"{r:,}" for r in ranks[:LISTED])
    return f"{count} ranks: {listed}" + (", …" if count > LISTED else "")


def rank_record(plan: Plannable, kinds: list[Membership], rank: int) -> dict[str, Any]:
    """What the panel says of `rank`: where it runs, its stage, each of its groups."""
    gpn = plan.cluster.gpus_per_node
    node = rank // gpn
    lay = plan.layout
    return {
        "stage": (rank // lay.strides[Axis.PP]) % lay.p,
        "node": node,
        "host": plan.cluster.hosts[node],
        "gpu": rank % gpn,
        "groups": [[m.name, members_words(m.groups[m.row[rank]].tolist())] for m in kinds],
    }


def stage_records(analysis: Analysis) -> list[dict[str, str]]:
    """Per stage, its heaviest rank's memory and one rank's traffic per step, as explain's text."""
    plan = analysis.plan
    hbm = plan.cluster.gpu.memory_bytes
    out = []
    for budget, wires in zip(analysis.memory.stages, analysis.wires, strict=True):
        mem = budget.memory
        parts = ", ".join(
            f"{component} {fmt.gib(sum(t.bytes for t in mem.terms if t.component == component))}"
            for component in COMPONENTS
        )
        traffic = "; ".join(
            f"{tier.shown} {fmt.gb(wires.on(tier.name).sent)} sent, "
            f"{fmt.gb(wires.on(tier.name).received)} received"
            for tier in plan.cluster.fabric
        )
        out.append(
            {
                "memory": f"{fmt.gib(mem.total)} of {fmt.gib(hbm)} HBM ({mem.total / hbm:.1%}): {parts}",
                "traffic": traffic + " (per step, one rank of the stage)",
            }
        )
    return out


def node_record(plan: Plannable, kinds: list[Membership], node: int, what: str) -> dict[str, Any]:
    """What the panel says of `node`: its ranks and stages, and per group kind how many groups
    its GPUs are in and how far they reach (inside the node, or over how many nodes)."""
    gpn = plan.cluster.gpus_per_node
    ranks = np.arange(node * gpn, (node + 1) * gpn, dtype=np.int64)
    lay = plan.layout
    stages = sorted(set(((ranks // lay.strides[Axis.PP]) % lay.p).tolist()))
    groups = []
    for m in kinds:
        rows = np.unique(m.row[ranks])
        spans = [int(np.unique(m.groups[r] // gpn).size) for r in rows.tolist()]
        inside = sum(1 for n in spans if n == 1)
        words = f"{rows.size:,} group{'s' if rows.size != 1 else ''} of {m.groups.shape[1]:,} ranks"
        if inside == len(spans):
            words += ", inside the node"
        else:
            words += f", reaching over up to {max(spans):,} nodes"
            words += f" ({inside:,} inside the node)" if inside else ""
        groups.append([m.name, words])
    return {
        "host": plan.cluster.hosts[node],
        "what": what,
        "ranks": members_words(ranks.tolist()),
        "stages": ", ".join(str(s) for s in stages),
        "groups": groups,
    }


def drill_data(analysis: Analysis, nodes: Iterable[tuple[int, str]]) -> dict[str, Any]:
    """The page's drill-down data for the drawn nodes (node, what its row stands for): each
    node's and each of its GPUs' record, and every stage's memory and traffic."""
    plan = analysis.plan
    kinds = memberships(plan)
    gpn = plan.cluster.gpus_per_node
    drawn = sorted(dict(nodes).items())
    return {
        "nodes": {str(n): node_record(plan, kinds, n, what) for n, what in drawn},
        "ranks": {
            str(r): rank_record(plan, kinds, r)
            for n, _ in drawn
            for r in range(n * gpn, (n + 1) * gpn)
        },
        "stages": stage_records(analysis),
    }


def drill_panel() -> Html:
    """The panel the script fills (hidden until a GPU is clicked; absent meaning without JS)."""
    return markup(
        "<p class='note js-only'>Click a GPU for its rank's process groups, memory and traffic, "
        "or a node's name for its groups (or Tab to it and press Enter).</p>"
        "<div id='rank-panel' class='drill' hidden aria-live='polite'><h3 id='rank-title'></h3>"
        "<table><tbody id='rank-facts'></tbody></table></div>"
    )
