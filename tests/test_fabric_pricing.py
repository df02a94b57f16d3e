"""Collectives priced per tier: a flat ring at the slowest tier it crosses after
oversubscription (B/k), the hierarchical all-reduce it could run instead, and rail alignment
moving a group that is not rail-aligned off a rail-aligned leaf (unless PXN), in the planner
and in verify.

Every expected number is derived here by hand from the formulas' sources: nccl-tests
PERFORMANCE.md (all-reduce bus factor 2(n−1)/n, 2(n−1) ring steps) and landscape-2026-12-01
§3.2 (B/k through an oversubscribed tier; the hierarchical sum over levels of the shard left).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from planc.analysis import analyse
from planc.comm.schedule import link_class
from planc.comm.tiers import Level, hierarchical_all_reduce_s, ring_all_reduce_s, ring_bandwidth_gbs
from planc.compile.plan import plan_json
from planc.perf.inputs import comm_time_s
from planc.plannable import Plannable, plannable
from planc.verify import traffic, verify_text
from planc.verify.plandata import read_plan
from planc.vocab import Axis

from conftest import compiled, job_of

GB = 1e9

# Llama 3 405B on 8 of Meta's pods (3,072 nodes, 24,576 H100), TP 8, PP 16, DP 192 in Meta's
# order [TP, CP, PP, DP] (Llama 3 §3.3.2), 126 layers as 7 + 14·8 + 7.
LLAMA3 = {
    "model": {"preset": "llama3-405b"},
    "hardware": {"nodes": 3072, "fabric": "llama3-roce", "hosts": []},
    "parallelism": {
        "tensor": 8,
        "pipeline": 16,
        "data": 192,
        "order": "tp-cp-pp-dp",
        "virtual_stages": 1,
        "stage_layers": [7] + [8] * 14 + [7],
    },
    "training": {"global_batch": 1536, "seq_len": 8192},
}


@pytest.fixture(scope="module")
def llama3() -> Plannable:
    return job_of(LLAMA3, "llama3-70b-8x8.yaml")


def test_llama3_s_groups_take_the_tiers_meta_describes(llama3: Plannable) -> None:
    # TP: 8 consecutive ranks, one server. PP: stride 8, 16 stages = 128 ranks, inside a pod of
    # 3,072. DP: stride 128, 192 members = every rank: across the 8 pods, the 1:7 aggregation.
    assert [(t.name, t.span) for t in llama3.cluster.fabric] == [
        ("nvlink", 8),
        ("rack", 16),
        ("pod", 3072),
        ("aggregation", 24576),
    ]
    assert link_class(llama3, (Axis.TP,)) == "nvlink"
    assert link_class(llama3, (Axis.PP,)) == "pod"
    assert link_class(llama3, (Axis.DP,)) == "aggregation"


def test_a_flat_ring_across_pods_runs_at_the_oversubscribed_rate(llama3: Plannable) -> None:
    # The tiers a ring on `aggregation` crosses: rack 50, pod 50, aggregation 50/7 GB/s.
    assert ring_bandwidth_gbs(llama3.cluster.fabric, "aggregation") == pytest.approx(50 / 7)
    assert ring_bandwidth_gbs(llama3.cluster.fabric, "pod") == 50.0
    assert ring_bandwidth_gbs(llama3.cluster.fabric, "nvlink") == 450.0
    eff = analyse(llama3).efficiency
    e, alpha = eff.network.of("all_reduce"), eff.network.latency_us * 1e-6
    n, size = 192, 1_000_000_000
    wire = math.ceil(2 * (n - 1) * size / n)  # whole bytes, as NCCL's chunks round up
    flat = comm_time_s(llama3, eff, "all_reduce", n, size, "aggregation")
    assert flat == pytest.approx(2 * (n - 1) * alpha + wire / (50 / 7 * GB * e), rel=1e-12)
    # The same call inside one pod: 7 times the bandwidth term.
    pod = comm_time_s(llama3, eff, "all_reduce", n, size, "pod")
    assert flat - 2 * (n - 1) * alpha == pytest.approx(7 * (pod - 2 * (n - 1) * alpha), rel=1e-12)


def test_a_hierarchical_all_reduce_runs_near_the_pod_rate() -> None:
    # M = 1 GB over DP 192 = 24 members in each of 8 pods (docs/fabric.md's example), e = 1,
    # α = 0 for the bandwidth terms:
    #   flat ring through the 1:7 layer: 2·191/192 · 1 GB / 7.142857 GB/s = 278.5 ms;
    #   the same ring at the pod rate:    2·191/192 · 1 GB / 50 GB/s      =  39.8 ms;
    #   hierarchical: 2·23/24 · 1 GB / 50 GB/s = 38.33 ms inside the pod, then
    #                 2·7/8 · (1/24) GB / 7.142857 GB/s = 10.21 ms across pods: 48.54 ms.
    size = 1_000_000_000
    flat = ring_all_reduce_s(192, size, 50 / 7, 0.0)
    at_pod_rate = ring_all_reduce_s(192, size, 50.0, 0.0)
    hier = hierarchical_all_reduce_s((Level(24, 50.0, 0.0), Level(8, 50 / 7, 0.0)), size)
    assert flat == pytest.approx(0.278542, rel=1e-5)
    assert at_pod_rate == pytest.approx(0.0397917, rel=1e-5)
    assert hier == pytest.approx(0.0383333 + 0.0102083, rel=1e-5)
    assert hier < 1.25 * at_pod_rate < flat / 5
    # Latency: 2(n_i − 1) steps per level, 2·23 + 2·7 = 60 against the flat ring's 2·191 = 382.
    assert hierarchical_all_reduce_s(
        (Level(24, 1e12, 1e-6), Level(8, 1e12, 1e-6)), 0
    ) == pytest.approx(60e-6)
    assert ring_all_reduce_s(192, 0, 1e12, 1e-6) == pytest.approx(382e-6)


def test_landscape_s_hierarchical_example() -> None:
    # landscape §3.2: M = 1 GB over 1,024 GPUs, 8 on NVLink at 370 GB/s × 128 nodes at 50 GB/s:
    # flat ring 2·1023/1024 / 50 = 40 ms; hierarchical 2·7/8 / 370 + 2·127/128 · (1/8) / 50 =
    # 4.73 + 4.96 = 9.7 ms ("10 ms").
    size = 1_000_000_000
    assert ring_all_reduce_s(1024, size, 50.0, 0.0) == pytest.approx(0.03996, rel=1e-3)
    hier = hierarchical_all_reduce_s((Level(8, 370.0, 0.0), Level(128, 50.0, 0.0)), size)
    assert hier == pytest.approx(0.004730 + 0.004961, rel=1e-3)


def test_two_tier_specs_price_every_op_as_before() -> None:
    # The default fabric's ring bandwidth is its tier's own: NVLink 450, network 50 GB/s.
    job = job_of(None, "llama3-70b-8x8.yaml")
    assert ring_bandwidth_gbs(job.cluster.fabric, "nvlink") == 450.0
    assert ring_bandwidth_gbs(job.cluster.fabric, "network") == 50.0


# --- rails -----------------------------------------------------------------------------------


# GPT-3 175B on 64 DGX H100 (512 GPUs, 2 SUs of 32 nodes on rail-aligned leaves), PP 8.
def superpod(tensor: int, pxn: bool = False) -> Plannable:
    return job_of(
        {
            "model": {"preset": "gpt3-175b"},
            "hardware": {
                "gpu": "h100-sxm",
                "nodes": 64,
                "fabric": "dgx-superpod-h100",
                "pxn": pxn,
                "hosts": [],
            },
            "parallelism": {
                "tensor": tensor,
                "pipeline": 8,
                "data": 64 // tensor,
                "order": "tp-cp-dp-pp",
            },
            "training": {"global_batch": 512, "seq_len": 2048},
        },
        "llama3-70b-8x8.yaml",
    )


def test_a_rail_aligned_data_parallel_group_stays_on_the_leaf() -> None:
    # t = 8: DP stride 8, 8 members = ranks r, r + 8, …, r + 56: 8 nodes, local index r mod 8
    # on each: rail-aligned, inside one SU of 256 GPUs: the leaf.
    assert link_class(superpod(8), (Axis.DP,)) == "leaf"


def test_a_data_parallel_group_off_the_rails_pays_the_spine() -> None:
    # t = 4: DP stride 4, 16 members = r, r + 4, …, r + 60 over 8 nodes with local indices
    # r mod 8 and r mod 8 + 4: members on different nodes differ in rail, so a rail leaf cannot
    # carry the ring: the spine.
    assert link_class(superpod(4), (Axis.DP,)) == "spine"
    # With PXN, NCCL moves the cross-rail hop onto NVLink first: the leaf again.
    assert link_class(superpod(4, pxn=True), (Axis.DP,)) == "leaf"


def test_pipeline_groups_across_scalable_units_take_the_spine() -> None:
    # PP stride 64 (t·d), 8 stages = 512 ranks, both SUs: the spine, rail-aligned or not.
    assert link_class(superpod(8), (Axis.PP,)) == "spine"


@pytest.fixture(scope="module")
def rail_plan() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(plan_json(compiled(superpod(4))))
    return data


def test_plan_json_marks_the_rails_and_verify_agrees(rail_plan: dict[str, Any]) -> None:
    tiers = rail_plan["cluster"]["fabric"]
    assert [t.get("rail_aligned", False) for t in tiers] == [False, True, False]
    assert "pxn" not in rail_plan["cluster"]
    links = {(op["group"], op["link"]) for op in rail_plan["communication"]["ops"]}
    assert ("dp_cp", "spine") in links
    result = verify_text(json.dumps(rail_plan))
    assert result.ok


def test_verify_catches_a_group_s_tier_altered(rail_plan: dict[str, Any]) -> None:
    plan = json.loads(json.dumps(rail_plan))
    op = next(o for o in plan["communication"]["ops"] if o["group"] == "dp_cp")
    op["link"] = "leaf"
    problems = list(traffic.links(read_plan(json.dumps(plan))))
    assert (
        f"stage {op['stage']} dp_cp {op['op']}: link leaf, but its groups are on spine" in problems
    )


def test_verify_reads_pxn_and_the_rails(rail_plan: dict[str, Any]) -> None:
    # Saying pxn in the plan moves the DP groups back onto the leaf: the ops that say spine are
    # then caught.
    plan = json.loads(json.dumps(rail_plan))
    plan["cluster"]["pxn"] = True
    problems = list(traffic.links(read_plan(json.dumps(plan))))
    assert any("link spine, but its groups are on leaf" in p for p in problems)
    # And a tier that loses its rails takes them too.
    plan = json.loads(json.dumps(rail_plan))
    del plan["cluster"]["fabric"][1]["rail_aligned"]
    problems = list(traffic.links(read_plan(json.dumps(plan))))
    assert any("link spine, but its groups are on leaf" in p for p in problems)


# --- explain and the report show the tiers and the groups on them -------------------------------


def test_explain_lists_the_tiers_and_the_groups_on_each() -> None:
    from planc.outputs.explain import explain, render_text, to_json
    from planc.report.comm import link_table

    # Llama 3 405B on Meta's pods: TP on NVLink, PP in the pod, DP through the 1:7 layer.
    job = job_of(LLAMA3, "llama3-70b-8x8.yaml")
    ex = explain(analyse(job))
    lines = render_text(ex).splitlines()
    start = lines.index(
        "fabric (innermost first; each group kind runs on the first tier whose blocks hold it, "
        "a pipeline send on its pair of ranks'):"
    )
    rows = [line.split() for line in lines[start + 1 : start + 5]]
    assert [(r[0], r[1]) for r in rows] == [
        ("NVLink", "8"),
        ("rack", "16"),
        ("pod", "3,072"),
        ("aggregation", "24,576"),
    ]
    # The ring bandwidth after oversubscription: 50 / 7 = 7.14 GB/s on the aggregation layer.
    assert rows[3][-3:] == ["7.14", "1:7", "dp_cp"]
    # A stage is 8 consecutive ranks and a rack 16: the sends between stages 2k and 2k + 1 stay
    # in the rack, the others cross the pod.
    assert rows[2][-1] == "pp" and rows[0][-1] == "tp" and rows[1][-1] == "pp"
    fabric = to_json(ex)["fabric"]
    assert [t["groups"] for t in fabric] == [["tp"], ["pp"], ["pp"], ["dp_cp"]]
    assert fabric[3]["ring_bandwidth_gbs"] == pytest.approx(50 / 7)
    table = link_table(analyse(job), 0)
    assert "<th>a ring on it (B/k)</th><th>groups</th>" in table
    assert "<td class='n'>7.14 GB/s</td><td>dp_cp</td>" in table


def test_a_plain_two_tier_spec_shows_no_fabric_section() -> None:
    from planc.outputs.explain import explain, render_text, to_json
    from planc.report.comm import link_table

    analysis = analyse(job_of(None, "llama3-70b-8x8.yaml"))
    ex = explain(analysis)
    assert "fabric (" not in render_text(ex)
    assert "fabric" not in to_json(ex)
    assert "groups</th>" not in link_table(analysis, 0)


def test_the_llama3_example_s_data_parallel_buckets_cross_the_aggregation_layer() -> None:
    # examples/llama3-405b-16384xh100.yaml: DP 128 (stride 128) across 5⅓ pods; a 256 MB
    # gradient bucket's reduce-scatter sends 127/128 of it per rank. With the h100-sxm network
    # entry (e = 0.9, α = 5 µs per step): 253,999,999.99… → 254,000,000 bytes /
    # (50/7 · 0.9 GB/s) + 127 · 5 µs = 40.146 ms on the aggregation layer; at the pod rate
    # 254,000,000 / 45 GB/s + 0.635 ms = 6.279 ms.
    from planc.spec.load import load_path

    from conftest import EXAMPLES

    loaded = load_path(str(EXAMPLES / "llama3-405b-16384xh100.yaml"))
    assert loaded.job is not None
    plan = plannable(loaded.job)
    assert not isinstance(plan, tuple)
    eff = analyse(plan).efficiency
    assert (eff.network.of("reduce_scatter"), eff.network.latency_us) == (0.9, 5.0)
    bucket = 256_000_000
    wire = math.ceil(127 * bucket / 128)
    agg = comm_time_s(plan, eff, "reduce_scatter", 128, bucket, "aggregation")
    pod = comm_time_s(plan, eff, "reduce_scatter", 128, bucket, "pod")
    assert agg == pytest.approx(wire / (50 / 7 * 0.9 * GB) + 127 * 5e-6, rel=1e-12)
    assert (round(agg * 1e3, 3), round(pod * 1e3, 3)) == (40.146, 6.279)
