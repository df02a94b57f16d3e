"""Parameter counts from the model's dimensions, for the whole model and for one rank's share.

Symbols (Megatron / Korthikanti et al. 2022): L layers, h hidden, n query heads, g key/value
heads, k channels per head, f MLP inner size, V vocabulary, t tensor-parallel degree, p pipeline
degree, v virtual stages (model chunks per pipeline rank).

The layer count is Megatron's `theoretical_memory_usage.py` (attention 2·h·k·(n+g), MLP
2·h·f·γ with γ = 3/2 for SwiGLU, ν·h per norm with ν = 2 for LayerNorm and 1 for RMSNorm), plus
the biases that file leaves out, so that published counts come out exact.
"""

from __future__ import annotations

from planc.dims import padded_vocab
from planc.memory.matrices import stage_matrices
from planc.memory.terms import ceil_div
from planc.plannable import Plannable
from planc.record import record
from planc.spec.job import MLA, Model, MoE
from planc.vocab import gated

SOURCE_MOE_PARAMS = (
    "Megatron-Core moe/README.md and theoretical_memory_usage.py (routed experts "
    "E·γ·2·h·f_e, router h·E, shared experts E_s·γ·2·h·f_s); Jiang et al. 2024 (Mixtral), "
    "Qwen3 technical report (2025)"
)
SOURCE_PARAMS = (
    "Megatron-LM theoretical_memory_usage.py (attention 2·h·k·(n+g), MLP 2·h·f·γ, norms ν·h); "
    "biases as in Megatron's Column/RowParallelLinear"
)

SOURCE_MLA_PARAMS = (
    "DeepSeek-V2 report (arXiv 2405.04434) §2.1; Hugging Face DeepseekV3Attention (q_a_proj, "
    "q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj); "
    "Megatron-LM theoretical_memory_usage.py (multi_latent_attention) and "
    "multi_latent_attention.py (down projections replicated, up and out split over t)"
)
SOURCE_MTP_PARAMS = (
    "DeepSeek-V3 report (arXiv 2412.19437) §2.2 and README_WEIGHTS.md (embedding and output "
    "head shared); Megatron-LM multi_token_prediction.py (enorm, hnorm, eh_proj 2h → h, "
    "one transformer layer, final_layernorm)"
)


@record
class ParameterCount:
    """The model's own parameters, by part. `total` = L·per_layer + the rest; with experts,
    the `moe_layers` of the L layers hold `per_moe_layer` instead (`active_per_moe_layer` of
    them used by one token)."""

    per_layer: int
    embedding: int
    position: int
    final_norm: int
    lm_head: int
    layers: int
    moe_layers: int = 0
    per_moe_layer: int = 0
    active_per_moe_layer: int = 0
    mtp: int = 0  # the multi-token prediction modules, all D of them
    active_mtp: int = 0  # their parameters one token passes through

    def _sum(self, per_moe_layer: int) -> int:
        dense = self.layers - self.moe_layers
        return (
            dense * self.per_layer
            + self.moe_layers * per_moe_layer
            + self.embedding
            + self.position
            + self.final_norm
            + self.lm_head
        )

    @property
    def total(self) -> int:
        return self._sum(self.per_moe_layer) + self.mtp

    @property
    def active(self) -> int:
        """Parameters one token passes through: its k routed experts, not all E (= total for a
        dense model)."""
        return self._sum(self.active_per_moe_layer) + self.active_mtp


def norm_parameters(model: Model) -> int:
    """ν·h per norm: LayerNorm has a weight and a bias (ν = 2), RMSNorm a weight only (ν = 1)."""
    return (2 if model.norm == "layernorm" else 1) * model.h


def attention_parameters(h: int, k: int, n: int, g: int) -> int:
    """2·h·k·(n+g): Q and O are h × n·k each, K and V are h × g·k each (GQA)."""
    return 2 * h * k * (n + g)


def mla_down_parameters(h: int, mla: MLA) -> int:
    """The down projections and latent norms of latent attention: q_a_proj h·d_c' and its
    RMSNorm d_c' (when the query is compressed), kv_a_proj_with_mqa h·(d_c + d_h^R) (the
    latent and the key's RoPE part shared by all heads) and its RMSNorm d_c (DeepSeek-V2 §2.1.2,
    eq. 9, 12 and 14). Whole on every TP rank: Megatron builds them as TELinear
    `parallel_mode='duplicated'` (multi_latent_attention.py)."""
    query = 0 if mla.q_lora is None else h * mla.q_lora + mla.q_lora
    return query + h * (mla.kv_lora + mla.qk_rope) + mla.kv_lora


