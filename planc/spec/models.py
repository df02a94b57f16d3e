"""The training spec, version 1: frozen pydantic models, the source of `schemas/spec.schema.json`.

Every field is described (meaning, units, default); the descriptions reach the JSON Schema and
so the editor. Types are strict: a number written as a string, a float where an integer belongs
or `yes` where a boolean belongs is a finding, not a silent coercion.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    create_model,
)
from pydantic_core import PydanticKnownError

from planc.presets import FABRIC_NAMES, GPU_NAMES, MODEL_NAMES
from planc.spec.options import Option
from planc.spec.rule_options import OPTIONS
from planc.vocab import (
    AttentionBackend,
    AttentionFp8Name,
    AttentionKind,
    CheckpointFormat,
    CpCommType,
    CrossEntropyFusion,
    CudaGraphImpl,
    CudaGraphModuleName,
    ExpertDispatcher,
    ExpertRouting,
    Fp8RecipeName,
    Framework,
    FrameworkRelease,
    Kernels,
    MasterFormat,
    Mlp,
    MuonTpMode,
    Norm,
    OffloadChoice,
    OptimizerImplementation,
    OptimizerName,
    Position,
    Precision,
    Recompute,
    RecomputeModule,
    ReduceDtype,
    RopeScalingKind,
    RouterScore,
    ScheduleKind,
    StateDtype,
)

AXES = ("tp", "cp", "dp", "pp")
# Expert parallelism may be named in the order too: Megatron-Core's RankGenerator takes an order
# over tp, cp, ep, dp and pp (its default since 0.19 is tp-cp-ep-dp-pp). The dense generator
# runs with ep = 1 and the expert generator with cp = 1 (parallel_state.py), so ep only places
# the expert groups; an order without it is the dense order, with ep appended (size 1).
EXPERT_AXIS = "ep"

# Upper bounds keep a hostile spec (10^100 GPUs) from reaching any per-rank work; they sit far
# above any machine built so far.
MAX_NODES = 1_000_000
MAX_GPUS_PER_NODE = 4096
MAX_DEGREE = 1_048_576
MAX_DIM = 10_000_000
# Per-stage work (memory budgets, schedules) must stay bounded; real pipelines use ≤ 128 stages.
MAX_STAGES = 4096
# A run's tokens and steps: 10^15 tokens is 64 times Llama 3's 15.6T, and stays exact as a float.
MAX_TOKENS = 10**15


def _orders() -> tuple[str, ...]:
    from itertools import permutations

    dense = tuple("-".join(p) for p in permutations(AXES))
    return dense + tuple("-".join(p) for p in permutations((*AXES, EXPERT_AXIS)))


if TYPE_CHECKING:
    FabricName = str
    GpuName = str
    ModelName = str
    Order = str
    ScheduleName = str
else:
    FabricName = Literal[FABRIC_NAMES]
    GpuName = Literal[GPU_NAMES]
    ModelName = Literal[MODEL_NAMES]
    Order = Literal[_orders()]
    ScheduleName = Literal[tuple(kind.value for kind in ScheduleKind)]

# ASCII digits only (`\d` also takes other scripts' digits). Patterns are JSON Schema (ECMA-262)
# patterns: pydantic, the fast path and editors all read `$` as the end of the string.
RuleId = Annotated[StrictStr, Field(pattern=r"^PLC[0-9]{3}$")]
# One line of printable text: no C0/C1 control characters (tab, CR, LF, NEL, ...) and no Unicode
# line or paragraph separators, so a label cannot break out of a line of a report or launcher file.
ONE_LINE = r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029]+$"
Fraction = Annotated[float, Field(strict=True, ge=0.0, lt=1.0, allow_inf_nan=False)]


def _bounded(low: float, high: float) -> Any:
    """A finite float field between physical bounds. The bounds sit far outside any real
    hardware yet keep every derived byte count, time and rate a finite, non-zero number (10^300
    GiB overflows a byte count; 10^-324 GB/s makes a transfer take infinitely long)."""
    return Field(strict=True, ge=low, le=high, allow_inf_nan=False)


# The bounds and why are in each field's description, which reaches the schema and the editor.
Capacity = Annotated[float, _bounded(0.001, 1_000_000)]  # GB or GiB per GPU
Throughput = Annotated[float, _bounded(0.001, 10_000_000)]  # TFLOPS per GPU
Bandwidth = Annotated[float, _bounded(0.001, 10_000_000)]  # GB/s per GPU
Latency = Annotated[float, _bounded(0.0, 1_000_000_000)]  # µs per message


def _integer_only(value: object) -> object:
    """pydantic's `Literal[1]` takes True and 1.0 for 1; an integer choice takes integers only."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise PydanticKnownError("int_type")
    return value


IntegerOnly = BeforeValidator(_integer_only)
Dim = Annotated[StrictInt, Field(ge=1, le=MAX_DIM)]
Degree = Annotated[StrictInt, Field(ge=1, le=MAX_DEGREE)]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MoESpec(Frozen):
    """Mixture of experts: which layers route tokens to experts, how many, and how wide.

    Symbols: E routed experts, k experts per token (top_k), f_e one expert's MLP inner size,
    E_s shared experts of inner size f_s. Every expert is an MLP of the model's `mlp` type.
    """

    experts: Annotated[StrictInt, Field(ge=1, le=MAX_DIM)] | None = Field(
        None,
        description="Routed experts E per MoE layer (Megatron --num-experts; Hugging Face "
        "num_local_experts / num_experts / n_routed_experts). Required unless the preset gives it.",
    )
    top_k: Annotated[StrictInt, Field(ge=1, le=MAX_DIM)] | None = Field(
        None,
        description="Experts k each token is routed to (Megatron --moe-router-topk; Hugging Face "
        "num_experts_per_tok). Required unless the preset gives it.",
    )
    expert_ffn_hidden: Dim | None = Field(
        None,
        description="MLP inner size f_e of one routed expert (Megatron --moe-ffn-hidden-size; "
        "Hugging Face moe_intermediate_size). Default: model.ffn_hidden.",
    )
    shared_experts: Annotated[StrictInt, Field(ge=0, le=MAX_DIM)] | None = Field(
        None,
        description="Shared experts E_s every token passes through besides its k routed ones "
        "(DeepSeek n_shared_experts). Default: 0.",
    )
    shared_expert_ffn_hidden: Dim | None = Field(
        None,
        description="MLP inner size f_s of one shared expert; Megatron's "
        "--moe-shared-expert-intermediate-size is E_s·f_s. Default: expert_ffn_hidden.",
    )
    first_dense_layers: Annotated[StrictInt, Field(ge=0, le=MAX_DIM)] | None = Field(
        None,
        description="Leading layers that keep a dense MLP of size model.ffn_hidden (DeepSeek "
        "first_k_dense_replace). Default: 0.",
    )
    layer_frequency: Dim | None = Field(
        None,
        description="Layer i (counted from 0) past the first_dense_layers has experts when "
        "i % layer_frequency == layer_offset (Megatron --moe-layer-freq as an integer); 1: every "
        "layer. Default: 1.",
    )
    layer_offset: Annotated[StrictInt, Field(ge=0, le=MAX_DIM)] | None = Field(
        None,
        description="Which layer of every layer_frequency has experts, 0 to layer_frequency − 1 "
        "(Hugging Face Llama 4 interleave_moe_layer_step and Qwen decoder_sparse_step s: "
        "layer_frequency s, layer_offset s − 1, the experts in layers s − 1, 2s − 1, ...). "
        "Default: 0.",
    )
    capacity_factor: Annotated[float, _bounded(0.001, 1_000)] | None = Field(
        None,
        description="Expert capacity factor CF, 0.001 to 1,000: each expert takes at most "
        "ceil(T·k/E·CF) of a micro-batch's T tokens and drops the rest (Megatron "
        "--moe-expert-capacity-factor). Default: null, dropless (no token is dropped).",
    )
    pad_to_capacity: StrictBool | None = Field(
        None,
        description="With capacity_factor: every expert takes exactly ceil(T·k/E·CF) rows from "
        "each rank, the short ones padded with zero-weight tokens (Megatron "
        "--moe-pad-expert-input-to-capacity): static shapes, no token-count all-gather, no host "
        "synchronisation; the alltoall dispatcher only. Default: false (drop only).",
    )
    router_bias: StrictBool | None = Field(
        None,
        description="The router keeps a per-expert bias for auxiliary-loss-free load balancing "
        "(DeepSeek-V3 e_score_correction_bias; Megatron --moe-router-enable-expert-bias): E "
        "more parameters per MoE layer. Default: false.",
    )
    router_score: RouterScore | None = Field(
        None,
        description="How the router scores experts: softmax (Mixtral, Qwen3-MoE) or sigmoid "
        "(DeepSeek-V3 scoring_func, Llama 4's router); Megatron --moe-router-score-function. "
        "Changes no count, byte or FLOP. Default: sigmoid with router_bias (Megatron's expert "
        "bias needs it), else softmax.",
    )
    router_normalize: StrictBool | None = Field(
        None,
        description="The top_k routed weights are renormalised to sum to 1 (Hugging Face "
        "norm_topk_prob; Mixtral always). With softmax scores false is Megatron's "
        "--moe-router-pre-softmax (the softmax over all experts, then the top k). Changes no "
        "count, byte or FLOP. Default: true.",
    )
    router_groups: Dim | None = Field(
        None,
        description="Group-limited routing: the experts form this many equal groups and each "
        "token picks its top_k experts from router_group_top_k groups only (DeepSeek-V3 "
        "n_group 8; Megatron --moe-router-num-groups). Must divide experts. Changes no count, "
        "byte or FLOP. Default: null, no groups.",
    )
    router_group_top_k: Dim | None = Field(
        None,
        description="Groups each token's experts come from under group-limited routing "
        "(DeepSeek-V3 topk_group 4; Megatron --moe-router-group-topk); at most router_groups, "
        "and it divides top_k. Default: null, no groups.",
    )
    router_scaling_factor: Annotated[float, _bounded(0.001, 1_000)] | None = Field(
        None,
        description="Factor on the routed experts' combined output, 0.001 to 1,000 "
        "(DeepSeek-V3 routed_scaling_factor 2.5; Megatron --moe-router-topk-scaling-factor). "
        "Default: null, 1.",
    )


