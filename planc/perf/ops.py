"""FLOPs and HBM bytes of every operation of a transformer layer and of the model's two ends.

Each op is a small named function of a :class:`OpShape` (plain numbers of one rank) that
returns an :class:`OpCost`: FLOPs and bytes moved (HBM reads + writes) for the forward pass, the
backward pass for the inputs (data gradient) and the backward pass for the weights. Symbols as
in Korthikanti et al. 2022 (arXiv 2205.05198) and Narayanan et al. 2021 (arXiv 2104.04473):
b micro-batch, s sequence, h hidden, n heads, g key/value heads, k channels per head, f MLP
inner size, V vocabulary, t tensor-parallel, c context-parallel degree, β bytes per 16-bit
element (β = 2 for bf16/fp16).

Conventions, stated once:

* A matrix multiply of (M×K)·(K×N) costs 2·M·K·N FLOPs (one multiply-add = 2 FLOPs) and moves
  (M·K + K·N + M·N)·β bytes (each operand read once, the result written once: the minimum a
  well-tiled kernel moves). Its data gradient and weight gradient are matmuls of the same
  three sizes (Narayanan et al. 2021 §5.1: backward = 2 × forward).
* Attention matmuls have no causal discount (as the papers we validate against count them).
* Element-wise and normalisation ops are counted as the fused kernels Megatron-LM runs: Apex
  fused LayerNorm/RMSNorm, `FusedScaleMaskSoftmax`, `bias_dropout_add_fused_train`,
  `bias_gelu` / `swiglu` fusions (Megatron-LM `megatron/core/fusions/`); a dropout mask is
  one byte per element (PyTorch's fused `native_dropout` keeps a bool mask).
* Tensor parallelism splits heads and the MLP's inner size by t (Shoeybi et al. 2019 §3);
  sequence parallelism splits norms, dropouts and residual adds by t along the sequence
  (Korthikanti et al. 2022 §4.2.2); context parallelism gives each rank s/c queries that attend
  to all s keys over the ring (Liu et al. 2023), so its attention costs (s/c)·s, not s².
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from planc.dims import AttentionQuant, ExpertDims, Quantized, RankDims
from planc.presets.fp8 import SpeedupTable
from planc.record import record
from planc.spec.job import Model
from planc.vocab import CrossEntropyFusion, Norm, gated

# attention: the flash-attn package's kernel (FlashAttention-2) as Megatron-Core runs it
# through Transformer Engine; cudnn: cuDNN's fused attention (TE FusedAttention); sdpa:
# PyTorch's scaled_dot_product_attention flash backend, what eager PyTorch runs.
# cudnn-fp8 / cudnn-mxfp8: cuDNN's fused attention in FP8 (training.fp8.attention).
# te-cast: a quantization kernel of Transformer Engine's (amax, cast, transpose), memory bound
# at the rate TE's casts are measured to reach (`Efficiency.te_cast_hbm`); vector: any other
# element-wise kernel, at the GPU's HBM curve.
Engine = Literal[
    "matrix", "vector", "te-cast", "attention", "cudnn", "cudnn-fp8", "cudnn-mxfp8", "sdpa"
]


@record
class Work:
    """FLOPs and HBM bytes (reads + writes) of one pass of one op, on one rank."""

    flops: float
    bytes: float

    def __add__(self, other: Work) -> Work:
        return Work(self.flops + other.flops, self.bytes + other.bytes)


NOTHING = Work(0.0, 0.0)


@record
class GemmShape:
    """A (batched) matmul (M×K)·(K×N), `batch` times: what the GEMM efficiency depends on."""

    m: int
    n: int
    k: int
    batch: int = 1

    @property
    def smallest(self) -> int:
        """The smallest of M, N, K: a small one limits data reuse and tile occupancy."""
        return min(self.m, self.n, self.k)

    def data(self) -> GemmShape:
        """The data gradient dX[M×K] = dY[M×N]·Wᵀ[N×K]: output M × K, reduced over N."""
        return GemmShape(self.m, self.k, self.n, self.batch)

    def weight(self) -> GemmShape:
        """The weight gradient dW[K×N] = Xᵀ[K×M]·dY[M×N]: output K × N, reduced over M."""
        return GemmShape(self.k, self.n, self.m, self.batch)


@record
class OpCost:
    """One op: FLOPs and bytes of forward, backward-data and backward-weight, on one rank."""

    name: str
    engine: Engine
    forward: Work
    backward_data: Work
    backward_weight: Work = NOTHING
    shape: GemmShape | None = None  # matrix ops only
    attention_core: bool = False  # recomputed by selective recompute
    # the other recompute modules that re-run it (Megatron's --recompute-modules: mla_up_proj,
    # layernorm, mlp, moe, moe_act, shared_experts; `layer_ops`, `moe_layer_ops`)
    modules: frozenset[str] = frozenset()
    quantized: bool = False  # a GEMM of an FP8/FP4 recipe: priced at the quantized peak
    high_precision_wgrad: bool = False  # ... whose weight gradient stays 16-bit
    # a separate projection reading the previous one's input, which a compiled graph quantizes
    # once for both (`separate_projections`): no input cast of its own under an FP8 recipe
    shared_input: bool = False
    # a measured speed-up over this op's 16-bit kernels, which its passes' times are divided
    # by (a whole quantized linear priced from its recipe's table, `measured_linear`)
    speedup: float = 1.0
    # the op's runs per micro-batch, which its passes' times are multiplied by: 1/m for a
    # weight's cast Transformer Engine makes once per step (the kernel whole, its fixed cost
    # shared out, not a sliver of its bytes m times)
    calls: float = 1.0

    @property
    def backward(self) -> Work:
        return self.backward_data + self.backward_weight

    @property
    def data_gemm(self) -> GemmShape | None:
        """The data gradient's matmul (`GemmShape.data`); None for a vector op."""
        return self.shape.data() if self.shape is not None else None

    @property
    def weight_gemm(self) -> GemmShape | None:
        """The weight gradient's matmul (`GemmShape.weight`); None for a vector op."""
        return self.shape.weight() if self.shape is not None else None


@record
class OpShape:
    """One rank's share of a layer as the per-op model reads it: the rank's dimensions
    (`planc.dims.RankDims`: heads, kv heads and f already per TP rank, the sequence already per
    CP and SP rank) and the kernels' settings (plain numbers; see the module docstring)."""

    b: int
    s: int  # full sequence length (keys); a rank holds s_c queries
    s_c: int  # ⌈s/c⌉: the queries this rank computes
    s_r: int  # ⌈s_c/t⌉ with SP, else s_c: rows of norms, dropouts and residual adds
    h: int
    n: int  # query heads on this rank, n/t
    g: int  # key/value heads on this rank, ⌈g/t⌉ (Megatron replicates them when t > g)
    k: int
    f: int  # MLP inner size on this rank, f/t
    vocab: int  # V'/t: the rank's slice of the padded vocabulary
    gated: bool = False  # a gated linear unit (three MLP matrices) instead of GeLU (two)
    quick_gelu: bool = False  # the GLU's gate is quick-GELU (quick_geglu), not SiLU (swiglu)
    norm: Norm = "layernorm"  # or rmsnorm
    dropout: float = 0.0
    flash: bool = False
    unfused: bool = False  # eager PyTorch kernels (training.kernels: unfused)
    compiled: bool = False  # torch.compile'd blocks (kernels: compiled): fused, attention SDPA
    beta: int = 2  # bytes per activation element
    positions: int = 0  # rows of a learned position table (0 for RoPE)
    causal: bool = True  # a fused kernel skips the masked half of the scores
    # Multi-head latent attention (DeepSeek-V2 §2.1), when kv_latent > 0: k is then the query/key
    # head width d_h + d_h^R and g = n.
    v: int = 0  # value channels per head (0: k); MLA's v_head_dim
    q_latent: int = 0  # query latent d_c' (0: none, one h × n·k query projection)
    kv_latent: int = 0  # key/value latent d_c
    rope: int = 0  # per-head RoPE channels d_h^R (the key's shared by all heads)
    loss: CrossEntropyFusion = "none"  # the LM loss's kernels (training.cross_entropy_fusion)
    cudnn: bool = False  # flash attention runs cuDNN's fused kernel, not flash-attn's
    repeat_kv: bool = False  # K/V repeated to every query head before the core (repeat_kv)
    # Megatron-Core's fused QKV output split into Transformer Engine's attention (qkv_split)
    te_split: bool = False
    t: int = 1  # tensor-parallel degree (the column-parallel projections' split of h)
    window: int = 0  # sliding-window attention: keys per query of a windowed layer (0: full)
    # Megatron-Core's eager PyTorch kernels for features its fused ones do not take
    # (`planc.dims.megatron_eager`):
    rope_unfused: bool = False  # RoPE with a YaRN scale ≠ 1 (`megatron_unfused_rotary`)
    glu_clamp: bool = False  # the routed experts' clamped GLU inputs (`expert_glu_clamp`)
    expert_bias: bool = False  # the routed experts' fc2 biases (`expert_bias_add`)
    # Q, K, V and a GLU's gate and up as separate linears (`separate_projections`)
    separate: bool = False
    # activation checkpointing by torch's non-reentrant checkpoint, which stops recomputing
    # once every tensor the backward reads is back (`torch_checkpoint`, `planc.perf.sac`)
    early_stop: bool = False

    @property
    def queries(self) -> int:
        """s/c: the sequence positions this rank computes."""
        return self.s_c

    @property
    def tokens(self) -> int:
        """b·s/c: rows of the weight matmuls on this rank."""
        return self.b * self.s_c

    @property
    def norm_tokens(self) -> int:
        """Rows of norms, dropouts and residual adds: b·s/c, divided by t under SP."""
        return self.b * self.s_r

    @property
    def heads(self) -> int:
        """n/t query heads on this rank."""
        return self.n

    @property
    def kv_heads(self) -> int:
        """⌈g/t⌉ key/value heads on this rank."""
        return self.g

    @property
    def core_kv_heads(self) -> int:
        """The key/value heads the attention core reads: g/t, or n/t where they are repeated
        to every query head before it (`repeat_kv`)."""
        return self.heads if self.repeat_kv else self.g

    @property
    def value_channels(self) -> int:
        """Channels per value head: k, or latent attention's v_head_dim."""
        return self.v or self.k

    @property
    def rotary(self) -> bool:
        """RoPE rotates every query and key head: a model without a learned position table or
        latent attention (whose decoupled RoPE channels `mla_rotary` prices)."""
        return self.positions == 0 and not self.kv_latent


