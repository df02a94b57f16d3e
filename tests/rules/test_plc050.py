"""PLC050: a layout torchtitan 0.3.0 starts with: bf16 or fp32 only, a sequence that splits into
2 × context chunks (times tensor under sequence parallelism), and no expert tensor parallelism.

Base: llama3-8b-1node (8 H100, tensor 2 with sequence parallelism, ZeRO-1, seq_len 8,192).
"""

from __future__ import annotations

from typing import Any

from planc.findings import Severity

from conftest import check_overlay

FSDP2 = {"framework": "fsdp2"}


def fired(overlay: dict[str, Any], base: str = "llama3-8b-1node.yaml") -> list[Any]:
    return [f for f in check_overlay(overlay, base).findings if f.rule == "PLC050"]


def test_torchtitan_has_no_fp16() -> None:
    (finding,) = fired({"training": {**FSDP2, "precision": "fp16"}})
    assert finding.severity is Severity.ERROR and finding.field == "training.precision"
    assert fired({"training": {**FSDP2, "precision": "bf16"}}) == []


def test_context_parallel_sequence_splits_into_two_chunks_per_rank() -> None:
    # tensor 2 (SP) × 2 × context 2 = 8: 8,192 divides, 8,196 = 4 · 2,049 does not (but it
    # splits over context 2 and then tensor 2, so PLC009 and PLC013 pass).
    par = {"parallelism": {"context": 2}}
    assert fired({**par, "training": FSDP2}) == []
    (finding,) = fired({**par, "training": {**FSDP2, "seq_len": 8196}})
    assert finding.field == "training.seq_len" and "divisible by 8" in finding.message


def test_megatron_takes_that_sequence() -> None:
    assert fired({"parallelism": {"context": 2}, "training": {"seq_len": 8196}}) == []


def test_torchtitan_has_no_expert_tensor_parallelism() -> None:
    overlay = {"parallelism": {"expert_tensor": 2, "zero_stage": 1}, "training": FSDP2}
    found = fired(overlay, "mixtral-8x7b-64xh100.yaml")
    assert [f.field for f in found] == ["parallelism.expert_tensor"]
