"""Process groups: slices of the rank grid, listed in Megatron's order.

A group over some axes holds the ranks that share every *other* coordinate, so the named axes
vary inside it. Megatron (`generate_masked_orthogonal_rank_groups` in
megatron/core/parallel_state.py) lists the members with the first named axis (in rank order)
varying fastest, which makes each group ascending, and lists the groups with the first *other*
axis varying fastest. Both orders fall out of one transpose and one reshape of the grid.

Worked example, W=16 with t=2, d=4, p=2, order tp-cp-dp-pp (Megatron's own example):

    tp: [0,1] [2,3] ... [14,15]
    dp: [0,2,4,6] [1,3,5,7] [8,10,12,14] [9,11,13,15]
    pp: [0,8] [1,9] ... [7,15]
    model_parallel (tp × pp): [0,1,8,9] [2,3,10,11] [4,5,12,13] [6,7,14,15]

Experts (Megatron-Core's expert RankGenerator: tp = ETP, ep = EP, dp = EDP, pp = p, cp = 1, in
the same order). W=16 with t=2, d=4, p=2, EP=2, ETP=1 (EDP = 16/(1·2·2) = 4), order
tp-cp-ep-dp-pp, so the expert grid is ep fastest, then dp, then pp:

    ep: [0,1] [2,3] ... [14,15]
    etp: [0] [1] ... [15]
    edp: [0,2,4,6] [1,3,5,7] [8,10,12,14] [9,11,13,15]

With data_shard = 2 the state is sharded over contiguous halves of each dp_cp group and
replicated across them (HSDP; Megatron's intra/inter_partial_data_parallel_group_with_cp:
`ranks[i·N:(i+1)·N]` and `ranks[i::N]`):

    dp_shard: [0,2] [4,6] [1,3] [5,7] [8,10] [12,14] [9,11] [13,15]
    dp_replicate: [0,4] [2,6] [1,5] [3,7] [8,12] [10,14] [9,13] [11,15]
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import fields

import numpy as np

from planc.compile.ranks import Grid, Ranks
from planc.plannable import PlanLayout
from planc.record import record

# The expert grid's axes as Megatron's expert RankGenerator names them, and the group kind of
# each: its tp is the expert tensor-parallel group, its dp the expert data-parallel group.
EXPERT_KINDS = (("ep", "ep"), ("etp", "tp"), ("edp", "dp"))


def orthogonal_groups(grid: Grid, axes: tuple[str, ...]) -> Ranks:
    """One row per group of the ranks that differ only on `axes`, in Megatron's order.

    Array dims run slowest first, so row-major order makes the *last* dim fastest. Moving the
    other axes to the front (slowest first) and the named axes to the back (slowest first) then
    reshaping gives rows whose members vary fastest on the first named axis in rank order, and
    rows ordered with the first other axis fastest.
    """
    names = grid.mesh_dim_names
    outer = [names.index(a) for a in names if a not in axes]
    inner = [names.index(a) for a in names if a in axes]
    size = int(np.prod([grid.mesh_shape[i] for i in inner], dtype=np.int64))
    groups: Ranks = grid.ranks().transpose(outer + inner).reshape(-1, size)
    return groups


def embedding_groups(pp: Ranks) -> Ranks:
    """The first and last rank of each pipeline group (just the one when p = 1).

    These ranks hold the input embedding and the LM head; with tied embeddings they all-reduce
    the shared weight's gradient (Megatron's embedding group).
    """
    return pp[:, [0, -1]] if pp.shape[1] > 1 else pp[:, :1]


def shard_groups(dp_cp: Ranks, data_shard: int) -> tuple[Ranks, Ranks]:
    """(dp_shard, dp_replicate): each dp_cp group cut into contiguous slices of `data_shard`
    members (the shard groups), and the members at the same position of every slice (the
    replicate groups), both slices of the grid in Megatron's partial distributed optimizer order.
    """
    groups, size = dp_cp.shape
    if data_shard < 1 or size % data_shard:
        raise ValueError(f"data_shard = {data_shard} does not divide the dp_cp group of {size}")
    replicas = size // data_shard
    cut = dp_cp.reshape(groups, replicas, data_shard)
    shard: Ranks = cut.reshape(groups * replicas, data_shard)
    replicate: Ranks = cut.transpose(0, 2, 1).reshape(groups * data_shard, replicas)
    return shard, replicate


def expert_grid(layout: PlanLayout) -> Grid:
    """The expert layers' grid over the same ranks: the order with ep in it, sizes tp = ETP,
    cp = 1, ep = EP, dp = EDP, pp = p (parallel_state.py, expert_decoder_rank_generator)."""
    degrees = layout.expert_degrees
    return Grid(layout.expert_order, tuple(degrees[axis] for axis in layout.expert_order))


def index_in_group(groups: Ranks, world: int) -> Ranks:
    """Each rank's position inside its group, for groups that partition the ranks."""
    index = np.empty(world, dtype=np.int64)
    index[groups] = np.arange(groups.shape[1], dtype=np.int64)
    return index


