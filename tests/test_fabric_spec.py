"""hardware.fabric: the tiers above the NVLink domain, innermost first, or a fabric preset; each
tier's span, bandwidth, latency, oversubscription and rail alignment as the spec or the
preset's source says; bad fabrics are located findings.

Spans below are derived by hand: a tier of N nodes of G GPUs joins blocks of N·G consecutive
ranks; the tiers stop at the first whose block holds the whole world, which then spans it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from planc.presets import FABRIC_NAMES, fabric_preset
from planc.spec.fabric import Fabric

from conftest import ROOT, check_overlay, check_text, resolved_of, spec_text


def fabric_of(overlay: dict[str, Any], base: str = "llama3-70b-8x8.yaml") -> Fabric:
    return resolved_of(overlay, base).cluster.fabric


def shape(fabric: Fabric) -> list[tuple[str, int, float, float, bool]]:
    return [(t.name, t.span, t.bandwidth_gbs, t.oversubscription, t.rail_aligned) for t in fabric]


def test_a_spec_without_a_fabric_keeps_its_two_tiers() -> None:
    fabric = fabric_of({})
    assert fabric.names == ("nvlink", "network")
    assert not fabric.pxn
    assert all(not t.rail_aligned for t in fabric)


def test_llama3_s_pods_on_16384_gpus() -> None:
    # 2,048 nodes of 8 H100 (16,384 GPUs): a rack of 2 servers (16 GPUs), a pod of 192 racks
    # (384 nodes, 3,072 GPUs), and the aggregation layer over all 8 pods... 16,384 / 3,072 is
    # not whole, but the aggregation tier joins the world whatever its size.
    fabric = fabric_of({"hardware": {"nodes": 2048, "fabric": "llama3-roce", "hosts": []}})
    assert shape(fabric) == [
        ("nvlink", 8, 450.0, 1.0, False),
        ("rack", 16, 50.0, 1.0, False),
        ("pod", 3072, 50.0, 1.0, False),
        ("aggregation", 16384, 50.0, 7.0, False),
    ]
    assert fabric.tier("aggregation").field == "hardware.fabric"


def test_a_cluster_inside_one_pod_stops_at_the_pod() -> None:
    # 64 nodes (512 GPUs) fit inside one pod of 3,072: the pod joins the world, and the 1:7
    # aggregation layer above it is not on any path.
    fabric = fabric_of({"hardware": {"nodes": 64, "fabric": "llama3-roce", "hosts": []}})
    assert [(t.name, t.span) for t in fabric] == [("nvlink", 8), ("rack", 16), ("pod", 512)]


def test_a_superpod_of_b200_scalable_units() -> None:
    # 512 DGX B200 (4,096 GPUs, 16 SUs): SU leaf of 32 nodes (256 GPUs, rail-aligned), spine
    # over 8 SUs (256 nodes, 2,048 GPUs), the core over everything.
    fabric = fabric_of(
        {"hardware": {"gpu": "b200", "nodes": 512, "fabric": "dgx-superpod-b200", "hosts": []}}
    )
    assert [(t.name, t.span, t.rail_aligned) for t in fabric] == [
        ("nvlink", 8, False),
        ("leaf", 256, True),
        ("spine", 2048, False),
        ("core", 4096, False),
    ]


def test_gb200_nvl72_scalable_units_of_eight_racks() -> None:
    # 2 SUs of 8 NVL72 racks: 2·8·18 = 288 trays of 4 GPUs; NVLink 72, the SU 8·72 = 576.
    fabric = fabric_of(
        {
            "hardware": {
                "gpu": "gb200-nvl72",
                "nodes": 288,
                "gpus_per_node": 4,
                "nvlink_domain": 72,
                "fabric": "gb200-nvl72-superpod",
                "hosts": [],
            },
            "parallelism": {"tensor": 4},
        }
    )
    assert [(t.name, t.span) for t in fabric] == [("nvlink", 72), ("su", 576), ("spine", 1152)]


def test_written_tiers_take_the_network_s_numbers_unless_they_give_their_own() -> None:
    overlay = {
        "hardware": {
            "fabric": [
                {"name": "leaf", "nodes": 2, "rail_aligned": True},
                {"name": "spine", "bandwidth_gbs": 25, "latency_us": 8, "oversubscription": 2},
            ],
            "pxn": True,
        }
    }
    fabric = fabric_of(overlay)
    assert fabric.pxn
    leaf, spine = fabric.tier("leaf"), fabric.tier("spine")
    # inter_node of the example: 50 GB/s, 5 µs.
    assert (leaf.span, leaf.bandwidth_gbs, leaf.latency_us, leaf.oversubscription) == (
        16,
        50.0,
        5.0,
        1.0,
    )
    assert (spine.span, spine.bandwidth_gbs, spine.latency_us, spine.oversubscription) == (
        64,
        25.0,
        8.0,
        2.0,
    )
    assert (leaf.efficiency, spine.efficiency) == ("network", "network")
    assert (leaf.field, spine.field) == ("hardware.fabric[0]", "hardware.fabric[1]")


def test_every_fabric_preset_is_sourced_and_well_formed() -> None:
    data = json.loads((ROOT / "planc" / "presets" / "fabrics.json").read_text("utf-8"))
    assert tuple(k for k in data if not k.startswith("_")) == FABRIC_NAMES
    for name in FABRIC_NAMES:
        preset = fabric_preset(name)
        assert len(preset["source"]) > 80, name
        tiers = preset["tiers"]
        assert all("nodes" in t for t in tiers[:-1]) and "nodes" not in tiers[-1], name
        # Every preset loads on a cluster large enough to reach its last tier.
        nodes = 1
        for tier in tiers[:-1]:
            nodes = max(nodes, tier["nodes"])
        assert fabric_of({"hardware": {"nodes": 2 * nodes, "fabric": name, "hosts": []}})


# --- bad fabrics are located findings --------------------------------------------------------

BAD = [
    (
        [{"name": "leaf"}, {"name": "spine"}],
        "PLC109",
        "hardware.fabric[0] (leaf) gives no nodes",
    ),
    (
        [{"name": "leaf", "nodes": 2}, {"name": "spine", "nodes": 4}],
        "PLC110",
        "hardware.fabric[1] (spine), the last tier, joins 32 GPUs, fewer than the world of 64",
    ),
    (
        [{"name": "leaf", "nodes": 3}, {"name": "spine", "nodes": 4}, {"name": "core"}],
        "PLC110",
        "hardware.fabric[1] (spine) joins 32 GPUs, not a whole number of the leaf tier's blocks of 24",
    ),
    (
        [{"name": "leaf", "nodes": 2}, {"name": "leaf"}],
        "PLC110",
        "hardware.fabric[1]: a second tier called leaf",
    ),
    (
        [{"name": "nvlink", "nodes": 2}, {"name": "spine"}],
        "PLC110",
        "hardware.fabric[0]: a second tier called nvlink",
    ),
]


@pytest.mark.parametrize(("tiers", "rule", "message"), BAD)
def test_a_bad_fabric_is_a_located_finding(
    tiers: list[dict[str, Any]], rule: str, message: str
) -> None:
    result = check_overlay({"hardware": {"fabric": tiers}}, "llama3-70b-8x8.yaml")
    found = [f for f in result.findings if f.rule == rule]
    assert any(message in f.message for f in found), [f.message for f in result.findings]


def test_a_bad_tier_is_found_at_its_nodes() -> None:
    # A leaf of 3 nodes (24 GPUs) under a spine of 4 nodes (32 GPUs): 32 is no multiple of 24.
    tiers = [{"name": "leaf", "nodes": 3}, {"name": "spine", "nodes": 4}, {"name": "core"}]
    text = spec_text({"hardware": {"fabric": tiers}}, "llama3-70b-8x8.yaml")
    (finding,) = [f for f in check_text(text).findings if f.rule == "PLC110"]
    assert finding.field == "hardware.fabric[1].nodes"
    assert finding.fix == "make its nodes a multiple of leaf's block"
    lines = text.splitlines()
    spine = lines.index("  - name: spine")
    assert (finding.line, lines[finding.line - 1].strip()) == (spine + 2, "nodes: 4")


def test_a_tier_name_must_be_a_word_and_k_at_least_one() -> None:
    assert "PLC110" in {
        f.rule
        for f in check_overlay(
            {"hardware": {"fabric": [{"name": "Leaf Switch", "nodes": 2}, {"name": "spine"}]}},
            "llama3-70b-8x8.yaml",
        ).findings
    }
    assert "PLC110" in {
        f.rule
        for f in check_overlay(
            {"hardware": {"fabric": [{"name": "spine", "oversubscription": 0.5}]}},
            "llama3-70b-8x8.yaml",
        ).findings
    }
    unknown = check_overlay({"hardware": {"fabric": "no-such-fabric"}}, "llama3-70b-8x8.yaml")
    assert {f.field for f in unknown.findings} == {"hardware.fabric"}, unknown.findings
