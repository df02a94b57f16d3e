"""PLC013 sequence parallelism: the seq_len / context tokens of a CP rank split over tensor.

Base: llama3-8b, 8 GPUs, tensor 2, sequence_parallel on, seq_len 8192.
"""

from __future__ import annotations

from planc.findings import FileResult, Finding, Severity

from conftest import check_overlay, check_text, rules_fired, spec_text, value_position


def findings_of(result: FileResult, rule: str = "PLC013") -> list[Finding]:
    return [f for f in result.findings if f.rule == rule]


def test_odd_sequence_over_tensor_2() -> None:
    # 8191 tokens (context 1) over tensor 2: 8191 % 2 = 1.
    text = spec_text({"training": {"seq_len": 8191}})
    result = check_text(text)
    assert rules_fired(result) == {"PLC013"}
    (finding,) = findings_of(result)
    assert finding.field == "training.seq_len"
    assert finding.severity is Severity.ERROR
    assert "8191 tokens" in finding.message and "tensor = 2" in finding.message
    assert "context × tensor = 2" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "  seq_len: 8191")


def test_even_sequence_passes() -> None:
    assert "PLC013" not in rules_fired(check_overlay({"training": {"seq_len": 8190}}))


def test_without_sequence_parallel_any_length_passes() -> None:
    overlay = {"parallelism": {"sequence_parallel": False}, "training": {"seq_len": 8191}}
    assert "PLC013" not in rules_fired(check_overlay(overlay))


def test_tokens_per_context_rank_are_what_must_split() -> None:
    # context 2, tensor 4, data 1: 8196 % (2 × 2) = 0 (PLC009 is happy), 8196 / 2 = 4098 tokens
    # per CP rank, 4098 % 4 = 2. The fix asks for a multiple of 2 × 4 = 8.
    overlay = {
        "parallelism": {"tensor": 4, "context": 2, "data": 1},
        "training": {"seq_len": 8196},
    }
    result = check_overlay(overlay)
    assert "PLC009" not in rules_fired(result)
    (finding,) = findings_of(result)
    assert "4098 tokens" in finding.message and "tensor = 4" in finding.message
    assert "context × tensor = 8" in finding.fix
    # 8200 = 8 × 1025 passes both.
    overlay["training"] = {"seq_len": 8200}
    assert "PLC013" not in rules_fired(check_overlay(overlay))
