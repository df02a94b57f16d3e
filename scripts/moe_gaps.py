"""The time planc does not price on each MoE validation run, per layer and micro-batch.

    python scripts/moe_gaps.py            # one row per MoE validation run, smallest gap first
    python scripts/moe_gaps.py --implied  # each release run's own τ_e, by dispatcher

gap = measured − predicted seconds per step, spread over the m micro-batches and the L/p layers
each pipeline rank runs per micro-batch (MTP layers counted): milliseconds per layer and
micro-batch, forward and backward together. A time that grows with the tokens a micro-batch
carries is the GPU's; one that stays put when the tokens change and grows with the experts a
rank holds (E/ep) is per kernel, on the host: docs/explain.md, "MoE runs of 2025's software".

--implied: for every run (fit or validation) of a Megatron-LM release whose MoE layers carry a
time per local expert (`planc.perf.expert_host`), the τ_e that would make planc's step exactly
the measured one (`planc.fitting.solve_expert_host`, the fit's own solver), beside the release's
fitted τ_e and the token dispatcher: how far one value per release and recipe is from each run.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

# Runnable as a script from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planc.analysis import estimate_step
from planc.fitting import price_at_expert_host, solve_expert_host
from planc.perf.expert_host import experts_graphed, release_key
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


def implied_row(run: Run) -> tuple[tuple[str, str, str, float], str] | None:
    """(sort key, the row's text) of one run of a release with a fitted τ_e; None otherwise, and
    where a CUDA graph holds the experts (no τ_e applies there)."""
    _, analysis = analysed(spec_path(INDEX, run))
    plan = analysis.plan
    key = release_key(plan)
    experts = plan.dims.experts
    fitted = None if key is None else analysis.efficiency.expert_host.get(key)
    if key is None or experts is None or fitted is None or experts_graphed(plan):
        return None
    predict = partial(price_at_expert_host, analysis, analysis.efficiency, key)
    try:
        implied = solve_expert_host(predict, run.measured_s)
        said = f"{implied * 1e3:.3f}"
    except ValueError:  # no τ_e up to a second per expert reaches the measured step
        implied, said = float("inf"), "> 1000"
    dispatcher = plan.layout.dispatcher
    text = (
        f"| {run.id} | {run.role.value} | {key[0]} | {key[1]} | {dispatcher} | "
        f"{plan.training.b} | {experts.E // experts.ep} | {said} | {fitted * 1e3:.3f} |"
    )
    return (key[1], dispatcher, key[0], implied), text


def implied_table() -> None:
    """Print every release run's implied τ_e (the module docstring), by recipe and dispatcher."""
    print(
        "| run | role | release | recipe | dispatcher | micro-batch | experts per rank | "
        "implied τ_e, ms | fitted τ_e, ms |"
    )
    print("|---|---|---|---|---|---:|---:|---:|---:|")
    rows = [row for row in (implied_row(run) for run in read_index(INDEX)) if row is not None]
    for _, text in sorted(rows):
        print(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--implied", action="store_true", help="each release run's own τ_e")
    if parser.parse_args().implied:
        implied_table()
        return 0
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