def mla_up_parameters(h: int, n: int, mla: MLA) -> int:
    """The up projections of n heads: q_b_proj d_c'·n·(d_h + d_h^R), or without a query latent
    q_proj h·n·(d_h + d_h^R); kv_b_proj d_c·n·(d_h + v_head_dim) (DeepSeek-V2 §2.1.2, eq. 10,
    11 and 13). No biases. Column-parallel over heads in Megatron."""
    query = (h if mla.q_lora is None else mla.q_lora) * n * mla.qk_head
    return query + mla.kv_lora * n * (mla.qk_nope + mla.v_head)


def mla_output_parameters(h: int, n: int, mla: MLA) -> int:
    """o_proj of n heads: n·v_head_dim × h (DeepSeek-V2 §2.1.2, eq. 19); row-parallel."""
    return n * mla.v_head * h


def mla_attention_parameters(h: int, n: int, mla: MLA, t: int = 1) -> int:
    """Latent attention of one layer on one TP rank (t = 1: the whole layer's): the replicated
    down projections and norms plus the up and output projections of ⌈n/t⌉ heads."""
    n_t = ceil_div(n, t)
    return (
        mla_down_parameters(h, mla)
        + mla_up_parameters(h, n_t, mla)
        + mla_output_parameters(h, n_t, mla)
    )


def attention_matrix_parameters(model: Model, t: int = 1) -> int:
    """The attention projections of one layer on one TP rank, without biases: latent
    attention's, or 2·h·k·(⌈n/t⌉ + ⌈g/t⌉)."""
    if model.mla is not None:
        return mla_attention_parameters(model.h, model.n, model.mla, t)
    return attention_parameters(model.h, model.k, ceil_div(model.n, t), ceil_div(model.g, t))


def mlp_parameters(h: int, f: int, mlp: str) -> int:
    """2·h·f for GeLU (up, down); 3·h·f for SwiGLU (gate, up, down)."""
    return (3 if gated(mlp) else 2) * h * f


def qk_norm_parameters(k: int) -> int:
    """2·k: Qwen3's RMSNorm weights over one query head and one key head (q_norm, k_norm;
    Hugging Face Qwen3Attention), shared by all heads and replicated over t."""
    return 2 * k


def expert_parameters(h: int, f_e: int, mlp: str, bias: bool = False) -> int:
    """One routed expert: an MLP of inner size f_e, γ·2·h·f_e (3·h·f_e for SwiGLU; Megatron-Core
    SequentialMLP/GroupedMLP, Hugging Face MixtralBlockSparseTop2MLP, Qwen3MoeMLP), and with
    `bias` (model.bias: Megatron's add_bias_linear reaches the grouped experts, GPT-OSS's
    gate_up_proj_bias and down_proj_bias) fc1's γ'·f_e (2·f_e for SwiGLU) and fc2's h."""
    return mlp_block_parameters(h, f_e, mlp, bias)


def mlp_block_parameters(h: int, f: int, mlp: str, bias: bool) -> int:
    """An MLP of inner size f (`mlp_parameters`), with `bias` its biases too: fc1's γ'·f (gate
    and up, 2·f, for SwiGLU) and fc2's h."""
    biases = (2 if gated(mlp) else 1) * f + h if bias else 0
    return mlp_parameters(h, f, mlp) + biases


def routed_expert_parameters(
    moe: MoE, h: int, mlp: str, experts: int | None = None, bias: bool = False
) -> int:
    """E routed experts of one MoE layer, E·γ·2·h·f_e (`experts` overrides E: k for the ones a
    token uses, E/EP for one expert-parallel rank's)."""
    return (moe.E if experts is None else experts) * expert_parameters(h, moe.f_e, mlp, bias)


def router_parameters(moe: MoE, h: int, bias: bool = False) -> int:
    """The router of one MoE layer: its h × E gate matrix (Megatron TopKRouter.weight, Hugging
    Face `gate`), plus E for the expert bias of auxiliary-loss-free balancing (DeepSeek-V3
    e_score_correction_bias), and E for the gate's own bias with `bias` (model.bias: TopKRouter
    builds one under add_bias_linear; GPT-OSS router.bias). Replicated on every rank
    (moe/README.md)."""
    return h * moe.E + (moe.E if moe.router_bias else 0) + (moe.E if bias else 0)


def shared_expert_parameters(moe: MoE, h: int, mlp: str, bias: bool = False) -> int:
    """E_s shared experts of one MoE layer, E_s·γ·2·h·f_s (DeepSeekMoE; Megatron SharedExpertMLP,
    one MLP of inner size E_s·f_s split over t like a dense MLP), its biases with `bias`."""
    return mlp_block_parameters(h, moe.E_s * moe.f_s, mlp, bias) if moe.E_s else 0


