"""The rank grid and the process groups, recomputed from the degrees, the order and the hardware.

A rank's coordinate on an axis is (rank // stride) mod degree, the strides being the prefix
products of the degrees in the order string (fastest first, Megatron's RankGenerator). A group
of a kind over some axes holds exactly the ranks that share every other coordinate. Ranks fill
nodes in order; NVLink domains, and the blocks of every tier of the fabric, are blocks of
consecutive ranks.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from planc.verify.plandata import AXES, MEMORY_FIELDS, Ints, PlanData

# The axes each group kind spans (the other axes are shared by its members).
KIND_AXES = {
    "tp": ("tp",),
    "cp": ("cp",),
    "dp": ("dp",),
    "pp": ("pp",),
    "dp_cp": ("dp", "cp"),
    "model_parallel": ("tp", "pp"),
}

# Mixture-of-experts plans: each expert group kind is one axis of the expert grid (Megatron-Core's
# expert RankGenerator: tp = ETP, ep = EP, dp = EDP, pp, cp = 1, in the plan's order).
EXPERT_KIND_AXES = {"ep": "ep", "etp": "tp", "edp": "dp"}
EXPERT_AXES = ("tp", "cp", "ep", "dp", "pp")

# Shard groups cut each dp_cp group by position: dp_shard holds data_shard consecutive members,
# dp_replicate the members at the same position of every such slice (HSDP).
SHARD_KINDS = ("dp_shard", "dp_replicate")

Found = Iterator[str]


def dp_cp_position(plan: PlanData) -> tuple[Ints, Ints]:
    """Each rank's dp_cp group (a key over the other coordinates) and its position in it: the
    dp and cp coordinates with the one earlier in the order varying fastest."""
    key = plan.coords["tp"] + plan.degrees["tp"] * plan.coords["pp"]
    position = np.zeros(len(plan.rank), dtype=np.int64)
    scale = 1
    for axis in plan.order:
        if axis in ("dp", "cp"):
            position += plan.coords[axis] * scale
            scale *= plan.degrees[axis]
    return key, position


def _shard_groups(plan: PlanData) -> Found:
    """dp_shard and dp_replicate: partitions whose members share a dp_cp group, and the same
    slice (dp_shard) or the same position in every slice (dp_replicate)."""
    group = plan.degrees["dp"] * plan.degrees["cp"]
    shard = plan.data_shard
    if shard < 1 or group % shard:
        yield f"layout.data_shard = {shard} does not divide data × context = {group}"
        return
    key, position = dp_cp_position(plan)
    for kind, size, same in (
        ("dp_shard", shard, position // shard),
        ("dp_replicate", group // shard, position % shard),
    ):
        found = plan.groups.get(kind)
        if found is None:
            yield f"groups.{kind} is missing"
            continue
        if found.ndim != 2 or found.shape[1] != size or found.size != len(plan.rank):
            yield f"groups.{kind}: {found.shape[0]} groups of {found.shape[1] if found.ndim == 2 else '?'} ranks, expected {len(plan.rank) // size} groups of {size}"
            continue
        problems = list(_partition(kind, found, len(plan.rank)))
        yield from problems
        if problems:
            continue
        for name, values in (
            ("dp_cp group", key),
            ("slice" if kind == "dp_shard" else "position", same),
        ):
            bad = (values[found] != values[found][:, :1]).any(axis=1)
            if bad.any():
                g = int(np.flatnonzero(bad)[0])
                yield f"groups.{kind} group {g} {found[g][:8].tolist()} mixes members of more than one {name}"
                break


def expected_strides(plan: PlanData) -> dict[str, int]:
    out, stride = {}, 1
    for axis in plan.order:
        out[axis] = stride
        stride *= plan.degrees[axis]
    return out


def _first_bad(mask: npt.NDArray[np.bool_]) -> int:
    return int(np.flatnonzero(mask)[0])


def world(plan: PlanData) -> Found:
    """The world size agrees with the degrees, the hardware and the rank list."""
    product = math.prod(plan.degrees[a] for a in AXES)
    gpus = plan.nodes * plan.gpus_per_node
    if sorted(plan.order) != sorted(AXES):
        yield f"the order {'-'.join(plan.order)} does not name tp, cp, dp and pp once each"
    if not plan.world == product == gpus == len(plan.rank):
        yield (
            f"world_size {plan.world}, tensor × context × data × pipeline = {product}, nodes × "
            f"gpus_per_node = {gpus} and {len(plan.rank)} rank records must all be equal"
        )
    if len(plan.hosts) != plan.nodes or len(set(plan.hosts)) != len(plan.hosts):
        yield f"{len(plan.hosts)} host names ({len(set(plan.hosts))} distinct) for {plan.nodes} nodes"
    if dict(plan.strides) != expected_strides(plan):
        yield f"layout.strides {dict(plan.strides)} are not the prefix products {expected_strides(plan)}"
    yield from _fabric(plan)


def _fabric(plan: PlanData) -> Found:
    """cluster.fabric names each tier once, gives every tier a span of at least one GPU, and its
    outermost tier holds the world (so every group has a tier)."""
    names = [name for name, _ in plan.tiers]
    if len(set(names)) != len(names):
        yield f"cluster.fabric names a tier twice: {names}"
    small = [f"{name} ({span})" for name, span in plan.tiers if span < 1]
    if small:
        yield f"cluster.fabric tiers with a span below one GPU: {', '.join(small)}"
    outermost, span = plan.tiers[-1]
    if span < plan.world:
        yield f"cluster.fabric's outermost tier {outermost} spans {span:,} GPUs, less than the world of {plan.world:,}"


def placement(plan: PlanData) -> Found:
    """Every rank's coordinates, node, local rank, rail and NVLink domain."""
    n = len(plan.rank)
    rank = np.arange(n, dtype=np.int64)
    if not np.array_equal(plan.rank, rank):
        yield f"rank records are not 0..{n - 1} in order (first off at position {_first_bad(plan.rank != rank)})"
        return
    strides = expected_strides(plan)
    for axis in AXES:
        want = rank // strides[axis] % plan.degrees[axis]
        bad = plan.coords[axis] != want
        if bad.any():
            r = _first_bad(bad)
            yield f"rank {r}: coordinate {axis} = {plan.coords[axis][r]}, but rank // {strides[axis]} mod {plan.degrees[axis]} = {want[r]}"
    for name, got, want in (
        ("node", plan.node, rank // plan.gpus_per_node),
        ("local_rank", plan.local_rank, rank % plan.gpus_per_node),
        ("rail", plan.rail, rank % plan.gpus_per_node),
        ("nvlink_domain", plan.domain, rank // plan.nvlink_domain),
    ):
        bad = got != want
        if bad.any():
            r = _first_bad(bad)
            yield f"rank {r}: {name} = {got[r]}, but it must be {want[r]}"
    if plan.host is not None and len(plan.hosts) == plan.nodes:
        for r, host in enumerate(plan.host):
            if 0 <= plan.node[r] < plan.nodes and host != plan.hosts[plan.node[r]]:
                yield f"rank {r}: host {host!r}, but node {plan.node[r]} is {plan.hosts[plan.node[r]]!r}"
                break


def stages(plan: PlanData) -> Found:
    """Every rank holds its stage's layers; the stages hold the model's layers once each."""
    layers = [chunk for stage in plan.stage_layers for chunk in stage]
    covered = sorted(layers)
    edges = [a for a, _ in covered] + [covered[-1][1]] if covered else [0]
    if covered and (
        edges[0] != 0
        or any(covered[i][1] != covered[i + 1][0] for i in range(len(covered) - 1))
        or edges[-1] != plan.model["layers"]
    ):
        yield f"layout.stage_layers do not cover layers 0..{plan.model['layers']} once each"
    if len(plan.stage_layers) != plan.degrees["pp"]:
        yield f"{len(plan.stage_layers)} stages of layers for pipeline = {plan.degrees['pp']}"
    if plan.layers is not None and len(plan.stage_layers) == plan.degrees["pp"]:
        for r, held in enumerate(plan.layers):
            pp = int(plan.coords["pp"][r])
            if 0 <= pp < len(plan.stage_layers) and held != plan.stage_layers[pp]:
                yield f"rank {r}: layers {list(held)}, but stage {pp} holds {list(plan.stage_layers[pp])}"
                break


def _well_formed(kind: str, found: Ints, size: int, world_size: int) -> list[str]:
    """What is wrong with the shape of a group table, or with its partition of the ranks."""
    if found.ndim != 2 or found.shape[1] != size or found.shape[0] * size != world_size:
        width = found.shape[1] if found.ndim == 2 else "?"
        return [
            f"groups.{kind}: {found.shape[0]} groups of {width} ranks, expected "
            f"{world_size // size} groups of {size}"
        ]
    return list(_partition(kind, found, world_size))


def _partition(kind: str, groups: Ints, world: int) -> Found:
    flat = groups.reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= world):
        yield f"groups.{kind} names a rank outside 0..{world - 1}"
        return
    counts = np.bincount(flat, minlength=world)
    if (counts > 1).any():
        yield f"groups.{kind}: rank {_first_bad(counts > 1)} is in {counts[counts > 1][0]} groups"
    if (counts == 0).any():
        yield f"groups.{kind}: rank {_first_bad(counts == 0)} is in no group"


def groups(plan: PlanData) -> Found:
    """Each kind partitions the ranks into groups of the degrees' size whose members share
    every other coordinate and differ on the kind's own axes."""
    world_size = len(plan.rank)
    for kind, axes in KIND_AXES.items():
        found = plan.groups.get(kind)
        if found is None:
            yield f"groups.{kind} is missing"
            continue
        problems = _well_formed(kind, found, math.prod(plan.degrees[a] for a in axes), world_size)
        yield from problems
        if problems:
            continue
        yield from _members_agree(plan, kind, axes, found)
    yield from _embedding(plan)
    yield from _shard_groups(plan)
    yield from expert_groups(plan)


def expert_coordinates(plan: PlanData) -> dict[str, Ints]:
    """Every rank's coordinate in the expert grid: (rank // stride) mod size, the strides the
    prefix products of the expert sizes in the expert order."""
    rank = np.arange(len(plan.rank), dtype=np.int64)
    out, stride = {}, 1
    for axis in plan.expert_order:
        out[axis] = rank // stride % plan.expert_degrees[axis]
        stride *= plan.expert_degrees[axis]
    return out


def _expert_grid(plan: PlanData) -> Found:
    """layout.expert names every expert axis once, spans the world, keeps cp = 1 and the
    pipeline degree, and places pp where the dense grid does (Megatron-Core requires the two
    generators' pipeline groups to be equal)."""
    order, sizes = plan.expert_order, plan.expert_degrees
    if sorted(order) != sorted(EXPERT_AXES) or set(sizes) != set(EXPERT_AXES):
        yield f"layout.expert names {'-'.join(order)} with sizes for {sorted(sizes)}, not tp, cp, ep, dp and pp once each"
        return
    if math.prod(sizes.values()) != len(plan.rank):
        yield f"layout.expert degrees {dict(sizes)} multiply to {math.prod(sizes.values())}, not the {len(plan.rank)} ranks"
        return
    if sizes["cp"] != 1 or sizes["pp"] != plan.degrees["pp"]:
        yield f"layout.expert has cp = {sizes['cp']} and pp = {sizes['pp']}; the expert grid has cp = 1 and the pipeline's {plan.degrees['pp']}"
        return
    pp = expert_coordinates(plan)["pp"]
    bad = pp != plan.coords["pp"]
    if bad.any():
        r = _first_bad(bad)
        yield f"rank {r}: pipeline stage {plan.coords['pp'][r]} in the dense grid but {pp[r]} in the expert grid"


# The dispatcher's slices of its group (`planc.compile.groups.dispatch_groups`): ep_domain holds
# a group's members inside one NVLink domain, ep_peers its members at the same place of every
# domain.
DISPATCH_KINDS = ("ep_domain", "ep_peers")


def dispatch_position(plan: PlanData) -> tuple[Ints, Ints, int]:
    """Each rank's dispatcher group (a key over the other expert coordinates), its position in
    it and the group's size: tp_ep (tp fastest, then ep) when the plan lists it, else ep."""
    coords = expert_coordinates(plan)
    over_tp = "tp_ep" in plan.groups
    own = ("tp", "ep") if over_tp else ("ep",)
    key = np.zeros(len(plan.rank), dtype=np.int64)
    for axis in plan.expert_order:
        if axis not in own:
            key = key * plan.expert_degrees[axis] + coords[axis]
    # The group lists its members with the axis earlier in the order varying fastest.
    position = np.zeros(len(plan.rank), dtype=np.int64)
    scale = 1
    for axis in plan.expert_order:
        if axis in own:
            position += coords[axis] * scale
            scale *= plan.expert_degrees[axis]
    return key, position, scale


def _dispatch_groups(plan: PlanData) -> Found:
    """tp_ep: the expert grid's tp × ep groups. ep_domain and ep_peers (listed together): the
    dispatcher's groups cut into contiguous slices of g members, each inside one NVLink
    domain, and the members at the same place of every slice, each in a domain of its own."""
    world_size = len(plan.rank)
    tp_ep = plan.groups.get("tp_ep")
    if tp_ep is not None:
        size = plan.expert_degrees["tp"] * plan.expert_degrees["ep"]
        problems = _well_formed("tp_ep", tp_ep, size, world_size)
        yield from problems
        if not problems:
            key, _, _ = dispatch_position(plan)
            bad = (key[tp_ep] != key[tp_ep][:, :1]).any(axis=1)
            if bad.any():
                g = _first_bad(bad)
                yield f"groups.tp_ep group {g} {tp_ep[g][:8].tolist()} mixes expert-grid dp or pp coordinates"
    domain, peers = plan.groups.get("ep_domain"), plan.groups.get("ep_peers")
    if domain is None and peers is None:
        return
    if domain is None or peers is None or domain.ndim != 2:
        yield "groups.ep_domain and groups.ep_peers are listed together"
        return
    key, position, n = dispatch_position(plan)
    g = int(domain.shape[1])
    if g < 2 or n % g or g >= n:
        yield f"groups.ep_domain: groups of {g} do not cut the dispatcher's groups of {n}"
        return
    for kind, size, same in (("ep_domain", g, position // g), ("ep_peers", n // g, position % g)):
        found = plan.groups[kind]
        problems = _well_formed(kind, found, size, world_size)
        yield from problems
        if problems:
            continue
        for name, values in (("dispatcher group", key), ("slice" if kind == "ep_domain" else "place", same)):
            bad = (values[found] != values[found][:, :1]).any(axis=1)
            if bad.any():
                i = _first_bad(bad)
                yield f"groups.{kind} group {i} {found[i][:8].tolist()} mixes members of more than one {name}"
                break
    inside = plan.domain[domain]
    bad = (inside != inside[:, :1]).any(axis=1)
    if bad.any():
        i = _first_bad(bad)
        yield f"groups.ep_domain group {i} {domain[i][:8].tolist()} spans NVLink domains"


def expert_groups(plan: PlanData) -> Found:
    """ep, etp and edp partition the ranks into groups of the expert grid's ep, tp and dp size
    whose members share every other expert coordinate and differ on their own."""
    listed = [kind for kind in EXPERT_KIND_AXES if kind in plan.groups]
    if not plan.expert_order:
        if listed:
            yield f"groups.{listed[0]} is listed, but layout.expert gives no expert grid"
        return
    problems = list(_expert_grid(plan))
    yield from problems
    if problems:
        return
    coords = expert_coordinates(plan)
    world_size = len(plan.rank)
    for kind, axis in EXPERT_KIND_AXES.items():
        found = plan.groups.get(kind)
        if found is None:
            yield f"groups.{kind} is missing"
            continue
        size = plan.expert_degrees[axis]
        problems = _well_formed(kind, found, size, world_size)
        yield from problems
        if problems:
            continue
        for other in EXPERT_AXES:
            if other == axis:
                continue
            coord = coords[other][found]
            bad = (coord != coord[:, :1]).any(axis=1)
            if bad.any():
                g = _first_bad(bad)
                yield f"groups.{kind} group {g} {found[g][:8].tolist()} mixes expert-grid {other} coordinates"
                break
        own = np.sort(coords[axis][found], axis=1)
        bad = (own != np.arange(size)).any(axis=1)
        if bad.any():
            yield f"groups.{kind} group {_first_bad(bad)} repeats an expert-grid {axis} coordinate"
    yield from _dispatch_groups(plan)


def _members_agree(plan: PlanData, kind: str, axes: tuple[str, ...], found: Ints) -> Found:
    for axis in AXES:
        coord = plan.coords[axis][found]
        if axis in axes:
            continue
        bad = (coord != coord[:, :1]).any(axis=1)
        if bad.any():
            g = _first_bad(bad)
            yield f"groups.{kind} group {g} {found[g][:8].tolist()} mixes {axis} coordinates {sorted(set(coord[g].tolist()))[:4]}"
            return
    # Distinct on the kind's own axes: a key over them is a permutation of 0..size-1.
    key = np.zeros_like(found)
    for axis in axes:
        key = key * plan.degrees[axis] + plan.coords[axis][found]
    ordered = np.sort(key, axis=1)
    bad = (ordered != np.arange(found.shape[1])).any(axis=1)
    if bad.any():
        g = _first_bad(bad)
        yield f"groups.{kind} group {g} repeats a {'/'.join(axes)} coordinate"


def _embedding(plan: PlanData) -> Found:
    pp, found = plan.groups.get("pp"), plan.groups.get("embedding")
    if pp is None or found is None:
        if found is None:
            yield "groups.embedding is missing"
        return
    want = pp[:, [0, -1]] if pp.shape[1] > 1 else pp[:, :1]
    if found.shape != want.shape or not np.array_equal(found, want):
        yield "groups.embedding are not the first and last rank of each pipeline group"


def optimizer_shards(plan: PlanData) -> Found:
    """A rank's optimizer shard is its position in its shard group: its position in its dp_cp
    group, modulo data_shard."""
    if plan.data_shard < 1:
        return
    _, position = dp_cp_position(plan)
    want = position % plan.data_shard
    bad = plan.optimizer_shard != want
    if bad.any():
        r = _first_bad(bad)
        yield f"rank {r}: optimizer_shard {plan.optimizer_shard[r]}, but it is member {want[r]} of its shard group"


def memory(plan: PlanData) -> Found:
    """Each rank's memory total is the sum of its parts, and the summary's peak is the largest."""
    parts = plan.memory[:, :-1].sum(axis=1)
    bad = parts != plan.memory[:, -1]
    if bad.any():
        r = _first_bad(bad)
        yield f"rank {r}: memory total {plan.memory[r, -1]} is not the sum of its parts {parts[r]}"
    if (plan.memory < 0).any():
        yield f"a memory field is negative ({MEMORY_FIELDS})"
    summary = plan.raw.get("summary", {})
    if plan.memory.size and summary.get("peak_memory_bytes") != int(plan.memory[:, -1].max()):
        yield f"summary.peak_memory_bytes {summary.get('peak_memory_bytes')} is not the largest rank total {int(plan.memory[:, -1].max())}"
