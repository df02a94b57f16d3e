"""Expert process groups (ep, etp, edp) equal Megatron-Core's expert RankGenerator.

Megatron-Core (megatron/core/parallel_state.py, initialize_model_parallel) builds the expert
groups with RankGenerator(tp=ETP, ep=EP, dp=EDP, pp=PP, cp=1, order) over the same order as the
dense groups, EDP = W/(ETP·EP·PP). The expected layouts below are the examples documented in
`generate_masked_orthogonal_rank_groups`'s docstring, and a property test compares planc with
`reference_groups`, written here from that docstring (not from planc's code): a rank is
Σ index·stride with strides the prefix products of the sizes in order; a group holds the ranks
whose masked indices run over their whole range, listed with the first masked axis fastest, and
the groups are listed with the first unmasked axis fastest.

An optional test compares with Megatron-Core itself (PLANC_MEGATRON_PYTHON: an interpreter with
megatron-core installed; skipped when there is none).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planc.compile.groups import EXPERT_KINDS, expert_grid, orthogonal_groups
from planc.plannable import PlanLayout, layer_ranges, pp_stride
from planc.verify.plandata import read_plan
from planc.verify.report import verify_plan
from planc.vocab import Axis

from conftest import compiled, job_of

NAMES = ("tp", "pp", "dp", "ep", "cp")


def reference_groups(order: str, sizes: dict[str, int], token: str) -> list[list[int]]:
    """Megatron's RankGenerator.get_ranks(token), from its docstrings: names the order leaves out
    are appended when their size is 1 (an error otherwise)."""
    names = order.split("-")
    for name in NAMES:
        if name not in names:
            if sizes[name] != 1:
                raise RuntimeError(f"{name} has size {sizes[name]} but is not in the order")
            names.append(name)
    shape = [sizes[name] for name in names]
    mask = [name in token.split("-") for name in names]
    stride = [math.prod(shape[:i]) for i in range(len(shape))]
    inner = [(s, d) for s, d, m in zip(shape, stride, mask, strict=True) if m]
    outer = [(s, d) for s, d, m in zip(shape, stride, mask, strict=True) if not m]

    def offsets(axes: list[tuple[int, int]]) -> list[int]:
        out = [0]
        for size, step in axes:  # the first axis ends up fastest
            out = [o + i * step for i in range(size) for o in out]
        return out

    return [[g + r for r in offsets(inner)] for g in offsets(outer)]


def layout(t: int, c: int, d: int, p: int, ep: int, et: int, order: str) -> PlanLayout:
    """A PlanLayout of these degrees (the dense order is the written one without ep)."""
    world = t * c * d * p
    written = tuple(order.split("-"))
    return PlanLayout(
        t=t,
        p=p,
        d=d,
        c=c,
        v=1,
        sp=False,
        zero=0,
        order=tuple(Axis(a) for a in written if a != "ep"),
        data_shard=d * c,
        stage_layers=(1,) * p,
        chunks=layer_ranges((1,) * p, 1),
        ep=ep,
        et=et,
        edp=world // (et * ep * p),
        expert_order=written + (() if "ep" in written else ("ep",)),
    )


def planc_groups(lay: PlanLayout) -> dict[str, list[list[int]]]:
    grid = expert_grid(lay)
    return {kind: orthogonal_groups(grid, (axis,)).tolist() for kind, axis in EXPERT_KINDS}


def megatron_sizes(lay: PlanLayout) -> dict[str, int]:
    return {"tp": lay.et, "ep": lay.ep, "dp": lay.edp, "pp": lay.p, "cp": 1}


def test_docstring_example_as_expert_parallel() -> None:
    # parallel_size [tp, dp, pp] = [2, 3, 4], mask dp: dp_group[0] = [0, 2, 4], dp_group[1] =
    # [1, 3, 5], dp_group[7] = [19, 21, 23]. The same grid with the middle axis as ep: ETP 2,
    # EP 3, EDP 1, PP 4 (dense: t 2, d 3, p 4), order tp-cp-ep-dp-pp.
    groups = planc_groups(layout(2, 1, 3, 4, ep=3, et=2, order="tp-cp-ep-dp-pp"))
    assert len(groups["ep"]) == 8
    assert groups["ep"][0] == [0, 2, 4] and groups["ep"][1] == [1, 3, 5]
    assert groups["ep"][7] == [19, 21, 23]
    assert groups["etp"][:3] == [[0, 1], [2, 3], [4, 5]]
    assert groups["edp"] == [[r] for r in range(24)]


def test_docstring_example_tp_pp_dp() -> None:
    # 8 GPUs, order tp-pp-dp, sizes 2-2-2: dp_group [[0, 4], [1, 5], [2, 6], [3, 7]]. As the
    # expert grid: ETP 2, PP 2, EDP 2 (EP 1), the dense grid t 2, p 2, d 2 with ep and cp after.
    groups = planc_groups(layout(2, 1, 2, 2, ep=1, et=2, order="tp-pp-dp-ep-cp"))
    assert groups["edp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert groups["etp"] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_groups_docstring_worked_example() -> None:
    # planc/compile/groups.py: W = 16, t 2, d 4, p 2, EP 2, ETP 1 → EDP 4.
    groups = planc_groups(layout(2, 1, 4, 2, ep=2, et=1, order="tp-cp-ep-dp-pp"))
    assert groups["ep"] == [[2 * i, 2 * i + 1] for i in range(8)]
    assert groups["etp"] == [[r] for r in range(16)]
    assert groups["edp"] == [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]]


def test_mixtral_example_plan() -> None:
    # 64 ranks, t 1, p 4, d 16, EP 8 → EDP 2, order tp-cp-ep-dp-pp: ep groups are 8 consecutive
    # ranks, edp pairs 8 apart, and the expert pp groups are the dense ones.
    plan = compiled(job_of(None, "mixtral-8x7b-64xh100.yaml"))
    assert plan.groups.ep is not None and plan.groups.edp is not None
    assert plan.groups.ep.tolist()[:2] == [list(range(8)), list(range(8, 16))]
    assert plan.groups.edp.tolist()[:3] == [[0, 8], [1, 9], [2, 10]]
    sizes = {"tp": 1, "ep": 8, "dp": 2, "pp": 4, "cp": 1}
    assert plan.groups.pp.tolist() == reference_groups("tp-cp-ep-dp-pp", sizes, "pp")


def test_dense_plans_have_no_expert_groups() -> None:
    plan = compiled(job_of())
    assert {name for name, _ in plan.groups.items()}.isdisjoint({"ep", "etp", "edp"})


ORDERS = st.permutations(["tp", "cp", "ep", "dp", "pp"]).map("-".join)


@st.composite
def expert_layouts(draw: st.DrawFn) -> PlanLayout:
    t, p = draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2, 3]))
    c, d = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2, 4, 6]))
    world = t * c * d * p
    per_stage = world // p
    et = draw(st.sampled_from([e for e in (1, 2, 4) if per_stage % e == 0]))
    ep = draw(st.sampled_from([e for e in range(1, 13) if (per_stage // et) % e == 0]))
    order = draw(st.one_of(ORDERS, st.permutations(["tp", "cp", "dp", "pp"]).map("-".join)))
    return layout(t, c, d, p, ep=ep, et=et, order=order)


@settings(max_examples=300, deadline=None)
@given(expert_layouts())
def test_expert_groups_equal_the_reference(lay: PlanLayout) -> None:
    sizes, order = megatron_sizes(lay), "-".join(lay.expert_order)
    ours = planc_groups(lay)
    for kind, axis in EXPERT_KINDS:
        assert ours[kind] == reference_groups(order, sizes, axis)
    # The expert pipeline groups are the dense ones when pp has the same stride in both grids.
    dense = {"tp": lay.t, "cp": lay.c, "dp": lay.d, "pp": lay.p, "ep": 1}
    if math.prod(dense[a] for a in lay.expert_order[: lay.expert_order.index("pp")]) == (
        math.prod(sizes[a] for a in lay.expert_order[: lay.expert_order.index("pp")])
    ):
        assert reference_groups(order, dense, "pp") == reference_groups(order, sizes, "pp")


def test_verify_rejects_a_moved_expert_rank() -> None:
    from planc.compile.plan import plan_json

    plan = compiled(job_of(None, "mixtral-8x7b-64xh100.yaml"))
    data = json.loads(plan_json(plan))
    assert verify_plan(read_plan(json.dumps(data))).ok
    ep = data["groups"]["ep"]
    ep[0][1], ep[1][1] = ep[1][1], ep[0][1]  # ranks 1 and 9 swap expert-parallel groups
    problems = [p for c in verify_plan(read_plan(json.dumps(data))).checks for p in c.problems]
    assert any("groups.ep" in p and "mixes" in p for p in problems), problems
    data = json.loads(plan_json(plan))
    data["layout"]["expert"]["degrees"]["dp"] = 4  # EDP no longer spans the world
    problems = [p for c in verify_plan(read_plan(json.dumps(data))).checks for p in c.problems]
    assert any("layout.expert" in p for p in problems), problems


MEGATRON_SCRIPT = """
import json, sys
from megatron.core.parallel_state import RankGenerator
out = []
for tp, ep, dp, pp, order, dense in json.loads(sys.stdin.read()):
    gen = RankGenerator(tp=tp, ep=ep, dp=dp, pp=pp, cp=1, order=order)
    groups = {token: gen.get_ranks(token) for token in ("ep", "tp", "dp", "pp")}
    t, c, d = dense
    groups["dense_pp"] = RankGenerator(tp=t, ep=1, dp=d, pp=pp, cp=c, order=order).get_ranks("pp")
    out.append(groups)
