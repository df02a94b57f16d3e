"""The fabric: today's hardware fields as two tiers, a group's link the smallest tier holding it,
and a probe third tier (a leaf switch between NVLink and the network) carried through the
schedule, the wire budgets, the step estimate, plan.json and verify without touching planc.

Every tier below is derived by hand from the rank grid: ranks fill nodes in order, a tier of
span S joins blocks of S consecutive ranks, a rank's coordinate on an axis is
(rank // stride) mod degree with strides the prefix products of the order (fastest first).
"""

from __future__ import annotations

import dataclasses
import json
from itertools import permutations
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_comm_links import AXIS_SETS, brute_force

from planc.analysis import analyse, estimate_step
from planc.comm.schedule import expert_link, group_tier, link_class, schedule, wire_budget
from planc.compile.plan import plan_json
from planc.outputs.explain import explain, render_text, to_json
from planc.perf.inputs import comm_time_s
from planc.plannable import Plannable
from planc.report.comm import wire_table
from planc.spec.fabric import Fabric, Tier
from planc.verify import grid, render, traffic, verify_text
from planc.verify.plandata import PlanFormatError, read_plan
from planc.vocab import Axis, GroupKind

from conftest import ROOT, compiled, grid_overlay, job_of

PLAN_SCHEMA = json.loads((ROOT / "schemas" / "plan.schema.json").read_text("utf-8"))


def with_leaf(job: Plannable, nodes: int, bandwidth_gbs: float = 50.0) -> Plannable:
    """`job` on a fabric with a probe third tier: a leaf switch joining `nodes` whole nodes,
    between the NVLink domain and the network, priced by the network's efficiency entry."""
    nvlink, network = job.cluster.fabric.tiers
    leaf = Tier(
        name="leaf",
        span=nodes * job.cluster.gpus_per_node,
        bandwidth_gbs=bandwidth_gbs,
        latency_us=3.0,
        efficiency="network",
        label="leaf",
    )
    cluster = dataclasses.replace(job.cluster, fabric=Fabric((nvlink, leaf, network)))
    return dataclasses.replace(job, cluster=cluster)


# --- the default fabric -----------------------------------------------------------------------


def test_the_default_fabric_is_nvlink_then_the_network() -> None:
    # Llama 3 70B on 8 nodes of 8 H100 (the h100-sxm preset: NVLink 4 at 450 GB/s per direction,
    # 1 µs; a 400 Gb/s NIC per GPU, 50 GB/s, 5 µs).
    fabric = job_of(None, "llama3-70b-8x8.yaml").cluster.fabric
    assert fabric.names == ("nvlink", "network")
    nvlink, network = fabric
    assert (nvlink.span, nvlink.bandwidth_gbs, nvlink.latency_us) == (8, 450.0, 1.0)
    assert (network.span, network.bandwidth_gbs, network.latency_us) == (64, 50.0, 5.0)
    assert (nvlink.efficiency, network.efficiency) == ("nvlink", "network")
    assert (nvlink.oversubscription, network.oversubscription) == (1.0, 1.0)
    assert (nvlink.field, network.field) == ("hardware.intra_node", "hardware.inter_node")


def test_the_spec_s_link_settings_become_the_tiers() -> None:
    overlay = {
        "hardware": {
            "intra_node": {"bandwidth_gbs": 200, "latency_us": 2},
            "inter_node": {"bandwidth_gbs": 12.5, "latency_us": 8},
        }
    }
    nvlink, network = job_of(overlay).cluster.fabric
    assert (nvlink.bandwidth_gbs, nvlink.latency_us) == (200.0, 2.0)
    assert (network.bandwidth_gbs, network.latency_us) == (12.5, 8.0)
    assert network.span == 8  # one node of 8: the world


def test_an_nvl72_domain_spans_eighteen_trays() -> None:
    # Two GB200 NVL72 racks: 36 trays of 4 GPUs, an NVLink domain of 72 = 18 trays.
    fabric = job_of(None, "gpt3-175b-gb200-nvl72.yaml").cluster.fabric
    assert [(tier.name, tier.span) for tier in fabric] == [("nvlink", 72), ("network", 144)]


# --- a group's tier: the smallest holding it ------------------------------------------------------


def test_groups_on_an_nvl72_domain_larger_than_a_node() -> None:
    # t = 24, p = 3, d = 2, order tp-cp-dp-pp: strides tp 1, dp 24, pp 48.
    job = job_of(None, "gpt3-175b-gb200-nvl72.yaml")
    # TP: 24 consecutive ranks (6 trays), 72/24 = 3 groups per domain: NVLink across nodes.
    assert link_class(job, (Axis.TP,)) == "nvlink"
    # DP: ranks r and r + 24; the pair 60, 84 straddles the boundary at 72.
    assert link_class(job, (Axis.DP,)) == "network"
    # PP: r, r + 48, r + 96 spans 144 ranks, both racks.
    assert link_class(job, (Axis.PP,)) == "network"


