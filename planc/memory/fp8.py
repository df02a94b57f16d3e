"""What a low-precision recipe (precision fp8/fp4, `Numerics.quantized`) adds to a rank's
memory, term by term, each with its formula, unit (bytes) and source.

Transformer Engine keeps the 16-bit weight and quantizes it before the GEMMs, so "contrary to
intuition, FP8 training does not always reduce memory" (TE docs, *Performance considerations*,
"Memory usage"). Per quantized weight element, before ZeRO/FSDP sharding:

| setting                                   | 16-bit weight | FP8 data | 2nd usage    | scales      | total |
|-------------------------------------------|---------------|----------|--------------|-------------|-------|
| TE delayed/current, Hopper (default)      | 2             | 1        | 1 transpose  | per tensor  | 4     |
| same with param_gather (--fp8-param-gather)| 0            | 1        | 1            | per tensor  | 2     |
| TE delayed/current, Blackwell, param_gather| 0            | 1        | 0 (native)   | per tensor  | 1     |
| TE mxfp8, Blackwell, param_gather         | 0             | 1        | 1 (32×1)     | 2·1/32      | 2.06  |
| TE blockwise, param_gather                | 0             | 1        | 1            | 2·4/16384   | ≈2    |

(TE #257: "TE keeps both high-precision and FP8 copies by default"; TE #1261: the fused
cast-transpose is cached; TE #1764: the cached transpose; TE #1880: "Blackwell: FP8 only
requires 1 byte/param", "MXFP8 requires 2 bytes/param"; verl #7232: FP8 parameters still 2
bytes/param on Hopper.) The quantized weights Ψ_q are the linear layers' matrices (attention
projections, MLP, shared and routed experts) of the FP8 layers on the rank: not the norms,
biases, the router, the embedding or the LM head, which Megatron keeps in 16 bits, nor the
first and last `first_last_bf16` layers. The optimizer's fp32 master and moments are unchanged
(a precision-aware optimizer is not modelled).
"""

from __future__ import annotations

from planc.dims import Quantized, bf16_ranges, ceil_div
from planc.memory.engines import Placed, largest_layer
from planc.memory.params import (
    RankParameters,
    attention_matrix_parameters,
    local_expert_parameters,
    mlp_parameters,
)
from planc.memory.static import Group
from planc.memory.terms import Term, quantized_bytes, shard
from planc.plannable import Plannable
from planc.record import record

TE_MEMORY = (
    "Transformer Engine docs, Performance considerations ('Memory usage': the high-precision "
    "weight is kept and quantized before each GEMM); TE #257, #1261, #1764"
)
TE_HOPPER = "TE #1261, #1764: Hopper's FP8 GEMM needs a physical transpose, cast-transposed and cached"
TE_BLACKWELL = "TE #1880 (Blackwell reads columnwise FP8 natively; MXFP8 keeps 1×32 and 32×1 copies)"
TE_PARAMS = (
    "Megatron --fp8-param-gather / TE fp8_model_init: the parameter is the FP8 tensor, the "
    "fp32 master stays in the optimizer (Megatron-LM docs low_precision_training.md; TE #1880)"
)
TE_SCALES = (
    "TE recipes: one scale per tensor (delayed, current), per 128 or 128×128 block "
    "(Float8BlockScaling, fp32), per 32 values (MXFP8, E8M0), per 16 (NVFP4, E4M3)"
)
TE_AMAX = (
    "TE DelayedScaling: per FP8 tensor an fp32 scale, scale_inv and amax history; Megatron "
    "--fp8-amax-history-len default 1 (transformer_config.py fp8_amax_history_len); a TE Linear "
    "has 3 forward (input, weight, output) and 2 backward (grad output, grad input) FP8 tensors"
)
TE_ACTIVATIONS = (
    "TE #1764 (timmoon10): the linear layers save their inputs quantized (the FP8 data on "
    "Blackwell, the FP8 transpose on Hopper), half the bytes; norms, activations and attention "
    "stay 16-bit"
)
TE_HEAD = (
    "Megatron-Core fp8_output_proj (3f6a2ed8, gpt_model.py): the LM head is Transformer "
    "Engine's TELMHeadColumnParallelLinear in the MXFP8 autocast, built outside fp8_model_init"
)
TRANSIENT = (
    "planc: one layer's quantized GEMM operands exist while it runs (marin #7298 measured a "
    "transient FP8 peak from forward operands and transposed copies); torchao casts per GEMM "
    "and keeps none across micro-batches (torchao float8 README)"
)
# The FP8 tensors of one Transformer Engine Linear (forward: input, weight, output; backward:
# grad output, grad input) and the bytes each keeps under delayed scaling: an fp32 scale and
# scale_inv and an amax history of Megatron's default length 1.
FP8_TENSORS_PER_LINEAR = 5
AMAX_HISTORY_LENGTH = 1
DELAYED_BYTES_PER_TENSOR = 4 + 4 + 4 * AMAX_HISTORY_LENGTH
# The linear modules of one dense layer (QKV, output projection, fc1, fc2) and of one MoE
# layer's routed experts (fc1, fc2 grouped GEMMs, one weight per local expert).
LINEARS_PER_LAYER = 4
LINEARS_PER_EXPERT = 2


