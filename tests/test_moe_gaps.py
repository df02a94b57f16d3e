"""scripts/moe_gaps.py --implied: each release run's own time per local expert (issue 24)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from planc.perf.validation import read_index
from planc.presets.releases import fitted
from planc.vocab import FitTarget

ROOT = Path(__file__).resolve().parent.parent
RUNS = read_index(str(ROOT / "validation" / "runs.json"))
HOST_FITS = [run for run in RUNS if run.fits is FitTarget.EXPERT_HOST]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("moe_gaps", ROOT / "scripts" / "moe_gaps.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("run", HOST_FITS, ids=[run.id for run in HOST_FITS])
def test_a_fit_run_implies_its_own_fitted_value(run) -> None:  # type: ignore[no-untyped-def]
    # The fit solves τ_e on its run alone, so that run's implied τ_e is the fitted one, as
    # releases.json holds it: to 0.2 %, as the presets' GEMM curves round the refit's e_max to
    # 1e-4 of peak (scripts/refit.py) and the script prices with the presets.
    row = _script().implied_row(run)
    assert row is not None
    (recipe, _, release, implied), text = row
    held = next(value for key, value in fitted().items() if key == (release, recipe))
    assert held.fit_run == run.id
    assert implied == pytest.approx(held.seconds, rel=2e-3)
    assert f"| {run.id} | fit | {release} | {recipe} |" in text


def test_a_dense_run_has_no_row() -> None:
    dense = next(run for run in RUNS if run.category.value == "dense")
    assert _script().implied_row(dense) is None


def test_a_run_whose_experts_a_graph_holds_has_no_row() -> None:
    # no τ_e applies under the graph (planc.perf.expert_host), so none can be implied
    graphed = next(run for run in RUNS if run.id == "bridge2509-qwen3-30b-a3b-8xgb200-fp8mx")
    assert _script().implied_row(graphed) is None
