"""Context parallelism under torchtitan: torch's ring attention as torch issues it.

torch.distributed.tensor.experimental's `_templated_ring_attention` rotates K/V by one
all-gather (`_AllGatherRotater`, torchtitan's default rotate method) or by c − 1 permutes to the
next rank (`_AllToAllRotater`), forward and again in backward; its backward accumulates dK/dV in
fp32 (`convert_to_f32`) and permutes them round the ring c times, the last one waited on after
the loop. There is no reduce-scatter. The counts and bytes below are read off that code: Llama 3
8B (32 layers, 8 KV heads of 128 channels), c = 4, 32,768 tokens a rank."""

from __future__ import annotations

import json

import pytest

from planc.analysis import analyse
from planc.compile.frameworks import torchtitan_settings
from planc.compile.plan import plan_json
from planc.memory.activations import exchange_buffers
from planc.perf.inputs import build_inputs, call_time_s, efficiency_of
from planc.plannable import Plannable
from planc.verify import render, verify_text

from conftest import compiled, job_of

TOKENS = 131072 // 4  # a rank's share of the sequence
BLOCK = TOKENS * 8 * (128 + 128) * 2  # one rank's K and V in bf16


def job(kind: str, recompute: str = "full", kernels: str | None = None) -> Plannable:
    training = {"seq_len": 131072, "global_batch": 2, "recompute": recompute, "framework": "fsdp2"}
    return job_of(
        {
            "parallelism": {"tensor": 1, "context": 4, "cp_comm_type": kind},
            "training": training | ({"kernels": kernels} if kernels else {}),
        }
    )


def cp_ops(plan: Plannable) -> list[tuple[str, int, int]]:
    return [
        (str(op.op), op.calls, op.buffer_bytes)
        for op in analyse(plan).ops
        if op.group == "cp" and op.stage == 0
    ]


@pytest.mark.parametrize("recompute", ["full", "none"])
def test_all_gather_rotation_moves_kv_once_a_pass_and_fp32_gradients_round_the_ring(
    recompute: str,
) -> None:
    plan = job("allgather", recompute)
    steps = 32 * plan.m
    passes = 3 if recompute == "full" else 2  # forward (again under full recompute), backward
    assert cp_ops(plan) == [
        ("all_gather", passes * steps, 4 * BLOCK),
        ("send_recv", 4 * steps, 2 * BLOCK),  # fp32: twice the bf16 block
    ]


def test_permute_rotation_sends_kv_each_step() -> None:
    plan = job("p2p")
    steps = 32 * plan.m
    assert cp_ops(plan) == [
        ("send_recv", 3 * 3 * steps, BLOCK),  # c − 1 = 3 a pass, three passes
        ("send_recv", 4 * steps, 2 * BLOCK),
    ]


def cp_exposed_s(plan: Plannable) -> float:
    analysis = analyse(plan)
    params = [share.total for share in analysis.parameters]
    experts = [share.expert_total for share in analysis.parameters]
    return build_inputs(plan, params, experts, efficiency_of(plan), analysis.ops).stages[0].cp_exposed_s


@pytest.mark.parametrize("kind", ["allgather", "p2p"])
def test_only_the_last_gradient_permute_shows_behind_long_attention(kind: str) -> None:
    # At 32,768 tokens a rank each block's attention outlasts the K/V exchange and a gradient
    # permute; the last permute is waited on after the loop: one per layer and micro-batch shows.
    plan = job(kind)
    (dkv,) = [op for op in analyse(plan).ops if op.group == "cp" and "dK/dV" in op.phase and op.stage == 0]
    last = call_time_s(plan, efficiency_of(plan), dkv)
    assert cp_exposed_s(plan) == pytest.approx(32 * last, rel=1e-12)


@pytest.mark.parametrize("kind", ["allgather", "p2p"])
@pytest.mark.parametrize("recompute", ["full", "none"])
def test_a_compiled_block_waits_on_every_exchange_of_its_ring(kind: str, recompute: str) -> None:
    # torch.compile traces the ring inside torchtitan's compiled block, and a traced functional
    # collective is waited on where it is issued (_maybe_wrap_tensor: wait_tensor when tracing),
    # with Inductor's reordering off: every call of every cp op shows, however long attention.
    eager = job(kind, recompute)
    traced = job(kind, recompute, "compiled")
    eff = efficiency_of(traced)
    ops = [op for op in analyse(traced).ops if op.group == "cp" and op.stage == 0]
    every_call = sum(op.calls * call_time_s(traced, eff, op) for op in ops) / traced.m
    assert cp_exposed_s(traced) == pytest.approx(every_call, rel=1e-12)
    assert cp_exposed_s(traced) > cp_exposed_s(eager)


def test_verify_recounts_the_torch_ring() -> None:
    text = plan_json(compiled(job("allgather")))
    assert verify_text(text).ok
    data = json.loads(text)
    data["communication"]["ops"] = [
        op for op in data["communication"]["ops"] if "dK/dV" not in op["phase"]
    ]
    failed = verify_text(json.dumps(data))
    assert not failed.ok
    assert "cp send_recv" in render(failed)


def test_the_torchtitan_files_say_how_to_get_the_permute_ring() -> None:
    # torchtitan 0.3.0 has no rotate-method setting: torch's default all-gather runs unless the
    # launcher changes it, so the p2p plan's torchtitan files say so; allgather needs nothing.
    def notes(kind: str) -> str:
        return " ".join(torchtitan_settings(compiled(job(kind)))[2])

    assert "set_rotate_method('alltoall')" in notes("p2p")
    assert "set_rotate_method" not in notes("allgather")


def test_the_backward_holds_fp32_gradient_buffers() -> None:
    # grad_key/grad_value accumulated in fp32, the concatenated copy sent on and the one
    # received: three fp32 K/V blocks of the rank, beside the gathered K/V (allgather).
    def buffers(framework: str, kind: str) -> dict[str, int]:
        plan = job_of(
            {
                "parallelism": {"tensor": 1, "context": 4, "cp_comm_type": kind},
                "training": {"seq_len": 131072, "global_batch": 2, "framework": framework},
            }
        )
        return {term.name: term.bytes for term in exchange_buffers(plan)}

    fp32 = 3 * 2 * BLOCK
    ring = "ring attention's fp32 dK/dV: accumulator, send and receive (one layer, transient)"
    gathered = "context-parallel K/V all-gather (one layer, transient)"
    assert buffers("fsdp2", "allgather") == {gathered: 4 * BLOCK, ring: fp32}
    assert buffers("fsdp2", "p2p") == {ring: fp32}
    assert buffers("megatron", "allgather") == {gathered: 4 * BLOCK}
    assert buffers("megatron", "p2p") == {}
