"""The per-operation step model as users reach it: explain's estimate, hardware.calibration, a
flat training.efficiency, and PLC019/PLC020 reading the same times."""

from __future__ import annotations

import json
from pathlib import Path

from planc.analysis import analyse, estimate_step
from planc.presets.efficiency import for_gpu, to_json
from planc.spec.load import load_path

from conftest import EXAMPLES, check_text, job_of, plannable_of, spec_text


def _spec(tmp_path: Path, overlay: dict[str, object]) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(overlay, "llama3-70b-8x8.yaml"))
    return spec


def test_calibration_file_is_read_relative_to_the_spec(tmp_path: Path) -> None:
    # A calibration whose GEMMs reach half the preset's efficiency: compute takes longer.
    preset = for_gpu("h100-sxm")
    slower = preset.with_gemm(peak_fraction=preset.gemm.peak_fraction / 2)
    (tmp_path / "cal").mkdir()
    (tmp_path / "cal" / "h100.json").write_text(json.dumps(to_json(slower)))
    spec = _spec(tmp_path, {"hardware": {"calibration": "cal/h100.json"}})
    calibrated = plannable_of(load_path(str(spec)).job)
    plain = job_of(None, "llama3-70b-8x8.yaml")
    slow, fast = estimate_step(analyse(calibrated)), estimate_step(analyse(plain))
    assert slow.compute_s > 1.5 * fast.compute_s
    assert "hardware.calibration" in slow.model and "efficiency.json" in fast.model


def test_an_unusable_calibration_file_is_a_located_finding(tmp_path: Path) -> None:
    spec = _spec(tmp_path, {"hardware": {"calibration": "missing.json"}})
    loaded = load_path(str(spec))
    assert loaded.job is None
    (finding,) = [f for f in loaded.findings if f.field == "hardware.calibration"]
    assert finding.rule == "PLC110" and "missing.json" in finding.message
    text = spec.read_text()
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "calibration:" in row)
    assert finding.line == line
    (tmp_path / "bad.json").write_text('{"gemm": {}}')
    spec = _spec(tmp_path, {"hardware": {"calibration": "bad.json"}})
    assert any(f.rule == "PLC110" for f in load_path(str(spec)).findings)


def test_a_flat_efficiency_replaces_the_gemm_curve() -> None:
    curve = estimate_step(analyse(job_of(None, "llama3-70b-8x8.yaml")))
    flat = estimate_step(analyse(job_of({"training": {"efficiency": 0.25}}, "llama3-70b-8x8.yaml")))
    assert flat.compute_s > curve.compute_s and "flat GEMM efficiency 25%" in flat.model


def test_a_flat_efficiency_prices_fp8_gemms_at_that_fraction_of_the_fp8_peak() -> None:
    # training.efficiency is "a flat fraction of the GPU's peak for every matrix multiply": the
    # quantized GEMMs too. Halving it doubles the time of the compute-bound GEMMs, FP8 or not
    # (the HBM-bound ops, the fused attention and the quantization kernels keep theirs): 1.5×
    # here, where FP8 GEMMs left on their own curve would move the step by 5 %.
    fp8 = {"precision": "fp8", "fp8": {"recipe": "current"}}
    half, whole = (
        estimate_step(analyse(job_of({"training": {**fp8, "efficiency": e}}, "llama3-70b-8x8.yaml")))
        for e in (0.3, 0.6)
    )
    assert half.compute_s > 1.4 * whole.compute_s


def test_slow_network_rules_use_the_model_times() -> None:
    # PLC019 (DP reduction longer than backward) on a 1 GB/s network, not on 50 GB/s.
    slow = check_text(
        spec_text(
            {
                "hardware": {"nodes": 8, "hosts": "n{1..8}", "inter_node": {"bandwidth_gbs": 1}},
                "parallelism": {"tensor": 8, "data": 8, "zero_stage": 1},
            }
        )
    )
    assert "PLC019" in {f.rule for f in slow.findings}
    fine = check_text(
        spec_text(
            {
                "hardware": {"nodes": 8, "hosts": "n{1..8}"},
                "parallelism": {"tensor": 8, "data": 8, "zero_stage": 1},
            }
        )
    )
    assert "PLC019" not in {f.rule for f in fine.findings}


def test_explain_breakdown_adds_up() -> None:
    for name in ("llama3-8b-1node.yaml", "llama3-70b-8x8.yaml", "gpt3-175b-1024xa100.yaml"):
        job = plannable_of(load_path(str(EXAMPLES / name)).job)
        step = estimate_step(analyse(job))
        parts = step.compute_s + step.bubble_s + step.exposed_comm_s + step.optimizer_s
        # The step is at least its parts on the busiest stage (another stage's tail may be later).
        assert step.step_time_s >= parts * (1 - 1e-9)
        assert 0 < step.mfu < 1
