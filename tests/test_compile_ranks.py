"""Rank grid and process groups (planc.compile.ranks, planc.compile.groups).

Expected groups are Megatron's documented layouts (megatron-torchtitan.md §2.2, computed there
by running Megatron's own group generator), written out by hand, never from planc's output.
"""

from __future__ import annotations

from itertools import permutations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planc.compile.groups import index_in_group, orthogonal_groups, process_groups
from planc.compile.ranks import AXES, Grid, place
from planc.plannable import layer_ranges

DEFAULT = ("tp", "cp", "dp", "pp")


def grid(order: tuple[str, ...] = DEFAULT, **degrees: int) -> Grid:
    return Grid(order, tuple(degrees.get(axis, 1) for axis in order))


# ----------------------------------------------------------------------------- Megatron's layouts


def test_megatron_default_order_w16() -> None:
    """W=16, t=2, p=2, d=4, order tp-cp-dp-pp."""
    groups = process_groups(grid(tp=2, dp=4, pp=2))
    assert groups.tp.tolist() == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14, 15]]
    assert groups.pp.tolist() == [[0, 8], [1, 9], [2, 10], [3, 11], [4, 12], [5, 13], [6, 14], [7, 15]]
    assert groups.dp.tolist() == [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]]
    assert groups.dp_cp.tolist() == groups.dp.tolist()  # c = 1
    assert groups.model_parallel.tolist() == [[0, 1, 8, 9], [2, 3, 10, 11], [4, 5, 12, 13], [6, 7, 14, 15]]
    assert groups.embedding.tolist() == groups.pp.tolist()  # p = 2: first and last are all
    assert groups.cp.tolist() == [[r] for r in range(16)]


def test_megatron_tp_pp_dp_order_w16() -> None:
    """The alternative order tp-cp-pp-dp (Megatron --use-tp-pp-dp-mapping) on the same sizes."""
    groups = process_groups(grid(("tp", "cp", "pp", "dp"), tp=2, dp=4, pp=2))
    assert groups.tp.tolist() == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14, 15]]
    assert groups.pp.tolist()[:4] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert groups.dp.tolist()[:2] == [[0, 4, 8, 12], [1, 5, 9, 13]]


def test_megatron_context_parallel_w16() -> None:
    """W=16, t=2, c=2, d=2, p=2, default order."""
    groups = process_groups(grid(tp=2, cp=2, dp=2, pp=2))
    assert groups.cp.tolist()[:3] == [[0, 2], [1, 3], [4, 6]]
    assert groups.dp.tolist()[:2] == [[0, 4], [1, 5]]
    assert groups.dp_cp.tolist() == [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]]
    assert orthogonal_groups(grid(tp=2, cp=2, dp=2, pp=2), ("tp", "cp")).tolist()[0] == [0, 1, 2, 3]


def test_rank_formula_default_order() -> None:
    """rank = tp + t·(cp + c·(dp + d·pp)), checked on the docstring's 8-rank example."""
    g = grid(tp=2, dp=2, pp=2)
    coords = g.coordinates()
    assert [int(coords[a][6]) for a in AXES] == [0, 0, 1, 1]
    assert g.rank_of({"tp": 0, "cp": 0, "dp": 1, "pp": 1}) == 6
    assert g.mesh_shape == (2, 2, 1, 2)
    assert g.mesh_dim_names == ("pp", "dp", "cp", "tp")
    assert g.strides == (1, 2, 2, 4)


def test_embedding_group_single_stage() -> None:
    groups = process_groups(grid(tp=2, dp=4))
    assert groups.embedding.tolist() == [[r] for r in range(8)]


def test_embedding_group_four_stages() -> None:
    groups = process_groups(grid(tp=2, pp=4))
    assert groups.embedding.tolist() == [[0, 6], [1, 7]]


def test_placement_nodes_and_domains() -> None:
    pl = place(grid(tp=4, dp=2, pp=4), gpus_per_node=4, nvlink_domain=8)
    assert pl.node.tolist()[:9] == [0, 0, 0, 0, 1, 1, 1, 1, 2]
    assert pl.local_rank.tolist()[:6] == [0, 1, 2, 3, 0, 1]
    assert pl.rail.tolist() == pl.local_rank.tolist()
    assert pl.nvlink_domain.tolist()[7:9] == [0, 1]


# ----------------------------------------------------------------------------- layer ranges


def test_layer_ranges_plain() -> None:
    assert layer_ranges((2, 2, 2, 2), 1) == (((0, 2),), ((2, 4),), ((4, 6),), ((6, 8),))