# --- the quantized parameters ---------------------------------------------------------------


@record
class QuantizedShare:
    """The quantized GEMM weights of one rank: Ψ_q of the dense part (attention, MLP, shared
    experts) and of the routed experts, and its FP8 layers."""

    dense: int  # Ψ_q,d
    experts: int  # Ψ_q,e
    layers: int  # FP8 layers on the rank
    moe_layers: int  # of them, those with experts
    local_experts: int  # E/EP: routed experts per MoE layer on the rank

    @property
    def total(self) -> int:
        return self.dense + self.experts


def dense_gemm_parameters(job: Plannable) -> int:
    """One dense layer's GEMM weights on one TP rank: the attention projections and γ·h·⌈f/t⌉
    (no norms, no biases: Megatron fp8_param converts 'primarily the weights of GEMMs')."""
    model, t = job.model, job.layout.t
    return attention_matrix_parameters(model, t) + mlp_parameters(
        model.h, ceil_div(model.f, t), model.mlp
    )


def moe_gemm_parameters(job: Plannable) -> tuple[int, int]:
    """One MoE layer's GEMM weights on one rank: (attention and shared experts over t, the E/EP
    routed experts over ETP; no biases). The router stays 16-bit (Megatron's TopKRouter is no TE
    Linear)."""
    model, lay = job.model, job.layout
    moe = model.moe
    if moe is None:
        return 0, 0
    shared = mlp_parameters(model.h, ceil_div(moe.E_s * moe.f_s, lay.t), model.mlp) if moe.E_s else 0
    dense = attention_matrix_parameters(model, lay.t) + shared
    # the routed experts' matrices, without their biases (GPT-OSS's stay 16-bit)
    return dense, local_expert_parameters(model, lay.ep, lay.et, biases=False)


def bf16_layer_ranges(job: Plannable, a: int, b: int) -> tuple[tuple[int, int], ...]:
    """The layers of [a, b) Megatron keeps in BF16 (`planc.dims.bf16_ranges`)."""
    q = job.numerics.quantized
    return bf16_ranges(a, b, 0 if q is None else q.bf16_layers, job.model.L)


def bf16_layers_between(job: Plannable, a: int, b: int) -> tuple[int, int]:
    """(layers, MoE layers) of [a, b) kept in BF16."""
    moe = job.model.moe
    count = experts = 0
    for lo, hi in bf16_layer_ranges(job, a, b):
        count += hi - lo
        experts += 0 if moe is None else moe.moe_layers_between(lo, hi)
    return count, experts


def quantized_share(job: Plannable, pp_rank: int) -> QuantizedShare:
    """Ψ_q of pipeline rank `pp_rank`: the GEMM weights of its FP8 layers (every layer of its
    chunks but the BF16 first and last ones) and, under an FP8 recipe, of its multi-token
    prediction modules (each a layer and eh_proj 2h·⌈h/t⌉: Transformer Engine linears in the FP8
    context whatever the BF16 layers; Megatron-Core leaves them out of FP4)."""
    moe = job.model.moe
    layers = moe_layers = 0
    for a, b in job.layout.chunks[pp_rank]:
        kept, kept_moe = bf16_layers_between(job, a, b)
        routed = 0 if moe is None else moe.moe_layers_between(a, b)
        layers += b - a - kept
        moe_layers += routed - kept_moe
    q = job.numerics.quantized
    modules, routed = job.mtp_modules(pp_rank) if q is not None and q.data_bits == 8 else (0, 0)
    layers += modules
    moe_layers += routed
    moe_dense, moe_experts = moe_gemm_parameters(job)
    dense = (layers - moe_layers) * dense_gemm_parameters(job) + moe_layers * moe_dense
    dense += modules * 2 * job.model.h * ceil_div(job.model.h, job.layout.t)
    local = 0 if moe is None else moe.E // job.layout.ep
    return QuantizedShare(dense, moe_layers * moe_experts, layers, moe_layers, local)


