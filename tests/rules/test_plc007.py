"""PLC007 memory: the heaviest rank's bytes stay under HBM × (1 − memory_headroom).

Hand numbers used below (GiB = 2^30 bytes):
- H100 SXM reports 81,559 MiB (79.65 GiB); with memory_headroom 0.1, 79.65 × 0.9 = 71.68 GiB are usable.
- llama3-8b has Ψ = 8,030,261,248 parameters (vocab 128256 = 256 × 501 needs no padding at
  tensor 2). At tensor 2 a rank holds Ψ/2 = 4,015,130,624 of them (plus a few replicated norm
  weights); fp32 master weights are 4 bytes each: 16,060,522,496 B = 14.96 GiB unsharded.
- llama3-70b has Ψ = 70,553,706,496; at tensor 8 a rank holds ≥ Ψ/8. Mixed-precision Adam keeps
  16 bytes per parameter (2 weights + 2 gradients + 4 master + 4 m + 4 v), so without ZeRO the
  static state alone is ≥ 16 × Ψ/8 = 141,107,412,992 B = 131.42 GiB.
"""

from __future__ import annotations

from typing import Any

import yaml

from planc.findings import FileResult, Finding, Severity
from planc.memory import budget

from conftest import (
    EXAMPLES,
    check_overlay,
    check_text,
    merge,
    plannable_of,
    resolved_of,
    spec_text,
    value_position,
)

GIB = 2**30


def findings_of(result: FileResult, rule: str = "PLC007") -> list[Finding]:
    return [f for f in result.findings if f.rule == rule]


def peak_bytes(overlay: dict[str, Any], base: str = "llama3-8b-1node.yaml") -> int:
    """The heaviest rank's total bytes, from the memory model (planc.memory.budget)."""
    return budget(plannable_of(resolved_of(overlay, base))).peak.memory.total


def test_the_shipped_single_node_example_fits() -> None:
    assert findings_of(check_overlay(None)) == []


def test_70b_on_one_node_without_zero_does_not_fit() -> None:
    # tensor 8, pipeline 1, data 1, ZeRO 0 on one 8-GPU node: ≥ 131.42 GiB of static state.
    overlay = {
        "hardware": {"nodes": 1, "hosts": "gpu-{000..000}"},
        "parallelism": {"pipeline": 1, "data": 1, "zero_stage": 0},
    }
    text = spec_text(overlay, "llama3-70b-8x8.yaml")
    (finding,) = findings_of(check_text(text))
    assert finding.field == "training.micro_batch"
    assert finding.severity is Severity.ERROR
    assert peak_bytes(overlay, "llama3-70b-8x8.yaml") >= 16 * 70_553_706_496 // 8
    # An H100 SXM reports 81,559 MiB (79.65 GiB); 90 % of it is 71.68 GiB.
    assert "71.68 GiB usable" in finding.message and "79.65 GiB HBM" in finding.message
    assert "stage 0" in finding.message and "rank 0" in finding.message
    # The three largest terms are named; fp32 master weights are Ψ/8 × 4 B = 32.86 GiB.
    assert "fp32 master weights 32.86 GiB" in finding.message
    assert "zero_stage" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "  micro_batch: 1")


def test_zero_1_is_what_makes_the_8b_example_fit() -> None:
    # Without ZeRO the unsharded fp32 master weights (14.96 GiB), Adam m and v (14.96 GiB each)
    # push the rank over 72 GiB; the example's zero_stage 1 shards those over data 4.
    (finding,) = findings_of(check_overlay({"parallelism": {"zero_stage": 0}}))
    assert "fp32 master weights 14.96 GiB" in finding.message
    assert finding.severity is Severity.ERROR and finding.field == "training.micro_batch"
    assert "zero_stage" in finding.fix
    assert findings_of(check_overlay({"parallelism": {"zero_stage": 1}})) == []


def test_headroom_close_to_one_leaves_less_than_the_reserve() -> None:
    # memory_headroom 0.99: 80 × 0.01 = 0.80 GiB usable, less than the 1.5 GiB CUDA reserve.
    (finding,) = findings_of(check_overlay({"rules": {"memory_headroom": 0.99}}))
    assert "0.80 GiB usable" in finding.message
    assert "1 − 0.99" in finding.message


def test_the_reserve_adds_exactly_its_size() -> None:
    # Same spec, reserve 1.5 GiB vs 80 GiB: the peaks differ by 80 − 1.5 = 78.50 GiB, and in the
    # finding (headroom 0.99 makes it fail) the 80 GiB reserve is the largest term.
    small = {"rules": {"memory_headroom": 0.99}}
    big = merge(small, {"hardware": {"reserve_gib": 80}})
    assert peak_bytes(big) - peak_bytes(small) == 78.5 * GIB
    (finding,) = findings_of(check_overlay(big))
    assert "largest terms: reserve 80.00 GiB" in finding.message


def test_ignoring_plc007_silences_it() -> None:
    overlay = {"parallelism": {"zero_stage": 0}, "rules": {"ignore": ["PLC007"]}}
    assert findings_of(check_overlay(overlay)) == []


FIX_FIELDS = {
    "micro_batch": ("training", "micro_batch"),
    "recompute": ("training", "recompute"),
    "sequence_parallel": ("parallelism", "sequence_parallel"),
    "zero_stage": ("parallelism", "zero_stage"),
}


def listed_fixes(fix: str) -> list[tuple[str, str]]:
    """(field, value) pairs of the fixes PLC007 lists, e.g. 'micro_batch: 2 (67.70 GiB)'."""
    _, _, listed = fix.partition("(peak after it): ")
    return [tuple(part.split(" (")[0].split(": ")) for part in listed.split("; ")]  # type: ignore[misc]