class RopeScalingSpec(Frozen):
    """RoPE frequency scaling for a context longer than the one the model was trained at.

    YaRN (Peng et al. 2023, "YaRN: Efficient Context Window Extension of Large Language
    Models"): frequencies interpolated by `factor` between the wavelengths beta_fast and
    beta_slow mark, attention scaled by mscale terms (DeepSeek-V3: factor 40 over 4,096
    positions, beta_fast 32, beta_slow 1, mscale 1, mscale_all_dim 1). llama3 (Llama 3.1): low
    frequencies divided by `factor`, smoothed between low_freq_factor and high_freq_factor.
    No count or FLOP depends on it; the frameworks need it to train the same model. Its bytes
    do under Megatron-Core: a YaRN attention scale other than 1 (mscale over mscale_all_dim)
    runs RoPE unfused (`planc.perf.ops.megatron_unfused_rotary`).
    """

    type: RopeScalingKind = Field(
        description="yarn (Megatron --position-embedding-type yarn, or --rope-type yarn under "
        "latent attention) or llama3 (Megatron --use-rope-scaling)."
    )
    factor: Annotated[float, _bounded(1.0, 1_000_000)] = Field(
        description="Scaling factor s, 1 to 1,000,000 (Hugging Face rope_scaling.factor; Megatron "
        "--rotary-scaling-factor for yarn, --rope-scaling-factor for llama3)."
    )
    original_max_position_embeddings: Dim | None = Field(
        None,
        description="Context length the frequencies were trained at. Default: 4,096 for yarn, "
        "8,192 for llama3 (Megatron's defaults).",
    )
    beta_fast: Annotated[float, _bounded(0.0, 1_000_000)] | None = Field(
        None, description="yarn: β_fast, 0 to 1,000,000. Default: 32."
    )
    beta_slow: Annotated[float, _bounded(0.0, 1_000_000)] | None = Field(
        None, description="yarn: β_slow, 0 to 1,000,000. Default: 1."
    )
    mscale: Annotated[float, _bounded(0.0, 1_000_000)] | None = Field(
        None, description="yarn: the attention scale's mscale, 0 to 1,000,000. Default: 1."
    )
    mscale_all_dim: Annotated[float, _bounded(0.0, 1_000_000)] | None = Field(
        None,
        description="yarn: the attention scale's mscale_all_dim, 0 to 1,000,000 (DeepSeek-V3: 1). "
        "Default: 0.",
    )
    low_freq_factor: Annotated[float, _bounded(0.001, 1_000_000)] | None = Field(
        None, description="llama3: low_freq_factor, 0.001 to 1,000,000. Default: 1."
    )
    high_freq_factor: Annotated[float, _bounded(0.001, 1_000_000)] | None = Field(
        None, description="llama3: high_freq_factor, 0.001 to 1,000,000. Default: 4."
    )


class MLASpec(Frozen):
    """Multi-head latent attention (DeepSeek-V2/V3): queries, keys and values come from
    low-rank latents instead of one QKV projection.

    Symbols of the DeepSeek-V2 report §2.1: d_c the key/value latent (kv_lora_rank), d_c' the
    query latent (q_lora_rank), d_h the per-head query/key width without RoPE
    (qk_nope_head_dim), d_h^R the per-head RoPE width, shared by all heads for the key
    (qk_rope_head_dim), and the value head width (v_head_dim). Every head attends with
    queries and keys of d_h + d_h^R channels and values of v_head_dim.
    """

    q_lora_rank: Dim | None = Field(
        None,
        description="Query latent width d_c' (Hugging Face q_lora_rank; Megatron --q-lora-rank). "
        "Default: null, no query compression: one h × n·(d_h + d_h^R) query projection "
        "(DeepSeek-V2-Lite).",
    )
    kv_lora_rank: Dim | None = Field(
        None,
        description="Key/value latent width d_c (Hugging Face kv_lora_rank; Megatron "
        "--kv-lora-rank). Required unless the preset gives it.",
    )
    qk_nope_head_dim: Dim | None = Field(
        None,
        description="Per-head query/key channels without RoPE d_h (Hugging Face "
        "qk_nope_head_dim; Megatron --qk-head-dim). Default: 128.",
    )
    qk_rope_head_dim: Dim | None = Field(
        None,
        description="Per-head query/key channels that carry RoPE d_h^R; the key's are shared "
        "by all heads (Hugging Face qk_rope_head_dim; Megatron --qk-pos-emb-head-dim). "
        "Default: 64.",
    )
    v_head_dim: Dim | None = Field(
        None,
        description="Per-head value channels (Hugging Face v_head_dim; Megatron --v-head-dim). "
        "Default: 128.",
    )


class ModelSpec(Frozen):
    """The model: a preset, explicit dimensions, or a preset with explicit overrides."""

    preset: ModelName | None = Field(
        None, description="Model preset name; explicit fields below override its values."
    )
    hf_config: (
        Annotated[StrictStr, Field(min_length=1, max_length=4096, pattern=ONE_LINE)] | None
    ) = Field(
        None,
        description="Path of a Hugging Face config.json (Llama, Mistral, Qwen2, Qwen3, GPT-2, "
        "GPT-NeoX, DeepSeek-V3, GPT-OSS), or of a model folder holding one, relative to the spec's folder (to the "
        "working directory for standard input); explicit fields below override its values. "
        "Not with preset.",
    )
    layers: Dim | None = Field(None, description="Transformer layers L.")
    hidden: Dim | None = Field(None, description="Hidden size h (model width).")
    heads: Dim | None = Field(
        None, description="Attention (query) heads n (a in Korthikanti et al.)."
    )
    kv_heads: Dim | None = Field(
        None, description="Key/value heads g (grouped-query attention). Default: heads."
    )
    head_dim: Dim | None = Field(
        None, description="Channels per head k (Megatron kv_channels). Default: hidden / heads."
    )
    ffn_hidden: Dim | None = Field(
        None,
        description="MLP inner size f. Default: 4·hidden for gelu; "
        "floor(8·hidden/3 / 64)·64 for a gated MLP (Megatron's default).",
    )
    vocab: Dim | None = Field(None, description="Vocabulary size V before padding.")
    mlp: Mlp | None = Field(
        None,
        description="MLP type: gelu (2 matrices), swiglu (a gated linear unit of 3 matrices "
        "with a SiLU gate; Megatron --swiglu) or quick_geglu (3 matrices with a quick-GELU "
        "gate x·σ(1.702·x); Megatron --quick-geglu; GPT-OSS's experts). Default: gelu.",
    )
    norm: Norm | None = Field(
        None,
        description="Normalisation: layernorm (weight and bias) or rmsnorm (weight). Default: layernorm.",
    )
    bias: StrictBool | None = Field(
        None, description="Linear layers carry biases (GPT-2/3 style). Default: false."
    )
    dropout: Annotated[float, Field(strict=True, ge=0.0, le=1.0, allow_inf_nan=False)] | None = (
        Field(
            None,
            description="Dropout probability; masks are saved for backward when above 0. Default: 0.0.",
        )
    )
    tied_embeddings: StrictBool | None = Field(
        None, description="The LM head shares the input embedding matrix. Default: false."
    )
    position_embedding: Position | None = Field(
        None,
        description="rope (no parameters) or learned (max_seq_len × hidden parameters). Default: rope.",
    )
    rope_theta: Annotated[float, _bounded(1.0, 1e12)] | None = Field(
        None,
        description="RoPE base θ (Su et al. 2021: 10,000; Llama 3 500,000; Mixtral and Qwen3 "
        "1,000,000), written to Megatron's --rotary-base. Default: the preset's, else 10,000 "
        "(Megatron's and transformers' default). Changes no count, byte or FLOP.",
    )
    rope_scaling: RopeScalingSpec | None = Field(
        None,
        description="RoPE frequency scaling (YaRN, Llama 3.1's), as the model was trained; "
        "null: none. Changes no count or FLOP; under Megatron-Core a YaRN attention scale other "
        "than 1 runs RoPE unfused.",
    )
    max_seq_len: Dim | None = Field(
        None,
        description="Longest sequence the model supports (learned position table size). Default: training.seq_len.",
    )
    qk_norm: StrictBool | None = Field(
        None,
        description="An RMSNorm over each query and key head before attention (Qwen3 q_norm and "
        "k_norm): 2·k more weights per layer. Default: false.",
    )
    sliding_window: Dim | None = Field(
        None,
        description="Sliding-window attention: the tokens each query of a windowed layer "
        "attends to, itself included (Hugging Face sliding_window; Megatron --window-size w−1 "
        "0). Priced as the score blocks the window leaves (attention FLOPs); the rest of the "
        "layer is unchanged. Default: none, full causal attention in every layer.",
    )
    full_attention_every: Dim | None = Field(
        None,
        description="With sliding_window: layer i (counting from 1) attends to the whole "
        "sequence when i is a multiple of this (Megatron --window-attn-skip-freq; GPT-OSS 2, "
        "its sliding and full layers alternating). Default: every layer windowed.",
    )
    attention_sinks: StrictBool | None = Field(
        None,
        description="A learned softmax offset per attention head (GPT-OSS sinks; Megatron "
        "softmax_type learnable): n weights per layer, split over t. Default: false.",
    )
    glu_clamp: Annotated[float, _bounded(0.001, 1_000_000)] | None = Field(
        None,
        description="A gated MLP's two inputs clamped to this bound before the activation "
        "(GPT-OSS swiglu_limit 7; Megatron-Core activation_func_clamp_value, which "
        "Megatron-Bridge sets and Megatron-LM's command line cannot). Changes no count or "
        "FLOP; under Megatron-Core the routed experts' clamp and re-concatenation run as eager "
        "PyTorch kernels before the fused activation, which the step time prices. Default: none.",
    )
    glu_linear_offset: Annotated[float, _bounded(-1_000_000, 1_000_000)] | None = Field(
        None,
        description="A constant added to a gated MLP's up projection before the product, "
        "act(gate)·(up + offset) (GPT-OSS 1; Megatron-Core glu_linear_offset, which "
        "Megatron-Bridge sets and Megatron-LM's command line cannot). Changes no count, FLOP "
        "or byte: the fused activation adds it. Default: 0.",
    )
    moe: MoESpec | None = Field(
        None,
        description="Mixture of experts; null: a dense model. Fields left out come from the "
        "preset's experts.",
    )
    mla: MLASpec | None = Field(
        None,
        description="Multi-head latent attention (DeepSeek-V2/V3); null: standard multi-head or "
        "grouped-query attention. Fields left out come from the preset's.",
    )
    mtp_layers: Annotated[StrictInt, Field(ge=0, le=MAX_DIM)] | None = Field(
        None,
        description="Multi-token prediction modules D after the last layer (DeepSeek-V3 §2.2; "
        "Megatron --mtp-num-layers; Hugging Face num_nextn_predict_layers): each adds one "
        "transformer layer, shaped like the last, two norms of its inputs, a 2h × h projection "
        "and a final norm, and shares the embedding and output head. Priced on the last "
        "pipeline stage: its time, exchanges and activations, and a synced copy of the word "
        "embedding when pipeline > 1. Default: 0.",
    )


