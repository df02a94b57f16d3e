"""Kimi K2 (Moonshot AI): the `kimi-k2` preset and its Hugging Face config (`model_type kimi_k2`).

What is checked, each against an independent source:
- the parameter count is worked by hand here from the config's shapes (DeepSeek-V3's
  architecture: latent attention with its two latent norms, one dense layer, 60 MoE layers of 384
  routed experts, one shared expert and a router with its expert bias), and agrees with the model
  card's rounded figures (1T total, 32B activated);
- a config.json of `model_type kimi_k2` (architectures DeepseekV3ForCausalLM) reads into the same
  model;
- the model FLOPs per token agree with Megatron-Bridge v0.4.2's flop_utils.py transformer_flops,
  written out here (causal attention at half, no router), and that formula with the published
  26.04.01 row (1,088 TFLOP/s/GPU at 5,328 tokens/s/GPU).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_hfconfig import hf_job

from planc.memory import parameter_count
from planc.perf.inputs import model_flops
from planc.presets import model_preset
from planc.spec.load import load_text

from conftest import model_job, plannable_of

H, L, N, V = 7168, 61, 64, 163_840
Q_LORA, KV_LORA, NOPE, ROPE, V_HEAD = 1536, 512, 128, 64, 128
E, K, F_E, F = 384, 8, 2048, 18_432
SEQ = 4096


def _by_hand() -> tuple[int, int]:
    """(total, active) of Kimi K2 from its shapes, both embedding matrices counted."""
    attention = (
        H * Q_LORA + Q_LORA  # q_a_proj and its norm
        + Q_LORA * N * (NOPE + ROPE)  # q_b_proj
        + H * (KV_LORA + ROPE) + KV_LORA  # kv_a_proj_with_mqa and its norm
        + KV_LORA * N * (NOPE + V_HEAD)  # kv_b_proj
        + N * V_HEAD * H  # o_proj
        + 2 * H  # input and post-attention RMSNorms
    )
    expert = 3 * H * F_E
    router = E * H + E  # gate weight and e_score_correction_bias
    dense_layer = attention + 3 * H * F
    moe_layer = attention + router + expert  # + the routed experts below
    ends = 2 * V * H + H  # embedding, LM head, final norm
    total = dense_layer + (L - 1) * (moe_layer + E * expert) + ends
    active = dense_layer + (L - 1) * (moe_layer + K * expert) + ends
    return total, active


def test_the_preset_is_the_count_by_hand() -> None:
    count = parameter_count(model_job({"preset": "kimi-k2"}).model)
    total, active = _by_hand()
    assert (count.total, count.active) == (total, active)
    preset = model_preset("kimi-k2")
    assert (preset["parameters"], preset["active_parameters"]) == (total, active)


def test_the_model_card_s_rounded_figures() -> None:
    total, active = _by_hand()
    assert total / 1e12 == pytest.approx(1.0, rel=0.03)  # "1T total parameters"
    # "32B activated": without the input embedding, which a token only looks up
    assert (active - V * H) / 1e9 == pytest.approx(32.0, rel=0.02)


def test_a_kimi_k2_config_reads_as_the_preset(tmp_path: Path) -> None:
    model = hf_job(tmp_path, "kimi-k2").model
    assert model.mla is not None and model.moe is not None
    assert (model.moe.E, model.moe.k, model.moe.first_dense, model.n) == (E, K, 1, N)
    count = parameter_count(model)
    assert (count.total, count.active) == _by_hand()


def _bridge_flops_per_token() -> float:
    """Megatron-Bridge v0.4.2 flop_utils.py transformer_flops for Kimi K2 at s = 4,096, one
    token: 3 × 2 × (MLA projections, o_proj, core attention at half) per layer, 12 × h × the
    SwiGLU MLPs (× 3/2) of the dense layer, the routed and the shared experts, and the logits."""
    q_term = Q_LORA * (H + N * (NOPE + ROPE) + 1)
    kv_term = KV_LORA * (H + N * (NOPE + V_HEAD) + 1) + H * ROPE
    core = SEQ * N * (NOPE + ROPE) / 2 + SEQ * N * V_HEAD / 2
    attention = 6 * L * (q_term + kv_term + N * V_HEAD * H + core)
    mlp = 12 * H * 1.5 * (F + (L - 1) * (K * F_E + F_E))
    return attention + mlp + 6 * H * V


def test_model_flops_agree_with_megatron_bridge_and_its_table() -> None:
    spec = {
        "version": 1,
        "name": "t",
        "model": {"preset": "kimi-k2"},
        "hardware": {"gpu": "gb300-nvl72", "nodes": 64, "nvlink_domain": 64},
        "parallelism": {"pipeline": 4, "virtual_stages": 4, "expert": 64,
                        "pipeline_layout": "Et*4|(t*4|)*14,tL"},
        "training": {"seq_len": SEQ, "micro_batch": 2, "global_batch": 4096},
    }
    loaded = load_text("t.yaml", yaml.safe_dump(spec))
    job = plannable_of(loaded.job)
    per_token = model_flops(job) / (4096 * SEQ)
    # planc counts the router's GEMM (3 × 2·h·E per MoE layer) and the core without the causal
    # discount, where Bridge counts neither; Bridge counts the two latent norms (its "+ 1" terms,
    # 3 × 2 × (d_c' + d_c) per layer), which planc prices as kernels but leaves out of MFU
    router = 6 * H * E * (L - 1)
    core = 6 * L * SEQ * N * (NOPE + ROPE + V_HEAD) / 2
    norms = 6 * L * (Q_LORA + KV_LORA)
    bridge = _bridge_flops_per_token()
    assert per_token - router - core + norms == pytest.approx(bridge, rel=1e-12)
    # the 26.04.01 table: 1,088 TFLOP/s/GPU at 5,328 tokens/s/GPU, each rounded to the unit
    assert bridge * 5328 / 1e12 == pytest.approx(1088, abs=2)
