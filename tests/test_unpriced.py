"""Costs planc knows a run spends and does not price (`planc.perf.unpriced`), and the corpus's
error on the runs that have each, quoted beside the estimate (issue 24, error bars users can
read). The expected figures are read from docs/validation.md's aggregate rows, which
scripts/validation_table.py writes from the scored runs, not from accuracy.json."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from click.testing import CliRunner

from planc.cli.main import main
from planc.outputs.explain import caveats
from planc.perf.unpriced import unpriced_of
from planc.perf.validation import UNPRICED, Run, Scored, aggregates
from planc.vocab import (
    NONE_UNPRICED,
    Generation,
    RunCategory,
    RunFramework,
    RunRole,
    Unpriced,
)

from conftest import ROOT, job_of

MIXTRAL = "mixtral-8x7b-64xh100.yaml"


def torchtitan(**training: Any) -> dict[str, Any]:
    return {
        "parallelism": {"tensor": 1, "sequence_parallel": False, "zero_stage": 3},
        "training": {"framework": "fsdp2", "kernels": "compiled"} | training,
    }


@pytest.mark.parametrize(
    ("overlay", "base", "expected"),
    [
        ({}, "llama3-8b-1node.yaml", ()),
        ({}, MIXTRAL, (Unpriced.HOST_LAUNCHES,)),
        ({"training": {"cuda_graph": {"impl": "local"}}}, MIXTRAL, ()),
        ({"training": {"cuda_graph": {"impl": "full_iteration"}}}, MIXTRAL, ()),
        # under a release, a graph that holds the experts takes its time per expert away: what
        # of it was the GPU's is not priced
        (
            {"training": {"cuda_graph": {"impl": "local"}, "framework_release": "nemo-25.09"}},
            MIXTRAL,
            (Unpriced.GRAPHED_EXPERT_KERNELS,),
        ),
        (
            {"training": {"framework_release": "nemo-25.09"}},
            MIXTRAL,
            (Unpriced.HOST_LAUNCHES,),
        ),
        (
            {"training": {"cuda_graph": {"impl": "transformer_engine", "modules": ["attn"]}}},
            MIXTRAL,
            (Unpriced.HOST_LAUNCHES,),
        ),
        # rowwise on Hopper is priced from torchao's measured table; elsewhere it is not
        (torchtitan(precision="fp8", fp8={"recipe": "rowwise"}), "llama3-8b-1node.yaml", ()),
        (
            torchtitan(precision="fp8", fp8={"recipe": "rowwise"})
            | {"hardware": {"gpu": "b200", "nodes": 1}},
            "llama3-8b-1node.yaml",
            (Unpriced.ROWWISE,),
        ),
        (
            torchtitan(precision="fp8", fp8={"recipe": "rowwise_with_gw_hp"}),
            "llama3-8b-1node.yaml",
            (Unpriced.ROWWISE,),
        ),
        (torchtitan(precision="fp8", fp8={"recipe": "tensorwise"}), "llama3-8b-1node.yaml", ()),
    ],
)
def test_each_mechanism_is_named_where_the_run_has_it(
    overlay: dict[str, Any], base: str, expected: tuple[Unpriced, ...]
) -> None:
    assert unpriced_of(job_of(overlay, base)) == expected


@pytest.mark.parametrize(("context", "wide"), [(2, False), (4, True), (8, True)])
def test_torchs_ring_from_four_ranks(context: int, wide: bool) -> None:
    overlay = torchtitan(seq_len=8192 * context, global_batch=8 // context)
    overlay["parallelism"] |= {"context": context, "data": 8 // context}
    found = unpriced_of(job_of(overlay))
    assert (Unpriced.WIDE_TORCH_RING in found) is wide


def _scored(name: str, error: float, role: RunRole = RunRole.VALIDATION) -> Scored:
    run = Run(
        id=name,
        spec=f"runs/{name}.yaml",
        gpu="h100-sxm",
        generation=Generation.HOPPER,
        category=RunCategory.DENSE,
        framework=RunFramework.TORCHTITAN,
        measured_s=1.0,
        measured_note="-",
        source="-",
        source_group="g",
        role=role,
        check_rules=(),
    )
    return Scored(run, 1.0 + error, error)


def test_a_run_counts_under_each_mechanism_it_has_or_under_none_and_fit_runs_nowhere() -> None:
    runs = [
        _scored("a", -0.2),
        _scored("b", -0.1),
        _scored("c", +0.3),
        _scored("fit", -0.9, RunRole.FIT),
    ]
    mechanisms = {"a": ("x", "y"), "b": ("x",), "c": (), "fit": ("x",)}
    rows = {
        a.group: a
        for a in aggregates(runs, unpriced_of=lambda run: mechanisms[run.id])
        if a.axis == UNPRICED
    }
    assert set(rows) == {"x", "y", NONE_UNPRICED}
    assert rows["x"].runs == 2 and rows["x"].mean_abs_error == pytest.approx(0.15)
    assert rows["x"].mean_error == pytest.approx(-0.15) and rows["x"].worst_id == "a"
    assert rows["y"].runs == 1 and rows["y"].worst_error == pytest.approx(-0.2)
    # the run with no mechanism, and only it (the fit run is in no group)
    assert rows[NONE_UNPRICED].runs == 1 and rows[NONE_UNPRICED].worst_id == "c"


def _table_row(group: str) -> tuple[int, str, str, str]:
    """(runs, mean |error|, worst, signed mean) of docs/validation.md's unpriced row `group`."""
    text = (ROOT / "docs" / "validation.md").read_text(encoding="utf-8")
    row = re.search(
        rf"^\| unpriced \| {re.escape(group)} \| (\d+) \| ([\d.]+) % \| ([-+][\d.]+) % \| [^|]+ \| ([-+][\d.]+) % \|$",
        text,
        re.M,
    )
    assert row is not None, group
    return int(row[1]), row[2], row[3], row[4]