def moe_layer_parameters(model: Model, active: bool = False) -> int:
    """One whole MoE layer: attention and norms, the router, the shared experts and the E routed
    experts (k of them with `active`, the ones one token passes through)."""
    moe = model.moe
    if moe is None:
        raise ValueError("the model has no experts")
    experts = moe.k if active else moe.E
    return (
        attention_block_parameters(model)
        + router_parameters(moe, model.h, model.bias)
        + shared_expert_parameters(moe, model.h, model.mlp, model.bias)
        + routed_expert_parameters(moe, model.h, model.mlp, experts, model.bias)
    )


def attention_block_parameters(model: Model, t: int = 1) -> int:
    """A layer's attention side on one tensor-parallel rank: Q, K, V, O split over t (⌈g/t⌉ kv
    heads; or latent attention's projections), the QKV bias split and the output bias
    replicated, both norms and QK-norm replicated, attention sinks split (n/t). Dense and MoE
    layers share it."""
    n_t, g_t = ceil_div(model.n, t), ceil_div(model.g, t)
    total = attention_matrix_parameters(model, t) + 2 * norm_parameters(model)
    if model.qk_norm:
        total += qk_norm_parameters(model.k)
    if model.sinks:
        total += n_t  # one learned softmax offset per head (Megatron softmax_offset, [n/t])
    if model.bias:
        total += (n_t + 2 * g_t) * model.k + model.h
    return total


def dense_mlp_parameters(model: Model, t: int = 1) -> int:
    """A dense layer's MLP on one tensor-parallel rank: γ·2·h·⌈f/t⌉, with fc1's bias split
    (2f/t for SwiGLU) and fc2's bias replicated."""
    return mlp_block_parameters(model.h, ceil_div(model.f, t), model.mlp, model.bias)


def layer_parameters(model: Model, t: int = 1) -> int:
    """One transformer layer's parameters on one tensor-parallel rank (t = 1: the whole layer).

    Split over t (ceil for the heaviest rank; kv heads are replicated when t > g, so ⌈g/t⌉ = 1):
    attention, MLP, column-parallel biases. Replicated: the two norms and row-parallel biases,
    and latent attention's down projections and latent norms (`mla_attention_parameters`).
    """
    return attention_block_parameters(model, t) + dense_mlp_parameters(model, t)


def _mla_formula(mla: MLA) -> tuple[str, str]:
    """Latent attention's (split over t, replicated) terms in DeepSeek-V2's symbols."""
    if mla.q_lora is None:
        return "n·(h·(d_h+d_h^R) + d_c·(d_h+d_v) + d_v·h)", "h·(d_c+d_h^R) + d_c"
    return (
        "n·(d_c'·(d_h+d_h^R) + d_c·(d_h+d_v) + d_v·h)",
        "h·(d_c'+d_c+d_h^R) + d_c' + d_c",
    )


def layer_formula(model: Model) -> str:
    """Ψ_ℓ, one layer on one TP rank, in symbols."""
    mlp = "3·h·f" if gated(model.mlp) else "2·h·f"
    split = f"2·h·k·(n+g) + {mlp}"
    norms = "4·h" if model.norm == "layernorm" else "2·h"
    if model.mla is not None:
        attention, latents = _mla_formula(model.mla)
        split = f"{attention} + {mlp}"
        norms += f" + {latents}"
    if model.qk_norm:
        norms += " + 2·k"
    if model.bias:
        split += " + (n+2g)·k + " + ("2f" if gated(model.mlp) else "f")
        norms += " + 2·h"
    return f"({split})/t + {norms}"


def mtp_layer_parameters(model: Model, active: bool = False) -> int:
    """The transformer layer of one multi-token prediction module, shaped like the model's last
    (an MoE layer when layer L−1 routes to experts, as Megatron's mtp_layer_is_moe; all E
    experts, or the k one token uses with `active`)."""
    moe = model.moe
    if moe is not None and moe.is_moe_layer(model.L - 1):
        return moe_layer_parameters(model, active)
    return layer_parameters(model)


def mtp_extra_parameters(model: Model, t: int = 1) -> int:
    """What one multi-token prediction module adds around its layer, on one TP rank: eh_proj
    2h × h (column-parallel, 2h·⌈h/t⌉) and three norms ν·h, enorm, hnorm and the final norm
    before the shared head. The embedding and the output head are the main model's
    (DeepSeek-V3 §2.2) and are not counted again; Hugging Face checkpoints store a copy of
    each under model.layers.L."""
    return 2 * model.h * ceil_div(model.h, t) + 3 * norm_parameters(model)


