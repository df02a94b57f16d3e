"""training.cuda_graph: what Megatron-LM is told to capture, and what it refuses.

The refusals are megatron-core 0.19.2's TransformerConfig.__post_init__ and validate_args
assertions (the case table of test_frameworks_refusals.py, whose expected outcomes are Megatron's
own, run there against Megatron when it is installed); here planc's side runs without it. The
emitted arguments are the ones megatron-core 0.19.2's parser names (--cuda-graph-impl,
--cuda-graph-modules); test_frameworks_megatron_build.py feeds them to Megatron-Core.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_frameworks_refusals import _graph_cases

from planc.analysis import analyse, estimate_step
from planc.compile.frameworks import megatron_arguments

from conftest import check_overlay, compiled, job_of

PARTIAL = {"impl": "transformer_engine", "modules": ["attn", "moe_router", "moe_preprocess"]}


@pytest.mark.parametrize("case", sorted(_graph_cases()))
def test_plc048_refuses_the_graphs_megatron_core_refuses(case: str) -> None:
    base, overlay, refused = _graph_cases()[case]
    findings = check_overlay(overlay, base).findings
    graph = [f for f in findings if f.rule == "PLC048" and "CUDA graphs" in f.message]
    assert bool(graph) == refused, [f.message for f in findings]
    for finding in graph:
        assert finding.field == "training.cuda_graph"


def test_the_refusal_names_every_reason_and_what_is_captured() -> None:
    # Full recompute and dropout under whole-layer graphs of a dense model: two of Megatron's
    # assertions at once, in one finding.
    overlay = {
        "model": {"dropout": 0.1},
        "training": {"recompute": "full", "cuda_graph": {"impl": "local"}},
    }
    (finding,) = [f for f in check_overlay(overlay).findings if "CUDA graphs" in f.message]
    assert "local of whole layers" in finding.message
    assert "recompute full needs full_iteration" in finding.message


def test_padding_to_capacity_lets_the_preprocess_graph_in() -> None:
    # Drop only copies the counts to the host in preprocess, and Megatron-Core refuses the
    # moe_preprocess graph; padded, the counts are known on the host and it captures it.
    mixtral = "mixtral-8x7b-64xh100.yaml"
    drop_only, padded = {"capacity_factor": 1.0}, {"capacity_factor": 1.0, "pad_to_capacity": True}
    for moe, refused in ((drop_only, True), (padded, False)):
        overlay = {"model": {"moe": moe}, "training": {"cuda_graph": PARTIAL}}
        findings = check_overlay(overlay, mixtral).findings
        found = [f.message for f in findings if "CUDA graphs" in f.message]
        assert bool(found) == refused, found
        assert not found or "without pad_to_capacity" in found[0]


@pytest.mark.parametrize("framework", ["fsdp2", "deepspeed"])
def test_other_frameworks_capture_no_graphs(framework: str) -> None:
    overlay = {"training": {"framework": framework, "cuda_graph": {"impl": "local"}}}
    fired = [f for f in check_overlay(overlay).findings if f.rule == "PLC051"]
    assert any(f.field == "training.cuda_graph" for f in fired), [f.message for f in fired]


def _args(overlay: dict[str, Any], base: str = "llama3-8b-1node.yaml") -> list[str]:
    return megatron_arguments(compiled(job_of(overlay, base)))[0]


def test_megatron_arguments_state_the_graphs() -> None:
    partial = _args({"training": {"cuda_graph": PARTIAL}}, "mixtral-8x7b-64xh100.yaml")
    assert "--cuda-graph-impl transformer_engine" in partial
    assert "--cuda-graph-modules attn moe_router moe_preprocess" in partial
    assert "--te-rng-tracker" in partial
    assert "--no-check-for-nan-in-loss-and-grad" not in partial
    # Whole layers: no module list (Megatron's empty --cuda-graph-modules).
    layers = _args({"training": {"cuda_graph": {"impl": "local"}}})
    assert "--cuda-graph-impl local" in layers
    assert not any(a.startswith("--cuda-graph-modules") for a in layers)
    # The whole iteration: validate_args requires the NaN check off.
    iteration = _args({"training": {"cuda_graph": {"impl": "full_iteration"}}})
    assert "--cuda-graph-impl full_iteration" in iteration
    assert "--no-check-for-nan-in-loss-and-grad" in iteration
    # No graphs: none of these (Megatron's --cuda-graph-impl none is its default).
    plain = _args({})
    assert not any("cuda-graph" in a or a == "--te-rng-tracker" for a in plain)


def test_transformer_engine_graphs_note_the_allocator_setting_validate_args_needs() -> None:
    plan = compiled(job_of({"training": {"cuda_graph": PARTIAL}}, "mixtral-8x7b-64xh100.yaml"))
    notes = megatron_arguments(plan)[1]
    assert any("NCCL_GRAPH_REGISTER=0" in n for n in notes)
    assert not any("NCCL_GRAPH_REGISTER" in n for n in megatron_arguments(compiled(job_of()))[1])


def test_graphs_change_no_estimate() -> None:
    # planc's step model prices no host time (docs/explain.md): the graphs, which remove host
    # time, leave the estimate and the memory as they are.
    base = "mixtral-8x7b-64xh100.yaml"
    plain = estimate_step(analyse(job_of({}, base)))
    graphed = estimate_step(analyse(job_of({"training": {"cuda_graph": PARTIAL}}, base)))
    assert graphed.step_time_s == plain.step_time_s


def test_explain_says_host_time_is_not_priced_where_no_graph_holds_the_experts() -> None:
    # A Megatron MoE run whose routed experts no graph holds waits on the host at every MoE layer
    # (its tokens per expert) and launches the experts from it; planc prices none of that, and
    # explain says so, in text and JSON: without graphs and with Transformer Engine's partial
    # ones, which leave the experts out. With the full-iteration graph, or a dense model, or
    # another framework, it says nothing.
    from planc.outputs.explain import caveats

    moe = "mixtral-8x7b-64xh100.yaml"
    (words,) = caveats(job_of({}, moe))
    assert words.startswith("not priced: the host's kernel launches")
    (partial,) = caveats(job_of({"training": {"cuda_graph": PARTIAL}}, moe))
    assert partial == words
    full = {"training": {"cuda_graph": {"impl": "full_iteration"}}}
    assert caveats(job_of(full, moe)) == ()
    assert caveats(job_of({})) == ()  # Llama 3 8B: no experts
    deepspeed = {"parallelism": {"zero_stage": 1}, "training": {"framework": "deepspeed"}}
    assert caveats(job_of(deepspeed, moe)) == ()


def test_explain_prints_the_caveat_and_puts_it_in_json() -> None:
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from planc.cli.main import main

    spec = str(Path(__file__).resolve().parent.parent / "examples" / "mixtral-8x7b-64xh100.yaml")
    text = CliRunner().invoke(main, ["explain", spec]).output
    assert "  not priced: the host's kernel launches." in text
    data = json.loads(CliRunner().invoke(main, ["explain", spec, "--format", "json"]).output)
    assert data["step"]["caveats"] and data["step"]["caveats"][0] in text
