"""torchtitan's per-op selective activation checkpointing, training.recompute: selective-op
(torchtitan parallelize_llama.py _apply_ac_to_transformer_block at 9dec370, issue 24).

Its policy saves every aten.mm output but every second one's, and SDPA's, and recomputes the
rest. In the Llama block the matmuls run wq, wk, wv, wo, w1, w3, w2: wk, wo and w3 are
recomputed (the 2nd, 4th and 6th), with every norm, rotary embedding, SwiGLU and residual add
but the closing one, which no backward reads (planc.perf.sac.unread_tail).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from planc.memory.activations import layer_bytes, shape_of
from planc.perf.compute import pass_times, recompute_time_s, work_time_s
from planc.perf.inputs import device_of, efficiency_of, layer_shape
from planc.perf.ops import layer_ops
from planc.perf.sac import recomputed_shares
from planc.plannable import plannable

from conftest import check_overlay, loaded_spec, spec_text

LLAMA_8B = (
    "parallelism: {tensor: 1, sequence_parallel: false}\n"
    "training: {micro_batch: 2, seq_len: 8192, recompute: selective-op, framework: fsdp2}"
)


def _plan(overlay: str) -> Any:
    plan = plannable(loaded_spec(spec_text(overlay)).job)
    assert not isinstance(plan, tuple), plan
    return plan


def test_the_llama_block_recomputes_wk_wo_w3_and_every_vector_op() -> None:
    shape = layer_shape(_plan(LLAMA_8B))
    ops = layer_ops(shape)
    shares = dict(zip((op.name for op in ops), recomputed_shares(ops, shape), strict=True))
    # torchtitan's separate linears (planc.perf.inputs.separate_projections): wq saved, wk (the
    # 2nd matmul) recomputed, wv saved
    assert [shares[f"qkv ({w})"] for w in ("wq", "wk", "wv")] == [0.0, 1.0, 0.0]
    assert shares["attention output"] == 1.0  # wo, the 4th
    assert shares["mlp fc1 (w1)"] == 0.0  # w1 (5th) saved
    assert shares["mlp fc1 (w3)"] == 1.0  # w3 (6th) recomputed
    assert shares["mlp fc2"] == 0.0  # w2, the 7th, saved
    # The same policy on Megatron's fused matmuls: wk is 1024 of qkv's 6144 columns (wq
    # n·k = 32·128, wk and wv g·k = 8·128), w3 half of fc1's.
    fused = replace(shape, separate=False)
    fused_ops = layer_ops(fused)
    fused_shares = dict(zip((op.name for op in fused_ops), recomputed_shares(fused_ops, fused), strict=True))
    assert fused_shares["qkv"] == pytest.approx(1024 / 6144)
    assert fused_shares["mlp fc1"] == 0.5
    assert shares["flash attention"] == 0.0  # SDPA: saved
    for name in ("input norm", "pre-MLP norm", "swiglu", "attention dropout + residual"):
        assert shares[name] == 1.0


def test_a_gelu_block_saves_fc1_and_recomputes_fc2() -> None:
    plan = _plan(
        "model: {preset: gpt2-small}\nparallelism: {tensor: 1, sequence_parallel: false}\n"
        "training: {recompute: selective-op, framework: fsdp2}"
    )
    shape = layer_shape(plan)
    ops = layer_ops(shape)
    shares = dict(zip((op.name for op in ops), recomputed_shares(ops, shape), strict=True))
    # wq, wk, wv, wo, fc1, fc2: the 2nd, 4th and 6th recompute (a GeLU MLP has one fc1)
    assert [shares[f"qkv ({w})"] for w in ("wq", "wk", "wv")] == [0.0, 1.0, 0.0]
    assert (shares["attention output"], shares["mlp fc1"], shares["mlp fc2"]) == (1.0, 0.0, 1.0)


def test_recompute_time_is_the_recomputed_share_of_each_forward() -> None:
    plan = _plan(LLAMA_8B)
    shape, device, eff = layer_shape(plan), device_of(plan), efficiency_of(plan)
    ops = {op.name: op for op in layer_ops(shape)}

    def fwd(name: str) -> float:
        op = ops[name]
        return work_time_s(op, op.forward, device, eff)

    # not the block's closing residual add: no backward reads its output, and torch's
    # checkpoint stops before it (planc.perf.sac.unread_tail)
    vector = (
        "input norm",
        "rotary",
        "attention dropout + residual",
        "pre-MLP norm",
        "swiglu",
    )
    expected = (
        sum(fwd(name) for name in vector)
        + fwd("qkv (wk)")
        + fwd("attention output")  # wo
        + fwd("mlp fc1 (w3)")
    )
    listed = tuple(ops.values())
    layer = pass_times(listed, device, eff, sac=recomputed_shares(listed, shape))
    assert recompute_time_s(layer, "selective-op") == pytest.approx(expected, rel=1e-12)
    # more than selective (the attention core alone), less than full (the whole forward)
    assert recompute_time_s(layer, "selective") < expected < recompute_time_s(layer, "full")


def test_a_layer_keeps_its_input_and_the_saved_outputs() -> None:
    x = shape_of(_plan(LLAMA_8B))
    tokens = 2 * 8192
    # bf16 per token: input h, wq n·k, wv g·k, SDPA's O n·k, w1 f, w2 h = 4096 + 4096 + 1024 +
    # 4096 + 14336 + 4096 = 31,744 elements, and SDPA's fp32 log-sum-exp, 4 bytes × 32 heads.
    assert layer_bytes(x, "selective-op") == tokens * (2 * 31_744 + 4 * 32)
    assert layer_bytes(x, "full") < layer_bytes(x, "selective-op") < layer_bytes(x, "selective")


def test_the_torchtitan_8b_run_fits_its_96_gb() -> None:
    # torchtitan's Table 1 ran it (82.4 GiB reserved on 96 GB); under planc's attention-core
    # selective it did not fit (PLC007). selective-op keeps 32 layers × 16,384 tokens × 63,616
    # bytes = 31.1 GiB of layer activations.
    def rules(recompute: str) -> set[str]:
        text = spec_text(
            "hardware: {gpu: h100-sxm-hbm2e, nodes: 1}\n"
            "parallelism: {data: 8, tensor: 1, sequence_parallel: false}\n"
            "training: {seq_len: 8192, micro_batch: 2, global_batch: 16, "
            f"recompute: {recompute}, kernels: unfused, framework: fsdp2}}"
        )
        result = check_overlay(text)
        serious = ("error", "fatal")
        assert not [f for f in result.findings if f.severity.value in serious and f.rule != "PLC007"]
        return {f.rule for f in result.findings}

    assert "PLC007" in rules("selective")
    assert "PLC007" not in rules("selective-op")


def test_megatron_does_not_run_it() -> None:
    result = check_overlay("training: {recompute: selective-op, framework: megatron}")
    found = [f for f in result.findings if f.rule == "PLC051"]
    assert found and "torchtitan's per-op" in found[0].message
    fsdp2 = check_overlay("training: {recompute: selective-op, framework: fsdp2}")
    assert not [f for f in fsdp2.findings if "selective-op" in f.message]
