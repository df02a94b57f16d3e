"""A data-parallel ring spreads its cross-node hops over its members' NICs (issue 24).

NCCL runs one ring channel per NIC, each crossing nodes on its own rail, so a ring whose group
has g members on every node moves g NICs' worth of bytes at once, bounded by the node's own
NVLink ring (NCCL's maintainers: 192 GB/s all-reduce bus bandwidth across DGX A100s with eight
25 GB/s NICs; NVIDIA/nccl issue #812). Expected values below are worked by hand from the
presets' bandwidths (H100: 50 GB/s per NIC at 0.9, NVLink 450 GB/s at 0.82; 5 µs per ring step
on the network) or counted on the rank grid.
"""

from __future__ import annotations

from itertools import permutations
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planc.comm.schedule import members_per_block, ring_rails
from planc.comm.tiers import railed_ring_gbs
from planc.vocab import Axis, GroupKind

from conftest import grid_overlay, job_of

ROOT = Path(__file__).resolve().parent.parent


def test_a_ring_with_eight_members_a_node_runs_on_eight_nics_until_nvlink_binds() -> None:
    # H100: eight 45 GB/s NICs give 360 GB/s, below NVLink's 369; A100: eight 22.5 give 180,
    # below NVLink's 210; a 100 GB/s NIC would give 800, so NVLink's 369 binds.
    assert railed_ring_gbs(45.0, 8, 369.0) == pytest.approx(360.0)
    assert railed_ring_gbs(22.5, 8, 210.0) == pytest.approx(180.0)
    assert railed_ring_gbs(100.0, 8, 369.0) == pytest.approx(369.0)
    # One member a node (t = 8 on eight-GPU nodes): one NIC, as before.
    assert railed_ring_gbs(45.0, 1, 369.0) == pytest.approx(45.0)


def _brute_counts(order: tuple[str, ...], sizes: dict[str, int], span: int, axes: tuple[str, ...]) -> set[int]:
    """The member counts of every (group over `axes`, block of `span` ranks) pair it touches."""
    names = tuple(reversed(order))
    shape = tuple(sizes[a] for a in names)
    grid = np.arange(int(np.prod(shape))).reshape(shape)
    keep = [i for i, a in enumerate(names) if a not in axes]
    move = [i for i, a in enumerate(names) if a in axes]
    groups = grid.transpose(keep + move).reshape(-1, int(np.prod([shape[i] for i in move])))
    counts: set[int] = set()
    for group in groups:
        _, per_block = np.unique(group // span, return_counts=True)
        counts.update(int(c) for c in per_block)
    return counts


@settings(max_examples=150, deadline=None)
@given(
    t=st.sampled_from([1, 2, 4, 8]),
    c=st.sampled_from([1, 2]),
    d=st.sampled_from([1, 2, 4, 8, 16]),
    p=st.sampled_from([1, 2]),
    order=st.sampled_from(list(permutations(("tp", "cp", "dp", "pp")))),
    span=st.sampled_from([2, 4, 8]),
)
def test_members_per_block_counts_the_grid(
    t: int, c: int, d: int, p: int, order: tuple[str, ...], span: int
) -> None:
    sizes = {"tp": t, "cp": c, "dp": d, "pp": p}
    stride, s = {}, 1
    for name in order:
        stride[Axis(name)] = s
        s *= sizes[name]
    degrees = {Axis(name): n for name, n in sizes.items()}
    for axes in (("dp",), ("dp", "cp"), ("tp",)):
        counts = _brute_counts(order, sizes, span, axes)
        assert counts == {members_per_block(span, degrees, stride, tuple(Axis(a) for a in axes))}


def test_the_rails_of_each_data_parallel_group() -> None:
    # 64 ranks on eight-GPU nodes, t1 c2 d32 in Megatron's order tp-cp-dp-pp: cp and four dp
    # steps fit a node, so a dp_cp group has 2 × 4 = 8 members on each; the dp group 4.
    job = job_of(grid_overlay(1, 2, 32, 1, ("tp", "cp", "dp", "pp"), 8))
    assert ring_rails(job, GroupKind.DP_CP) == 8
    assert ring_rails(job, GroupKind.DP) == 4
    assert ring_rails(job, GroupKind.TP) == 1
    # t4 on four-GPU nodes: every dp step leaves the node, one member a node.
    job = job_of(grid_overlay(4, 1, 4, 1, ("tp", "cp", "dp", "pp"), 4))
    assert ring_rails(job, GroupKind.DP_CP) == 1


def test_fsdp_gathers_of_a_70b_model_over_eight_nodes_use_all_eight_nics() -> None:
    # NeMo AutoModel's Llama 3 70B on 64 H100s (t1 c2 d32, FSDP2 over all 64): one 80 MB bucket
    # (40M bf16 elements) all-gathered over n = 64 ranks sends 63/64 of it, 78,750,000 bytes,
    # at min(8 × 50 × 0.9, 450 × 0.82) = 360 GB/s, plus 63 ring steps of 5 µs:
    # 218.75 µs + 315 µs = 533.75 µs a call. Priced at one NIC it was 1,750 + 315 µs.
    from planc.scoring import analysed

    spec = ROOT / "validation" / "runs" / "automodel-llama3-70b-64xh100.yaml"
    analysis = analysed(str(spec))[1]
    gathers = [
        op
        for op in analysis.ops
        if op.group == "dp_cp" and op.op == "all_gather" and op.buffer_bytes == 80_000_000
    ]
    assert len(gathers) == 1
    op = gathers[0]
    assert analysis.op_seconds[op] / op.calls == pytest.approx(533.75e-6, rel=1e-9)