class LinkSpec(Frozen):
    """One class of wire, per GPU and per direction."""

    bandwidth_gbs: Bandwidth | None = Field(
        None,
        description="Bandwidth per GPU per direction in GB/s (10^9 bytes per second), "
        "0.001 to 10,000,000 (1 MB/s to 10 PB/s; NVLink 4 moves 450 GB/s each way).",
    )
    latency_us: Latency | None = Field(
        None,
        description="Latency per message in microseconds, 0 to 1,000,000,000 (about 17 "
        "minutes; real links take 1 to 100 µs). Carried to plan.json; calls are priced with "
        "the efficiency entry's measured latency per ring step (docs/fabric.md).",
    )


class GpuSpec(Frozen):
    """A GPU described by its numbers, for hardware that has no preset."""

    name: StrictStr = Field(
        "custom",
        description="A label for reports: one line of printable characters.",
        min_length=1,
        max_length=64,
        pattern=ONE_LINE,
    )
    memory_gb: Capacity | None = Field(
        None,
        description="HBM capacity in GB (10^9 bytes), 0.001 to 1,000,000 (1 MB to 1 PB; "
        "an H100 has 80).",
    )
    memory_gib: Capacity | None = Field(
        None,
        description="HBM capacity in GiB (2^30 bytes), 0.001 to 1,000,000 (about 1 MiB to 1 PiB).",
    )
    bf16_tflops: Throughput = Field(
        description="Dense BF16 tensor throughput in TFLOPS, 0.001 to 10,000,000 "
        "(1 GFLOPS to 10 EFLOPS; a B200 has 2,250)."
    )
    fp16_tflops: Throughput | None = Field(
        None, description="Dense FP16 tensor throughput in TFLOPS. Default: bf16_tflops."
    )
    fp32_tflops: Throughput | None = Field(
        None,
        description="FP32 throughput in TFLOPS (non-tensor: PyTorch runs fp32 matmuls without "
        "TF32 by default; an H100 SXM has 67). Needed for precision: fp32.",
    )
    fp8_tflops: Throughput | None = Field(
        None, description="Dense FP8 tensor throughput in TFLOPS (none: no FP8 tensor cores)."
    )
    fp4_tflops: Throughput | None = Field(
        None, description="Dense FP4 tensor throughput in TFLOPS (none: no FP4 tensor cores)."
    )
    memory_bandwidth_gbs: Bandwidth | None = Field(
        None,
        description="HBM bandwidth in GB/s, 0.001 to 10,000,000 (1 MB/s to 10 PB/s; "
        "an H100 has 3,350).",
    )
    nvlink_domain: Degree | None = Field(
        None, description="GPUs sharing one NVLink/NVSwitch domain."
    )
    gpus_per_node: Degree | None = Field(None, description="GPUs in one node (server or tray).")
    host_bandwidth_gbs: Bandwidth | None = Field(
        None,
        description="Host↔device bandwidth per GPU per direction in GB/s, for offload "
        "transfers. Default: 32 (PCIe Gen4 x16).",
    )
    host_memory_gb: Capacity | None = Field(
        None, description="Host memory per node in GB (10^9 bytes). Default: 0 (none given)."
    )
    intra_node: LinkSpec | None = Field(None, description="NVLink: bandwidth and latency.")
    inter_node: LinkSpec | None = Field(
        None, description="Network between nodes: bandwidth and latency."
    )


# A tier's name keys ops' links, wire budgets and plan.json: a lower-case word.
TIER_NAME = r"^[a-z][a-z0-9_]{0,31}$"
MAX_TIERS = 16
Oversubscription = Annotated[float, _bounded(1.0, 1000.0)]


class TierSpec(Frozen):
    """One network tier above the NVLink domain: a leaf or top-of-rack switch, a spine, a core
    or aggregation layer. Its blocks are `nodes` consecutive nodes of hardware.hosts."""

    name: Annotated[StrictStr, Field(pattern=TIER_NAME)] = Field(
        description="What ops, wire budgets and plan.json call the tier: a lower-case word "
        "(letters, digits, _; up to 32), not nvlink (the NVLink domain is always the first tier)."
    )
    nodes: Annotated[StrictInt, Field(ge=1, le=MAX_NODES)] | None = Field(
        None,
        description="Nodes one block of the tier joins (a leaf's nodes, a scalable unit, a pod), "
        "consecutive in host order; a multiple of the tier below. Required but on the last "
        "tier, which joins the whole cluster; a tier whose block holds every node ends the list.",
    )
    bandwidth_gbs: Bandwidth | None = Field(
        None,
        description="Bandwidth per GPU per direction in GB/s through the tier at full bisection, "
        "0.001 to 10,000,000. Default: hardware.inter_node's.",
    )
    latency_us: Latency | None = Field(
        None,
        description="Latency per message in microseconds, carried to plan.json; calls are priced "
        "with the efficiency entry's measured latency per ring step. Default: hardware.inter_node's.",
    )
    oversubscription: Oversubscription = Field(
        1.0,
        description="k ≥ 1, downlinks per uplink into this tier (Llama 3's aggregation: 7): under "
        "full load a group crossing its blocks' boundaries gets bandwidth_gbs/k. 1 to 1,000. "
        "Default: 1 (full bisection).",
    )
    rail_aligned: StrictBool = Field(
        False,
        description="The tier's switches are rails (NIC i of every node on switch i, a "
        "rail-optimised leaf): a group whose members on different nodes differ in local GPU "
        "index cannot stay on it and takes the next tier, unless hardware.pxn. Default: false.",
    )
    label: (
        Annotated[StrictStr, Field(min_length=1, max_length=64, pattern=ONE_LINE)] | None
    ) = Field(None, description="How reports show the tier. Default: its name.")
class StorageSpec(Frozen):
    """The file system checkpoints go to and restarts read from (GB/s = 10^9 bytes per second)."""

    write_gbs: Bandwidth = Field(
        description="Aggregate write bandwidth of the checkpoint file system in GB/s, 0.001 to "
        "10,000,000 (Llama 3's Tectonic sustains 2,000 and peaks at 7,000)."
    )
    node_write_gbs: Bandwidth | None = Field(
        None,
        description="Write bandwidth one node reaches in GB/s (its storage NICs and client). "
        "Default: no per-node bound (the aggregate alone).",
    )
    read_gbs: Bandwidth | None = Field(
        None,
        description="Aggregate read bandwidth in GB/s, for loading a checkpoint at a restart. "
        "Default: write_gbs.",
    )
    node_read_gbs: Bandwidth | None = Field(
        None, description="Read bandwidth one node reaches in GB/s. Default: node_write_gbs."
    )


class HardwareSpec(Frozen):
    """The cluster: GPU type, how many, and how they are wired."""

    gpu: GpuName | GpuSpec = Field(description="A GPU preset name, or a mapping of its numbers.")
    nodes: Annotated[StrictInt, Field(ge=1, le=MAX_NODES)] = Field(description="Number of nodes.")
    gpus_per_node: Annotated[StrictInt, Field(ge=1, le=MAX_GPUS_PER_NODE)] | None = Field(
        None, description="GPUs per node. Default: from the GPU preset (8; 4 on a GB200 tray)."
    )
    nvlink_domain: Degree | None = Field(
        None,
        description="GPUs sharing one NVLink domain (8 on HGX, 72 on GB200 NVL72). "
        "Default: from the GPU preset.",
    )
    intra_node: LinkSpec = Field(
        LinkSpec(), description="NVLink bandwidth and latency; unset values come from the preset."
    )
    inter_node: LinkSpec = Field(
        LinkSpec(), description="Network bandwidth and latency; unset values come from the preset."
    )
    hosts: list[Annotated[StrictStr, Field(min_length=1, max_length=253)]] | StrictStr = Field(
        default_factory=list,
        json_schema_extra={"default": []},
        description="Host names in node order, or a pattern such as 'gpu-{000..063}'. "
        "Default: node-0, node-1, ...",
    )
    fabric: (
        FabricName | Annotated[list[TierSpec], Field(min_length=1, max_length=MAX_TIERS)] | None
    ) = Field(
        None,
        description="The network tiers above the NVLink domain, innermost first (a rail leaf or "
        "top-of-rack, a spine, a core or aggregation layer), or a fabric preset's name "
        "(planc/presets/fabrics.json). A group's tier is the first whose blocks hold it. "
        "Default: one tier, network, joining every node on hardware.inter_node.",
    )
    topology: (
        Annotated[StrictStr, Field(min_length=1, max_length=4096, pattern=ONE_LINE)] | None
    ) = Field(
        None,
        description="A Slurm topology.conf or topology.yaml (tree or block), relative to the "
        "spec: each level of switches or blocks becomes a tier above the NVLink domain, on "
        "hardware.inter_node's link, and the hosts are placed in their order in it. Not with "
        "hardware.fabric. Default: none.",
    )
    pxn: StrictBool = Field(
        False,
        description="NCCL routes cross-rail traffic over NVLink first (PXN: to the GPU on the "
        "destination's rail, then out its NIC), so a group that is not rail-aligned stays on "
        "a rail-aligned tier. Default: false (it pays the next tier, the spine).",
    )
    host_memory_gb: Capacity | None = Field(
        None,
        description="Host (CPU) memory per node in GB (10^9 bytes), 0.001 to 1,000,000, the budget "
        "of offloaded optimizer state and parameters (PLC021). Default: from the GPU preset "
        "(2,000 on a DGX H100).",
    )
    reserve_gib: Annotated[float, _bounded(0.0, 1_000_000)] = Field(
        1.5,
        description="Memory kept per GPU for the CUDA context, NCCL buffers and allocator "
        "fragmentation, in GiB (2^30 bytes), 0 to 1,000,000 (the largest GPU memory planc takes).",
    )
    calibration: (
        Annotated[StrictStr, Field(min_length=1, max_length=4096, pattern=ONE_LINE)] | None
    ) = Field(
        None,
        description="A JSON file of efficiency tables fitted to this cluster's measured step "
        "times by `planc calibrate`, relative to the spec. Default: the GPU preset's entry of "
        "planc/presets/efficiency.json.",
    )
    storage: StorageSpec | None = Field(
        None,
        description="The checkpoint file system's bandwidths (needed by checkpoint:). "
        "Default: none given.",
    )


