"""Tensor parallelism as torchtitan runs it (DTensor TP, torchao's Float8 TP, async TP).

training.overlap_tp under torchtitan is its async TP (compile.enable_async_tensor_parallel), a
torch.compile pass: with the model compiled the TP collectives are pipelined with their matmuls
as Megatron's overlap is; with eager kernels torchtitan refuses it, the collectives run exposed,
planc prices them so and PLC051 says why. The column-parallel input gradient's reduce-scatter
runs after the block's weight gradients, exposed, with or without async TP. Under the tensorwise
Float8 recipe the sequence-parallel all-gathers move float8."""

from __future__ import annotations

import json
from typing import Any

import pytest

from planc.analysis import analyse
from planc.comm.ends import end_collectives
from planc.compile.plan import plan_json
from planc.perf.inputs import activation_message_bytes, comm_time_s, efficiency_of, tp_per_layer
from planc.plannable import Plannable
from planc.verify import render, verify_text

from conftest import check_overlay, compiled, job_of


def overlay(
    framework: str, kernels: str, overlap: bool, fp8: str | None = None
) -> dict[str, Any]:
    """The Llama 3 8B example at t = 4 with SP, ZeRO-3 and full recompute, in `framework`."""
    quantized: dict[str, Any] = {"precision": "fp8", "fp8": {"recipe": fp8}} if fp8 else {}
    return {
        "parallelism": {"tensor": 4, "zero_stage": 3},
        "training": {
            "global_batch": 2,
            "recompute": "full",
            "framework": framework,
            "kernels": kernels,
            "overlap_tp": overlap,
        }
        | quantized,
    }


def plan_of(framework: str, kernels: str, overlap: bool, fp8: str | None = None) -> Plannable:
    return job_of(overlay(framework, kernels, overlap, fp8))


def tp_seconds_of(plan: Plannable) -> tuple[float, float, float]:
    """(forward, exposed backward, hidden) TP seconds of one layer on stage 0."""
    layer = tp_per_layer(plan, efficiency_of(plan), analyse(plan).ops, 0)
    return layer.forward_s, layer.backward_exposed_s, layer.backward_overlapped_s


def tp_seconds(framework: str, kernels: str, overlap: bool) -> tuple[float, float, float]:
    return tp_seconds_of(plan_of(framework, kernels, overlap))


def rules(framework: str, kernels: str, overlap: bool) -> list[str]:
    return [f.rule for f in check_overlay(overlay(framework, kernels, overlap)).findings]


def test_compiled_async_tp_hides_what_megatrons_overlap_hides() -> None:
    # The same pipelined model of each all-gather and reduce-scatter with its GEMM: torchtitan's
    # micro-pipelined async TP and Transformer Engine's userbuffers split the same collectives.
    compiled = tp_seconds("fsdp2", "compiled", True)
    exposed = tp_seconds("fsdp2", "compiled", False)
    assert compiled[0] < exposed[0]
    assert compiled[2] > exposed[2]
    # The hidden part is what no longer shows: the collectives' total is the same.
    assert sum(compiled) == pytest.approx(sum(exposed), rel=1e-12)


@pytest.mark.parametrize("recipe", ["rowwise", "rowwise_with_gw_hp"])
def test_async_tp_cannot_pipeline_the_gathers_rowwise_casts_read(recipe: str) -> None:
    # torch's micro-pipeline pass decomposes an all-gather only into the matmul that consumes
    # it (_find_consumer_matmuls); under torchao's rowwise recipes the gathered 16-bit input
    # and output gradient go to the casts first. Async TP then hides only the forward
    # reduce-scatters (the row GEMMs' outputs): the backward shows as with async TP off, the
    # forward less by what the scatters pipeline, and tensorwise (float8 gathers straight into
    # _scaled_mm) keeps its pipelined gathers.
    on = tp_seconds_of(plan_of("fsdp2", "compiled", True, recipe))
    off = tp_seconds_of(plan_of("fsdp2", "compiled", False, recipe))
    assert on[1] == pytest.approx(off[1], rel=1e-12)
    assert off[0] > on[0]
    assert sum(on) == pytest.approx(sum(off), rel=1e-12)
    plan = plan_of("fsdp2", "compiled", False, recipe)
    t = plan.layout.t
    size = activation_message_bytes(plan)
    scatter = comm_time_s(plan, efficiency_of(plan), "reduce_scatter", t, size, "nvlink")
    # at most (t - 1)/t of each of the two blocks' scatters hides behind its row GEMM
    assert off[0] - on[0] <= 2 * scatter * (t - 1) / t * (1 + 1e-12)
    tensorwise = tp_seconds_of(plan_of("fsdp2", "compiled", True, "tensorwise"))
    tensorwise_off = tp_seconds_of(plan_of("fsdp2", "compiled", False, "tensorwise"))
    assert tensorwise[1] < tensorwise_off[1]


