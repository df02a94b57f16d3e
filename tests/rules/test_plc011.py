"""PLC011 (warning) ZeRO-2/3 together with pipeline parallelism. Base: llama3-70b-8x8, p = 4."""

from __future__ import annotations

import pytest

from planc.findings import FileResult, Finding, Severity

from conftest import check_overlay, check_text, spec_text, value_position


def findings_of(result: FileResult, rule: str = "PLC011") -> list[Finding]:
    return [f for f in result.findings if f.rule == rule]


BASE = "llama3-70b-8x8.yaml"


@pytest.mark.parametrize("stage", [2, 3])
def test_gradient_sharding_with_a_pipeline_warns(stage: int) -> None:
    text = spec_text({"parallelism": {"zero_stage": stage}}, BASE)
    (finding,) = findings_of(check_text(text))
    assert finding.field == "parallelism.zero_stage"
    assert finding.severity is Severity.WARNING
    assert f"zero_stage {stage}" in finding.message and "pipeline = 4" in finding.message
    assert "zero_stage: 1" in finding.fix
    assert (finding.line, finding.column) == value_position(text, f"  zero_stage: {stage}")


@pytest.mark.parametrize("stage", [0, 1])
def test_zero_1_or_none_with_a_pipeline_passes(stage: int) -> None:
    assert findings_of(check_overlay({"parallelism": {"zero_stage": stage}}, BASE)) == []


def test_zero_2_without_a_pipeline_passes() -> None:
    # llama3-8b base: pipeline 1, data 4.
    assert findings_of(check_overlay({"parallelism": {"zero_stage": 2}})) == []


def test_a_warning_alone_does_not_fail_the_file() -> None:
    result = check_overlay({"parallelism": {"zero_stage": 2}}, BASE)
    assert result.ok() and not result.ok(strict=True)
