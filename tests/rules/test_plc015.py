"""PLC015 world size limit: at most 1,048,576 = 2^20 ranks.

131,072 nodes × 8 GPUs = 1,048,576 is at the limit; 131,073 × 8 = 1,048,584 is over it.
"""

from __future__ import annotations

from planc.findings import FileResult, Finding, Severity

from conftest import check_text, rules_fired, spec_text, value_position


def findings_of(result: FileResult, rule: str = "PLC015") -> list[Finding]:
    return [f for f in result.findings if f.rule == rule]


def spec(nodes: int) -> str:
    # tensor 8 (one per node), data = nodes, global_batch = nodes (one sequence per DP rank).
    return spec_text(
        {
            "hardware": {"nodes": nodes, "hosts": f"n-{{000001..{nodes:06d}}}"},
            "parallelism": {"tensor": 8},
            "training": {"global_batch": nodes},
        }
    )


def test_one_node_over_the_limit() -> None:
    text = spec(131_073)
    result = check_text(text)
    (finding,) = findings_of(result)
    assert finding.field == "hardware.nodes"
    assert finding.severity is Severity.ERROR
    assert "1,048,584" in finding.message and "1,048,576" in finding.message
    assert finding.fix
    assert (finding.line, finding.column) == value_position(text, "  nodes: 131073")


def test_exactly_at_the_limit_passes() -> None:
    assert "PLC015" not in rules_fired(check_text(spec(131_072)))


def test_a_billion_ranks_is_refused_by_the_rule() -> None:
    # 250,000 nodes (within the schema's 1,000,000) × 4,000 GPUs (within 4,096) = 10^9 ranks.
    text = spec_text({"hardware": {"nodes": 250_000, "gpus_per_node": 4000, "hosts": []}})
    (finding,) = findings_of(check_text(text))
    assert "1,000,000,000" in finding.message
