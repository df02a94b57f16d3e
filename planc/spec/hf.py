"""Model dimensions from a Hugging Face `config.json`: a pure mapping, one table per architecture.

`model: {hf_config: path/to/config.json}` reads the architecture fields of a transformers
configuration into planc's model fields (`layers`, `hidden`, `heads`, ...); fields written
beside `hf_config` in the spec override them. Field names and defaults follow transformers
5.24.0 (`models/<arch>/configuration_<arch>.py`): a key a published config leaves out takes the
default transformers would give it, and the notes say so where it matters.

What is read, per architecture (`model_type`):

| planc | llama, mistral, qwen2, qwen3 | gpt2 | gpt_neox |
|---|---|---|---|
| layers | num_hidden_layers | n_layer | num_hidden_layers |
| hidden | hidden_size | n_embd | hidden_size |
| heads | num_attention_heads | n_head | num_attention_heads |
| kv_heads | num_key_value_heads (default heads; mistral 8) | heads | heads |
| head_dim | head_dim (default hidden / heads; qwen3 128) | hidden / heads | hidden / heads |
| ffn_hidden | intermediate_size | n_inner (default 4·hidden) | intermediate_size |
| vocab | vocab_size | vocab_size | vocab_size |
| max_seq_len | max_position_embeddings | n_positions | max_position_embeddings |
| mlp | gated: silu → swiglu (gpt_oss: quick_geglu) | activation_function: gelu | hidden_act: gelu |
| norm | rmsnorm | layernorm | layernorm |
| position_embedding | rope | learned | rope |
| tied_embeddings | tie_word_embeddings (default false) | (default true) | (default false) |
| bias | attention_bias and mlp_bias (llama) | true | attention_bias (default true) |
| dropout | attention_dropout | resid_pdrop | hidden_dropout |

Mistral's sliding_window (4096 by default, every layer) reads as model.sliding_window.
Mixture-of-experts configs read into `model.moe` too (per-layer routers without bias unless
said): `mixtral` (num_local_experts, num_experts_per_tok, intermediate_size as one expert's and
the MLP size; every layer routes); `qwen3_moe` (num_experts, num_experts_per_tok,
moe_intermediate_size; decoder_sparse_step and mlp_only_layers as first_dense_layers,
layer_frequency and layer_offset where one such pattern gives the same layers, else PLC111
naming them; its q_norm/k_norm is model.qk_norm, as Qwen3's); `llama4` (its text_config;
vision_config is a note) and `llama4_text` (num_local_experts, num_experts_per_tok,
intermediate_size per expert and for the one shared expert, intermediate_size_mlp as the dense
layers' ffn_hidden, moe_layers or interleave_moe_layer_step s as layers s − 1, 2s − 1, ...; the
weightless L2 QK-norm and the NoPE layers hold no parameter, attention chunking is a note).
`gpt_oss` (num_local_experts, experts_per_token, intermediate_size per expert in every layer;
attention_bias on by default, which puts biases on the router and every expert too, as
Megatron-Core's add_bias_linear; sliding_window as model.sliding_window on its layer_types'
sliding_attention layers, the alternation as full_attention_every; its sinks as
model.attention_sinks).
DeepSeek-V3 (`deepseek_v3`, and Kimi K2's `kimi_k2`, the same architecture) reads as a Llama-like config plus `model.mla` (q_lora_rank,
kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim) and `model.moe` (n_routed_experts,
num_experts_per_tok, moe_intermediate_size, n_shared_experts, first_k_dense_replace,
moe_layer_freq; the router's e_score_correction_bias always); num_nextn_predict_layers is a note
(transformers builds no multi-token prediction module: model.mtp_layers adds it). Fields written
in the spec's model.moe beside hf_config override the config's one by one. Other
mixture-of-experts configurations (qwen2_moe, whose shared_expert_gate planc has no term for,
deepseek_v2, dbrx, ..., and an expert count in a dense architecture's config) and unknown
architectures are refused (PLC111, with the reason). A value planc cannot use (a missing
dimension, a number that is not a positive integer, an activation it has no model for) is
PLC110. What planc reads but models approximately (Qwen2's QKV-only biases, sliding-window and
chunked attention) or does not read at all
(RoPE scaling, partial rotary, parallel residual, a checkpoint's quantization, keys it does not
know) is an info note naming the fields and why; but a parameter planc has no term for (GPT-2's
add_cross_attention) and a key it does not know whose name says it sizes the model (num_..., a
..._size, ..._dim, ..._experts, ..._bias set to something) are errors, since the counts would
not be the file's model. Every other spelling a config class accepts for a key (its
attribute_map: GPT2Config hidden_size for n_embd, Qwen3MoeConfig num_local_experts for
num_experts, ...) is read as the key; RoPE's θ is read where transformers 5 writes it
(rope_parameters.rope_theta), else rope_theta, else the class's default_theta.
tests/test_hfconfig_roundtrip.py holds every architecture to transformers' own models of files
its config classes wrote, with every key changed in turn. Bookkeeping keys (token ids, dtype,
epsilon, initializer range, versions) change neither memory nor FLOPs and are skipped silently.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from itertools import pairwise
from types import MappingProxyType
from typing import Any, Literal

from planc.record import record
from planc.vocab import Mlp

SOURCE = "transformers 5.24.0 configuration classes (field names and defaults)"
MAX_BYTES = 1024 * 1024  # a config.json is a few KB
MAX_DIM = 10_000_000  # as planc.spec.models bounds model dimensions
# quick-GELU's σ(1.702·x) (Hendrycks & Gimpel 2016 §2; Megatron-Core activations.quick_gelu)
QUICK_GELU_ALPHA = 1.702

Severity = Literal["error", "info"]


@record
class Note:
    """Something to say about a config: an error (the model cannot be read) or an info note."""

    rule: str
    severity: Severity
    message: str
    fix: str = ""


@record
class HfModel:
    """The planc model fields a config gives, and the info notes about it."""

    architecture: str
    fields: Mapping[str, Any]
    notes: tuple[Note, ...]


def _shown(value: object, limit: int = 60) -> str:
    """A config value for a message: its repr, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _error(message: str, fix: str = "", rule: str = "PLC110") -> Note:
    return Note(rule, "error", message, fix)


# The rules of hf_config's info notes (planc/rules/notes.py): ignorable and re-levelled like any
# rule, unlike the input rule PLC110 of a config planc cannot read.
UNMODELLED_ATTENTION = "PLC066"  # an attention pattern counted as full causal attention
NOT_READ = "PLC067"  # a key planc does not read (RoPE scaling kinds, MTP, quantization, ...)
APPROXIMATED = "PLC068"  # a value read as the nearest thing planc models


def _info(message: str, rule: str) -> Note:
    return Note(rule, "info", message)


# ----------------------------------------------------------------------------- the tables


@record
class Architecture:
    """How one `model_type` spells planc's fields, and transformers' defaults for it."""

    label: str
    keys: Mapping[str, str]  # planc field -> config key (layers, hidden, heads, vocab, ...)
    defaults: Mapping[str, Any]  # config key -> transformers' default when the key is absent
    gated: bool  # MLP act(gate)·up with three matrices (swiglu), else act(fc1) with two (gelu)
    activation: str  # the config key naming the activation
    norm: Literal["rmsnorm", "layernorm"]
    position: Literal["rope", "learned"]
    dropout: tuple[str, ...]  # dropout keys; planc takes the largest
    extra: Callable[[Mapping[str, Any], Mapping[str, int]], tuple[bool, list[Note]]]
    # (config, dims) -> (bias, notes): the biases and the parts planc approximates
    sections: Callable[[Mapping[str, Any]], dict[str, Any] | list[Note]] | None = None
    # config -> model.moe / model.mla, or the errors; None: a dense architecture
    qk_norm: bool = False  # a weighted RMSNorm over each query and key head (Qwen3)
    # The GLU the architecture's MLP computes whatever its activation key says (GPT-OSS's
    # experts: quick-GEGLU); None: the activation key decides (`_mlp`).
    glu: Mlp | None = None
    aliases: tuple[tuple[str, str], ...] = ()
    # (other spelling, the key): the config class's attribute_map (transformers 5.24.0), which
    # it accepts in a config.json as the key itself
    rope_theta: float = 10_000.0  # the config class's default_theta, when the config gives none