# --- the weight-side terms -----------------------------------------------------------------


def _usage_names(q: Quantized) -> tuple[str, ...]:
    """What each kept usage of a quantized weight is called."""
    second = "transpose cache" if q.architecture != "blackwell" else "columnwise copy"
    return ("weights", f"weight {second}")[: q.usages]


def _usage_source(q: Quantized, index: int) -> str:
    if index == 0:
        return TE_PARAMS if q.param_gather else TE_MEMORY
    return TE_HOPPER if q.architecture != "blackwell" else TE_BLACKWELL


def persistent_weight_terms(q: Quantized, share: QuantizedShare) -> tuple[Term, ...]:
    """The quantized weight copies a Transformer Engine rank keeps across micro-batches (the
    FP8 weight cache of `is_first_microbatch`, or the FP8 parameters themselves): `usages`
    copies of Ψ_q, each ⌈Ψ_q·bits/8⌉ bytes plus its block scales."""
    terms = []
    for index, name in enumerate(_usage_names(q)):
        for part, psi, symbol in (("", share.dense, "Ψ_q"), ("expert ", share.experts, "Ψ_q,e")):
            if not psi:
                continue
            size = quantized_bytes(psi, q.data_bits, q.weight_scale_block, q.scale_bytes)
            scales = f" + ⌈{symbol}/{q.weight_scale_block}⌉·{q.scale_bytes}" if q.weight_scale_block else ""
            terms.append(
                Term(
                    f"{part}{q.label} {name} ({q.recipe.value})",
                    "weights",
                    size,
                    f"{q.data_bits / 8:g}·{symbol}{scales}",
                    _usage_source(q, index) + "; " + TE_SCALES,
                )
            )
    return tuple(terms)


def amax_terms(q: Quantized, share: QuantizedShare) -> tuple[Term, ...]:
    """Delayed scaling's per-tensor state: (4·L_q + 2·(E/EP)·L_q,e) linears × 5 FP8 tensors ×
    (scale + scale_inv + amax history of length 1) × 4 bytes."""
    if q.recipe.value != "delayed" or not share.layers:
        return ()
    linears = LINEARS_PER_LAYER * share.layers + LINEARS_PER_EXPERT * share.local_experts * share.moe_layers
    return (
        Term(
            "FP8 scales and amax history (delayed)",
            "weights",
            linears * FP8_TENSORS_PER_LINEAR * DELAYED_BYTES_PER_TENSOR,
            f"{linears} linears·{FP8_TENSORS_PER_LINEAR}·(4 + 4 + 4·{AMAX_HISTORY_LENGTH})",
            TE_AMAX,
        ),
    )


def without_high_precision(terms: tuple[Term, ...], q: Quantized, share: QuantizedShare, w: int) -> tuple[Term, ...]:
    """param_gather: the 16-bit copy of the quantized weights is dropped. The layer and expert
    weight lines lose w·Ψ_q,d and w·Ψ_q,e (a ZeRO-3 shard line its share of them)."""
    out = []
    for term in terms:
        if term.component != "weights":
            out.append(term)
            continue
        drop = 0
        if term.name.startswith("layer weights"):
            drop = w * share.dense
        elif term.name.startswith("expert weights") and not term.name.startswith("expert weights shard"):
            drop = w * share.experts
        if drop:
            out.append(
                Term(term.name, term.component, term.bytes - drop, f"{term.formula} − {w}·Ψ_q", term.source + "; " + TE_PARAMS)
            )
        else:
            out.append(term)
    return tuple(out)


def quantized_unit(job: Plannable, share: RankParameters) -> int:
    """Ψ_ℓ,q: the GEMM weights of the largest layer on this rank, the part a recipe quantizes."""
    dense, experts = moe_gemm_parameters(job)
    unit = max(dense_gemm_parameters(job) if share.layers > share.moe_layers else 0, dense + experts if share.moe_layers else 0)
    return min(unit, largest_layer(share))