@pytest.mark.parametrize("kernels", ["fused", "unfused"])
def test_eager_torchtitan_runs_tp_exposed(kernels: str) -> None:
    # torchtitan refuses async TP without compiling the model: overlap_tp then prices as off.
    assert tp_seconds("fsdp2", kernels, True) == tp_seconds("fsdp2", kernels, False)
    assert "PLC051" in rules("fsdp2", kernels, True)


def test_plc051_only_where_torchtitan_refuses() -> None:
    assert "PLC051" not in rules("fsdp2", "compiled", True)
    assert "PLC051" not in rules("fsdp2", "fused", False)
    # Megatron's --tp-comm-overlap needs no compiler.
    assert tp_seconds("megatron", "fused", True)[0] < tp_seconds("megatron", "fused", False)[0]


def test_dtensor_tp_reduces_the_input_gradient_after_the_weight_gradients() -> None:
    # torchtitan without async TP: the column-parallel dX reduce-scatter is the backward of the
    # block's input redistribution, issued after the linears' dX and dW and waited on at once
    # by the norm: nothing of it hides. Megatron hides it behind dW (async_tp_allreduce).
    torchtitan = tp_seconds("fsdp2", "fused", False)
    megatron = tp_seconds("megatron", "fused", False)
    assert torchtitan[2] == 0.0
    assert megatron[2] > 0.0
    # Megatron's layers also gather each block's input again for the weight gradient (two
    # blocks a layer, hidden behind their dgrad GEMMs); torchtitan saves the gathered input.
    plan = plan_of("megatron", "fused", False)
    link = next(str(op.link) for op in analyse(plan).ops if op.group == "tp")
    regather = 2 * comm_time_s(plan, efficiency_of(plan), "all_gather", 4, 8192 * 4096 * 2, link)
    assert sum(torchtitan) + regather == pytest.approx(sum(megatron), rel=1e-12)
    # The rest are the same collectives: what Megatron hides, torchtitan shows.
    assert torchtitan[1] == pytest.approx(megatron[1] + megatron[2] - regather, rel=1e-12)
    # Async TP pipelines the gathers and the forward reduce-scatter, not that one: torch's
    # micro-pipeline pass fuses a reduce-scatter of one matmul's output, and the block's
    # separate linears sum their input gradients first.
    asynchronous = tp_seconds("fsdp2", "compiled", True)
    plain = tp_seconds("fsdp2", "compiled", False)
    assert asynchronous[1] < plain[1]  # the gradient's gather hides
    assert asynchronous[1] > 0.0  # the input gradient's reduce-scatter does not


def sp_bytes(fp8: str | None) -> dict[str, int]:
    """Bytes of one call of each sequence-parallel collective of the torchtitan plan."""
    plan = plan_of("fsdp2", "compiled", False, fp8)
    ends = {one.phase for one, _ in end_collectives(plan, 0).every}  # tests/test_tp_ends.py
    return {
        str(op.op): op.buffer_bytes
        for op in analyse(plan).ops
        if op.group == "tp" and op.stage == 0 and op.phase not in ends
    }


def test_float8_tp_gathers_the_hidden_state_in_one_byte() -> None:
    # b·s·h of llama3-8b at b = 1, s = 8192, h = 4096 (SP gathers the whole sequence's rows).
    rows = 1 * 8192 * 4096
    # torchao's tensorwise Float8 TP casts a block's input (e4m3) and its output's gradient
    # (e5m2) before the all-gather; the reduce-scatters stay bf16. The cast's scale is the amax
    # of the sequence-sharded DTensor: one fp32 all-reduced over the TP group first.
    assert sp_bytes("tensorwise") == {
        "all_gather": rows,
        "reduce_scatter": 2 * rows,
        "all_reduce": 4,
    }
    # Rowwise scaling has no Float8 TP in torchtitan: bf16 both ways, as without FP8.
    assert sp_bytes("rowwise") == {"all_gather": 2 * rows, "reduce_scatter": 2 * rows}
    assert sp_bytes(None) == sp_bytes("rowwise")
    # The step model prices the same bytes: the forward's gathers cost less in fp8.
    fast = tp_seconds_of(plan_of("fsdp2", "compiled", False, "tensorwise"))
    slow = tp_seconds_of(plan_of("fsdp2", "compiled", False, "rowwise"))
    assert fast[0] < slow[0]
    assert fast[1] < slow[1]



