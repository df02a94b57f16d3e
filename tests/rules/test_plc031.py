"""PLC031 model.moe.pad_to_capacity has a capacity to pad to, on the alltoall dispatcher.

Mixtral 8x7B (E = 8 experts, top_k k = 2), the alltoall dispatcher unless the case says.
"""

from __future__ import annotations

from typing import Any

import pytest

from planc.findings import Finding, Severity

from conftest import check_overlay, rules_fired

BASE = "mixtral-8x7b-64xh100.yaml"


def _padded(capacity: float | None = 1.0, dispatcher: str | None = None) -> dict[str, Any]:
    moe: dict[str, Any] = {"pad_to_capacity": True}
    if capacity is not None:
        moe["capacity_factor"] = capacity
    overlay: dict[str, Any] = {"model": {"moe": moe}}
    if dispatcher is not None:
        overlay["parallelism"] = {"expert_dispatcher": dispatcher}
    return overlay


def _finding(overlay: dict[str, Any]) -> Finding:
    (finding,) = [f for f in check_overlay(overlay, BASE).findings if f.rule == "PLC031"]
    assert finding.severity is Severity.ERROR
    return finding


def test_padding_without_a_capacity_factor_fails() -> None:
    # Megatron-Core's TransformerConfig raises the same ValueError.
    finding = _finding(_padded(capacity=None))
    assert finding.field == "model.moe.pad_to_capacity"
    assert "capacity_factor is null" in finding.message
    assert "moe_expert_capacity_factor must be set" in finding.message
    # The fix's numbers: each of the 8 experts takes ⌈T·2/8⌉ rows, T·2 in all.
    assert "capacity_factor: 1.0" in finding.fix and "8 experts" in finding.fix
    assert "⌈T·2/8⌉" in finding.fix and "leave pad_to_capacity out" in finding.fix


def test_padding_with_deepep_fails_as_megatron_refuses_it() -> None:
    finding = _finding(_padded(dispatcher="deepep"))
    assert finding.field == "model.moe.pad_to_capacity"
    assert "deepep dispatcher" in finding.message
    assert "Flex token dispatcher with deepep backend does not support" in finding.message
    assert "expert_dispatcher: alltoall" in finding.fix


@pytest.mark.parametrize("dispatcher", ["allgather", "hybridep"])
def test_padding_off_alltoall_fails_as_planc_does_not_price_it(dispatcher: str) -> None:
    finding = _finding(_padded(dispatcher=dispatcher))
    assert f"{dispatcher} dispatcher" in finding.message
    assert "planc prices padding on the alltoall dispatcher only" in finding.message


def test_a_capacity_above_the_tokens_fails() -> None:
    # k·CF = 2·5 = 10 > E = 8: C = ⌈T·2/8·5⌉ = ⌈1.25·T⌉ > T, no C tokens to pad with.
    finding = _finding(_padded(capacity=5.0))
    assert finding.field == "model.moe.capacity_factor"
    assert "⌈1.25·T⌉" in finding.message and "top_k 2 of 8" in finding.message
    assert "at most E/k = 4" in finding.fix


@pytest.mark.parametrize("capacity", [1.0, 1.25, 4.0])
def test_padding_with_a_capacity_on_alltoall_passes(capacity: float) -> None:
    # 4.0 is the largest: k·CF = 8 = E, C = T (every token fills every expert).
    assert "PLC031" not in rules_fired(check_overlay(_padded(capacity), BASE))


def test_drop_only_and_dropless_pass() -> None:
    for moe in ({"capacity_factor": 1.25}, {"pad_to_capacity": False}, {}):
        assert "PLC031" not in rules_fired(check_overlay({"model": {"moe": moe}}, BASE))
    # Without padding any dispatcher takes a capacity factor as far as PLC031 goes.
    overlay = {
        "model": {"moe": {"capacity_factor": 1.0}},
        "parallelism": {"expert_dispatcher": "deepep"},
    }
    assert "PLC031" not in rules_fired(check_overlay(overlay, BASE))
