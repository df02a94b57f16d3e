"""One model of the run: a job with no layout never reaches a traceback, a forced compile
records what it went past, and memory and communication agree on the quantities they share."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from test_verify import layouts

from planc.analysis import analyse
from planc.comm.ends import end_collectives
from planc.comm.schedule import grad_bytes
from planc.vocab import Collective, Direction, GroupKind

from conftest import EXAMPLES, ROOT, job_of, spec_text


def planc(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "planc", *args],
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


# --- a run that cannot be planned ---------------------------------------------------------

# The reproducer: PLC010 ignored, 34 micro-batches on an interleaved p = 4 pipeline.
IGNORED_PLC010 = {
    "parallelism": {"virtual_stages": 2},
    "training": {"global_batch": 68},
    "rules": {"ignore": ["PLC010", "PLC006"]},
}


def test_check_passes_but_says_what_it_did_not_evaluate(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(IGNORED_PLC010, "llama3-70b-8x8.yaml"))
    done = planc("check", str(spec))
    assert done.returncode == 0, done.stdout
    assert "info PLC010" in done.stdout and "were not evaluated" in done.stdout


@pytest.mark.parametrize("command", ["explain", "memory", "verify", "compile"])
def test_commands_that_need_a_plan_refuse_it_located(tmp_path: Path, command: str) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(IGNORED_PLC010, "llama3-70b-8x8.yaml"))
    args = [command, str(spec)] + (["-o", str(tmp_path / "out")] if command == "compile" else [])
    done = planc(*args)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    line = next(x for x in done.stderr.splitlines() if "PLC010" in x and "cannot plan" in x)
    # Located at the global_batch value, with the numbers and a fix.
    assert line.startswith(f"{spec}:") and "m = 34" in line and "fix:" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("level", ["warning", "info"])
def test_a_relevelled_precondition_refuses_the_plan_too(tmp_path: Path, level: str) -> None:
    overlay = copy.deepcopy(IGNORED_PLC010)
    overlay["rules"] = {"severity": {"PLC010": level}, "ignore": ["PLC006"]}
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(overlay, "llama3-70b-8x8.yaml"))
    assert planc("check", str(spec)).returncode == 0
    done = planc("explain", str(spec))
    assert done.returncode == 1 and "cannot plan" in done.stderr


def test_force_cannot_compile_a_run_without_a_layout(tmp_path: Path) -> None:
    # PLC005: the global batch does not split into whole micro-batches; no plan exists.
    spec = EXAMPLES / "invalid" / "PLC005" / "llama3-8b-1node.yaml"
    done = planc("compile", str(spec), "-o", str(tmp_path / "out"), "--force")
    assert done.returncode == 1 and "cannot plan" in done.stderr and "PLC005" in done.stderr
    assert not (tmp_path / "out").exists()


def test_force_records_the_errors_it_went_past(tmp_path: Path) -> None:
    spec = EXAMPLES / "invalid" / "PLC007" / "llama3-8b-1node.yaml"
    out = tmp_path / "out"
    done = planc("compile", str(spec), "-o", str(out), "--force")
    assert done.returncode == 0, done.stderr
    assert "forced past error PLC007" in done.stderr
    plan = json.loads((out / "plan.json").read_text())
    assert [f["rule"] for f in plan["findings"]] == ["PLC007"]
    assert plan["findings"][0]["severity"] == "error" and plan["findings"][0]["line"] > 1
    # A clean compile records none.
    assert (
        planc("compile", "examples/llama3-8b-1node.yaml", "-o", str(tmp_path / "ok")).returncode
        == 0
    )
    assert json.loads((tmp_path / "ok" / "plan.json").read_text())["findings"] == []


# --- memory and communication agree -------------------------------------------------------


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(overlay=layouts())
def test_memory_and_communication_agree(overlay: dict[str, Any]) -> None:
    overlay = copy.deepcopy(overlay)
    overlay["model"].pop("preset")
    job = job_of(overlay)
    analysis = analyse(job)
    lay, m = job.layout, job.m
    for stage in range(lay.p):
        layers = analysis.parameters[stage].layers
        # Layers per stage: memory's share, the layer ranges, the uneven split when given.
        assert layers == sum(b - a for a, b in lay.chunks[stage]) == lay.stage_layers[stage]
        ops = [op for op in analysis.ops if op.stage == stage]
        # the layers' TP ops, not those at the model's ends (tests/test_tp_ends.py)
        ends = {one.phase for one, _ in end_collectives(job, stage).every}
        tp = [op for op in ops if op.group is GroupKind.TP and op.phase not in ends]
        if tp:
            # Communication's TP calls count the same layers and micro-batches. (Under an FP8
            # recipe a stage's gathers split into the quantized layers' and those kept in BF16,
            # and quantized gathers add amax all-reduces: the sums per kind are what count.)
            fsdp2 = job.training.framework == "fsdp2"
            # Full recompute redoes both blocks' output reduce-scatters, except under torch's
            # non-reentrant checkpoint, which stops once the backward's saved tensors are back:
            # the MLP's output reduction is never read (tests/test_torch_checkpoint.py).
            redone = 1 if fsdp2 else 2
            again = redone * layers * m if lay.sp and job.training.recompute == "full" else 0
            if lay.sp:
                scattered = sum(op.calls for op in tp if op.op is Collective.REDUCE_SCATTER)
                assert scattered == 4 * layers * m + again
                regathered = sum(op.calls for op in tp if "again for its weight" in op.phase)
                # Megatron's layers gather each block's input again for its weight gradient,
                # once per block and micro-batch, recompute or not; torchtitan's do not.
                assert regathered == (0 if fsdp2 else 2 * layers * m)
            else:
                assert min(op.calls for op in tp) == 2 * layers * m
        for op in ops:
            if op.group is GroupKind.PP:
                end = lay.p - 1 if op.direction is Direction.FORWARD else 0
                assert op.calls == m * (lay.v - (stage == end))
            if op.group in (GroupKind.DP_CP, GroupKind.DP_SHARD) and op.op is not Collective.ALL_GATHER:
                # The one bucket definition: full buckets of bucket_elements(d), or less.
                elements = op.buffer_bytes // grad_bytes(job)
                assert elements <= job.gradient_bucket_elements
        memory = analysis.memory.stages[stage].memory
        buckets = [t for t in memory.terms if "bucket" in t.name]
        if buckets:
            # Memory's bucket buffer holds one bucket of the same size communication reduces.
            share = analysis.parameters[stage].total
            elements = min(job.gradient_bucket_elements, share)
            assert buckets[0].bytes in (2 * elements, 4 * elements), buckets[0]
        # Micro-batches in flight never exceed the step's m (memory reads the same m).
        flight = [t for t in memory.terms if "in flight" in t.formula]
        for term in flight:
            held = int(term.formula.rsplit("× ", 1)[1].split(" ", 1)[0])
            assert held <= m * layers or "layer-micro-batch" in term.formula


def test_ignoring_the_rank_cap_does_not_let_a_command_past_it(tmp_path: Path) -> None:
    # 10,000,000 nodes is refused by the schema; 200,000 nodes × 8 GPUs (1.6M ranks) is a valid
    # spec above planc's cap. Ignoring PLC015 silences check, never the per-rank work's bound.
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        spec_text(
            {
                "hardware": {"nodes": 200_000, "hosts": "n{000001..200000}"},
                "training": {"global_batch": 400_000},
                "rules": {"ignore": ["PLC015", "PLC007"]},
            }
        )
    )
    done = planc("verify", str(spec))
    assert done.returncode == 1 and "cannot plan" in done.stderr and "PLC015" in done.stderr
