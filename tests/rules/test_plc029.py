"""PLC029 a mixture-of-experts model with tensor parallelism runs sequence parallelism."""

from __future__ import annotations

from planc.findings import Severity

from conftest import check_overlay, check_text, rules_fired, spec_text

BASE = "mixtral-8x7b-64xh100.yaml"


def test_tensor_parallelism_without_sequence_parallelism_fails() -> None:
    overlay = {"parallelism": {"tensor": 2, "data": 8, "sequence_parallel": False}}
    (finding,) = [f for f in check_text(spec_text(overlay, BASE)).findings if f.rule == "PLC029"]
    assert finding.severity is Severity.ERROR
    assert finding.field == "parallelism.sequence_parallel"
    assert "tensor = 2" in finding.message and "2×" in finding.message
    assert finding.fix == "set parallelism.sequence_parallel: true"


def test_the_fix_passes() -> None:
    overlay = {"parallelism": {"tensor": 2, "data": 8, "sequence_parallel": True}}
    assert "PLC029" not in rules_fired(check_overlay(overlay, BASE))


def test_without_tensor_parallelism_or_experts_it_does_not_apply() -> None:
    assert "PLC029" not in rules_fired(check_overlay(None, BASE))
    dense = {"parallelism": {"tensor": 2, "sequence_parallel": False}}
    assert "PLC029" not in rules_fired(check_overlay(dense))


def test_the_fix_names_the_sequence_when_it_cannot_split() -> None:
    # s = 4,095 does not split over t = 2, so turning SP on also needs another seq_len.
    overlay = {
        "parallelism": {"tensor": 2, "data": 8, "sequence_parallel": False},
        "training": {"seq_len": 4095},
    }
    found = [f for f in check_text(spec_text(overlay, BASE)).findings if f.rule == "PLC029"]
    assert found and "seq_len" in found[0].fix
