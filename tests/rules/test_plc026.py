"""PLC026 model.moe.capacity_factor is at least 1, or null (dropless)."""

from __future__ import annotations

import pytest

from planc.findings import Severity

from conftest import check_overlay, check_text, rules_fired, spec_text

BASE = "mixtral-8x7b-64xh100.yaml"


def test_capacity_below_one_fails() -> None:
    text = spec_text({"model": {"moe": {"capacity_factor": 0.75}}}, BASE)
    (finding,) = [f for f in check_text(text).findings if f.rule == "PLC026"]
    assert finding.severity is Severity.ERROR
    assert finding.field == "model.moe.capacity_factor"
    assert "0.75" in finding.message and "75%" in finding.message
    assert "dropless" in finding.fix


@pytest.mark.parametrize("capacity", [1.0, 1, 1.25, 4.0])
def test_capacity_of_one_or_more_passes(capacity: float) -> None:
    overlay = {"model": {"moe": {"capacity_factor": capacity}}}
    assert "PLC026" not in rules_fired(check_overlay(overlay, BASE))


def test_dropless_passes() -> None:
    assert "PLC026" not in rules_fired(check_overlay(None, BASE))