def gathers_quantized(job: Plannable) -> bool:
    """Whether ZeRO-3 gathers the quantized weights themselves: Megatron-FSDP with
    --fp8-param-gather keeps the FP8 parameters sharded and all-gathers them. torchtitan's
    float8 all-gather casts its fp32 shards at each gather instead: its gathered units are the
    copies `unit_copies` counts beside a 16-bit shard."""
    q = job.numerics.quantized
    return q is not None and q.param_gather and job.training.framework == "megatron"


def unit_copies(job: Plannable, q: Quantized, share: RankParameters) -> Term:
    """Sharded weights (ZeRO-3, FSDP2): the quantized copies exist for the gathered units only,
    the unit in use and the one prefetched: 2·usages·⌈Ψ_ℓ,q·bits/8⌉. Under Megatron-FSDP with
    param_gather these are the gathered units themselves (`gathers_quantized`)."""
    one = quantized_bytes(quantized_unit(job, share), q.data_bits, q.weight_scale_block, q.scale_bytes)
    if gathers_quantized(job):
        what = "gathered units"
        source = TE_PARAMS + "; Megatron-FSDP all-gathers the FP8 parameters (--fp8-param-gather): two units"
    else:
        what = "weight copies of the gathered units"
        source = TE_MEMORY + "; ZeRO-3/FSDP: two units gathered (in use and prefetched)"
    return Term(
        f"{q.label} {what} ({q.recipe.value})",
        "buffers",
        2 * q.usages * one,
        f"2·{q.usages}·{q.data_bits / 8:g}·Ψ_ℓ,q",
        source,
    )


MEGATRON_FSDP_FP8_SHARD = (
    "Megatron-FSDP param_and_grad_buffer.py (Megatron-LM 2edffadb): a Float8Tensor parameter "
    "group's buffer is torch.uint8 (param_dtype = torch.uint8), so with --fp8-param-gather the "
    "quantized weights are sharded in FP8 and no 16-bit copy of them exists"
)


def quantized_shards(
    terms: tuple[Term, ...], q: Quantized, mine: QuantizedShare, groups: tuple[Group, Group], w: int
) -> tuple[Term, ...]:
    """Megatron-FSDP with param_gather under ZeRO-3: the quantized weights' shard is kept in
    the recipe's format, ⌈Ψ_q/N⌉ elements of `usages` copies, and the 16-bit shard lines hold
    the rest, w·(Ψ_r − Ψ_q)/N (dense over N, routed experts over N_e)."""
    out = []
    for term in terms:
        expert = term.name.startswith("expert weights shard")
        if not (expert or term.name.startswith("weights shard")):
            out.append(term)
            continue
        psi, group = (mine.experts, groups[1]) if expert else (mine.dense, groups[0])
        if not psi:
            out.append(term)
            continue
        kept = shard(psi, group.N, group.index)
        prefix, symbol = ("expert ", "Ψ_q,e") if expert else ("", "Ψ_q")
        rest = f"{term.formula} − {w}·{symbol}/{group.symbol}"
        out.append(Term(term.name, term.component, term.bytes - w * kept, rest, term.source))
        out.append(
            Term(
                f"{prefix}{q.label} weights shard ({q.recipe.value})",
                "weights",
                q.usages * quantized_bytes(kept, q.data_bits, q.weight_scale_block, q.scale_bytes),
                f"{q.usages}·{q.data_bits / 8:g}·{symbol}/{group.symbol}",
                MEGATRON_FSDP_FP8_SHARD + "; " + TE_SCALES,
            )
        )
    return tuple(out)


def without_gathered_high_precision(
    terms: tuple[Term, ...], job: Plannable, share: RankParameters, w: int
) -> tuple[Term, ...]:
    """Megatron-FSDP with param_gather: the units' 16-bit gather holds only what the recipe
    leaves unquantized (norms, biases, the router): w·2·(Ψ_ℓ − Ψ_ℓ,q)."""
    out = []
    for term in terms:
        if term.name.startswith("ZeRO-3 gathered units"):
            kept = 2 * w * (largest_layer(share) - quantized_unit(job, share))
            term = Term(term.name, term.component, kept, f"{w}·2·(Ψ_ℓ − Ψ_ℓ,q)", term.source + "; " + TE_PARAMS)
        out.append(term)
    return tuple(out)