_LLAMA_KEYS = MappingProxyType(
    {
        "layers": "num_hidden_layers",
        "hidden": "hidden_size",
        "heads": "num_attention_heads",
        "kv_heads": "num_key_value_heads",
        "head_dim": "head_dim",
        "ffn_hidden": "intermediate_size",
        "vocab": "vocab_size",
        "max_seq_len": "max_position_embeddings",
    }
)


def _unmodelled(label: str, parts: list[tuple[str, int]]) -> list[Note]:
    """One info note for parameters planc leaves out, with their exact count."""
    parts = [(what, count) for what, count in parts if count]
    if not parts:
        return []
    total = sum(count for _, count in parts)
    listed = "; ".join(f"{what}: {count:,}" for what, count in parts)
    return [
        _info(
            f"{label}: {total:,} parameters planc does not model ({listed}); counts, memory and "
            "FLOPs leave them out",
            APPROXIMATED,
        )
    ]


def _attention_bias(dims: Mapping[str, int]) -> int:
    """Biases of Q, K, V and O in every layer: L·((n + 2g)·k + h)."""
    return dims["layers"] * (
        (dims["heads"] + 2 * dims["kv_heads"]) * dims["head_dim"] + dims["hidden"]
    )


def _qkv_bias(dims: Mapping[str, int]) -> int:
    """Biases of Q, K and V only: L·(n + 2g)·k."""
    return dims["layers"] * (dims["heads"] + 2 * dims["kv_heads"]) * dims["head_dim"]


def _gated_mlp_bias(dims: Mapping[str, int]) -> int:
    """Biases of gate, up and down: L·(2f + h)."""
    return dims["layers"] * (2 * dims["ffn_hidden"] + dims["hidden"])


def _sliding_window(config: Mapping[str, Any], label: str, enabled: bool) -> list[Note]:
    window = config.get("sliding_window", 4096) if enabled else None
    if window is None:
        return []
    return [
        _info(
            f"{label}: sliding_window {window} is not read: planc counts full causal "
            "attention, so attention FLOPs (and the step time) are over-estimated for sequences "
            "longer than the window; memory is the same with flash attention. State it as "
            f"model.sliding_window: {window} to have it priced",
            UNMODELLED_ATTENTION,
        )
    ]


def _llama(config: Mapping[str, Any], dims: Mapping[str, int]) -> tuple[bool, list[Note]]:
    """LlamaConfig: attention_bias covers q, k, v and o; mlp_bias gate, up and down. planc's
    `bias` is all of them or none, so a config with one of the two is modelled without."""
    attention, mlp = bool(config.get("attention_bias", False)), bool(config.get("mlp_bias", False))
    if attention == mlp:
        return attention, []
    parts = [("attention_bias", _attention_bias(dims) if attention else 0)]
    parts.append(("mlp_bias", _gated_mlp_bias(dims) if mlp else 0))
    return False, _unmodelled("biases of one kind only", parts)


def _mistral(config: Mapping[str, Any], dims: Mapping[str, int]) -> tuple[bool, list[Note]]:
    """MistralConfig: no biases; its sliding window is `window_fields`'."""
    return False, []


def window_fields(config: Mapping[str, Any], default: int | None = 4096) -> dict[str, Any] | list[Note]:
    """model.sliding_window of a Mistral or Mixtral config: MistralAttention and
    MixtralAttention window every layer by sliding_window (`default` where the config leaves it
    out: 4096 in MistralConfig, none in MixtralConfig; null turns it off)."""
    window = config.get("sliding_window", default)
    if window is None:
        return {}
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        return [_error(f"sliding_window in the config must be a positive integer or null, got {_shown(window)}")]
    return {"sliding_window": window}


def _qwen2(config: Mapping[str, Any], dims: Mapping[str, int]) -> tuple[bool, list[Note]]:
    """Qwen2: q, k and v always carry biases (o and the MLP none); sliding windows only with
    use_sliding_window."""
    notes = _unmodelled("qwen2", [("q/k/v biases", _qkv_bias(dims))])
    notes += _sliding_window(config, "qwen2", bool(config.get("use_sliding_window", False)))
    return False, notes


def _qwen3(config: Mapping[str, Any], dims: Mapping[str, int]) -> tuple[bool, list[Note]]:
    """Qwen3 and Qwen3-MoE: the RMSNorm over each query and key head (q_norm, k_norm) is
    model.qk_norm; attention_bias (q, k, v, o) off by default."""
    attention = bool(config.get("attention_bias", False))
    notes = _unmodelled("qwen3", [("attention_bias", _attention_bias(dims) if attention else 0)])
    notes += _sliding_window(config, "qwen3", bool(config.get("use_sliding_window", False)))
    return False, notes


def _gpt_oss(config: Mapping[str, Any], dims: Mapping[str, int]) -> tuple[bool, list[Note]]:
    """GptOssConfig: attention_bias (q, k, v, o; on by default) and, as Megatron-Core builds it
    (add_bias_linear), the router's and every expert's biases. Its experts' GLU is quick-GEGLU,
    gate·σ(swiglu_alpha·gate)·(up + 1) (transformers GptOssExperts), Megatron-Core's quick_gelu
    with glu_linear_offset 1, whose σ takes 1.702: another swiglu_alpha is a note."""
    notes = []
    alpha = config.get("swiglu_alpha", QUICK_GELU_ALPHA)
    if alpha != QUICK_GELU_ALPHA:
        notes.append(
            _info(
                f"gpt_oss: swiglu_alpha {_shown(alpha)} is modelled as quick-GEGLU's "
                f"{QUICK_GELU_ALPHA} (Megatron-Core quick_gelu): the same matrices and FLOPs",
                APPROXIMATED,
            )
        )
    if config.get("attention_bias", True) is not True:
        # transformers' GptOssExperts and GptOssTopKRouter keep their biases whatever
        # attention_bias says; planc's model.bias (Megatron's add_bias_linear) is one switch
        notes.append(
            _error(
                "gpt_oss: attention_bias false leaves the router's and experts' biases in "
                "(transformers' GptOssExperts, GptOssTopKRouter), which planc's one model.bias "
                "cannot state",
                "use attention_bias: true, or state the model's fields in the spec",
            )
        )
    return True, notes


def _mixtral(config: Mapping[str, Any], dims: Mapping[str, int]) -> tuple[bool, list[Note]]:
    """Mixtral: no biases; its sliding window (off by default, null) is `mixtral_fields`'."""
    return False, []


def _llama4(config: Mapping[str, Any], dims: Mapping[str, int]) -> tuple[bool, list[Note]]:
    """Llama 4 text model: attention_bias off by default. use_qk_norm is an L2 norm without
    weights and the NoPE layers (no_rope_layers) only skip the rotation: no parameter either
    way. The RoPE layers attend within chunks of attention_chunk_size (default 8192)."""
    chunk = config.get("attention_chunk_size", 8192)
    notes = []
    if chunk is not None:
        notes.append(
            _info(
                f"llama4: attention_chunk_size {chunk} is not modelled: planc counts full causal "
                "attention in every layer, so attention FLOPs (and the step time) are "
                "over-estimated for sequences longer than the chunk; memory is the same with "
                "flash attention",
                UNMODELLED_ATTENTION,
            )
        )
    if config.get("attention_bias", False):
        # Llama4TextAttention: q, k, v and o carry biases; the MLPs and experts none.
        notes += _unmodelled("llama4", [("attention_bias", _attention_bias(dims))])
    return False, notes


def _gpt2(config: Mapping[str, Any], dims: Mapping[str, int]) -> tuple[bool, list[Note]]:
    """GPT-2: every linear layer carries a bias (Conv1D). add_cross_attention gives every block
    a second attention over an encoder's states (GPT2Block.crossattention), which a decoder-only
    plan has no term for."""
    if config.get("add_cross_attention", False):
        return True, [
            _error(
                "add_cross_attention true: every GPT-2 block gets a cross-attention over an "
                "encoder's states and its norm, parameters planc has no term for (a decoder-only "
                "model)",
                "set add_cross_attention to false in the config (GPT2LMHeadModel pretraining has "
                "none), or give the model's fields in the spec instead of hf_config",
            )
        ]
    return True, []