class ParallelismSpec(Frozen):
    """How the model and the batch are split over the GPUs."""

    tensor: Degree = Field(1, description="Tensor-parallel degree t.")
    pipeline: Annotated[StrictInt, Field(ge=1, le=MAX_STAGES)] = Field(
        1, description="Pipeline-parallel degree p (stages), at most 4096."
    )
    data: Degree | None = Field(
        None, description="Data-parallel degree d. Default: world / (tensor·pipeline·context)."
    )
    context: Degree = Field(
        1, description="Context-parallel degree c (the sequence is split c ways)."
    )
    virtual_stages: Annotated[StrictInt, Field(ge=1, le=4096)] = Field(
        1, description="Model chunks per pipeline rank v (interleaved 1F1B); 1 means plain 1F1B."
    )
    pipeline_schedule: ScheduleName | None = Field(
        None,
        description="The pipeline schedule by name: 1f1b (one model chunk per stage), "
        "interleaved-1f1b (virtual_stages > 1 chunks), gpipe (all forwards, then all "
        "backwards; one chunk per stage, m micro-batches in flight), zb-h1 (1F1B with the "
        "weight gradients deferred into the bubble; one chunk per stage), dualpipev "
        "(DeepSeek's V-shaped DualPipe: virtual_stages 2, rank r holds stages r and "
        "2·pipeline − 1 − r, m ≥ 2·pipeline), zbv (zero bubble in the same V shape, PyTorch "
        "ScheduleZBVZeroBubble; m ≥ 2·pipeline − 1) or combined-1f1b (Megatron's interleaved 1F1B "
        "that overlaps the expert all-to-all, --overlap-moe-expert-parallel-comm). Default: "
        "1f1b when virtual_stages is 1, interleaved-1f1b otherwise.",
    )
    stage_layers: list[Annotated[StrictInt, Field(ge=0, le=MAX_DIM)]] = Field(
        default_factory=list,
        json_schema_extra={"default": []},
        description="Optional uneven split: layers on each pipeline stage, first to last.",
        max_length=MAX_DEGREE,
    )
    pipeline_layout: (
        Annotated[StrictStr, Field(min_length=1, max_length=4096, pattern=ONE_LINE)]
        | None
    ) = Field(
        None,
        description="Megatron-Core's pipeline layout (--pipeline-model-parallel-layout): the "
        "virtual stages in run order (chunk·pipeline + stage) separated by '|', each E "
        "(embedding), t (decoder layer), m (MTP layer) and L (loss); x*n and (…)*n repeat, "
        "commas are cosmetic. E.g. 'Et*3|(t*4|)*30,t*3L' for 126 layers over 16 stages × 2 "
        "chunks. It has pipeline × virtual_stages stages; every chunk then holds its own layers.",
    )
    embedding_in_pipeline_split: StrictBool = Field(
        False,
        description="Count the embedding as a layer when the layers are split evenly over the "
        "stages and chunks (Megatron --account-for-embedding-in-pipeline-split): the first "
        "chunk holds one decoder layer fewer.",
    )
    loss_in_pipeline_split: StrictBool = Field(
        False,
        description="Count the loss (output head) as a layer when the layers are split evenly "
        "(Megatron --account-for-loss-in-pipeline-split): the last chunk holds one decoder "
        "layer fewer.",
    )
    sequence_parallel: StrictBool = Field(
        False,
        description="Megatron sequence parallelism: split norms and dropout over the TP group.",
    )
    zero_stage: Annotated[Literal[0, 1, 2, 3], IntegerOnly] = Field(
        0,
        description="ZeRO stage over the data-parallel group: 0 none, 1 optimizer states, "
        "2 +gradients, 3 +parameters.",
    )
    data_shard: Degree | None = Field(
        None,
        description="Ranks ZeRO or FSDP shards over; it must divide data × context, and the "
        "data × context / data_shard groups replicate the shards (HSDP). Default: data × context.",
    )
    expert: Degree = Field(
        1,
        description="Expert-parallel degree EP: the routed experts of each MoE layer are split "
        "over EP ranks (Megatron --expert-model-parallel-size). 1 without model.moe.",
    )
    expert_tensor: Degree | None = Field(
        None,
        description="Expert tensor-parallel degree ETP: each expert's matrices are split ETP "
        "ways (Megatron --expert-tensor-parallel-size). Default: tensor under megatron; 1 under "
        "deepspeed and fsdp2, which keep each expert whole.",
    )
    cp_comm_type: CpCommType | None = Field(
        None,
        description="How the context-parallel ranks exchange attention (Megatron --cp-comm-type): "
        "p2p (ring attention, K/V passed around the ring behind the attention compute), a2a "
        "(DeepSpeed-Ulysses: all-to-all of q, k, v and the output; heads and kv heads divisible "
        "by tensor × context), allgather (all-gather of K and V) or a2a+p2p (a2a within the "
        "NVLink domain, p2p across: --hierarchical-context-parallel-sizes). Default: the "
        "framework's, p2p under megatron (Megatron's default) and fsdp2 (torchtitan's ring), a2a "
        "under deepspeed (Ulysses, the only type it runs).",
    )
    expert_dispatcher: ExpertDispatcher | None = Field(
        None,
        description="How a MoE layer's tokens reach their experts (Megatron-Core "
        "--moe-token-dispatcher-type): alltoall (one row per token and chosen expert, NCCL "
        "all-to-all over the expert-parallel group), allgather (every token gathered over the "
        "expert tensor × expert-parallel group, the outputs reduce-scattered back), deepep or "
        "hybridep (flex, --moe-flex-dispatcher-backend: DeepEP's or HybridEP's kernels send a "
        "token once to each NVLink domain that holds one of its experts and forward it there "
        "over NVLink). Default: the framework's, allgather under megatron and megatron-fsdp "
        "(Megatron-Core 0.19.2's TransformerConfig default; NVIDIA's recipes set alltoall, and "
        "flex with hybridep or deepep for DeepSeek-V3 and Qwen3), alltoall under deepspeed and "
        "fsdp2 (DeepSpeed MoE's and torchtitan's standard all-to-all).",
    )
    dispatcher_sms: Annotated[StrictInt, Field(ge=1, le=1024)] | None = Field(
        None,
        description="SMs the flex dispatcher's kernels hold while they run (deepep or hybridep; "
        "Megatron --moe-flex-dispatcher-num-sms, formerly --moe-deepep-num-sms and "
        "--moe-hybridep-num-sms), 1 to 1,024: compute that overlaps the expert exchange "
        "(pipeline_schedule combined-1f1b) runs on the other SMs. NVIDIA's recipes set 32. "
        "Default: the SMs the GPU's measured rates for the backend were taken on, else the "
        "library's: DeepEP's 20, HybridEP's 24.",
    )
    order: Order | None = Field(
        None,
        description="Rank order, fastest-varying axis first (Megatron convention): tp, cp, dp "
        "and pp once each, and ep where expert parallelism goes. The dense groups ignore ep; the "
        "expert groups use the same order with tp = expert_tensor and cp = 1. Default: "
        "Megatron-Core's, tp-cp-ep-dp-pp when expert > 1, else tp-cp-dp-pp.",
    )


class OffloadSpec(Frozen):
    """What lives in host memory instead of HBM (ZeRO-Offload, FSDP2 CPUOffloadPolicy,
    Megatron-Core's activation offloading)."""

    optimizer: StrictBool = Field(
        False,
        description="fp32 master weights, optimizer moments (and DeepSpeed's fp32 gradient "
        "partition) live in host memory; the optimizer step runs on the CPU.",
    )
    parameters: StrictBool = Field(
        False,
        description="The sharded parameters live in host memory and are copied in for each use "
        "(DeepSpeed ZeRO-3 offload_param, FSDP2 CPUOffloadPolicy).",
    )
    activations: Annotated[StrictInt, Field(ge=0, le=MAX_DIM)] = Field(
        0,
        description="Transformer layers whose saved activations live in host memory from their "
        "forward to their backward: the first N layers, each copied out on a side stream after "
        "its forward and copied back ahead of its backward (Megatron-Core's "
        "--cpu-offloading-num-layers N, Transformer Engine's CPU offload). Megatron only, with "
        "one pipeline stage, no recompute and N below the layer count.",
    )


class RampPhaseSpec(Frozen):
    """One phase of a batch ramp: a global batch held for a number of tokens."""

    global_batch: Annotated[StrictInt, Field(ge=1, le=2**40)] = Field(
        description="Global batch B_i in sequences per optimizer step during this phase."
    )
    tokens: Annotated[StrictInt, Field(ge=1, le=MAX_TOKENS)] = Field(
        description="Training tokens D_i this phase runs for."
    )


