"""PLC018 (warning) ZeRO over a data × context group of one shards nothing.

Base: llama3-8b, 8 GPUs.
"""

from __future__ import annotations

import pytest

from planc.findings import FileResult, Finding, Severity

from conftest import check_overlay, check_text, rules_fired, spec_text, value_position


def findings_of(result: FileResult, rule: str = "PLC018") -> list[Finding]:
    return [f for f in result.findings if f.rule == rule]


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_with_data_1_warns(stage: int) -> None:
    # tensor 8 × data 1 = 8 GPUs.
    text = spec_text({"parallelism": {"tensor": 8, "data": 1, "zero_stage": stage}})
    (finding,) = findings_of(check_text(text))
    assert finding.field == "parallelism.zero_stage"
    assert finding.severity is Severity.WARNING
    assert f"zero_stage {stage}" in finding.message and "= 1" in finding.message
    assert "zero_stage: 0" in finding.fix
    assert (finding.line, finding.column) == value_position(text, f"  zero_stage: {stage}")


def test_no_zero_with_data_1_passes() -> None:
    overlay = {"parallelism": {"tensor": 8, "data": 1, "zero_stage": 0}}
    assert "PLC018" not in rules_fired(check_overlay(overlay))


def test_context_ranks_form_a_group_to_shard_over() -> None:
    # tensor 4 × context 2 × data 1: the ZeRO group is data × context = 2.
    overlay = {"parallelism": {"tensor": 4, "context": 2, "data": 1, "zero_stage": 1}}
    assert "PLC018" not in rules_fired(check_overlay(overlay))


def test_zero_with_data_4_passes() -> None:
    assert "PLC018" not in rules_fired(check_overlay(None))
