"""PLC022 parallelism.data_shard divides data × context.

Base: llama3-8b on one 8-GPU H100 node, tensor 2, data derived 8 / 2 = 4, context 1.
"""

from __future__ import annotations

import pytest

from planc.findings import FileResult, Finding, Severity

from conftest import check_overlay, check_text, job_of, rules_fired, spec_text, value_position


def findings_of(result: FileResult, rule: str = "PLC022") -> list[Finding]:
    return [f for f in result.findings if f.rule == rule]


def test_shard_not_dividing_fails() -> None:
    text = spec_text({"parallelism": {"data_shard": 3}})
    result = check_text(text)
    (finding,) = findings_of(result)
    assert finding.severity is Severity.ERROR
    assert finding.field == "parallelism.data_shard"
    assert "3" in finding.message and "4 × 1 = 4" in finding.message
    assert "divisor of 4, such as 1" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "  data_shard: 3")


@pytest.mark.parametrize("shard", [1, 2, 4])
def test_divisors_pass(shard: int) -> None:
    assert "PLC022" not in rules_fired(check_overlay({"parallelism": {"data_shard": shard}}))


def test_context_counts_in_the_group() -> None:
    # tensor 2 × context 2 × data 2: the group is data × context = 4, so 4 divides it.
    overlay = {"parallelism": {"context": 2, "data_shard": 4}}
    assert "PLC022" not in rules_fired(check_overlay(overlay))
    job = job_of(overlay)
    assert (job.layout.shard_group, job.layout.replicas) == (4, 1)


def test_default_is_data_times_context() -> None:
    job = job_of()
    assert (job.layout.shard_group, job.layout.replicas) == (4, 1)
    assert job_of({"parallelism": {"data_shard": 2}}).layout.replicas == 2


def test_larger_than_the_group_fails() -> None:
    assert "PLC022" in rules_fired(check_overlay({"parallelism": {"data_shard": 8}}))
