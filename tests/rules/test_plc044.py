"""PLC044: training.fp8 is a combination the framework accepts (Megatron's own refusals).

Base: llama3-8b-1node (Llama 3 8B: 32 layers, h = 4096, 32 heads of 128, ffn 14,336; 8 H100,
tensor 1 ... as shipped; ZeRO-1).
"""

from __future__ import annotations

from typing import Any

from conftest import check_overlay, rules_fired


def findings(training: dict[str, Any], **sections: dict[str, Any]) -> list[Any]:
    result = check_overlay({"training": training, **sections})
    return [f for f in result.findings if f.rule == "PLC044"]


def test_fp8_section_needs_an_fp8_precision() -> None:
    (finding,) = findings({"precision": "bf16", "fp8": {"recipe": "current"}})
    assert finding.field == "training.fp8" and "bf16" in finding.message


def test_delayed_scaling_keeps_no_bf16_layers() -> None:
    (finding,) = findings({"precision": "fp8", "fp8": {"recipe": "delayed", "first_last_bf16": 1}})
    assert "Delayed scaling does not support first / last layer in BF16" in finding.message
    assert not findings({"precision": "fp8", "fp8": {"recipe": "current", "first_last_bf16": 1}})


def test_bf16_layers_at_most_one_stage() -> None:
    # 32 layers over pipeline 4: at most 8 at each end
    pipeline = {"parallelism": {"tensor": 2, "pipeline": 4}}
    ok = findings({"precision": "fp8", "fp8": {"recipe": "current", "first_last_bf16": 8}}, **pipeline)
    assert not ok
    (finding,) = findings(
        {"precision": "fp8", "fp8": {"recipe": "current", "first_last_bf16": 9}}, **pipeline
    )
    assert "32 // 4 = 8" in finding.message


def test_param_gather_needs_the_distributed_optimizer() -> None:
    (finding,) = findings(
        {"precision": "fp8", "fp8": {"param_gather": True}}, parallelism={"zero_stage": 0}
    )
    assert "--fp8-param-gather only supported with distributed optimizer" in finding.message
    assert not findings({"precision": "fp8", "fp8": {"param_gather": True}}, parallelism={"zero_stage": 1})


def test_torchao_recipes_need_torchtitan() -> None:
    (finding,) = findings({"precision": "fp8", "fp8": {"recipe": "rowwise"}})
    assert "torchao" in finding.message and "framework: fsdp2" in finding.fix
    assert not findings({"precision": "fp8", "framework": "fsdp2", "fp8": {"recipe": "rowwise"}})


def test_fsdp2_gathers_in_fp8_only_with_tensorwise() -> None:
    base = {"precision": "fp8", "framework": "fsdp2"}
    (finding,) = findings({**base, "fp8": {"recipe": "rowwise", "param_gather": True}})
    assert "high precision" in finding.message
    assert not findings({**base, "fp8": {"recipe": "tensorwise", "param_gather": True}})


def test_fp4_is_nvfp4() -> None:
    hardware = {"hardware": {"gpu": "b200"}}
    (finding,) = findings({"precision": "fp8", "fp8": {"recipe": "nvfp4"}}, **hardware)
    assert "nvfp4" in finding.message
    assert not findings({"precision": "fp4"}, **hardware)


def test_blockwise_needs_dimensions_divisible_by_128() -> None:
    # ffn 14,336 / 8 = 1,792 = 14·128 divides; tensor 8 is within the node. A custom width does not:
    assert not findings({"precision": "fp8", "fp8": {"recipe": "blockwise"}})
    (finding,) = findings(
        {"precision": "fp8", "fp8": {"recipe": "blockwise"}},
        model={"preset": "llama3-8b", "ffn_hidden": 14_400},
    )
    assert "divisible by 128" in finding.message and "ffn_hidden/tensor" in finding.message


def test_bf16_specs_are_not_looked_at() -> None:
    assert "PLC044" not in rules_fired(check_overlay(None))


def test_bf16_moments_need_megatrons_distributed_optimizer() -> None:
    (finding,) = findings({"precision": "fp8", "framework": "fsdp2", "fp8": {"recipe": "tensorwise", "moments": "bf16"}})
    assert "precision-aware" in finding.message
    assert not findings({"precision": "fp8", "fp8": {"recipe": "current", "moments": "bf16"}})