def parameter_count(model: Model, vocab: int | None = None) -> ParameterCount:
    """The whole model's parameters; `vocab` overrides V (pass the padded V' for Megatron's count).

    Tied embeddings count the shared matrix once; learned positions add max_seq_len·h.
    """
    V = model.V if vocab is None else vocab
    # Every analysis asks for it (a search's thousands, of one model): kept on the frozen model
    # instance per vocabulary, as PlanLayout keeps its degrees (not a field).
    counted: dict[int, ParameterCount] = model.__dict__.setdefault("_parameter_counts", {})
    found = counted.get(V)
    if found is None:
        found = counted[V] = _parameter_count(model, V)
    return found


def _parameter_count(model: Model, V: int) -> ParameterCount:
    moe = model.moe
    return ParameterCount(
        per_layer=layer_parameters(model),
        embedding=V * model.h,
        position=model.max_seq_len * model.h if model.position == "learned" else 0,
        final_norm=norm_parameters(model),
        lm_head=0 if model.tied else V * model.h,
        layers=model.L,
        moe_layers=0 if moe is None else moe.moe_layers(model.L),
        per_moe_layer=0 if moe is None else moe_layer_parameters(model),
        active_per_moe_layer=0 if moe is None else moe_layer_parameters(model, active=True),
        mtp=model.mtp * (mtp_layer_parameters(model) + mtp_extra_parameters(model)),
        active_mtp=model.mtp * (mtp_layer_parameters(model, True) + mtp_extra_parameters(model)),
    )


def moe_layer_dense_parameters(model: Model, t: int) -> int:
    """The part of one MoE layer on one tensor-parallel rank that is not a routed expert:
    attention and norms as in a dense layer (split over t), the router (replicated: Megatron
    TopKRouter is not tensor-parallel) and the shared experts, one MLP of inner size E_s·f_s
    split over t (Megatron SharedExpertMLP, --moe-shared-expert-intermediate-size). These are
    reduced and sharded over the dense data-parallel group, like any dense weight."""
    moe = model.moe
    if moe is None:
        raise ValueError("the model has no experts")
    inner = ceil_div(moe.E_s * moe.f_s, t)
    shared = mlp_block_parameters(model.h, inner, model.mlp, model.bias) if moe.E_s else 0
    router = router_parameters(moe, model.h, model.bias)
    return attention_block_parameters(model, t) + router + shared


def local_expert_parameters(model: Model, ep: int, et: int, biases: bool = True) -> int:
    """(E/EP)·γ·2·h·⌈f_e/ETP⌉: the routed experts of one MoE layer on one rank, which holds E/EP
    whole experts (expert parallelism) each split ETP ways on f_e (expert tensor parallelism;
    Megatron-Core moe/README.md, experts.py GroupedMLP/TEGroupedMLP). Their gradients are
    reduced, and their optimizer state sharded, over the expert data-parallel group EDP."""
    moe = model.moe
    if moe is None:
        raise ValueError("the model has no experts")
    bias = biases and model.bias
    return moe.E // ep * expert_parameters(model.h, ceil_div(moe.f_e, et), model.mlp, bias)


def moe_layer_dense_formula(model: Model) -> str:
    """A MoE layer's non-expert part on one TP rank, in symbols (`moe_layer_dense_parameters`)."""
    moe = model.moe
    if moe is None:
        raise ValueError("the model has no experts")
    gamma = "3" if gated(model.mlp) else "2"
    norms = "2·h" if model.norm == "rmsnorm" else "4·h"
    text = f"2·h·k·(n+g)/t + {norms} + h·E"
    if model.qk_norm:
        text += " + 2·k"
    if model.bias:
        text += " + (n+2g)·k/t + h"
    if moe.router_bias:
        text += " + E"
    if moe.E_s:
        text += f" + {gamma}·h·E_s·f_s/t"
    return text


def expert_formula(model: Model) -> str:
    """One MoE layer's routed experts on one rank, in symbols (`local_expert_parameters`)."""
    gamma = "3" if gated(model.mlp) else "2"
    return f"(E/EP)·{gamma}·h·f_e/ETP"


