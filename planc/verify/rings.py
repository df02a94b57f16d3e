"""The ring collectives and the all-to-all run by `planc.sim` on the plan's real group members.

Each rank's buffer is seeded by its rank id, so the expected result depends on *which* ranks
are in a group: the sum over the ranks that share the group's other coordinates (found here from
the rank records), not over whatever the plan lists. A group with a wrong, missing or duplicated
member reduces to the wrong numbers. Buffers are capped by bytes, not elements, so the work per
ring is bounded whatever the group size; the bytes at the real size are checked in
`planc.verify.traffic` with the same ring formula the simulation is checked against here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import numpy.typing as npt

from planc.record import record
from planc.sim import (
    all_to_all,
    all_to_all_bytes,
    all_to_all_received_bytes,
    chunk_sizes,
    ring_all_gather,
    ring_all_gather_bytes,
    ring_allreduce,
    ring_allreduce_bytes,
    ring_reduce_scatter,
    ring_reduce_scatter_bytes,
)
from planc.verify.grid import (
    DISPATCH_KINDS,
    EXPERT_KIND_AXES,
    KIND_AXES,
    SHARD_KINDS,
    dispatch_position,
    dp_cp_position,
    expert_coordinates,
)
from planc.verify.plandata import AXES, Ints, PlanData
from planc.verify.traffic import itemsize_of

CAP_BYTES = 1 << 24  # int64 bytes of one simulated ring's buffers (16 MiB)
GROUPS_PER_SHAPE = 4  # groups simulated per (kind, op, size): the first, the last, two between
# The simulator's byte trace holds (ranks × steps) counts: n² for a ring of n. Above this group
# size the ring is not simulated; membership and bytes are still checked (grid, traffic).
MAX_RING_RANKS = 2048

Sim = Callable[[npt.NDArray[np.int64]], tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]
RINGS: dict[str, tuple[Sim, Callable[[int, int, int], Ints]]] = {
    "all_reduce": (ring_allreduce, ring_allreduce_bytes),
    "reduce_scatter": (ring_reduce_scatter, ring_reduce_scatter_bytes),
    "all_gather": (ring_all_gather, ring_all_gather_bytes),
}


@record
class RingRun:
    group: str
    op: str
    group_size: int
    groups: int  # how many groups of this kind the plan has
    simulated: int  # how many of them ran
    elements: int  # per rank, simulated
    problems: tuple[str, ...]
    note: str = ""  # why a shape was not simulated


def _buffers(ranks: Ints, elements: int) -> Ints:
    return (
        np.stack(
            [
                np.random.default_rng(int(r)).integers(-1000, 1000, elements, dtype=np.int64)
                for r in ranks
            ]
        )
        if len(ranks)
        else np.zeros((0, elements), dtype=np.int64)
    )


def _should_hold(plan: PlanData, kind: str, anchor: int) -> Ints:
    """The ranks that share every coordinate but the kind's axes with `anchor`, ascending."""
    if kind in SHARD_KINDS:
        key, position = dp_cp_position(plan)
        mine = position // plan.data_shard if kind == "dp_shard" else position % plan.data_shard
        same = (key == key[anchor]) & (mine == mine[anchor])
        return np.flatnonzero(same).astype(np.int64)
    if kind == "embedding":
        pp = plan.groups.get("pp")
        row = (
            pp[(pp == anchor).any(axis=1)][0]
            if pp is not None and (pp == anchor).any()
            else np.array([anchor])
        )
        return np.unique(row[[0, -1]])
    if kind in (*DISPATCH_KINDS, "tp_ep"):
        key, position, n = dispatch_position(plan)
        same = key == key[anchor]
        if kind != "tp_ep":
            g = n // plan.groups["ep_peers"].shape[1] if "ep_peers" in plan.groups else n
            mine = position // g if kind == "ep_domain" else position % g
            same &= mine == mine[anchor]
        return np.flatnonzero(same).astype(np.int64)
    same = np.ones(len(plan.rank), dtype=bool)
    if kind in EXPERT_KIND_AXES:  # a slice of the expert grid along one of its axes
        coords = expert_coordinates(plan)
        for axis, coord in coords.items():
            if axis != EXPERT_KIND_AXES[kind]:
                same &= coord == coord[anchor]
        return np.flatnonzero(same).astype(np.int64)
    for axis in AXES:
        if axis not in KIND_AXES[kind]:
            same &= plan.coords[axis] == plan.coords[axis][anchor]
    return np.flatnonzero(same).astype(np.int64)


def _expected(op: str, listed: Ints, should: Ints, elements: int) -> Ints:
    total = _buffers(should, elements).sum(axis=0)
    n = len(listed)
    if op == "all_reduce":
        return np.broadcast_to(total, (n, elements))
    bounds = np.concatenate(([0], np.cumsum(chunk_sizes(n, elements))))
    out = np.zeros((n, elements), dtype=np.int64)
    if op == "reduce_scatter":
        for i in range(n):
            out[i, bounds[i] : bounds[i + 1]] = total[bounds[i] : bounds[i + 1]]
        return out
    own = _buffers(listed, elements)
    gathered = np.concatenate([own[i, bounds[i] : bounds[i + 1]] for i in range(n)])
    return np.broadcast_to(gathered, (n, elements))


def _compare(op: str, out: Ints, want: Ints, n: int, elements: int) -> bool:
    if op != "reduce_scatter":
        return bool(np.array_equal(out, want))
    bounds = np.concatenate(([0], np.cumsum(chunk_sizes(n, elements))))
    return all(
        np.array_equal(out[i, bounds[i] : bounds[i + 1]], want[i, bounds[i] : bounds[i + 1]])
        for i in range(n)
    )


