"""Multi-head latent attention: saved activations and FLOPs per layer (issue 14).

Expected bytes and FLOPs are written out by hand from DeepSeek-V3's dimensions (h 7168, n 128,
d_c' 1536, d_c 512, d_h 128, d_h^R 64, v 128, f 18432). The activation model is also checked
against PyTorch autograd on an MLA layer (tests/test_activations_autograd.py, MLA cases).
"""

from __future__ import annotations

from typing import Any

import yaml

from planc.memory.activations import layer_bytes, layer_terms, shape_of
from planc.perf.inputs import layer_shape, model_flops
from planc.perf.ops import layer_ops
from planc.plannable import Plannable, plannable
from planc.spec.load import load_text

H, N, F = 7168, 128, 18432
Q_LAT, KV_LAT, NOPE, ROPE, V = 1536, 512, 128, 64, 128
QK = NOPE + ROPE


def plan_of(parallelism: dict[str, Any] | None = None, **training: Any) -> Plannable:
    spec = {
        "version": 1,
        "name": "t",
        "model": {"preset": "deepseek-v3"},
        "hardware": {"gpu": "h800", "nodes": 8},
        "parallelism": parallelism or {},
        "training": {"seq_len": 4096, "global_batch": 64, "micro_batch": 1, **training},
    }
    loaded = load_text("t.yaml", yaml.safe_dump(spec))
    assert loaded.job is not None, loaded.findings
    plan = plannable(loaded.job)
    assert isinstance(plan, Plannable), plan
    return plan


def test_mla_layer_activations_flash_by_hand() -> None:
    s = 4096
    x = shape_of(plan_of(attention="flash"))
    attention = (
        2 * s * H  # attention norm input
        + 2 * s * H  # down-projection input (the norm's output)
        + 2 * s * Q_LAT  # q_a output (q_a_layernorm input)
        + 2 * s * Q_LAT  # q_b input
        + 2 * s * (KV_LAT + ROPE)  # kv_a output, kept whole by the split view
        + 2 * s * KV_LAT  # kv_b input
        + 2 * s * N * QK  # Q
        + 2 * s * N * QK  # K (the RoPE key expanded to every head)
        + 2 * s * N * V  # V
        + 4 * N * s  # fp32 log-sum-exp
        + 2 * s * N * V  # attention output (out-projection input)
    )
    mlp = 2 * s * H + 2 * s * H + 2 * 2 * s * F + 2 * s * F  # norm, fc1 in, fc1 out, fc2 in
    assert layer_bytes(x) == attention + mlp
    names = [term.name for term in layer_terms(x)]
    assert "key/value latent (kv_b input)" in names


def test_mla_layer_activations_split_by_tensor_and_sequence_parallelism() -> None:
    # t = 8 with SP: heads 16 per rank; the latents (replicated down projections on the
    # sequence shard) and the norm inputs 1/8 of the sequence.
    s, t = 4096, 8
    x = shape_of(plan_of({"tensor": 8, "sequence_parallel": True}, attention="flash"))
    heads = N // t
    shard = s // t
    attention = (
        2 * 2 * shard * H
        + 2 * 2 * shard * Q_LAT
        + 2 * shard * (KV_LAT + ROPE)
        + 2 * shard * KV_LAT
        + 2 * 2 * s * heads * QK
        + 2 * 2 * s * heads * V
        + 4 * heads * s
    )
    mlp = 2 * 2 * shard * H + 2 * 2 * s * (F // t) + 2 * s * (F // t)
    assert layer_bytes(x) == attention + mlp


def test_mla_eager_keeps_scores_of_all_heads() -> None:
    s = 4096
    flash = layer_bytes(shape_of(plan_of(attention="flash")))
    eager = layer_bytes(shape_of(plan_of(attention="eager")))
    # Eager keeps the softmax output (2·n·s²) instead of the log-sum-exp (4·n·s).
    assert eager - flash == 2 * N * s * s - 4 * N * s


def _forward_flops(name: str, plan: Plannable) -> float:
    return sum(op.forward.flops for op in layer_ops(layer_shape(plan)) if op.name == name)


def test_mla_projection_and_core_flops_by_hand() -> None:
    s = 4096
    plan = plan_of(attention="flash")
    assert _forward_flops("mla q down", plan) == 2 * s * H * Q_LAT
    assert _forward_flops("mla kv down", plan) == 2 * s * H * (KV_LAT + ROPE)
    assert _forward_flops("mla q up", plan) == 2 * s * Q_LAT * N * QK
    assert _forward_flops("mla kv up", plan) == 2 * s * KV_LAT * N * (NOPE + V)
    assert _forward_flops("attention output", plan) == 2 * s * N * V * H
    # Causal fused attention executes half of QKᵀ (over 192 channels) and PV (over 128).
    assert _forward_flops("flash attention", plan) == 0.5 * (2 * N * s * s * QK + 2 * N * s * s * V)
    # t = 8: up and output projections split over heads; the down projections stay whole on
    # every rank (their rows are the full sequence without SP).
    split = plan_of({"tensor": 8}, attention="flash")
    assert _forward_flops("mla q up", split) == 2 * s * Q_LAT * (N // 8) * QK
    assert _forward_flops("mla q down", split) == 2 * s * H * Q_LAT


def test_model_flops_of_the_mla_stack_with_experts() -> None:
    # 3·B·(Σ_layers (2·s·W + 2·s²·n·(d_h + d_h^R + v)) + 2·s·h·V), W a layer's matrix weights:
    # the 3 dense layers' MLP, and in the 58 MoE layers the 8 routed experts a token uses, the
    # shared one and the h·E router (active parameters).
    s, B, vocab = 4096, 64, 129280
    attention = H * Q_LAT + Q_LAT * N * QK + H * (KV_LAT + ROPE) + KV_LAT * N * 256 + N * V * H
    dense = attention + 3 * H * F
    moe = attention + 3 * H * (8 + 1) * 2048 + H * 256
    core = 2 * s * s * N * (QK + V)
    layers = 3 * (2 * s * dense + core) + 58 * (2 * s * moe + core)
    expected = 3 * B * (layers + 2 * s * H * vocab)
    assert model_flops(plan_of()) == float(expected)
