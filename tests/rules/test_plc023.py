"""PLC023 parallelism.expert divides the routed experts, and needs a model with experts.

Base: Mixtral 8x7B (8 experts) on 64 H100, pipeline 4, data 16, expert 8.
"""

from __future__ import annotations

import pytest

from planc.findings import Severity
from planc.plannable import plannable

from conftest import check_overlay, check_text, resolved_of, rules_fired, spec_text, value_position

BASE = "mixtral-8x7b-64xh100.yaml"


def test_expert_not_dividing_the_experts_fails() -> None:
    text = spec_text({"parallelism": {"expert": 16}}, BASE)
    (finding,) = [f for f in check_text(text).findings if f.rule == "PLC023"]
    assert finding.severity is Severity.ERROR
    assert finding.field == "parallelism.expert"
    assert "16" in finding.message and "8 routed experts" in finding.message
    assert "divisor of 8, such as 8" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "  expert: 16")


@pytest.mark.parametrize("expert", [1, 2, 4, 8])
def test_divisors_pass(expert: int) -> None:
    assert "PLC023" not in rules_fired(check_overlay({"parallelism": {"expert": expert}}, BASE))


def test_expert_parallel_without_experts_fails() -> None:
    result = check_overlay({"parallelism": {"expert": 2}})  # llama3-8b: dense
    (finding,) = [f for f in result.findings if f.rule == "PLC023"]
    assert "no experts" in finding.message and "expert: 1" in finding.fix


def test_it_is_a_precondition() -> None:
    refused = plannable(resolved_of({"parallelism": {"expert": 16}}, BASE))
    assert isinstance(refused, tuple) and {r.rule for r in refused} == {"PLC023"}


def test_many_experts_are_checked_without_listing_divisors() -> None:
    # 10,000,000 experts over 3 ranks: the fix names gcd(E, EP) = 1 at once.
    result = check_overlay(
        {"model": {"moe": {"experts": 10_000_000}}, "parallelism": {"expert": 3}}, BASE
    )
    (finding,) = [f for f in result.findings if f.rule == "PLC023"]
    assert "such as 1" in finding.fix