def test_expert_groups_take_their_own_grid_s_tier() -> None:
    # Mixtral, order tp-cp-ep-dp-pp, ETP 1, EP 8, EDP 2, PP 4: expert strides ep 1, dp 8, pp 16.
    job = job_of(None, "mixtral-8x7b-64xh100.yaml")
    assert expert_link(job, Axis.EP) == "nvlink"  # 8 consecutive ranks: one node
    assert expert_link(job, Axis.DP) == "network"  # r, r + 8: two nodes
    # Order tp-cp-dp-ep-pp puts EDP first: EDP pairs r, r + 1 stay in a node, the EP groups
    # (stride 2, 8 members) spread over 16 ranks, two nodes.
    swapped = job_of({"parallelism": {"order": "tp-cp-dp-ep-pp"}}, "mixtral-8x7b-64xh100.yaml")
    assert expert_link(swapped, Axis.EP) == "network"
    assert expert_link(swapped, Axis.DP) == "nvlink"


def test_a_leaf_tier_takes_the_groups_it_holds() -> None:
    # GPT-3 175B on 128 DGX A100 (1,024 GPUs), t = 8, p = 8, d = 16, order tp-cp-dp-pp: strides
    # tp 1, dp 8, pp 128. A leaf of 32 nodes joins blocks of 256 ranks.
    job = with_leaf(job_of(None, "gpt3-175b-1024xa100.yaml"), nodes=32)
    # TP: 8 consecutive ranks, one node.
    assert link_class(job, (Axis.TP,)) == "nvlink"
    # DP: 16 members 8 apart span a block of 128 ranks; 256 is a multiple: the leaf.
    assert link_class(job, (Axis.DP,)) == "leaf"
    assert link_class(job, (Axis.DP, Axis.CP)) == "leaf"
    # PP: 8 members 128 apart span all 1,024 ranks: the network.
    assert link_class(job, (Axis.PP,)) == "network"
    # A leaf of 8 nodes (64 ranks) is too small for the DP groups' 128: they go to the network.
    small = with_leaf(job_of(None, "gpt3-175b-1024xa100.yaml"), nodes=8)
    assert group_tier(small, (Axis.DP,)) == small.cluster.fabric.outermost


def test_a_leaf_tier_holds_expert_data_parallel_groups() -> None:
    # Mixtral (expert strides ep 1, dp 8, pp 16): a leaf of 2 nodes (16 ranks) holds the EDP
    # pairs r, r + 8 and the dense DP groups (16 consecutive ranks, t = 1), not the pipeline.
    job = with_leaf(job_of(None, "mixtral-8x7b-64xh100.yaml"), nodes=2)
    assert expert_link(job, Axis.EP) == "nvlink"
    assert expert_link(job, Axis.DP) == "leaf"
    assert link_class(job, (Axis.DP, Axis.CP)) == "leaf"
    assert link_class(job, (Axis.PP,)) == "network"


@settings(max_examples=80, deadline=None)
@given(
    t=st.sampled_from([1, 2, 4]),
    c=st.sampled_from([1, 2]),
    d=st.sampled_from([1, 2, 4]),
    p=st.sampled_from([1, 2, 3]),
    order=st.sampled_from(list(permutations(("tp", "cp", "dp", "pp")))),
    per_node=st.sampled_from([1, 2, 4]),
    leaf_nodes=st.sampled_from([2, 3, 4]),
)
def test_the_tier_of_every_group_matches_brute_force(
    t: int, c: int, d: int, p: int, order: tuple[str, ...], per_node: int, leaf_nodes: int
) -> None:
    """With a leaf of `leaf_nodes` nodes between NVLink (one node) and the network, each group
    kind's tier is the first whose blocks hold all of its groups, found on the grid itself."""
    world = t * c * d * p
    if world % per_node:
        return
    overlay = grid_overlay(t, c, d, p, order, per_node)
    job = with_leaf(job_of(overlay), nodes=leaf_nodes)
    sizes = {"tp": t, "cp": c, "dp": d, "pp": p}
    for axes in AXIS_SETS:
        want = next(
            (tier.name for tier in job.cluster.fabric if brute_force(order, sizes, tier.span, axes)),
            "network",
        )
        assert link_class(job, tuple(Axis(a) for a in axes)) == want, axes


