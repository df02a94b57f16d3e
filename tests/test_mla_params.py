"""Multi-head latent attention and multi-token prediction: parameter counts (issue 14).

Expected values are written out per tensor from the Hugging Face configs
(deepseek-ai/DeepSeek-V3 and DeepSeek-V2-Lite config.json; DeepseekV3Attention's q_a_proj,
q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj), independently
of planc's functions, and checked against the published rounded figures.
"""

from __future__ import annotations

import pytest
import yaml

from planc.memory import parameter_count
from planc.memory.engines import largest_module
from planc.memory.params import layer_parameters, rank_parameters
from planc.plannable import Plannable, plannable
from planc.presets import model_preset
from planc.spec.load import load_text

from conftest import model_job

# DeepSeek-V3 config.json: hidden 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512,
# qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, intermediate_size 18432,
# moe_intermediate_size 2048, n_routed_experts 256, n_shared_experts 1, num_experts_per_tok 8,
# first_k_dense_replace 3, num_hidden_layers 61, vocab_size 129280, untied, RMSNorm.
H, N, VOCAB = 7168, 128, 129280
Q_A = H * 1536  # q_a_proj
Q_NORM = 1536  # q_a_layernorm
Q_B = 1536 * N * (128 + 64)  # q_b_proj
KV_A = H * (512 + 64)  # kv_a_proj_with_mqa
KV_NORM = 512  # kv_a_layernorm
KV_B = 512 * N * (128 + 128)  # kv_b_proj
O_PROJ = N * 128 * H  # o_proj
ATTENTION = Q_A + Q_NORM + Q_B + KV_A + KV_NORM + KV_B + O_PROJ
NORMS = 2 * H  # input_layernorm, post_attention_layernorm
DENSE_MLP = 3 * H * 18432  # gate, up, down
EXPERT = 3 * H * 2048
ROUTER = H * 256 + 256  # gate.weight and e_score_correction_bias
DENSE_LAYER = ATTENTION + NORMS + DENSE_MLP
MOE_LAYER = ATTENTION + NORMS + ROUTER + EXPERT + 256 * EXPERT  # 1 shared + 256 routed
ACTIVE_MOE_LAYER = ATTENTION + NORMS + ROUTER + EXPERT + 8 * EXPERT
EMBEDDING = VOCAB * H
MAIN = 3 * DENSE_LAYER + 58 * MOE_LAYER + 2 * EMBEDDING + H  # embed, lm_head, final norm
ACTIVE = 3 * DENSE_LAYER + 58 * ACTIVE_MOE_LAYER + 2 * EMBEDDING + H
# One MTP module: model.layers.61 (an MoE layer, as layer 60), enorm, hnorm, eh_proj 2h × h and
# shared_head.norm; the embedding and head it shares are not counted again.
MTP = MOE_LAYER + 3 * H + 2 * H * H




def test_deepseek_v3_attention_by_hand() -> None:
    assert ATTENTION == 187_107_328
    assert (DENSE_LAYER, MOE_LAYER) == (583_483_392, 11_507_286_272)
    # Megatron-LM theoretical_memory_usage.py's MLA term (an independent arrangement):
    # q_lora·(h + n·(d_h + d_h^R) + 1) + kv_lora·(h + n·(d_h + v) + 1) + h·d_h^R + n·v·h.
    megatron = 1536 * (H + N * 192 + 1) + 512 * (H + N * 256 + 1) + H * 64 + N * 128 * H
    assert megatron == ATTENTION
    model = model_job({"preset": "deepseek-v3"}).model
    assert layer_parameters(model) == DENSE_LAYER


def test_deepseek_v3_total_and_active_are_exact_and_published() -> None:
    count = parameter_count(model_job({"preset": "deepseek-v3"}).model)
    assert (count.total, count.active) == (MAIN, ACTIVE)
    assert (MAIN, ACTIVE) == (671_026_419_200, 37_552_297_472)
    assert count.moe_layers == 58
    # Report abstract and README_WEIGHTS.md: 671B total. Activated: 37B in the abstract;
    # README_WEIGHTS.md: 36.6B "including 0.9B for the output Head", i.e. without the input
    # embedding, which a token looks up rather than multiplies: 36.63B rounds to 36.6B.
    assert round(count.total / 1e9) == 671
    assert round((count.active - EMBEDDING) / 1e8) == 366
    assert round((count.active - EMBEDDING) / 1e9) == 37
    preset = model_preset("deepseek-v3")
    assert (preset["parameters"], preset["active_parameters"]) == (MAIN, ACTIVE)


def test_deepseek_v3_mtp_module() -> None:
    count = parameter_count(model_job({"preset": "deepseek-v3", "mtp_layers": 1}).model)
    assert count.mtp == MTP == 11_610_068_224
    assert count.total == MAIN + MTP
    assert count.active == ACTIVE + ACTIVE_MOE_LAYER + 3 * H + 2 * H * H
    # The Hugging Face checkpoint stores the module with its own copies of the embedding and the
    # head: 684.49B, which the README rounds to "685B" (within 0.1 %; the checkpoint also holds
    # the FP8 block scales, which are not parameters).
    checkpoint = count.total + 2 * EMBEDDING
    assert checkpoint == 684_489_845_504
    assert checkpoint == pytest.approx(685e9, rel=1e-3)
    assert parameter_count(model_job({"preset": "deepseek-v3", "mtp_layers": 2}).model).mtp == 2 * MTP


def test_mtp_of_a_dense_model_is_a_dense_layer() -> None:
    # Llama 3 8B with one MTP module: layer + 3 RMSNorms + eh_proj 2·4096².
    model = model_job({"preset": "llama3-8b", "mtp_layers": 1}).model
    layer = 2 * 4096 * 128 * (32 + 8) + 3 * 4096 * 14336 + 2 * 4096
    assert parameter_count(model).mtp == layer + 3 * 4096 + 2 * 4096 * 4096


