"""One derivation of what a rank holds and what it computes in: its share of a layer
(`RankDims`, and `ExpertDims` for a MoE layer) and the run's number formats (`Numerics`).

Memory (`planc.memory`), the step model (`planc.perf`) and the communication schedule
(`planc.comm`) read these records from the `Plannable`; none of them divides a dimension by a
degree or chooses a byte width itself. Symbols as in Korthikanti et al. 2022 (arXiv 2205.05198)
and Narayanan et al. 2021 (arXiv 2104.04473): b micro-batch, s sequence, h hidden, n heads,
g key/value heads, k channels per head, f MLP inner size, V vocabulary; t, c the tensor- and
context-parallel degrees.

**One rounding rule.** A dimension split over a degree is rounded up, ⌈x/t⌉, as Megatron pads
what does not divide. In a plannable job heads, key/value heads and the MLP split exactly: the
tensor split (PLC003) is a precondition of a plan, so the rounding only ever acts on the
sequence shares ⌈s/c⌉ and ⌈s/c/t⌉, whose divisibility rules (PLC008, PLC009) a spec may relax.
"""

from __future__ import annotations

import math
from dataclasses import replace

from planc.presets.fp8 import SpeedupTable, architecture, recipe_table
from planc.record import record
from planc.spec.job import Gpu, Model, Training
from planc.vocab import MASTER_BYTES, DType, Fp8Recipe, MasterFormat, Precision, gated

# Megatron pads the vocabulary so that every tensor-parallel rank holds an equal, aligned
# slice: V' = ⌈V/(128·t)⌉·128·t (`--make-vocab-size-divisible-by 128`,
# megatron/training/vocab_utils.py).
VOCAB_DIVISOR = 128


