"""A recomputed attention core exchanges its context-parallel forward again.

The exchange lives inside the attention core: Transformer Engine's attention with context
parallelism (`attn_forward_func_with_cp`, run by Megatron's core-attention checkpoint under
selective recompute of core_attn and by the layer's checkpoint under full recompute), or torch's
ring attention inside SDPA under torchtitan's full activation checkpointing. Counts by hand
below: 32 layers of Llama 3 8B, one stage, m micro-batches, c = 4."""

from __future__ import annotations

import json

import pytest

from planc.analysis import analyse
from planc.compile.plan import plan_json
from planc.perf.inputs import build_inputs, call_time_s, efficiency_of
from planc.plannable import Plannable
from planc.verify import render, verify_text

from conftest import compiled, job_of


def job(kind: str, recompute: str, framework: str = "megatron") -> Plannable:
    return job_of(
        {
            "parallelism": {"tensor": 2, "context": 4, "cp_comm_type": kind},
            "training": {"recompute": recompute, "framework": framework, "global_batch": 8},
        }
    )


def cp_calls(plan: Plannable) -> dict[str, int]:
    found: dict[str, int] = {}
    for op in analyse(plan).ops:
        if op.group == "cp" and op.stage == 0:
            found[str(op.op)] = found.get(str(op.op), 0) + op.calls
    return found


@pytest.mark.parametrize(
    ("kind", "per_pass"),
    [
        # the ring's c − 1 = 3 steps a pass; the all-gather once; Ulysses' two all-to-alls
        ("p2p", {"send_recv": 3}),
        ("allgather", {"all_gather": 1}),
        ("a2a", {"all_to_all": 2}),
    ],
)
def test_the_forward_exchange_runs_again_with_the_core(kind: str, per_pass: dict[str, int]) -> None:
    none = job(kind, "none")
    steps = 32 * none.m
    ((op, n),) = per_pass.items()
    # Without recompute: the forward's pass and the backward's (two for the ring: K/V and
    # dK/dV; the all-gather again; Ulysses' gradients); plus the all-gather's reduce-scatter.
    backward = 2 if kind == "p2p" else 1
    assert cp_calls(none)[op] == (1 + backward) * n * steps
    for recompute in ("selective", "full"):  # selective: Megatron's default core_attn
        assert cp_calls(job(kind, recompute))[op] == (2 + backward) * n * steps
    # Selective recompute of the MLP alone leaves the core, and its exchange, to run once.
    mlp_only = job_of(
        {
            "parallelism": {"tensor": 2, "context": 4, "cp_comm_type": kind},
            "training": {"recompute": "selective", "recompute_modules": ["mlp"], "global_batch": 8},
        }
    )
    assert cp_calls(mlp_only)[op] == (1 + backward) * n * steps


def test_torchtitan_repeats_it_only_under_full_checkpointing() -> None:
    steps = 32 * job("allgather", "none", "fsdp2").m
    assert cp_calls(job("allgather", "full", "fsdp2"))["all_gather"] == 3 * steps
    # torchtitan's selective policies save the attention's outputs: the core runs once.
    assert cp_calls(job("allgather", "selective", "fsdp2"))["all_gather"] == 2 * steps


def cp_exposed_s(plan: Plannable) -> float:
    """Stage 0's exposed context-parallel seconds per micro-batch, as the step composes them."""
    analysis = analyse(plan)
    params = [share.total for share in analysis.parameters]
    experts = [share.expert_total for share in analysis.parameters]
    inputs = build_inputs(plan, params, experts, efficiency_of(plan), analysis.ops)
    return inputs.stages[0].cp_exposed_s


def test_the_recomputed_all_gather_shows_in_the_step() -> None:
    # The all-gather sits before the core, exposed whole: the recomputed forward's adds one
    # call per layer and micro-batch to what shows.
    full, none = job("allgather", "full"), job("allgather", "none")
    gather = next(op for op in analyse(full).ops if op.group == "cp" and str(op.op) == "all_gather")
    one = call_time_s(full, efficiency_of(full), gather)
    assert cp_exposed_s(full) - cp_exposed_s(none) == pytest.approx(32 * one, rel=1e-9)


def test_verify_recounts_the_recomputed_exchange() -> None:
    text = plan_json(compiled(job("p2p", "full")))
    assert verify_text(text).ok
    data = json.loads(text)
    for op in data["communication"]["ops"]:
        if op["group"] == "cp":
            op["calls"] = op["calls"] * 3 // 4  # the count before the recompute's
    failed = verify_text(json.dumps(data))
    assert not failed.ok
    assert "cp send_recv" in render(failed)