def head_weight_terms(q: Quantized, share: RankParameters) -> tuple[Term, ...]:
    """The LM head's quantized weight copies on the last stage under Megatron-Core's
    fp8_output_proj: `usages` copies of its V'/t·h slice, each ⌈V'/t·h·bits/8⌉ bytes plus its
    block scales. Transformer Engine caches them across micro-batches as any TE linear's; the
    parameter itself stays 16-bit (Megatron builds the output layer outside fp8_model_init, so
    --fp8-param-gather leaves it)."""
    if not (q.output_proj and share.lm_head):
        return ()
    size = quantized_bytes(share.lm_head, q.data_bits, q.weight_scale_block, q.scale_bytes)
    scales = f" + ⌈V'/t·h/{q.weight_scale_block}⌉·{q.scale_bytes}" if q.weight_scale_block else ""
    return tuple(
        Term(
            f"LM head {q.label} {name} ({q.recipe.value} output projection)",
            "weights",
            size,
            f"{q.data_bits / 8:g}·V'/t·h{scales}",
            TE_HEAD + "; " + (TE_MEMORY if index == 0 else TE_BLACKWELL) + "; " + TE_SCALES,
        )
        for index, name in enumerate(_usage_names(q))
    )


def transient_term(job: Plannable, q: Quantized, head: bool = False) -> Term:
    """One GEMM's quantized operands while it runs: the largest GEMM input or output
    gradient, b·⌈s/c⌉·max(h, ⌈f/t⌉) elements (and V'/t on the last stage where the LM head is
    quantized, `head`: its logits' gradient) in `usages` copies, and for a recipe that caches
    no weight (torchao) the layer's quantized weights too."""
    dims = job.dims
    widest = max(dims.h, dims.f, dims.vocab if head else 0)
    elements = dims.tokens * widest
    size = q.usages * quantized_bytes(elements, q.data_bits, q.scale_block, q.scale_bytes)
    width = "max(h, f/t, V'/t)" if head else "max(h, f/t)"
    formula = f"{q.usages}·{q.data_bits / 8:g}·b·(s/c)·{width}"
    if not q.cached_weights:
        size += q.usages * quantized_bytes(dense_gemm_parameters(job), q.data_bits, q.weight_scale_block, q.scale_bytes)
        formula += f" + {q.usages}·{q.data_bits / 8:g}·Ψ_ℓ,q"
    return Term(f"{q.label} GEMM operands in flight (transient)", "buffers", size, formula, TRANSIENT)


def sharded_weights(job: Plannable) -> bool:
    """Whether the engine shards the weights (ZeRO-3, FSDP2): then no rank holds them whole."""
    return job.training.framework == "fsdp2" or job.layout.zero >= 3


def with_quantized(
    job: Plannable,
    pp_rank: int,
    share: RankParameters,
    static: Placed,
    w: int,
    groups: tuple[Group, Group],
) -> Placed:
    """`static` (an engine's terms) with the recipe's weight-side terms: TE's kept copies (or,
    with sharded weights, those of the gathered units), delayed scaling's amax state, and the
    16-bit copy dropped under param_gather (under Megatron-FSDP, the shard kept in FP8 over the
    shard `groups`, dense and expert); plus one layer's operands in flight."""
    q = job.numerics.quantized
    if q is None:
        return static
    mine = quantized_share(job, pp_rank)
    hbm = static.hbm
    if q.param_gather and not sharded_weights(job):
        hbm = without_high_precision(hbm, q, mine, w)
    elif gathers_quantized(job) and job.layout.zero >= 3:
        hbm = without_gathered_high_precision(hbm, job, share, w)
        hbm = quantized_shards(hbm, q, mine, groups, w)
    added: list[Term] = []
    if q.cached_weights and not sharded_weights(job):
        added += persistent_weight_terms(q, mine)
    elif q.cached_weights and mine.layers:
        added.append(unit_copies(job, q, share))
    added += amax_terms(q, mine)
    head = head_weight_terms(q, share)
    added += head
    if mine.layers or head:
        added.append(transient_term(job, q, bool(head)))
    return Placed((*hbm, *added), static.host)