@record
class RankParameters:
    """Parameters held by one tensor-parallel rank of pipeline rank r, by part (Ψ_r = total).

    With experts, `moe_layers` of the `layers` hold `per_moe_layer` (attention, router, shared
    experts) plus `experts_per_moe_layer` (this rank's E/EP routed experts, split over ETP)
    instead of `per_layer`. Ψ_r = Ψ_dense + Ψ_expert: the dense part is reduced and sharded over
    the data-parallel group, the expert part over the expert data-parallel group."""

    layers: int  # L_r: layers on this pipeline rank, all chunks
    per_layer: int  # Ψ_ℓ on this TP rank
    embedding: int  # V'/t·h on the first stage, and the MTP modules' copy on the last
    position: int  # max_seq_len·h on the first stage (replicated over t)
    final_norm: int  # ν·h on the last stage
    lm_head: int  # V'/t·h on the last stage: the untied head, or the tied embedding's copy
    moe_layers: int = 0  # of the L_r layers and MTP modules, those with experts
    per_moe_layer: int = 0  # a MoE layer's non-expert part on this TP rank
    experts_per_moe_layer: int = 0  # a MoE layer's routed experts on this rank
    # DeepSeek-V3's multi-token prediction modules, on the last stage: D layers shaped like the
    # last layer (counted in moe_layers when it has experts) and each one's eh_proj and norms.
    mtp_layers: int = 0
    mtp_extra: int = 0  # one module's eh_proj 2h·h/t and three norms 3νh
    # optimizer muon: Ψ_μ, the elements of the 2-D weights Muon updates, of the dense part and
    # of the routed experts (`planc.memory.matrices.stage_matrices`); 0 under other optimizers
    matrices: int = 0
    expert_matrices: int = 0

    @property
    def expert_total(self) -> int:
        """Ψ_expert: this rank's routed-expert parameters, all its MoE layers."""
        return self.moe_layers * self.experts_per_moe_layer

    @property
    def layer_total(self) -> int:
        """Every layer parameter on this rank, dense and expert, the multi-token prediction
        modules' included (they are layers too, and the memory reports list weights by these
        parts)."""
        dense = (self.layers + self.mtp_layers - self.moe_layers) * self.per_layer
        mtp = self.mtp_layers * self.mtp_extra
        return dense + self.moe_layers * self.per_moe_layer + self.expert_total + mtp

    @property
    def total(self) -> int:
        return self.layer_total + self.embedding + self.position + self.final_norm + self.lm_head

    @property
    def dense_total(self) -> int:
        """Ψ_dense = Ψ_r − Ψ_expert: what the data-parallel group reduces and shards."""
        return self.total - self.expert_total


def rank_parameters(job: Plannable, pp_rank: int) -> RankParameters:
    """Ψ_r: the parameters one TP rank of pipeline rank `pp_rank` holds.

    The first stage holds the word embedding (split over t on the padded V') and learned
    positions (replicated); the last stage the final norm and the LM head. With tied embeddings
    and p > 1 the last stage keeps its own copy of the word embedding (Megatron's embedding
    group, parallel_state.py default_embedding_ranks), with its own gradient and optimizer state.
    Multi-token prediction modules sit on the last stage, after the final layer (Megatron's
    GPTModel builds the MTP block in its post-process part), each layer priced as the stage's.
    """
    model, lay = job.model, job.layout
    if not 0 <= pp_rank < lay.p:
        raise ValueError(f"pipeline rank {pp_rank} is outside 0..{lay.p - 1}")
    first, last = pp_rank == 0, pp_rank == lay.last_stage
    vocab_slice = padded_vocab(model.V, lay.t) // lay.t * model.h
    head = last and (not model.tied or lay.last_stage != 0)  # tied on one rank: one copy
    # untied, the multi-token prediction modules' embedding is a matrix of its own
    mtp_copy = last and job.embedding_copy and not model.tied
    moe = model.moe
    mtp, mtp_moe = job.mtp_modules(pp_rank)
    muon = stage_matrices(job, pp_rank) if job.training.optimizer == "muon" else None
    return RankParameters(
        layers=lay.stage_layers[pp_rank],
        per_layer=layer_parameters(model, lay.t),
        embedding=vocab_slice if first or mtp_copy else 0,
        position=model.max_seq_len * model.h if first and model.position == "learned" else 0,
        final_norm=norm_parameters(model) if last else 0,
        lm_head=vocab_slice if head else 0,
        moe_layers=job.moe_layers(pp_rank) + mtp_moe,
        per_moe_layer=0 if moe is None else moe_layer_dense_parameters(model, lay.t),
        experts_per_moe_layer=0
        if moe is None
        else local_expert_parameters(model, lay.ep, lay.et),
        mtp_layers=mtp,
        mtp_extra=mtp_extra_parameters(model, lay.t) if mtp else 0,
        matrices=0 if muon is None else muon.elements(expert=False),
        expert_matrices=0 if muon is None else muon.elements(expert=True),
    )


__all__ = ["ParameterCount", "RankParameters", "padded_vocab", "parameter_count", "rank_parameters"]