class MuonSpec(Frozen):
    """Muon (optimizer: muon): Megatron-Core's TensorParallelMuon, Newton-Schulz orthogonalized
    momentum for every 2-D weight but the embedding and the output layer, Adam for the rest."""

    tp_mode: MuonTpMode = Field(
        "blockwise",
        description="How a tensor-parallel matrix is orthogonalized (Megatron --muon-tp-mode): "
        "blockwise (each rank's shard alone, no communication; Megatron's default, "
        "OptimizerConfig.muon_tp_mode), duplicated (all-gather the fp32 momentum over TP, "
        "iterate on the whole matrix on every TP rank), distributed (the iteration split over "
        "TP, an all-reduce of each Gram matrix).",
    )
    ns_steps: Annotated[StrictInt, Field(ge=1, le=100)] = Field(
        5,
        description="Newton-Schulz iterations per matrix and step (--muon-num-ns-steps). "
        "Default: 5.",
    )
    split_qkv: StrictBool = Field(
        True,
        description="Orthogonalize Q, K and V of the fused QKV projection as three matrices "
        "(Megatron's default; --muon-no-split-qkv turns it off). Latent attention has no fused "
        "QKV weight.",
    )


class OptimizerStateSpec(Frozen):
    """The number formats of the optimizer's state under mixed precision: the master copy of
    the weights and Adam's two moments, each sharded as zero_stage says."""

    master: MasterFormat = Field(
        "fp32",
        description="The master weights: fp32 (the default); remainders, fp32 kept as the 16 "
        "bits the bf16 weights lack, 2 bytes a parameter (Megatron --use-precision-aware-"
        "optimizer in bf16 or with the delayed FP8 recipe: Transformer Engine's FusedAdam with "
        "store_param_remainders, its default from TE 2.1); fp16 (--main-params-dtype fp16); "
        "bf16 (NeMo 1.0's distributed_fused_adam with optim.dtype bf16, Apex "
        "DistributedFusedAdam; Megatron-LM has no flag for it).",
    )
    moments: StateDtype | None = Field(
        None,
        description="Adam's m and v: fp32, bf16 or fp16 (Megatron "
        "--use-precision-aware-optimizer --exp-avg-dtype and --exp-avg-sq-dtype; Apex "
        "DistributedFusedAdam's optim.dtype). training.fp8.moments: bf16 says the same for bf16. "
        "Default: fp32, or what training.fp8.moments says.",
    )


class Fp8Spec(Frozen):
    """Low-precision training (precision: fp8 or fp4): the recipe and the options that change
    what is stored, moved and computed in FP8."""

    recipe: Fp8RecipeName | None = Field(
        None,
        description="How GEMM operands are quantized. Transformer Engine (Megatron, DeepSpeed): "
        "delayed (per-tensor scale from an amax history), current (per-tensor scale from the "
        "tensor itself; Megatron --fp8-recipe tensorwise), blockwise (1x128 / 128x128 blocks, "
        "DeepSeek-V3), mxfp8 (one E8M0 scale per 32 values, Blackwell), nvfp4 (FP4, Blackwell; "
        "precision: fp4). torchao (fsdp2/torchtitan): tensorwise, rowwise, rowwise_with_gw_hp. "
        "Default: delayed for fp8 (Megatron's default; rowwise, torchtitan's, under framework "
        "fsdp2), nvfp4 for fp4.",
    )
    param_gather: StrictBool = Field(
        False,
        description="Keep the GEMM weights in FP8 only (no 16-bit copy; the fp32 master stays "
        "in the optimizer) and all-gather them in FP8: Megatron --fp8-param-gather (needs the "
        "distributed optimizer, zero_stage >= 1), torchtitan enable_fsdp_float8_all_gather "
        "(tensorwise).",
    )
    first_last_bf16: Annotated[StrictInt, Field(ge=0, le=MAX_DIM)] = Field(
        0,
        description="Transformer layers kept in BF16 at each end of the model (Megatron "
        "--first-last-layers-bf16 with --num-layers-at-start-in-bf16 and --num-layers-at-end-"
        "in-bf16). Default: 0, every layer in FP8.",
    )
    moments: Literal["fp32", "bf16"] = Field(
        "fp32",
        description="Adam's moments in bf16 (Megatron --use-precision-aware-optimizer with "
        "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, as DeepSeek-V3 kept them; needs the "
        "distributed optimizer): 4 bytes per parameter instead of 8. Default: fp32.",
    )
    attention: AttentionFp8Name | None = Field(
        None,
        description="Run the attention core (QKᵀ, softmax, attention over V) in FP8 with this "
        "recipe: Transformer Engine's fp8_dpa on cuDNN's FusedAttention, Megatron-Core's "
        "TransformerConfig.fp8_dot_product_attention (no command-line flag: --yaml-cfg or "
        "Megatron-Bridge's config). delayed and current are per-tensor scaling (current needs "
        "Blackwell), mxfp8 one E8M0 scale per 32 values (Blackwell); a recipe other than the "
        "linear layers' is TE's NVTE_DPA_FP8_RECIPE. Default: attention in bf16.",
    )
    output_proj: StrictBool = Field(
        False,
        description="Run the LM head (the output projection to the vocabulary, and the "
        "multi-token prediction modules' second pass through it) in MXFP8: Megatron-Core's "
        "TransformerConfig.fp8_output_proj (--fp8-output-proj; Transformer Engine's "
        "TELMHeadColumnParallelLinear). Needs recipe mxfp8 under framework megatron, and an "
        "untied head or a pipeline (p > 1). Default: the head in bf16.",
    )


class CudaGraphSpec(Frozen):
    """CUDA graphs (Megatron-LM --cuda-graph-impl, --cuda-graph-modules): kernels captured once
    and replayed with one launch, so the host's Python and kernel launches do not pace the GPU."""

    impl: CudaGraphImpl = Field(
        description="How they are captured (--cuda-graph-impl): local, Megatron-Core's per-layer "
        "graphs; transformer_engine, Transformer Engine's make_graphed_callables per layer (the "
        "partial graphs of NVIDIA's MoE recipes); full_iteration, one graph of the whole "
        "forward and backward (--no-check-for-nan-in-loss-and-grad with it).",
    )
    modules: list[CudaGraphModuleName] = Field(
        default_factory=list,
        json_schema_extra={"default": []},
        max_length=4,
        description="What each layer's graph captures (--cuda-graph-modules): attn, mlp (a "
        "dense layer's MLP), moe_router (the router, and the shared experts unless they overlap "
        "the dispatch), moe_preprocess (the dispatcher's preprocessing; with moe_router). Empty: "
        "the whole layer; must be empty with full_iteration. Megatron's moe (the whole MoE "
        "block, drop-and-pad only) is not stated.",
    )


