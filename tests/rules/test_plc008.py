"""PLC008 sequence parallelism needs tensor > 1. Base: llama3-8b, 8 GPUs, tensor 2, sp on."""

from __future__ import annotations

from planc.findings import FileResult, Finding, Severity

from conftest import check_overlay, check_text, rules_fired, spec_text, value_position


def findings_of(result: FileResult, rule: str = "PLC008") -> list[Finding]:
    return [f for f in result.findings if f.rule == rule]


def test_sequence_parallel_at_tensor_1() -> None:
    # tensor 1, data 8 fills the 8 GPUs; sp has no TP group to split over. Full recompute keeps
    # the whole 8B model's activations on one GPU small enough for PLC007.
    text = spec_text({"parallelism": {"tensor": 1, "data": 8}, "training": {"recompute": "full"}})
    result = check_text(text)
    assert rules_fired(result) == {"PLC008"}
    (finding,) = findings_of(result)
    assert finding.field == "parallelism.sequence_parallel"
    assert finding.severity is Severity.ERROR
    assert "tensor = 1" in finding.message
    assert "sequence_parallel: false" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "  sequence_parallel: true")


def test_sequence_parallel_at_tensor_2_passes() -> None:
    assert "PLC008" not in rules_fired(check_overlay({"parallelism": {"tensor": 2}}))


def test_tensor_1_without_sequence_parallel_passes() -> None:
    overlay = {"parallelism": {"tensor": 1, "data": 8, "sequence_parallel": False}}
    assert "PLC008" not in rules_fired(check_overlay(overlay))