@record(eq=False)
class Groups:
    """Every group kind as a (groups × members) array of ranks."""

    tp: Ranks
    cp: Ranks
    dp: Ranks
    pp: Ranks
    dp_cp: Ranks  # data × context: ranks sharing tp and pp
    embedding: Ranks
    model_parallel: Ranks  # tp × pp: ranks sharing dp and cp
    dp_shard: Ranks  # the optimizer shard group: data_shard members of a dp_cp group
    dp_replicate: Ranks  # ranks holding the same shard (HSDP)
    # The expert grid's groups; None for a dense model (no such groups in its plan).
    ep: Ranks | None = None  # expert-parallel: the all-to-all of token dispatch and combine
    etp: Ranks | None = None  # expert tensor-parallel
    edp: Ranks | None = None  # expert data-parallel: expert gradients and optimizer state
    # The dispatcher's group and its NVLink-domain slices (`planc.comm.schedule.dispatch_group`):
    # tp_ep when the allgather or flex dispatcher runs with ETP > 1; ep_domain and ep_peers when
    # the group spans several domains with several members in each.
    tp_ep: Ranks | None = None
    ep_domain: Ranks | None = None
    ep_peers: Ranks | None = None

    def items(self) -> Iterator[tuple[str, Ranks]]:
        for field in fields(self):
            ranks = getattr(self, field.name)
            if ranks is not None:
                yield field.name, ranks


def dispatch_groups(experts: Grid, over_tp: bool, per_domain: int) -> dict[str, Ranks]:
    """The dispatcher's groups beyond ep: tp_ep (the expert grid's tp × ep groups, tp fastest as
    Megatron lists tp_ep_group) when it runs over them, and when its group spans several NVLink
    domains with `per_domain` = g members in each (1 < g < n), each group cut into its
    contiguous slices of g (ep_domain, the members inside one domain) and the members at the
    same place of every slice (ep_peers), as `shard_groups` cuts dp_cp."""
    out: dict[str, Ranks] = {}
    group = orthogonal_groups(experts, ("tp", "ep")) if over_tp else orthogonal_groups(
        experts, ("ep",)
    )
    if over_tp:
        out["tp_ep"] = group
    if 1 < per_domain < group.shape[1]:
        out["ep_domain"], out["ep_peers"] = shard_groups(group, per_domain)
    return out


def process_groups(
    grid: Grid,
    data_shard: int | None = None,
    experts: Grid | None = None,
    dispatch: tuple[bool, int] | None = None,
) -> Groups:
    """Every group kind of `grid`; ZeRO/FSDP shard over `data_shard` ranks (default d·c); the
    ep, etp and edp groups of the expert grid `experts` when the model has experts, and
    `dispatch_groups` for `dispatch` = (over tp × ep, members per NVLink domain)."""
    pp = orthogonal_groups(grid, ("pp",))
    dp_cp = orthogonal_groups(grid, ("dp", "cp"))
    dp_shard, dp_replicate = shard_groups(dp_cp, data_shard or dp_cp.shape[1])
    expert = (
        {kind: orthogonal_groups(experts, (axis,)) for kind, axis in EXPERT_KINDS}
        if experts is not None
        else {}
    )
    if experts is not None and dispatch is not None:
        expert |= dispatch_groups(experts, *dispatch)
    return Groups(
        tp=orthogonal_groups(grid, ("tp",)),
        cp=orthogonal_groups(grid, ("cp",)),
        dp=orthogonal_groups(grid, ("dp",)),
        pp=pp,
        dp_cp=dp_cp,
        embedding=embedding_groups(pp),
        model_parallel=orthogonal_groups(grid, ("tp", "pp")),
        dp_shard=dp_shard,
        dp_replicate=dp_replicate,
        **expert,
    )
