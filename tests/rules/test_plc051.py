"""PLC051 (warning): settings the framework runs otherwise than planned: DeepSpeed's offload
below the ZeRO stage that reads it and its whole-group sharding; torchtitan's one rank order and
its all-or-nothing offload.

Base: llama3-8b-1node (8 H100, tensor 2, ZeRO-1).
"""

from __future__ import annotations

from typing import Any

import pytest

from planc.findings import Severity

from conftest import check_overlay


def fired(overlay: dict[str, Any], base: str = "llama3-8b-1node.yaml") -> list[Any]:
    return [f for f in check_overlay(overlay, base).findings if f.rule == "PLC051"]


def test_deepspeed_offloads_parameters_with_zero_3_only() -> None:
    (finding,) = fired({"training": {"framework": "deepspeed", "offload": {"parameters": True}}})
    assert finding.severity is Severity.WARNING
    assert finding.field == "training.offload.parameters" and "Valid only with stage 3" in finding.message
    ok = {"parallelism": {"zero_stage": 3}, "training": {"framework": "deepspeed", "offload": {"parameters": True}}}
    assert fired(ok) == []


def test_deepspeed_offloads_the_optimizer_from_zero_1() -> None:
    bad = {"parallelism": {"zero_stage": 0}, "training": {"framework": "deepspeed", "offload": {"optimizer": True}}}
    (finding,) = fired(bad)
    assert finding.field == "training.offload.optimizer"
    assert fired({"training": {"framework": "deepspeed", "offload": {"optimizer": True}}}) == []


def test_deepspeed_shards_over_the_whole_data_parallel_group() -> None:
    # tensor 2 of 8: data 4; data_shard 2 is HSDP, which DeepSpeed 0.19 cannot do.
    (finding,) = fired({"parallelism": {"data_shard": 2}, "training": {"framework": "deepspeed"}})
    assert finding.field == "parallelism.data_shard"
    assert fired({"parallelism": {"data_shard": 2}}) == []


@pytest.mark.parametrize("order", ["tp-cp-pp-dp", "dp-tp-cp-pp"])
def test_torchtitan_lays_ranks_out_in_one_order(order: str) -> None:
    (finding,) = fired({"parallelism": {"order": order}, "training": {"framework": "fsdp2"}})
    assert finding.field == "parallelism.order" and "tp-cp-dp-pp" in finding.message
    assert fired({"parallelism": {"order": order}}) == []


def test_torchtitan_default_order_is_its_own() -> None:
    assert fired({"training": {"framework": "fsdp2"}}) == []


def test_torchtitan_offloads_all_or_nothing() -> None:
    (finding,) = fired({"training": {"framework": "fsdp2", "offload": {"parameters": True}}})
    assert finding.field == "training.offload.parameters"
    both = {"training": {"framework": "fsdp2", "offload": {"parameters": True, "optimizer": True}}}
    assert fired(both) == []
