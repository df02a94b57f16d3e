"""The time planc does not price on each MoE validation run, per layer and micro-batch.

    python scripts/moe_gaps.py          # one row per MoE validation run, smallest gap first

gap = measured − predicted seconds per step, spread over the m micro-batches and the L/p layers
each pipeline rank runs per micro-batch (MTP layers counted): milliseconds per layer and
micro-batch, forward and backward together. A time that grows with the tokens a micro-batch
carries is the GPU's; one that stays put when the tokens change and grows with the experts a
rank holds (E/ep) is per kernel, on the host: docs/explain.md, "MoE runs of 2025's software".
"""

from __future__ import annotations

import sys
from pathlib import Path

# Runnable as a script from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planc.analysis import estimate_step
from planc.perf.validation import Run, read_index
from planc.scoring import analysed, spec_path
from planc.vocab import RunRole

ROOT = Path(__file__).resolve().parent.parent
INDEX = str(ROOT / "validation" / "runs.json")


def gap_row(run: Run) -> tuple[float, str]:
    """(gap in ms per layer and micro-batch, the row's text) of one MoE run."""
    _, analysis = analysed(spec_path(INDEX, run))
    plan = analysis.plan
    moe = plan.model.moe
    assert moe is not None  # the index's moe category holds MoE models only
    predicted = estimate_step(analysis).step_time_s
    layers = (plan.model.L + plan.model.mtp) / plan.layout.p
    gap_ms = (run.measured_s - predicted) / (plan.m * layers) * 1e3
    routing = "dropless" if moe.capacity_factor is None else f"capacity {moe.capacity_factor:g}"
    recipe = plan.training.fp8_recipe
    precision = recipe.value if recipe is not None else plan.numerics.precision.value
    text = (
        f"| {run.id} | {run.gpu} | {precision} | {moe.E // plan.layout.ep} | {routing} | "
        f"{plan.training.b * plan.training.s:,} | {plan.m} | {layers:.2f} | "
        f"{run.measured_s - predicted:+.2f} | {gap_ms:+.2f} |"
    )
    return gap_ms, text


def main() -> int:
    runs = [
        run
        for run in read_index(INDEX)
        if run.category.value == "moe" and run.role is RunRole.VALIDATION
    ]
    print(
        "| run | gpu | precision | experts per rank | routing | tokens per micro-batch | m | "
        "layers per rank | gap, s | gap per layer and micro-batch, ms |"
    )
    print("|---|---|---|---:|---|---:|---:|---:|---:|---:|")
    for _, text in sorted(gap_row(run) for run in runs):
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
