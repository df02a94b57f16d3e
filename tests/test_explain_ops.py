"""`planc explain --ops`: the step model's ops per kind of layer.

What is checked: every kind's ops, summed, are the pass times the step model charges a layer of
that kind, so the table, counted by its layer counts with the two ends, adds up to the stage's
compute per micro-batch (one stage, no recompute, no multi-token prediction), in 16 bits and
under an FP8 recipe with FP8 attention and the head in MXFP8; and the command prints it as text
and as JSON.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from test_sliding_window import OSS

from planc.cli.main import main
from planc.outputs.ops import op_json, op_lines
from planc.perf.inputs import efficiency_of, stage_chunk_times
from planc.perf.op_table import op_table

from conftest import job_of, spec_text

BASE = "mixtral-8x7b-64xh100.yaml"
MXFP8 = {"recipe": "mxfp8", "attention": "mxfp8", "output_proj": True}
CASES: dict[str, dict[str, Any]] = {
    "gpt-oss bf16": {**OSS, "hardware": {"gpu": "gb200-nvl72", "nodes": 8}},
    "gpt-oss mxfp8": {
        **OSS,
        "hardware": {"gpu": "gb200-nvl72", "nodes": 8},
        "training": {**OSS["training"], "precision": "fp8", "fp8": MXFP8},
    },
    "mixtral": {
        "parallelism": {"pipeline": 1, "data": 64},
        "training": {"recompute": "none", "micro_batch": 1},
    },
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_table_adds_up_to_the_stage_compute(case: str) -> None:
    job = job_of(CASES[case], BASE)
    assert job.layout.p == 1 and job.training.recompute == "none" and not job.model.mtp
    table = op_table(job)
    layers = sum(kind.layers for kind in table.kinds)
    assert layers == job.model.L
    listed = sum(kind.layers * (kind.forward_s + kind.backward_s) for kind in table.kinds)
    for ends in (table.embedding, table.head):
        listed += sum(t.forward_s + t.backward_data_s + t.backward_weight_s for t in ends)
    (chunk,) = stage_chunk_times(job, efficiency_of(job), 0)
    assert listed == pytest.approx(chunk.forward_s + chunk.backward_s, rel=1e-12)


def test_windowed_and_full_kinds_are_told_apart() -> None:
    table = op_table(job_of(CASES["gpt-oss bf16"], BASE))
    assert [(k.label, k.layers) for k in table.kinds] == [
        ("MoE layer", 18),
        ("MoE sliding-window layer", 18),
    ]


def test_the_command_prints_the_table(tmp_path: Any) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(CASES["gpt-oss bf16"], BASE), encoding="utf-8")
    runner = CliRunner()
    text = runner.invoke(main, ["explain", "--ops", str(spec)])
    assert text.exit_code == 0, text.output
    assert "ops per micro-batch on one rank" in text.output
    assert "MoE sliding-window layer (18 of the model's layers)" in text.output
    assert "expert GLU clamp" in text.output
    plain = runner.invoke(main, ["explain", str(spec)])
    assert "ops per micro-batch" not in plain.output
    data = json.loads(
        runner.invoke(main, ["explain", "--ops", "--format", "json", str(spec)]).output
    )
    kinds = data["ops"]["kinds"]
    assert [k["layers"] for k in kinds] == [18, 18]
    assert {op["name"] for op in kinds[0]["ops"]} >= {
        "flash attention",
        "expert fc1",
        "expert bias",
    }
    assert "ops" not in json.loads(
        runner.invoke(main, ["explain", "--format", "json", str(spec)]).output
    )


def test_a_measured_linear_says_what_its_16_bit_time_is_divided_by() -> None:
    # torchao's rowwise on Hopper prices each linear from its measured table; --ops names the
    # speed-up beside the op, and its JSON gives it (1 for every other op).
    plan = job_of(
        {
            "parallelism": {"tensor": 1, "sequence_parallel": False, "zero_stage": 3},
            "training": {
                "framework": "fsdp2",
                "kernels": "compiled",
                "precision": "fp8",
                "fp8": {"recipe": "rowwise"},
            },
        }
    )
    table = op_table(plan)
    text = "\n".join(op_lines(table))
    assert "mlp fc2 (16-bit ÷ " in text
    ops = {op["name"]: op for kind in op_json(table)["kinds"] for op in kind["ops"]}
    assert 0 < ops["mlp fc2"]["speedup"] != 1.0
    assert ops["input norm"]["speedup"] == 1.0
    assert not any("quantize" in name for name in ops)


def test_a_weight_cast_made_once_per_step_is_marked_and_shared_out() -> None:
    # Transformer Engine casts each FP8 weight on the first of the m micro-batches and caches
    # it: the table lists the cast at 1/m of its bytes and marks it, and JSON says its calls.
    job = job_of(CASES["gpt-oss mxfp8"], BASE)
    table = op_table(job)
    m = job.m
    marked = [line for line in op_lines(table) if f"(once per {m})" in line]
    assert marked
    ops = [op for kind in op_json(table)["kinds"] for op in kind["ops"]]
    shared = [op for op in ops if op["calls"] != 1.0]
    assert shared and all(op["calls"] == pytest.approx(1 / m) for op in shared)
    assert all("quantize" in op["name"] for op in shared)