class TrainingSpec(Frozen):
    """One optimizer step: sequence, batch, precision, optimizer, recompute, kernels."""

    seq_len: Annotated[StrictInt, Field(ge=1, le=MAX_DIM)] = Field(
        description="Sequence length s in tokens."
    )
    micro_batch: Annotated[StrictInt, Field(ge=1, le=MAX_DIM)] = Field(
        1, description="Micro-batch size b in sequences per data-parallel rank."
    )
    global_batch: Annotated[StrictInt, Field(ge=1, le=2**40)] = Field(
        description="Global batch B in sequences per optimizer step."
    )
    precision: Precision = Field(
        "bf16",
        description="Weights and activations dtype; bf16/fp16 keep fp32 master weights. fp8 and "
        "fp4 run the linear layers' GEMMs in that format with bf16 weights, activations and "
        "gradients around them (training.fp8 gives the recipe).",
    )
    fp8: Fp8Spec | None = Field(
        None,
        description="precision fp8 or fp4 only: the recipe and its options. Default: the "
        "recipe's defaults.",
    )
    optimizer: OptimizerName = Field(
        "adam",
        description="adam: fp32 master, m and v (12 bytes/param); sgd: fp32 master and momentum; "
        "muon (framework megatron): fp32 master and momentum (8 bytes/param) for the 2-D weights "
        "but the embedding and output layer, Newton-Schulz iterations on each in the step, Adam "
        "for the rest. With zero_stage 1, Megatron's layer-wise distributed optimizer "
        "(--optimizer dist_muon; muon with --use-distributed-optimizer from Megatron-Core 0.18).",
    )
    muon: MuonSpec | None = Field(
        None,
        description="optimizer muon only: its options. Default: Megatron-Core's defaults.",
    )
    optimizer_state: OptimizerStateSpec | None = Field(
        None,
        description="framework megatron with zero_stage >= 1: the number formats of the "
        "master weights and Adam's moments (Megatron's precision-aware optimizer, or NeMo 1.0's "
        "Apex DistributedFusedAdam). Default: fp32 for both.",
    )
    grad_accum_fp32: StrictBool = Field(
        False,
        description="Accumulate gradients in fp32 main-grad buffers (Megatron: 18 bytes/param "
        "instead of 16).",
    )
    grad_accum_fusion: StrictBool | None = Field(
        None,
        description="Megatron: the linear layers' weight-gradient GEMMs add each micro-batch's "
        "gradient straight into the main-grad buffer (--gradient-accumulation-fusion, "
        "Megatron-LM's default since 2022-02); false: --no-gradient-accumulation-fusion, a "
        "kernel adds it after every micro-batch's backward, as Megatron-LM before 2022-02 did. "
        "Default: true under megatron and megatron-fsdp; DeepSpeed and FSDP2 accumulate their "
        "own way (planc.perf.grad_accum) and have no such fusion (true there is reported, "
        "PLC051).",
    )
    recompute: Recompute = Field(
        "selective",
        description="Activation recomputation: none, selective (attention core), selective-op "
        "(torchtitan's per-op policy, selective_ac_option 'op': keeps every other matmul "
        "output and SDPA's, recomputes the rest), full (layer inputs only).",
    )
    recompute_modules: list[RecomputeModule] | None = Field(
        None,
        description="recompute selective under Megatron-LM: the parts of each layer it "
        "recomputes (--recompute-modules). core_attn (the default) the attention core; "
        "mla_up_proj latent attention's up projections and RoPE (their Q, K, V not kept); "
        "layernorm the norms Megatron runs as modules of their own (a latent-attention layer's "
        "input norm, a MoE layer's pre-MLP norm; Transformer Engine fuses the others into the "
        "linear after them); mlp a dense layer's MLP; moe_act the experts' activation; moe the "
        "whole MoE block, its token exchange too; shared_experts the shared experts. An empty "
        "list recomputes nothing.",
    )
    attention: AttentionKind = Field(
        "flash", description="flash keeps no s×s score matrix; eager saves scores and softmax."
    )
    repeat_kv: StrictBool = Field(
        False,
        description="Keys and values are repeated to every query head before the attention "
        "kernel (grouped-query attention run as multi-head): torchtitan's Llama before v0.2.2 "
        "(repeat_kv ahead of F.scaled_dot_product_attention; native GQA from pytorch/torchtitan "
        "#2259, 2026-01-27) and Megatron-LM's local DotProductAttention. The attention then saves "
        "K and V at every query head, the copy and its gradient's sum run as kernels, and context "
        "parallelism passes the repeated K/V (and torch's fp32 dK/dV) round the ring. false: the "
        "kernel reads the grouped heads (Transformer Engine, flash-attn, SDPA with enable_gqa).",
    )
    attention_backend: AttentionBackend = Field(
        "auto",
        description="attention flash with the fused kernels: the kernel that runs it "
        "(--attention-backend). auto, Megatron-LM's default: Transformer Engine picks cuDNN's "
        "FusedAttention on Hopper and newer GPUs and the flash-attn package before them; flash, "
        "the flash-attn package (FlashAttention-2; NVTE_FUSED_ATTN=0); fused, cuDNN's "
        "FusedAttention (NVTE_FLASH_ATTN=0). On an H100 cuDNN runs about 1.6 times as fast as "
        "FlashAttention-2 (planc/presets/efficiency.json). With kernels unfused or compiled "
        "attention is PyTorch's SDPA.",
    )
    fused_grouped_mlp: StrictBool = Field(
        False,
        description="Megatron-Core runs the routed experts through Transformer Engine's "
        "operation fuser (use_transformer_engine_op_fuser, Megatron-Core 0.18 and later; "
        "Megatron-Bridge's cutedsl_fused_grouped_mlp, which also sets "
        "NVTE_CUTEDSL_FUSED_GROUPED_MLP): a clamped GLU and the experts' probability-scaled fc2 "
        "biases run inside Transformer Engine's ops, not as Megatron-Core's eager kernels. "
        "Megatron-LM's command line has no flag for it. false: TEGroupedMLP's own path.",
    )
    cuda_graph: CudaGraphSpec | None = Field(
        None,
        description="CUDA graphs (Megatron only): what Megatron-LM captures and replays "
        "(--cuda-graph-impl, --cuda-graph-modules). planc checks them against Megatron-Core's "
        "refusals and emits them; its step model prices no host time, with graphs or without "
        "(docs/explain.md). Default: none, Megatron's --cuda-graph-impl none.",
    )
    efficiency: Annotated[float, _bounded(0.01, 1.0)] | None = Field(
        None,
        description="A flat fraction of the GPU's peak dense TFLOPS for every matrix multiply, "
        "0.01 to 1, replacing the per-operation GEMM efficiency curve of the step-time estimate "
        "(planc explain). Default: the curve of the GPU's entry in planc/presets/efficiency.json "
        "(or hardware.calibration).",
    )
    overlap_tp: StrictBool = Field(
        False,
        description="Tensor-parallel communication overlaps compute (TP comm overlap); off, it "
        "is added to the step time.",
    )
    async_tp_allreduce: StrictBool = Field(
        True,
        description="The backward all-reduce (reduce-scatter with SP) of the column-parallel "
        "layers' input gradient runs while the same layer's weight gradient is computed "
        "(Megatron-LM since 2021-09, LinearWithGradAccumulationAndAsyncCommunication); false: "
        "it runs synchronously, exposed, as in Megatron-LM before it (autograd's "
        "copy_to_tensor_model_parallel_region) or with --no-async-tensor-model-parallel-allreduce. "
        "Megatron and DeepSpeed read it; torchtitan's DTensor TP reduces after the block's "
        "weight gradients, exposed, with or without async TP.",
    )
    overlap_grad_reduce: StrictBool = Field(
        True,
        description="Gradient reduction runs in buckets while the last micro-batch's backward "
        "produces them (Megatron --overlap-grad-reduce, DeepSpeed overlap_comm; planc emits "
        "both, as NVIDIA's recipes do; Megatron-LM's own default is off); off, it runs after "
        "the backward, exposed.",
    )
    overlap_param_gather: StrictBool = Field(
        True,
        description="ZeRO-1/2's parameter all-gather after the optimizer step hides behind the "
        "next step's first forward, bucket by bucket (Megatron --overlap-param-gather, with "
        "overlap_grad_reduce; NVIDIA's recipes turn it on, Megatron-LM's default is off); "
        "off, it is exposed after the optimizer step.",
    )
    overlap_p2p_comm: StrictBool = Field(
        True,
        description="Interleaved pipelines (virtual_stages > 1) issue their stage-to-stage "
        "sends and receives asynchronously and wait for them only when the data is needed "
        "(Megatron-LM's default; --no-overlap-p2p-communication turns it off, planc emits that "
        "flag when false). Megatron needs it on to interleave over two stages (validate_args: "
        "pipeline > 1 with it, > 2 without); planc's step time is the same either way.",
    )
    defer_embedding_wgrad_compute: StrictBool = Field(
        False,
        description="Megatron: the rank holding the LM head keeps its weight-gradient GEMMs of "
        "the first wgrad_deferral_limit micro-batches (and the re-gather of their input under "
        "sequence parallelism) for the pipeline flush, when it would otherwise wait for the "
        "other stages (--defer-embedding-wgrad-compute; ModelParallelConfig."
        "defer_embedding_wgrad_compute, tensor_parallel/layers.py, schedules.py "
        "finish_embedding_wgrad_compute). A deferred micro-batch's input-gradient reduction "
        "then has no GEMM to run beside. Megatron needs pipeline > 1 and grad_accum_fusion; "
        "NVIDIA's NeMo recipes turn it on for Llama 3.1 405B and Nemotron-4 340B.",
    )
    wgrad_deferral_limit: Annotated[StrictInt, Field(ge=0, le=2**40)] = Field(
        0,
        description="defer_embedding_wgrad_compute: how many of the LM head's weight gradients "
        "per step wait for the flush (--wgrad-deferral-limit); 0, Megatron's default, all of "
        "them.",
    )
    kernels: Kernels = Field(
        "fused",
        description="fused: Megatron-Core with Transformer Engine/Apex kernels (fused norms, "
        "SwiGLU, cross-entropy); unfused: plain PyTorch modules on CUDA (nn.RMSNorm/LayerNorm, "
        "SwiGLU as silu(a)·b, F.cross_entropy on fp32 logits, SDPA); compiled: torchtitan's "
        "torch.compile of each transformer block (Inductor fuses the block's element-wise ops, "
        "attention stays SDPA; the embedding, final norm, LM head and loss run eager).",
    )
    cross_entropy_fusion: CrossEntropyFusion = Field(
        "none",
        description="The LM loss's kernels under Megatron-LM: none, its eager fp32 "
        "_VocabParallelCrossEntropy (Megatron-LM's default); native, --cross-entropy-loss-fusion "
        "(Megatron-Core's compiled fused_vocab_parallel_cross_entropy); te, that flag with "
        "--cross-entropy-fusion-impl te (Transformer Engine's Triton parallel_cross_entropy, which "
        "writes the logits' gradient over the 16-bit logits in the forward pass; megatron-core "
        "0.19.2's validate_args refuses it). NVIDIA's recipes: NeMo 1.0's yamls of 2024 set "
        "native (cross_entropy_loss_fusion: true), NeMo 2.0's performance scripts and "
        "Megatron-Bridge te. Other frameworks run their own loss and ignore it.",
    )
    framework: Framework = Field(
        "megatron",
        description="The engine whose weights, gradients, optimizer state and buffers planc "
        "models: megatron (distributed optimizer, grad buffer), megatron-fsdp (Megatron-LM with "
        "--use-megatron-fsdp: zero_stage 0–3 is its --data-parallel-sharding-strategy no_shard, "
        "optim, optim_grads, optim_grads_params; one pipeline stage), deepspeed (ZeRO 0–3) or "
        "fsdp2 (fully_shard: parameters, gradients and optimizer always sharded over "
        "data_shard).",
    )
    framework_release: FrameworkRelease = Field(
        "latest",
        description="The software release the run uses, where its MoE layers' cost differs from "
        "today's: latest (default), the Megatron-Core and Transformer Engine planc targets, one "
        "grouped GEMM per expert linear and nothing per expert on the host; or one of NVIDIA's "
        "NeMo containers: nemo-25.09 (Megatron-Bridge 0.1.0rc3, Megatron-Core 0.14.0, "
        "Transformer Engine 2.7.0), nemo-25.11 (Megatron-Bridge 0.2.1, Megatron-Core 0.16.0rc0, "
        "Transformer Engine 2.10), nemo-26.02 (26.02 and 26.02.01: Megatron-Bridge 0.3.0 and "
        "0.3.1, Megatron-Core 0.16, Transformer Engine 2.12) or nemo-26.04 (26.04.01: "
        "Megatron-Bridge 0.4.2, Megatron-Core 0.17.1), whose every MoE layer spends a time per "
        "local expert and micro-batch beyond its GPU work, fitted per FP8 recipe on one "
        "published run of that release (planc/presets/releases.json; none where no run was "
        "fitted). Megatron only.",
    )
    reshard_after_forward: StrictBool = Field(
        True,
        description="FSDP2 only: free each layer's gathered parameters after its forward and "
        "gather them again for backward; false keeps them from forward to backward.",
    )
    reduce_dtype: ReduceDtype = Field(
        "fp32",
        description="FSDP2 only: the data type of its gradient reduce-scatter (and of HSDP's "
        "replica all-reduce), fully_shard's MixedPrecisionPolicy.reduce_dtype: fp32 moves 4 bytes "
        "per gradient element, bf16 2. Default fp32, torchtitan's training.mixed_precision_reduce "
        "(its only declared value in 0.3.0); NeMo AutoModel's FSDP2Config defaults to bf16. "
        "Priced: the bytes on the wire, the reduce-scatter's input buffer and its copy-in.",
    )
    model_dtype: ReduceDtype = Field(
        "fp32",
        description="FSDP2 only: the data type the model's parameters are stored in, and with "
        "them FSDP2's sharded parameters, their gradients and torch.optim's Adam state "
        "(zeros_like of each parameter): fp32 (torchtitan's; MixedPrecisionPolicy casts the "
        "all-gathered copy to bf16 for compute) or bf16 (NeMo AutoModel's torch_dtype bf16: no "
        "fp32 copy anywhere). Default fp32.",
    )
    optimizer_implementation: OptimizerImplementation = Field(
        "fused",
        description="FSDP2 only: how torch.optim runs Adam over the rank's shard: fused (one "
        "kernel per step, _fused_adamw_) or foreach (one multi-tensor kernel per operator, "
        "about 80 bytes of HBM traffic per parameter against the fused kernel's 28). Default "
        "fused, torchtitan 0.3.0's optimizer.implementation; torch.optim's own default on CUDA "
        "is foreach, as torchtitan ran until 2025 (--optimizer.fused off). Megatron and "
        "DeepSpeed run their fused Adam whatever this says.",
    )
    offload: OffloadSpec = Field(
        OffloadSpec(), description="What moves to host memory (needs deepspeed or fsdp2)."
    )
    expert_routing: ExpertRouting = Field(
        "uniform",
        description="Mixture of experts: how each token's top_k experts are chosen, which sets "
        "how many ranks and NVLink domains the flex dispatchers (deepep, hybridep) send it to. "
        "uniform: a uniformly random k-subset per token (group-limited under router_groups), "
        "what Megatron's --moe-router-force-load-balancing runs and planc's model of a balanced "
        "learned router. round_robin: token t of a rank's batch goes to experts t·k … t·k + k − 1 "
        "(mod experts), NeMo AutoModel's FakeBalancedGate (backend.fake_balanced_gate with "
        "fake_gate_noise 0, its benchmark recipes' setting; nemo_automodel/components/moe/"
        "layers.py), which ignores router_groups. Default: uniform.",
    )
    expert_imbalance: Annotated[float, _bounded(1.0, 1_000)] = Field(
        1.0,
        description="Mixture of experts, dropless routing (no capacity_factor): the most tokens "
        "one expert-parallel rank receives, as a multiple of the balanced T·topk (T tokens per rank, top_k), 1 to 1,000. "
        "planc sizes each MoE layer's routed activations and all-to-all buffers with it. "
        "Default: 1.0, the balanced expectation a load-balancing loss aims at; set it from your "
        "router's measured peak load (Megatron --moe-per-layer-logging) to budget the worst rank.",
    )
    tokens: Annotated[StrictInt, Field(ge=1, le=MAX_TOKENS)] | None = Field(
        None,
        description="Training tokens D of the whole run, batch_ramp included; planc explain "
        "then gives steps, days, GPU-hours (and cost: with cost:). Give tokens or steps, not "
        "both. Default: none (no run estimate).",
    )
    steps: Annotated[StrictInt, Field(ge=1, le=MAX_TOKENS)] | None = Field(
        None,
        description="Optimizer steps of the whole run at global_batch, instead of tokens. "
        "Default: none.",
    )
    batch_ramp: list[RampPhaseSpec] = Field(
        default_factory=list,
        json_schema_extra={"default": []},
        max_length=64,
        description="Phases run first, in order, each at its own global batch for its tokens "
        "(Llama 3 405B: 4M-token batches for 252M tokens, 8M for 2.87T, then 16M); global_batch "
        "runs the rest of training.tokens. Needs training.tokens. Default: none.",
    )