def op_shape(
    model: Model,
    dims: RankDims,
    beta: int,
    flash: bool,
    unfused: bool = False,
    compiled: bool = False,
    loss: CrossEntropyFusion = "none",
    cudnn: bool = False,
    te_split: bool = False,
    separate: bool = False,
    early_stop: bool = False,
) -> OpShape:
    """The per-op view of a rank's `dims` for `model` (β bytes per activation element) with
    the LM loss's kernels `loss`, flash attention on cuDNN's kernel when `cudnn`, Megatron-Core's
    QKV split into Transformer Engine's attention when `te_split`, Q, K, V and a GLU's gate and
    up as separate linears when `separate` (`separate_projections`), checkpointed blocks
    recomputed only as far as the backward reads when `early_stop` (`torch_checkpoint`), and
    the eager paths of Megatron-Core `dims.eager` names (`planc.dims.megatron_eager`)."""
    return OpShape(
        b=dims.b,
        s=dims.s,
        s_c=dims.s_c,
        s_r=dims.s_r,
        h=dims.h,
        n=dims.n,
        g=dims.g,
        k=dims.k,
        f=dims.f,
        vocab=dims.vocab,
        gated=gated(model.mlp),
        quick_gelu=model.mlp == "quick_geglu",
        norm=model.norm,
        dropout=model.dropout,
        flash=flash,
        unfused=unfused,
        compiled=compiled,
        beta=beta,
        positions=model.max_seq_len if model.position == "learned" else 0,
        v=0 if model.mla is None else dims.v_head,
        q_latent=dims.q_latent,
        kv_latent=dims.kv_latent,
        rope=dims.rope,
        loss=loss,
        cudnn=cudnn,
        repeat_kv=dims.kv_repeated,
        te_split=te_split,
        t=dims.t,
        rope_unfused=dims.eager.rope_unfused,
        glu_clamp=dims.eager.glu_clamp,
        expert_bias=dims.eager.expert_bias,
        separate=separate,
        early_stop=early_stop,
    )


def gemm(name: str, rows: float, inner: float, cols: float, beta: int) -> OpCost:
    """A weight matmul Y[rows×cols] = X[rows×inner]·W[inner×cols].

    Forward 2·rows·inner·cols FLOPs, (rows·inner + inner·cols + rows·cols)·β bytes; the data
    gradient dX = dY·Wᵀ and the weight gradient dW = Xᵀ·dY have the same FLOPs and bytes
    (Narayanan et al. 2021 §5.1).
    """
    flops = 2.0 * rows * inner * cols
    moved = (rows * inner + inner * cols + rows * cols) * beta
    work = Work(flops, moved)
    shape = GemmShape(round(rows), round(cols), round(inner))
    return OpCost(name, "matrix", work, work, work, shape)


# --------------------------------------------------------------------------- attention block


def norm(shape: OpShape, name: str = "norm") -> OpCost:
    """LayerNorm or RMSNorm over b·s/c(/t with SP) rows of h (Apex fused kernels).

    Forward reads x and writes y: 2·β bytes per element, ~8 FLOPs per element for LayerNorm
    (mean, variance, normalise, scale, shift), ~4 for RMSNorm. Backward reads x and dy and
    writes dx (3·β per element, the per-row statistics are negligible), about twice the FLOPs;
    dγ (and dβ) are reduced in the same pass (Apex `fused_layer_norm_cuda`).
    """
    elements = shape.norm_tokens * shape.h
    if shape.unfused and shape.norm == "rmsnorm":
        return eager_rms_norm(name, elements, shape.beta)
    return _norm_cost(name, elements, shape.norm, shape.beta)


# Bytes of an fp32 element: eager RMSNorm and rotary compute in fp32 (x.float()).
FP32 = 4


def eager_rms_norm(name: str, elements: float, beta: int) -> OpCost:
    """RMSNorm as eager PyTorch runs torchtitan's module, y = (x_f·rsqrt(mean(x_f²) + ε))
    .type_as(x)·w with x_f = x.float() (torchtitan/models/norms.py RMSNorm, Dec 2024), one kernel
    per operator, each reading and writing its whole tensor in HBM.

    Forward, bytes per element: cast (β + 4), square (4 + 4), mean (4; its row output is
    negligible), scale by the row's rsqrt (4 + 4), cast back (4 + β), times w (β + β):
    4β + 28 (36 at β = 2; the fused kernel's 2β is 4). Backward (autograd's kernels in reverse):
    g·w (β + β), dw = Σ g·y (β + β), cast of g (β + 4), ∂/∂x_f of the scale (4 + 4),
    ∂/∂r = Σ g·x_f (4 + 4), the mean's expand (4), the square's 2·x_f·g (4 + 4 + 4), the sum of
    the two gradients (4 + 4 + 4), the cast back (4 + β): 6β + 52. FLOPs about one per
    element per kernel (7 forward, 11 backward)."""
    forward = Work(7.0 * elements, (4.0 * beta + 28.0) * elements)
    backward = Work(11.0 * elements, (6.0 * beta + 52.0) * elements)
    return OpCost(name, "vector", forward, backward)


def rotary(shape: OpShape) -> tuple[OpCost, ...]:
    """The rotary embedding of the rank's queries and keys (none with a learned position
    table): eager PyTorch's three kernels (`eager_rotary`), one fused kernel (`fused_rotary`),
    or latent attention's two (`mla_rotary`)."""
    if shape.kv_latent:
        return (mla_rotary(shape),) if shape.rope else ()
    if not shape.rotary:
        return ()
    if shape.rope_unfused:
        return (megatron_unfused_rotary(shape),)
    return (eager_rotary(shape) if shape.unfused else fused_rotary(shape),)


def qkv_split(shape: OpShape) -> tuple[OpCost, ...]:
    """The copies between Megatron-Core's fused QKV projection and Transformer Engine's attention
    (`te_split`; none for latent attention, whose own kernels build its query, key and value).

    Megatron views the projection's output per key/value group, [s, b, g, (n/g + 2)·k], and
    splits it into query, key and value views (attention.py get_query_key_value_tensors, TE's
    SplitAlongDim). Forward: the query's reshape to [s, b, n, k] cannot be a view where n > g
    (the groups' stride is (n/g + 2)·k, not (n/g)·k), so it copies the query; and once RoPE has
    made the key a tensor of its own, the value view no longer shares the key's strides, so TE's
    get_qkv_layout finds no supported layout and makes the value contiguous (a copy of g·k per
    token). Backward: SplitAlongDim concatenates dq, dk and dv into the projection's output
    gradient unless they are consecutive views of one buffer, which separate tensors are not.
    Without RoPE on every head and with g = n (GPT's learned positions) the three views are
    TE's interleaved sbh3d layout: no copy either way.

    Elements per token: forward (n/t where g < n) + (g/t with RoPE), each read and written (2β);
    backward (n/t + 2g/t), read and written, wherever a forward copy was made."""
    if not shape.te_split or shape.kv_latent:
        return ()
    grouped = shape.kv_heads < shape.heads
    forward_heads = (shape.heads if grouped else 0) + (shape.kv_heads if shape.rotary else 0)
    if forward_heads == 0:
        return ()
    per_head = 2.0 * shape.beta * shape.tokens * shape.k
    forward = Work(0.0, per_head * forward_heads)
    backward = Work(0.0, per_head * (shape.heads + 2 * shape.kv_heads))
    return (OpCost("qkv split copies", "vector", forward, backward),)


def mla_rotary(shape: OpShape) -> OpCost:
    """Latent attention's RoPE as Megatron-Core's fused kernels apply it after the up
    projections (megatron/core/fusions/fused_mla_yarn_rope_apply.py, under apply_rope_fusion;
    multi_latent_attention.py qkv_up_proj_and_rope_apply, so recomputed with mla_up_proj):
    the query's d_h^R RoPE channels rotated in place; the key and value built from the kv up
    projection's output and the one shared RoPE key into new tensors.

    Per token, with n/t heads, d_h = k − d_h^R no-RoPE channels and v value channels: forward,
    the query 2β·(n/t)·d_h^R (read and written in place), the key and value β·(n/t)·(d_h + v) +
    β·d_h^R read and β·(n/t)·(d_h + d_h^R + v) written; backward the same bytes over the
    gradients (the RoPE key's gradient summed over the heads). FLOPs: 3 per rotated element.
    Other frameworks split, rotate and concatenate in more kernels; this is the least any runs."""
    nope, heads, rope_ch = shape.k - shape.rope, shape.heads, shape.rope
    query = 2 * heads * rope_ch
    key_value = heads * (nope + shape.value_channels) + rope_ch
    key_value += heads * (nope + rope_ch + shape.value_channels)
    rotated = heads * rope_ch + rope_ch
    work = Work(3.0 * shape.tokens * rotated, shape.beta * shape.tokens * (query + key_value))
    return OpCost("mla rotary", "vector", work, work, modules=frozenset({"mla_up_proj"}))


def fused_rotary(shape: OpShape) -> OpCost:
    """Rotary embedding of the rank's queries and keys as one kernel per tensor between the QKV
    projection and the attention core: Megatron-Core's apply_rotary_pos_emb on the query and on
    the key (megatron/core/transformer/attention.py Attention.forward, its 'rotary_pos_emb'
    range; with apply_rope_fusion, Transformer Engine's fused_apply_rotary_pos_emb), and the
    kernel Inductor fuses torchtitan's apply_rotary_emb into under torch.compile. Neither the
    QKV GEMM nor the attention kernel applies it.

    Elements: b·s/c rows × (n/t + g/t)·k channels. Forward reads each element and writes its
    rotation (2β per element; the [s, k] cos/sin table is negligible beside the heads);
    backward the same over the gradients (the transposed rotation). FLOPs: 3 per element (a
    rotation of a channel pair is 4 multiplies and 2 adds)."""
    elements = shape.tokens * (shape.heads + shape.kv_heads) * shape.k
    work = Work(3.0 * elements, 2.0 * shape.beta * elements)
    return OpCost("rotary", "vector", work, work)


def eager_rotary(shape: OpShape) -> OpCost:
    """Rotary embedding of the rank's queries and keys as eager PyTorch runs torchtitan's
    apply_rotary_emb: x.float() viewed as complex, times freqs_cis, viewed back as real and
    cast to x's type (torchtitan/models/llama/model.py, Dec 2024).

    Elements: b·s/c rows × (n/t + g/t)·k channels. Forward bytes per element: cast (β + 4),
    complex multiply (4 + 4; the [s, k/2] table is negligible beside the heads), cast back
    (4 + β): 2β + 16; backward the same three in reverse (the multiply by conj(freqs_cis)):
    2β + 16. FLOPs: a complex multiply is 6 per channel pair, 3 per element."""
    elements = shape.tokens * (shape.heads + shape.kv_heads) * shape.k
    per = (2.0 * shape.beta + 16.0) * elements
    return OpCost("rotary (eager)", "vector", Work(3.0 * elements, per), Work(3.0 * elements, per))