def _gpt_neox(config: Mapping[str, Any], dims: Mapping[str, int]) -> tuple[bool, list[Note]]:
    """GPT-NeoX: attention_bias covers query_key_value and dense; the MLP always has biases.
    rotary_pct < 1 rotates part of each head (no parameters either way); the parallel residual
    changes neither parameters nor FLOPs."""
    notes: list[Note] = []
    rotary = config.get("rotary_pct", config.get("partial_rotary_factor", 0.25))
    if isinstance(rotary, (int, float)) and rotary != 1:
        notes.append(
            _info(
                f"gpt_neox: rotary_pct {rotary} (partial rotary) is not read: RoPE has no "
                "parameters, and planc counts no FLOPs for it",
                NOT_READ,
            )
        )
    if config.get("use_parallel_residual", True):
        notes.append(
            _info(
                "gpt_neox: use_parallel_residual is not read: attention and MLP in parallel "
                "have the same parameters, FLOPs and saved activations as in sequence",
                NOT_READ,
            )
        )
    if config.get("attention_bias", True):
        return True, notes
    mlp = dims["layers"] * (dims["ffn_hidden"] + dims["hidden"])
    return False, notes + _unmodelled("gpt_neox", [("MLP biases", mlp)])


def _deepseek_v3(config: Mapping[str, Any], dims: Mapping[str, int]) -> tuple[bool, list[Note]]:
    """DeepSeek-V3: no biases (attention_bias off by default); group-limited routing (n_group,
    topk_group) and the routed scaling change neither parameters nor FLOPs; transformers'
    DeepseekV3ForCausalLM drops the multi-token prediction layers of the checkpoint."""
    notes = []
    mtp = config.get("num_nextn_predict_layers")
    if isinstance(mtp, int) and not isinstance(mtp, bool) and mtp > 0:
        notes.append(
            _info(
                f"num_nextn_predict_layers {mtp} is not read: transformers' "
                "DeepseekV3ForCausalLM builds no multi-token prediction module; set "
                f"model.mtp_layers: {mtp} to train one",
                NOT_READ,
            )
        )
    if config.get("attention_bias", False):
        notes += _unmodelled("deepseek_v3", [("attention_bias", _mla_bias(config, dims))])
    return False, notes


def _mla_bias(config: Mapping[str, Any], dims: Mapping[str, int]) -> int:
    """DeepseekV3Attention's biases with attention_bias: q_a_proj (d_c', when the query has a
    latent), kv_a_proj_with_mqa (d_c + d_h^R) and o_proj (h) in every layer; the up-projections
    (q_b_proj, q_proj, kv_b_proj) have none. Defaults as in _DEEPSEEK_MLA."""

    def width(key: str, default: int) -> int:
        value = config.get(key, default)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    q_latent = width("q_lora_rank", 1536) if config.get("q_lora_rank", 1536) is not None else 0
    per_layer = q_latent + width("kv_lora_rank", 512) + width("qk_rope_head_dim", 64)
    return dims["layers"] * (per_layer + dims["hidden"])


# DeepseekV3Config (transformers 5.24.0) keys planc reads into model.mla and model.moe, with
# their defaults; q_lora_rank may be null (no query latent, as DeepSeek-V2-Lite).
_DEEPSEEK_MLA = (
    ("kv_lora_rank", "kv_lora_rank", 512),
    ("qk_nope_head_dim", "qk_nope_head_dim", 128),
    ("qk_rope_head_dim", "qk_rope_head_dim", 64),
    ("v_head_dim", "v_head_dim", 128),
)
_DEEPSEEK_MOE = (
    ("experts", "n_routed_experts", 256),
    ("top_k", "num_experts_per_tok", 8),
    ("expert_ffn_hidden", "moe_intermediate_size", 2048),
    ("shared_experts", "n_shared_experts", 1),
    ("first_dense_layers", "first_k_dense_replace", 3),
    ("layer_frequency", "moe_layer_freq", 1),
)
# DeepSeek keys that change neither parameters, memory nor FLOPs (routing policy, balancing).
_DEEPSEEK_ROUTING = frozenset(
    {
        "n_group",
        "topk_group",
        "topk_method",
        "norm_topk_prob",
        "routed_scaling_factor",
        "scoring_func",
        "aux_loss_alpha",
        "seq_aux",
        "ep_size",
        "num_nextn_predict_layers",
        "q_lora_rank",
        "output_router_logits",
        "qk_head_dim",  # qk_nope_head_dim + qk_rope_head_dim, derived
        "rope_interleave",  # the order of the rotated channels: no parameter
    }
)


def deepseek_fields(config: Mapping[str, Any]) -> dict[str, Any] | list[Note]:
    """model.mla and model.moe of a DeepSeek-V3 config, or the errors that say why not. The
    router keeps e_score_correction_bias in every MoE layer (DeepseekV3TopkRouter); a shared
    expert has the routed experts' size (DeepseekV3MoE: moe_intermediate_size · n_shared_experts)."""
    errors: list[Note] = []
    mla: dict[str, Any] = {}
    moe: dict[str, Any] = {"router_bias": True}
    for target, table in ((mla, _DEEPSEEK_MLA), (moe, _DEEPSEEK_MOE)):
        for field, key, default in table:
            value = _integer(config, key, default, "DeepSeek-V3")
            if isinstance(value, Note):
                errors.append(value)
            else:
                target[field] = value
    q_lora = config.get("q_lora_rank", 1536)
    if q_lora is not None:
        value = _integer(config, "q_lora_rank", 1536, "DeepSeek-V3")
        if isinstance(value, Note):
            errors.append(value)
        else:
            mla["q_lora_rank"] = value
    routing = _deepseek_routing(config)
    if isinstance(routing, Note):
        return [*errors, routing]
    if errors:
        return errors
    moe["shared_expert_ffn_hidden"] = moe["expert_ffn_hidden"]
    return {"mla": mla, "moe": {**moe, **routing}}


def _deepseek_routing(config: Mapping[str, Any]) -> dict[str, Any] | Note:
    """Group-limited routing (n_group, topk_group: DeepseekV3TopkRouter picks the top
    topk_group groups by the sum of each group's two best scores, then the top_k experts among
    them) and routed_scaling_factor, with DeepseekV3Config's defaults (8, 4, 2.5). One group is
    no grouping; a factor of 1 no scaling."""
    groups = _integer(config, "n_group", 8, "DeepSeek-V3")
    group_k = _integer(config, "topk_group", 4, "DeepSeek-V3")
    if isinstance(groups, Note):
        return groups
    if isinstance(group_k, Note):
        return group_k
    scaling = config.get("routed_scaling_factor")
    scaling = 2.5 if scaling is None else scaling
    if isinstance(scaling, bool) or not isinstance(scaling, int | float) or not 0.001 <= scaling <= 1000:
        return _error(
            f"routed_scaling_factor in the config must be a number from 0.001 to 1,000, got "
            f"{_shown(scaling)}",
            "fix routed_scaling_factor in the config, or give model.moe.router_scaling_factor",
        )
    score = config.get("scoring_func", "sigmoid")
    if score not in ("sigmoid", "softmax"):
        return _error(
            f"scoring_func {_shown(score)}: planc knows sigmoid and softmax routers",
            "give model.moe.router_score in the spec instead of hf_config",
        )
    # DeepseekV3TopkRouter renormalises the top-k sigmoid weights with norm_topk_prob (default
    # true).
    read: dict[str, Any] = {
        "router_score": score,
        "router_normalize": bool(config.get("norm_topk_prob", True)),
    }
    if groups > 1:
        read |= {"router_groups": groups, "router_group_top_k": group_k}
    if scaling != 1:
        read["router_scaling_factor"] = float(scaling)
    return read