def test_explain_quotes_the_corpus_error_on_runs_with_the_same_unpriced_cost() -> None:
    overlay = torchtitan(seq_len=8192 * 8, global_batch=1)
    overlay["parallelism"] |= {"context": 8, "data": 1}
    (line,) = caveats(job_of(overlay))
    runs, mean, worst, signed = _table_row("torch-ring-cp4+")
    assert line.startswith("not priced: what makes torch's ring attention slower")
    assert (
        f"planc's error on the {runs} validated runs that have it: ±{mean} % mean, worst "
        f"{worst} %, signed mean {signed} %"
    ) in line
    # every published run of torch's ring at four or more ranks is too fast: called a bias
    assert line.endswith("(a bias: planc too fast)")
    assert runs >= 3


def test_a_caveat_without_validated_runs_says_only_what_it_is() -> None:
    # rowwise_with_gw_hp has no published run: the caveat names the mechanism and no error
    job = job_of(torchtitan(precision="fp8", fp8={"recipe": "rowwise_with_gw_hp"}))
    (line,) = caveats(job)
    assert line.startswith("not priced: torchao's rowwise scaling")
    assert "validated runs" not in line


def test_the_host_launch_caveat_quotes_its_runs_too() -> None:
    (line,) = caveats(job_of({}, MIXTRAL))
    runs, mean, worst, signed = _table_row("megatron-moe-host-launches")
    assert (
        f"on the {runs} validated runs that have it: ±{mean} % mean, worst {worst} %, "
        f"signed mean {signed} %"
    ) in line


def test_a_run_with_no_unpriced_cost_gets_the_error_of_the_runs_with_none() -> None:
    # A dense Megatron run has none of the costs: explain quotes the corpus's error on the runs
    # that have none, in text and JSON; a MoE run with a caveat gets its caveat instead.
    runs, mean, worst, _ = _table_row(NONE_UNPRICED)
    runner = CliRunner()
    clean = str(ROOT / "examples" / "llama3-8b-1node.yaml")
    text = runner.invoke(main, ["explain", clean]).output
    assert (
        f"model error on the {runs} validated runs with no cost planc knows it leaves out: "
        f"±{mean} % mean, worst {worst} %"
    ) in text
    bar = json.loads(runner.invoke(main, ["explain", clean, "--format", "json"]).output)["step"][
        "model_error_priced"
    ]
    assert bar["unpriced"] == NONE_UNPRICED and bar["validated_runs"] == runs
    assert f"{bar['mean_abs_error'] * 100:.1f}" == mean
    moe = str(ROOT / "examples" / MIXTRAL)
    assert (
        "with no cost planc knows it leaves out" not in runner.invoke(main, ["explain", moe]).output
    )
    step = json.loads(runner.invoke(main, ["explain", moe, "--format", "json"]).output)["step"]
    assert step["model_error_priced"] is None and step["caveats"]
    # the group holds most of the corpus: the runs planc prices whole
    assert runs >= 50


def test_search_marks_the_layouts_with_an_unpriced_cost(tmp_path: Any) -> None:
    # A torchtitan search over context parallelism: the layouts at CP 4 and 8 spend what torch's
    # ring costs there beyond planc's price; the listing says which and quotes the runs.
    spec = tmp_path / "search.yaml"
    spec.write_text(
        "version: 1\nname: cp-search\nmodel: {preset: llama3-8b}\n"
        "hardware: {gpu: h100-sxm-hbm2e, nodes: 1}\n"
        "training: {seq_len: 65536, global_batch: 4, attention: flash, kernels: compiled, "
        "framework: fsdp2, recompute: full, micro_batch: 1}\n"
        "search: {context: [2, 4], tensor: [1], pipeline: [1], zero_stage: [3]}\n",
        encoding="utf-8",
    )
    runner = CliRunner()
    out = runner.invoke(main, ["search", str(spec), "--format", "json", "--top", "20", "-j", "1"])
    assert out.exit_code == 0, out.output
    results = json.loads(out.output)["results"]
    by_cp = {r["parallelism"]["context"]: r["unpriced"] for r in results}
    assert by_cp[4] == ["torch-ring-cp4+"] and by_cp[2] == []
    text = runner.invoke(main, ["search", str(spec), "--top", "20", "-j", "1"]).output
    runs, _, _, _ = _table_row("torch-ring-cp4+")
    assert f"planc's error on the {runs} validated runs that have it" in text
