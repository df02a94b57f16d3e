"""dp_shard and dp_replicate: slices of each dp_cp group (parallelism.data_shard, HSDP)."""

from __future__ import annotations

import numpy as np
import pytest

from planc.compile.groups import process_groups, shard_groups
from planc.compile.ranks import Grid

from conftest import compiled, job_of


def grid(**degrees: int) -> Grid:
    order = ("tp", "cp", "dp", "pp")
    return Grid(order, tuple(degrees.get(axis, 1) for axis in order))


def test_worked_example_of_the_docstring() -> None:
    # W = 16, t = 2, d = 4, p = 2: dp_cp [0,2,4,6] [1,3,5,7] [8,10,12,14] [9,11,13,15].
    groups = process_groups(grid(tp=2, dp=4, pp=2), data_shard=2)
    assert groups.dp_shard.tolist() == [
        [0, 2], [4, 6], [1, 3], [5, 7], [8, 10], [12, 14], [9, 11], [13, 15],
    ]  # fmt: skip
    assert groups.dp_replicate.tolist() == [
        [0, 4], [2, 6], [1, 5], [3, 7], [8, 12], [10, 14], [9, 13], [11, 15],
    ]  # fmt: skip


def test_default_shards_over_the_whole_dp_cp_group() -> None:
    groups = process_groups(grid(tp=2, cp=2, dp=2, pp=2))
    assert np.array_equal(groups.dp_shard, groups.dp_cp)
    assert groups.dp_replicate.shape == (16, 1)
    assert sorted(groups.dp_replicate.ravel().tolist()) == list(range(16))


@pytest.mark.parametrize("shard", [1, 2, 4, 8])
def test_shard_and_replicate_partition_the_ranks_and_cross_once(shard: int) -> None:
    groups = process_groups(grid(tp=2, cp=2, dp=4, pp=2), data_shard=shard)
    world = 32
    for kind in (groups.dp_shard, groups.dp_replicate):
        assert sorted(kind.ravel().tolist()) == list(range(world))
    assert groups.dp_shard.shape == (world // shard, shard)
    # A shard group and a replicate group of the same dp_cp group share exactly one rank.
    dp_cp = {r: i for i, g in enumerate(groups.dp_cp.tolist()) for r in g}
    for s in groups.dp_shard.tolist():
        for r in groups.dp_replicate.tolist():
            if dp_cp[s[0]] == dp_cp[r[0]]:
                assert len(set(s) & set(r)) == 1


def test_a_shard_that_does_not_divide_is_refused() -> None:
    with pytest.raises(ValueError, match="does not divide"):
        shard_groups(np.arange(8).reshape(2, 4), 3)


def test_an_hsdp_spec_compiles_with_shard_indices_in_dp_shard() -> None:
    # llama3-8b on 8 GPUs, tensor 2, data 4, data_shard 2: two replicas of a 2-way shard.
    plan = compiled(job_of({"parallelism": {"data_shard": 2}}))
    assert plan.groups.dp_shard.shape == (4, 2)
    assert plan.groups.dp_replicate.shape == (4, 2)
    position = np.empty(8, dtype=np.int64)
    position[plan.groups.dp_shard] = np.arange(2)
    assert np.array_equal(plan.shard, position)