def layer_pattern(moe_layers: Sequence[int], L: int) -> tuple[int, int, int] | None:
    """(first_dense_layers, layer_frequency, layer_offset) whose pattern — layer i has experts
    when i ≥ first_dense_layers and i % layer_frequency == layer_offset — gives exactly the
    layers `moe_layers` of L, or None when no such pattern does (experts that stop before the
    last period, or uneven gaps)."""
    layers = sorted(set(moe_layers))
    if not layers or layers[0] < 0 or layers[-1] >= L:
        return None
    gaps = {b - a for a, b in pairwise(layers)}
    if len(gaps) > 1:
        return None  # uneven gaps
    # One MoE layer: a period that reaches past the last layer.
    frequency = gaps.pop() if gaps else L - layers[0]
    if layers[-1] + frequency < L:
        return None  # the experts stop before the last layer's period
    offset = layers[0] % frequency
    return (0 if layers[0] < frequency else layers[0]), frequency, offset


def _pattern_fields(
    moe_layers: Sequence[int], L: int, label: str, keys: str
) -> dict[str, int] | list[Note]:
    """model.moe's layer fields for the layers with experts, or the refusal naming `keys`."""
    fitted = layer_pattern(moe_layers, L)
    if fitted is None:
        shown = _shown(sorted(set(moe_layers)), 120)
        return [
            _error(
                f"{label}: {keys} put the experts in layers {shown} of {L}, which planc's one "
                "pattern (first_dense_layers, then every layer_frequency-th layer from "
                "layer_offset) cannot express",
                "give the model's fields and the nearest model.moe pattern in the spec instead "
                "of hf_config",
                rule="PLC111",
            )
        ]
    first_dense, frequency, offset = fitted
    return {"first_dense_layers": first_dense, "layer_frequency": frequency, "layer_offset": offset}


def _read_integers(
    config: Mapping[str, Any], table: Sequence[tuple[str, str, int]], label: str
) -> dict[str, int] | list[Note]:
    """planc field -> the config's whole number (its transformers default when absent)."""
    values: dict[str, int] = {}
    errors: list[Note] = []
    for field, key, default in table:
        value = _integer(config, key, default, label)
        if isinstance(value, Note):
            errors.append(value)
        else:
            values[field] = value
    return errors or values


# MixtralConfig (transformers 5.24.0): every layer routes; intermediate_size is one expert's.
_MIXTRAL_MOE = (
    ("experts", "num_local_experts", 8),
    ("top_k", "num_experts_per_tok", 2),
    ("expert_ffn_hidden", "intermediate_size", 14336),
)
# Qwen3MoeConfig: moe_intermediate_size per expert; intermediate_size is the dense MLP of the
# layers without experts. Layer i has experts when i ∉ mlp_only_layers and
# (i + 1) % decoder_sparse_step == 0 (Qwen3MoeDecoderLayer).
_QWEN3_MOE = (
    ("experts", "num_experts", 128),
    ("top_k", "num_experts_per_tok", 8),
    ("expert_ffn_hidden", "moe_intermediate_size", 768),
)
# Llama4TextConfig: intermediate_size per expert (and the shared expert's), intermediate_size_mlp
# the dense MLP; moe_layers, else range(interleave_moe_layer_step − 1, L, step).
_LLAMA4_MOE = (
    ("experts", "num_local_experts", 16),
    ("top_k", "num_experts_per_tok", 1),
    ("expert_ffn_hidden", "intermediate_size", 8192),
)
# Keys of MoE configs that change neither parameters, memory nor FLOPs (balancing, routing).
_ROUTING = ("router_aux_loss_coef", "router_jitter_noise", "output_router_logits", "norm_topk_prob")


def mixtral_fields(config: Mapping[str, Any]) -> dict[str, Any] | list[Note]:
    """model.moe of a Mixtral config: experts in every layer, no shared expert, a router
    without bias (MixtralSparseMoeBlock); and its sliding window, every layer's where set
    (`window_fields`)."""
    moe = _read_integers(config, _MIXTRAL_MOE, "Mixtral")
    window = window_fields(config, None)
    errors = [*(moe if isinstance(moe, list) else []), *(window if isinstance(window, list) else [])]
    if errors or isinstance(moe, list) or isinstance(window, list):
        return errors
    return {"moe": moe, **window}


# GptOssConfig: num_local_experts of intermediate_size each (experts_per_token, as its
# config.json spells the top-k, is num_experts_per_tok), in every layer.
_GPT_OSS_MOE = (
    ("experts", "num_local_experts", 128),
    ("top_k", "num_experts_per_tok", 4),
    ("expert_ffn_hidden", "intermediate_size", 2880),
)


def gpt_oss_fields(config: Mapping[str, Any]) -> dict[str, Any] | list[Note]:
    """model.moe, the sliding window and the sinks of a GPT-OSS config: experts in every layer,
    the router with a bias (GptOssTopKRouter), per-head sinks (GptOssAttention.sinks), and
    layer_types' sliding_attention layers windowed by sliding_window: full_attention_every N
    where exactly the layers i with (i + 1) % N == 0 are full (Megatron's
    window_attn_skip_freq)."""
    moe = _read_integers(config, _GPT_OSS_MOE, "GPT-OSS")
    window = _integer(config, "sliding_window", 128, "GPT-OSS")
    errors = [item for item in (window,) if isinstance(item, Note)]
    if isinstance(moe, list) or errors:
        return [*(moe if isinstance(moe, list) else []), *errors]
    assert isinstance(window, int)
    if "sliding_window" in config and config["sliding_window"] is None:
        window = 0  # GptOssAttention: no window where sliding_window is None
    L = config.get("num_hidden_layers", 36)
    kinds = config.get("layer_types") or [
        "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(L)
    ]
    full = [i for i, kind in enumerate(kinds) if kind == "full_attention"]
    every = next(
        (n for n in range(1, len(kinds) + 1) if full == [i for i in range(len(kinds)) if (i + 1) % n == 0]),
        None,
    )
    if full and every is None:
        return [
            _error(
                f"layer_types in the config puts full attention on layers {full}, which no "
                "full_attention_every gives (layer i full when (i + 1) % N == 0)"
            )
        ]
    # GptOssExperts: (up + 1) · glu, Megatron-Core's glu_linear_offset 1
    fields: dict[str, Any] = {"moe": moe, "attention_sinks": True, "glu_linear_offset": 1.0}
    limit = config.get("swiglu_limit", 7.0)
    if isinstance(limit, int | float) and not isinstance(limit, bool) and limit > 0:
        fields["glu_clamp"] = float(limit)  # GptOssExperts clamps gate and up to ±limit
    if window and len(full) < len(kinds):
        fields["sliding_window"] = window
        if full:
            fields["full_attention_every"] = every
    return fields


def qwen3_moe_fields(config: Mapping[str, Any]) -> dict[str, Any] | list[Note]:
    """model.moe of a Qwen3-MoE config: decoder_sparse_step and mlp_only_layers become
    first_dense_layers, layer_frequency and layer_offset where one pattern gives the same
    layers; norm_topk_prob changes no count. No shared expert, a router without bias."""
    moe = _read_integers(config, _QWEN3_MOE, "Qwen3-MoE")
    step = _integer(config, "decoder_sparse_step", 1, "Qwen3-MoE")
    L = _integer(config, "num_hidden_layers", None, "Qwen3-MoE")
    dense = config.get("mlp_only_layers") or []
    errors = [item for item in (step, L) if isinstance(item, Note)]
    if not isinstance(dense, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in dense
    ):
        errors.append(_error(f"mlp_only_layers in the config must be a list of layer numbers, got {_shown(dense)}"))
    if isinstance(moe, list) or errors:
        return [*(moe if isinstance(moe, list) else []), *errors]
    assert isinstance(step, int) and isinstance(L, int)
    layers = [i for i in range(L) if i not in dense and (i + 1) % step == 0]
    pattern = _pattern_fields(layers, L, "Qwen3-MoE", "decoder_sparse_step and mlp_only_layers")
    # Qwen3MoeSparseMoeBlock renormalises the top-k softmax weights only with norm_topk_prob
    # (Qwen3MoeConfig's default: false).
    normalize = {"router_normalize": bool(config.get("norm_topk_prob", False))}
    return pattern if isinstance(pattern, list) else {"moe": {**moe, **pattern, **normalize}}


