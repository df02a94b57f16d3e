"""Each pipeline send crosses its own pair of ranks' tier (`planc.sends`): a pipeline group on the
network as a whole keeps its boundaries inside an NVLink domain on NVLink, in the ops, the wire
budgets, the step's message delay, DeepSpeed's blocking transfers and `planc verify`."""

from __future__ import annotations

import json
from itertools import permutations
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planc.analysis import analyse
from planc.comm.schedule import group_tier, wire_budget
from planc.compile.plan import plan_json
from planc.perf.inputs import boundary_transfer, build_inputs, comm_time_s
from planc.perf.pipe_engine import Transfer, blocking_p2p
from planc.pipeline import registry
from planc.plannable import Plannable
from planc.sends import boundary_names, pairs_inside
from planc.verify import render, verify_text
from planc.vocab import Axis, ScheduleKind

from conftest import compiled, job_of


def brute_pairs_inside(
    order: tuple[str, ...], sizes: dict[str, int], i: int, j: int, span: int
) -> bool:
    """Build the rank grid as a DeviceMesh (slowest axis first), pair each rank of stage i with
    the rank of stage j that shares its other coordinates, and compare their blocks."""
    names = tuple(reversed(order))
    shape = tuple(sizes[a] for a in names)
    grid = np.arange(int(np.prod(shape))).reshape(shape)
    pp = names.index("pp")
    x, y = np.take(grid, i, axis=pp), np.take(grid, j, axis=pp)
    return bool((x // span == y // span).all())


@settings(max_examples=300, deadline=None)
@given(
    t=st.sampled_from([1, 2, 4]),
    c=st.sampled_from([1, 2]),
    d=st.sampled_from([1, 2, 3, 4]),
    p=st.sampled_from([2, 3, 4, 6]),
    order=st.sampled_from(list(permutations(("tp", "cp", "dp", "pp")))),
    span=st.integers(1, 80),
    data=st.data(),
)
def test_pairs_inside_matches_brute_force(
    t: int, c: int, d: int, p: int, order: tuple[str, ...], span: int, data: st.DataObject
) -> None:
    # Spans that divide nothing (72 on a grid of 64, 5 on 48) included: the rule is exact.
    sizes = {"tp": t, "cp": c, "dp": d, "pp": p}
    world = t * c * d * p
    sigma = int(np.prod([sizes[a] for a in order[: order.index("pp")]]))
    i = data.draw(st.integers(0, p - 1))
    j = data.draw(st.integers(0, p - 1))
    assert pairs_inside(world, sigma, p, i, j, span) == brute_pairs_inside(order, sizes, i, j, span)


# 128 GB200s in two NVLink domains of 64, t = 8, p = 4, d = 4: a stage is 32 consecutive ranks,
# so stages 0 and 1 share the first domain and stages 2 and 3 the second.
NVL = {
    "model": {"preset": "llama3-70b"},
    "hardware": {
        "gpu": "gb200-nvl72",
        "nodes": 32,
        "gpus_per_node": 4,
        "nvlink_domain": 64,
        "hosts": "n{1..32}",
    },
    "parallelism": {
        "tensor": 8,
        "pipeline": 4,
        "data": 4,
        "sequence_parallel": True,
        "zero_stage": 1,
        "order": "tp-cp-dp-pp",
    },
    "training": {"seq_len": 8192, "micro_batch": 1, "global_batch": 128, "recompute": "selective"},
}


def nvl(**overrides: Any) -> Plannable:
    overlay = json.loads(json.dumps(NVL))
    for section, values in overrides.items():
        overlay[section].update(values)
    return job_of(overlay)


def sends(job: Plannable) -> dict[tuple[int, str, str], int]:
    return {
        (op.stage, op.direction.value, op.link): op.calls
        for op in analyse(job).ops
        if op.group == "pp"
    }


def test_the_group_is_on_the_network_and_two_of_its_boundaries_are_not() -> None:
    job = nvl()
    assert group_tier(job, (Axis.PP,)).name == "network"
    assert boundary_names(job) == ("nvlink", "network", "nvlink", "network")
    m = 128 // 4
    # 1F1B: stage r sends forward over boundary r, backward over boundary r − 1.
    assert sends(job) == {
        (0, "fwd", "nvlink"): m,
        (1, "fwd", "network"): m,
        (2, "fwd", "nvlink"): m,
        (1, "bwd", "nvlink"): m,
        (2, "bwd", "network"): m,
        (3, "bwd", "nvlink"): m,
    }


def test_interleaved_chunks_wrap_over_the_network() -> None:
    job = nvl(parallelism={"virtual_stages": 2}, model={"layers": 80})
    m, v = 32, 2
    # Every chunk sends on; the last rank's earlier chunk wraps to rank 0 across the domains.
    assert sends(job) == {
        (0, "fwd", "nvlink"): m * v,
        (1, "fwd", "network"): m * v,
        (2, "fwd", "nvlink"): m * v,
        (3, "fwd", "network"): m * (v - 1),
        (0, "bwd", "network"): m * (v - 1),
        (1, "bwd", "nvlink"): m * v,
        (2, "bwd", "network"): m * v,
        (3, "bwd", "nvlink"): m * v,
    }


def test_the_v_placement_sends_to_both_neighbours_each_on_its_tier() -> None:
    job = nvl(parallelism={"virtual_stages": 2, "pipeline_schedule": "dualpipev"})
    m = 32
    # Rank r passes chunk 0 on to r + 1 and chunk 1 back to r − 1, m each way and direction.
    assert sends(job) == {
        (0, "fwd", "nvlink"): m,
        (1, "fwd", "nvlink"): m,
        (1, "fwd", "network"): m,
        (2, "fwd", "network"): m,
        (2, "fwd", "nvlink"): m,
        (3, "fwd", "nvlink"): m,
        (0, "bwd", "nvlink"): m,
        (1, "bwd", "nvlink"): m,
        (1, "bwd", "network"): m,
        (2, "bwd", "network"): m,
        (2, "bwd", "nvlink"): m,
        (3, "bwd", "nvlink"): m,
    }


def test_only_the_crossing_boundary_puts_activations_on_the_network() -> None:
    job = nvl()
    analysis = analyse(job)
    message = 1 * (8192 // 8) * 8192 * 2  # [s/t, b, h] in bf16, sequence parallel
    wires = wire_budget(job, analysis.ops)
    pp_network = {
        w.stage: w.tiers["network"].sent
        - sum(
            op.step_bytes
            for op in analysis.ops
            if op.stage == w.stage and op.group != "pp" and op.link == "network"
        )
        for w in wires
    }
    # Stage 1 sends its activations over the network, stage 2 its gradients; 0 and 3 none.
    assert pp_network == {0: 0, 1: 32 * message, 2: 32 * message, 3: 0}
    # The stage classes tell the stages apart by their boundaries: all four differ.
    assert len(set(analysis.schedule.classes.of)) == 4


def test_the_message_delay_is_the_slowest_boundary_crossed() -> None:
    job = nvl()
    analysis = analyse(job)
    eff = analysis.efficiency
    message = (8192 // 8) * 8192 * 2
    fast = comm_time_s(job, eff, "send_recv", 2, message, "nvlink")
    slow = comm_time_s(job, eff, "send_recv", 2, message, "network")
    params = [share.total for share in analysis.parameters]
    experts = [share.expert_total for share in analysis.parameters]
    inputs = build_inputs(job, params, experts, eff, analysis.ops)
    # Sequence parallel: nothing gathered on arrival; boundary 1 is on the network.
    assert inputs.p2p_s == pytest.approx(slow, rel=1e-12)
    assert fast < slow / 5


def test_the_steady_state_pays_a_boundarys_delay_every_micro_batch() -> None:
    # Why the slowest boundary's delay and not the mean: in 1F1B on 2 stages (t_f = 1, t_b = 2)
    # each further micro-batch costs t_f + t_b + δ, the delay of the one boundary on its cycle.
    def makespan(m: int, hop: float) -> float:
        return registry.run(
            ScheduleKind.ONE_F_ONE_B, 2, m, 1, [1.0, 1.0], [2.0, 2.0], hop
        ).makespan_s

    assert makespan(16, 0.5) - makespan(8, 0.5) == pytest.approx(8 * (1 + 2 + 0.5))
    assert makespan(16, 0.0) - makespan(8, 0.0) == pytest.approx(8 * (1 + 2))


def test_deepspeed_waits_for_the_transfers_of_its_own_two_boundaries() -> None:
    # Stage 1 of 4 receives over boundary 0 and sends over boundary 1.
    job = nvl(training={"framework": "deepspeed"}, parallelism={"sequence_parallel": False})
    before, after = Transfer(1e-3, 0.5e-3), Transfer(4e-3, 2e-3)
    transfers = (before, after, before, after)
    middle = blocking_p2p(job, transfers, 1)
    assert middle.forward_s == pytest.approx(1.5e-3 + 4e-3)
    assert middle.backward_s == pytest.approx(4e-3 + 2 * 2e-3 + 1e-3)
    eff = analyse(job).efficiency
    ops = analyse(job).ops
    assert (
        boundary_transfer(job, eff, ops, "nvlink").send_s
        < boundary_transfer(job, eff, ops, "network").send_s
    )


@pytest.mark.parametrize(
    "parallelism",
    [{}, {"virtual_stages": 2}, {"virtual_stages": 2, "pipeline_schedule": "dualpipev"}],
)
def test_verify_finds_the_same_tiers_on_the_plans_groups(parallelism: dict[str, Any]) -> None:
    job = nvl(parallelism=parallelism, model={"layers": 80})
    plan = json.loads(plan_json(compiled(job)))
    result = verify_text(json.dumps(plan))
    assert result.ok, render(result)
    # Every pipeline send listed on the group's tier instead: verify names the stage.
    for op in plan["communication"]["ops"]:
        if op["group"] == "pp":
            op["link"] = "network"
    result = verify_text(json.dumps(plan))
    assert not result.ok
    assert "pp send_recv fwd on network: the plan has" in render(result)


def test_explain_names_each_boundarys_tier_when_they_differ() -> None:
    from planc.outputs.explain import explain, render_text, to_json

    ex = explain(analyse(nvl()))
    assert (
        "  pipeline sends cross, by boundary (stage → stage): 0 → 1 nvlink, 1 → 2 network, "
        "2 → 3 nvlink, 3 → 0 network"
    ) in render_text(ex).splitlines()
    assert to_json(ex)["pipeline"]["boundary_tiers"] == ["nvlink", "network", "nvlink", "network"]
    # All on one tier (every stage in one domain under tp-cp-pp-dp): nothing more to say.
    alike = explain(analyse(nvl(parallelism={"order": "tp-cp-pp-dp"})))
    assert "pipeline sends cross" not in render_text(alike)
    assert "boundary_tiers" not in to_json(alike)["pipeline"]
