"""Activation memory: what autograd keeps for backward, per layer, per stage, per schedule.

Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", §4.1
counts, for one layer in 16-bit with dropout and eager attention, s·b·h·(34 + 5·a·s/h) bytes:

    attention  QKV input 2sbh, QKᵀ inputs (Q, K) 4sbh, softmax output 2as²b, softmax dropout
               mask as²b, attention over V (dropout output 2as²b, V 2sbh), out-proj input 2sbh,
               dropout mask sbh                                             = 11sbh + 5as²b
    MLP        fc1 input 2sbh, GeLU input 8sbh, fc2 input 8sbh, dropout mask sbh  = 19sbh
    norms      two norm inputs                                                    =  4sbh

Each line below is one of those tensors, generalised and divided the way Megatron divides it:

* bytes per element ε = 2 (bf16/fp16) or 4 (fp32); dropout masks are 1 byte (bool) and exist
  only when dropout > 0; without dropout the softmax output *is* the attention-over-V input,
  kept once.
* head dim k, query heads n, kv heads g (GQA): Q is ε·s·b·n·k, K and V ε·s·b·g·k. Eager attention
  in Megatron expands K and V to n heads before the matmuls (DotProductAttention,
  repeat_interleave), so it keeps them at n heads.
* flash attention keeps no s×s matrix: its backward recomputes the scores from Q, K, V, the
  output O and the fp32 log-sum-exp per query and head (4·a·s·b bytes), which it saves.
* GeLU keeps its input and its output (ε·s·b·f each). SwiGLU as Megatron fuses it
  (bias_swiglu_impl / SwiGLUFunction) keeps the fc1 output, gate and up together (2·ε·s·b·f),
  and fc2 keeps the product (ε·s·b·f).
* LayerNorm and RMSNorm both keep their input (ε·s·b·h); the fp32 per-token statistics
  (mean/rstd, 4 bytes a token) are below 0.1 % of a layer for h ≥ 1024 and are not charged.
* tensor parallelism divides the head- and f-sized tensors by t (heads ⌈n/t⌉, kv heads ⌈g/t⌉,
  f ⌈f/t⌉); sequence parallelism divides the rest (norm inputs, QKV and fc1 inputs, dropout
  masks) by t along the sequence. Context parallelism gives each rank ⌈s/c⌉ tokens; with eager
  attention each rank's queries meet all s keys over the ring and every step's probabilities are
  kept for backward, a·(s/c)·s·b elements (with flash: only the log-sum-exp of its s/c queries).
* multi-head latent attention (DeepSeek-V2 §2.1): the down projections run on the norm's
  output (the QKV input line) and keep their outputs as the latent norms' inputs, the query
  latent (ε·s·b·d_c') and the key/value latent with the key's RoPE part (ε·s·b·(d_c + d_h^R):
  the norm's input is a split view that keeps the whole projection output); each latent norm's
  output is the input of its up projection (ε·s·b·d_c', ε·s·b·d_c). These run where the norm
  runs (/t with SP: Megatron's down projections are replicated and take the sequence shard).
  Q and K then carry d_h + d_h^R channels for all n/t heads (the shared RoPE key expanded to
  every head, as Megatron's `key = cat(k_no_pe, k_pos_emb.expand(...))`), V and the attention
  output v_head_dim channels.
* recompute: selective drops the attention core (scores, softmax, its dropout mask and output,
  flash's log-sum-exp), as Megatron's selective (core_attn) recompute does; full keeps only
  each layer's input (ε·s·b·h, /t with SP) and re-creates one layer's activations at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from planc.comm import context
from planc.comm.schedule import allgather_rows_bytes, cp_a2a_size, fp8_ring_attention
from planc.deferral import deferred_calls
from planc.dims import AttentionQuant, RankDims, bf16_ranges, padded_vocab, rank_dims
from planc.memory.fp8 import TE_HEAD
from planc.memory.terms import Term, quantized_bytes
from planc.pipeline import registry
from planc.plannable import Plannable
from planc.record import record
from planc.spec.job import Model
from planc.vocab import (
    DEFAULT_RECOMPUTE_MODULES,
    AttentionKind,
    CrossEntropyFusion,
    DType,
    Kernels,
    Precision,
    RecomputeModule,
    gated,
)

KORTHIKANTI = "Korthikanti et al. 2022 §4.1"
MTP = (
    "DeepSeek-V3 §2.2 (eq. 21-25); Megatron-Core transformer/multi_token_prediction.py "
    "MultiTokenPredictionLayer (d98e8a64)"
)
FP8_INPUTS = (
    "TE #1764 (timmoon10): the linear layers save their inputs quantized, the FP8 data on "
    "Blackwell or the FP8 transpose on Hopper, half the bytes; norms, activation functions and "
    "attention stay 16-bit"
)
TE_HEAD_INPUT = TE_HEAD + ", which saves its input quantized; " + FP8_INPUTS
TABLE2 = "Korthikanti et al. 2022 Table 2"
DROPOUT_MASK_BYTES = 1  # torch.nn.functional.dropout keeps a bool mask
INDEX_BYTES = 8  # int64 token ids and targets
# fp32 per-token statistics a norm's CUDA kernel saves for backward: LayerNorm its mean and rstd
# (native_layer_norm, derivatives.yaml: `input, weight, bias, result1, result2`), RMSNorm its
# rstd (_fused_rms_norm, PyTorch ≥ 2.8: `input, weight, rstd`). 4 bytes each.
NORM_STATISTICS_BYTES = {"layernorm": 8, "rmsnorm": 4}
PYTORCH_NORM = (
    "PyTorch tools/autograd/derivatives.yaml: native_layer_norm saves input, mean, rstd; "
    "_fused_rms_norm (CUDA nn.RMSNorm) saves input and rstd, fp32 statistics"
)
MLA_SOURCE = (
    "DeepSeek-V2 report (arXiv 2405.04434) §2.1.2; Megatron-LM multi_latent_attention.py "
    "(MLASelfAttention.get_query_key_value_tensors); PyTorch autograd (validation/activations.py)"
)
PYTORCH_SWIGLU = (
    "PyTorch derivatives.yaml: silu saves its input, mul saves both operands "
    "(torchtitan FeedForward: w2(silu(w1(x)) * w3(x)))"
)


@record
class LayerShape:
    """The dimensions one rank sees for one layer and one micro-batch.

    `s` is the rank's share of the sequence (⌈s/c⌉), `s_r` the share of the parts TP leaves
    replicated (⌈s/c/t⌉ with sequence parallelism, else `s`), `s_kv` the keys each query meets.
    """

    e: int  # bytes per activation element (ε)
    s: int
    s_r: int
    s_kv: int
    b: int
    h: int
    n: int  # query heads on this rank, ⌈n/t⌉
    g: int  # key/value heads kept on this rank: ⌈g/t⌉ (flash) or ⌈n/t⌉ (eager expands them)
    k: int
    f: int  # ⌈f/t⌉
    gated: bool  # SwiGLU
    eager: bool
    dropout: bool
    unfused: bool  # plain PyTorch modules on CUDA instead of Megatron-Core's fused kernels
    norm_stats: int  # fp32 statistics bytes per token a norm keeps: 8 LayerNorm, 4 RMSNorm
    # symbols for formulas
    tok: str  # "s·b" or "(s/c)·b"
    split: str  # "/t" when t > 1
    rep: str  # "/t" when sequence parallel
    v: int = 0  # value channels per head (0: k); latent attention's v_head_dim
    q_latent: int = 0  # MLA query latent d_c' (0: none)
    kv_latent: int = 0  # MLA key/value latent d_c (0: not latent attention)
    rope: int = 0  # MLA per-head RoPE channels d_h^R, the key's shared by all heads
    # A low-precision recipe that saves the linear layers' inputs quantized (Transformer
    # Engine): bits per element, elements per scale (0: one per tensor) and bytes per scale;
    # q_bits = 0: saved in ε bytes like every other tensor.
    q_bits: int = 0
    q_block: int = 0
    q_scale: int = 0
    q_label: str = ""
    # The LM head saves its input in the recipe's format too (Megatron-Core fp8_output_proj:
    # a Transformer Engine linear); False: 16-bit, outside TE's autocast.
    head_q: bool = False
    loss: CrossEntropyFusion = "none"  # the LM loss's kernels (training.cross_entropy_fusion)
    # torchtitan's loss: eager F.cross_entropy on logits.float() (its loss_fn, never compiled),
    # with DTensor's loss parallel over the vocabulary slices when t > 1
    torch_loss: bool = False
    loss_parallel: bool = False
    # The attention core in FP8 (training.fp8.attention) saving Q, K, V for its backward: FP8
    # copies per tensor (0: ε bytes each; 1 per-tensor scaling; 2 MXFP8's two directions),
    # elements per scale (0: one per tensor) and bytes per scale, and whether it saves O in
    # FP8 (delayed scaling) rather than in 16 bits.
    a_usages: int = 0
    a_block: int = 0
    a_scale: int = 0
    a_out_fp8: bool = False


def layer_shape(
    model: Model,
    *,
    s: int,
    b: int,
    precision: Precision = "bf16",
    attention: AttentionKind = "eager",
    t: int = 1,
    c: int = 1,
    sp: bool = False,
    kernels: Kernels = "fused",
) -> LayerShape:
    """The per-rank dimensions of one layer for sequence `s`, micro-batch `b` and degrees t, c
    (the dims of `planc.dims.rank_dims`, with ε the activations' bytes for `precision`)."""
    dims = rank_dims(model, s=s, b=b, t=t, c=c, sp=sp)
    return shape_from(model, dims, DType(precision).bits // 8, attention, kernels)


def shape_from(
    model: Model, dims: RankDims, e: int, attention: AttentionKind, kernels: Kernels
) -> LayerShape:
    """The memory view of a rank's dims: ε bytes per activation element, the key/value heads
    the attention keeps (n/t where eager attention expands them or they are repeated before the
    kernel, `RankDims.g_core`; else g/t), and the formulas' symbols."""
    eager = attention == "eager"
    return LayerShape(
        e=e,
        s=dims.s_c,
        s_r=dims.s_r,
        s_kv=dims.s,
        b=dims.b,
        h=dims.h,
        n=dims.n,
        g=dims.n if eager else dims.g_core,
        k=dims.k,
        f=dims.f,
        gated=gated(model.mlp),
        eager=eager,
        dropout=model.dropout > 0,
        unfused=kernels == "unfused",
        norm_stats=NORM_STATISTICS_BYTES[model.norm],
        v=dims.v_head if model.mla is not None else 0,
        q_latent=dims.q_latent,
        kv_latent=dims.kv_latent,
        rope=dims.rope,
        tok="(s/c)·b" if dims.c > 1 else "s·b",
        split="/t" if dims.t > 1 else "",
        rep="/t" if dims.sp and dims.t > 1 else "",
    )


def shape_of(job: Plannable) -> LayerShape:
    """The layer shape of `job` on any rank (all ranks of a job see the same per-layer shape),
    with the recipe's formats of the saved linear inputs under an fp8/fp4 recipe that saves
    them quantized."""
    tr = job.training
    x = shape_from(job.model, job.dims, job.numerics.activation, tr.attention, tr.kernels)
    torch_loss = tr.framework == "fsdp2"
    x = replace(
        x, loss=tr.loss_fusion, torch_loss=torch_loss, loss_parallel=torch_loss and job.layout.t > 1
    )
    q = job.numerics.quantized
    if q is None:
        return x
    x = with_fp8_attention(x, q.attention, tr.recompute, tr.recompute_modules)
    if not q.saved_input:
        return x
    return replace(
        x,
        q_bits=q.data_bits,
        q_block=q.scale_block,
        q_scale=q.scale_bytes,
        q_label=q.label,
        head_q=q.output_proj,
    )


def with_fp8_attention(
    x: LayerShape, a: AttentionQuant | None, recompute: str, modules: Modules
) -> LayerShape:
    """`x` with the attention core's FP8 saves (Transformer Engine's FusedAttnFunc saves its
    FP8 Q, K, V, and O in FP8 under delayed scaling; attention/dot_product_attention/
    backends.py, TE 2.18). Where selective recompute checkpoints the core (core_attn) the
    checkpoint keeps the core's 16-bit inputs instead and the FP8 copies live only inside
    the recomputed core: `x` unchanged."""
    if a is None or (recompute == "selective" and "core_attn" in modules) or x.eager:
        return x
    return replace(
        x, a_usages=a.usages, a_block=a.scale_block, a_scale=a.scale_bytes, a_out_fp8=a.output_fp8
    )


def attention_input(x: LayerShape, elements: int) -> int:
    """The bytes of a saved Q, K or V of `elements` elements: ε each, or the FP8 attention's
    copies (`a_usages` of one byte per element plus their block scales)."""
    if not x.a_usages:
        return x.e * elements
    return x.a_usages * quantized_bytes(elements, 8, x.a_block, x.a_scale)


def quantized_input(x: LayerShape, elements: int) -> int:
    """The bytes of a saved linear input of `elements` elements: ε each, or under a recipe that
    saves it quantized ⌈n·bits/8⌉ plus its block scales (TE #1764: 'a 50% reduction in the
    activation memory' of those tensors in FP8)."""
    if not x.q_bits:
        return x.e * elements
    return quantized_bytes(elements, x.q_bits, x.q_block, x.q_scale)


# --- one function per saved tensor (bytes for one layer, one micro-batch) -------------------


def norm_input(x: LayerShape) -> int:
    """ε·s·b·h: the input of a LayerNorm/RMSNorm (Korthikanti: 2sbh each); /t with SP."""
    return x.e * x.s_r * x.b * x.h


def norm_statistics(x: LayerShape) -> int:
    """4·s·b (RMSNorm) or 8·s·b (LayerNorm): the fp32 per-token statistics an unfused PyTorch norm
    keeps (CUDA kernels); /t with SP. The fused kernels' statistics are not charged (below 0.1 %
    of a layer for h ≥ 1024): 0 with fused kernels."""
    return x.norm_stats * x.s_r * x.b if x.unfused else 0


def linear_input(x: LayerShape) -> int:
    """ε·s·b·h: the input of the QKV or fc1 projection, the norm's output (2sbh); /t with SP.
    Quantized under an FP8 recipe (TE's LayerNormLinear saves only the quantized norm output)."""
    return quantized_input(x, x.s_r * x.b * x.h)


def query(x: LayerShape) -> int:
    """ε·s·b·n·k/t: Q, kept for QKᵀ (Korthikanti: half of the 4sbh QKᵀ inputs); in FP8 under FP8
    attention (`attention_input`)."""
    return attention_input(x, x.s * x.b * x.n * x.k)


def key(x: LayerShape) -> int:
    """ε·s·b·g·k/t: K, kept for QKᵀ; at n heads under eager attention (expanded for GQA) or
    where K is repeated to every query head before the kernel (`training.repeat_kv`); in FP8
    under FP8 attention (`attention_input`)."""
    return attention_input(x, x.s * x.b * x.g * x.k)


def value_channels(x: LayerShape) -> int:
    """Channels per value head: k, or latent attention's v_head_dim."""
    return x.v or x.k


def value(x: LayerShape) -> int:
    """ε·s·b·g·k/t: V, kept for the attention over V (Korthikanti: 2sbh); latent attention:
    ε·s·b·n·v_head_dim/t; in FP8 under FP8 attention (`attention_input`)."""
    return attention_input(x, x.s * x.b * x.g * value_channels(x))


def score_elements(x: LayerShape) -> int:
    """a·s²·b/t elements of one s×s score matrix per head (a·(s/c)·s·b with context parallelism)."""
    return x.n * x.s * x.s_kv * x.b


def softmax_output(x: LayerShape) -> int:
    """ε·a·s²·b/t: the softmax output, which its backward needs (Korthikanti: 2as²b). Eager only."""
    return x.e * score_elements(x) if x.eager else 0


def softmax_dropout_mask(x: LayerShape) -> int:
    """a·s²·b/t: the attention-dropout mask, 1 byte each (Korthikanti: as²b). Eager, dropout > 0."""
    return DROPOUT_MASK_BYTES * score_elements(x) if x.eager and x.dropout else 0


def softmax_dropout_output(x: LayerShape) -> int:
    """ε·a·s²·b/t: the dropped-out probabilities, input of the attention over V (2as²b).

    Without dropout that input is the softmax output itself, already counted: 0.
    """
    return x.e * score_elements(x) if x.eager and x.dropout else 0


def softmax_statistics(x: LayerShape) -> int:
    """4·a·s·b/t: flash attention's fp32 log-sum-exp per query and head (Dao et al. 2022, §3.1:
    backward recomputes the scores from Q, K, V, O and these statistics). Flash only."""
    return 0 if x.eager else 4 * x.n * x.s * x.b


def attention_output(x: LayerShape) -> int:
    """ε·s·b·n·k/t: the attention output, input of the out-projection (2sbh); flash attention
    saves the same tensor as its O. Latent attention: ε·s·b·n·v_head_dim/t. Under an FP8 recipe
    with eager attention the out-projection keeps it quantized; flash attention's backward still
    needs O in 16 bits (FlashAttention-2 and cuDNN take O and dO), so it stays whole and the
    quantized copy is a line of its own (`attention_output_copy`). FP8 attention under delayed
    scaling saves its O in FP8 (one byte per element) and hands the out-projection a 16-bit
    copy it does not keep."""
    elements = x.s * x.b * x.n * value_channels(x)
    if x.eager:
        return quantized_input(x, elements)
    return quantized_bytes(elements, 8, 0, 0) if x.a_out_fp8 else x.e * elements


def attention_output_copy(x: LayerShape) -> int:
    """The out-projection's quantized copy of its input, kept beside flash attention's 16-bit O
    (FP8 recipes that save inputs quantized, flash attention only; else 0)."""
    if not x.q_bits or x.eager:
        return 0
    return quantized_input(x, x.s * x.b * x.n * value_channels(x))


def query_latent_norm_input(x: LayerShape) -> int:
    """ε·s·b·d_c': q_a_proj's output, the input of q_a_layernorm (DeepSeek-V2 eq. 12); /t with
    SP. 0 without a query latent."""
    return x.e * x.s_r * x.b * x.q_latent


def query_latent(x: LayerShape) -> int:
    """ε·s·b·d_c': q_a_layernorm's output, the input of q_b_proj; /t with SP (Megatron's
    column-parallel up projection keeps the sequence shard and re-gathers it in backward)."""
    return x.e * x.s_r * x.b * x.q_latent


def kv_latent_norm_input(x: LayerShape) -> int:
    """ε·s·b·(d_c + d_h^R): kv_a_proj_with_mqa's output. kv_a_layernorm's input is its first
    d_c channels, a split view, which keeps the whole output (torch.split in Hugging Face
    DeepseekV3Attention and Megatron MLASelfAttention); /t with SP. 0 without latent attention."""
    return x.e * x.s_r * x.b * (x.kv_latent + x.rope) if x.kv_latent else 0


def kv_latent(x: LayerShape) -> int:
    """ε·s·b·d_c: kv_a_layernorm's output c^KV, the input of kv_b_proj (DeepSeek-V2 eq. 9);
    /t with SP."""
    return x.e * x.s_r * x.b * x.kv_latent


def latent_norm_statistics(x: LayerShape) -> int:
    """4·s·b per latent norm (RMSNorm's fp32 1/rms), q_a_layernorm and kv_a_layernorm, for an
    unfused PyTorch norm; /t with SP. 0 with fused kernels (as `norm_statistics`)."""
    norms = (1 if x.q_latent else 0) + (1 if x.kv_latent else 0)
    return NORM_STATISTICS_BYTES["rmsnorm"] * norms * x.s_r * x.b if x.unfused else 0


def residual_dropout_mask(x: LayerShape) -> int:
    """s·b·h: the dropout mask after the out-projection or fc2, 1 byte each (sbh); /t with SP."""
    return DROPOUT_MASK_BYTES * x.s_r * x.b * x.h if x.dropout else 0


def mlp_activation_input(x: LayerShape) -> int:
    """GeLU: ε·s·b·f/t, the fc1 output (Korthikanti: 8sbh at f = 4h). SwiGLU: 2·ε·s·b·f/t, the
    fc1 output holding gate and up, which Megatron's fused SwiGLU saves whole; unfused, ε·s·b·f/t,
    the gate projection's output, which silu keeps as its input."""
    return (2 if x.gated and not x.unfused else 1) * x.e * x.s * x.b * x.f


def swiglu_up_output(x: LayerShape) -> int:
    """ε·s·b·f/t: the up projection's output, kept by silu(a) * b for its gradient to the SiLU
    output. Unfused SwiGLU only (the fused kernel keeps it inside the fc1 output)."""
    return x.e * x.s * x.b * x.f if x.gated and x.unfused else 0


def silu_output(x: LayerShape) -> int:
    """ε·s·b·f/t: the SiLU output, kept by silu(a) * b for its gradient to the up projection.
    Unfused SwiGLU only (the fused kernel recomputes it from the fc1 output)."""
    return x.e * x.s * x.b * x.f if x.gated and x.unfused else 0


def mlp_output_input(x: LayerShape) -> int:
    """ε·s·b·f/t: the fc2 input, GeLU's or SwiGLU's output (Korthikanti: 8sbh at f = 4h);
    quantized under an FP8 recipe (the activation's backward reads its own input instead)."""
    return quantized_input(x, x.s * x.b * x.f)


def layer_input(x: LayerShape) -> int:
    """ε·s·b·h: the checkpointed layer input under full recompute (Korthikanti: 2sbh); /t with SP."""
    return x.e * x.s_r * x.b * x.h


# --- the per-layer table ---------------------------------------------------------------------

Measure = Callable[[LayerShape], int]


@record
class Line:
    """One saved tensor: its name, size function, formula and whether recompute drops it."""

    name: str
    size: Measure
    formula: Callable[[LayerShape], str]
    source: str
    core: bool = False  # part of the attention core that selective recompute drops
    mlp: bool = False  # a dense MLP's tensor, which a MoE layer replaces by its own (MOE_LINES)
    # whether an FP8 recipe saves this tensor quantized (a linear input), for its name
    quantized: Callable[[LayerShape], bool] | None = None
    # the recompute modules beyond core_attn (core) and mlp (mlp) that drop it (`line_modules`)
    recomputed_by: Callable[[LayerShape], frozenset[RecomputeModule]] | None = None
    moe_norm: bool = False  # the MLP norm's own tensor: a module of its own in a MoE layer
    # fc1's input, the MLP norm's output: inside the mlp module where Transformer Engine fuses
    # the norm into fc1 (LayerNormLinear), its input where the norm runs apart (unfused kernels)
    mlp_input: bool = False
    # whether the FP8 attention core saves this tensor in FP8 (Q, K, V; O under delayed)
    attention_fp8: Callable[[LayerShape], bool] | None = None

    def title(self, x: LayerShape) -> str:
        """The line's name, with the format it is saved in when an FP8 recipe quantizes it."""
        if self.attention_fp8 is not None and self.attention_fp8(x):
            return f"{self.name} (fp8 attention)"
        return f"{self.name} ({x.q_label})" if self.is_quantized(x) else self.name

    def is_quantized(self, x: LayerShape) -> bool:
        """Whether the tensor is saved quantized in `x`."""
        return self.quantized is not None and self.quantized(x)


def _saved_quantized(x: LayerShape) -> bool:
    """A linear input under a recipe that saves inputs quantized."""
    return x.q_bits > 0


def _saved_quantized_eager(x: LayerShape) -> bool:
    """The out-projection input: quantized unless flash attention keeps it as its 16-bit O."""
    return x.q_bits > 0 and x.eager


def _e(x: LayerShape) -> str:
    return str(x.e)


def _a(x: LayerShape) -> str:
    """A saved Q, K or V's bytes per element: ε, or the FP8 attention's copies."""
    if not x.a_usages:
        return _e(x)
    scales = f"(1 + {x.a_scale}/{x.a_block})" if x.a_block else "1"
    return f"{x.a_usages}·{scales}" if x.a_usages > 1 else scales


def _saves_fp8_qkv(x: LayerShape) -> bool:
    return x.a_usages > 0


def _saves_fp8_o(x: LayerShape) -> bool:
    return x.a_out_fp8


def _qk(x: LayerShape) -> str:
    """The query/key head width's symbol: k, or latent attention's d_h + d_h^R."""
    return "(d_h+d_h^R)" if x.kv_latent else "k"


def _v(x: LayerShape) -> str:
    """The value head width's symbol: k, or latent attention's v_head_dim."""
    return "d_v" if x.v else "k"


def _stats(x: LayerShape) -> str:
    return f"{x.norm_stats}·{x.tok}{x.rep}"


def _q(x: LayerShape) -> str:
    """The saved linear input's bytes per element: ε, or the recipe's bits/8 (+ block scales)."""
    if not x.q_bits:
        return _e(x)
    scales = f"(1 + {x.q_scale}/{x.q_block})" if x.q_block else ""
    return f"{x.q_bits / 8:g}{'·' + scales if scales else ''}"


def _mlp_input_formula(x: LayerShape) -> str:
    return f"{2 * x.e if x.gated and not x.unfused else x.e}·{x.tok}·f{x.split}"


def _latent_up(x: LayerShape) -> frozenset[RecomputeModule]:
    """Q, K and V under latent attention: the up projections' and RoPE's outputs, which
    mla_up_proj discards after the attention core and re-creates in backward (Megatron-Core
    multi_latent_attention.py: qkv_up_checkpoint.discard_output_and_register_recompute)."""
    return frozenset({"mla_up_proj"}) if x.kv_latent else frozenset()


def _latent_norm(x: LayerShape) -> frozenset[RecomputeModule]:
    """The input norm's output and statistics under latent attention, whose input norm is a
    module of its own (TENorm; with multi-head attention Transformer Engine fuses it into the
    QKV linear, IdentityOp, and layernorm recomputes nothing there: transformer_layer.py)."""
    return frozenset({"layernorm"}) if x.kv_latent else frozenset()


LINES: tuple[Line, ...] = (
    Line("attention norm input", norm_input, lambda x: f"{_e(x)}·{x.tok}·h{x.rep}", KORTHIKANTI),
    Line(
        "attention norm statistics (fp32)",
        norm_statistics,
        _stats,
        PYTORCH_NORM,
        recomputed_by=_latent_norm,
    ),
    Line(
        "QKV input",
        linear_input,
        lambda x: f"{_q(x)}·{x.tok}·h{x.rep}",
        KORTHIKANTI + "; FP8: " + FP8_INPUTS,
        quantized=_saved_quantized,
        recomputed_by=_latent_norm,
    ),
    Line(
        "query latent norm input (q_a output)",
        query_latent_norm_input,
        lambda x: f"{_e(x)}·{x.tok}·d_c'{x.rep}",
        MLA_SOURCE,
    ),
    Line("query latent (q_b input)", query_latent, lambda x: f"{_e(x)}·{x.tok}·d_c'{x.rep}", MLA_SOURCE),
    Line(
        "key/value latent norm input (kv_a output)",
        kv_latent_norm_input,
        lambda x: f"{_e(x)}·{x.tok}·(d_c+d_h^R){x.rep}",
        MLA_SOURCE,
    ),
    Line("key/value latent (kv_b input)", kv_latent, lambda x: f"{_e(x)}·{x.tok}·d_c{x.rep}", MLA_SOURCE),
    Line(
        "latent norm statistics (fp32)",
        latent_norm_statistics,
        lambda x: f"4·{'2' if x.q_latent else '1'}·{x.tok}{x.rep}",
        PYTORCH_NORM,
    ),
    Line(
        "Q (QKᵀ input)",
        query,
        lambda x: f"{_a(x)}·{x.tok}·n·{_qk(x)}{x.split}",
        KORTHIKANTI,
        recomputed_by=_latent_up,
        attention_fp8=_saves_fp8_qkv,
    ),
    Line(
        "K (QKᵀ input)",
        key,
        lambda x: f"{_a(x)}·{x.tok}·{'n' if x.eager else 'g'}·{_qk(x)}{x.split}",
        KORTHIKANTI + "; GQA: Ainslie et al. 2023",
        recomputed_by=_latent_up,
        attention_fp8=_saves_fp8_qkv,
    ),
    Line(
        "softmax output",
        softmax_output,
        lambda x: f"{_e(x)}·a·{'s²' if x.tok == 's·b' else '(s/c)·s'}·b{x.split}",
        KORTHIKANTI,
        core=True,
    ),
    Line(
        "attention dropout mask",
        softmax_dropout_mask,
        lambda x: f"a·{'s²' if x.tok == 's·b' else '(s/c)·s'}·b{x.split}",
        KORTHIKANTI,
        core=True,
    ),
    Line(
        "attention dropout output",
        softmax_dropout_output,
        lambda x: f"{_e(x)}·a·{'s²' if x.tok == 's·b' else '(s/c)·s'}·b{x.split}",
        KORTHIKANTI,
        core=True,
    ),
    Line(
        "V (attention-over-V input)",
        value,
        lambda x: f"{_a(x)}·{x.tok}·{'n' if x.eager else 'g'}·{_v(x)}{x.split}",
        KORTHIKANTI,
        recomputed_by=_latent_up,
        attention_fp8=_saves_fp8_qkv,
    ),
    Line(
        "flash softmax statistics (fp32)",
        softmax_statistics,
        lambda x: f"4·a·{x.tok}{x.split}",
        "Dao et al. 2022, FlashAttention §3.1 (log-sum-exp saved for backward)",
        core=True,
    ),
    Line(
        "out-projection input",
        attention_output,
        lambda x: f"{_q(x) if x.eager else ('1' if x.a_out_fp8 else _e(x))}·{x.tok}·n·{_v(x)}"
        f"{x.split}",
        KORTHIKANTI,
        quantized=_saved_quantized_eager,
        attention_fp8=_saves_fp8_o,
    ),
    Line(
        "out-projection input, quantized copy",
        attention_output_copy,
        lambda x: f"{_q(x)}·{x.tok}·n·{_v(x)}{x.split}",
        FP8_INPUTS + "; flash attention keeps its 16-bit O for backward (Dao 2023, Alg. 2)",
        quantized=_saved_quantized,
    ),
    Line(
        "attention residual dropout mask",
        residual_dropout_mask,
        lambda x: f"{x.tok}·h{x.rep}",
        KORTHIKANTI,
    ),
    Line("MLP norm input", norm_input, lambda x: f"{_e(x)}·{x.tok}·h{x.rep}", KORTHIKANTI),
    Line("MLP norm statistics (fp32)", norm_statistics, _stats, PYTORCH_NORM, moe_norm=True),
    Line(
        "fc1 input",
        linear_input,
        lambda x: f"{_q(x)}·{x.tok}·h{x.rep}",
        KORTHIKANTI + "; FP8: " + FP8_INPUTS,
        mlp=True,
        quantized=_saved_quantized,
        mlp_input=True,
    ),
    Line(
        "MLP activation input (fc1 output)",
        mlp_activation_input,
        _mlp_input_formula,
        KORTHIKANTI + "; SwiGLU: Megatron's fused bias_swiglu saves the fc1 output",
        mlp=True,
    ),
    Line(
        "SwiGLU up-projection output (unfused)",
        swiglu_up_output,
        lambda x: f"{_e(x)}·{x.tok}·f{x.split}",
        PYTORCH_SWIGLU,
        mlp=True,
    ),
    Line(
        "SiLU output (unfused)",
        silu_output,
        lambda x: f"{_e(x)}·{x.tok}·f{x.split}",
        PYTORCH_SWIGLU,
        mlp=True,
    ),
    Line(
        "fc2 input",
        mlp_output_input,
        lambda x: f"{_q(x)}·{x.tok}·f{x.split}",
        KORTHIKANTI + "; FP8: " + FP8_INPUTS,
        mlp=True,
        quantized=_saved_quantized,
    ),
    Line(
        "MLP residual dropout mask",
        residual_dropout_mask,
        lambda x: f"{x.tok}·h{x.rep}",
        KORTHIKANTI,
    ),
)

CHECKPOINT = Line(
    "layer input (full-recompute checkpoint)",
    layer_input,
    lambda x: f"{_e(x)}·{x.tok}·h{x.rep}",
    TABLE2 + " (full recompute: 2sbh)",
)


# torchtitan's per-op selective checkpointing (training.recompute: selective-op): the block's
# checkpoint keeps its input and the outputs its policy marks MUST_SAVE, every aten.mm's but
# every second one's and SDPA's (torchtitan parallelisms/parallelize_llama.py
# `_apply_ac_to_transformer_block`, commit 9dec370; planc.perf.sac for the order). In the Llama
# block: wq, wv, w1 and w2 of wq, wk, wv, wo, w1, w3, w2; a GeLU MLP's fc1 of wq, wk, wv, wo,
# fc1, fc2. Autograd's own saved tensors are dropped and re-created in backward.
TORCHTITAN_SAC = (
    "torchtitan parallelize_llama.py _apply_ac_to_transformer_block (9dec370): MUST_SAVE "
    "aten.mm outputs but every second one's, and SDPA's"
)


def sac_down_output(x: LayerShape) -> int:
    """ε·s·b·h: w2's output, the 7th aten.mm of a SwiGLU block, saved (odd); a GeLU MLP's fc2
    is the 6th, recomputed: 0. Before TP's reduce, so s/c tokens, not /t."""
    return x.e * x.s * x.b * x.h if x.gated else 0


def sac_up_output(x: LayerShape) -> int:
    """ε·s·b·f/t: w1's output (SwiGLU's gate, the 5th aten.mm) or a GeLU MLP's fc1 output, saved."""
    return x.e * x.s * x.b * x.f


def sac_attention_output(x: LayerShape) -> int:
    """SDPA's outputs, saved: O (ε·s·b·n·k/t) and the flash kernel's fp32 log-sum-exp
    (4·s·b·n/t; none for eager attention, whose matmuls are aten.bmm and recomputed)."""
    if x.eager:
        return 0
    return x.e * x.s * x.b * x.n * value_channels(x) + softmax_statistics(x)


SAC_LINES: tuple[Line, ...] = (
    Line(
        "layer input (checkpoint)",
        layer_input,
        lambda x: f"{_e(x)}·{x.tok}·h{x.rep}",
        TORCHTITAN_SAC,
    ),
    Line("wq output (saved matmul)", query, lambda x: f"{_e(x)}·{x.tok}·n·k{x.split}", TORCHTITAN_SAC),
    Line("wv output (saved matmul)", value, lambda x: f"{_e(x)}·{x.tok}·g·k{x.split}", TORCHTITAN_SAC),
    Line(
        "SDPA output and log-sum-exp (saved)",
        sac_attention_output,
        lambda x: f"({_e(x)}·k + 4)·{x.tok}·n{x.split}",
        TORCHTITAN_SAC,
    ),
    Line(
        "w1 output (saved matmul)",
        sac_up_output,
        lambda x: f"{_e(x)}·{x.tok}·f{x.split}",
        TORCHTITAN_SAC,
        mlp=True,
    ),
    Line(
        "w2 output (saved matmul)",
        sac_down_output,
        lambda x: f"{_e(x)}·{x.tok}·h",
        TORCHTITAN_SAC,
        mlp=True,
    ),
)


Modules = tuple[RecomputeModule, ...]


def line_modules(line: Line, x: LayerShape) -> frozenset[RecomputeModule]:
    """The modules of selective recompute (training.recompute_modules) that drop `line`:
    core_attn the attention core's tensors, mlp the dense MLP's, and those the line names
    (`Line.recomputed_by`: mla_up_proj, layernorm)."""
    named = line.recomputed_by(x) if line.recomputed_by is not None else frozenset()
    core: frozenset[RecomputeModule] = frozenset({"core_attn"}) if line.core else frozenset()
    inside = line.mlp and not (line.mlp_input and x.unfused)
    mlp: frozenset[RecomputeModule] = frozenset({"mlp"}) if inside else frozenset()
    return core | mlp | named


def _dropped(line: Line, x: LayerShape, modules: Modules) -> bool:
    """Whether selective recompute of `modules` drops `line` from what the layer keeps."""
    return not line_modules(line, x).isdisjoint(modules)


# What each recompute module re-creates, in words (the working set's label).
MODULE_WORDS: dict[RecomputeModule, str] = {
    "core_attn": "attention core",
    "mla_up_proj": "latent up projections",
    "layernorm": "own norms",
    "mlp": "MLP",
    "moe_act": "expert activations",
    "moe": "MoE block",
    "shared_experts": "shared experts",
}


def module_words(modules: Modules) -> str:
    """`modules` in words: "attention core", "attention core and MLP", "a, b and c"."""
    words = [MODULE_WORDS[module] for module in modules]
    if len(words) < 2:
        return words[0] if words else "nothing"
    return f"{', '.join(words[:-1])} and {words[-1]}"


def kept_lines(
    x: LayerShape, recompute: str, modules: Modules = DEFAULT_RECOMPUTE_MODULES
) -> tuple[Line, ...]:
    """The tensors one layer keeps between its forward and its backward under `recompute`
    (selective: of `modules`, Megatron's --recompute-modules, default core_attn)."""
    if recompute == "full":
        return (CHECKPOINT,)
    if recompute == "selective-op":
        return SAC_LINES
    if recompute == "selective":
        return tuple(line for line in LINES if not _dropped(line, x, modules))
    return LINES


def layer_terms(
    x: LayerShape, recompute: str = "none", modules: Modules = DEFAULT_RECOMPUTE_MODULES
) -> tuple[Term, ...]:
    """Per-layer, per-micro-batch activation terms (zero-byte lines left out)."""
    return tuple(
        Term(line.title(x), "activations", line.size(x), line.formula(x), line.source)
        for line in kept_lines(x, recompute, modules)
        if line.size(x)
    )


def layer_bytes(
    x: LayerShape, recompute: str = "none", modules: Modules = DEFAULT_RECOMPUTE_MODULES
) -> int:
    """Bytes one layer keeps for one micro-batch: Korthikanti Table 2 generalised."""
    return sum(term.bytes for term in layer_terms(x, recompute, modules))


def recompute_working_set(
    x: LayerShape, recompute: str, modules: Modules = DEFAULT_RECOMPUTE_MODULES
) -> int:
    """Activations re-created during one layer's backward on top of the kept ones (once per rank):
    full recompute rebuilds one whole layer, and so does torchtitan's per-op policy (its backward
    re-runs the block's forward, autograd saving as without recompute); selective rebuilds what
    its modules dropped of one layer (all of them at once, an upper bound: Megatron frees each
    module's after its backward)."""
    if recompute in ("full", "selective-op"):
        return sum(line.size(x) for line in LINES)
    if recompute == "selective":
        return sum(line.size(x) for line in LINES if _dropped(line, x, modules))
    return 0


# --- mixture-of-experts layers -----------------------------------------------------------------
#
# A MoE layer keeps the attention side of a dense layer (every line above but the dense MLP's)
# and, instead of the dense MLP, what Megatron-Core's MoELayer saves for backward with the
# alltoall dispatcher (moe_layer.py, router.py, moe_utils.py, token_dispatcher.py, experts.py
# TEGroupedMLP): the router's scores, top-k indices and probabilities, the permutation's
# indices and routing map, each local expert's GEMM inputs and activation input over the rows
# it receives, the probabilities its weighted activation keeps, and the shared experts as a
# dense MLP. Rows: T tokens enter the layer on this rank (⌈s/c⌉·b, /t with sequence
# parallelism, which Megatron requires with TP for MoE); the router sends S rows (T·topk dropless,
# E·C with a capacity of C = ⌈T·topk/E·CF⌉ per expert, get_capacity) and the rank's E/EP experts
# receive R rows from the EP group, gathered over ETP: T·topk·ETP·α dropless (α =
# training.expert_imbalance), E·C·ETP with a capacity (exact when padded to capacity, an upper
# bound when not).

MEGATRON_MOE = "Megatron-Core transformer/moe"
MEGATRON_FUSIONS = "Megatron-Core fusions"
MOE_ROUTER = (
    f"{MEGATRON_MOE}/router.py TopKRouter and moe_utils.py topk_routing_with_score_function "
    "(top-k indices, fp32 softmax over the top-k; fp32 scores over all E for the load-balancing "
    "loss, compute_routing_scores_for_aux_loss, or the sigmoid scores)"
)
MOE_PERMUTE = (
    f"{MEGATRON_MOE}/moe_utils.py permute (index_select saves sorted_indices; the probs' "
    "masked_select saves its T×E input and the routing map) and unpermute (scatter_add on the "
    "same indices)"
)
MOE_EXPERTS = (
    f"{MEGATRON_MOE}/experts.py TEGroupedMLP (fc1 and fc2 save their inputs; the weighted "
    "SwiGLU, fused_bias_swiglu.weighted_bias_swiglu_impl, saves the fc1 output and the probs)"
)
MOE_SHARED = f"{MEGATRON_MOE}/shared_experts.py SharedExpertMLP (a dense MLP of E_s·f_s over t)"
MOE_DISPATCHER = (
    f"{MEGATRON_MOE}/token_dispatcher.py MoEAlltoAllTokenDispatcher (permute, A2A(EP), "
    "AG(ETP), sort_chunks; sort_chunks, RS(ETP), A2A(EP), unpermute)"
)
PROBABILITY_BYTES = 4  # the router's fp32 scores and top-k softmax
MASK_BYTES = 1  # the bool routing map


@record
class ExpertShape:
    """What one rank sees of one MoE layer for one micro-batch."""

    e: int  # bytes per activation element (ε)
    tokens: int  # T: tokens entering the layer on this rank
    shared_tokens: int  # tokens the shared experts' f-sized tensors cover: ⌈s/c⌉·b (split over t)
    h: int
    E: int
    k: int
    sent: int  # S: rows this rank's router sends to the experts
    rows: int  # R: rows this rank's local experts receive
    f_e: int  # ⌈f_e/ETP⌉
    f_s: int  # ⌈E_s·f_s/t⌉, 0 without shared experts
    gated: bool
    unfused: bool
    exchanged: bool  # EP·ETP > 1: the rows travel (all-to-all, all-gather)
    capacity: bool  # a capacity factor bounds the rows
    # symbols for formulas
    tok: str  # "T"
    rows_formula: str  # R in symbols
    # A recipe that saves the GEMM inputs quantized (as LayerShape's q_* fields; 0: ε bytes).
    q_bits: int = 0
    q_block: int = 0
    q_scale: int = 0
    q_label: str = ""
    clamped: bool = False  # Megatron-Core clamps fc1's output in eager PyTorch (a clamped GLU)


def _expert_input(y: ExpertShape, elements: int) -> int:
    """A saved expert GEMM input: ε bytes per element, or quantized (TE GroupedLinear saves
    its inputs quantized as Linear does)."""
    if not y.q_bits:
        return y.e * elements
    return quantized_bytes(elements, y.q_bits, y.q_block, y.q_scale)


def _qy(y: ExpertShape) -> str:
    """A saved expert GEMM input's bytes per element, for formulas."""
    if not y.q_bits:
        return str(y.e)
    scales = f"·(1 + {y.q_scale}/{y.q_block})" if y.q_block else ""
    return f"{y.q_bits / 8:g}{scales}"


def expert_shape(job: Plannable) -> ExpertShape:
    """The MoE-layer shape of `job` on any rank (every rank of a MoE job routes the same T)."""
    moe, lay, x, y = job.model.moe, job.layout, shape_of(job), job.dims.experts
    if moe is None or y is None:
        raise ValueError("the model has no experts")
    alpha = job.training.expert_imbalance
    if moe.capacity_factor is not None:
        rows_formula = "E·⌈T·topk/E·CF⌉" + ("·ETP" if lay.et > 1 else "")
    else:
        rows_formula = (
            "T·topk" + ("·ETP" if lay.et > 1 else "") + (f"·{alpha:g}" if alpha != 1 else "")
        )
    return ExpertShape(
        e=x.e,
        tokens=y.tokens,
        shared_tokens=x.s * x.b,
        h=x.h,
        E=y.E,
        k=y.topk,
        sent=y.sent,
        rows=y.received,
        f_e=y.f_e,
        f_s=y.f_s,
        gated=x.gated,
        unfused=x.unfused,
        exchanged=y.exchanged,
        capacity=y.capacity,
        tok="T",
        rows_formula=rows_formula,
        q_bits=x.q_bits,
        q_block=x.q_block,
        q_scale=x.q_scale,
        q_label=x.q_label,
        clamped=job.dims.eager.glu_clamp,
    )


def moe_input(y: ExpertShape) -> int:
    """ε·T·h: the MLP norm's output, which the router's gating linear, the dispatcher's permute
    and the shared experts' fc1 all take (one tensor, kept once); the dense layer's fc1 input."""
    return y.e * y.tokens * y.h


def router_scores(y: ExpertShape) -> int:
    """4·T·E: the router's fp32 scores over all E experts, kept for the load-balancing loss
    (softmax, compute_routing_scores_for_aux_loss) or for the sigmoid score function."""
    return PROBABILITY_BYTES * y.tokens * y.E


def router_indices(y: ExpertShape) -> int:
    """8·T·topk: the int64 top-k expert indices, which the gather of the top-k logits and the
    scatter into the T×E routing probabilities keep."""
    return INDEX_BYTES * y.tokens * y.k


def router_probabilities(y: ExpertShape) -> int:
    """4·T·topk: the fp32 softmax over each token's top-k logits, kept by its backward."""
    return PROBABILITY_BYTES * y.tokens * y.k


def routing_map(y: ExpertShape) -> int:
    """T·E: the bool routing map (E×T), which the permutation's masked_select of the
    probabilities keeps."""
    return MASK_BYTES * y.tokens * y.E


def dense_probabilities(y: ExpertShape) -> int:
    """ε·T·E: the routing probabilities scattered to T×E (transposed, in the logits' dtype),
    which the permutation's masked_select keeps as its input for the backward."""
    return y.e * y.tokens * y.E


def permutation_indices(y: ExpertShape) -> int:
    """8·S: the int64 sorted token indices of the S rows sent, kept by the permute's
    index_select and the unpermute's scatter_add."""
    return INDEX_BYTES * y.sent


def expert_fc1_input(y: ExpertShape) -> int:
    """ε·R·h: the rows this rank's experts received, sorted by expert, input of their fc1."""
    return _expert_input(y, y.rows * y.h)


def expert_activation_input(y: ExpertShape) -> int:
    """ε·R·f_e/ETP per gated half: the experts' fc1 output (2·ε·R·f_e/ETP for SwiGLU, which the
    fused weighted SwiGLU keeps whole); unfused, the gate projection's output, silu's input."""
    return (2 if y.gated and not y.unfused else 1) * y.e * y.rows * y.f_e


def expert_clamped_input(y: ExpertShape) -> int:
    """2·ε·R·f_e/ETP: a clamped GLU's clamped and re-concatenated copy of the fc1 output, which
    the fused activation keeps while the clamps keep fc1's output for their own backward
    (`planc.dims.EagerPaths.glu_clamp`); 0 without the clamp."""
    return 2 * y.e * y.rows * y.f_e if y.clamped else 0


def expert_up_output(y: ExpertShape) -> int:
    """ε·R·f_e/ETP: the up projection's output, kept by silu(a)·b. Unfused SwiGLU only."""
    return y.e * y.rows * y.f_e if y.gated and y.unfused else 0


def expert_silu_output(y: ExpertShape) -> int:
    """ε·R·f_e/ETP: the SiLU output, kept by silu(a)·b. Unfused SwiGLU only."""
    return y.e * y.rows * y.f_e if y.gated and y.unfused else 0


def expert_weighted_input(y: ExpertShape) -> int:
    """ε·R·f_e/ETP: the activation's output before it is scaled by the routing probability,
    kept by that multiply (experts.py bias_act_func: activation(x) * permuted_probs). Not with
    the fused weighted SwiGLU, which scales inside the kernel and keeps only its input."""
    return 0 if y.gated and not y.unfused else y.e * y.rows * y.f_e


def expert_probabilities(y: ExpertShape) -> int:
    """ε·R: each received row's routing probability (in the logits' dtype), kept by the
    weighted activation for the probabilities' gradient."""
    return y.e * y.rows


def expert_fc2_input(y: ExpertShape) -> int:
    """ε·R·f_e/ETP: the weighted activation's output, input of the experts' fc2."""
    return _expert_input(y, y.rows * y.f_e)


def shared_activation_input(y: ExpertShape) -> int:
    """ε·s·b·E_s·f_s/t per gated half: the shared experts' fc1 output (as a dense MLP)."""
    return (2 if y.gated and not y.unfused else 1) * y.e * y.shared_tokens * y.f_s


def shared_up_output(y: ExpertShape) -> int:
    """ε·s·b·E_s·f_s/t: the shared experts' up projection's output. Unfused SwiGLU only."""
    return y.e * y.shared_tokens * y.f_s if y.gated and y.unfused else 0


def shared_silu_output(y: ExpertShape) -> int:
    """ε·s·b·E_s·f_s/t: the shared experts' SiLU output. Unfused SwiGLU only."""
    return y.e * y.shared_tokens * y.f_s if y.gated and y.unfused else 0


def shared_fc2_input(y: ExpertShape) -> int:
    """ε·s·b·E_s·f_s/t: the shared experts' fc2 input."""
    return _expert_input(y, y.shared_tokens * y.f_s)


@record
class MoELine:
    """One tensor a MoE layer saves: its name, size function, formula and source."""

    name: str
    size: Callable[[ExpertShape], int]
    formula: Callable[[ExpertShape], str]
    source: str
    quantized: bool = False  # a GEMM input an FP8 recipe saves quantized
    # the recompute modules that drop it: moe (the whole block) for all but its input, and
    # moe_act, shared_experts or layernorm for their own parts (`moe_layer_terms`)
    modules: frozenset[RecomputeModule] = frozenset({"moe"})

    def title(self, y: ExpertShape) -> str:
        """The line's name, with the format it is saved in when quantized."""
        return f"{self.name} ({y.q_label})" if self.quantized and y.q_bits else self.name


def _gate(y: ExpertShape) -> str:
    return str(2 * y.e if y.gated and not y.unfused else y.e)


MOE_LINES: tuple[MoELine, ...] = (
    MoELine(
        "MoE input (router, dispatch)",
        moe_input,
        lambda y: f"{y.e}·T·h",
        MOE_PERMUTE,
        modules=frozenset({"layernorm"}),
    ),
    MoELine("router scores (fp32)", router_scores, lambda y: "4·T·E", MOE_ROUTER),
    MoELine("router top-k indices (int64)", router_indices, lambda y: "8·T·topk", MOE_ROUTER),
    MoELine(
        "router top-k probabilities (fp32)", router_probabilities, lambda y: "4·T·topk", MOE_ROUTER
    ),
    MoELine("routing map (bool)", routing_map, lambda y: "T·E", MOE_PERMUTE),
    MoELine(
        "routing probabilities (T×E)", dense_probabilities, lambda y: f"{y.e}·T·E", MOE_PERMUTE
    ),
    MoELine(
        "permutation indices (int64)",
        permutation_indices,
        lambda y: "8·E·⌈T·topk/E·CF⌉" if y.capacity else "8·T·topk",
        MOE_PERMUTE,
    ),
    MoELine(
        "expert fc1 input (received rows)",
        expert_fc1_input,
        lambda y: f"{_qy(y)}·R·h (R = {y.rows_formula})",
        MOE_EXPERTS + "; " + MOE_DISPATCHER,
        quantized=True,
    ),
    MoELine(
        "expert activation input (fc1 output)",
        expert_activation_input,
        lambda y: f"{_gate(y)}·R·f_e/ETP",
        MOE_EXPERTS,
    ),
    MoELine(
        "expert clamped activation input (clamped GLU)",
        expert_clamped_input,
        lambda y: f"2·{y.e}·R·f_e/ETP",
        f"{MEGATRON_FUSIONS}/fused_bias_geglu.py weighted_bias_quick_geglu_impl (the clamps keep "
        "fc1's output, WeightedQuickGeGLUFunction the clamped copy)",
        modules=frozenset({"moe", "moe_act"}),
    ),
    MoELine(
        "expert up-projection output (unfused)",
        expert_up_output,
        lambda y: f"{y.e}·R·f_e/ETP",
        PYTORCH_SWIGLU,
    ),
    MoELine(
        "expert SiLU output (unfused)",
        expert_silu_output,
        lambda y: f"{y.e}·R·f_e/ETP",
        PYTORCH_SWIGLU,
        modules=frozenset({"moe", "moe_act"}),
    ),
    MoELine(
        "expert activation output (before the probability)",
        expert_weighted_input,
        lambda y: f"{y.e}·R·f_e/ETP",
        MOE_EXPERTS + " bias_act_func",
        modules=frozenset({"moe", "moe_act"}),
    ),
    MoELine(
        "expert routing probabilities", expert_probabilities, lambda y: f"{y.e}·R", MOE_EXPERTS
    ),
    MoELine(
        "expert fc2 input",
        expert_fc2_input,
        lambda y: f"{_qy(y)}·R·f_e/ETP",
        MOE_EXPERTS,
        quantized=True,
        modules=frozenset({"moe", "moe_act"}),
    ),
    MoELine(
        "shared-expert activation input (fc1 output)",
        shared_activation_input,
        lambda y: f"{_gate(y)}·s·b·E_s·f_s/t",
        MOE_SHARED,
        modules=frozenset({"moe", "shared_experts"}),
    ),
    MoELine(
        "shared-expert up-projection output (unfused)",
        shared_up_output,
        lambda y: f"{y.e}·s·b·E_s·f_s/t",
        PYTORCH_SWIGLU,
        modules=frozenset({"moe", "shared_experts"}),
    ),
    MoELine(
        "shared-expert SiLU output (unfused)",
        shared_silu_output,
        lambda y: f"{y.e}·s·b·E_s·f_s/t",
        PYTORCH_SWIGLU,
        modules=frozenset({"moe", "shared_experts"}),
    ),
    MoELine(
        "shared-expert fc2 input",
        shared_fc2_input,
        lambda y: f"{_qy(y)}·s·b·E_s·f_s/t",
        MOE_SHARED,
        quantized=True,
        modules=frozenset({"moe", "shared_experts"}),
    ),
)


def moe_layer_terms(
    x: LayerShape,
    y: ExpertShape,
    recompute: str = "none",
    modules: Modules = DEFAULT_RECOMPUTE_MODULES,
) -> tuple[Term, ...]:
    """Per-MoE-layer, per-micro-batch activation terms: the attention side of `layer_terms`
    (and the MLP norm and residual dropout, which a MoE layer keeps too), then the MoE lines.

    Recompute: selective keeps what its modules do not drop (`moe_kept`): the default core_attn
    keeps every MoE tensor; moe keeps the block's input only, moe_act drops the experts'
    activation outputs, shared_experts the shared experts' tensors, layernorm the pre-MLP norm's
    output (the MoE input) and statistics, its own module in a MoE layer. Full keeps only the
    layer's input, as for a dense layer.
    """
    if recompute == "full":
        return layer_terms(x, recompute)
    terms = [
        Term(line.name, "activations", line.size(x), line.formula(x), line.source)
        for line in moe_attention_side(x, recompute, modules)
    ]
    terms += [
        Term(line.title(y), "activations", line.size(y), line.formula(y), line.source)
        for line in moe_kept(recompute, modules)
    ]
    return tuple(term for term in terms if term.bytes)


def _layernorm_recomputed(recompute: str, modules: Modules) -> bool:
    return recompute == "selective" and "layernorm" in modules


def moe_attention_side(x: LayerShape, recompute: str, modules: Modules) -> tuple[Line, ...]:
    """The dense-layer lines a MoE layer keeps: all but the dense MLP's, and, when layernorm is
    recomputed, not the pre-MLP norm's statistics (a module of its own before the router)."""
    drop_norm = _layernorm_recomputed(recompute, modules)
    return tuple(
        line
        for line in kept_lines(x, recompute, modules)
        if not line.mlp and not (drop_norm and line.moe_norm)
    )


def moe_kept(recompute: str, modules: Modules) -> tuple[MoELine, ...]:
    """The MoE lines kept under `recompute` (not full): those no recomputed module drops."""
    if recompute != "selective":
        return MOE_LINES
    return tuple(line for line in MOE_LINES if line.modules.isdisjoint(modules))


def moe_layer_bytes(
    x: LayerShape,
    y: ExpertShape,
    recompute: str = "none",
    modules: Modules = DEFAULT_RECOMPUTE_MODULES,
) -> int:
    """Bytes one MoE layer keeps for one micro-batch."""
    return sum(term.bytes for term in moe_layer_terms(x, y, recompute, modules))


def moe_working_set(x: LayerShape, y: ExpertShape, recompute: str, modules: Modules) -> int:
    """What one MoE layer's backward re-creates under selective recompute: the attention side's
    dropped lines and the dropped MoE lines (`recompute_working_set`, for a MoE layer)."""
    if recompute != "selective":
        return recompute_working_set(x, recompute, modules)
    kept = moe_kept(recompute, modules)
    side = moe_attention_side(x, recompute, modules)
    attention = sum(
        line.size(x) for line in LINES if not line.mlp and line not in side
    )
    return attention + sum(line.size(y) for line in MOE_LINES if line not in kept)


def dispatch_buffers(y: ExpertShape) -> int:
    """ε·h·(S + R): the dispatcher's rows in flight during one MoE layer, beyond what the layer
    keeps: the permuted tokens the all-to-all sends (S rows) and the rows it receives (R/ETP,
    then R after the all-gather over ETP, which sort_chunks copies into the experts' fc1 input);
    on the way back the experts' output (R rows, reduce-scattered over ETP) and the all-to-all's
    output (S rows) before the unpermute. At most S + R rows are alive at once. With EP·ETP = 1
    nothing travels: only the S permuted rows before sort_chunks copies them."""
    return y.e * y.h * (y.sent + (y.rows if y.exchanged else 0))


# --- stage ends --------------------------------------------------------------------------------


def token_ids(x: LayerShape) -> int:
    """8·s·b: the int64 token ids the embedding lookup keeps for its backward (Megatron's
    theoretical_memory_usage.py adds 8·s·b·p for the first stage)."""
    return INDEX_BYTES * x.s * x.b


def position_ids(x: LayerShape) -> int:
    """8·s: the int64 position ids of a learned position embedding. Megatron builds them as
    arange(s) expanded to [b, s] (training/utils.py get_ltor_masks_and_position_ids), a view of
    s ids, which the embedding's backward keeps."""
    return INDEX_BYTES * x.s


def embedding_dropout_mask(x: LayerShape) -> int:
    """s·b·h: the embedding dropout mask, 1 byte each (Korthikanti §4.2: sbh·p on the first
    stage); /t with SP, where Megatron scatters the embedding output before its dropout."""
    return DROPOUT_MASK_BYTES * x.s_r * x.b * x.h if x.dropout else 0


def first_stage_terms(x: LayerShape, learned_positions: bool) -> tuple[Term, ...]:
    """What the first stage keeps per micro-batch besides its layers.

    The embedding's output is the first layer's norm input (or its full-recompute checkpoint),
    already counted with the layer, so it is not added again.
    """
    source = "Megatron-LM theoretical_memory_usage.py (8·s·b token ids); " + KORTHIKANTI
    terms = [
        Term("embedding token ids (int64)", "activations", token_ids(x), f"8·{x.tok}", source),
        Term(
            "embedding dropout mask",
            "activations",
            embedding_dropout_mask(x),
            f"{x.tok}·h{x.rep}",
            "Korthikanti et al. 2022 §4.2",
        ),
    ]
    if learned_positions:
        terms.append(
            Term(
                "position ids (int64)",
                "activations",
                position_ids(x),
                "8·(s/c)" if "/c" in x.tok else "8·s",
                "Megatron-LM training/utils.py get_ltor_masks_and_position_ids (arange(s) expanded)",
            )
        )
    return tuple(term for term in terms if term.bytes)


def logits_elements(x: LayerShape, V: int, t: int) -> int:
    """s·b·V'/t: this rank's slice of the logits over the padded vocabulary."""
    return x.s * x.b * (padded_vocab(V, t) // t)


CROSS_ENTROPY = (
    "Megatron-LM tensor_parallel/cross_entropy.py: _VocabParallelCrossEntropy saves the fp32 "
    "softmax (exp_logits), target_mask and masked_target_1d; the loss runs on logits.float()"
)


TE_CROSS_ENTROPY = (
    "Transformer Engine transformer_engine/pytorch/cross_entropy.py (v2.2): CrossEntropyFunction "
    "writes the logits' gradient over the 16-bit logits in forward and saves that tensor alone"
)


PYTORCH_CROSS_ENTROPY = (
    "PyTorch F.cross_entropy = log_softmax + nll_loss (derivatives.yaml: _log_softmax saves its "
    "fp32 result, nll_loss its int64 target and a scalar total_weight), on logits.float()"
)


PYTORCH_LOSS_BACKWARD = (
    "torchtitan 9dec370 train.py loss_fn (F.cross_entropy(pred.flatten(0, 1).float(), ...), "
    "compile left off, `del pred` before backward); PyTorch nll_loss_backward and "
    "_log_softmax_backward_data (new fp32 tensors); loss parallel: torch/distributed/tensor/"
    "parallel/loss.py _nll_loss_and_log_softmax_backward, (grad_input + exp(x)) * grad_output"
)


def cross_entropy_terms(x: LayerShape, V: int, t: int) -> tuple[Term, ...]:
    """The loss's saved tensors: Megatron's _VocabParallelCrossEntropy keeps the fp32 softmax
    (4·s·b·V'/t) and its int64 target index and bool target mask (9·s·b); unfused, PyTorch's
    F.cross_entropy keeps the fp32 log-softmax (4·s·b·V'/t) and the int64 targets (8·s·b);
    Megatron-Core's fused loss (native) saves what the eager one does; Transformer Engine's
    (te) keeps only the logits, overwritten by their gradient (ε·s·b·V'/t). torchtitan's loss is
    PyTorch's whatever its kernels (`torch_loss`)."""
    if x.loss == "te":
        return (
            Term(
                f"cross-entropy logits and their gradient ({x.e * 8}-bit, in place)",
                "activations",
                x.e * logits_elements(x, V, t),
                f"{x.e}·{x.tok}·V'/t",
                TE_CROSS_ENTROPY,
            ),
        )
    if x.unfused or x.torch_loss:
        return (
            Term(
                "cross-entropy log-softmax (fp32)",
                "activations",
                4 * logits_elements(x, V, t),
                f"4·{x.tok}·V'/t",
                PYTORCH_CROSS_ENTROPY,
            ),
            Term(
                "cross-entropy targets (int64)",
                "activations",
                INDEX_BYTES * x.s * x.b,
                f"8·{x.tok}",
                PYTORCH_CROSS_ENTROPY,
            ),
        )
    return (
        Term(
            "cross-entropy softmax (fp32)",
            "activations",
            4 * logits_elements(x, V, t),
            f"4·{x.tok}·V'/t",
            CROSS_ENTROPY,
        ),
        Term(
            "cross-entropy targets (int64 + bool)",
            "activations",
            (INDEX_BYTES + 1) * x.s * x.b,
            f"9·{x.tok}",
            CROSS_ENTROPY,
        ),
    )


def last_stage_terms(x: LayerShape, V: int, t: int) -> tuple[Term, ...]:
    """What the last stage keeps per micro-batch besides its layers: the final norm's input (and
    its statistics, unfused), the LM head's input (its sequence-parallel shard under SP:
    Megatron's linear re-gathers it in backward) and the loss's tensors (`cross_entropy_terms`).
    The 16-bit logits are not kept (see `logits_buffer`)."""
    terms = (
        Term(
            "final norm input", "activations", norm_input(x), f"{x.e}·{x.tok}·h{x.rep}", KORTHIKANTI
        ),
        Term(
            "final norm statistics (fp32)",
            "activations",
            norm_statistics(x),
            _stats(x),
            PYTORCH_NORM,
        ),
        Term(
            "LM head input",
            "activations",
            head_input(x),
            f"{_q(x) if x.head_q else x.e}·{x.tok}·h{x.rep}",
            TE_HEAD_INPUT if x.head_q else KORTHIKANTI,
        ),
        *cross_entropy_terms(x, V, t),
    )
    return tuple(term for term in terms if term.bytes)


def head_input(x: LayerShape) -> int:
    """ε·s·b·h: the LM head's saved input (/t with SP), 16-bit under every recipe: Megatron's
    output layer is its own ColumnParallelLinear, outside Transformer Engine's FP8 autocast;
    in the recipe's format where Megatron-Core's fp8_output_proj makes it a Transformer Engine
    linear (`head_q`), which saves its input quantized as any other."""
    elements = x.s_r * x.b * x.h
    return quantized_input(x, elements) if x.head_q else x.e * elements


def mtp_terms(x: LayerShape, V: int, t: int, modules: int) -> tuple[Term, ...]:
    """What `modules` multi-token prediction modules keep per micro-batch besides their layers
    (Megatron-Core MultiTokenPredictionLayer, d98e8a64): enorm's input, the embedding of the
    shifted tokens; eh_proj's input, the [rows, 2h] concatenation of the two normed inputs
    (quantized where the recipe saves linear inputs so: the module runs in the FP8 context);
    then a final norm, the shared head and a loss as the model's own (`last_stage_terms`).
    hnorm's input is the hidden state the final norm (or the previous module) already keeps."""
    if not modules:
        return ()
    own = (
        Term("MTP enorm input", "activations", norm_input(x), f"{x.e}·{x.tok}·h{x.rep}", MTP),
        Term(
            "MTP eh_proj input",
            "activations",
            quantized_input(x, 2 * x.s_r * x.b * x.h),
            f"{_q(x)}·{x.tok}·2h{x.rep}",
            MTP,
        ),
        *(replace(term, name=f"MTP {term.name}") for term in last_stage_terms(x, V, t)),
    )
    return tuple(
        Term(term.name, term.component, term.bytes * modules, _times(term.formula, modules), term.source)
        for term in own
        if term.bytes
    )


def _times(formula: str, count: int) -> str:
    """`formula` × `count` when there is more than one."""
    return formula if count == 1 else f"{count} × {formula}"


def logits_buffer(x: LayerShape, V: int, t: int) -> int:
    """The loss's transient beside its saved tensors at the last stage's peak, bytes:

    - Megatron: ε·s·b·V'/t, the 16-bit logits, alive until logits.float() has copied them (the
      eager loss computes its softmax in place in that copy, the fused ones alike). In fp32 the
      copy is the same tensor: 0; under Transformer Engine's loss the logits are the saved
      tensor (`cross_entropy_terms`): 0.
    - torchtitan (`torch_loss`: F.cross_entropy(pred.float(), labels), eager, its logits freed
      by `del pred` before backward): 8·s·b·V'/t beside the saved fp32 log-softmax, whose
      backward runs nll_loss_backward (a dense fp32 gradient) and _log_softmax_backward_data (a
      new fp32 result) while it is alive; the forward's 16-bit logits and fp32 copy take less,
      (ε + 4)·s·b·V'/t. Under loss parallel (t > 1, DTensor's loss.py) 12·s·b·V'/t: its fused
      backward `(zeros_like(x) + exp(x)) * grad` holds three fp32 tensors beside the saved one;
      its forward, the 16-bit logits and the fp32 copy, shift and exp (ε + 8 beyond the saved
      tensor, which does not exist yet) take less."""
    if x.torch_loss:
        return (12 if x.loss_parallel else 8) * logits_elements(x, V, t)
    if x.e == 4 or x.loss == "te":
        return 0
    return x.e * logits_elements(x, V, t)


# --- one rank's activation terms ---------------------------------------------------------------


def _scaled(term: Term, count: int, what: str) -> Term:
    """`term` × `count` (a number of micro-batches or layer-micro-batches held at the peak)."""
    label = f"{count} {what}{'' if count == 1 else 'es'} in flight"
    return Term(
        term.name, term.component, term.bytes * count, f"{term.formula} × {label}", term.source
    )


def _working_set(
    x: LayerShape, y: ExpertShape | None, recompute: str, modules: Modules, dense: bool
) -> int:
    """The recompute working set of the rank's layers: the largest re-created layer (full) or
    what selective recompute's modules drop of one layer; a MoE layer re-creates its whole MoE
    side under full."""
    work = recompute_working_set(x, recompute, modules) if dense else 0
    if y is not None and recompute == "full":
        work = max(work, moe_layer_bytes(x, y, "none"))
    elif y is not None:
        work = max(work, moe_working_set(x, y, recompute, modules))
    return work


def _bf16_per_layer(
    job: Plannable, x: LayerShape, recompute: str, modules: Modules
) -> tuple[int, int]:
    """What one dense and one MoE layer-micro-batch of the first and last layers in BF16
    (training.fp8.first_last_bf16) keep above their quantized lines: they save their linear
    inputs, and the attention core its Q, K, V and O, at ε bytes."""
    whole = replace(x, q_bits=0, a_usages=0, a_out_fp8=False)
    lines = [line for line in kept_lines(x, recompute, modules) if _low_precision(line, x)]
    dense = sum(line.size(whole) - line.size(x) for line in lines)
    routed = sum(line.size(whole) - line.size(x) for line in lines if not line.mlp)
    if job.model.moe is not None and recompute != "full":
        y = expert_shape(job)
        y16 = replace(y, q_bits=0)
        routed += sum(
            m.size(y16) - m.size(y) for m in moe_kept(recompute, modules) if m.quantized
        )
    return dense, routed


def _low_precision(line: Line, x: LayerShape) -> bool:
    """A line an FP8 recipe saves below ε bytes: a quantized linear input or an FP8
    attention's tensor."""
    return line.is_quantized(x) or (line.attention_fp8 is not None and line.attention_fp8(x))


ACTIVATION_OFFLOAD = (
    "Megatron-Core --cpu-offloading-num-layers N (transformer_block.py get_cpu_offload_context): "
    "Transformer Engine 2.14's DefaultOffloadSynchronizer (pytorch/cpu_offload.py) copies layers "
    "0 … N − 1 to pinned host buffers, so the saved activations in HBM are (L − N)·T"
)

BF16_LINE = (
    "BF16 first/last layers' linear inputs, above their quantized size",
    "Megatron --first-last-layers-bf16 (transformer_config.py first_last_layers_bf16): "
    "those layers run outside the FP8 autocast (their attention core too, under FP8 attention)",
)


@record
class StageLines:
    """What a pipeline rank keeps at its activation peak before counting what it holds in
    flight: each line per unit held (a layer-micro-batch, a MoE layer-micro-batch, a
    micro-batch of its first or last chunk) and what it keeps once. It reads the stage only as
    its class (`planc.stages`); `StageActivations` counts it for the micro-batches in flight on
    each chunk."""

    layer: tuple[tuple[Term, bool], ...]  # one layer's lines, each with whether only dense keep it
    moe: tuple[Term, ...]  # one MoE layer's expert side (none under full recompute)
    stem: tuple[Term, ...]  # one micro-batch on the first chunk (the first stage)
    head: tuple[Term, ...]  # one micro-batch on the last chunk (the LM head's stage)
    layers: tuple[tuple[int, int], ...]  # each chunk's (dense, MoE) layers
    bf16: tuple[tuple[int, int], ...]  # each chunk's (dense, MoE) layers kept in BF16
    bf16_bytes: tuple[int, int]  # above quantized per (dense, MoE) BF16 layer-micro-batch
    weights: tuple[int, ...]  # each chunk's bytes of one micro-batch (what `in_flight` weighs)
    # what it keeps once: the recompute working set, Megatron's deferred LM-head buffers
    once: tuple[Term, ...]
    # The transient buffers (`buffers`), in three parts: the MoE dispatcher's, the
    # context-parallel exchange's (the same on every stage, `exchange_buffers`) and the LM
    # head's logits.
    dispatch: tuple[Term, ...]
    exchange: tuple[Term, ...]
    logits: tuple[Term, ...]
    # (dense, MoE, BF16 dense, BF16 MoE) layers of the first chunk whose saved activations are
    # in host memory per micro-batch held (`offloaded_layers`): out of the counts, in `host`
    offloaded: tuple[int, int, int, int] = (0, 0, 0, 0)

    @property
    def buffers(self) -> tuple[Term, ...]:
        """The transient buffers, in the order `planc memory` lists them."""
        return (*self.dispatch, *self.exchange, *self.logits)

    def counts(self, held: tuple[int, ...]) -> tuple[int, int, int, int]:
        """(dense, MoE, BF16 dense, BF16 MoE) layer-micro-batches held in HBM: each chunk's
        layers of each kind × the micro-batches in flight on it, less the offloaded ones."""
        dense = moe = bf16_dense = bf16_moe = 0
        for (d, e), (kd, ke), n in zip(self.layers, self.bf16, held, strict=True):
            dense, moe = dense + d * n, moe + e * n
            bf16_dense, bf16_moe = bf16_dense + kd * n, bf16_moe + ke * n
        od, om, obd, obm = self.offloaded_counts(held)
        return dense - od, moe - om, bf16_dense - obd, bf16_moe - obm

    def offloaded_counts(self, held: tuple[int, ...]) -> tuple[int, int, int, int]:
        """(dense, MoE, BF16 dense, BF16 MoE) layer-micro-batches whose activations are in host
        memory: the offloaded layers × the micro-batches in flight on the first chunk."""
        n = held[0]
        od, om, obd, obm = self.offloaded
        return od * n, om * n, obd * n, obm * n

    def _layer_bytes(self, dense: int, moe: int, bf16_dense: int, bf16_moe: int) -> int:
        """The bytes of that many layer-micro-batches of each kind."""
        total = 0
        for term, mlp in self.layer:
            total += term.bytes * (dense if mlp else dense + moe)
        total += moe * sum(term.bytes for term in self.moe)
        extra = self._bf16_extra(bf16_dense, bf16_moe)
        return total + (extra if bf16_dense + bf16_moe and extra > 0 else 0)

    def host(self, held: tuple[int, ...]) -> tuple[Term, ...]:
        """The offloaded activations in host memory (pinned), one line; none without offload."""
        od, om, obd, obm = self.offloaded_counts(held)
        size = self._layer_bytes(od, om, obd, obm)
        if not size:
            return ()
        layers = self.offloaded[0] + self.offloaded[1]
        return (
            Term(
                f"offloaded activations ({layers} layers, host)",
                "activations",
                size,
                f"Σ per-layer terms × {od + om} layer-micro-batches offloaded",
                ACTIVATION_OFFLOAD,
            ),
        )

    def _bf16_extra(self, bf16_dense: int, bf16_moe: int) -> int:
        per_dense, per_moe = self.bf16_bytes
        return per_dense * bf16_dense + per_moe * bf16_moe

    def terms(self, held: tuple[int, ...]) -> tuple[tuple[Term, ...], tuple[Term, ...]]:
        """(activation terms, buffer terms) with `held` micro-batches in flight on each chunk."""
        dense, moe, bf16_dense, bf16_moe = self.counts(held)
        label = "layer-micro-batch"
        terms: list[Term] = []
        for term, mlp in self.layer:
            count = dense if mlp else dense + moe
            if count and term.bytes:
                terms.append(_scaled(term, count, label))
        if moe:
            terms += [_scaled(term, moe, f"MoE {label}") for term in self.moe if term.bytes]
        terms += [_scaled(term, held[0], "micro-batch") for term in self.stem]
        terms += [_scaled(term, held[-1], "micro-batch") for term in self.head]
        extra = self._bf16_extra(bf16_dense, bf16_moe)
        if bf16_dense + bf16_moe and extra > 0:
            terms.append(
                Term(
                    BF16_LINE[0],
                    "activations",
                    extra,
                    "Σ (ε − quantized)·linear inputs × "
                    f"{bf16_dense + bf16_moe} BF16 layer-micro-batches in flight",
                    BF16_LINE[1],
                )
            )
        terms += self.once
        return tuple(term for term in terms if term.bytes), self.buffers

    def bytes(self, held: tuple[int, ...]) -> int:
        """The bytes of `terms(held)`, without writing the terms out."""
        total = self._layer_bytes(*self.counts(held))
        total += held[0] * sum(term.bytes for term in self.stem)
        total += held[-1] * sum(term.bytes for term in self.head)
        return total + sum(t.bytes for t in self.once) + sum(t.bytes for t in self.buffers)


@record
class StageActivations:
    """A pipeline rank's activations at its peak: what it keeps per unit held (`lines`) and
    the micro-batches in flight on each of its chunks (`held`)."""

    lines: StageLines
    held: tuple[int, ...]

    @property
    def terms(self) -> tuple[tuple[Term, ...], tuple[Term, ...]]:
        """(activation terms, buffer terms)."""
        return self.lines.terms(self.held)

    @property
    def host(self) -> tuple[Term, ...]:
        """The activations it keeps in host memory (`training.offload.activations`)."""
        return self.lines.host(self.held)

    @property
    def bytes(self) -> int:
        """The bytes of every term (kept on the instance: a budget asks for it per stage)."""
        cached: int | None = self.__dict__.get("_bytes")
        if cached is None:
            cached = self.__dict__["_bytes"] = self.lines.bytes(self.held)
        return cached


def exchange_buffers(job: Plannable) -> tuple[Term, ...]:
    """The context-parallel exchange's transient buffers of one layer (`_cp_buffers` with β_a
    the activations' bytes, ε of `shape_of`): the same on every stage, and the only part of a
    stage's activations the context-parallel type decides."""
    return tuple(_cp_buffers(job, job.numerics.activation))


def _cp_buffers(job: Plannable, beta: int) -> list[Term]:
    """The context-parallel exchange's transient buffers of one layer (planc.comm.context):
    the all-gathered K/V of every rank (allgather), or the q/k/v and output all-to-all
    buffers (a2a, a2a+p2p); p2p's two K/V blocks in flight are not counted, as before."""
    lay, dims = job.layout, job.dims
    if lay.c == 1:
        return []
    ring = _torch_ring_buffers(job) if job.training.framework == "fsdp2" else []
    if lay.cp_comm == "p2p":
        return [*ring, *_fp8_ring_buffers(job, lay.c)]
    if lay.cp_comm == "allgather":
        return [
            Term(
                "context-parallel K/V all-gather (one layer, transient)",
                "buffers",
                context.gathered_kv_bytes(dims, beta, lay.c),
                "c·b·(s/c)·(g/t)·(k + k_v)·β_a",
                "Transformer Engine AttnFuncWithCPAndKVAllGather, torch's _AllGatherRotater: "
                "the whole sequence's K and V",
            ),
            *ring,
        ]
    return [
        Term(
            "context-parallel all-to-all buffers (one layer, transient)",
            "buffers",
            context.qkv_a2a_bytes(dims, beta) + context.output_a2a_bytes(dims, beta),
            "b·(s/c)·(n/t·k + g/t·(k + k_v) + n/t·k_v)·β_a",
            "DeepSpeed-Ulysses (Jacobs et al. 2023 §3): q, k, v and the output re-laid out",
        ),
        *(_fp8_ring_buffers(job, lay.c // cp_a2a_size(job)) if lay.cp_comm == "a2a+p2p" else []),
    ]


def _fp8_ring_buffers(job: Plannable, c: int) -> list[Term]:
    """Megatron's ring backward over `c` ranks under FP8 attention (TE 2.18
    AttnFuncWithCPAndKVP2P with fp8): the FP8 dK/dV of every step to send and to receive (2·c
    blocks of one byte per element), and the gradients' reduction buffers: per step FP8 dQ blocks under delayed scaling, fp32
    dQ and dK/dV accumulators under current scaling and MXFP8."""
    a = fp8_ring_attention(job)
    if a is None:
        return []
    dims = job.dims
    kv = context.kv_block_bytes(dims, 1)
    query = dims.b * dims.s_c * dims.n * dims.k
    delayed = a.recipe.value == "delayed"
    reduce = c * query if delayed else 4 * (query + kv)
    return [
        Term(
            "context-parallel FP8 dK/dV and dQ buffers (one layer, transient)",
            "buffers",
            2 * c * kv + reduce,
            "2·c·b·(s/c)·(g/t)·(k + k_v) + "
            + ("c·b·(s/c)·(n/t)·k" if delayed else "4·b·(s/c)·((n/t)·k + (g/t)·(k + k_v))"),
            "Transformer Engine 2.18 AttnFuncWithCPAndKVP2P backward with fp8: dkv_send_buffer "
            "and dkv_recv_buffer ([c, *kv.shape], uint8), dq_buffer (uint8 per step under "
            "delayed scaling; fp32 dq and dkv accumulators under current scaling and MXFP8)",
        )
    ]


def _torch_ring_buffers(job: Plannable) -> list[Term]:
    """torch's ring attention backward (torchtitan): dK and dV accumulated in fp32, the copy
    it sends on and the one it receives, each one rank's K/V in fp32."""
    return [
        Term(
            "ring attention's fp32 dK/dV: accumulator, send and receive (one layer, transient)",
            "buffers",
            3 * context.fp32_kv_block_bytes(job.dims),
            "3·b·(s/c)·(g/t)·(k + k_v)·4",
            "torch _templated_ring_attention_backward: grad_key/grad_value in fp32 "
            "(convert_to_f32), next_grad_kv = cat(...) sent by permute_tensor, the buffer received",
        )
    ]


def stage_activation_terms(
    job: Plannable, pp_rank: int
) -> tuple[tuple[Term, ...], tuple[Term, ...]]:
    """(activation terms, buffer terms) of pipeline rank `pp_rank` at its peak."""
    return stage_activations(job, pp_rank).terms


def stage_activations(job: Plannable, pp_rank: int) -> StageActivations:
    """What pipeline rank `pp_rank` keeps at its peak (`stage_lines`) with the micro-batches it
    then holds in flight on each chunk (`held_at_peak`)."""
    lines = stage_lines(job, pp_rank)
    return StageActivations(lines, held_at_peak(job, pp_rank, lines.weights))


def held_at_peak(job: Plannable, pp_rank: int, weights: tuple[int, ...]) -> tuple[int, ...]:
    """Micro-batches of each chunk of pipeline rank `pp_rank` in flight at its activation peak,
    the chunks weighing `weights` bytes a micro-batch (`planc.pipeline.registry.in_flight`)."""
    lay = job.layout
    return registry.in_flight(lay.schedule, lay.p, lay.v, job.m, pp_rank, weights)


def layer_lines(job: Plannable) -> tuple[tuple[Term, bool], ...]:
    """What one layer keeps per micro-batch (`kept_lines`), each line with whether only a dense
    layer keeps it (the dense MLP's; the MLP norm's statistics when layernorm is recomputed, a
    module of its own in a MoE layer): the same on every stage."""
    x, tr = shape_of(job), job.training
    drop_norm = _layernorm_recomputed(tr.recompute, tr.recompute_modules)
    return tuple(
        (
            Term(line.title(x), "activations", line.size(x), line.formula(x), line.source),
            line.mlp or (drop_norm and line.moe_norm),
        )
        for line in kept_lines(x, tr.recompute, tr.recompute_modules)
    )


def stage_lines(
    job: Plannable, pp_rank: int, layer: tuple[tuple[Term, bool], ...] | None = None
) -> StageLines:
    """What pipeline rank `pp_rank` keeps per unit held and once (`StageLines`); `layer`: the
    job's `layer_lines`, when the caller has them."""
    lay, model = job.layout, job.model
    x = shape_of(job)
    recompute, modules = job.training.recompute, job.training.recompute_modules
    # the last chunk's multi-token prediction modules keep a layer's lines each
    chunks, experts = job.chunk_run_layers(pp_rank)
    first, last = pp_rank == 0, pp_rank == lay.last_stage
    moe = model.moe
    y = expert_shape(job) if moe is not None else None
    layer = layer_lines(job) if layer is None else layer
    per_layer = sum(term.bytes for term, _ in layer)  # layer_bytes(x, recompute)
    per_moe_layer = moe_layer_bytes(x, y, recompute, modules) if y is not None else 0
    head: tuple[Term, ...] = ()
    if last:
        mtp = mtp_terms(x, model.V, lay.t, job.mtp_modules(pp_rank)[0])
        head = (*last_stage_terms(x, model.V, lay.t), *mtp)
    stem = first_stage_terms(x, model.position == "learned") if first else ()
    weights = [
        (layers - e) * per_layer + e * per_moe_layer
        for layers, e in zip(chunks, experts, strict=True)
    ]
    weights[0] += sum(term.bytes for term in stem)
    weights[-1] += sum(term.bytes for term in head)
    has_moe = sum(experts) > 0
    working = _working_set(
        x, y if has_moe else None, recompute, modules, sum(chunks) > sum(experts)
    )
    once: tuple[Term, ...] = ()
    if working:
        label = f"one layer's {module_words(modules)}" if recompute == "selective" else "one layer"
        once = (
            Term(
                f"recompute working set ({label})",
                "activations",
                working,
                "Σ per-layer terms of the recomputed part, once",
                "planc: the backward of one layer re-creates what recompute dropped",
            ),
        )
    once += _deferred_terms(job, x, pp_rank)
    q = job.numerics.quantized
    kept = 0 if q is None else q.bf16_layers
    return StageLines(
        layer=layer,
        moe=tuple(
            Term(line.title(y), "activations", line.size(y), line.formula(y), line.source)
            for line in moe_kept(recompute, modules)
        )
        if y is not None and recompute != "full"
        else (),
        stem=stem,
        head=head,
        layers=tuple((n - e, e) for n, e in zip(chunks, experts, strict=True)),
        bf16=tuple(_bf16_layers(job, a, b, kept) for a, b in lay.chunks[pp_rank]),
        bf16_bytes=_bf16_per_layer(job, x, recompute, modules) if x.q_bits else (0, 0),
        weights=tuple(weights),
        once=once,
        dispatch=tuple(_dispatch_buffers(job, y if has_moe else None)),
        exchange=exchange_buffers(job),
        logits=tuple(_logits_buffers(job, x, last)),
        offloaded=_offloaded(job, pp_rank, kept),
    )


def offloaded_layers(job: Plannable) -> int:
    """N, the first layers whose saved activations Megatron-Core keeps in host memory from
    their forward to their backward (`training.offload.activations`, --cpu-offloading-num-layers;
    Transformer Engine's DefaultOffloadSynchronizer offloads layers 0 … N − 1): Megatron-LM
    only, on one pipeline stage (TransformerConfig refuses more, PLC048), at most L − 1."""
    tr, lay = job.training, job.layout
    if tr.framework != "megatron" or lay.p > 1 or lay.v > 1:
        return 0
    return min(tr.offload_activation_layers, job.model.L - 1)


def _offloaded(job: Plannable, pp_rank: int, kept: int) -> tuple[int, int, int, int]:
    """(dense, MoE, BF16 dense, BF16 MoE) of the offloaded layers [0, N) on `pp_rank`'s first
    chunk (the only chunk: offload runs without a pipeline)."""
    n = offloaded_layers(job) if pp_rank == 0 else 0
    if not n:
        return 0, 0, 0, 0
    moe = job.model.moe
    e = 0 if moe is None else moe.moe_layers_between(0, n)
    bf16_dense, bf16_moe = _bf16_layers(job, 0, n, kept)
    return n - e, e, bf16_dense, bf16_moe


def _bf16_layers(job: Plannable, a: int, b: int, kept: int) -> tuple[int, int]:
    """(dense, MoE) layers of [a, b) among the first and last `kept` layers Megatron runs in
    BF16 (`planc.dims.bf16_ranges`)."""
    moe = job.model.moe
    dense = routed = 0
    for lo, hi in bf16_ranges(a, b, kept, job.model.L):
        e = 0 if moe is None else moe.moe_layers_between(lo, hi)
        dense, routed = dense + hi - lo - e, routed + e
    return dense, routed


def _dispatch_buffers(job: Plannable, y: ExpertShape | None) -> list[Term]:
    """The MoE dispatcher's transient buffers of a stage with MoE layers (`y`; none without):
    its rows, and the allgather dispatcher's gathered tokens."""
    lay = job.layout
    buffers: list[Term] = []
    if y is not None:
        buffers.append(
            Term(
                "all-to-all dispatch and combine buffers (transient)",
                "buffers",
                dispatch_buffers(y),
                f"{y.e}·h·(S + R), S = {'E·⌈T·topk/E·CF⌉' if y.capacity else 'T·topk'}"
                if y.exchanged
                else f"{y.e}·h·S",
                MOE_DISPATCHER,
            )
        )
    if y is not None and lay.dispatcher == "allgather" and y.exchanged:
        gathered = allgather_rows_bytes(job)
        buffers.append(
            Term(
                "allgather dispatcher's gathered tokens (transient)",
                "buffers",
                gathered,
                f"{y.e}·n·{y.tok}·h, n = ETP·EP",
                "Megatron-Core MoEAllGatherTokenDispatcher.token_dispatch: the hidden states of "
                "every tp_ep rank gathered into the global memory buffer (use_global_buffer), "
                "megatron-core 0.19.2",
            )
        )
    return buffers


DEFERRED_WGRAD = (
    "Megatron-Core tensor_parallel/layers.py (d98e8a64): ColumnParallelLinear.forward appends the "
    "output layer's input (input_parallel: the sequence shard under SP) to "
    "embedding_activation_buffer and LinearWithGradAccumulationAndAsyncCommunication.backward its "
    "output gradient to grad_output_buffer, for each deferred call; utils.py "
    "drain_embedding_wgrad_compute frees them in the flush"
)


def deferred_wgrad_bytes(x: LayerShape, V: int, t: int, k: int) -> int:
    """k·ε·(s·b·V'/t + s_r·b·h): what `training.defer_embedding_wgrad_compute` keeps for its k
    deferred head calls (`planc.deferral.deferred_calls`): each call's logits gradient over the
    rank's vocabulary slice, and the head's input as the linear received it (its sequence shard
    under SP). The buffers grow through the steady state and are freed in the flush; planc adds
    all k to the rank's activation peak, an upper bound: under 1F1B the last rank holds one
    micro-batch in flight to its last forward, by when min(k, m − 1)·h_p calls are buffered, and
    an interleaved rank's in-flight count falls in its cool-down while the last ones are added."""
    return k * x.e * (logits_elements(x, V, t) + x.s_r * x.b * x.h)


def _deferred_terms(job: Plannable, x: LayerShape, pp_rank: int) -> tuple[Term, ...]:
    """The deferred LM-head weight gradients' buffers on `pp_rank` (`deferred_wgrad_bytes`); none
    where nothing is deferred."""
    k, _ = deferred_calls(job, pp_rank)
    if not k:
        return ()
    return (
        Term(
            f"deferred LM-head weight-gradient buffers ({k} calls)",
            "activations",
            deferred_wgrad_bytes(x, job.model.V, job.layout.t, k),
            f"{k}·{x.e}·({x.tok}·V'/t + (s{x.rep})·b·h)",
            DEFERRED_WGRAD,
        ),
    )


def _logits_buffers(job: Plannable, x: LayerShape, last: bool) -> list[Term]:
    """The LM head's transient logits on the `last` stage (`logits_buffer`; none elsewhere)."""
    model, lay = job.model, job.layout
    if not (last and logits_buffer(x, model.V, lay.t)):
        return []
    if x.torch_loss:
        return [
            Term(
                "cross-entropy backward's fp32 gradients (transient)",
                "buffers",
                logits_buffer(x, model.V, lay.t),
                f"{12 if x.loss_parallel else 8}·{x.tok}·V'/t",
                PYTORCH_LOSS_BACKWARD,
            )
        ]
    return [
        Term(
            f"LM head logits ({job.numerics.precision.value}, transient)",
            "buffers",
            logits_buffer(x, model.V, lay.t),
            f"{x.e}·{x.tok}·V'/t",
            CROSS_ENTROPY,
        )
    ]