def test_layer_ranges_interleaved() -> None:
    """Chunk j of stage r holds block j·p + r: with L=16, p=4, v=2 stage 1 holds 2-4 and 10-12."""
    ranges = layer_ranges((4, 4, 4, 4), 2)
    assert ranges[0] == ((0, 2), (8, 10))
    assert ranges[1] == ((2, 4), (10, 12))
    assert ranges[3] == ((6, 8), (14, 16))


def test_layer_ranges_uneven() -> None:
    assert layer_ranges((19, 21, 21, 19), 1) == (((0, 19),), ((19, 40),), ((40, 61),), ((61, 80),))


def test_layer_ranges_uneven_interleaved() -> None:
    """Stage r's layers split into v equal chunks, laid out in block order j·p + r."""
    ranges = layer_ranges((4, 8), 2)
    assert ranges == (((0, 2), (6, 8)), ((2, 6), (8, 12)))


# ----------------------------------------------------------------------------- properties


@st.composite
def grids(draw: st.DrawFn) -> Grid:
    order = draw(st.sampled_from(list(permutations(AXES))))
    sizes = tuple(draw(st.integers(1, 4)) for _ in order)
    return Grid(order, sizes)


@settings(max_examples=150, deadline=None)
@given(grids())
def test_every_rank_in_exactly_one_group_per_axis(g: Grid) -> None:
    groups = process_groups(g)
    for name, members in groups.items():
        if name == "embedding":
            continue
        assert sorted(members.ravel().tolist()) == list(range(g.world)), name


@settings(max_examples=150, deadline=None)
@given(grids())
def test_group_sizes_equal_degrees(g: Grid) -> None:
    groups = process_groups(g)
    expected = {
        "tp": g.size("tp"),
        "cp": g.size("cp"),
        "dp": g.size("dp"),
        "pp": g.size("pp"),
        "dp_cp": g.size("dp") * g.size("cp"),
        "model_parallel": g.size("tp") * g.size("pp"),
        "embedding": min(2, g.size("pp")),
        "dp_shard": g.size("dp") * g.size("cp"),  # data_shard defaults to d·c
        "dp_replicate": 1,
    }
    for name, members in groups.items():
        assert members.shape[1] == expected[name], name
        if name != "embedding":
            assert members.shape[0] * members.shape[1] == g.world


@settings(max_examples=150, deadline=None)
@given(grids())
def test_groups_vary_only_their_axes(g: Grid) -> None:
    """Members of an axis group share every other coordinate and cover that axis once."""
    coords = g.coordinates()
    for axis in AXES:
        members = orthogonal_groups(g, (axis,))
        for other in AXES:
            values = coords[other][members]
            if other == axis:
                assert (np.sort(values, axis=1) == np.arange(g.size(axis))).all()
            else:
                assert (values == values[:, :1]).all()


@settings(max_examples=150, deadline=None)
@given(grids())
def test_rank_coords_rank_round_trip(g: Grid) -> None:
    coords = g.coordinates()
    assert (g.rank_of(coords) == np.arange(g.world)).all()
    by_formula = {a: np.arange(g.world) // g.stride(a) % g.size(a) for a in AXES}
    for axis in AXES:
        assert (coords[axis] == by_formula[axis]).all()


@settings(max_examples=100, deadline=None)
@given(grids())
def test_groups_ascending_and_megatron_listed(g: Grid) -> None:
    """Members ascend; groups are listed by their first member's coordinates, first axis fastest."""
    for axes in (("tp",), ("dp",), ("pp",), ("dp", "cp"), ("tp", "pp")):
        members = orthogonal_groups(g, axes)
        assert (np.diff(members, axis=1) > 0).all()
        others = [a for a in g.order if a not in axes]
        firsts = members[:, 0]
        key = sum(
            (firsts // g.stride(a) % g.size(a)) * int(np.prod([g.size(b) for b in others[:i]]))
            for i, a in enumerate(others)
        )
        assert (np.asarray(key) == np.arange(len(firsts))).all()


@pytest.mark.parametrize("degrees", [{"tp": 2, "dp": 4, "pp": 2}, {"tp": 2, "cp": 2, "dp": 2, "pp": 2}])
def test_optimizer_shard_is_index_in_dp_cp_group(degrees: dict[str, int]) -> None:
    g = grid(**degrees)
    groups = process_groups(g)
    shard = index_in_group(groups.dp_cp, g.world)
    for members in groups.dp_cp.tolist():
        assert [int(shard[r]) for r in members] == list(range(len(members)))
