"""PLC048: a layout Megatron-LM starts with: its optimizer offload needs the distributed optimizer
and adam (megatron-core 0.19.2 validate_args, OptimizerConfig), and it has no parameter offload.

Base: llama3-8b-1node (8 H100, tensor 2, ZeRO-1, adam).
"""

from __future__ import annotations

from typing import Any

import pytest

from planc.findings import Severity

from conftest import check_overlay, check_text, spec_text, value_position


def findings(overlay: dict[str, Any]) -> list[Any]:
    return [f for f in check_overlay(overlay).findings if f.rule == "PLC048"]


def test_megatron_has_no_parameter_offload() -> None:
    text = spec_text({"training": {"offload": {"parameters": True}}})
    (finding,) = [f for f in check_text(text).findings if f.rule == "PLC048"]
    assert finding.severity is Severity.ERROR
    assert finding.field == "training.offload.parameters"
    assert "Megatron-LM" in finding.message and "framework: deepspeed" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "    parameters: true")


def test_optimizer_offload_runs_on_the_distributed_optimizer_with_adam() -> None:
    assert findings({"training": {"offload": {"optimizer": True}}}) == []


def test_optimizer_offload_without_the_distributed_optimizer_is_refused() -> None:
    (finding,) = findings(
        {"parallelism": {"zero_stage": 0}, "training": {"offload": {"optimizer": True}}}
    )
    assert "distributed optimizer" in finding.message and "zero_stage: 1" in finding.fix


def test_optimizer_offload_with_sgd_is_refused() -> None:
    (finding,) = findings({"training": {"optimizer": "sgd", "offload": {"optimizer": True}}})
    assert "only supported with adam" in finding.message


@pytest.mark.parametrize("framework", ["deepspeed", "fsdp2"])
def test_other_frameworks_are_not_megatrons(framework: str) -> None:
    overlay = {
        "parallelism": {"zero_stage": 3},
        "training": {"framework": framework, "offload": {"optimizer": True, "parameters": True}},
    }
    assert findings(overlay) == []