def megatron_unfused_rotary(shape: OpShape) -> OpCost:
    """Rotary embedding of the rank's queries and keys through Megatron-Core's unfused path
    (`OpShape.rope_unfused`): _apply_rotary_pos_emb_bshd, t·cos + rotate_half(t)·sin with
    rotate_half(x) = cat(−x₂, x₁) and the result concatenated with the (empty) unrotated
    channels (rope_utils.py, Megatron-Core 0.17.1 2edffadb).

    Elements E: b·s/c rows × (n/t + g/t)·k channels, β bytes each; the [s, k] cos/sin table is
    negligible beside the heads. Forward, per element: t·cos reads and writes (2β), −x₂ reads
    and writes half (β), the cat (2β), ·sin (2β), the sum reads two and writes one (3β), the
    final cat (2β): 12β. Backward, autograd: the two products' gradients (2β each), −x₂'s (β),
    the chunk's re-concatenation (2β), the sum of the two branches (3β), the empty slice's
    zero gradient (β) and its sum with the rest (3β): 14β. These are what a TorchDispatchMode
    counts running Megatron-Core's own function (tests/test_megatron_eager.py). FLOPs: 4 per
    element each way (two products, a negation, a sum)."""
    elements = shape.tokens * (shape.heads + shape.kv_heads) * shape.k
    forward = Work(4.0 * elements, 12.0 * shape.beta * elements)
    backward = Work(4.0 * elements, 14.0 * shape.beta * elements)
    return OpCost("rotary (unfused)", "vector", forward, backward)


def _norm_cost(name: str, elements: float, kind: str, beta: int) -> OpCost:
    """A fused LayerNorm or RMSNorm over `elements` (see `norm`)."""
    per = 8.0 if kind == "layernorm" else 4.0
    forward = Work(per * elements, 2.0 * beta * elements)
    backward = Work(2 * per * elements, 3.0 * beta * elements)
    return OpCost(name, "vector", forward, backward)


def qkv_projection(shape: OpShape) -> OpCost:
    """Q, K, V projection: [b·s/c, h] · [h, (n + 2g)·k/t] (Shoeybi et al. 2019: column parallel)."""
    cols = (shape.heads + 2 * shape.kv_heads) * shape.k
    return gemm("qkv", shape.tokens, shape.h, cols, shape.beta)


def mla_down_projections(shape: OpShape) -> tuple[OpCost, ...]:
    """Latent attention's down projections on the norm's rows (b·s/c, /t with SP: Megatron keeps
    them whole on every TP rank, TELinear `parallel_mode='duplicated'`, on the sequence shard):
    q_a [rows, h]·[h, d_c'] when the query is compressed, kv_a [rows, h]·[h, d_c + d_h^R]
    (DeepSeek-V2 §2.1.2, eq. 9, 12 and 14)."""
    rows = shape.norm_tokens
    kv = gemm("mla kv down", rows, shape.h, shape.kv_latent + shape.rope, shape.beta)
    if not shape.q_latent:
        return (kv,)
    return (gemm("mla q down", rows, shape.h, shape.q_latent, shape.beta), kv)


def mla_latent_norms(shape: OpShape) -> tuple[OpCost, ...]:
    """RMSNorm over the latents, q_a_layernorm (rows × d_c') and kv_a_layernorm (rows × d_c), on
    the down projections' rows; costed as `norm`."""
    rows = shape.norm_tokens
    kv = _norm_cost("mla kv latent norm", rows * shape.kv_latent, "rmsnorm", shape.beta)
    if not shape.q_latent:
        return (kv,)
    q = _norm_cost("mla q latent norm", rows * shape.q_latent, "rmsnorm", shape.beta)
    return (q, kv)


def mla_up_projections(shape: OpShape) -> tuple[OpCost, ...]:
    """Latent attention's up projections, column parallel over heads: q_b
    [b·s/c, d_c']·[d_c', n/t·(d_h + d_h^R)] (without a query latent q_proj from h), kv_b
    [b·s/c, d_c]·[d_c, n/t·(d_h + v_head_dim)] (DeepSeek-V2 §2.1.2, eq. 10, 11 and 13)."""
    query_in = shape.q_latent or shape.h
    nope = shape.k - shape.rope
    return (
        gemm("mla q up", shape.tokens, query_in, shape.heads * shape.k, shape.beta),
        gemm(
            "mla kv up",
            shape.tokens,
            shape.kv_latent,
            shape.heads * (nope + shape.value_channels),
            shape.beta,
        ),
    )


def attention_projections(shape: OpShape) -> tuple[OpCost, ...]:
    """The projections before the attention core: one QKV matmul, or latent attention's down
    projections, latent norms and up projections."""
    if not shape.kv_latent:
        return qkv_projections(shape)
    return (*mla_down_projections(shape), *mla_latent_norms(shape), *mla_up_projections(shape))


def qkv_projections(shape: OpShape) -> tuple[OpCost, ...]:
    """The Q, K, V projection as the framework runs it: one fused matmul (`qkv_projection`), or
    with `OpShape.separate` three, wq [h, n·k/t], wk and wv [h, g·k/t], each reading the same
    input, and the sum of their three input gradients (`separate_projections`)."""
    if not shape.separate:
        return (qkv_projection(shape),)
    kv = shape.kv_heads * shape.k
    parts = (("wq", shape.heads * shape.k), ("wk", kv), ("wv", kv))
    return (input_gradient_sum(shape, "qkv", len(parts)), *_parts(shape, "qkv", parts))


def mlp_up_projections(shape: OpShape) -> tuple[OpCost, ...]:
    """fc1 as the framework runs it: one matmul (`mlp_up`, a GLU's gate and up fused), or with
    `OpShape.separate` and a GLU two, w1 (gate) and w3 (up) [h, f/t] each, and the sum of their
    input gradients (`separate_projections`)."""
    if not (shape.separate and shape.gated):
        return (mlp_up(shape),)
    parts = (("w1", shape.f), ("w3", shape.f))
    return (input_gradient_sum(shape, "mlp fc1", len(parts)), *_parts(shape, "mlp fc1", parts))


def _parts(shape: OpShape, name: str, parts: tuple[tuple[str, int], ...]) -> tuple[OpCost, ...]:
    """One matmul per (label, columns) of `parts` on the layer's tokens and h, named
    "`name` (label)"; each after the first reads the first's input, which a compiled graph
    quantizes once (`OpCost.shared_input`; AOT autograd's common-subexpression elimination
    merges the identical casts)."""
    return tuple(
        replace(
            gemm(f"{name} ({label})", shape.tokens, shape.h, cols, shape.beta),
            shared_input=i > 0 and shape.compiled,
        )
        for i, (label, cols) in enumerate(parts)
    )


def input_gradient_sum(shape: OpShape, name: str, parts: int) -> OpCost:
    """The sum of the input gradients of `parts` separate linears on one input (b·s/c·h
    elements each; `separate_projections`), backward only. Compiled: one fused kernel reads the
    `parts` gradients and writes their sum, (parts + 1)·β per element; eager: autograd adds
    them pairwise as they arrive, parts − 1 adds of 3β each. One FLOP per add and element."""
    elements = shape.tokens * shape.h
    adds = parts - 1
    moved = (parts + 1 if shape.compiled else 3 * adds) * shape.beta * elements
    return OpCost(f"{name} input-gradient sum", "vector", NOTHING, Work(adds * elements, moved))


def _score_elements(shape: OpShape) -> float:
    """b·(n/t)·(s/c)·s: the attention score matrix of one rank."""
    return shape.b * shape.heads * shape.queries * shape.s


def window_keys(s: int, w: int) -> float:
    """w − w²/(2s): the keys per query a causal sliding window of w tokens leaves on average
    over s positions (the band of the causal triangle, s²/2 − (s − w)²/2 = s·w − w²/2 scores;
    s/2, the causal triangle's, when w ≥ s)."""
    return s / 2 if w >= s else w - w * w / (2 * s)


def _executed_scores(shape: OpShape) -> float:
    """The score elements a fused kernel computes on one rank: all of b·(n/t)·(s/c)·s
    without a mask, the causal half, or the sliding window's band (`window_keys`; a
    load-balanced context-parallel rank holds 1/c of it)."""
    if shape.window and shape.causal:
        return shape.b * shape.heads * shape.queries * window_keys(shape.s, shape.window)
    return _score_elements(shape) * (0.5 if shape.causal else 1.0)


def attention_scores(shape: OpShape) -> OpCost:
    """QKᵀ: (n/t)·b batched [s/c, k]·[k, s] matmuls (eager attention).

    Forward 2·b·(n/t)·(s/c)·s·k FLOPs; reads Q and K, writes the scores (β each). Backward
    dQ = dS·K and dK = dSᵀ·Q: twice the FLOPs, reads dS twice, Q and K, writes dQ and dK.
    Megatron's eager path expands K and V to n heads, so K counts n/t heads.
    """
    scores = _score_elements(shape)
    q = shape.b * shape.heads * shape.queries * shape.k
    kv = shape.b * shape.heads * shape.s * shape.k
    flops = 2.0 * scores * shape.k
    forward = Work(flops, (q + kv + scores) * shape.beta)
    backward = Work(2 * flops, (2 * scores + 2 * q + 2 * kv) * shape.beta)
    gshape = GemmShape(shape.queries, shape.s, shape.k, round(shape.b * shape.heads))
    return OpCost("attention scores QKᵀ", "matrix", forward, backward, NOTHING, gshape, True)


def softmax(shape: OpShape) -> OpCost:
    """Scale, causal mask and softmax over the scores (Megatron `FusedScaleMaskSoftmax`).

    Forward reads and writes the b·(n/t)·(s/c)·s scores (2·β per element, ~5 FLOPs: scale,
    max, subtract-exp, sum, divide); backward reads y and dy and writes dx (3·β, ~4 FLOPs).
    """
    elements = _score_elements(shape)
    forward = Work(5.0 * elements, 2.0 * shape.beta * elements)
    backward = Work(4.0 * elements, 3.0 * shape.beta * elements)
    return OpCost("softmax", "vector", forward, backward, attention_core=True)


def attention_dropout(shape: OpShape) -> OpCost:
    """Dropout on the attention probabilities (none when the model's dropout is 0).

    Forward reads the probabilities, writes the result and a one-byte mask: (2β + 1) per
    element; backward reads dy and the mask and writes dx: (2β + 1).
    """
    if shape.dropout <= 0:
        return OpCost("attention dropout", "vector", NOTHING, NOTHING, attention_core=True)
    elements = _score_elements(shape)
    work = Work(2.0 * elements, (2.0 * shape.beta + 1) * elements)
    return OpCost("attention dropout", "vector", work, work, attention_core=True)


