"""PLC016 a learned position table must cover the sequence.

Base: gpt3-175b-1024xa100: learned positions, max_seq_len 2048, tensor 8 with sequence
parallelism (so lengths below are multiples of 8 to keep PLC013 out).
"""

from __future__ import annotations

from planc.findings import FileResult, Finding, Severity

from conftest import check_overlay, check_text, rules_fired, spec_text, value_position


def findings_of(result: FileResult, rule: str = "PLC016") -> list[Finding]:
    return [f for f in result.findings if f.rule == rule]


BASE = "gpt3-175b-1024xa100.yaml"


def test_sequence_longer_than_the_table() -> None:
    # 2056 = 2048 + 8 > 2048 positions.
    text = spec_text({"training": {"seq_len": 2056}}, BASE)
    (finding,) = findings_of(check_text(text))
    assert finding.field == "training.seq_len"
    assert finding.severity is Severity.ERROR
    assert "2056" in finding.message and "2048 positions" in finding.message
    assert "2048" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "  seq_len: 2056")


def test_sequence_equal_to_the_table_passes() -> None:
    assert "PLC016" not in rules_fired(check_overlay(None, BASE))


def test_a_larger_table_covers_a_longer_sequence() -> None:
    overlay = {"model": {"max_seq_len": 4096}, "training": {"seq_len": 4096}}
    assert "PLC016" not in rules_fired(check_overlay(overlay, BASE))


def test_rotary_embeddings_have_no_table() -> None:
    # llama3-8b (rope, max_seq_len 8192) at seq_len 16384.
    assert "PLC016" not in rules_fired(check_overlay({"training": {"seq_len": 16384}}))
    overlay = {"model": {"position_embedding": "rope"}, "training": {"seq_len": 4096}}
    assert "PLC016" not in rules_fired(check_overlay(overlay, BASE))
