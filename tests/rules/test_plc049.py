"""PLC049: a layout DeepSpeed 0.19.6 starts with: its PipelineEngine refuses ZeRO-2/3, AutoEP
refuses expert tensor parallelism and folds experts over tensor parallelism only in a narrow
case, and Ulysses needs at least as many heads as context ranks.

Base: llama3-70b-8x8 (64 H100: tensor 8, pipeline 4, data 2; ZeRO-1) for the pipeline; the
Mixtral example (64 H100: pipeline 4, data 16, expert 8, no tensor) for the experts.
"""

from __future__ import annotations

from typing import Any

import pytest

from planc.findings import Severity

from conftest import check_overlay, rules_fired

DEEPSPEED = {"framework": "deepspeed"}


def fired(overlay: dict[str, Any], base: str, rule: str = "PLC049") -> list[Any]:
    return [f for f in check_overlay(overlay, base).findings if f.rule == rule]


@pytest.mark.parametrize("stage", [2, 3])
def test_pipeline_engine_refuses_zero_2_and_3(stage: int) -> None:
    overlay = {"parallelism": {"zero_stage": stage}, "training": DEEPSPEED}
    (finding,) = fired(overlay, "llama3-70b-8x8.yaml")
    assert finding.severity is Severity.ERROR
    assert finding.field == "parallelism.zero_stage"
    assert "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism" in finding.message
    # The refusal is this rule's error, not PLC011's cost warning.
    assert "PLC011" not in rules_fired(check_overlay(overlay, "llama3-70b-8x8.yaml"))


@pytest.mark.parametrize("framework", ["megatron", "fsdp2"])
def test_zero_2_with_a_pipeline_only_costs_elsewhere(framework: str) -> None:
    overlay = {"parallelism": {"zero_stage": 2}, "training": {"framework": framework}}
    found = rules_fired(check_overlay(overlay, "llama3-70b-8x8.yaml"))
    assert "PLC011" in found and "PLC049" not in found


def test_zero_1_with_a_pipeline_starts() -> None:
    overlay = {"parallelism": {"zero_stage": 1}, "training": DEEPSPEED}
    assert fired(overlay, "llama3-70b-8x8.yaml") == []


def test_autoep_refuses_expert_tensor_parallelism() -> None:
    # tensor 1, expert_tensor 2: 64 / (2 · 8 · 4) = 2 expert data-parallel ranks.
    overlay = {"parallelism": {"expert_tensor": 2}, "training": DEEPSPEED}
    found = fired(overlay, "mixtral-8x7b-64xh100.yaml")
    assert [f.field for f in found] == ["parallelism.expert_tensor"]
    assert "AutoEP" in found[0].message


def test_autoep_folds_experts_over_tensor_only_with_one_stage() -> None:
    # tensor 2, expert_tensor 1, pipeline 4: AutoEP+AutoTP supports pp_size = 1 only.
    overlay = {
        "parallelism": {"tensor": 2, "data": 8, "expert_tensor": 1, "sequence_parallel": True},
        "training": DEEPSPEED,
    }
    found = fired(overlay, "mixtral-8x7b-64xh100.yaml")
    assert [f.field for f in found] == ["parallelism.tensor"]
    assert "pp_size=1 only" in found[0].message


def test_mixtral_with_whole_experts_starts() -> None:
    assert fired({"training": DEEPSPEED}, "mixtral-8x7b-64xh100.yaml") == []


def test_ulysses_needs_heads_per_rank_at_least_context() -> None:
    # Llama 3 8B: 32 heads; tensor 8 leaves 4 per rank, which do not split over context 8
    # (8 ranks, 4 heads: fewer heads than ranks). 1 node of 8 is too small for 8 × 8, so 8 nodes.
    hardware = {"nodes": 8, "hosts": "gpu-{000..007}"}
    bad = {
        "hardware": hardware,
        "parallelism": {"tensor": 8, "context": 8, "data": 1},
        "training": DEEPSPEED,
    }
    (finding,) = fired(bad, "llama3-8b-1node.yaml")
    assert "Number of heads (4) must be larger than sequence parallel size (8)" in finding.message
    good = {**bad, "parallelism": {"tensor": 8, "context": 4, "data": 2}}
    assert fired(good, "llama3-8b-1node.yaml") == []
