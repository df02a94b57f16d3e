"""PLC043: the GPU runs the FP8/FP4 recipe (Transformer Engine's and torchao's device checks).

Base: llama3-8b-1node (8 H100 SXM, Hopper, compute capability 9.0).
"""

from __future__ import annotations

import pytest

from planc.findings import Severity

from conftest import check_overlay, check_text, rules_fired, spec_text, value_position


def fp8(recipe: str | None, gpu: str | None = None, precision: str = "fp8") -> dict[str, object]:
    training: dict[str, object] = {"precision": precision}
    if recipe is not None:
        training["fp8"] = {"recipe": recipe}
    out: dict[str, object] = {"training": training}
    if gpu is not None:
        out["hardware"] = {"gpu": gpu}
    return out


def test_mxfp8_on_hopper_quotes_transformer_engine() -> None:
    text = spec_text(fp8("mxfp8"))
    result = check_text(text)
    assert rules_fired(result) == {"PLC043"}
    (finding,) = result.findings
    assert finding.severity is Severity.ERROR
    assert finding.field == "training.fp8.recipe"
    assert "compute capability 10.0 or higher required for MXFP8" in finding.message
    assert "h100-sxm" in finding.message and "Blackwell" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "    recipe: mxfp8")


@pytest.mark.parametrize("gpu", ["b200", "gb200-nvl72", "b300", "gb300-nvl72"])
def test_blackwell_runs_mxfp8(gpu: str) -> None:
    assert "PLC043" not in rules_fired(check_overlay(fp8("mxfp8", gpu)))


def test_nvfp4_needs_blackwell() -> None:
    result = check_overlay(fp8(None, precision="fp4", gpu="b200"))
    assert "PLC043" not in rules_fired(result)
    # H100 has no FP4 peak: the loader refuses the precision first (PLC109)
    assert rules_fired(check_overlay(fp8(None, precision="fp4"))) == {"PLC109"}


@pytest.mark.parametrize("recipe", ["delayed", "current", "blockwise"])
def test_hopper_runs_the_per_tensor_and_block_recipes(recipe: str) -> None:
    assert "PLC043" not in rules_fired(check_overlay(fp8(recipe)))


def test_mi300x_refuses_mxfp8_and_block_scaling() -> None:
    for recipe, words in (("mxfp8", "gfx950"), ("blockwise", "compute capability 9.0")):
        (finding,) = [
            f for f in check_overlay(fp8(recipe, "mi300x")).findings if f.rule == "PLC043"
        ]
        assert words in finding.message


def test_a100_has_no_fp8_tensor_cores() -> None:
    result = check_overlay(fp8("current", "a100-80gb"))
    assert rules_fired(result) == {"PLC109"}
    (finding,) = result.findings
    assert finding.field == "training.precision" and "a100-80gb" in finding.message


def test_custom_gpu_with_an_fp4_peak_is_taken_as_blackwell() -> None:
    gpu = {
        "name": "custom-blackwell",
        "memory_gb": 180,
        "bf16_tflops": 2250,
        "fp8_tflops": 4500,
        "fp4_tflops": 9000,
        "memory_bandwidth_gbs": 8000,
        "intra_node": {"bandwidth_gbs": 900, "latency_us": 1.0},
        "inter_node": {"bandwidth_gbs": 50, "latency_us": 5.0},
    }
    training = {"precision": "fp8", "fp8": {"recipe": "mxfp8"}}
    fired = rules_fired(check_overlay({"hardware": {"gpu": gpu}, "training": training}))
    assert "PLC109" not in fired and "PLC043" not in fired
    del gpu["fp4_tflops"]
    fired = rules_fired(check_overlay({"hardware": {"gpu": gpu}, "training": training}))
    assert "PLC043" in fired