print(json.dumps(out))
"""


def _megatron_python() -> str | None:
    candidate = os.environ.get("PLANC_MEGATRON_PYTHON") or sys.executable
    try:
        run = subprocess.run(
            [candidate, "-c", "import megatron.core.parallel_state"],
            capture_output=True,
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return candidate if run.returncode == 0 else None


def test_expert_groups_equal_megatron_core() -> None:
    python = _megatron_python()
    if python is None:
        pytest.skip(
            "megatron.core.parallel_state is not importable (pip install megatron-core on "
            "Python >= 3.12, and point PLANC_MEGATRON_PYTHON at that interpreter)"
        )
    rng = np.random.default_rng(14)
    layouts = []
    orders = ["tp-cp-ep-dp-pp", "tp-ep-cp-dp-pp", "ep-tp-dp-cp-pp", "tp-pp-ep-dp-cp", "tp-cp-dp-pp"]
    while len(layouts) < 200:
        t, p, c, d = (int(rng.choice(v)) for v in ([1, 2, 4], [1, 2, 4], [1, 2], [1, 2, 4, 8]))
        per_stage = t * c * d
        et = int(rng.choice([e for e in (1, 2, 4) if per_stage % e == 0]))
        eps = [e for e in range(1, 17) if (per_stage // et) % e == 0]
        order = str(rng.choice(orders))
        ep = 1 if "ep" not in order else int(rng.choice(eps))
        layouts.append(layout(t, c, d, p, ep=ep, et=et, order=order))
    payload = [
        [lay.et, lay.ep, lay.edp, lay.p, "-".join(lay.expert_order), [lay.t, lay.c, lay.d]]
        for lay in layouts
    ]
    run = subprocess.run(
        [python, "-c", MEGATRON_SCRIPT],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    megatron = json.loads(run.stdout.strip().splitlines()[-1])
    for lay, theirs in zip(layouts, megatron, strict=True):
        ours = planc_groups(lay)
        grid = expert_grid(lay)
        assert ours["ep"] == theirs["ep"] and ours["etp"] == theirs["tp"], lay
        assert ours["edp"] == theirs["dp"], lay
        assert orthogonal_groups(grid, ("pp",)).tolist() == theirs["pp"], lay
        # PLC027's test for equal pipeline groups (Megatron raises when they differ): pp has the
        # same stride in the dense and the expert grid.
        dense = {"tp": lay.t, "cp": lay.c, "ep": 1, "dp": lay.d, "pp": lay.p}
        same = lay.p == 1 or pp_stride(lay.expert_order, dense) == pp_stride(
            lay.expert_order, lay.expert_degrees
        )
        assert same == (theirs["dense_pp"] == theirs["pp"]), lay
