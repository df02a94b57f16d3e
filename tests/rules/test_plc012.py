"""PLC012 attention heads: hidden % heads == 0 (without head_dim) and heads % kv_heads == 0.

Base: llama3-8b: hidden 4096, 32 heads, 8 kv heads, tensor 2.
"""

from __future__ import annotations

import pytest

from planc.findings import FileResult, Finding, Severity

from conftest import check_overlay, check_text, rules_fired, spec_text, value_position


def findings_of(result: FileResult, rule: str = "PLC012") -> list[Finding]:
    return [f for f in result.findings if f.rule == rule]


def test_hidden_not_divisible_by_heads() -> None:
    # 4100 % 32 = 4.
    text = spec_text({"model": {"hidden": 4100}})
    result = check_text(text)
    assert rules_fired(result) == {"PLC012"}
    (finding,) = findings_of(result)
    assert finding.field == "model.hidden"
    assert finding.severity is Severity.ERROR
    assert "hidden = 4100" in finding.message and "heads = 32" in finding.message
    assert "head_dim" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "  hidden: 4100")


def test_explicit_head_dim_lifts_the_hidden_constraint() -> None:
    assert "PLC012" not in rules_fired(check_overlay({"model": {"hidden": 4100, "head_dim": 128}}))


def test_kv_heads_not_dividing_heads() -> None:
    # 32 % 12 = 8 (12 % 2 = 0, so PLC003 is satisfied at tensor 2).
    text = spec_text({"model": {"kv_heads": 12}})
    result = check_text(text)
    assert rules_fired(result) == {"PLC012"}
    (finding,) = findings_of(result)
    assert finding.field == "model.kv_heads"
    assert "kv_heads = 12" in finding.message and "heads = 32" in finding.message
    assert finding.fix
    assert (finding.line, finding.column) == value_position(text, "  kv_heads: 12")


@pytest.mark.parametrize("kv_heads", [1, 2, 8, 32])
def test_divisors_of_heads_pass(kv_heads: int) -> None:
    # MQA (1), GQA (2, 8) and plain multi-head attention (32).
    assert "PLC012" not in rules_fired(check_overlay({"model": {"kv_heads": kv_heads}}))


def test_both_problems_are_reported() -> None:
    # hidden 4100 % 32 = 4 and 32 % 12 = 8.
    found = findings_of(check_overlay({"model": {"hidden": 4100, "kv_heads": 12}}))
    assert {f.field for f in found} == {"model.hidden", "model.kv_heads"}