class CheckpointSpec(Frozen):
    """How the run checkpoints: what each rank saves, how often, and whether it blocks."""

    format: CheckpointFormat = Field(
        "auto",
        description="The saver planc sizes: megatron-dist (Megatron-Core dist_checkpointing), "
        "deepspeed-zero (DeepSpeed's model states and ZeRO optimizer shards) or torch-dcp "
        "(torch.distributed.checkpoint under FSDP2); auto: training.framework's own. It must "
        "match training.framework.",
    )
    interval: Annotated[StrictInt, Field(ge=1, le=MAX_TOKENS)] | Literal["optimal"] = Field(
        "optimal",
        description="Steps between checkpoints, or optimal: Daly's optimal interval for this "
        "checkpoint cost and job MTBF, rounded to whole steps. Default: optimal.",
    )
    async_save: StrictBool = Field(
        False,
        description="Asynchronous save (torch DCP async_save, Megatron --async-save): the step "
        "waits only for the copy to pinned host memory, which PLC021 counts; the write runs in "
        "the background and must finish before the next save. Default: false.",
    )
    fully_parallel_save: StrictBool = Field(
        True,
        description="Megatron only: the data-parallel replicas split the save of the replicated "
        "weights (--ckpt-fully-parallel-save, Megatron-Core's default); false: one replica "
        "writes them. Default: true.",
    )
    model_only_exports: Annotated[StrictInt, Field(ge=0, le=1_000_000)] = Field(
        0,
        description="Model-only exports over the run (16-bit weights alone, torchtitan "
        "last_save_model_only), each written synchronously. Default: 0.",
    )


class ReliabilitySpec(Frozen):
    """How often the job is interrupted and what a restart costs. Defaults from Llama 3 405B's
    published 54 days on 16,384 H100 GPUs (Dubey et al. 2024, §3.3.4)."""

    gpu_mtbf_hours: Annotated[float, _bounded(1.0, 1e9)] | None = Field(
        None,
        description="Mean time between interruptions per GPU in hours, 1 to 10^9; the job's "
        "MTBF is this over the GPU count. Default: 50,677, Llama 3's 419 unexpected "
        "interruptions in 54 days on 16,384 GPUs (16,384 × 1,296 h / 419).",
    )
    interruptions_per_gpu_day: Annotated[float, _bounded(1e-9, 24.0)] | None = Field(
        None,
        description="The same rate as interruptions per GPU per day, instead of gpu_mtbf_hours "
        "(Llama 3: 419 / (16,384 × 54) = 4.7·10^-4). Default: from gpu_mtbf_hours.",
    )
    restart_minutes: Annotated[float, _bounded(0.0, 100_000)] = Field(
        10.0,
        description="Minutes from an interruption to training again, besides loading the "
        "checkpoint (which planc prices from hardware.storage): detection, rescheduling, "
        "rendezvous, warm-up. Default: 10 (Daly 2006's worked example; measure your own).",
    )


class CostSpec(Frozen):
    """Prices and power: user input, never a preset (prices differ by contract and year)."""

    price_per_gpu_hour: Annotated[float, _bounded(0.0, 1_000_000)] | None = Field(
        None,
        description="What one GPU-hour costs, in your currency, 0 to 1,000,000. Default: none "
        "(no cost line).",
    )
    gpu_power_w: Annotated[float, _bounded(1.0, 1_000_000)] | None = Field(
        None,
        description="Average power per GPU in watts while training, 1 to 1,000,000 (an H100 "
        "SXM's board limit is 700). Default: none (no energy line).",
    )
    pue: Annotated[float, _bounded(1.0, 10.0)] = Field(
        1.0,
        description="Power usage effectiveness of the data centre, 1 to 10: facility energy "
        "over IT energy. Default: 1.0 (the GPUs' energy alone).",
    )


# --- rules: and the thresholds search may replace, from the options the rules own ---------------


def _option_type(option: Option) -> Any:
    """The strict, bounded type of one rule option (`planc.spec.options.Option`)."""
    ge, gt, le, lt = option.ge, option.gt, option.le, option.lt
    if option.value_type is int:
        return Annotated[StrictInt, Field(ge=ge, gt=gt, le=le, lt=lt)]
    return Annotated[float, Field(strict=True, allow_inf_nan=False, ge=ge, gt=gt, le=le, lt=lt)]


def _rules_fields(options: tuple[Option, ...]) -> dict[str, Any]:
    """The fields of `rules:`: every rule option with its default, then ignore and severity."""
    fields: dict[str, Any] = {
        o.name: (_option_type(o), Field(o.default, description=o.rules_description()))
        for o in options
    }
    fields["ignore"] = (
        list[RuleId],
        Field(
            default_factory=list,
            json_schema_extra={"default": []},
            description="Rule ids not to run.",
        ),
    )
    fields["severity"] = (
        dict[RuleId, Literal["error", "warning", "info"]],
        Field(
            default_factory=dict,
            json_schema_extra={"default": {}},
            description="Severity overrides, e.g. {PLC006: warning}.",
        ),
    )
    return fields


def _search_fields(options: tuple[Option, ...]) -> dict[str, Any]:
    """The thresholds of `search:`: every rule option, unset by default (rules: decides)."""
    return {
        o.name: (_option_type(o) | None, Field(None, description=o.search_description()))
        for o in options
    }


_Choice = TypeVar("_Choice")
# A `search` axis: the values `planc search` may try (at least one).
Choices = Annotated[list[_Choice], Field(min_length=1, max_length=256)]