def _exchange(listed: Ints, should: Ints, elements: int) -> list[str]:
    """Run the all-to-all over `listed`: every member must receive, from each member in group
    order, the chunk that member addressed to it (seeded by rank id), the group must hold the
    ranks that share its other coordinates, and the bytes must be the exchange's formula."""
    n = len(listed)
    problems: list[str] = []
    if not np.array_equal(np.sort(listed), should):
        problems.append(
            f"all_to_all over group {listed[:8].tolist()}: the ranks that share its coordinates "
            f"are {should[:8].tolist()}"
        )
    sent_to = _buffers(listed, elements)
    received, sent, got = all_to_all(sent_to)
    bounds = np.concatenate(([0], np.cumsum(chunk_sizes(n, elements))))
    for j in range(n):
        want = np.concatenate([sent_to[i, bounds[j] : bounds[j + 1]] for i in range(n)])
        if not np.array_equal(received[j], want):
            problems.append(
                f"all_to_all over group {listed[:8].tolist()}: rank {int(listed[j])} did not "
                "receive what each member addressed to it"
            )
            break
    if not (
        np.array_equal(sent, all_to_all_bytes(n, elements, 8))
        and np.array_equal(got, all_to_all_received_bytes(n, elements, 8))
    ):
        problems.append(
            f"all_to_all over group {listed[:8].tolist()}: the simulated bytes differ from the formula"
        )
    return problems


def _inner_cp(plan: PlanData, kind: str, size: int) -> bool:
    """Whether ops over `size` ranks of groups.cp are a2a+p2p's inner all-to-alls: consecutive
    blocks of `size` ranks of each CP group (Megatron-Core create_hierarchical_groups, level 0
    of --hierarchical-context-parallel-sizes)."""
    found = plan.groups.get(kind)
    return (
        kind == "cp"
        and plan.cp_comm_type == "a2a+p2p"
        and found is not None
        and found.ndim == 2
        and found.shape[1] != size
        and found.shape[1] % size == 0
    )


def _block(members: Ints, anchor: int, size: int) -> Ints:
    """The consecutive block of `size` of `members` that holds `anchor`."""
    at = int(np.flatnonzero(members == anchor)[0]) // size
    return members[at * size : (at + 1) * size]


def run_shape(plan: PlanData, kind: str, op: str, size: int, buffer_bytes: int) -> RingRun:
    found = plan.groups.get(kind)
    inner = _inner_cp(plan, kind, size)
    if inner and found is not None:
        found = found.reshape(-1, size)
    if found is None or found.ndim != 2 or found.shape[1] != size:
        return RingRun(
            kind, op, size, 0, 0, 0, (f"no groups.{kind} of {size} ranks to run {op} on",)
        )
    if size > MAX_RING_RANKS:
        note = (
            f"not simulated: {size:,} ranks per group is above the simulator's {MAX_RING_RANKS:,}"
        )
        return RingRun(kind, op, size, int(found.shape[0]), 0, 0, (), note)
    elements = simulated_elements(plan, kind, op, size, buffer_bytes)
    picks = sorted({int(i) for i in np.linspace(0, found.shape[0] - 1, GROUPS_PER_SHAPE).round()})
    problems: list[str] = []
    for g in picks:
        listed = found[g]
        if len(set(listed.tolist())) != size or listed.min() < 0 or listed.max() >= len(plan.rank):
            problems.append(f"groups.{kind} group {g} does not list {size} distinct ranks")
            continue
        should = _should_hold(plan, kind, int(listed[0]))
        if inner:
            should = _block(should, int(listed[0]), size)
        if op == "all_to_all":
            problems += [
                f"groups.{kind} group {g}: {p}" for p in _exchange(listed, should, elements)
            ]
            continue
        simulate, formula = RINGS[op]
        out, sent = simulate(_buffers(listed, elements))
        if not _compare(op, out, _expected(op, listed, should, elements), size, elements):
            problems.append(
                f"{op} over groups.{kind} group {g} {listed[:8].tolist()} does not give the "
                f"result over the ranks that share its coordinates {should[:8].tolist()}"
            )
        if not np.array_equal(sent, formula(size, elements, 8)):
            problems.append(
                f"{op} over groups.{kind} group {g}: the simulated ring's bytes differ from the ring formula"
            )
    return RingRun(kind, op, size, int(found.shape[0]), len(picks), elements, tuple(problems))


def simulated_elements(plan: PlanData, kind: str, op: str, size: int, buffer_bytes: int) -> int:
    """Elements per rank a ring runs on: the real buffer, capped at CAP_BYTES for the group."""
    real = buffer_bytes // itemsize_of(plan, kind, op)
    return max(1, min(real, CAP_BYTES // (8 * size)))


def rings(plan: PlanData) -> Iterator[RingRun]:
    """One run per distinct (group kind, ring op or all-to-all, group size, simulated size) of
    the plan's ops: buffers capped to the same size run once."""
    shapes: dict[tuple[str, str, int, int], int] = {}
    for o in plan.ops:
        if (o.get("op") in RINGS or o.get("op") == "all_to_all") and int(
            o.get("group_size", 1)
        ) > 1:
            kind, op, size, size_bytes = (
                o["group"],
                o["op"],
                int(o["group_size"]),
                int(o["buffer_bytes"]),
            )
            key = (kind, op, size, simulated_elements(plan, kind, op, size, size_bytes))
            shapes.setdefault(key, size_bytes)
    for (kind, op, size, _), buffer_bytes in sorted(shapes.items()):
        yield run_shape(plan, kind, op, size, buffer_bytes)