def _one_spelling(
    config: Mapping[str, Any], key: str, alias: str, label: str
) -> Mapping[str, Any] | Note:
    """`config` with `key` read from `alias` where only the alias is given, the alias dropped:
    a config class accepts the other spellings of its attribute_map as the key itself (GPT2Config
    hidden_size for n_embd), and transformers 5's Qwen3MoeConfig takes num_experts but writes
    num_local_experts, so a config it saved names the experts by the alias. Both, disagreeing,
    is an error."""
    if alias not in config:
        return config
    if key in config and config[key] != config[alias]:
        return _error(
            f"the {label} config gives {key} = {_shown(config[key])} and {alias} = "
            f"{_shown(config[alias])}, two spellings of one number that disagree",
            f"keep one of {key} and {alias} in the config",
        )
    return {**{k: v for k, v in config.items() if k != alias}, key: config[alias]}


def _spelled(config: Mapping[str, Any], arch: Architecture) -> Mapping[str, Any] | Note:
    """`config` with every other spelling of the architecture's keys read as the key."""
    for alias, key in arch.aliases:
        spelled = _one_spelling(config, key, alias, arch.label)
        if isinstance(spelled, Note):
            return spelled
        config = spelled
    return config


def llama4_fields(config: Mapping[str, Any]) -> dict[str, Any] | list[Note]:
    """model.moe of a Llama 4 text config: one shared expert of the routed experts' size in
    every MoE layer (Llama4TextMoe.shared_expert), a router without bias (Llama4Router), the
    MoE layers from moe_layers or interleave_moe_layer_step."""
    moe = _read_integers(config, _LLAMA4_MOE, "Llama 4")
    step = _integer(config, "interleave_moe_layer_step", 1, "Llama 4")
    L = _integer(config, "num_hidden_layers", None, "Llama 4")
    explicit = config.get("moe_layers")
    errors = [item for item in (step, L) if isinstance(item, Note)]
    if explicit is not None and not (
        isinstance(explicit, list)
        and all(isinstance(i, int) and not isinstance(i, bool) for i in explicit)
    ):
        errors.append(_error(f"moe_layers in the config must be a list of layer numbers, got {_shown(explicit)}"))
    if isinstance(moe, list) or errors:
        return [*(moe if isinstance(moe, list) else []), *errors]
    assert isinstance(step, int) and isinstance(L, int)
    layers = explicit if explicit is not None else list(range(step - 1, L, step))
    keys = "moe_layers" if explicit is not None else "interleave_moe_layer_step"
    pattern = _pattern_fields(layers, L, "Llama 4", keys)
    if isinstance(pattern, list):
        return pattern
    shared = {"shared_experts": 1, "shared_expert_ffn_hidden": moe["expert_ffn_hidden"]}
    # Llama4Router: the sigmoid of each token's top logits weighs its experts.
    return {"moe": {**moe, **shared, **pattern, "router_score": "sigmoid"}}


def _llama_like(label: str, extra: Any, **defaults: Any) -> Architecture:
    return Architecture(
        label=label,
        keys=_LLAMA_KEYS,
        defaults=MappingProxyType({"tie_word_embeddings": False, "hidden_act": "silu", **defaults}),
        gated=True,
        activation="hidden_act",
        norm="rmsnorm",
        position="rope",
        dropout=("attention_dropout",),
        extra=extra,
    )


def _deepseek_like(label: str) -> Architecture:
    """DeepSeek-V3's reader: a Llama-like config plus its latent attention and experts."""
    return replace(
        _llama_like(
            label,
            _deepseek_v3,
            max_position_embeddings=4096,
            **{key: default for _, key, default in (*_DEEPSEEK_MLA, *_DEEPSEEK_MOE)},
            **dict.fromkeys(_DEEPSEEK_ROUTING),
        ),
        sections=deepseek_fields,
        aliases=(
            ("num_local_experts", "n_routed_experts"),
            ("num_mtp_layers", "num_nextn_predict_layers"),
        ),
    )


# Llama4TextConfig keys that change no parameter: attention chunking (a note of its own), the
# NoPE layers, attention temperature tuning, the weightless L2 QK-norm, the explicit MoE layers
# (read by llama4_fields), and checkpoint bookkeeping.
_LLAMA4_NO_PARAMETERS = (
    "attention_chunk_size",
    "no_rope_layers",
    "no_rope_layer_interval",
    "attn_temperature_tuning",
    "floor_scale",
    "attn_scale",
    "use_qk_norm",
    "moe_layers",
    "for_llm_compressor",
    "cache_implementation",
)

ARCHITECTURES: Mapping[str, Architecture] = MappingProxyType(
    {
        "llama": _llama_like("Llama", _llama, max_position_embeddings=2048),
        "mistral": replace(
            _llama_like(
                "Mistral",
                _mistral,
                num_key_value_heads=8,
                max_position_embeddings=4096 * 32,
                sliding_window=4096,
            ),
            sections=window_fields,
        ),
        "qwen2": _llama_like("Qwen2", _qwen2, max_position_embeddings=32768),
        "qwen3": replace(
            _llama_like("Qwen3", _qwen3, head_dim=128, max_position_embeddings=32768),
            qk_norm=True,
        ),
        "deepseek_v3": _deepseek_like("DeepSeek-V3"),
        # Kimi K2 (Moonshot AI) is DeepSeek-V3's architecture under a model_type of its own
        # (its config.json names DeepseekV3ForCausalLM; Megatron-Bridge's KimiK2Bridge builds
        # it with the DeepSeek-V3 provider's fields).
        "kimi_k2": _deepseek_like("Kimi K2"),
        "mixtral": replace(
            _llama_like(
                "Mixtral",
                _mixtral,
                num_key_value_heads=8,
                max_position_embeddings=4096 * 32,
                **{key: default for _, key, default in _MIXTRAL_MOE},
                **dict.fromkeys(_ROUTING),
            ),
            sections=mixtral_fields,
            aliases=(("num_experts", "num_local_experts"),),
            rope_theta=1_000_000.0,
        ),
        "gpt_oss": replace(
            _llama_like(
                "GPT-OSS",
                _gpt_oss,
                num_key_value_heads=8,
                head_dim=64,
                max_position_embeddings=131072,
                sliding_window=128,
                layer_types=None,
                swiglu_limit=7.0,
                swiglu_alpha=1.702,
                attention_bias=True,
                initial_context_length=4096,
                **{key: default for _, key, default in _GPT_OSS_MOE},
                **dict.fromkeys(_ROUTING),
            ),
            sections=gpt_oss_fields,
            glu="quick_geglu",
            # its config.json spells the top-k experts_per_token (GptOssConfig.attribute_map)
            aliases=(("experts_per_token", "num_experts_per_tok"),),
            rope_theta=150_000.0,
        ),
        "qwen3_moe": replace(
            _llama_like(
                "Qwen3-MoE",
                _qwen3,
                max_position_embeddings=32768,
                decoder_sparse_step=1,
                mlp_only_layers=None,
                **{key: default for _, key, default in _QWEN3_MOE},
                **dict.fromkeys(_ROUTING),
            ),
            sections=qwen3_moe_fields,
            qk_norm=True,
            # num_experts as transformers 5 writes it (Qwen3MoeConfig.attribute_map)
            aliases=(("num_local_experts", "num_experts"),),
        ),
        "llama4_text": replace(
            _llama_like(
                "Llama 4",
                _llama4,
                num_key_value_heads=8,
                head_dim=128,
                intermediate_size_mlp=16384,
                max_position_embeddings=4096 * 32,
                interleave_moe_layer_step=1,
                **{key: default for _, key, default in _LLAMA4_MOE},
                **dict.fromkeys(_ROUTING),
                **dict.fromkeys(_LLAMA4_NO_PARAMETERS),
            ),
            keys=MappingProxyType({**_LLAMA_KEYS, "ffn_hidden": "intermediate_size_mlp"}),
            sections=llama4_fields,
            rope_theta=500_000.0,
        ),
        "gpt2": Architecture(
            label="GPT-2",
            keys=MappingProxyType(
                {
                    "layers": "n_layer",
                    "hidden": "n_embd",
                    "heads": "n_head",
                    "ffn_hidden": "n_inner",
                    "vocab": "vocab_size",
                    "max_seq_len": "n_positions",
                }
            ),
            defaults=MappingProxyType(
                {
                    "tie_word_embeddings": True,
                    "activation_function": "gelu_new",
                    "resid_pdrop": 0.1,
                    "embd_pdrop": 0.1,
                    "attn_pdrop": 0.1,
                    "n_positions": 1024,
                }
            ),
            gated=False,
            activation="activation_function",
            norm="layernorm",
            position="learned",
            dropout=("resid_pdrop", "embd_pdrop", "attn_pdrop"),
            extra=_gpt2,
            aliases=(
                ("hidden_size", "n_embd"),
                ("max_position_embeddings", "n_positions"),
                ("num_attention_heads", "n_head"),
                ("num_hidden_layers", "n_layer"),
            ),
        ),
        "gpt_neox": Architecture(
            label="GPT-NeoX",
            keys=MappingProxyType(
                {
                    "layers": "num_hidden_layers",
                    "hidden": "hidden_size",
                    "heads": "num_attention_heads",
                    "ffn_hidden": "intermediate_size",
                    "vocab": "vocab_size",
                    "max_seq_len": "max_position_embeddings",
                }
            ),
            defaults=MappingProxyType(
                {
                    "tie_word_embeddings": False,
                    "hidden_act": "gelu",
                    "max_position_embeddings": 2048,
                }
            ),
            gated=False,
            activation="hidden_act",
            norm="layernorm",
            position="rope",
            dropout=("hidden_dropout", "attention_dropout"),
            extra=_gpt_neox,
        ),
    }
)

