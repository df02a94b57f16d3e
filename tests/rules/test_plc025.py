"""PLC025 model.moe.top_k is at most model.moe.experts (Mixtral 8x7B: 8 experts, top-2)."""

from __future__ import annotations

import pytest

from conftest import check_overlay, check_text, rules_fired, spec_text

BASE = "mixtral-8x7b-64xh100.yaml"


def test_top_k_above_experts_fails() -> None:
    text = spec_text({"model": {"moe": {"top_k": 9}}}, BASE)
    (finding,) = [f for f in check_text(text).findings if f.rule == "PLC025"]
    assert finding.field == "model.moe.top_k"
    assert "top_k = 9" in finding.message and "8" in finding.message
    assert "between 1 and 8" in finding.fix


@pytest.mark.parametrize("top_k", [1, 2, 8])
def test_top_k_within_passes(top_k: int) -> None:
    assert "PLC025" not in rules_fired(check_overlay({"model": {"moe": {"top_k": top_k}}}, BASE))


def test_dense_model_is_not_checked() -> None:
    assert "PLC025" not in rules_fired(check_overlay())
