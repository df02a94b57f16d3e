"""The rank grid: where every rank sits on the parallel axes and on the hardware.

Megatron's convention (`RankGenerator` in megatron/core/parallel_state.py): the order string
names the axes fastest-varying first, and a rank is Σ coord_axis · stride_axis with strides the
prefix products of the sizes in that order. For the default order tp-cp-dp-pp:

    rank = tp + t·(cp + c·(dp + d·pp))

That is `np.arange(world).reshape(p, d, c, t)`: the same axes listed slowest first, which is also
the shape of the matching PyTorch DeviceMesh (row-major, last dim fastest).

Worked example, 8 ranks with t=2, d=2, p=2 (c=1), order tp-cp-dp-pp:

    pp=0: dp=0 -> [0 1]   dp=1 -> [2 3]
    pp=1: dp=0 -> [4 5]   dp=1 -> [6 7]

Rank 6 has coordinates tp=0, cp=0, dp=1, pp=1: 0 + 2·(0 + 1·(1 + 2·1)) = 6.

Ranks fill nodes in rank order (node = rank // gpus_per_node), and NVLink domains are blocks of
consecutive ranks (domain = rank // nvlink_domain); the local GPU index is also the rail.
Everything is a numpy array over all ranks: no Python loop runs per rank.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from planc.plannable import PlanLayout, axis_strides
from planc.record import record
from planc.vocab import AXES as AXIS_ENUMS
from planc.vocab import Axis

AXES: tuple[str, ...] = tuple(axis.value for axis in AXIS_ENUMS)

Ranks = npt.NDArray[np.int64]


@record
class Grid:
    """Axis sizes in rank order: `order[0]` varies fastest (stride 1)."""

    order: tuple[str, ...]
    sizes: tuple[int, ...]

    @property
    def world(self) -> int:
        return math.prod(self.sizes)

    @property
    def strides(self) -> tuple[int, ...]:
        """Prefix products of the sizes in order: the rank distance between neighbours on an axis."""
        axes = tuple(Axis(name) for name in self.order)
        found = axis_strides(axes, dict(zip(axes, self.sizes, strict=True)))
        return tuple(found[axis] for axis in axes)

    def size(self, axis: str) -> int:
        return self.sizes[self.order.index(axis)]

    def stride(self, axis: str) -> int:
        return self.strides[self.order.index(axis)]

    @property
    def mesh_dim_names(self) -> tuple[str, ...]:
        """The axes slowest first: DeviceMesh (and numpy row-major) order."""
        return self.order[::-1]

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        return self.sizes[::-1]

    def ranks(self) -> Ranks:
        """All ranks as an array whose dims are `mesh_dim_names`."""
        return np.arange(self.world, dtype=np.int64).reshape(self.mesh_shape)

    def coordinates(self) -> dict[str, Ranks]:
        """Every rank's coordinate on every axis, keyed by axis name in `AXES` order."""
        by_dim = np.unravel_index(np.arange(self.world, dtype=np.int64), self.mesh_shape)
        found = dict(zip(self.mesh_dim_names, by_dim, strict=True))
        return {axis: found[axis].astype(np.int64) for axis in AXES}

    def rank_of(self, coords: Mapping[str, Any]) -> Any:
        """Σ coord · stride; works on ints and on arrays of coordinates alike."""
        return sum(coords[axis] * self.stride(axis) for axis in self.order)


def grid_of(layout: PlanLayout) -> Grid:
    """The grid of a plannable layout."""
    degrees = layout.degrees
    return Grid(tuple(axis.value for axis in layout.order), tuple(degrees[axis] for axis in layout.order))


@record(eq=False)
class Placement:
    """Where each rank runs. Arrays are indexed by rank; `rail` is the local GPU index."""

    grid: Grid
    coords: Mapping[str, Ranks]
    node: Ranks
    local_rank: Ranks
    nvlink_domain: Ranks

    @property
    def world(self) -> int:
        return self.grid.world

    @property
    def rail(self) -> Ranks:
        # On a rail-optimised fabric NIC i of every node hangs off leaf switch i, so the local
        # GPU index is the rail.
        return self.local_rank


def place(grid: Grid, gpus_per_node: int, nvlink_domain: int) -> Placement:
    rank = np.arange(grid.world, dtype=np.int64)
    return Placement(
        grid=grid,
        coords=grid.coordinates(),
        node=rank // gpus_per_node,
        local_rank=rank % gpus_per_node,
        nvlink_domain=rank // nvlink_domain,
    )