# --- the probe tier through the schedule, the budgets and the step -------------------------------


def test_wire_budgets_report_every_tier_and_move_the_leaf_s_bytes() -> None:
    two = job_of(None, "gpt3-175b-1024xa100.yaml")
    three = with_leaf(two, nodes=32)
    params = [1_000_000_000] * two.layout.p
    before = wire_budget(two, schedule(two, params))
    ops = schedule(three, params)
    after = wire_budget(three, ops)
    assert all(tuple(w.tiers) == ("nvlink", "leaf", "network") for w in after)
    # A stage is σ = 128 consecutive ranks (t = 8, d = 16) and a leaf joins 256: stages 2k and
    # 2k + 1 share one. Each stage sends m messages of [s/t, b, h]·2 bytes to its partner in its
    # leaf (even stages forward, odd ones backward) and receives as many from it.
    m, message = 1536 // 16, (2048 // 8) * 12288 * 2
    for old, new in zip(before, after, strict=True):
        # The DP traffic and those sends moved from the network to the leaf; nothing else moved.
        dp = sum(
            op.calls * op.bytes_sent
            for op in ops
            if op.stage == new.stage and op.group is GroupKind.DP_CP
        )
        assert dp > 0
        moved = dp + m * message
        assert new.tiers["leaf"].sent == new.tiers["leaf"].received == moved
        assert new.tiers["nvlink"] == old.tiers["nvlink"]
        assert new.tiers["network"].sent == old.tiers["network"].sent - moved
        assert new.tiers["network"].received == old.tiers["network"].received - moved


def test_a_call_on_a_tier_is_priced_at_its_bandwidth() -> None:
    # T = steps·α + wire/(β·e): doubling the leaf's β halves the bandwidth term of a DP call.
    base = job_of(None, "gpt3-175b-1024xa100.yaml")
    slow, fast = with_leaf(base, 32, 50.0), with_leaf(base, 32, 100.0)
    eff = analyse(slow).efficiency
    n, size = 16, 400_000_000
    alpha = 2 * (n - 1) * eff.network.latency_us * 1e-6  # ring all-reduce: 2(n − 1) steps
    t_slow = comm_time_s(slow, eff, "all_reduce", n, size, "leaf")
    t_fast = comm_time_s(fast, eff, "all_reduce", n, size, "leaf")
    assert t_fast - alpha == pytest.approx((t_slow - alpha) / 2, rel=1e-12)
    # Priced with the network's entry at the network's 25 GB/s (a100 preset), the leaf at
    # 50 GB/s takes half the bandwidth time of the same call on the network.
    t_network = comm_time_s(slow, eff, "all_reduce", n, size, "network")
    assert t_slow - alpha == pytest.approx((t_network - alpha) / 2, rel=1e-12)


def test_a_leaf_like_the_network_changes_no_time() -> None:
    # A leaf with the network's bandwidth and efficiency entry prices every op as before.
    base = job_of(None, "llama3-70b-8x8.yaml")
    network = base.cluster.fabric.outermost.bandwidth_gbs
    two, three = analyse(base), analyse(with_leaf(base, 4, network))
    assert estimate_step(three).step_time_s == pytest.approx(estimate_step(two).step_time_s, rel=1e-12)
    assert sorted(two.op_seconds.values()) == pytest.approx(sorted(three.op_seconds.values()), rel=1e-12)


# --- the probe tier in plan.json and verify ------------------------------------------------------


@pytest.fixture(scope="module")
def leaf_plan() -> dict[str, Any]:
    """Llama 3 70B on 8 nodes of 8 (t = 8, p = 4, d = 2; strides tp 1, dp 8, pp 16) with a leaf
    of 4 nodes (32 ranks): TP on NVLink, the DP pairs r, r + 8 on the leaf, the pipeline groups
    r, r + 16, r + 32, r + 48 on the network."""
    job = with_leaf(job_of(None, "llama3-70b-8x8.yaml"), nodes=4)
    data: dict[str, Any] = json.loads(plan_json(compiled(job)))
    return data


def test_plan_json_lists_the_tiers_and_keys_wire_bytes_by_them(leaf_plan: dict[str, Any]) -> None:
    jsonschema.validate(leaf_plan, PLAN_SCHEMA)
    plan = leaf_plan
    fabric = plan["cluster"]["fabric"]
    assert [(t["name"], t["span"]) for t in fabric] == [("nvlink", 8), ("leaf", 32), ("network", 64)]
    links = {(op["group"], op["link"]) for op in plan["communication"]["ops"]}
    # A stage is 16 ranks and a leaf 32: stages 0 and 1, 2 and 3 share a leaf, so only the
    # sends across boundary 1 take the network.
    assert links == {("tp", "nvlink"), ("dp_cp", "leaf"), ("pp", "leaf"), ("pp", "network")}
    for rank in plan["ranks"]:
        assert list(rank["wire"]) == ["nvlink", "leaf", "network"]
    # Every byte sent on a tier is received on it.
    for tier in ("nvlink", "leaf", "network"):
        sent = sum(r["wire"][tier]["sent"] for r in plan["ranks"])
        received = sum(r["wire"][tier]["received"] for r in plan["ranks"])
        assert sent == received > 0


