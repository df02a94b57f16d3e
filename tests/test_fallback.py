"""Fallback plans for lost nodes (issue 29): the keep plan keeps the model-parallel layout and
moves only d, the micro-batch and ZeRO, its global batch the nearest multiple of d'."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner

from planc.cli.main import main
from planc.cli.search import Request, setup_of
from planc.search.fallback import fallbacks_for, keep_data, nearest_batch
from planc.spec.load import load_text
from tests.conftest import spec_text

THREE_NODES = {
    "hardware": {"nodes": 3, "hosts": []},
    "parallelism": {"tensor": 2},
    "training": {"global_batch": 60},
}


def test_keep_data_idles_what_does_not_make_a_whole_replica() -> None:
    """t·p·c = 64 on 8-GPU nodes: 127 nodes (1,016 GPUs) hold ⌊1016/64⌋ = 15 replicas on 120
    nodes; 3 GPUs a replica on 8-GPU nodes need d' with 3·d' a multiple of 8."""
    assert keep_data(1016, 64, 8) == 15
    assert keep_data(7 * 8, 32, 8) == 1
    assert keep_data(16, 3, 8) == 0 or (keep_data(16, 3, 8) * 3) % 8 == 0
    assert keep_data(24, 3, 8) == 8


@pytest.mark.parametrize(
    ("batch", "data", "expected"), [(1536, 15, 1530), (66, 8, 64), (68, 8, 72), (5, 8, 8)]
)
def test_nearest_batch(batch: int, data: int, expected: int) -> None:
    """1536 lies between 1530 = 102·15 and 1545: 1530 is 6 away, 1545 nine; 68 is 4 from 64
    and from 72 (ties take the larger); a batch below d' takes d'."""
    assert nearest_batch(batch, data) == expected


def _setup(overlay: dict[str, object]) -> tuple[object, object]:
    loaded = load_text("spec.yaml", spec_text(overlay))
    assert loaded.job is not None, loaded.findings
    return setup_of(loaded, Request("spec.yaml")), loaded.job


def test_one_node_lost_keeps_the_tensor_split_and_moves_the_batch() -> None:
    """llama3-8b on 3 nodes, t = 2, d = 12, B = 60. Less one node: 16 GPUs, d' = 8, and 60
    lies 4 from 56 and from 64: B' = 64 (+6.7 %); the keep plan runs t = 2 on both nodes."""
    setup, job = _setup(THREE_NODES)
    keep, relayout = fallbacks_for(setup, job, 1)  # type: ignore[arg-type]
    assert keep.values is not None
    assert (keep.nodes, keep.global_batch, keep.data) == (2, 64, 8)
    assert keep.values["tensor"] == 2 and keep.values["pipeline"] == 1
    assert keep.drift == pytest.approx(4 / 60)
    assert relayout.kind == "re-layout" and relayout.global_batch == 64
    # the re-layout searched every axis: it is at least as fast as keeping the layout
    assert relayout.values is not None and relayout.step_time_s <= keep.step_time_s * (1 + 1e-9)


def test_a_batch_beyond_the_tolerance_has_no_keep_plan() -> None:
    setup, job = _setup(THREE_NODES)
    keep, _ = fallbacks_for(setup, job, 1, tolerance=0.02)  # type: ignore[arg-type]
    assert keep.values is None and "beyond ±2%" in keep.reason


def test_search_lost_nodes_lists_the_fallbacks(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "spec.yaml"
    path.write_text(spec_text({**THREE_NODES, "training": {"global_batch": 60, "tokens": 10**9}}))
    out = CliRunner().invoke(main, ["search", str(path), "--lost-nodes", "1", "--format", "json"])
    assert out.exit_code == 0, out.output
    plans = json.loads(out.stdout)["fallbacks"]
    assert [(p["lost_nodes"], p["kind"]) for p in plans] == [(1, "keep"), (1, "re-layout")]
    keep = plans[0]
    assert keep["nodes"] == 2 and keep["global_batch"] == 64
    # the remaining run at B' = 64: ⌈10^9 / (64·8192)⌉ = 1,908 steps on 16 GPUs
    assert keep["gpu_hours"] == pytest.approx(16 * 1908 * keep["step_time_s"] / 3600)
    text = CliRunner().invoke(main, ["search", str(path), "--lost-nodes", "2"]).stdout
    assert "fallback plans" in text
    assert [line.split()[:3] for line in text.splitlines() if line.startswith("  −")] == [
        ["−1", "node", "keep"],
        ["−1", "node", "re-layout"],
        ["−2", "nodes", "keep"],
        ["−2", "nodes", "re-layout"],
    ]


def test_compile_writes_the_fallbacks_beside_the_plan(tmp_path: object) -> None:
    """planc compile --fallbacks 1: fallbacks.json in the plan directory, listed in its
    manifest, the keep plan as planc search finds it; the plan itself verifies as before."""
    from pathlib import Path

    root = Path(str(tmp_path))
    spec = root / "spec.yaml"
    spec.write_text(spec_text(THREE_NODES))
    out = CliRunner().invoke(
        main, ["compile", str(spec), "-o", str(root / "plan"), "--fallbacks", "1"]
    )
    assert out.exit_code == 0, out.output
    data = json.loads((root / "plan" / "fallbacks.json").read_text(encoding="utf-8"))
    keep = data["fallbacks"][0]
    assert (keep["kind"], keep["nodes"], keep["global_batch"]) == ("keep", 2, 64)
    assert "fallbacks.json" in (root / "plan" / ".planc-plan").read_text(encoding="utf-8")
    assert CliRunner().invoke(main, ["verify", str(root / "plan")]).exit_code == 0


def test_search_can_rank_by_time_to_train() -> None:
    """--objective time-to-train ranks by the step over the goodput of each candidate's
    checkpoint: with the replicated weights written by data-parallel rank 0 onto a slow node
    link, a layout's checkpoint time depends on its Ψ_r. The ranked value is each candidate's
    step time divided by the goodput `planc explain` gives for it; the default objective ranks
    by the step alone."""
    from planc.analysis import analyse, estimate_step
    from planc.plannable import plannable
    from planc.run import estimate_run
    from planc.search.evaluate import base_job, candidate_job
    from planc.search.run import search

    overlay = {
        "hardware": {"storage": {"write_gbs": 10, "node_write_gbs": 0.2}},
        "checkpoint": {"fully_parallel_save": False},
        "reliability": {"gpu_mtbf_hours": 500},
        "training": {"tokens": 10**10},
    }
    loaded = load_text("spec.yaml", spec_text(overlay))
    assert loaded.job is not None
    request = Request("spec.yaml", allow=("micro_batch=1", "virtual_stages=1"))
    for objective in ("step", "time-to-train"):
        setup = setup_of(loaded, dataclasses.replace(request, objective=objective))
        result = search(setup, 4)
        keys = [r.metrics.rank_s for r in result.results]
        assert keys == sorted(keys)
        for ranked in result.results:
            values = result.space.candidate(ranked.verdict.index)
            job = candidate_job(base_job(setup), result.space, values)
            plan = plannable(job)
            assert not isinstance(plan, tuple)
            analysis = analyse(plan)
            step = estimate_step(analysis)
            run = estimate_run(analysis, step)
            assert run.goodput is not None and run.goodput < 1
            expected = step.step_time_s if objective == "step" else step.step_time_s / run.goodput
            assert ranked.metrics.rank_s == pytest.approx(expected, rel=1e-9)
