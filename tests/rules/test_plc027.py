"""PLC027 an expert layout Megatron-Core accepts in its rank order.

The three refusals of Megatron-Core's initialize_model_parallel (parallel_state.py): ep left out
of the order with EP > 1; pp not last with EDP ≠ DP; dense and expert pipeline groups that
differ. Base: Mixtral 8x7B on 64 H100, pipeline 4, data 16, expert 8 (EDP 2).
"""

from __future__ import annotations

import pytest

from planc.findings import Severity

from conftest import check_overlay, rules_fired

BASE = "mixtral-8x7b-64xh100.yaml"


def findings(overlay: dict[str, object]) -> list[str]:
    return [f.message for f in check_overlay(overlay, BASE).findings if f.rule == "PLC027"]


def test_order_without_ep_fails() -> None:
    result = check_overlay({"parallelism": {"order": "tp-cp-dp-pp"}}, BASE)
    (finding,) = [f for f in result.findings if f.rule == "PLC027"]
    assert finding.severity is Severity.ERROR and finding.field == "parallelism.order"
    assert "does not place ep" in finding.message and "tp-cp-ep-dp-pp" in finding.fix


def test_pp_not_last_needs_edp_equal_to_dp() -> None:
    (message,) = findings({"parallelism": {"order": "tp-cp-ep-pp-dp"}})
    assert "W/(ETP·EP·PP) = 2" in message and "data = 16" in message


def test_pipeline_groups_must_match() -> None:
    # tensor 2, data 8, expert 2, expert_tensor 1: EDP = 64/(1·2·4) = 8 = data, so only the
    # pipeline groups differ: pp's stride is tp = 2 in the dense grid, ETP = 1 in the expert one.
    overlay = {
        "parallelism": {
            "tensor": 2,
            "data": 8,
            "expert": 2,
            "expert_tensor": 1,
            "sequence_parallel": True,
            "order": "tp-pp-ep-dp-cp",
        }
    }
    (message,) = findings(overlay)
    assert "stride 2" in message and "stride 1" in message


@pytest.mark.parametrize(
    "order", ["tp-cp-ep-dp-pp", "tp-ep-cp-dp-pp", "ep-tp-dp-cp-pp", "tp-dp-ep-cp-pp"]
)
def test_pp_last_orders_pass(order: str) -> None:
    assert "PLC027" not in rules_fired(check_overlay({"parallelism": {"order": order}}, BASE))


def test_dense_orders_are_unchanged() -> None:
    # Without experts, ep in the order places nothing and a pp-first order is still fine.
    assert "PLC027" not in rules_fired(check_overlay({"parallelism": {"order": "pp-tp-ep-cp-dp"}}))
