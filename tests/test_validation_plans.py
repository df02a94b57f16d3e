"""Every validation run's spec compiles to a plan that `planc verify` accepts.

The corpus spans what planc's users state: every framework, recipe, recompute mode (torchtitan's
per-op `selective-op` included), context-parallel type and dispatcher of published runs. Its
plans must pass the published plan schema and verify's recount from tensor shapes, so a field
the compiler writes and the schema or verify does not know fails here, not in a user's CI."""

from __future__ import annotations

from pathlib import Path

import pytest

from planc.compile.plan import compile_job, plan_json
from planc.perf.validation import Run, read_index
from planc.scoring import analysed, spec_path
from planc.verify import render, verify_text

from conftest import ROOT

INDEX = ROOT / "validation" / "runs.json"
RUNS = read_index(str(INDEX))


@pytest.mark.parametrize("run", RUNS, ids=[run.id for run in RUNS])
def test_the_runs_plan_verifies(run: Run) -> None:
    _, analysis = analysed(spec_path(str(INDEX), run))
    result = verify_text(plan_json(compile_job(analysis)))
    assert result.ok, render(result)


def test_the_index_is_read() -> None:
    assert len(RUNS) >= 100 and Path(INDEX).is_file()