class SearchAxes(Frozen):
    """What `planc search` may try. An axis left out here is searched over planc's default
    range; an axis the spec sets under parallelism or training is pinned and not searched."""

    tensor: Choices[Degree] | None = Field(
        None,
        description="Tensor-parallel degrees to try. Default: divisors of the world size up "
        "to the NVLink domain.",
    )
    pipeline: Choices[Annotated[StrictInt, Field(ge=1, le=MAX_STAGES)]] | None = Field(
        None,
        description="Pipeline-parallel degrees to try. Default: divisors of the world size up "
        "to the layer count.",
    )
    virtual_stages: Choices[Annotated[StrictInt, Field(ge=1, le=4096)]] | None = Field(
        None, description="Virtual stages (interleaved 1F1B chunks) to try. Default: 1 to 8."
    )
    context: Choices[Degree] | None = Field(
        None,
        description="Context-parallel degrees to try. Default: divisors of the world size "
        "that leave each context-parallel rank at least 1,024 tokens.",
    )
    sequence_parallel: Choices[StrictBool] | None = Field(
        None, description="Sequence parallelism off and on. Default: [false, true]."
    )
    zero_stage: Choices[Annotated[Literal[0, 1, 2, 3], IntegerOnly]] | None = Field(
        None, description="ZeRO stages to try. Default: [0, 1, 2, 3]."
    )
    micro_batch: Choices[Annotated[StrictInt, Field(ge=1, le=MAX_DIM)]] | None = Field(
        None, description="Micro-batch sizes to try. Default: [1, 2, 4, 8]."
    )
    recompute: Choices[Recompute] | None = Field(
        None, description="Activation recomputation modes to try. Default: all three."
    )
    expert: Choices[Degree] | None = Field(
        None,
        description="Expert-parallel degrees to try. Default: divisors of the routed experts "
        "(MoE models; 1 for a dense model).",
    )
    expert_tensor: Choices[Degree] | None = Field(
        None,
        description="Expert tensor-parallel degrees to try. Default: 1 and tensor (MoE models; "
        "tensor for a dense model).",
    )
    data_shard: Choices[Degree | Literal["all"]] | None = Field(
        None,
        description="ZeRO/FSDP shard groups to try (HSDP); all: data × context. Default: all "
        "and the GPUs of a node, with zero_stage 3 or framework fsdp2; else all.",
    )
    order: Choices[Order] | None = Field(
        None,
        description="Rank orders to try. Default: tp-cp-dp-pp, tp-dp-cp-pp and tp-cp-pp-dp "
        "(ep before dp for a MoE model); orders that place the same groups count once.",
    )
    cp_comm_type: Choices[CpCommType] | None = Field(
        None,
        description="Context-parallel communication types to try (with context > 1). Default: "
        "all four.",
    )
    offload: Choices[OffloadChoice] | None = Field(
        None,
        description="What to offload to host memory (training.offload): none, optimizer, "
        "parameters or optimizer+parameters (parameters only with zero_stage 3 or fsdp2). "
        "Default: none, optimizer and optimizer+parameters under deepspeed or fsdp2; none "
        "under megatron.",
    )
    precision: Choices[Literal["bf16", "fp8"]] | None = Field(
        None,
        description="Precisions to try; fp8 with the framework's default recipe. Default: bf16, "
        "and fp8 on a GPU with an FP8 peak.",
    )
    pipeline_schedule: Choices[ScheduleName] | None = Field(
        None,
        description="Pipeline schedules to try (with pipeline > 1). Default: the schedules the "
        "framework runs (planc/pipeline/registry.py) that fit each virtual_stages.",
    )


def option_models(options: tuple[Option, ...]) -> tuple[type[Frozen], type[Frozen]]:
    """`RulesSpec` and `SearchSpec` for these rule options: `rules:` takes each option with its
    default, `search:` each option again (replacing rules: while searching) after its axes;
    ValueError for an option named like a search axis."""
    clash = sorted({o.name for o in options} & set(SearchAxes.model_fields))
    if clash:
        raise ValueError(f"rule option {clash[0]!r} is also a search axis; name it otherwise")
    rules = create_model(
        "RulesSpec",
        __base__=Frozen,
        __doc__="Thresholds and per-rule settings.",
        __module__=__name__,
        **_rules_fields(options),
    )
    search = create_model(
        "SearchSpec",
        __base__=SearchAxes,
        __doc__=SearchAxes.__doc__,
        __module__=__name__,
        **_search_fields(options),
    )
    return rules, search


if TYPE_CHECKING:  # the option fields are built from the table; the type checker sees the rest

    class RulesSpec(Frozen):
        ignore: list[str] = []
        severity: dict[str, str] = {}

    class SearchSpec(SearchAxes):
        pass

else:
    RulesSpec, SearchSpec = option_models(OPTIONS)


class Spec(Frozen):
    """A planc training spec, version 1."""

    version: Annotated[Literal[1], IntegerOnly] = Field(
        description="Spec format version; this is version 1."
    )
    name: Annotated[StrictStr, Field(min_length=1, max_length=200, pattern=ONE_LINE)] = Field(
        description="A name for the job, used in reports and launcher files: one line of "
        "printable characters (no line breaks, tabs or other control characters)."
    )
    model: ModelSpec = Field(description="The model.")
    hardware: HardwareSpec = Field(description="The cluster.")
    parallelism: ParallelismSpec = Field(ParallelismSpec(), description="The parallel layout.")
    training: TrainingSpec = Field(description="The training step.")
    checkpoint: CheckpointSpec | None = Field(
        None,
        description="Checkpointing: planc explain prices the saves, restarts and goodput. "
        "Needs hardware.storage. Default: none (no checkpoint model).",
    )
    reliability: ReliabilitySpec | None = Field(
        None,
        description="Interruption rate and restart time. Default: Llama 3's published rates.",
    )
    cost: CostSpec | None = Field(
        None, description="Price per GPU-hour and power, for the run's cost and energy."
    )
    rules: RulesSpec = Field(RulesSpec(), description="Rule thresholds and settings.")
    search: SearchSpec = Field(
        SearchSpec(), description="What planc search may try; ignored by the other commands."
    )


# Where the published schema lives; editors in other repositories point at this URL.
SCHEMA_ID = "https://raw.githubusercontent.com/planc/planc/main/schemas/spec.schema.json"


def json_schema() -> dict[str, object]:
    """The published JSON Schema of the spec (draft 2020-12).

    pydantic's schema, post-processed for editors: human titles instead of class names, titled
    union branches, and the PLC109 requirement "a model preset, or layers + hidden + heads +
    vocab" as an `anyOf` on the model, so editors flag it too (planc itself reports PLC109).
    """
    schema = Spec.model_json_schema(mode="validation")
    _titled(schema)
    _model_requirement(schema)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID
    return schema


# --- json_schema() post-processing ------------------------------------------------------------

_SECTION_TITLES = {
    "Spec": "planc training spec",
    "ModelSpec": "Model",
    "HardwareSpec": "Hardware",
    "GpuSpec": "Custom GPU",
    "LinkSpec": "Link",
    "ParallelismSpec": "Parallelism",
    "TrainingSpec": "Training",
    "RulesSpec": "Rules",
    "SearchSpec": "Search",
    "OffloadSpec": "Offload",
    "MoESpec": "Mixture of experts",
    "TierSpec": "Fabric tier",
    "StorageSpec": "Storage",
    "RampPhaseSpec": "Batch ramp phase",
    "CheckpointSpec": "Checkpoint",
    "ReliabilitySpec": "Reliability",
    "CostSpec": "Cost",
}
_WORDS = {
    "gb": "GB",
    "gib": "GiB",
    "gbs": "GB/s",
    "us": "µs",
    "tflops": "TFLOPS",
    "bf16": "BF16",
    "fp32": "FP32",
    "nvlink": "NVLink",
    "gpu": "GPU",
    "hf": "Hugging Face",
    "gpus": "GPUs",
    "kv": "KV",
    "ffn": "FFN",
    "mlp": "MLP",
    "seq": "sequence",
    "len": "length",
    "dim": "dimension",
    "tp": "TP",
    "zero": "ZeRO",
}
# Titles of union branches an editor shows side by side (else both read "Hosts").
_BRANCH_TITLES = {
    ("HardwareSpec", "hosts"): ("Host names, in node order", "Host pattern such as gpu-{000..063}"),
    ("HardwareSpec", "gpu"): ("GPU preset", "Custom GPU"),
    ("HardwareSpec", "fabric"): ("Fabric preset", "Fabric tiers"),
    ("CheckpointSpec", "interval"): ("Steps between checkpoints", "Daly's optimal interval"),
}
_MODEL_DIMENSIONS = ("layers", "hidden", "heads", "vocab")


def _field_title(name: str) -> str:
    words = [_WORDS.get(word, word) for word in name.split("_")]
    first = words[0]
    return " ".join([first[:1].upper() + first[1:], *words[1:]])


def _titled(schema: dict[str, object]) -> None:
    definitions: dict[str, dict[str, object]] = schema.get("$defs", {})  # type: ignore[assignment]
    for name, node in [("Spec", schema), *definitions.items()]:
        node["title"] = _SECTION_TITLES.get(name, name.removesuffix("Spec"))
        properties: dict[str, dict[str, object]] = node.get("properties", {})  # type: ignore[assignment]
        for field, prop in properties.items():
            prop["title"] = _field_title(field)
            branches: list[dict[str, object]] = prop.get("anyOf", [])  # type: ignore[assignment]
            named = _BRANCH_TITLES.get((name, field))
            for index, branch in enumerate(branches):
                if named is not None and index < len(named):
                    branch["title"] = named[index]
                elif branch.get("type") == "null":
                    branch["title"] = "Not set (planc's default)"
                else:
                    branch["title"] = prop["title"]


# What an editor says when a model matches no branch, in PLC109's words. yaml-language-server
# (and vscode-json-languageservice) report a branch's missing `required` property with the
# branch's `errorMessage` when it has one, else as "Missing property "layers"".
MODEL_REQUIREMENT_MESSAGE = (
    "PLC109: the model needs a model preset, or layers + hidden + heads + vocab, or hf_config "
    "(a Hugging Face config.json)"
)


def _model_requirement(schema: dict[str, object]) -> None:
    model: dict[str, object] = schema["$defs"]["ModelSpec"]  # type: ignore[index]
    model["anyOf"] = [
        {
            "title": "A model preset",
            "required": ["preset"],
            "properties": {"preset": {"type": "string"}},
            "errorMessage": MODEL_REQUIREMENT_MESSAGE,
        },
        {
            "title": "A Hugging Face config.json",
            "required": ["hf_config"],
            "properties": {"hf_config": {"type": "string"}},
            "errorMessage": MODEL_REQUIREMENT_MESSAGE,
        },
        {
            "title": "Explicit dimensions: layers, hidden, heads and vocab",
            "required": list(_MODEL_DIMENSIONS),
            "properties": {name: {"type": "integer"} for name in _MODEL_DIMENSIONS},
            "errorMessage": MODEL_REQUIREMENT_MESSAGE,
        },
    ]
