"""PLC052: a layout Megatron-FSDP (megatron-core 0.19.2, --use-megatron-fsdp) starts with: its
DeviceMesh is the whole world as data × context × tensor ranks, tensor fastest, so it has no
pipeline stages and no other rank order; with experts, expert ranks before expert data ranks.

Base: llama3-8b-1node (8 H100: tensor 2 … data 4) and the Mixtral example (64 H100: expert 8).
"""

from __future__ import annotations

from typing import Any

import pytest

from planc.findings import Severity

from conftest import check_overlay

FSDP = {"framework": "megatron-fsdp", "recompute": "full"}


def fired(overlay: dict[str, Any], base: str = "llama3-8b-1node.yaml") -> list[Any]:
    return [f for f in check_overlay(overlay, base).findings if f.rule == "PLC052"]


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_every_sharding_strategy_starts_on_one_stage(stage: int) -> None:
    assert fired({"parallelism": {"tensor": 2, "zero_stage": stage}, "training": FSDP}) == []


def test_a_pipeline_is_refused_with_the_fix() -> None:
    overlay = {"parallelism": {"tensor": 2, "pipeline": 2, "zero_stage": 3}, "training": FSDP}
    (finding,) = fired(overlay)
    assert finding.severity is Severity.ERROR
    assert finding.field == "parallelism.pipeline"
    assert "pipeline: 1" in finding.fix and "framework: megatron" in finding.fix


def test_tensor_must_be_the_fastest_axis() -> None:
    (finding,) = fired({"parallelism": {"tensor": 2, "order": "dp-tp-cp-pp"}, "training": FSDP})
    assert finding.field == "parallelism.order"
    # With tensor 1 there is no tensor axis to misplace.
    assert fired({"parallelism": {"tensor": 1, "order": "dp-tp-cp-pp"}, "training": FSDP}) == []


def test_expert_ranks_come_before_expert_data_ranks() -> None:
    base = "mixtral-8x7b-64xh100.yaml"
    fsdp = {"framework": "megatron-fsdp"}
    flat = {"pipeline": 1, "expert": 8, "zero_stage": 3}
    assert fired({"parallelism": {**flat, "order": "tp-cp-ep-dp-pp"}, "training": fsdp}, base) == []
    found = fired({"parallelism": {**flat, "order": "tp-cp-dp-ep-pp"}, "training": fsdp}, base)
    assert [f.field for f in found] == ["parallelism.order"]
    assert "(expt_dp ep tp)" in found[0].message


def test_megatron_lm_without_fsdp_is_not_this_rules() -> None:
    overlay = {"parallelism": {"tensor": 2, "pipeline": 2, "zero_stage": 1}}
    assert fired(overlay) == []