def ceil_div(a: int, b: int) -> int:
    """⌈a/b⌉ for non-negative integers."""
    return -(-a // b)


def padded_vocab(V: int, t: int) -> int:
    """V' = ⌈V/(128·t)⌉·128·t: the vocabulary Megatron pads to, so that V'/t is a multiple of 128
    (megatron/training/vocab_utils.py, make_vocab_size_divisible_by)."""
    unit = VOCAB_DIVISOR * t
    return ceil_div(V, unit) * unit


# --- number formats ------------------------------------------------------------------------------


@record
class AttentionQuant:
    """The attention core in FP8 (`training.fp8.attention`; Transformer Engine's fp8_dpa on
    cuDNN's FusedAttention, FusedAttnFunc in attention/dot_product_attention/backends.py, TE
    2.18): Q, K and V cast to FP8 at the core's entry (per-tensor recipes: flattened,
    concatenated and cast with one scale; MXFP8: along the sequence and the head dimension, one
    E8M0 scale per 32 values), the kernel's FP8 matmuls, dO cast in backward. Delayed scaling
    writes O in FP8 and hands back a 16-bit copy; current scaling and MXFP8 write O in 16 bits.
    Saved for backward: Q, K, V in FP8, and O in FP8 (delayed) or 16 bits."""

    recipe: Fp8Recipe  # delayed | current | mxfp8
    reads: int  # 16-bit reads per cast: 1 (delayed's scale is known; MXFP8's local), 2 (current)
    usages: int  # quantized copies of Q, K, V: 1 per-tensor, 2 for MXFP8 (rowwise, columnwise)
    scale_block: int  # elements per scale: 0 (one fp32 per tensor), 32 (MXFP8)
    scale_bytes: int  # bytes of one scale

    @property
    def output_fp8(self) -> bool:
        """O written in FP8 and saved so (delayed scaling); 16 bits otherwise."""
        return self.recipe is Fp8Recipe.DELAYED

    @property
    def concatenates(self) -> bool:
        """Per-tensor recipes flatten and concatenate Q, K, V before their one cast
        (combine_and_quantize); MXFP8 casts each along both dimensions."""
        return self.scale_block == 0


@record
class Quantized:
    """What a low-precision recipe (precision fp8/fp4, `training.fp8`) quantizes, keeps and
    moves on this GPU: the linear layers' GEMM operands in `gemm` (fp8 or fp4), their
    weights, activations and gradients around them 16-bit (Transformer Engine docs,
    'Low precision training'; Megatron-LM docs low_precision_training.md). The numbers come
    from planc/presets/fp8.json, where each has its source."""

    recipe: Fp8Recipe
    gemm: DType  # fp8 | fp4: the quantized GEMMs' data type, whose peak prices them
    architecture: str  # hopper | blackwell | ... (fp8.json "architectures")
    data_bits: int  # bits per quantized element: 8, or 4 for nvfp4
    scale_block: int  # elements per scale of an activation or gradient (0: one per tensor)
    weight_scale_block: int  # elements per scale of a weight (0: one per tensor)
    scale_bytes: int  # bytes of one scale: 4 (fp32), 1 (E8M0, E4M3)
    usages: int  # quantized copies of one tensor the GEMMs need: rowwise (+ columnwise)
    reads: int  # high-precision reads per quantization: 1 (scale known or local), 2 (amax first)
    saved_input: bool  # the linear layers save their inputs quantized (Transformer Engine)
    param_gather: bool  # weights kept only quantized (--fp8-param-gather / fp8_model_init)
    gather_fp8: bool  # the parameter all-gather moves quantized weights
    # the sequence-parallel all-gathers move the linears' inputs and output gradients quantized
    # (Transformer Engine under Megatron; torchao's Float8 TP under torchtitan's tensorwise)
    tp_gather_fp8: bool
    norm_fused: bool  # the norm before QKV and fc1 writes the quantized input itself
    wgrad_high_precision: bool  # the weight-gradient GEMM stays 16-bit
    amax_reduction: bool  # per-tensor amaxes are all-reduced (delayed, current scaling)
    # The backward GEMMs' outputs rescaled after them in a kernel of their own (torchao's
    # axiswise scales: cuBLAS's per-tensor GEMM at unit scales, then the scales' outer product).
    rescaled_backward: bool
    # The recipe's GEMM kernels' rate against a per-tensor-scaled GEMM of its data type on this
    # architecture (block-scaled MMA: MXFP8 0.951 on Blackwell, fp8.json); it scales the peak.
    gemm_rate: float
    cached_weights: bool  # quantized weights kept across micro-batches (TE is_first_microbatch)
    # Each quantized copy cast on its own from the 16-bit tensor (torchao's MX linear: a dim0
    # cast in forward, a dim1 cast in backward), not both in one pass as Transformer Engine does.
    separate_casts: bool
    bf16_layers: int  # transformer layers kept in BF16 at each end of the model
    attention: AttentionQuant | None = None  # the attention core in FP8 (None: 16 bits)
    # A measured speed-up of each whole linear over its 16-bit GEMMs on this architecture
    # (fp8.json `linear_speedup`: torchao's rowwise on Hopper); None: priced kernel by kernel.
    linear_speedup: SpeedupTable | None = None
    # The LM head quantized too (Megatron-Core fp8_output_proj: Transformer Engine's
    # TELMHeadColumnParallelLinear in the MXFP8 autocast, 3f6a2ed8); else a 16-bit GEMM.
    output_proj: bool = False
    # The casts are Transformer Engine's kernels (its amax, cast and transpose), priced at the
    # rate they are measured to reach (`planc.perf.ops.cast_engine`); False: torchao's.
    te_casts: bool = False

    @property
    def label(self) -> str:
        """The quantized data type's name, for term names: fp8 or fp4."""
        return self.gemm.value


@record
class Numerics:
    """The run's number formats: bytes per element of every tensor planc counts or moves.

    Mixed precision (bf16/fp16; Micikevicius et al. 2018, Mixed Precision Training §3): 16-bit
    working weights, activations and GEMMs, an fp32 master copy in the optimizer, 16-bit
    gradients unless they accumulate into fp32 main-grad buffers (Megatron's
    `--accumulate-allreduce-grads-in-fp32`, training.grad_accum_fp32). fp32 training keeps one
    fp32 copy of the weights and fp32 gradients.
    """

    precision: DType  # training.precision
    weight: int  # w: the working weights the GEMMs read and ZeRO-3/FSDP gathers
    master: int  # the optimizer's master weights (4: fp32); 0 when the weights are fp32 already
    gradient: int  # γ: gradients as accumulated and reduced over data parallelism
    activation: int  # ε (β_a): activations saved for backward and sent (TP, CP, PP, EP)
    gemm: DType  # the data type the GEMMs run in, whose peak prices them
    loss_scaling: bool  # fp16's dynamic loss scale: an unscale pass before the update
    quantized: Quantized | None = None  # precision fp8/fp4: the recipe's formats (else None)
    moment: int = 4  # bytes of each Adam moment: 4, or 2 in 16 bits (training.optimizer_state)
    # the formats of the master weights and the moments (training.optimizer_state)
    master_format: MasterFormat = "fp32"
    moment_format: DType = DType.FP32
    # bytes per element of the data-parallel gradient reduction where it is not `gradient`'s:
    # FSDP2 reduces in its MixedPrecisionPolicy.reduce_dtype (training.reduce_dtype)
    reduced: int | None = None

    @property
    def reduce(self) -> int:
        """Bytes per gradient element the data-parallel reduction moves (`reduced`, else
        `gradient`)."""
        return self.gradient if self.reduced is None else self.reduced

    @property
    def weight_label(self) -> str:
        """The weights' data type, for names: bf16, fp16 or fp32 (bf16 under an fp8 or fp4
        recipe, whose weights stay 16-bit outside the GEMMs)."""
        return self.precision.value

    @property
    def gradient_label(self) -> str:
        """The gradients' data type, for names."""
        return DType.FP32.value if self.gradient == 4 else self.precision.value


def bf16_ranges(a: int, b: int, n: int, L: int) -> tuple[tuple[int, int], ...]:
    """The layers of [a, b) that Megatron keeps in BF16 with `n` at each end of L
    (`--first-last-layers-bf16`, `--num-layers-at-start-in-bf16` = `--num-layers-at-end-in-bf16`
    = n), as disjoint (start, end) ranges."""
    if n <= 0:
        return ()
    head = (max(a, 0), min(b, n, L))
    tail = (max(a, L - n, min(n, L)), min(b, L))
    return tuple(r for r in (head, tail) if r[0] < r[1])


def numerics(training: Training, gpu: Gpu | None = None) -> Numerics:
    """The number formats of `training` on `gpu` (see `Numerics`; the GPU decides what an fp8
    or fp4 recipe keeps: Hopper caches a transpose, Blackwell reads columnwise natively)."""
    base = numerics_for(training.precision, training.grad_accum_fp32)
    if training.framework == "fsdp2":
        # fully_shard casts the unsharded gradients to reduce_dtype for the reduce-scatter
        # (torch distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce)
        base = replace(base, reduced=DType(training.reduce_dtype).bits // 8)
    moment = DType(training.moments_format)
    base = replace(
        base,
        master=MASTER_BYTES[training.master_format] if base.master else 0,
        moment=moment.bits // 8,
        master_format=training.master_format,
        moment_format=moment,
    )
    recipe = training.fp8_recipe
    if recipe is None:
        return base
    return replace(base, loss_scaling=False, quantized=quantized_formats(training, recipe, gpu))


def quantized_formats(training: Training, recipe: Fp8Recipe, gpu: Gpu | None) -> Quantized:
    """The recipe's formats on `gpu` (planc/presets/fp8.json); an architecture the recipe does
    not run on (PLC043 reports it) is priced with two copies, as on Hopper."""
    row = recipe_table(recipe)
    arch = architecture(gpu.name, gpu.peaks) if gpu is not None else "hopper"
    # torchtitan (fsdp2) runs every recipe, MXFP8 included, through torchao: casts per GEMM,
    # no cached weights, 16-bit inputs saved, no norm fusion (torchtitan docs/mxfp8.md).
    te = row.library == "transformer-engine" and training.framework != "fsdp2"
    return Quantized(
        recipe=recipe,
        gemm=DType(training.precision),  # the peak the loader checked (PLC044: fp4 ⇔ nvfp4)
        architecture=arch,
        data_bits=row.data_bits,
        scale_block=row.scale_block,
        weight_scale_block=row.weight_scale_block,
        scale_bytes=row.scale_bytes,
        usages=row.usages.get(arch, 2),
        reads=row.reads,
        saved_input=row.saved_input and te,
        param_gather=training.param_gather,
        # fp8.json names engines: Megatron's distributed optimizer (megatron) apart from
        # Megatron-FSDP, as the spec writes them
        gather_fp8=training.param_gather and training.framework_written in row.gather_fp8,
        tp_gather_fp8=training.framework in row.tp_gather_fp8,
        norm_fused=row.norm_fused and te and training.kernels == "fused",
        wgrad_high_precision=row.wgrad_high_precision,
        amax_reduction=row.amax_reduction,
        rescaled_backward=row.rescaled_backward,
        gemm_rate=row.gemm_rate.get(arch, 1.0),
        cached_weights=te,
        te_casts=te,
        # torchao's MX recipes (torchao/prototype/moe_training/mxfp8_linear.py: MXTensor.to_mx
        # along dim0, _to_mxfp8_dim1_kernel_wrapper along dim1, each from the 16-bit tensor).
        separate_casts=not te and row.scale_block > 0,
        bf16_layers=training.first_last_bf16,
        attention=attention_quant(training.fp8_attention),
        output_proj=training.fp8_output_proj and te and recipe is Fp8Recipe.MXFP8,
        linear_speedup=row.linear_speedup.get(arch),
    )


def attention_quant(recipe: Fp8Recipe | None) -> AttentionQuant | None:
    """The attention core's FP8 formats under `recipe` (training.fp8.attention; fp8.json's
    reads, scale block and scale bytes of that recipe); None for 16-bit attention."""
    if recipe is None:
        return None
    row = recipe_table(recipe)
    return AttentionQuant(
        recipe=recipe,
        reads=row.reads,
        usages=2 if row.scale_block else 1,
        scale_block=row.scale_block,
        scale_bytes=row.scale_bytes,
    )


def numerics_for(precision: Precision, grad_accum_fp32: bool = False) -> Numerics:
    """The number formats of a run in `precision`, its gradients accumulated in fp32 or not
    (fp8 and fp4: the 16-bit formats around the quantized GEMMs, bf16 as Megatron's --bf16)."""
    dtype = DType("bf16" if precision in ("fp8", "fp4") else precision)
    width = dtype.bits // 8
    mixed = dtype is not DType.FP32
    return Numerics(
        precision=dtype,
        weight=width,
        master=4 if mixed else 0,
        gradient=4 if grad_accum_fp32 or not mixed else width,
        activation=width,
        gemm=dtype,
        loss_scaling=dtype is DType.FP16,
    )


# --- a rank's share of a layer ------------------------------------------------------------------


@record
class ExpertDims:
    """One rank's share of one MoE layer for one micro-batch (symbols of Megatron-Core's
    moe/README.md): E routed experts, topk per token, EP and ETP the expert-parallel and expert
    tensor-parallel degrees.

    `routed` is the rows a rank dispatches, which prices the exchange and the experts' GEMMs
    (`routed_rows`): the balanced expectation T·topk (every EP rank sends T·topk/EP rows to each
    other), or E·C exactly when padded to capacity. `sent` and `received` are the bounds the
    memory budget holds (`expert_rows`): a capacity factor caps each expert's rows, and
    dropless routing allows for imbalance.
    """

    E: int
    topk: int
    ep: int
    et: int  # ETP
    tokens: int  # T: tokens entering the layer on this rank, b·⌈s/c⌉ (/t with SP)
    routed: int  # rows dispatched per all-to-all: T·topk balanced, E·C padded
    sent: int  # S: rows this rank's router sends (T·topk, or E·C with a capacity)
    received: int  # R: rows its local experts receive, gathered over ETP
    f_e: int  # ⌈f_e/ETP⌉: one expert's MLP inner size on this rank
    f_s: int  # ⌈E_s·f_s/t⌉: the shared experts' inner size per TP rank (0: none)
    capacity: bool  # a capacity factor bounds the rows
    # the received rows re-sorted by local expert after the exchange and back before the
    # return (Megatron-Core's alltoall dispatcher with E/EP > 1, sort_chunks_by_idxs)
    sorted_by_expert: bool = False
    # the routing probabilities reach the experts in fp32: Megatron-Core's flex dispatchers
    # cast them ('HybridEP only supports float32 probs', 'DeepEP only supports float32 probs':
    # _HybridEPManager and _DeepepManager dispatch, token_dispatcher.py at 2edffadb)
    fp32_probs: bool = False

    @property
    def local_experts(self) -> int:
        """E/EP: the experts a rank computes."""
        return self.E // self.ep

    @property
    def exchanged(self) -> bool:
        """EP·ETP > 1: the rows travel (all-to-all, all-gather)."""
        return self.ep * self.et > 1


def expert_capacity(tokens: int, k: int, E: int, capacity_factor: float) -> int:
    """C = ⌈T·topk/E·CF⌉: the most rows one expert takes from one rank's T tokens (Megatron-Core
    moe_utils.get_capacity, evaluated in the same order)."""
    return math.ceil((tokens * k / E) * capacity_factor)


def expert_rows(
    tokens: int, E: int, k: int, et: int, capacity_factor: float | None, imbalance: float
) -> tuple[int, int]:
    """(S, R): the rows a rank's router sends and the rows its local experts receive.

    Dropless: S = T·topk and R = ⌈T·topk·ETP·α⌉, the balanced expectation (each of the EP ranks
    sends T·topk/EP rows to each other, then the ETP ranks gather theirs) scaled by the imbalance
    allowance α (`training.expert_imbalance`). Capacity factor CF: S = E·C and
    R = (E/EP)·C·EP·ETP = E·C·ETP (token_dispatcher.py preprocess with
    moe_pad_expert_input_to_capacity: every local expert gets C·tp_size·ep_size rows); without
    padding this is the bound dropping enforces.
    """
    if capacity_factor is not None:
        capacity = expert_capacity(tokens, k, E, capacity_factor)
        return E * capacity, E * capacity * et
    return tokens * k, math.ceil(tokens * k * et * imbalance)


def routed_rows(tokens: int, k: int, E: int, capacity_factor: float | None, padded: bool) -> int:
    """The rows a rank dispatches per MoE layer and micro-batch, which every exchange and expert
    op is priced on.

    Drop and pad (a capacity factor with --moe-pad-expert-input-to-capacity): exactly E·C, every
    expert filled to its capacity C (`expert_capacity`) with zero-weight tokens, sent in even
    splits (Megatron-Core's alltoall dispatcher: num_out_tokens = C·E in preprocess,
    token_dispatcher.py:495 at 2edffadb, 452 at core_v0.14.0). Otherwise the balanced T·topk,
    which dropping leaves whole when CF ≥ 1 (PLC026): each expert's T·topk/E ≤ C.
    """
    if padded and capacity_factor is not None:
        return E * expert_capacity(tokens, k, E, capacity_factor)
    return tokens * k


@record
class EagerPaths:
    """Megatron-Core's eager PyTorch paths a job's layers take where its fused kernels do not
    take a model's feature (`megatron_eager`); all false for another framework."""

    rope_unfused: bool = False  # RoPE with a YaRN attention scale ≠ 1
    glu_clamp: bool = False  # the routed experts' clamped GLU inputs
    expert_bias: bool = False  # the routed experts' fc2 biases, added per expert


NO_EAGER = EagerPaths()


def megatron_eager(model: Model, megatron: bool, fused_mlp: bool = False) -> EagerPaths:
    """Which of Megatron-Core's eager paths a Megatron job's layers take, each forced by the
    model, not by a choice of the run (`planc.perf.ops` prices them):

    * rope_unfused: a YaRN attention scale other than 1 (`RopeScaling.concentration`;
      GPT-OSS's factor 32 without mscale terms gives 1.3466): apply_rotary_pos_emb warns
      "mscale=… is not supported by TE's fused RoPE. Using unfused implementation."
      (megatron/core/models/common/embeddings/rope_utils.py, Megatron-Core 0.17.1 2edffadb to
      0.19). Latent attention applies its RoPE in kernels of its own (`mla_rotary`).
    * glu_clamp: a clamped GLU in the routed experts (model.glu_clamp):
      weighted_bias_quick_geglu_impl clamps the two halves of fc1's output and concatenates
      them in eager PyTorch before the fused activation (fusions/fused_bias_geglu.py).
    * expert_bias: biased routed experts (model.bias): TEGroupedMLP creates fc2 with
      skip_bias_add and adds each expert's bias, times the routing probability, in
      `_apply_bias`, a loop of eager kernels (transformer/moe/experts.py).

    `fused_mlp` (training.fused_grouped_mlp): the experts run through Transformer Engine's
    operation fuser (GroupedLinear with scale_bias, ScaledClampedQGeGLU; Megatron-Core 0.18+
    `_make_fused_ops`), so neither expert path is eager. Its CuTe DSL kernel, which also fuses
    fc1, the GLU and fc2 (MXFP8 on SM100 with every expert dimension a multiple of 256,
    Transformer Engine fuse_grouped_mlp_ops), is not modelled."""
    if not megatron:
        return NO_EAGER
    scaling = model.rope_scaling
    experts = model.moe is not None and not fused_mlp
    return EagerPaths(
        rope_unfused=model.mla is None
        and model.position == "rope"
        and scaling is not None
        and abs(scaling.concentration - 1.0) > 1e-12,
        glu_clamp=experts and model.glu_clamp > 0 and gated(model.mlp),
        expert_bias=experts and model.bias,
    )


@record
class RankDims:
    """One rank's share of one transformer layer and one micro-batch: every per-rank size
    memory, the step model and the communication schedule use."""

    b: int  # micro-batch
    s: int  # sequence length: the keys each query meets
    s_c: int  # ⌈s/c⌉: the tokens (queries) a context-parallel rank holds
    s_r: int  # ⌈s_c/t⌉ with sequence parallelism, else s_c: rows of what TP leaves replicated
    h: int
    n: int  # ⌈n/t⌉ query heads
    g: int  # ⌈g/t⌉ key/value heads (1 where t > g: Megatron replicates them)
    k: int  # channels per query/key head (d_h + d_h^R under latent attention)
    v_head: int  # channels per value head (k; latent attention's v_head_dim)
    f: int  # ⌈f/t⌉ MLP inner size
    V_padded: int  # V' = ⌈V/(128·t)⌉·128·t
    vocab: int  # V'/t: the rank's slice of the padded vocabulary
    t: int
    c: int
    sp: bool
    q_latent: int = 0  # latent attention's query latent d_c' (0: none)
    kv_latent: int = 0  # its key/value latent d_c (0: not latent attention)
    rope: int = 0  # its per-head RoPE channels d_h^R, the key's shared by all heads
    experts: ExpertDims | None = None  # a MoE layer's share (None: a dense model)
    kv_repeated: bool = False  # K/V repeated to every query head before the core (repeat_kv)
    eager: EagerPaths = NO_EAGER  # Megatron-Core's eager paths (`megatron_eager`)

    @property
    def g_core(self) -> int:
        """The key/value heads the attention kernel reads: g/t, or n/t where K and V are
        repeated to every query head before it (`training.repeat_kv`)."""
        return self.n if self.kv_repeated else self.g

    @property
    def tokens(self) -> int:
        """b·⌈s/c⌉: rows of the weight matmuls on this rank."""
        return self.b * self.s_c

    @property
    def replicated_tokens(self) -> int:
        """b·s_r: rows of norms, dropouts, residual adds and the projections' inputs."""
        return self.b * self.s_r


def rank_dims(
    model: Model,
    *,
    s: int,
    b: int,
    t: int = 1,
    c: int = 1,
    sp: bool = False,
    et: int = 1,
    ep: int = 1,
    imbalance: float = 1.0,
    repeat_kv: bool = False,
    sorts_by_expert: bool = False,
    eager: EagerPaths = NO_EAGER,
    fp32_probs: bool = False,
) -> RankDims:
    """The dims of one rank for sequence `s` and micro-batch `b` under tensor degree `t`,
    context degree `c`, sequence parallelism `sp`, for experts ETP `et`, EP `ep` and the
    dropless imbalance allowance, K/V repeated to every query head before the attention
    kernel (`repeat_kv`), and a dispatcher that sorts the received rows by local expert
    (`sorts_by_expert`), Megatron-Core's `eager` paths, and a dispatcher that hands the experts
    fp32 routing probabilities (`fp32_probs`) (with the defaults: the whole layer on one GPU)."""
    mla = model.mla
    s_c = ceil_div(s, c)
    s_r = ceil_div(s_c, t) if sp else s_c
    V_padded = padded_vocab(model.V, t)
    return RankDims(
        b=b,
        s=s,
        s_c=s_c,
        s_r=s_r,
        h=model.h,
        n=ceil_div(model.n, t),
        g=ceil_div(model.g, t),
        k=model.k if mla is None else mla.qk_head,
        v_head=model.k if mla is None else mla.v_head,
        f=ceil_div(model.f, t),
        V_padded=V_padded,
        vocab=V_padded // t,
        t=t,
        c=c,
        sp=sp,
        q_latent=0 if mla is None or mla.q_lora is None else mla.q_lora,
        kv_latent=0 if mla is None else mla.kv_lora,
        rope=0 if mla is None else mla.qk_rope,
        experts=_expert_dims(
            model, t, b * s_r, et, ep, imbalance, sorts_by_expert, fp32_probs
        ),
        kv_repeated=repeat_kv,
        eager=eager,
    )


def _expert_dims(
    model: Model,
    t: int,
    tokens: int,
    et: int,
    ep: int,
    imbalance: float,
    sorts: bool,
    fp32_probs: bool,
) -> ExpertDims | None:
    moe = model.moe
    if moe is None:
        return None
    sent, received = expert_rows(tokens, moe.E, moe.k, et, moe.capacity_factor, imbalance)
    return ExpertDims(
        E=moe.E,
        topk=moe.k,
        ep=ep,
        et=et,
        tokens=tokens,
        routed=routed_rows(tokens, moe.k, moe.E, moe.capacity_factor, moe.padded),
        sent=sent,
        received=received,
        f_e=ceil_div(moe.f_e, et),
        f_s=ceil_div(moe.E_s * moe.f_s, t) if moe.E_s else 0,
        capacity=moe.capacity_factor is not None,
        sorted_by_expert=sorts and moe.E // ep > 1,
        fp32_probs=fp32_probs,
    )