# Architectures planc knows to be mixture-of-experts, and the keys that give one away.
MOE_TYPES = frozenset(
    {
        "mixtral",
        "qwen2_moe",
        "qwen3_moe",
        "qwen3_next",
        "deepseek_v2",
        "deepseek_v3",
        "kimi_k2",
        "dbrx",
        "olmoe",
        "phimoe",
        "granitemoe",
        "jamba",
        "gpt_oss",
        "llama4",
    }
)
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")

# Keys of published configs that change neither memory nor FLOPs: skipped without a note.
BOOKKEEPING = frozenset(
    {
        "_name_or_path",
        "architectures",
        "model_type",
        "transformers_version",
        "torch_dtype",
        "dtype",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "sep_token_id",
        "decoder_start_token_id",
        "initializer_range",
        "use_cache",
        "rms_norm_eps",
        "layer_norm_eps",
        "layer_norm_epsilon",
        "rope_theta",
        "rotary_emb_base",
        "use_mrope",
        "pretraining_tp",
        "tokenizer_class",
        "auto_map",
        "task_specific_params",
        "summary_type",
        "summary_use_proj",
        "summary_activation",
        "summary_proj_to_labels",
        "summary_first_dropout",
        "scale_attn_weights",
        "scale_attn_by_inverse_layer_idx",
        "reorder_and_upcast_attn",
        "n_ctx",
        "classifier_dropout",
        "max_window_layers",
        "layer_types",
        "use_sliding_window",
        "sliding_window",
        "bias",
        "attention_bias",
        "mlp_bias",
        "rotary_pct",
        "partial_rotary_factor",
        "use_parallel_residual",
        "tie_word_embeddings",
        "hidden_dropout",
        "attention_dropout",
        "resid_pdrop",
        "embd_pdrop",
        "attn_pdrop",
        "hidden_act",
        "activation_function",
        "output_attentions",
        "output_hidden_states",
        "return_dict",
        "use_return_dict",
        "is_decoder",
        "is_encoder_decoder",
        "tie_encoder_decoder",
        "add_cross_attention",  # GPT-2 reads it (an error when true)
        "chunk_size_feed_forward",
        "problem_type",
        "id2label",
        "label2id",
    }
)

# Keys read for a note of their own when they are set.
_ROPE_SCALING = ("rope_scaling", "rope_parameters")

_SWIGLU_ACTIVATIONS = frozenset({"silu", "swish"})
_GELU_ACTIVATIONS = frozenset(
    {"gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "gelu_accurate"}
)
_SAME_COST_ACTIVATIONS = frozenset({"relu", "gelu_10", "quick_gelu", "mish"})


# ----------------------------------------------------------------------------- reading


# Counts that may be 0: no leading dense layer (DeepSeek-V2-Lite-like), no shared expert.
_MAY_BE_ZERO = frozenset({"first_k_dense_replace", "n_shared_experts"})


def _integer(config: Mapping[str, Any], key: str, default: Any, label: str) -> int | Note:
    value = config.get(key)
    if value is None:  # absent, or null: transformers' default
        value = default
    if value is None:
        return _error(
            f"the {label} config has no {key}: planc needs it",
            f"add {key} to the config, or give the field in the spec",
        )
    low = 0 if key in _MAY_BE_ZERO else 1
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_DIM:
        return _error(
            f"{key} in the config must be a whole number from {low} to {MAX_DIM:,}, got "
            f"{_shown(value)}",
            f"fix {key} in the config, or give the field in the spec",
        )
    return value


def _dimensions(
    config: Mapping[str, Any], arch: Architecture, given: Mapping[str, Any]
) -> tuple[dict[str, int], dict[str, int]] | list[Note]:
    """(every dimension, the ones the config states) for layers, hidden, heads, kv_heads,
    head_dim, ffn_hidden, vocab and max_seq_len. A field the spec gives wins and need not be in
    the config; kv_heads, head_dim and GPT-2's ffn_hidden, when the config leaves them out, are
    derived as transformers derives them (heads, hidden / heads, 4·hidden), which is also how
    planc derives them, so they are not stated and follow the spec's overrides."""
    dims: dict[str, int] = {}
    stated: dict[str, int] = {}
    errors: list[Note] = []
    derived = {"kv_heads", "head_dim"} | (set() if arch.gated else {"ffn_hidden"})
    for name, key in arch.keys.items():
        if isinstance(given.get(name), int):
            dims[name] = given[name]
            continue
        default = arch.defaults.get(key)
        if config.get(key) is None and default is None and name in derived:
            continue
        value = _integer(config, key, default, arch.label)
        if isinstance(value, Note):
            errors.append(value)
        else:
            dims[name] = stated[name] = value
    if errors:
        return errors
    dims.setdefault("kv_heads", dims["heads"])
    if "head_dim" not in dims:
        if dims["hidden"] % dims["heads"]:
            return [
                _error(
                    f"hidden size {dims['hidden']} does not split into {dims['heads']} heads, "
                    "and the config has no head_dim",
                    "add head_dim to the config, or model.head_dim to the spec",
                )
            ]
        dims["head_dim"] = dims["hidden"] // dims["heads"]
    dims.setdefault("ffn_hidden", 4 * dims["hidden"])
    return dims, stated


def _mlp(config: Mapping[str, Any], arch: Architecture) -> tuple[str, list[Note]] | Note:
    act = config.get(arch.activation, arch.defaults.get(arch.activation))
    if not isinstance(act, str):
        return _error(f"{arch.activation} in the config must be a string, got {_shown(act)}")
    if arch.gated:
        if act in _SWIGLU_ACTIVATIONS:
            return "swiglu", []
        if act in _GELU_ACTIVATIONS or act in _SAME_COST_ACTIVATIONS:
            return "swiglu", [
                _info(
                    f"{arch.activation} {_shown(act)} in a gated MLP is modelled as swiglu: the same "
                    "three matrices, parameters and FLOPs",
                    APPROXIMATED,
                )
            ]
    else:
        if act in _GELU_ACTIVATIONS:
            return "gelu", []
        if act in _SAME_COST_ACTIVATIONS:
            return "gelu", [
                _info(
                    f"{arch.activation} {_shown(act)} is modelled as gelu: the same two matrices, "
                    "parameters and FLOPs",
                    APPROXIMATED,
                )
            ]
    return _error(
        f"{arch.activation} {_shown(act)}: planc has no model for this activation in a "
        f"{'gated' if arch.gated else 'plain'} MLP",
        "give model.mlp (gelu, swiglu or quick_geglu) in the spec to choose the nearest",
    )


def _dropout(config: Mapping[str, Any], arch: Architecture) -> tuple[float, list[Note]] | Note:
    values: dict[str, float] = {}
    for key in arch.dropout:
        value = config.get(key, arch.defaults.get(key, 0.0))
        if value is None:
            value = 0.0
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not (math.isfinite(value) and 0 <= value <= 1)
        ):
            return _error(
                f"{key} in the config must be a probability from 0 to 1, got {_shown(value)}"
            )
        values[key] = float(value)
    top = max(values.values(), default=0.0)
    if len(set(values.values())) <= 1:
        return top, []
    shown = ", ".join(f"{key} {value:g}" for key, value in values.items())
    return top, [
        _info(
            f"dropout {top:g}, the largest of {shown}: planc has one dropout probability",
            APPROXIMATED,
        )
    ]


