"""PLC017 (warning) context parallelism needs a fused attention kernel.

Base: llama3-8b, 8 GPUs; tensor 2 × context 2 × data 2.
"""

from __future__ import annotations

from planc.findings import FileResult, Finding, Severity

from conftest import check_overlay, check_text, rules_fired, spec_text, value_position


def findings_of(result: FileResult, rule: str = "PLC017") -> list[Finding]:
    return [f for f in result.findings if f.rule == rule]


CP2 = {"tensor": 2, "context": 2, "data": 2}


def test_context_parallel_with_eager_attention_warns() -> None:
    text = spec_text({"parallelism": CP2, "training": {"attention": "eager"}})
    (finding,) = findings_of(check_text(text))
    assert finding.field == "training.attention"
    assert finding.severity is Severity.WARNING
    assert "context = 2" in finding.message
    assert "flash" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "  attention: eager")


def test_context_parallel_with_flash_attention_passes() -> None:
    assert "PLC017" not in rules_fired(check_overlay({"parallelism": CP2}))


def test_eager_attention_without_context_parallelism_passes() -> None:
    assert "PLC017" not in rules_fired(check_overlay({"training": {"attention": "eager"}}))
