"""Q, K, V and the GLU's gate and up as torchtitan (and Hugging Face models under FSDP2) run
them: separate linears on one input, their input gradients summed in backward; Megatron's
fused linear_qkv and linear_fc1 otherwise (`planc.perf.inputs.separate_projections`).

Expected values are the Llama 3 8B dimensions (h 4096, 32 query and 8 KV heads of 128, f
14,336) at TP 2, sequence 8192, micro-batch 1, derived here by hand."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planc.perf.compute import pass_times
from planc.perf.inputs import device_of, efficiency_of, layer_shape
from planc.perf.ops import OpCost, layer_ops, moe_layer_ops, quantization
from planc.perf.sac import recomputed_shares
from planc.plannable import Plannable

from conftest import job_of

TOKENS, H = 8192, 4096  # rows of one micro-batch (no CP, no SP split of the GEMM rows), h


def job(framework: str, kernels: str = "compiled", **training: Any) -> Plannable:
    tr = {"framework": framework, "kernels": kernels, "recompute": "selective-op"} | training
    if framework != "fsdp2":
        tr = {"framework": framework, "kernels": "fused", **training}
    return job_of({"parallelism": {"zero_stage": 3 if framework == "fsdp2" else 1}, "training": tr})


def ops_of(plan: Plannable) -> dict[str, OpCost]:
    return {op.name: op for op in layer_ops(layer_shape(plan))}


def columns(op: OpCost) -> int:
    assert op.shape is not None
    return op.shape.n


def test_torchtitan_runs_wq_wk_wv_and_w1_w3_as_their_own_matmuls() -> None:
    ops = ops_of(job("fsdp2"))
    # per TP rank: 16 query heads and 4 KV heads of 128; f/t = 7,168
    assert [columns(ops[f"qkv ({w})"]) for w in ("wq", "wk", "wv")] == [2048, 512, 512]
    assert [columns(ops[f"mlp fc1 ({w})"]) for w in ("w1", "w3")] == [7168, 7168]
    assert "qkv" not in ops and "mlp fc1" not in ops
    # Megatron fuses them: one [h, (n + 2g)·k/t] and one [h, 2f/t] matmul.
    fused = ops_of(job("megatron"))
    assert columns(fused["qkv"]) == 3072 and columns(fused["mlp fc1"]) == 14336
    # the same FLOPs either way
    for name, parts in (("qkv", ("wq", "wk", "wv")), ("mlp fc1", ("w1", "w3"))):
        split = sum(ops[f"{name} ({p})"].forward.flops for p in parts)
        assert split == pytest.approx(fused[name].forward.flops, rel=1e-12)


@pytest.mark.parametrize(
    ("kernels", "qkv_bytes", "fc1_bytes"), [("compiled", 4, 3), ("unfused", 6, 3)]
)
def test_the_input_gradients_are_summed(kernels: str, qkv_bytes: int, fc1_bytes: int) -> None:
    # Compiled: one kernel reads the parts' gradients and writes the sum ((parts + 1)·β per
    # element); eager: autograd adds them as they arrive (3β per add).
    ops = ops_of(job("fsdp2", kernels))
    elements = TOKENS * H
    assert ops["qkv input-gradient sum"].backward_data.bytes == qkv_bytes * 2 * elements
    assert ops["mlp fc1 input-gradient sum"].backward_data.bytes == fc1_bytes * 2 * elements
    assert ops["qkv input-gradient sum"].forward.bytes == 0.0


def test_per_op_checkpointing_recomputes_the_same_matmuls() -> None:
    # wk (2nd aten.mm) and w3 (6th) are recomputed whichever way planc holds them.
    plan = job("fsdp2")
    shape = layer_shape(plan)
    ops = layer_ops(shape)
    shares = dict(zip((op.name for op in ops), recomputed_shares(ops, shape), strict=True))
    assert shares["qkv (wq)"] == 0.0 and shares["qkv (wk)"] == 1.0 and shares["qkv (wv)"] == 0.0
    assert shares["mlp fc1 (w1)"] == 0.0 and shares["mlp fc1 (w3)"] == 1.0
    redone = sum(op.forward.flops * shares[op.name] for op in ops if op.engine == "matrix")
    # wk: 2·T·h·512, w3: 2·T·h·7168; not wo (the 4th): under sequence parallelism its output
    # only feeds the reduce-scatter, whose output the policy saves, so a compiled block's
    # backward never reads it (planc.perf.sac.unread_tail)
    assert shares["attention output"] == 0.0
    assert redone == pytest.approx(2 * TOKENS * H * (512 + 7168), rel=1e-12)


def quantized_input_bytes(kernels: str) -> float:
    plan = job("fsdp2", kernels, precision="fp8", fp8={"recipe": "tensorwise"})
    q = plan.numerics.quantized
    assert q is not None
    ops = ops_of(plan)
    return sum(
        k.forward.bytes
        for p in ("wq", "wk", "wv")
        for k in quantization(ops[f"qkv ({p})"], q, 2, 1.0)
    )


def test_a_compiled_graph_casts_the_shared_input_once() -> None:
    # The three linears cast the same input; AOT autograd's common-subexpression elimination
    # merges the identical casts in a compiled block, eager runs each (tensorwise: an amax
    # read, a cast read and two one-byte copies per element of X, 6 bytes).
    x = TOKENS * H
    assert quantized_input_bytes("unfused") - quantized_input_bytes("compiled") == 2 * 6 * x


def test_a_moe_layer_keeps_no_dense_mlp() -> None:
    # The MoE layer replaces the dense MLP, its separate w1 and w3 and their sum included.
    plan = job_of(
        {
            "training": {"framework": "fsdp2", "kernels": "compiled"},
            "parallelism": {"zero_stage": 3},
        },
        base="mixtral-8x7b-64xh100.yaml",
    )
    assert plan.dims.experts is not None
    names = [op.name for op in moe_layer_ops(layer_shape(plan), plan.dims.experts)]
    assert not [n for n in names if n.startswith("mlp fc1")]
    assert "qkv (wq)" in names and "qkv input-gradient sum" in names


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    preset=st.sampled_from(["llama3-8b", "llama3-70b", "gpt3-175b", "qwen3-30b-a3b"]),
    t=st.sampled_from([1, 2, 4, 8]),
    s=st.sampled_from([2048, 4096, 8192]),
    b=st.sampled_from([1, 2, 4]),
    kernels=st.sampled_from(["compiled", "unfused", "fused"]),
    gpu=st.sampled_from(["h100-sxm", "b200", "a100-80gb"]),
)
def test_splitting_the_projections_never_makes_a_layer_faster(
    preset: str, t: int, s: int, b: int, kernels: str, gpu: str
) -> None:
    # The same FLOPs in smaller matmuls, the input read once per linear and a gradient sum on
    # top: whatever the shapes, the split layer takes at least the fused one's time.
    plan = job_of(
        {
            "model": {"preset": preset},
            "hardware": {"gpu": gpu},
            "parallelism": {"tensor": t, "sequence_parallel": t > 1, "zero_stage": 3},
            "training": {
                "framework": "fsdp2",
                "kernels": kernels,
                "seq_len": s,
                "micro_batch": b,
                "global_batch": b * max(1, 8 // t),
            },
        }
    )
    shape, device, eff = layer_shape(plan), device_of(plan), efficiency_of(plan)
    split = pass_times(layer_ops(shape), device, eff)
    fused = pass_times(layer_ops(replace(shape, separate=False)), device, eff)
    assert split.forward_s + split.backward_s >= fused.forward_s + fused.backward_s - 1e-12
