"""NeMo 25.09 (training.framework_release nemo-25.09): what its Megatron-Core 0.14.0 lacks.

Read from core_v0.14.0 (23e00ed09): no softmax_type in TransformerConfig (attention sinks), no
moe_flex_dispatcher_backend (HybridEP), CUDA graphs only of whole layers, attention
(cuda_graph_scope 'attn') or the iteration, and no megatron/core/optimizer/muon.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from conftest import check_overlay, rules_fired

OLD = {"framework_release": "nemo-25.09"}
MOE = "mixtral-8x7b-64xh100.yaml"


def _finding(result: Any, rule: str) -> str:
    return next(f.message for f in result.findings if f.rule == rule)


def test_the_release_runs_what_0_14_has() -> None:
    plain = check_overlay({"training": OLD})
    assert not {"PLC048", "PLC074"} & rules_fired(plain)
    attention = {
        "training": {**OLD, "cuda_graph": {"impl": "transformer_engine", "modules": ["attn"]}}
    }
    assert "PLC048" not in rules_fired(check_overlay(attention))


@pytest.mark.parametrize(
    ("overlay", "base", "words"),
    [
        (
            {"model": {"attention_sinks": True}, "training": OLD},
            "llama3-8b-1node.yaml",
            "attention sinks",
        ),
        ({"parallelism": {"expert_dispatcher": "hybridep"}, "training": OLD}, MOE, "HybridEP"),
        (
            {
                "training": {
                    **OLD,
                    "cuda_graph": {"impl": "transformer_engine", "modules": ["attn", "moe_router"]},
                }
            },
            MOE,
            "CUDA graphs of moe_router",
        ),
    ],
)
def test_what_0_14_lacks_is_refused(overlay: dict[str, Any], base: str, words: str) -> None:
    result = check_overlay(overlay, base)
    assert "PLC048" in rules_fired(result)
    message = _finding(result, "PLC048")
    assert "Megatron-Core 0.14.0 (NeMo 25.09)" in message and words in message
    # the same spec at the next release has them
    later = {**overlay, "training": {**overlay["training"], "framework_release": "nemo-25.11"}}
    assert "Megatron-Core 0.14.0" not in " ".join(
        f.message for f in check_overlay(later, base).findings
    )


def test_muon_is_not_in_0_14() -> None:
    result = check_overlay(
        {"training": {**OLD, "optimizer": "muon"}, "parallelism": {"zero_stage": 1}}
    )
    assert "PLC074" in rules_fired(result)
    assert "has no Muon" in _finding(result, "PLC074")