# RoPE scalings planc reads into model.rope_scaling: the keys of each (rope_scaling or
# transformers 5's rope_parameters), as model.rope_scaling names them.
_ROPE_SCALING_KEYS = MappingProxyType(
    {
        "yarn": (
            "factor",
            "original_max_position_embeddings",
            "beta_fast",
            "beta_slow",
            "mscale",
            "mscale_all_dim",
        ),
        "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
    }
)


def _rope_scaling(config: Mapping[str, Any]) -> tuple[dict[str, Any] | None, list[Note]]:
    """model.rope_scaling from the config's rope_scaling (or rope_parameters, where
    transformers 5 writes it): YaRN and Llama 3.1's scaling are read, any other kind is an info
    note (it changes the rotation frequencies, not the parameters, memory or FLOPs); a value
    that is not a number is an error."""
    for key in _ROPE_SCALING:
        value = config.get(key)
        if not isinstance(value, Mapping):
            continue
        kind = value.get("rope_type", value.get("type", "default"))
        if kind in (None, "default"):
            continue
        if kind not in _ROPE_SCALING_KEYS:
            return None, [
                _info(
                    f"{key} ({kind}) is not read: RoPE scaling changes the rotation "
                    "frequencies, not the parameters, memory or FLOPs",
                    NOT_READ,
                )
            ]
        read: dict[str, Any] = {"type": kind}
        for name in _ROPE_SCALING_KEYS[kind]:
            number = value.get(name)
            if number is None:
                continue
            if isinstance(number, bool) or not isinstance(number, int | float) or not (
                math.isfinite(number) and number >= 0
            ):
                return None, [
                    _error(
                        f"{key}.{name} in the config must be a number, got {_shown(number)}",
                        f"fix {key}.{name} in the config, or give model.rope_scaling in the spec",
                    )
                ]
            read[name] = int(number) if name == "original_max_position_embeddings" else float(number)
        if "factor" not in read:
            return None, [
                _error(
                    f"{key} ({kind}) has no factor",
                    f"add {key}.factor to the config, or give model.rope_scaling in the spec",
                )
            ]
        return read, []
    return None, []


def _unknown_keys(config: Mapping[str, Any], arch: Architecture) -> list[Note]:
    known = {*BOOKKEEPING, *arch.keys.values(), *arch.defaults, *arch.dropout, *_ROPE_SCALING}
    known.add(arch.activation)
    unknown = sorted(key for key in config if key not in known and key != "quantization_config")
    notes = []
    if "quantization_config" in config:
        notes.append(
            _info(
                "quantization_config is not read: the checkpoint's quantization is not the "
                "training precision, which is training.precision",
                NOT_READ,
            )
        )
    sizing = [key for key in unknown if _may_size(key, config[key])]
    if sizing:
        shown = ", ".join(f"{key} {_shown(config[key], 30)}" for key in sizing[:8]) + (
            f" and {len(sizing) - 8} more" if len(sizing) > 8 else ""
        )
        notes.append(
            _error(
                f"not read: {shown}, which {arch.label} configs of transformers 5.24 do not have "
                "and whose names say they size part of the model, so planc's parameter counts "
                "would not be this model's",
                "if the key changes no parameter, delete it from a copy of the config; else give "
                "the model's fields in the spec instead of hf_config",
            )
        )
    rest = [key for key in unknown if key not in sizing]
    if rest:
        shown = ", ".join(rest[:8]) + (f" and {len(rest) - 8} more" if len(rest) > 8 else "")
        notes.append(
            _info(
                f"not read: {shown} (planc does not know what they change in a {arch.label} model)",
                NOT_READ,
            )
        )
    return notes


# Words of a config key that names a size, a count or a weight of the model (num_experts,
# n_shared_experts, moe_intermediate_size, kv_lora_rank, mlp_bias, tie_word_embeddings, ...).
_SIZING_WORDS = frozenset(
    {
        "num",
        "n",
        "size",
        "dim",
        "dims",
        "rank",
        "layer",
        "layers",
        "expert",
        "experts",
        "head",
        "heads",
        "bias",
        "vocab",
        "intermediate",
        "hidden",
        "inner",
        "embd",
        "embed",
        "embeddings",
        "tie",
        "shared",
        "proj",
        "lora",
        "moe",
        "mlp",
        "ffn",
        "cross",
        "width",
        "depth",
    }
)


def _may_size(key: str, value: object) -> bool:
    """An unknown key that may change parameter counts: its name has a sizing word and its value
    sets something (a positive whole number, true, or a list of whole numbers)."""
    if not _SIZING_WORDS.intersection(key.lower().split("_")):
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value > 0
    return isinstance(value, list) and bool(value) and all(isinstance(i, int) for i in value)


def model_type(config: Mapping[str, Any]) -> str | None:
    """The config's `model_type`, or the one its `architectures` name (LlamaForCausalLM -> llama)."""
    kind = config.get("model_type")
    if isinstance(kind, str):
        return kind
    names = config.get("architectures")
    if isinstance(names, list):
        for name in names:
            for key, arch in ARCHITECTURES.items():
                stem = arch.label.replace("-", "").lower()
                if isinstance(name, str) and name.lower().startswith(stem):
                    return key
    return None


# Why planc does not read the experts of a mixture-of-experts architecture it knows.
_MOE_REFUSED = MappingProxyType(
    {
        "qwen2_moe": "Qwen2-MoE gates its shared expert with the sigmoid of an h×1 projection "
        "(shared_expert_gate) in every MoE layer, which planc has no term for, so its counts "
        "would not be exact",
    }
)


def _moe_refusal(config: Mapping[str, Any], kind: str | None) -> Note | None:
    """PLC111 for a mixture-of-experts config planc does not read (an architecture whose
    experts it has no table for, or an expert count in a dense architecture's config)."""
    arch = ARCHITECTURES.get(kind or "")
    if arch is not None and arch.sections is not None:
        return None
    experts = next(
        (key for key in MOE_KEYS if isinstance(config.get(key), int) and config[key] > 0), None
    )
    if kind not in MOE_TYPES and experts is None:
        return None
    what = ", ".join(
        [
            *([f"model_type {_shown(kind)}"] if kind else []),
            *([f"{experts} {config[experts]}"] if experts else []),
        ]
    )
    read = ", ".join(sorted(k for k, a in ARCHITECTURES.items() if a.sections is not None))
    reason = _MOE_REFUSED.get(kind or "", f"planc reads the experts of {read} and llama4 configs")
    return _error(
        f"{what}: a mixture-of-experts model planc does not read from a config: {reason}",
        "give the model's fields and model.moe in the spec instead of hf_config",
        rule="PLC111",
    )


def _llama4_text(config: Mapping[str, Any]) -> dict[str, Any] | Note:
    """The text_config of a Llama 4 (image and text) config, as a llama4_text config: its
    tie_word_embeddings, else the outer config's."""
    text = config.get("text_config")
    if not isinstance(text, Mapping):
        return _error(
            f"the llama4 config has no text_config object, got {_shown(text)}",
            "point hf_config at the model's config.json (its text_config holds the text model)",
        )
    tied = text.get("tie_word_embeddings", config.get("tie_word_embeddings"))
    return {
        **text,
        "model_type": "llama4_text",
        **({} if tied is None else {"tie_word_embeddings": tied}),
    }