def attention_over_values(shape: OpShape) -> OpCost:
    """Attention over V: (n/t)·b batched [s/c, s]·[s, k] matmuls (eager attention); latent
    attention's values have v_head_dim channels instead of k.

    Forward 2·b·(n/t)·(s/c)·s·k FLOPs; reads the probabilities and V, writes the context.
    Backward dP = dO·Vᵀ and dV = Pᵀ·dO: twice the FLOPs; reads dO twice, V and P, writes dP and dV.
    """
    scores = _score_elements(shape)
    dv = shape.value_channels
    out = shape.b * shape.heads * shape.queries * dv
    v = shape.b * shape.heads * shape.s * dv
    flops = 2.0 * scores * dv
    forward = Work(flops, (scores + v + out) * shape.beta)
    backward = Work(2 * flops, (2 * scores + 2 * out + 2 * v) * shape.beta)
    gshape = GemmShape(shape.queries, dv, shape.s, round(shape.b * shape.heads))
    return OpCost("attention over V", "matrix", forward, backward, NOTHING, gshape, True)


def flash_attention(shape: OpShape) -> OpCost:
    """Fused attention (FlashAttention-2, Dao 2023): both matmuls, no s×s tensor in HBM.

    Forward 4·b·(n/t)·(s/c)·s·k FLOPs (QKᵀ and PV); reads Q, K, V, writes O and the fp32
    log-sum-exp. Backward recomputes the scores: five matmuls (S, dV, dP, dQ, dK), 2.5× the
    forward FLOPs; reads Q, K, V, O, dO, writes dQ, dK, dV. K and V count g/t heads (GQA is
    native in the kernel), n/t where they were repeated before it (`OpShape.core_kv_heads`).
    Dropout, if any, runs inside the kernel. A causal kernel skips the
    blocks above the diagonal: it executes half of these FLOPs (the FLOPs returned here are
    the executed ones; model FLOPs for MFU are counted without the discount elsewhere). A
    sliding window of w tokens (Transformer Engine window_size (w − 1, 0)) leaves the band of
    s·w − w²/2 scores per head (`window_keys`); its GEMM shape then has w keys.
    Latent attention: QKᵀ over k = d_h + d_h^R channels and PV over v_head_dim, so forward
    2·b·(n/t)·(s/c)·s·(k + v) FLOPs; Q and K of k channels, V and O of v.
    """
    scores = _executed_scores(shape)
    dv = shape.value_channels
    q = shape.b * shape.heads * shape.queries * shape.k
    o = shape.b * shape.heads * shape.queries * dv
    kv = shape.b * shape.core_kv_heads * shape.s * (shape.k + dv)
    lse = shape.b * shape.heads * shape.queries * 4.0
    flops = 2.0 * scores * (shape.k + dv)
    forward = Work(flops, (q + o + kv) * shape.beta + lse)
    backward = Work(2.5 * flops, (2 * q + 2 * o + 2 * kv) * shape.beta + lse)
    keys = min(shape.window, shape.s) if shape.window else shape.s
    gshape = GemmShape(shape.queries, keys, shape.k, round(shape.b * shape.heads))
    return OpCost(
        "flash attention", attention_engine(shape), forward, backward, NOTHING, gshape, True
    )


def attention_engine(shape: OpShape) -> Engine:
    """The kernel that runs fused attention: PyTorch's SDPA for eager and compiled blocks
    (torch.compile leaves F.scaled_dot_product_attention as it is: torchtitan compiles the
    blocks around it), cuDNN's fused attention when `OpShape.cudnn`, else flash-attn's."""
    if shape.unfused or shape.compiled:
        return "sdpa"
    return "cudnn" if shape.cudnn else "attention"


def kv_repeat(shape: OpShape) -> tuple[OpCost, ...]:
    """K and V repeated from g/t to n/t heads before the attention core (`repeat_kv`:
    torchtitan's repeat_kv, x.unsqueeze(3).expand(...).reshape(...), a copy; Megatron-LM's local
    DotProductAttention's repeat_interleave, and so every eager core: its QKᵀ and attention
    over V read n/t heads); none where the fused kernel reads the grouped heads or g = n.

    Elements: b·(s/c) rows × (n/t)·(k + k_v) written from (g/t)·(k + k_v) read. Eager (kernels
    unfused): one copy kernel, forward β·(g/t + n/t)·… bytes, and backward the gradient's sum
    over the n/g repeats, the same bytes and (n/t − g/t)·… FLOPs. Compiled: Inductor fuses the
    copy into the kernel that produced K and V, which then writes n/t heads in place of g/t:
    β·(n/t − g/t)·… more forward, and as many more read by the backward's fused sum."""
    # every eager core repeats them; a fused kernel only where the field says so
    if not (shape.repeat_kv or not shape.flash) or shape.heads <= shape.kv_heads:
        return ()
    rows = shape.tokens * (shape.k + shape.value_channels)
    grouped, repeated = rows * shape.kv_heads, rows * shape.heads
    if shape.compiled:
        extra = Work(0.0, (repeated - grouped) * shape.beta)
        return (OpCost("K/V repeat (fused)", "vector", extra, extra, attention_core=True),)
    moved = (grouped + repeated) * shape.beta
    forward = Work(0.0, moved)
    backward = Work(float(repeated - grouped), moved)
    return (OpCost("K/V repeat", "vector", forward, backward, attention_core=True),)


def attention_core(shape: OpShape) -> tuple[OpCost, ...]:
    """The core between the projections: fused (flash) or the four eager kernels."""
    if shape.flash:
        return (flash_attention(shape),)
    return (
        attention_scores(shape),
        softmax(shape),
        attention_dropout(shape),
        attention_over_values(shape),
    )


def output_projection(shape: OpShape) -> OpCost:
    """Attention output projection: [b·s/c, n·k/t]·[n·k/t, h] (row parallel); latent
    attention's over n·v_head_dim/t."""
    inner = shape.heads * shape.value_channels
    return gemm("attention output", shape.tokens, inner, shape.h, shape.beta)


def residual_dropout_add(shape: OpShape, name: str = "dropout + residual") -> OpCost:
    """Bias, dropout and residual add, fused (`bias_dropout_add_fused_train`), on b·s/c(/t) rows.

    Forward reads the branch and the residual, writes the sum (and a one-byte mask when
    dropout > 0): (3β [+ 1]) per element; backward reads dy (and the mask) and writes the
    branch's gradient; the residual's gradient is dy itself: (2β [+ 1]).
    """
    elements = shape.norm_tokens * shape.h
    mask = 1.0 if shape.dropout > 0 else 0.0
    forward = Work(3.0 * elements, (3.0 * shape.beta + mask) * elements)
    backward = Work(2.0 * elements, (2.0 * shape.beta + mask) * elements)
    return OpCost(name, "vector", forward, backward)


# --------------------------------------------------------------------------- MLP block


def mlp_up(shape: OpShape) -> OpCost:
    """fc1: [b·s/c, h]·[h, f/t]; SwiGLU fuses gate and up into one [h, 2f/t] matmul (f in
    `OpShape` is already f/t)."""
    cols = (2 if shape.gated else 1) * shape.f
    return gemm("mlp fc1", shape.tokens, shape.h, cols, shape.beta)


def activation(shape: OpShape) -> OpCost:
    """GeLU (Megatron `bias_gelu` fusion) or a gated linear unit on b·s/c·f/t elements.

    GeLU: forward reads x, writes y (2β per element, ~8 FLOPs for the tanh form); backward reads
    x and dy, writes dx (3β). A GLU: forward reads gate and up, writes y (3β, ~6 FLOPs);
    backward reads gate, up and dy, writes both gradients (5β). SwiGLU's gate is SiLU,
    quick-GEGLU's x·σ(1.702·x) (Megatron-Core `bias_swiglu_impl` and `quick_gelu`, one fused
    kernel each): the same tensors, so the same bytes.
    """
    elements = shape.tokens * shape.f
    if shape.gated and shape.unfused:
        return eager_swiglu(elements, shape.beta)
    if shape.gated:
        return OpCost(
            "quick-geglu" if shape.quick_gelu else "swiglu",
            "vector",
            Work(6.0 * elements, 3.0 * shape.beta * elements),
            Work(10.0 * elements, 5.0 * shape.beta * elements),
        )
    return OpCost(
        "gelu",
        "vector",
        Work(8.0 * elements, 2.0 * shape.beta * elements),
        Work(12.0 * elements, 3.0 * shape.beta * elements),
    )


def eager_swiglu(elements: float, beta: int) -> OpCost:
    """SwiGLU as eager PyTorch runs torchtitan's FeedForward, F.silu(w1(x))·w3(x)
    (torchtitan/models/llama/model.py, Dec 2024): two kernels where the fused one is one.

    Per element of f/t, forward: silu reads a and writes silu(a) (β + β), the product reads
    silu(a) and b and writes y (3β): 5β (the fused kernel 3β). Backward: the product's two
    gradients g·b and g·silu(a) (3β each), silu's backward reads a and its gradient and writes
    da (3β): 9β (fused 5β). FLOPs as the fused kernel's."""
    return OpCost(
        "swiglu (eager)",
        "vector",
        Work(6.0 * elements, 5.0 * beta * elements),
        Work(10.0 * elements, 9.0 * beta * elements),
    )


def mlp_down(shape: OpShape) -> OpCost:
    """fc2: [b·s/c, f/t]·[f/t, h] (row parallel)."""
    return gemm("mlp fc2", shape.tokens, shape.f, shape.h, shape.beta)


def _in(op: OpCost, *modules: str) -> OpCost:
    """`op` re-run by the recompute `modules` too."""
    return replace(op, modules=op.modules | frozenset(modules))


def _latent_parts(ops: tuple[OpCost, ...]) -> tuple[OpCost, ...]:
    """Latent attention's projections with its up projections in mla_up_proj (Megatron-Core
    multi_latent_attention.py qkv_up_proj_and_rope_apply, the RoPE applied inside them)."""
    return tuple(_in(op, "mla_up_proj") if op.name in MLA_UP else op for op in ops)


MLA_UP = ("mla q up", "mla kv up")


def layer_ops(shape: OpShape) -> tuple[OpCost, ...]:
    """Every op of one pre-norm transformer layer, in forward order (Megatron GPT/Llama), each
    with the recompute modules that re-run it: the attention core core_attn, latent attention's
    input norm layernorm (a module of its own there; Transformer Engine fuses the others into
    the linear after them) and its up projections mla_up_proj, the MLP mlp."""
    input_norm = norm(shape, "input norm")
    return (
        _in(input_norm, "layernorm") if shape.kv_latent else input_norm,
        *_latent_parts(attention_projections(shape)),
        *rotary(shape),
        *qkv_split(shape),
        *kv_repeat(shape),
        *attention_core(shape),
        output_projection(shape),
        residual_dropout_add(shape, "attention dropout + residual"),
        norm(shape, "pre-MLP norm"),
        *(_in(op, "mlp") for op in mlp_up_projections(shape)),
        _in(activation(shape), "mlp"),
        _in(mlp_down(shape), "mlp"),
        residual_dropout_add(shape, "MLP dropout + residual"),
    )