def test_verify_recounts_the_float8_gathers_from_the_plan() -> None:
    # planc verify recomputes every op from tensor shapes and the plan's recorded formats:
    # the plan says the SP gathers move float8, and without that record its bytes disagree.
    text = plan_json(compiled(plan_of("fsdp2", "compiled", True, "tensorwise")))
    data = json.loads(text)
    assert data["training"]["quantized"]["tp_gather"] is True
    result = verify_text(text)
    assert result.ok, render(result)
    del data["training"]["quantized"]["tp_gather"]
    corrupted = verify_text(json.dumps(data))
    assert not corrupted.ok
    assert "tp all_gather" in render(corrupted)
    # Rowwise records nothing: its gathers are 16-bit.
    rowwise = json.loads(plan_json(compiled(plan_of("fsdp2", "compiled", True, "rowwise"))))
    assert "tp_gather" not in rowwise["training"]["quantized"]


def checkpointed(recompute: str, overlap: bool = False) -> Plannable:
    """The Llama 3 8B example at t = 4 with SP under torchtitan, compiled, at `recompute`."""
    spec = overlay("fsdp2", "compiled", overlap)
    spec["training"]["recompute"] = recompute
    return job_of(spec)


def tp_calls(plan: Plannable) -> dict[str, int]:
    """Calls per step of the layers' TP collectives on stage 0, by kind (not the model's ends)."""
    ends = {one.phase for one, _ in end_collectives(plan, 0).every}
    calls: dict[str, int] = {}
    for op in analyse(plan).ops:
        if op.group == "tp" and op.stage == 0 and op.phase not in ends:
            calls[str(op.op)] = calls.get(str(op.op), 0) + op.calls
    return calls


def test_per_op_checkpointing_gathers_each_block_input_again() -> None:
    # torchtitan's per-op policy saves aten.mm (but every second), SDPA, the reduce-scatter and
    # aten.max; the all-gather is PREFER_RECOMPUTE, which the compiled block's partitioner
    # recomputes: backward gathers each block's input (attention, MLP) again. The
    # reduce-scatters' outputs are saved.
    plan, plain = checkpointed("selective-op"), checkpointed("none")
    layers, m = plan.model.L, plan.m
    assert tp_calls(plain) == {"all_gather": 4 * layers * m, "reduce_scatter": 4 * layers * m}
    assert tp_calls(plan) == {"all_gather": 6 * layers * m, "reduce_scatter": 4 * layers * m}
    # Without async TP each gather runs on the critical path: b·s·h bf16 at t = 4.
    link = next(str(op.link) for op in analyse(plan).ops if op.group == "tp")
    gather = comm_time_s(plan, efficiency_of(plan), "all_gather", 4, 8192 * 4096 * 2, link)
    layer = tp_per_layer(plan, efficiency_of(plan), analyse(plan).ops, 0)
    assert layer.recompute_s == pytest.approx(2 * gather, rel=1e-12)
    assert tp_per_layer(plain, efficiency_of(plain), analyse(plain).ops, 0).recompute_s == 0.0


def test_async_tp_pipelines_the_recomputed_gather_with_the_recomputed_matmuls() -> None:
    # Under async TP the recomputed gather pipelines only with the matmuls the policy runs
    # again (wk and w3 of wq, wk, wv, wo, w1, w3, w2): less shows than without async TP, and
    # more than where all of the block's column matmuls ran beside it, as in the forward.
    plan = checkpointed("selective-op", overlap=True)
    eff, ops = efficiency_of(plan), analyse(plan).ops
    layer = tp_per_layer(plan, eff, ops, 0)
    vanilla = checkpointed("selective-op")
    exposed = tp_per_layer(vanilla, efficiency_of(vanilla), analyse(vanilla).ops, 0)
    link = next(str(op.link) for op in ops if op.group == "tp")
    gather = comm_time_s(plan, eff, "all_gather", 4, 8192 * 4096 * 2, link)
    assert 0.0 < layer.recompute_s < exposed.recompute_s
    # at least one of the t chunks of each of the two gathers has nothing beside it
    assert layer.recompute_s >= 2 * gather / 4 - 1e-15


def test_full_recompute_runs_the_whole_forward_again_not_an_extra_gather() -> None:
    # Under full recompute the forward's gathers run again, once each, and its reduce-scatters
    # but the MLP's: torch's checkpoint recomputes only what the backward reads, and nothing
    # reads the reduction of w2's output (planc.perf.sac.unread_tail).
    plan = checkpointed("full")
    layers, m = plan.model.L, plan.m
    assert tp_calls(plan) == {
        "all_gather": 6 * layers * m,
        "reduce_scatter": 5 * layers * m,
    }


def test_verify_recounts_the_recomputed_gathers_from_the_recompute_mode() -> None:
    text = plan_json(compiled(checkpointed("selective-op")))
    result = verify_text(text)
    assert result.ok, render(result)
    data = json.loads(text)
    data["training"]["recompute"] = "none"
    corrupted = verify_text(json.dumps(data))
    assert not corrupted.ok
    assert "tp all_gather" in render(corrupted)