def test_every_listed_fix_makes_the_invalid_example_fit() -> None:
    # micro_batch 8, seq 8192, no recompute on one node: 187.79 GiB. Activations scale with the
    # micro-batch (b = 2 keeps a quarter of them), and full recompute keeps only layer inputs.
    text = (EXAMPLES / "invalid" / "PLC007" / "llama3-8b-1node.yaml").read_text()
    (finding,) = findings_of(check_text(text))
    fixes = dict(listed_fixes(finding.fix))
    assert fixes == {"micro_batch": "2", "recompute": "full"}
    for field, value in fixes.items():
        section, key = FIX_FIELDS[field]
        overlay = {section: {key: yaml.safe_load(value)}}
        fixed = yaml.safe_dump(merge(yaml.safe_load(text), overlay), sort_keys=False)
        assert findings_of(check_text(fixed)) == [], (field, value)
    # micro_batch 4 (the next divisor of 64 / data 4 = 16 below 8) is not offered: it does not fit.
    half = yaml.safe_dump(merge(yaml.safe_load(text), {"training": {"micro_batch": 4}}))
    assert findings_of(check_text(half))


def hosts_overlay(nodes: int) -> dict[str, Any]:
    return {"hardware": {"nodes": nodes, "hosts": f"gpu-{{000..{nodes - 1:03d}}}"}}


def test_more_nodes_is_offered_at_the_smallest_count_that_fits() -> None:
    # llama3-70b at tensor 8, pipeline 1, ZeRO 1 keeps 2 B weights + 2 B gradients of Ψ/8 per
    # rank (2 × 16.43 GiB) and 12 B/param of fp32 master, m and v sharded over data d:
    # 98.57/d GiB. At d = 2 that is 82.1 GiB of state alone; d = 4 leaves 57.5 GiB plus the
    # activations (over 72 in total), d = 8 leaves 45.2 GiB plus the same activations.
    layout = {"parallelism": {"pipeline": 1, "data": None, "zero_stage": 1}}
    base = "llama3-70b-8x8.yaml"
    (finding,) = findings_of(check_text(spec_text(merge(layout, hosts_overlay(2)), base)))
    assert "nodes: 8 (data 8; list 8 hosts)" in finding.fix
    assert findings_of(check_text(spec_text(merge(layout, hosts_overlay(8)), base))) == []
    assert findings_of(check_text(spec_text(merge(layout, hosts_overlay(4)), base)))


def test_fixes_do_not_trade_one_finding_for_another() -> None:
    # With a pipeline, ZeRO-2/3 is PLC011's warning: the fix stops at ZeRO-1. The 70B example
    # (pipeline 4, data 2, ZeRO-1) needs 43.59 GiB; ZeRO-2 would shard its bf16 gradients over
    # the 2 data ranks (−Ψ_stage·2 B/2, about 2 GiB) and fit under 80 × (1 − 0.47) = 42.40 GiB.
    text = spec_text({"rules": {"memory_headroom": 0.47}}, "llama3-70b-8x8.yaml")
    (finding,) = findings_of(check_text(text))
    assert "zero_stage" not in finding.fix
    zero2 = spec_text(
        {
            "rules": {"memory_headroom": 0.47, "ignore": ["PLC011"]},
            "parallelism": {"zero_stage": 2},
        },
        "llama3-70b-8x8.yaml",
    )
    assert not check_text(zero2).findings  # it would fit: only PLC011 keeps it out
    # Sequence parallelism cannot split 8,191 tokens over tensor 2 (PLC013), so it is not
    # offered; at 8,192 tokens it is.
    for seq_len, offered in ((8191, False), (8192, True)):
        overlay = {
            "parallelism": {"sequence_parallel": False},
            "training": {"seq_len": seq_len, "micro_batch": 2, "recompute": "none"},
        }
        (finding,) = findings_of(check_overlay(overlay))
        assert ("sequence_parallel: true" in finding.fix) is offered, finding.fix


def test_when_no_single_change_fits_a_whole_layout_is_offered() -> None:
    """Llama 3 70B on 2 nodes at tensor 1, pipeline 1, ZeRO 0, micro_batch 2, seq 8,192: 16 B
    of static state per parameter on every rank (70.55B · 16 B = 1,051 GiB) is past every single
    change planc tries (the fix says so). A layout with more
    tensor parallelism and every saving on fits, and it is the one offered: applied to the spec,
    PLC007 passes. On 1 node no layout fits: that is said instead."""
    base = {
        "model": {"preset": "llama3-70b"},
        "parallelism": {"tensor": 1, "pipeline": 1, "data": None, "zero_stage": 0},
        "training": {"seq_len": 8192, "global_batch": 64, "micro_batch": 2},
    }
    spec = merge(base, hosts_overlay(2))
    (finding,) = findings_of(check_text(spec_text(spec, "llama3-70b-8x8.yaml")))
    assert "no single change" in finding.fix
    words = finding.fix.split("this layout on the same GPUs does: ")[1]
    parallelism = yaml.safe_load(words.split(" with training ")[0].removeprefix("parallelism "))
    training = yaml.safe_load(words.split(" with training ")[1].split(" (peak")[0])
    assert parallelism["tensor"] * parallelism["pipeline"] > 1
    fixed = merge(spec, {"parallelism": parallelism, "training": training})
    assert findings_of(check_text(spec_text(fixed, "llama3-70b-8x8.yaml"))) == []
    (alone,) = findings_of(
        check_text(spec_text(merge(base, hosts_overlay(1)), "llama3-70b-8x8.yaml"))
    )
    assert "nor does any of 48 layouts" in alone.fix