# --------------------------------------------------------------------------- MoE block


def router(shape: OpShape, experts: ExpertDims) -> OpCost:
    """The router's gate: [T, h]·[h, E] on the rank's T tokens (TopKRouter.gating; the
    weights are replicated, no TP split)."""
    return gemm("router", experts.tokens, shape.h, experts.E, shape.beta)


def token_permutation(shape: OpShape, experts: ExpertDims) -> OpCost:
    """Permute the routed rows into expert order before the dispatch and back after the
    combine (Megatron-Core `permute` / `unpermute`, fused): each reads and writes T·k rows of h
    (`ExpertDims.routed`: E·C when padded to capacity, the padding rows real copies).

    Forward: the permute reads T·k gathered rows and writes them (2β per element), the
    unpermute reads T·k rows and their probabilities and writes T sums (≈2β per element); the
    backward does the same in reverse. One FLOP per element for the weighted sum.
    """
    elements = experts.routed * shape.h
    work = Work(elements, 4.0 * shape.beta * elements)
    return OpCost("token permutation", "vector", work, work)


def local_expert_sort(shape: OpShape, experts: ExpertDims) -> tuple[OpCost, ...]:
    """The second permutation of Megatron-Core's alltoall dispatcher (`ExpertDims.
    sorted_by_expert`): after the all-to-all (and the expert-TP all-gather) the received rows,
    grouped by source rank, are re-sorted by local expert, and before the return sorted back
    (sort_chunks_by_idxs, one fused copy each). None for the flex dispatchers, whose one
    permutation each way `token_permutation` prices, or with a single local expert.

    Rows: the balanced T·topk a rank receives, times ETP (E·C·ETP padded to capacity, where
    Megatron-Core sorts by one transposed copy of a [ETP·EP, E/EP, C] view, the same bytes,
    token_dispatcher.py:713-735 at 2edffadb). Forward: the sort reads and writes
    each element (2β), the sort back in the combine's preparation the same (2β); backward the
    same two copies of the gradients in reverse."""
    if not experts.sorted_by_expert:
        return ()
    elements = experts.routed * experts.et * shape.h
    work = Work(0.0, 4.0 * shape.beta * elements)
    return (OpCost("local expert sort", "vector", work, work),)


def _grouped_gemm(
    name: str, shape: OpShape, experts: ExpertDims, inner: float, cols: float
) -> OpCost:
    """E/EP experts' matmuls, one per local expert of ETP·T·k·EP/E rows (the balanced share of
    the gathered rows; exactly C·EP·ETP padded to capacity, `ExpertDims.routed` E·C;
    Megatron-Core TEGroupedMLP runs them as one grouped GEMM)."""
    rows = experts.et * experts.routed * experts.ep / experts.E
    one = gemm(name, rows, inner, cols, shape.beta)
    n = experts.local_experts
    work = Work(one.forward.flops * n, one.forward.bytes * n)
    gshape = GemmShape(round(rows), round(cols), round(inner), n)
    return OpCost(name, "matrix", work, work, work, gshape)


def expert_up(shape: OpShape, experts: ExpertDims) -> OpCost:
    """The routed experts' fc1: [rows, h]·[h, (2)f_e/ETP] per local expert (SwiGLU fuses
    gate and up; `ExpertDims.f_e` is already f_e/ETP)."""
    cols = (2 if shape.gated else 1) * experts.f_e
    return _grouped_gemm("expert fc1", shape, experts, shape.h, cols)


def expert_activation(shape: OpShape, experts: ExpertDims) -> OpCost:
    """GeLU or SwiGLU on the experts' fc1 outputs, ETP·T·k rows of f_e/ETP (as `activation`)."""
    rows = experts.et * experts.routed
    # One "sequence" of ETP·T·k rows with an inner size of f_e/ETP.
    gathered = replace(shape, b=1, s=rows, s_c=rows, s_r=rows, f=experts.f_e)
    return activation(gathered)


def expert_down(shape: OpShape, experts: ExpertDims) -> OpCost:
    """The routed experts' fc2: [rows, f_e/ETP]·[f_e/ETP, h] per local expert."""
    return _grouped_gemm("expert fc2", shape, experts, experts.f_e, shape.h)


def shared_expert_ops(shape: OpShape, experts: ExpertDims) -> tuple[OpCost, ...]:
    """The shared experts: a dense, TP-split MLP of inner size E_s·f_s (SharedExpertMLP;
    `ExpertDims.f_s` is its share per TP rank)."""
    if not experts.f_s:
        return ()
    mlp = replace(shape, f=experts.f_s)
    return (*mlp_up_projections(mlp), activation(mlp), mlp_down(mlp))


def moe_layer_ops(shape: OpShape, experts: ExpertDims) -> tuple[OpCost, ...]:
    """Every op of a MoE layer, in forward order: the attention block as in a dense layer,
    then the router, the permutation, the routed experts and the shared experts instead of the
    dense MLP (Megatron-Core MoELayer). Its exchanges are priced as communication."""
    # A dense layer ends with fc1 (its projections), the activation, fc2 and the residual add:
    # what stays is the attention block and the pre-MLP norm, a module of its own here
    # (layernorm).
    *attention, pre_mlp_norm = layer_ops(shape)[: -(len(mlp_up_projections(shape)) + 3)]
    moe = (
        router(shape, experts),
        token_permutation(shape, experts),
        *local_expert_sort(shape, experts),
        *routed_experts(shape, experts),
        *(_in(op, "shared_experts") for op in shared_expert_ops(shape, experts)),
    )
    return (
        *attention,
        _in(pre_mlp_norm, "layernorm"),
        *(_in(op, "moe") for op in moe),
        residual_dropout_add(shape, "MLP dropout + residual"),
    )


def routed_experts(shape: OpShape, experts: ExpertDims) -> tuple[OpCost, ...]:
    """The routed experts of one MoE layer on a rank: fc1, the activation (moe_act, with the
    clamp of a clamped GLU before it) and fc2 (with its biases after it), all in moe."""
    clamp = (expert_glu_clamp(shape, experts),) if shape.glu_clamp else ()
    bias = (expert_bias_add(shape, experts),) if shape.expert_bias else ()
    return (
        _in(expert_up(shape, experts), "moe"),
        *(_in(op, "moe", "moe_act") for op in clamp),
        _in(expert_activation(shape, experts), "moe", "moe_act"),
        _in(expert_down(shape, experts), "moe"),
        *(_in(op, "moe") for op in bias),
    )


def expert_glu_clamp(shape: OpShape, experts: ExpertDims) -> OpCost:
    """The clamp of a clamped GLU's inputs (`OpShape.glu_clamp`) as Megatron-Core runs it
    before its fused activation: fc1's output chunked into its two halves, the gate clamped
    from above and the linear half on both sides, and the two concatenated again
    (weighted_bias_quick_geglu_impl, fusions/fused_bias_geglu.py).

    Elements: N = ETP·T·k rows × f_e/ETP per half, β bytes each. Forward: each clamp reads
    and writes its half (2β + 2β), the cat reads and writes both (4β): 8β per element.
    Backward, autograd's clamp_backward (FunctionsManual.cpp: where(mask, grad, 0) with the
    mask built from the input, one byte per element): the two-sided clamp's two comparisons
    (β + 1 each), their logical and (3), the where (2β + 1); the one-sided clamp's comparison
    (β + 1) and where (2β + 1); the chunk's re-concatenation (4β): 11β + 8 bytes per element.
    What a TorchDispatchMode counts running Megatron-Core's own function
    (tests/test_megatron_eager.py). FLOPs: one comparison per bound."""
    elements = experts.et * experts.routed * experts.f_e
    forward = Work(3.0 * elements, 8.0 * shape.beta * elements)
    backward = Work(3.0 * elements, (11.0 * shape.beta + 8.0) * elements)
    return OpCost("expert GLU clamp", "vector", forward, backward)


def expert_bias_add(shape: OpShape, experts: ExpertDims) -> OpCost:
    """The routed experts' fc2 biases as Megatron-Core adds them (`OpShape.expert_bias`):
    per local expert, its rows plus bias × routing probability, then the experts' rows
    concatenated and cast back to the activations' type (TEGroupedMLP._apply_bias; fc2 is
    built with skip_bias_add, so its GEMM adds none).

    Elements: N = ETP·T·k rows × h of β bytes; the products, sums and cat in w bytes, the
    wider of β and the probabilities' type (the activations' under the alltoall dispatcher, as
    GPT-OSS leaves the router; fp32 under the flex dispatchers, `ExpertDims.fp32_probs`).
    Forward: bias × probability writes w, the sum reads β + w and writes w, the cat reads and
    writes w, the cast back (w ≠ β) reads w and writes β: 6β per element at w = β, 28 bytes at
    bf16 with fp32 probabilities. Backward: the incoming gradient cast up and the input's
    gradient cast back (w ≠ β: 2(β + w)), the probability's and the bias's gradients each a
    product (2w) and a reduction (w), the split's re-concatenation (2β): 8β at w = β, 40 bytes
    at bf16 with fp32. What a TorchDispatchMode counts running Megatron-Core's own function
    (tests/test_megatron_eager.py). FLOPs: 2 forward (a product and a sum), 4 backward."""
    elements = experts.et * experts.routed * shape.h
    beta = shape.beta
    w = max(beta, FP32_PROBS) if experts.fp32_probs else beta
    casts = 0 if w == beta else w + beta
    forward = Work(2.0 * elements, (w + (beta + 2 * w) + 2 * w + casts) * elements)
    backward = Work(4.0 * elements, (6 * w + 2 * beta + 2 * casts) * elements)
    return OpCost("expert bias", "vector", forward, backward)


# Bytes of one routing probability the flex dispatchers hand the experts (fp32).
FP32_PROBS = 4


# --------------------------------------------------------------------------- the model's ends


def embedding(shape: OpShape) -> OpCost:
    """Token (and learned position) embedding lookup on the first stage, plus its dropout.

    Forward reads b·s/c rows of h (and the position rows), writes the sum: 3β per element with
    positions, 2β without (+ the dropout's read, write and mask). Backward: PyTorch's dense
    embedding backward writes a zeroed [V'/t, h] gradient and scatter-adds the b·s/c rows into it,
    which Megatron then adds into the fp32 main gradient (read β + 4, write 4): V'/t·h·(2β + 8)
    bytes plus the rows (`torch.nn.functional.embedding` backward; Megatron DDP grad buffers).
    """
    rows = shape.tokens * shape.h
    forward_bytes = (3.0 if shape.positions else 2.0) * shape.beta * rows
    if shape.dropout > 0:
        forward_bytes += (2.0 * shape.beta + 1) * rows
    table = shape.vocab * shape.h + shape.positions * shape.h
    backward_bytes = table * (2.0 * shape.beta + 8) + 2.0 * shape.beta * rows
    return OpCost(
        "embedding", "vector", Work(rows, forward_bytes), NOTHING, Work(rows, backward_bytes)
    )


