"""PLC001 world size: tensor × pipeline × data × context must equal nodes × gpus_per_node.

Base spec (examples/llama3-8b-1node.yaml): one H100 node, gpus_per_node 8 from the preset, so the
world is 1 × 8 = 8 GPUs; tensor 2, pipeline 1, context 1, data derived.
"""

from __future__ import annotations

from planc.findings import FileResult, Finding, Severity

from conftest import (
    check_overlay,
    check_text,
    job_of,
    resolved_of,
    rules_fired,
    spec_text,
    value_position,
)


def findings_of(result: FileResult, rule: str = "PLC001") -> list[Finding]:
    return [f for f in result.findings if f.rule == rule]


def section_lines(text: str, section: str) -> range:
    """The 1-based line numbers of a top-level section, its own key line included."""
    lines = text.splitlines()
    start = lines.index(f"{section}:")
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" ")),
        len(lines),
    )
    return range(start + 1, end + 1)


def test_explicit_data_that_misses_the_world_is_reported_at_data() -> None:
    # 2 × 1 × 3 × 1 = 6 ranks on 1 × 8 = 8 GPUs; 8 is divisible by 2 × 1 × 1 = 2, so the
    # fix names data 8 / 2 = 4. global_batch 63 = 3 × 21 keeps PLC005 quiet.
    overlay = {"parallelism": {"data": 3}, "training": {"global_batch": 63}}
    text = spec_text(overlay)
    result = check_text(text)
    assert rules_fired(result) == {"PLC001"}
    (finding,) = findings_of(result)
    assert finding.field == "parallelism.data"
    assert finding.severity is Severity.ERROR
    assert "2 × 1 × 3 × 1 = 6" in finding.message
    assert "8 GPUs" in finding.message
    assert finding.fix == "set data: 4"
    assert (finding.line, finding.column) == value_position(text, "  data: 3")


def test_explicit_data_that_matches_the_world_passes() -> None:
    # 2 × 1 × 4 × 1 = 8 = 1 × 8.
    result = check_overlay({"parallelism": {"data": 4}})
    assert "PLC001" not in rules_fired(result)
    assert result.findings == ()


def test_explicit_data_too_large_on_two_nodes() -> None:
    # Two nodes: world 2 × 8 = 16; 2 × 1 × 4 × 1 = 8 ≠ 16; fix data 16 / 2 = 8.
    overlay = {
        "hardware": {"nodes": 2, "hosts": ["gpu-a01", "gpu-a02"]},
        "parallelism": {"data": 4},
    }
    (finding,) = findings_of(check_overlay(overlay))
    assert "= 8" in finding.message and "2 × 8 = 16" in finding.message
    assert finding.fix == "set data: 8"


def test_context_counts_in_the_product() -> None:
    # 2 × 1 × 1 × 2 = 4 ranks on 8 GPUs. Without context the same data would be 2 × 1 × 1 = 2,
    # so the message must show context's factor and the product 4.
    overlay = {"parallelism": {"data": 1, "context": 2}}
    (finding,) = findings_of(check_overlay(overlay))
    assert "2 × 1 × 1 × 2 = 4" in finding.message
    assert finding.fix == "set data: 2"  # 8 / (2 × 1 × 2) = 2


def test_product_that_cannot_divide_the_world_asks_for_other_degrees() -> None:
    # A 6-GPU node (nvlink_domain 6 so the domain tiles the node): tensor 4, data 1 gives 4 ≠ 6,
    # and 6 % 4 ≠ 0, so no data value can fix it.
    overlay = {
        "hardware": {"gpus_per_node": 6, "nvlink_domain": 6},
        "parallelism": {"tensor": 4, "data": 1, "zero_stage": 0},
    }
    (finding,) = findings_of(check_overlay(overlay))
    assert "4 × 1 × 1 × 1 = 4" in finding.message and "1 × 6 = 6" in finding.message
    assert "6" in finding.fix and "set data" not in finding.fix


def test_data_left_out_is_derived_from_the_world() -> None:
    # 8 / (2 × 1 × 1) = 4.
    job = resolved_of()
    assert job.layout.d == 4
    assert not job.layout.d_given


def test_data_left_out_but_world_not_divisible_cannot_be_derived() -> None:
    # World 1 × 6 = 6 with tensor 4: 6 % (4 × 1 × 1) = 2, so data cannot be derived.
    overlay = {
        "hardware": {"gpus_per_node": 6, "nvlink_domain": 6},
        "parallelism": {"tensor": 4},
    }
    text = spec_text(overlay)
    result = check_text(text)
    # Rules that need the data degree stay silent rather than guess one.
    assert rules_fired(result) == {"PLC001"}
    (finding,) = findings_of(result)
    assert finding.field == "parallelism"
    assert finding.severity is Severity.ERROR
    assert "world size 6" in finding.message
    assert "4 × 1 × 1 = 4" in finding.message
    assert "cannot be derived" in finding.message
    assert finding.fix
    assert finding.line in section_lines(text, "parallelism")


def test_derived_data_on_the_gb200_example_fills_the_world() -> None:
    # 36 trays × 4 GPUs = 144 = 24 × 3 × 2 × 1.
    job = job_of(base="gpt3-175b-gb200-nvl72.yaml")
    assert job.world == 144
    assert job.layout.t * job.layout.p * (job.layout.d or 0) * job.layout.c == 144