def _rope_theta(config: Mapping[str, Any], arch: Architecture) -> float | Note | None:
    """RoPE's base θ: rope_parameters.rope_theta (where transformers 5 writes it), else
    rope_theta (rotary_emb_base in GPT-NeoX configs), else the config class's default_theta
    (Mixtral 1,000,000, Llama 4 500,000); None where that is 10,000, planc's own default."""
    parameters = config.get("rope_parameters")
    if isinstance(parameters, Mapping) and parameters.get("rope_theta") is not None:
        key, value = "rope_parameters.rope_theta", parameters["rope_theta"]
    else:
        key = "rope_theta" if "rope_theta" in config else "rotary_emb_base"
        value = config.get(key)
    if value is None:
        return None if arch.rope_theta == 10_000 else arch.rope_theta
    if isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value <= 1e12:
        return _error(
            f"{key} in the config must be a number from 1 to 10^12, got {_shown(value)}",
            f"fix {key} in the config, or give model.rope_theta in the spec",
        )
    return float(value)


def from_config(
    config: Mapping[str, Any], given: Mapping[str, Any] = MappingProxyType({})
) -> HfModel | tuple[Note, ...]:
    """planc's model fields from a parsed config.json, or the errors that say why not.

    `given` holds the model fields the spec writes beside hf_config: they win, and a dimension
    given there need not be in the config."""
    kind = model_type(config)
    wrapper: list[Note] = []
    if kind == "llama4":
        text = _llama4_text(config)
        if isinstance(text, Note):
            return (text,)
        config, kind = text, "llama4_text"
        wrapper = [
            _info(
                "llama4: vision_config is not read: planc plans the text model "
                "(Llama4ForCausalLM); the vision encoder and projector are left out of counts, "
                "memory and FLOPs",
                NOT_READ,
            )
        ]
    refused = _moe_refusal(config, kind)
    if refused is not None:
        return (refused,)
    arch = ARCHITECTURES.get(kind or "")
    if arch is None:
        shown = repr(kind)[:60] if kind else "no model_type"
        return (
            _error(
                f"{shown}: planc reads the configs of {', '.join(sorted(ARCHITECTURES))}",
                "give the model's fields (layers, hidden, heads, vocab, ...) in the spec instead",
                rule="PLC111",
            ),
        )
    spelled = _spelled(config, arch)
    if isinstance(spelled, Note):
        return (spelled,)
    config = spelled
    read = _dimensions(config, arch, given)
    if isinstance(read, list):
        return tuple(read)
    dims, stated = read
    # A field the spec gives replaces the config's: its value in the config is not read.
    if isinstance(given.get("mlp"), str):
        mlp: tuple[str, list[Note]] | Note = (given["mlp"], [])
    elif arch.glu is not None:
        mlp = (arch.glu, [])
    else:
        mlp = _mlp(config, arch)
    dropout = _dropout(config, arch)
    tied = given.get(
        "tied_embeddings", config.get("tie_word_embeddings", arch.defaults["tie_word_embeddings"])
    )
    errors = [item for item in (mlp, dropout) if isinstance(item, Note)]
    if not isinstance(tied, bool):
        errors.append(
            _error(f"tie_word_embeddings in the config must be true or false, got {_shown(tied)}")
        )
    if errors or isinstance(mlp, Note) or isinstance(dropout, Note):
        return tuple(errors)
    bias, notes = arch.extra(config, dims)
    nested = arch.sections(config) if arch.sections is not None else {}
    if isinstance(nested, list):
        return tuple(nested)
    theta = _rope_theta(config, arch) if arch.position == "rope" else None
    if isinstance(theta, Note):
        return (theta,)
    scaling, scaling_notes = _rope_scaling(config)
    if scaling is not None:
        nested = {**nested, "rope_scaling": scaling}
    fields = {
        **_merged_sections(nested, given),
        **stated,
        **({} if theta is None else {"rope_theta": theta}),
        "qk_norm": arch.qk_norm,
        "mlp": mlp[0],
        "norm": arch.norm,
        "bias": bias,
        "dropout": dropout[0],
        "tied_embeddings": tied,
        "position_embedding": arch.position,
    }
    all_notes = [
        *wrapper,
        *mlp[1],
        *dropout[1],
        *notes,
        *scaling_notes,
        *_unknown_keys(config, arch),
    ]
    errors_among = tuple(note for note in all_notes if note.severity == "error")
    if errors_among:
        return errors_among
    return HfModel(kind or "", MappingProxyType(fields), tuple(all_notes))


def _merged_sections(nested: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """The config's model.mla / model.moe sections with the fields the spec writes in them
    laid over (a field left null keeps the config's), and the top-level fields an architecture
    reads beside them."""
    merged = {}
    for key, section in nested.items():
        written = given.get(key)
        overlay = (
            {k: v for k, v in written.items() if v is not None}
            if isinstance(written, Mapping)
            else {}
        )
        # a top-level field (GPT-OSS's sliding_window, sinks) is taken as the config gives it
        merged[key] = {**section, **overlay} if isinstance(section, Mapping) else section
    return merged


def parse(data: bytes) -> Mapping[str, Any] | Note:
    """A config.json's bytes as a JSON object, or the error that says why not."""
    if len(data) > MAX_BYTES:
        return _error(f"the config is larger than {MAX_BYTES:,} bytes; a config.json is a few KB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        return _error(f"the config is not UTF-8: byte 0x{data[error.start]:02x} at {error.start}")
    try:
        config = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        return _error(
            f"the config is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}",
            "fix the JSON (a config.json is one object)",
        )
    except (ValueError, RecursionError) as error:
        return _error(f"the config is not valid JSON: {_shown(str(error))}")
    if not isinstance(config, dict):
        return _error(
            f"the config is a JSON {type(config).__name__}, not an object",
            "point hf_config at the model's config.json",
        )
    return config


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


# ----------------------------------------------------------------------------- a spec's model


def _read_bytes(path: str) -> bytes | Note:
    """The config file's bytes (a regular file, capped), or the error that says why not. A
    model folder (a Hugging Face snapshot) stands for the config.json inside it."""
    import os
    import stat

    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return _error(
            f"no such file: {_shown(os.path.normpath(path), 200)}",
            "hf_config is relative to the spec's folder (to the working directory for stdin)",
        )
    except OSError as error:
        return _error(f"cannot read {_shown(path, 200)}: {error.strerror or error}")
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return _error(
                f"{_shown(os.path.normpath(path), 200)} is not a regular file",
                "point hf_config at the model's config.json",
            )
        with os.fdopen(os.dup(descriptor), "rb") as handle:
            return handle.read(MAX_BYTES + 1)
    except OSError as error:
        return _error(f"cannot read {_shown(path, 200)}: {error.strerror or error}")
    finally:
        os.close(descriptor)


def merged_model(
    model: Mapping[str, Any], base_dir: str
) -> tuple[dict[str, Any] | None, tuple[Note, ...]]:
    """The spec's `model` section with its `hf_config` read in: the config's fields, then the
    fields the spec writes beside it (they win). None and the errors when the config cannot be
    read; the section unchanged when it names no config. `base_dir` is where a relative path
    starts (the spec's folder; the working directory for standard input)."""
    import os

    name = model.get("hf_config")
    if not isinstance(name, str):
        return dict(model), ()
    if model.get("preset") is not None:
        return None, (
            _error(
                "model.preset and model.hf_config both give the model; planc takes one",
                "remove one of them (fields written beside either still override it)",
            ),
        )
    path = os.path.join(base_dir, os.path.expanduser(name))
    data = _read_bytes(path)
    if isinstance(data, Note):
        return None, (data,)
    config = parse(data)
    if isinstance(config, Note):
        return None, (config,)
    given = {key: value for key, value in model.items() if value is not None}
    read = from_config(config, given)
    if isinstance(read, tuple):
        return None, read
    # Sections the config fills (model.mla, model.moe) already hold the spec's fields.
    spec_fields = {key: value for key, value in given.items() if key not in read.fields or not isinstance(value, Mapping)}
    return {**model, **read.fields, **spec_fields}, read.notes