def lm_head(shape: OpShape) -> OpCost:
    """Output layer: [b·s/c, h]·[h, V'/t] (vocabulary-parallel logits, Megatron)."""
    return gemm("lm head", shape.tokens, shape.h, shape.vocab, shape.beta)


def _logits(shape: OpShape) -> float:
    """b·s/c·V'/t: the logit elements of the rank's slice of the vocabulary."""
    return float(shape.tokens * shape.vocab)


def megatron_cross_entropy(shape: OpShape) -> OpCost:
    """Megatron's vocabulary-parallel cross-entropy, eager, in fp32 (Megatron-LM
    `tensor_parallel/cross_entropy.py`, `_VocabParallelCrossEntropy` with
    `VocabParallelCrossEntropy`'s steps, megatron-core 0.9.0 and 0.19.2 alike), one kernel per
    PyTorch operator, each over the whole [b·s/c, V'/t] tensor in HBM.

    Bytes per logit element, forward: logits.float() reads β and writes 4; the max over the
    vocabulary reads 4; the in-place subtraction of the max reads and writes 4 + 4; torch.exp
    in place 4 + 4; the sum reads 4; the in-place division by the sum (exp_logits.div_, the
    softmax it saves) 4 + 4: β + 36. Backward: grad_input.mul_(grad_output) 4 + 4 (the target
    column's update touches b·s/c elements only), then autograd casts the fp32 gradient to the
    logits' 16-bit type (reads 4, writes β): β + 12. About 5 FLOPs per element forward (max,
    subtract, exp, sum, divide), 2 backward. The all-reduces of b·s/c floats over TP are
    latency-sized and not counted. `kernels: unfused` (PyTorch's F.cross_entropy on fp32
    logits) is priced the same.
    """
    elements = _logits(shape)
    forward = Work(5.0 * elements, (shape.beta + 36.0) * elements)
    backward = Work(2.0 * elements, (shape.beta + 12.0) * elements)
    return OpCost("cross-entropy (fp32)", "vector", forward, backward)


def native_fused_cross_entropy(shape: OpShape) -> OpCost:
    """Megatron-Core's fused cross-entropy (--cross-entropy-loss-fusion with
    --cross-entropy-fusion-impl native: `megatron/core/fusions/fused_cross_entropy.py`,
    fused_vocab_parallel_cross_entropy, megatron-core 0.9.0 and 0.19.2): the same fp32 steps as
    `megatron_cross_entropy`, in four functions each compiled by `jit_fuser` (torch.compile from
    PyTorch 2.2, `megatron/core/jit.py`) into one pass over the logits.

    Bytes per logit element, forward: calculate_logits_max casts to fp32 and reduces the max in
    one pass (reads β, writes the fp32 copy 4); calculate_predicted_logits subtracts the max,
    exponentiates in place and sums (4 + 4); calculate_cross_entropy_loss divides by the sum in
    place (4 + 4): β + 20. Backward: calculate_gradients reads the saved softmax (4), scales it
    by the incoming gradient and writes both the in-place result back to the saved tensor (4: a
    compiled function copies its input's mutation back) and the 16-bit gradient (β): β + 8.
    FLOPs as `megatron_cross_entropy`; two all-reduces of b·s/c floats, not counted.
    """
    elements = _logits(shape)
    forward = Work(5.0 * elements, (shape.beta + 20.0) * elements)
    backward = Work(2.0 * elements, (shape.beta + 8.0) * elements)
    return OpCost("cross-entropy (fused)", "vector", forward, backward)


def te_cross_entropy(shape: OpShape) -> OpCost:
    """Transformer Engine's cross-entropy (--cross-entropy-loss-fusion with
    --cross-entropy-fusion-impl te: `transformer_engine/pytorch/triton/cross_entropy.py`, TE
    v2.2 and v2.3 alike, what NeMo 25.04 runs): two Triton kernels per row of logits in the
    forward pass, none of them writing an fp32 copy.

    Bytes per logit element, forward: online_softmax_kernel reads the 16-bit logits once for the
    row's max and sum (β); cross_entropy_kernel reads them again and writes the gradient
    (softmax − one-hot)/N over them in place (β + β): 3β. Backward: element_mul_kernel scales
    that gradient by the incoming one in place (β + β; Megatron's per-token loss gives a
    gradient that is not the scalar 1.0 the kernel skips for): 2β. About 4 FLOPs per element in
    each forward kernel (max, subtract, exp, sum; exp, divide, subtract, scale), 1 backward.
    The all-gather of 3 floats per token over TP is latency-sized and not counted.
    """
    elements = _logits(shape)
    forward = Work(8.0 * elements, 3.0 * shape.beta * elements)
    backward = Work(1.0 * elements, 2.0 * shape.beta * elements)
    return OpCost("cross-entropy (Transformer Engine)", "vector", forward, backward)


def cross_entropy(shape: OpShape) -> OpCost:
    """The LM loss's kernels on the rank's logits: Megatron's eager fp32 loss, Megatron-Core's
    fused one or Transformer Engine's (`OpShape.loss`, training.cross_entropy_fusion)."""
    if shape.loss == "te":
        return te_cross_entropy(shape)
    if shape.loss == "native":
        return native_fused_cross_entropy(shape)
    return megatron_cross_entropy(shape)


def first_stage_ops(shape: OpShape) -> tuple[OpCost, ...]:
    """What the first pipeline stage runs before its layers."""
    return (embedding(shape),)


def last_stage_ops(shape: OpShape) -> tuple[OpCost, ...]:
    """What the last pipeline stage runs after its layers: final norm, LM head, loss."""
    return (norm(shape, "final norm"), lm_head(shape), cross_entropy(shape))


# --------------------------------------------------------------------------- multi-token prediction
#
# One multi-token prediction module k (DeepSeek-V3 §2.2, eq. 21-25; Megatron-Core
# transformer/multi_token_prediction.py, MultiTokenPredictionLayer, d98e8a64): the embedding of
# the tokens shifted by k, RMSNorm'd (enorm), and the previous depth's hidden state, RMSNorm'd
# (hnorm), concatenated and projected back to h (eh_proj, a column-parallel linear), one
# transformer layer shaped like the model's last, its own final norm, then the shared output
# head and the loss on the module's logits (GPTModel._postprocess, process_mtp_loss). Full
# recompute checkpoints the projection and the layer (`_checkpointed_forward`); the embedding,
# final norm, head and loss run once.


def mtp_concat(shape: OpShape) -> OpCost:
    """torch.cat of the two normed [rows, h] inputs into [rows, 2h]: reads 2·β·rows·h and writes
    as much (4β bytes per row element). Its backward hands each norm a column slice of the
    gradient, which the norm's kernel copies to a contiguous tensor: the same bytes again."""
    elements = shape.norm_tokens * shape.h
    work = Work(0.0, 4.0 * shape.beta * elements)
    return OpCost("mtp concat", "vector", work, work)


