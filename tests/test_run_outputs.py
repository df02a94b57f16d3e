"""The run in planc's outputs (issue 29): explain's section and JSON, the report's section; and
nothing new for a spec that asks for no run."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from planc.cli.main import main
from tests.conftest import EXAMPLES

LLAMA3 = EXAMPLES / "llama3-405b-16384xh100-run.yaml"
# Llama 3.1 405B model card: 30.84M H100 GPU-hours of training (Meta, 2024).
PUBLISHED_GPU_HOURS = 30.84e6


def _explain(path: Path, *extra: str) -> str:
    out = CliRunner().invoke(main, ["explain", str(path), *extra])
    assert out.exit_code == 0, out.output
    return out.stdout


def test_llama3_405b_explain_prints_gpu_hours_and_goodput() -> None:
    """The published run: 15.6T tokens on 16,384 H100 with its batch ramp. planc's GPU-hours
    are 16,384 × the wall time, the wall time the compute over the goodput; the compute alone
    is above the model card's 30.84M GPU-hours (planc's step on this layout is at 33 % MFU,
    the paper's 38–43 %, Table 4; docs/search.md), and the goodput near Llama 3's ">90% effective
    training time"."""
    text = _explain(LLAMA3)
    data = json.loads(_explain(LLAMA3, "--format", "json"))["run"]
    assert data["tokens"] == 15_600_000_000_000
    # 252M at 512 × 8192 a step, 2.618T at 1024 × 8192, the rest at 2048 × 8192 (each ⌈⌉)
    assert [p["steps"] for p in data["phases"]] == [61, 312_090, 773_773]
    assert data["gpu_hours"] == 16_384 * data["wall_s"] / 3600
    assert abs(data["wall_s"] - data["compute_s"] / data["goodput"]) < 1e-6 * data["wall_s"]
    assert 0.90 < data["goodput"] < 0.95
    compute_hours = 16_384 * data["compute_s"] / 3600
    # The example's layout (full recompute, a 1F1B bubble) is slower than Meta's run, never
    # faster; planc's H100 model came within 7 % on NVIDIA's dense runs (docs/validation.md),
    # so the gap is the layout's: under 1.6× the model card.
    assert PUBLISHED_GPU_HOURS < compute_hours < 1.6 * PUBLISHED_GPU_HOURS
    assert f"GPU-hours: {data['gpu_hours']:,.0f}" in text
    assert re.search(rf"goodput: {data['goodput']:.1%}", text)
    # 14 bytes a parameter of 405.85B parameters: 5.68 TB (landscape §5.1)
    assert abs(data["checkpoint"]["total_bytes"] / 5.682e12 - 1) < 1e-3


def test_a_spec_without_a_run_explains_as_before() -> None:
    spec = EXAMPLES / "llama3-70b-8x8.yaml"
    assert "the run:" not in _explain(spec)
    assert "run" not in json.loads(_explain(spec, "--format", "json"))


def test_the_report_shows_the_run_only_when_asked(tmp_path: Path) -> None:
    for spec, asked in ((LLAMA3, True), (EXAMPLES / "llama3-8b-1node.yaml", False)):
        page = tmp_path / "r.html"
        out = CliRunner().invoke(main, ["report", str(spec), "-o", str(page)])
        assert out.exit_code == 0, out.output
        html = page.read_text(encoding="utf-8")
        assert ("<section id='run'>" in html) is asked
        assert ('"run":' in html) is asked


def test_a_checkpoint_without_a_length_shows_the_checkpoint_alone(tmp_path: Path) -> None:
    from tests.conftest import spec_text

    spec = tmp_path / "spec.yaml"
    spec.write_text(
        spec_text({"hardware": {"storage": {"write_gbs": 100}}, "checkpoint": {}}),
        encoding="utf-8",
    )
    text = _explain(spec)
    assert "no length given" in text and "goodput:" in text
    assert "GPU-hours" not in text and "saves" not in text
    data = json.loads(_explain(spec, "--format", "json"))["run"]
    assert data["steps"] == 0 and data["phases"] == [] and data["goodput"] > 0.99
