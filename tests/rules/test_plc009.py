"""PLC009 context parallelism: seq_len % (2 × context) == 0.

Base: llama3-8b, 8 GPUs; tensor 2, context 2, data 2 fills them. sequence_parallel is off in these
cases so that PLC013 (tokens per CP rank over tensor) stays out of the way.
"""

from __future__ import annotations

import pytest

from planc.findings import FileResult, Finding, Severity

from conftest import check_overlay, check_text, rules_fired, spec_text, value_position


def findings_of(result: FileResult, rule: str = "PLC009") -> list[Finding]:
    return [f for f in result.findings if f.rule == rule]


def cp(context: int, seq_len: int, tensor: int = 2) -> dict[str, object]:
    return {
        "parallelism": {
            "tensor": tensor,
            "context": context,
            "data": 8 // (tensor * context),
            "sequence_parallel": False,
        },
        "training": {"seq_len": seq_len},
    }


def test_seq_len_not_divisible_by_twice_context() -> None:
    # 8190 % (2 × 2) = 2; neighbours 8188 and 8192.
    text = spec_text(cp(2, 8190))
    result = check_text(text)
    assert rules_fired(result) == {"PLC009"}
    (finding,) = findings_of(result)
    assert finding.field == "training.seq_len"
    assert finding.severity is Severity.ERROR
    assert "8190" in finding.message and "2 × context = 4" in finding.message
    assert "8188" in finding.fix and "8192" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "  seq_len: 8190")


def test_divisible_by_context_but_not_by_twice_context() -> None:
    # 8194 = 2 × 4097 splits over 2 ranks but not into 4 chunks: 8194 % 4 = 2.
    (finding,) = findings_of(check_overlay(cp(2, 8194)))
    assert "8194" in finding.message
    assert "8192" in finding.fix and "8196" in finding.fix


@pytest.mark.parametrize(("context", "seq_len"), [(2, 8192), (2, 8188), (4, 8192)])
def test_multiples_of_twice_context_pass(context: int, seq_len: int) -> None:
    # 8192 = 4 × 2048 = 8 × 1024; 8188 = 4 × 2047. context 4 uses tensor 2 × 4 = 8 GPUs.
    assert "PLC009" not in rules_fired(check_overlay(cp(context, seq_len)))


def test_context_4_needs_a_multiple_of_8() -> None:
    # 8188 % 4 = 0 but 8188 % 8 = 4: fine for context 2, not for context 4.
    (finding,) = findings_of(check_overlay(cp(4, 8188)))
    assert "2 × context = 8" in finding.message
    assert "8184" in finding.fix and "8192" in finding.fix


def test_no_context_parallelism_puts_no_constraint() -> None:
    overlay = {"parallelism": {"sequence_parallel": False}, "training": {"seq_len": 8191}}
    assert "PLC009" not in rules_fired(check_overlay(overlay))