def mtp_projection_ops(shape: OpShape) -> tuple[OpCost, ...]:
    """The module's inputs to its layer: enorm and hnorm over the rows, the concatenation, and
    eh_proj [b·s/c, 2h]·[2h, h/t] (column parallel with gather_output off; under SP Transformer
    Engine gathers the sequence first, so the GEMM runs on b·s/c rows)."""
    return (
        norm(shape, "mtp enorm"),
        norm(shape, "mtp hnorm"),
        mtp_concat(shape),
        gemm("mtp eh proj", shape.tokens, 2 * shape.h, shape.h // shape.t, shape.beta),
    )


def mtp_head_ops(shape: OpShape) -> tuple[OpCost, ...]:
    """What the module runs once outside its checkpoint: the embedding of the shifted tokens
    (the last stage's copy of the word embedding, its table-sized gradient each micro-batch as
    the first stage's), the module's final norm, the shared output head and the loss."""
    return (embedding(shape), norm(shape, "mtp final norm"), lm_head(shape), cross_entropy(shape))


# Adam with fp32 master weights (Megatron `optimizer/optimizer.py`, apex/TE fused Adam): reads
# the fp32 gradient, master weight and both moments (16 bytes), writes the master weight and the
# moments (12) and the 16-bit working copy (2); the gradient buffer is zeroed for the next step
# (4). About 11 FLOPs per parameter (Calculon `calculon/llm/layers.py`, get_optim_step_flops).
# With the master in μ bytes and each moment in m (training.optimizer_state; TE FusedAdam and
# Apex DistributedFusedAdam read and write the state in its own format): 10 + 2·μ + 4·m, 34
# with fp32 state.
ADAM_FIXED_BYTES_PER_PARAMETER = 10  # the fp32 gradient read, the 16-bit copy, the zeroing
ADAM_FLOPS_PER_PARAMETER = 11
# Around the update, Megatron's mixed-precision optimizer reads the fp32 gradients for the
# gradient norm (4 bytes) and, with fp16 loss scaling, unscales them in place while checking for
# inf/NaN (read + write: 8 bytes) (`MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan`,
# `clip_grad_norm_fp32`); bf16 needs no loss scale.
GRAD_NORM_BYTES_PER_PARAMETER = 4
UNSCALE_BYTES_PER_PARAMETER = 8


# Under FSDP2 the step is torch.optim's AdamW on the rank's fp32 shards (torch/optim/adam.py,
# the implementation torchtitan's optimizer.implementation selects), after torch's gradient
# clipping:
# * fused (_fused_adamw_, one kernel): reads p, g, m, v and writes p, m, v: 28 bytes;
# * foreach (_multi_tensor_adam, decoupled weight decay, not capturable): eight multi-tensor
#   kernels, each reading and writing whole fp32 tensors: p·(1 − lr·λ) (8), m.lerp_(g) (12),
#   v·β2 (8), v += (1 − β2)·g·g (12, g read once), d = √v (8), d /= √(1 − β2^t) (8), d += ε (8),
#   p += −step·m/d (16): 80 bytes;
# * clip_grad_norm_ (torchtitan's clipping, foreach=True; torch/nn/utils/clip_grad.py):
#   _foreach_norm reads every gradient (4) and _clip_grads_with_norm_ always scales them by the
#   clamped coefficient, read and write (8): 12 bytes. FSDP2 keeps no 16-bit working copy (the
#   all-gather casts) and zero_grad frees the gradients: neither is a pass.
TORCH_ADAM_BYTES_PER_PARAMETER = {"fused": 28, "foreach": 80}
TORCH_CLIP_BYTES_PER_PARAMETER = 12


def optimizer_bytes_per_parameter(
    framework: str,
    implementation: str = "fused",
    loss_scaling: bool = False,
    master: int = 4,
    moment: int = 4,
    model: int = 4,
) -> int:
    """HBM bytes per parameter of one optimizer step: Megatron's and DeepSpeed's fused Adam
    (10 + 2·μ + 4·m: 34 with the fp32 `master` μ and `moment` m) and gradient norm (4); under
    FSDP2 torch.optim's Adam in its `implementation` and torch's clipping, over parameters,
    gradients and state of `model` bytes each (their counts are fp32's, 4); with fp16 loss
    scaling 8 more."""
    if framework == "fsdp2":
        fp32 = TORCH_ADAM_BYTES_PER_PARAMETER[implementation] + TORCH_CLIP_BYTES_PER_PARAMETER
        per = fp32 * model // 4
    else:
        adam = ADAM_FIXED_BYTES_PER_PARAMETER + 2 * master + 4 * moment
        per = adam + GRAD_NORM_BYTES_PER_PARAMETER
    return per + (UNSCALE_BYTES_PER_PARAMETER if loss_scaling else 0)


def optimizer_step(parameters: float, bytes_per_parameter: int) -> Work:
    """The optimizer step over `parameters` parameters (a rank's shard under ZeRO): vector work
    of `bytes_per_parameter` (`optimizer_bytes_per_parameter`)."""
    return Work(ADAM_FLOPS_PER_PARAMETER * parameters, bytes_per_parameter * parameters)


# --------------------------------------------------------------------------- weights


def attention_matrix_elements(shape: OpShape) -> int:
    """Weights of one layer's attention matrices on one TP rank (t = 1: the model's), heads =
    n/t: QKV h·(heads + 2·kv)·k and output heads·k·h, kv = max(g/t, 1) key/value heads;
    latent attention's down projections h·(d_c' + d_c + d_h^R) (whole on every rank), up
    projections heads·(d_c'·(d_h + d_h^R) + d_c·(d_h + v)) (h in place of d_c' without a query
    latent) and output heads·v·h (DeepSeek-V2 §2.1.2). Norms are not matrices: not here."""
    heads = shape.heads
    if not shape.kv_latent:
        kv = shape.kv_heads
        return shape.h * (heads + 2 * kv) * shape.k + heads * shape.k * shape.h
    v, nope = shape.value_channels, shape.k - shape.rope
    down = shape.h * (shape.q_latent + shape.kv_latent + shape.rope)
    up = heads * ((shape.q_latent or shape.h) * shape.k + shape.kv_latent * (nope + v))
    return down + up + heads * v * shape.h


# --------------------------------------------------------------------------- FP8 / FP4 recipes
#
# A low-precision recipe (`planc.dims.Quantized`) runs the linear layers' GEMMs on quantized
# operands and pays for the quantization in kernels of its own, bound by HBM (torchao float8
# README: FP8 pays only when t_bf16 − t_fp8 > t_overhead; TE docs 'Performance considerations',
# 'Quantization fusions'). The attention core, the router, the LM head, norms and activations
# stay 16-bit, unless the recipe names the attention core (`fp8_attention`) or the LM head
# (`HEAD_GEMMS`).

# The GEMMs a recipe quantizes (Transformer Engine Linear/LayerNormLinear/GroupedLinear in
# Megatron-Core; torchao Float8Linear on nn.Linear), and those whose input a norm produces,
# which Transformer Engine's fused LayerNormLinear quantizes inside the norm kernel.
QUANTIZED_GEMMS = frozenset(
    {
        "qkv",
        "qkv (wq)",
        "qkv (wk)",
        "qkv (wv)",
        "mlp fc1 (w1)",
        "mlp fc1 (w3)",
        "attention output",
        "mlp fc1",
        "mlp fc2",
        "mla q down",
        "mla kv down",
        "mla q up",
        "mla kv up",
        "expert fc1",
        "expert fc2",
        "mtp eh proj",
    }
)
NORM_FED_GEMMS = frozenset({"qkv", "mlp fc1", "mla q down", "mla kv down"})
# The LM head, quantized only where the recipe says so (`Quantized.output_proj`: Megatron-Core's
# fp8_output_proj runs it as Transformer Engine's TELMHeadColumnParallelLinear in the MXFP8
# autocast; its input comes from the final norm, a TENorm of its own, so it is cast in a
# kernel of its own).
HEAD_GEMMS = frozenset({"lm head"})
# An abs-max and a scaled cast: about two FLOPs per element read (vector work, memory bound).
QUANTIZE_FLOPS_PER_ELEMENT = 2.0


def quantized_gemm(op: OpCost, q: Quantized, beta: int) -> OpCost:
    """`op` with quantized operands: each pass reads its two inputs at bits/8 bytes per element
    and writes its output at β (fprop X·W, dgrad dY·Wᵀ, wgrad Xᵀ·dY; Micikevicius et al. 2022,
    FP8 Formats for Deep Learning, §4: FP8 inputs, higher-precision outputs). A 16-bit weight
    gradient (torchao rowwise_with_gw_hp) keeps its 16-bit bytes."""
    g = op.shape
    if g is None:
        return op
    qb = q.data_bits / 8
    m, n, k, batch = g.m, g.n, g.k, g.batch
    flops = op.forward.flops
    forward = Work(flops, batch * ((m * k + k * n) * qb + m * n * beta))
    dgrad = Work(op.backward_data.flops, batch * ((m * n + k * n) * qb + m * k * beta))
    wgrad = op.backward_weight
    if not q.wgrad_high_precision:
        wgrad = Work(op.backward_weight.flops, batch * ((m * k + m * n) * qb + k * n * beta))
    return replace(
        op,
        forward=forward,
        backward_data=dgrad,
        backward_weight=wgrad,
        quantized=True,
        high_precision_wgrad=q.wgrad_high_precision,
    )


def quantize_bytes(elements: float, q: Quantized, beta: int, reads: int, usages: int) -> float:
    """HBM bytes of quantizing `elements`: `reads` 16-bit reads (1: the scale is known or local,
    2: the amax first) and `usages` quantized writes of bits/8 bytes each, with their block
    scales (TE docs 'FP8 Delayed Scaling', 'Current Scaling': one read for delayed, two for
    current; a second write for the columnwise copy)."""
    qb = q.data_bits / 8
    scales = q.scale_bytes / q.scale_block if q.scale_block else 0.0
    return elements * (reads * beta + usages * (qb + scales))


def cast_kernels(
    elements: float, q: Quantized, beta: int, reads: int, usages: int, share: float
) -> list[Work]:
    """The kernels that quantize one tensor of `elements`: with two reads an amax pass (reads
    β per element) and the cast (reads β, writes the copies); with one read the cast alone;
    with none (fused into the norm) the writes alone; where each copy is cast on its own
    (`Quantized.separate_casts`), one cast per copy, each reading the 16-bit tensor. `share`
    scales them (a weight cast once per step)."""
    copy = quantize_bytes(elements, q, beta, 0, 1)
    flops = QUANTIZE_FLOPS_PER_ELEMENT * elements * share
    if q.separate_casts and reads:
        return [Work(flops, share * (elements * beta + copy)) for _ in range(usages)]
    writes = usages * copy
    kernels = [Work(flops, share * elements * beta)] if reads >= 2 else []
    kernels.append(Work(flops, share * ((1 if reads else 0) * elements * beta + writes)))
    return kernels


# The GEMMs whose input reaches them through a sequence-parallel all-gather (column-parallel:
# the attention's and MLP's first projections, latent attention's up projections, the MTP
# projection and the LM head), and those whose output gradient does in backward (row-parallel).
GATHERED_INPUTS = frozenset(
    {
        "qkv",
        "qkv (wq)",
        "qkv (wk)",
        "qkv (wv)",
        "mlp fc1",
        "mlp fc1 (w1)",
        "mlp fc1 (w3)",
        "mla q up",
        "mla kv up",
        "mtp eh proj",
        "lm head",
    }
)
GATHERED_GRADIENTS = frozenset({"attention output", "mlp fc2"})


def quantization(
    op: OpCost, q: Quantized, beta: int, weight_share: float, shard: float = 1.0
) -> tuple[OpCost, ...]:
    """The quantization kernels of one quantized GEMM, each on HBM with its own fixed cost:
    forward the input X (its read fused into the norm for a norm-fed GEMM under TE) and the
    weight W (`weight_share` of a whole cast per micro-batch, `OpCost.calls`: 1/m where TE
    casts the FP8 weight once per step, on the first micro-batch, and caches it, or the
    optimizer writes the FP8 parameters under param_gather; 1 where torchao casts every time),
    backward the output gradient dY.
    Each tensor gets the copies the GEMMs need (rowwise, and columnwise where the hardware or
    recipe needs one). A tensor that a quantized sequence-parallel all-gather brings to the
    GEMM is cast on this rank's `shard` of its rows (`gathered_casts`)."""
    g = op.shape
    if g is None:
        return ()
    x, w, dy = g.batch * g.m * g.k, g.batch * g.k * g.n, g.batch * g.m * g.n
    usages = 1 if q.wgrad_high_precision else q.usages
    x_reads = 0 if q.norm_fused and op.name in NORM_FED_GEMMS else q.reads
    label = f"{op.name} quantize ({q.recipe.value})"
    # a norm-fed input's quantized copies are written by the norm kernel, not a cast of TE's
    x_engine = cast_engine(q) if x_reads else "vector"
    x_share = shard if op.name in GATHERED_INPUTS else 1.0
    dy_share = shard if op.name in GATHERED_GRADIENTS else 1.0
    # a separate projection's input is the previous one's, cast already (`shared_input`)
    inputs, x_transposes = (
        ([], []) if op.shared_input else gathered_casts(x, x_share, q, beta, x_reads, usages)
    )
    weights = cast_kernels(w, q, beta, q.reads, q.usages, 1.0)
    dy_casts, dy_transposes = gathered_casts(dy, dy_share, q, beta, q.reads, usages)
    backward = [*x_transposes, *dy_casts, *dy_transposes]
    return (
        *(OpCost(label, x_engine, work, NOTHING, modules=op.modules) for work in inputs),
        *(
            OpCost(label, cast_engine(q), work, NOTHING, modules=op.modules, calls=weight_share)
            for work in weights
        ),
        *(OpCost(label, cast_engine(q), NOTHING, work, modules=op.modules) for work in backward),
        *backward_rescales(op, q, beta),
    )


def gathered_casts(
    elements: float, share: float, q: Quantized, beta: int, reads: int, usages: int
) -> tuple[list[Work], list[Work]]:
    """The kernels that quantize a tensor of `elements` (as the GEMM reads it, gathered) of
    which this rank holds `share` (1: the whole tensor, no quantized gather): the casts, and
    the transposes backward makes of the gathered data. Transformer Engine quantizes the local
    sequence shard and all-gathers the quantized data (layernorm_linear.py and linear.py forward:
    the input quantizer before `gather_along_first_dim` or `fill_userbuffers_buffer_for_all_gather`;
    base.py `grad_output_preprocess` for a row-parallel output gradient; TE 2.14). A per-tensor
    FP8 tensor gathers its rowwise data only (`supports_only_rowwise_all_gather`): where the
    architecture needs a columnwise copy (Hopper), backward transposes the gathered FP8 data,
    reading and writing bits/8 bytes an element of it (`update_usage(columnwise_usage=True)`).
    A block-scaled recipe casts both copies on the shard and gathers each as its GEMM needs it."""
    if share >= 1.0:
        return cast_kernels(elements, q, beta, reads, usages, 1.0), []
    local = elements * share
    if q.scale_block or usages == 1:
        return cast_kernels(local, q, beta, reads, usages, 1.0), []
    transpose = Work(0.0, 2.0 * elements * q.data_bits / 8)
    return cast_kernels(local, q, beta, reads, 1, 1.0), [transpose]


def sp_cast_share(q: Quantized, shape: OpShape | None) -> float:
    """The share of a sequence-parallel GEMM's gathered rows this rank quantizes: s_r/s_c (1/t)
    where Transformer Engine quantizes the local shard before a quantized SP all-gather
    (`Quantized.tp_gather_fp8` with TE's casts, `gathered_casts`), else 1. torchao's Float8 TP
    (torchtitan's tensorwise) also casts before its gather but is not verified here: 1."""
    if shape is None or not (q.te_casts and q.tp_gather_fp8) or shape.s_r >= shape.s_c:
        return 1.0
    return shape.s_r / shape.s_c


def cast_engine(q: Quantized) -> Engine:
    """Where a recipe's casts are priced: Transformer Engine's kernels at their measured rate
    (`te-cast`), torchao's (compiled or eager PyTorch) on the HBM curve (`vector`)."""
    return "te-cast" if q.te_casts else "vector"


def backward_rescales(op: OpCost, q: Quantized, beta: int) -> tuple[OpCost, ...]:
    """The kernels that rescale a quantized GEMM's backward outputs where the recipe runs them
    at unit scales (`Quantized.rescaled_backward`: torchao's axiswise scales with slow
    accumulation, torchao/float8/float8_ops.py addmm_float8_unwrapped; pytorch/ao #2184): dX
    (b·m·k elements) and, unless it stays 16-bit, dW (k·n), each read and written once more at
    β bytes, one multiply per element: 2β·b·m·k and 2β·k·n bytes."""
    g = op.shape
    if g is None or not q.rescaled_backward:
        return ()
    label = f"{op.name} backward rescale ({q.recipe.value})"
    dx = g.batch * g.m * g.k
    rescales = [OpCost(label, "vector", NOTHING, Work(dx, 2.0 * beta * dx), modules=op.modules)]
    if not q.wgrad_high_precision:
        dw = g.batch * g.k * g.n
        rescales.append(
            OpCost(label, "vector", NOTHING, NOTHING, Work(dw, 2.0 * beta * dw), modules=op.modules)
        )
    return tuple(rescales)


def with_quantized_gemms(
    ops: tuple[OpCost, ...],
    q: Quantized,
    beta: int,
    weight_share: float,
    shape: OpShape | None = None,
) -> tuple[OpCost, ...]:
    """`ops` (a layer's, or the head's) with the recipe's GEMMs quantized, each preceded by its
    quantization kernels (the LM head's too under `Quantized.output_proj`), and cuDNN's fused
    attention in FP8 where the recipe runs it there (`Quantized.attention`, `fp8_attention`;
    `shape` the layer's, whose SP split also sizes the casts of gathered tensors,
    `sp_cast_share`); every other op as it was."""
    out: list[OpCost] = []
    names = QUANTIZED_GEMMS | HEAD_GEMMS if q.output_proj else QUANTIZED_GEMMS
    shard = sp_cast_share(q, shape)
    for op in ops:
        if op.engine == "matrix" and op.name in names and q.linear_speedup is not None:
            out.append(measured_linear(op, q.linear_speedup))
        elif op.engine == "matrix" and op.name in names:
            out.extend(quantization(op, q, beta, weight_share, shard))
            out.append(quantized_gemm(op, q, beta))
        elif op.engine == "cudnn" and q.attention is not None and shape is not None:
            out.extend(fp8_attention(op, shape, q.attention))
        else:
            out.append(op)
    return tuple(out)


def measured_linear(op: OpCost, table: SpeedupTable) -> OpCost:
    """A quantized linear priced whole from its recipe's measured table (fp8.json
    `linear_speedup`): its 16-bit GEMM passes (FLOPs, bytes and rate of the 16-bit op) divided by
    the table's speed-up at its forward shape, m rows × k inner × n outputs; its casts, rescales
    and quantized GEMMs are in the measurement, so none is listed of its own. The table gives
    forward and backward together: every pass takes the same speed-up."""
    g = op.shape
    if g is None:
        return op
    return replace(op, speedup=table.at(g.m, g.k, g.n))


def fp8_attention(op: OpCost, shape: OpShape, a: AttentionQuant) -> tuple[OpCost, ...]:
    """cuDNN's fused attention `op` (`flash_attention`) in FP8 under recipe `a`
    (Transformer Engine's FusedAttnFunc with fp8_dpa, attention/dot_product_attention/
    backends.py and utils.py combine_and_quantize, TE 2.18), as its kernels:

    - forward, Q, K and V of this rank, E = b·(s/c)·((n/t)·k + (g/t)·(k + k_v)) elements:
      per-tensor scaling flattens and concatenates them (2β·E bytes) and casts the result
      with one scale (`reads` 16-bit reads, one byte written each; current scaling's amax is
      a pass of its own); MXFP8 casts each along the sequence and the head dimension (two
      copies of 1 + 1/32 bytes per element);
    - the kernel: the 16-bit kernel's FLOPs at cuDNN's 16-bit fraction times the measured
      speed-up of its FP8 kernel at that length (`planc.perf.compute.fp8_speedups`); its HBM
      bytes scaled by the FP8 copies' bytes per 16-bit byte (the kernel is bound by its
      math at the lengths trained, so the bytes decide no time planc prices);
    - delayed scaling writes O in FP8 and dequantizes it for the caller (one byte read, β
      written per element of O), and its backward writes dQ, dK, dV in FP8 and dequantizes
      them; current scaling and MXFP8 write O and dQKV in 16 bits;
    - backward, dO cast to FP8 as Q, K, V are;
    - under a sliding window, at a query/key head below 96 (`D64_BELOW`), the
      backward kernel computes the whole causal triangle: cuDNN's FP8 backward at head dimension
      64 grows with the square of the sequence whatever the window (cudnn-frontend's gpt_oss
      rows on a GB200: 0.27, 0.86, 3.01, 11.3 and 43.9 ms from 2k to 32k tokens at a 1,024-token
      window, cuDNN 9.19.1, results/gb200_919_only_cudnn; 0.55 to 91.7 ms at a 128-token window,
      cuDNN 9.27, results/gpt_oss/gb200/gpt_oss_20260813_110803.csv), where its forward and the
      16-bit backward grow with the band. Not measured at 128 or above, where the band is priced.

    Every kernel belongs to the attention core: selective recompute repeats the forward ones."""
    beta = shape.beta
    dv = shape.value_channels
    qkv = shape.tokens * (shape.heads * shape.k + shape.core_kv_heads * (shape.k + dv))
    o = shape.tokens * shape.heads * dv
    per = 1.0 + (a.scale_bytes / a.scale_block if a.scale_block else 0.0)  # bytes per element
    engine: Engine = "cudnn-mxfp8" if a.scale_block else "cudnn-fp8"
    # per-tensor recipes' torch.cat of Q, K and V: a copy, on the HBM curve
    concat = [Work(0.0, 2.0 * beta * qkv)] if a.concatenates else []
    forward = _attention_casts(qkv, a, beta, per)
    backward = _attention_casts(o, a, beta, per)
    if a.output_fp8:
        forward.append(Work(float(o), o * (1.0 + beta)))
        backward.append(Work(float(qkv), qkv * (1.0 + beta)))
    scale = per / beta  # the kernel reads one FP8 copy of each operand: bytes per 16-bit byte
    kernel = replace(
        op,
        name=f"flash attention ({a.recipe.value})",
        engine=engine,
        forward=Work(op.forward.flops, op.forward.bytes * scale),
        backward_data=Work(op.backward_data.flops, op.backward_data.bytes * scale),
    )
    label = f"attention quantize ({a.recipe.value})"

    def cast(fwd: Work, bwd: Work, engine: Engine = "te-cast") -> OpCost:
        # Transformer Engine's casts (combine_and_quantize)
        return OpCost(label, engine, fwd, bwd, attention_core=True, modules=op.modules)

    return (
        *(cast(work, NOTHING, "vector") for work in concat),
        *(cast(work, NOTHING) for work in forward),
        *_windowless_backward(kernel, shape, scale),
        *(cast(NOTHING, work) for work in backward),
    )


# The query/key head widths priced as cuDNN's kernels measured at 64 (GPT-OSS's), the nearest of
# the measured 64 and 128: its 16-bit rates (`planc.perf.compute.cudnn_fraction`), and its FP8
# backward, measured to ignore a sliding window (none is published at 128).
D64_BELOW = (64 + 128) // 2


def _windowless_backward(kernel: OpCost, shape: OpShape, scale: float) -> tuple[OpCost, ...]:
    """The FP8 attention `kernel`, its backward over the whole causal triangle where a windowed
    layer's runs so (`fp8_attention`; a head below `D64_BELOW`): two ops, the forward over the band and the backward over
    the triangle, each looked up at its own problem (`scale`: FP8 bytes per 16-bit byte)."""
    if not shape.window or shape.k >= D64_BELOW:
        return (kernel,)
    whole = flash_attention(replace(shape, window=0))
    backward = Work(whole.backward_data.flops, whole.backward_data.bytes * scale)
    return (
        replace(kernel, backward_data=NOTHING),
        replace(
            kernel,
            name=f"{kernel.name} backward, whole triangle",
            forward=NOTHING,
            backward_data=backward,
            shape=whole.shape,
        ),
    )


def _attention_casts(elements: float, a: AttentionQuant, beta: int, per: float) -> list[Work]:
    """The kernels that cast `elements` 16-bit elements to the attention's FP8: an amax pass
    first under current scaling (β per element), then one cast writing `a.usages` copies."""
    flops = QUANTIZE_FLOPS_PER_ELEMENT * elements
    amax = [Work(flops, elements * beta)] if a.reads >= 2 else []
    return [*amax, Work(flops, elements * (beta + a.usages * per))]