def test_tensor_parallel_split_of_latent_attention() -> None:
    # t = 8: q_b, kv_b and o split over 16 heads per rank; q_a, kv_a and the latent norms
    # whole on every rank (Megatron: TELinear parallel_mode='duplicated'); MLP split.
    model = model_job({"preset": "deepseek-v3"}).model
    heads = 16
    split = 1536 * heads * 192 + 512 * heads * 256 + heads * 128 * H + 3 * H * (18432 // 8)
    replicated = Q_A + Q_NORM + KV_A + KV_NORM + NORMS
    assert layer_parameters(model, 8) == split + replicated


def test_mtp_sits_on_the_last_stage() -> None:
    job = model_job(
        {"preset": "deepseek-v3", "mtp_layers": 1},
        {"pipeline": 4, "stage_layers": [16, 15, 15, 15], "tensor": 2},
    )
    plan = plannable(job)
    assert isinstance(plan, Plannable), plan
    shares = [rank_parameters(plan, r) for r in range(4)]
    assert [share.mtp_layers for share in shares] == [0, 0, 0, 1]
    # t = ETP = 2, EP 1: the MTP module is a MoE layer like layer 60 (its 64 heads' up and
    # output projections, the replicated latents, norms and router, the shared expert and all
    # 256 experts with f_e split in two), plus eh_proj 2h·h/2 and three norms.
    heads = N // 2
    attention = Q_A + Q_NORM + KV_A + KV_NORM + NORMS
    attention += 1536 * heads * 192 + 512 * heads * 256 + heads * 128 * H
    dense_part = attention + ROUTER + 3 * H * (2048 // 2)
    experts = 256 * 3 * H * (2048 // 2)
    extra = 2 * H * H // 2 + 3 * H
    last = shares[3]
    assert last.moe_layers == 16  # 15 layers and the MTP module
    assert last.expert_total == 16 * experts
    assert last.layer_total == 16 * (dense_part + experts) + extra
    # the final norm, the untied head and the word embedding's copy the MTP module embeds
    # with (Megatron-Core LanguageModule.setup_embeddings_and_output_layer: 'we also need to
    # maintain duplicated embedding weights in mtp process stage')
    assert last.total == last.layer_total + H + 2 * (VOCAB * H // 2)


def test_deepseek_v2_lite_without_query_latent() -> None:
    # DeepSeek-V2-Lite config.json: q_lora_rank null (q_proj h × n·(d_h + d_h^R)), 27 layers,
    # h 2048, 16 heads, first layer dense (10944), 64 routed experts of 1408, 2 shared, top 6,
    # vocab 102400, no router bias. Published (DeepSeek-V2 report, Appendix B): 15.7B total,
    # 2.4B activated.
    model = model_job(
        {
            "layers": 27,
            "hidden": 2048,
            "heads": 16,
            "ffn_hidden": 10944,
            "vocab": 102400,
            "mlp": "swiglu",
            "norm": "rmsnorm",
            "mla": {"kv_lora_rank": 512},
            "moe": {
                "experts": 64,
                "top_k": 6,
                "expert_ffn_hidden": 1408,
                "shared_experts": 2,
                "first_dense_layers": 1,
            },
        }
    ).model
    attention = 2048 * 16 * 192 + 2048 * 576 + 512 + 512 * 16 * 256 + 16 * 128 * 2048
    expert = 3 * 2048 * 1408
    rest = attention + 2 * 2048 + 2048 * 64
    total = (attention + 2 * 2048 + 3 * 2048 * 10944) + 26 * (rest + 66 * expert)
    total += 2 * 102400 * 2048 + 2048
    active = total - 26 * 58 * expert
    count = parameter_count(model)
    assert (count.total, count.active) == (total, active) == (15_706_484_224, 2_661_150_208)
    assert round(count.total / 1e8) == 157
    assert int((count.active - 102400 * 2048) / 1e8) == 24


def test_mla_needs_a_kv_latent_and_refuses_grouped_kv_heads() -> None:
    spec = {
        "version": 1,
        "name": "t",
        "model": {"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "mla": {"v_head_dim": 16}},
        "hardware": {"gpu": "h100-sxm", "nodes": 1},
        "training": {"seq_len": 128, "global_batch": 8},
    }
    loaded = load_text("t.yaml", yaml.safe_dump(spec))
    assert [(f.rule, f.field) for f in loaded.findings] == [("PLC109", "model.mla.kv_lora_rank")]
    job = model_job({"preset": "deepseek-v3", "kv_heads": 8})
    refused = plannable(job)
    assert isinstance(refused, tuple)
    assert [(r.rule, r.violation.field) for r in refused] == [("PLC012", "model.kv_heads")]


def test_the_largest_module_of_a_latent_attention_layer() -> None:
    # DeepSeek-V3, t = 2, a middle stage of MoE layers: its largest single module (DeepSpeed
    # ZeRO-3's largest_layer_params) is o_proj, 64 heads × 128 × 7,168, larger than q_b_proj
    # 1,536 × 64 × 192, kv_b_proj 512 × 64 × 256 and an expert's 7,168 × 2,048 linears.
    job = model_job(
        {"preset": "deepseek-v3"},
        {"pipeline": 4, "stage_layers": [16, 15, 15, 15], "tensor": 2, "expert_tensor": 1},
    )
    plan = plannable(job)
    assert isinstance(plan, Plannable), plan
    assert largest_module(plan, rank_parameters(plan, 1)) == 64 * 128 * H