def test_verify_passes_the_three_tier_plan(leaf_plan: dict[str, Any]) -> None:
    result = verify_text(json.dumps(leaf_plan))
    assert result.ok, render(result)
    assert set(CHECKS) <= {check.name for check in result.checks}


# The verify checks a fabric reaches, by the names `planc verify` prints (the ring simulations,
# which the fabric does not change, are left out to keep these tests quick).
CHECKS = {"world and degrees": grid.world, "link tiers": traffic.links, "wire bytes per rank": traffic.wire}


def _problems(plan: dict[str, Any]) -> list[tuple[str, str]]:
    data = read_plan(json.dumps(plan))
    return [(name, message) for name, check in CHECKS.items() for message in check(data)]


def test_verify_catches_an_op_moved_to_another_tier(leaf_plan: dict[str, Any]) -> None:
    plan = json.loads(json.dumps(leaf_plan))
    op = next(o for o in plan["communication"]["ops"] if o["group"] == "dp_cp")
    op["link"] = "network"
    assert (
        "link tiers",
        f"stage {op['stage']} dp_cp {op['op']}: link network, but its groups are on leaf",
    ) in _problems(plan)


def test_verify_catches_a_tier_too_small_for_its_groups(leaf_plan: dict[str, Any]) -> None:
    # A leaf of 8 ranks is one node: the DP pairs r, r + 8 are then on the network, not the leaf
    # the ops and the wire bytes say.
    plan = json.loads(json.dumps(leaf_plan))
    plan["cluster"]["fabric"][1]["span"] = 8
    found = _problems(plan)
    checks = {check for check, _ in found}
    assert {"link tiers", "wire bytes per rank"} <= checks
    assert any("link leaf, but its groups are on network" in message for _, message in found)


def test_verify_catches_wire_bytes_on_the_wrong_tier(leaf_plan: dict[str, Any]) -> None:
    plan = json.loads(json.dumps(leaf_plan))
    wire = plan["ranks"][0]["wire"]
    moved = wire["leaf"]["sent"]
    wire["leaf"]["sent"], wire["network"]["sent"] = 0, wire["network"]["sent"] + moved
    assert any(check == "wire bytes per rank" for check, _ in _problems(plan))


def test_verify_refuses_a_fabric_that_does_not_hold_the_world(leaf_plan: dict[str, Any]) -> None:
    plan = json.loads(json.dumps(leaf_plan))
    plan["cluster"]["fabric"][2]["span"] = 32
    assert (
        "world and degrees",
        "cluster.fabric's outermost tier network spans 32 GPUs, less than the world of 64",
    ) in _problems(plan)


def test_verify_refuses_another_format_version(leaf_plan: dict[str, Any]) -> None:
    plan = json.loads(json.dumps(leaf_plan))
    plan["format_version"] = 1
    with pytest.raises(PlanFormatError, match="format_version 1, but this planc verify reads version 2"):
        verify_text(json.dumps(plan))


# --- the probe tier in the outputs ---------------------------------------------------------------


def test_explain_and_the_report_show_every_tier() -> None:
    job = with_leaf(job_of(None, "llama3-70b-8x8.yaml"), nodes=4)
    analysis = analyse(job)
    text = render_text(explain(analysis))
    lines = text.splitlines()
    traffic = lines[lines.index("traffic per step per rank (GB = 10^9 bytes; sent, received):") + 1]
    # "  stage   0: NVLink x GB / y GB   leaf x GB / y GB   network x GB / y GB"
    names = [word for word in traffic.split()[2:] if word.isalpha() and word != "GB"]
    assert names == ["NVLink", "leaf", "network"]
    wire = to_json(explain(analysis))["wire_bytes"][0]
    assert list(wire) == [
        "stage",
        "nvlink_sent",
        "nvlink_received",
        "leaf_sent",
        "leaf_received",
        "network_sent",
        "network_received",
    ]
    table = wire_table(analysis)
    assert table.count("<th>") == 1 + 2 * 3
    assert "<th>leaf sent</th><th>leaf received</th>" in table
