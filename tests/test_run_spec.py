"""The run's spec sections (issue 29): resolved into Job.run, defaults sourced, and each
inconsistency a located finding, on the fast path and pydantic's alike."""

from __future__ import annotations

import pytest

from planc.spec.fastcheck import fast_validate
from planc.spec.job import DEFAULT_GPU_MTBF_HOURS
from planc.spec.load import load_text
from planc.spec.models import Spec
from tests.conftest import resolved_of, spec_text

FULL = {
    "hardware": {"storage": {"write_gbs": 100, "node_write_gbs": 10, "node_read_gbs": 20}},
    "training": {"tokens": 10**10, "batch_ramp": [{"global_batch": 32, "tokens": 10**8}]},
    "checkpoint": {"interval": 100, "async_save": True, "model_only_exports": 2},
    "reliability": {"interruptions_per_gpu_day": 0.001, "restart_minutes": 5},
    "cost": {"price_per_gpu_hour": 2.0, "gpu_power_w": 700.0},
}


def test_every_section_resolves() -> None:
    run = resolved_of(FULL).run
    assert (run.tokens, run.steps, [(p.B, p.tokens) for p in run.ramp]) == (
        10**10,
        None,
        [(32, 10**8)],
    )
    assert run.checkpoint is not None and run.checkpoint.format == "megatron-dist"
    assert (run.checkpoint.interval, run.checkpoint.async_save) == (100, True)
    assert run.storage is not None
    # read bandwidth defaults to the write bandwidth; node read as given
    assert (run.storage.read_gbs, run.storage.node_read_gbs) == (100.0, 20.0)
    # 0.001 interruptions a GPU-day is one per 1,000 GPU-days = 24,000 GPU-hours
    assert run.reliability.gpu_mtbf_hours == pytest.approx(24_000)
    assert run.reliability.restart_s == 300
    assert run.cost is not None and run.cost.pue == 1.0
    assert run.asked


def test_the_default_reliability_is_llama3s() -> None:
    """16,384 GPUs × 54 days × 24 h / 419 interruptions = 50,677 GPU-hours."""
    assert abs(DEFAULT_GPU_MTBF_HOURS - 50_677) < 0.5
    assert resolved_of({}).run.reliability.gpu_mtbf_hours == DEFAULT_GPU_MTBF_HOURS


def test_the_fast_path_gives_what_pydantic_gives() -> None:
    import yaml

    data = yaml.safe_load(spec_text(FULL))
    assert fast_validate(data) == Spec.model_validate(data).model_dump()
    data["checkpoint"]["interval"] = "optimal"
    assert fast_validate(data) == Spec.model_validate(data).model_dump()


@pytest.mark.parametrize(
    ("overlay", "rule", "field"),
    [
        ({"training": {"tokens": 10**9, "steps": 10}}, "PLC110", "training.steps"),
        (
            {"training": {"batch_ramp": [{"global_batch": 8, "tokens": 100}]}},
            "PLC110",
            "training.batch_ramp",
        ),
        (
            {"training": {"tokens": 100, "batch_ramp": [{"global_batch": 8, "tokens": 100}]}},
            "PLC110",
            "training.batch_ramp",
        ),
        ({"checkpoint": {}}, "PLC109", "hardware.storage"),
        (
            {"hardware": {"storage": {"write_gbs": 1}}, "checkpoint": {"format": "torch-dcp"}},
            "PLC110",
            "checkpoint.format",
        ),
        (
            {"reliability": {"gpu_mtbf_hours": 1000, "interruptions_per_gpu_day": 0.1}},
            "PLC110",
            "reliability.interruptions_per_gpu_day",
        ),
        ({"checkpoint": {"interval": 0}}, "PLC110", "checkpoint.interval"),
        ({"cost": {"pue": 0.5}}, "PLC110", "cost.pue"),
    ],
)
def test_inconsistent_runs_are_located_findings(
    overlay: dict[str, object], rule: str, field: str
) -> None:
    loaded = load_text("spec.yaml", spec_text(overlay))
    assert loaded.job is None
    found = {(f.rule, f.field) for f in loaded.findings}
    assert (rule, field) in found, loaded.findings
    assert all(f.line >= 1 for f in loaded.findings)
