"""PLC030: training.framework runs the pipeline schedule parallelism.pipeline_schedule names.

Base: llama3-70b-8x8: 80 layers, tensor 8, pipeline 4, data 2. global_batch 8 gives m = 4, whose
bubble 3/7 = 43 % rules.max_bubble 0.5 lets through, and whose GPipe activations (4 micro-batches
on every stage) fit.
"""

from __future__ import annotations

import pytest

from planc.findings import Severity

from conftest import check_overlay, check_text, rules_fired, spec_text, value_position

BASE = "llama3-70b-8x8.yaml"


def overlay(schedule: str | None, framework: str | None = None) -> dict[str, object]:
    out: dict[str, dict[str, object]] = {
        "parallelism": {},
        "training": {"global_batch": 8},
        "rules": {"max_bubble": 0.5},
    }
    if schedule is not None:
        out["parallelism"]["pipeline_schedule"] = schedule
    if framework is not None:
        out["training"]["framework"] = framework
    return dict(out)


def test_megatron_has_no_gpipe() -> None:
    text = spec_text(overlay("gpipe"), BASE)
    result = check_text(text)
    assert rules_fired(result) == {"PLC030"}
    (finding,) = result.findings
    assert finding.severity is Severity.ERROR
    assert finding.field == "parallelism.pipeline_schedule"
    assert "Megatron-LM" in finding.message and "GPipe" in finding.message
    assert "framework: fsdp2" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "  pipeline_schedule: gpipe")


def test_torchtitan_runs_gpipe() -> None:
    assert "PLC030" not in rules_fired(check_overlay(overlay("gpipe", "fsdp2"), BASE))


@pytest.mark.parametrize("framework", ["megatron", "fsdp2", "deepspeed"])
def test_every_framework_runs_a_named_1f1b(framework: str) -> None:
    assert "PLC030" not in rules_fired(check_overlay(overlay("1f1b", framework), BASE))


def test_deepspeed_has_no_named_interleaved_schedule() -> None:
    # DeepSpeed's PipelineEngine runs its TrainSchedule (1F1B) only. 80 layers over 4 × 2 chunks.
    spec = overlay("interleaved-1f1b", "deepspeed")
    spec["parallelism"] = {"pipeline_schedule": "interleaved-1f1b", "virtual_stages": 2}
    result = check_overlay(spec, BASE)
    (finding,) = [f for f in result.findings if f.rule == "PLC030"]
    assert "DeepSpeed" in finding.message


def test_the_interleaved_default_of_virtual_stages_is_checked_too() -> None:
    # No pipeline_schedule: virtual_stages 2 picks interleaved 1F1B, which DeepSpeed's
    # PipelineEngine (TrainSchedule, a 1F1B) does not run (issue 28: defaults that run).
    spec = overlay(None, "deepspeed")
    spec["parallelism"] = {"virtual_stages": 2}
    text = spec_text(spec, BASE)
    (finding,) = [f for f in check_text(text).findings if f.rule == "PLC030"]
    assert finding.severity is Severity.ERROR
    assert finding.field == "parallelism.virtual_stages"
    assert "DeepSpeed" in finding.message and "interleaved" in finding.message.lower()
    assert "virtual_stages: 1" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "  virtual_stages: 2")


@pytest.mark.parametrize("framework", ["megatron", "fsdp2"])
def test_the_interleaved_default_runs_on_megatron_and_torchtitan(framework: str) -> None:
    spec = overlay(None, framework)
    spec["parallelism"] = {"virtual_stages": 2}
    assert "PLC030" not in rules_fired(check_overlay(spec, BASE))


def test_one_stage_runs_no_pipeline_schedule() -> None:
    # pipeline 1: 8 × 1 × 8 = 64; 80 layers on one stage.
    spec = overlay("gpipe")
    spec["parallelism"] = {"pipeline_schedule": "gpipe", "pipeline": 1, "data": 8}
    assert "PLC030" not in rules_fired(check_overlay(spec, BASE), include_info=True)
