"""The analytic NVLink-domain test of a group kind agrees with brute force over the rank grid."""

from __future__ import annotations

from itertools import permutations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from planc.comm.schedule import within_domain

from conftest import grid_overlay, job_of

AXIS_SETS = [("tp",), ("cp",), ("dp",), ("pp",), ("dp", "cp")]


def brute_force(order: tuple[str, ...], sizes: dict[str, int], domain: int, axes: tuple[str, ...]) -> bool:
    """Build the grid as a DeviceMesh (slowest axis first) and look at every group's domains."""
    names = tuple(reversed(order))
    shape = tuple(sizes[a] for a in names)
    grid = np.arange(int(np.prod(shape))).reshape(shape)
    keep = [i for i, a in enumerate(names) if a not in axes]
    move = [i for i, a in enumerate(names) if a in axes]
    groups = grid.transpose(keep + move).reshape(-1, int(np.prod([shape[i] for i in move])))
    domains = groups // domain
    return bool((domains.min(axis=1) == domains.max(axis=1)).all())


@settings(max_examples=150, deadline=None)
@given(
    t=st.sampled_from([1, 2, 4]),
    c=st.sampled_from([1, 2]),
    d=st.sampled_from([1, 2, 3, 4]),
    p=st.sampled_from([1, 2, 3]),
    order=st.sampled_from(list(permutations(("tp", "cp", "dp", "pp")))),
    per_node=st.sampled_from([1, 2, 4, 8]),
)
def test_within_domain_matches_brute_force(t: int, c: int, d: int, p: int, order: tuple[str, ...], per_node: int) -> None:
    world = t * c * d * p
    if world % per_node:
        return
    overlay = grid_overlay(t, c, d, p, order, per_node)
    job = job_of(overlay)
    sizes = {"tp": t, "cp": c, "dp": d, "pp": p}
    for axes in AXIS_SETS:
        assert within_domain(job, axes) == brute_force(order, sizes, per_node, axes), axes
