"""Static state by training engine: weights, gradients, optimizer state and their buffers, as
Megatron-Core, DeepSpeed ZeRO and PyTorch FSDP2 allocate them, and what offload moves to the host.

Ψ_r is the parameters of one rank (after tensor and pipeline splitting), N the shard group
(`parallelism.data_shard`, default d·c), Ψ_u the largest unit gathered at once (a layer on this
TP rank, or the embedding / the final norm and head), Ψ_M the largest single module (DeepSpeed's
`largest_layer_params`). Bytes per element: w for weights (2 in 16-bit, 4 in fp32), γ for
gradients, 4 for fp32 state. Shards take ⌈Ψ_r/N⌉ on the low indices, ⌊Ψ_r/N⌋ on the high ones.

| engine, bf16 + Adam          | weights | gradients            | optimizer   | buffers                       |
|------------------------------|---------|----------------------|-------------|-------------------------------|
| megatron, dist. optimizer    | 2Ψ      | 2Ψ (4Ψ fp32 main)    | 12Ψ/N       | grad bucket (ZeRO ≥ 2)        |
| deepspeed ZeRO-1             | 2Ψ      | 2Ψ + 4Ψ/N (fp32 step)| 12Ψ/N       | reduce bucket                 |
| deepspeed ZeRO-2             | 2Ψ      | 2Ψ/N + 4Ψ/N          | 12Ψ/N       | reduce bucket                 |
| deepspeed ZeRO-3             | 2Ψ/N    | 2Ψ/N + 4Ψ/N          | 12Ψ/N       | 4Ψ_M, prefetch, reduce bucket |
| fsdp2 (fp32 sharded params)  | 4Ψ/N    | 4Ψ/N                 | 8Ψ/N        | 2·2Ψ_u, 2Ψ_u + 4Ψ_u           |

DeepSpeed's own estimators (`estimate_zero2_model_states_mem_needs` in
deepspeed/runtime/zero/stage_1_and_2.py, `estimate_zero3_model_states_mem_needs` in stage3.py)
count 2Ψ + 18Ψ/N at ZeRO-2 and 4Ψ_M + 18Ψ/N at ZeRO-3 per GPU; planc's terms of the same names
add up to the same bytes (tests/test_memory_engines.py). The estimators leave out the ZeRO-3
16-bit parameter shard (2Ψ/N), the reduce bucket and the prefetched parameters, which planc
charges; and they take N as every GPU, where planc shards over d·c (TP and PP split Ψ first).
"""

from __future__ import annotations

from planc.memory.params import (
    SOURCE_MOE_PARAMS,
    SOURCE_PARAMS,
    RankParameters,
    expert_formula,
    layer_formula,
    moe_layer_dense_formula,
    router_parameters,
)
from planc.memory.static import (
    SHARD_GRADIENTS,
    SHARD_WEIGHTS,
    Group,
    Part,
    StateBytes,
    static_terms,
)
from planc.memory.terms import Component, Term, ceil_div
from planc.plannable import DS_REDUCE_BUCKET_ELEMENTS, Plannable
from planc.record import record
from planc.spec.job import MLA
from planc.vocab import DType, gated

# --- sources -------------------------------------------------------------------------------------

MEGATRON_OFFLOAD = (
    "Megatron-Core optimizer_cpu_offload (megatron/core/optimizer/cpu_offloading/"
    "hybrid_optimizer.py HybridDeviceOptimizer): fp32 master and moments on the host"
)
DS_STAGE12 = "DeepSpeed deepspeed/runtime/zero/stage_1_and_2.py DeepSpeedZeroOptimizer"
DS_STAGE3 = "DeepSpeed deepspeed/runtime/zero/stage3.py DeepSpeedZeroOptimizer_Stage3"
DS_CONFIG = "DeepSpeed deepspeed/runtime/zero/config.py DeepSpeedZeroConfig defaults"
DS_ESTIMATOR2 = "DeepSpeed stage_1_and_2.py estimate_zero2_model_states_mem_needs (2Ψ + 18Ψ/N)"
DS_ESTIMATOR3 = (
    "DeepSpeed stage3.py estimate_zero3_model_states_mem_needs (4·largest_layer + 18Ψ/N)"
)
FSDP2 = "PyTorch torch/distributed/fsdp/_fully_shard (_fsdp_param.py FSDPParam)"
FSDP2_COLLECTIVES = "PyTorch torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py"
FSDP2_OFFLOAD = "PyTorch FSDP2 CPUOffloadPolicy (_fsdp_api.py): sharded parameters, gradients and the optimizer step on the host"

# DeepSpeed's ZeRO defaults, in elements (deepspeed/runtime/zero/config.py).
DS_ALLGATHER_BUCKET_ELEMENTS = 500_000_000  # allgather_bucket_size
DS_PREFETCH_BUCKET_ELEMENTS = 50_000_000  # stage3_prefetch_bucket_size
DS_MAX_LIVE_PARAMETERS = 1_000_000_000  # stage3_max_live_parameters

# FSDP2 keeps the unit in use and the one prefetched gathered (implicit forward prefetch, one
# unit of explicit backward prefetch by default).
FSDP2_GATHERED_UNITS = 2


@record
class Placed:
    """Static terms of one rank: those in HBM and those offloaded to host memory."""

    hbm: tuple[Term, ...]
    host: tuple[Term, ...] = ()


def _term(name: str, component: Component, size: int, formula: str, source: str) -> Term:
    return Term(name, component, size, formula, source)


# --- the parts a rank's parameters are sharded in ----------------------------------------------

TORCHTITAN_EXPERTS = (
    "torchtitan distributed/fsdp.py apply_fsdp (routed experts fully_shard-ed over the edp mesh, "
    "efsdp = dp_shard·cp·tp/ep) and parallel_dims.py"
)
MEGATRON_EXPERTS = (
    "Megatron-Core optimizer/__init__.py get_megatron_optimizer (expert_parallel_buffers and a "
    "second DistributedOptimizer over intra_expt_dp_group) and distributed_data_parallel.py"
)
DS_EXPERTS = (
    "DeepSpeed moe/utils.py split_params_into_different_moe_groups_for_optimizer; "
    "stage_1_and_2.py _configure_moe_settings (expert groups partitioned over expert_dp)"
)


def parts(share: RankParameters, group: Group, expert_group: Group) -> tuple[Part, ...]:
    """The rank's flat parameter buffers: Ψ_r over N for a dense model; with experts, the dense
    part Ψ_d over N and the routed experts Ψ_e over N_e = EDP/R, which every engine keeps in a
    buffer and optimizer of their own (Megatron-Core, DeepSpeed, torchtitan's FSDP2)."""
    if not share.expert_total:
        return (Part(share.total, group, matrices=share.matrices),)
    return (
        Part(share.dense_total, group, "Ψ_d", matrices=share.matrices),
        Part(share.expert_total, expert_group, "Ψ_e", "expert ", share.expert_matrices),
    )


# --- units the engines gather ------------------------------------------------------------------


def largest_layer(share: RankParameters) -> int:
    """The largest layer on this rank: a dense layer's Ψ_ℓ, or a MoE layer's non-expert part
    (attention, norms, router, shared experts over t) plus its E/EP routed experts over ETP,
    which FSDP2 and ZeRO-3 gather together as one unit (torchtitan fully_shards the whole
    transformer block, experts over their own mesh)."""
    dense = share.layers - share.moe_layers
    moe = share.per_moe_layer + share.experts_per_moe_layer
    return max(share.per_layer if dense else 0, moe if share.moe_layers else 0)


def largest_unit(share: RankParameters) -> int:
    """Ψ_u: the largest unit gathered at once on this rank: a layer on this TP rank (with its
    local experts, `largest_layer`), or the embedding (with learned positions), or the final
    norm and the LM head."""
    first_unit = share.embedding + share.position
    last_unit = share.lm_head + share.final_norm
    return max(largest_layer(share), first_unit, last_unit)


def _mlp_modules(h: int, f: int, gated: int, bias: int, fused: bool) -> tuple[int, ...]:
    """The modules of one MLP of inner size f on this rank: fused, fc1 (gate and up together)
    and fc2; unfused, separate gate, up and down linears of h·f each."""
    if fused:
        return (h * f * gated + bias * f * gated, f * h + bias * h)
    return (h * f + bias * f,)


def latent_attention_modules(h: int, n: int, mla: MLA) -> tuple[int, ...]:
    """Latent attention's linears and latent norms on one TP rank of n heads, each its own
    module (Megatron-Core MLASelfAttention, Hugging Face DeepseekV3Attention): q_a_proj h·d_c'
    and its norm d_c' (or q_proj h·n·(d_h + d_h^R) without a query latent), q_b_proj
    d_c'·n·(d_h + d_h^R), kv_a_proj h·(d_c + d_h^R) and its norm d_c, kv_b_proj
    d_c·n·(d_h + v), o_proj n·v·h."""
    query: tuple[int, ...] = (
        (h * n * mla.qk_head,)
        if mla.q_lora is None
        else (h * mla.q_lora, mla.q_lora, mla.q_lora * n * mla.qk_head)
    )
    return (
        *query,
        h * (mla.kv_lora + mla.qk_rope),
        mla.kv_lora,
        mla.kv_lora * n * (mla.qk_nope + mla.v_head),
        n * mla.v_head * h,
    )


def largest_module(job: Plannable, share: RankParameters) -> int:
    """Ψ_M: the largest single module's own parameters on this TP rank, DeepSpeed's
    `largest_layer_params` (stage3.py model_to_params: Σ numel of m.parameters(recurse=False)).

    With fused kernels the projections are Megatron's fused QKV and fc1; unfused they are
    separate q, k, v, o and gate, up, down linears (Hugging Face and torchtitan models); latent
    attention's are `latent_attention_modules` either way. A MoE
    layer adds its router (h·E), its shared experts as one MLP of E_s·f_s over t, and one
    routed expert's linears of f_e over ETP: DeepSpeed's MoE keeps a copy of the expert module
    per local expert (deepspeed/moe/experts.py Experts), so each is a module of its own.
    """
    mod, t = job.model, job.layout.t
    n, g = ceil_div(mod.n, t), ceil_div(mod.g, t)
    bias = 1 if mod.bias else 0
    halves = 2 if gated(mod.mlp) else 1
    fused = job.training.kernels == "fused"
    attention: tuple[int, ...]
    if mod.mla is not None:
        attention = latent_attention_modules(mod.h, n, mod.mla)
    elif fused:
        attention = (
            mod.h * mod.k * (n + 2 * g) + bias * (n + 2 * g) * mod.k,  # QKV
            mod.h * mod.k * n + bias * mod.h,  # out-projection
        )
    else:
        attention = (mod.h * mod.k * n + bias * n * mod.k,)  # q (and o)
    modules: tuple[int, ...] = ()
    if share.layers > share.moe_layers:
        modules += attention + _mlp_modules(mod.h, ceil_div(mod.f, t), halves, bias, fused)
    moe = mod.moe
    if moe is not None and share.moe_layers:
        modules += (*attention, router_parameters(moe, mod.h, mod.bias))
        modules += _mlp_modules(mod.h, ceil_div(moe.f_e, job.layout.et), halves, 0, fused)
        if moe.E_s:
            modules += _mlp_modules(mod.h, ceil_div(moe.E_s * moe.f_s, t), halves, 0, fused)
    ends = (share.embedding, share.position, share.lm_head)
    return max(*modules, *ends)


# --- Megatron-Core -----------------------------------------------------------------------------


def megatron_weight_parts(
    job: Plannable, share: RankParameters
) -> tuple[tuple[str, int, str], ...]:
    """The dense part's weights by part: layers (a MoE layer's non-expert part with them),
    embedding, positions, final norm, LM head or the tied embedding's copy."""
    model = job.model
    tied_copy = model.tied and job.layout.p > 1
    layers = f"L_r·[{layer_formula(model)}]"
    if model.moe is not None and share.moe_layers:
        layers = f"((L_r − L_e)·[{layer_formula(model)}] + L_e·[{moe_layer_dense_formula(model)}])"
    return (
        ("layer weights", share.layer_total - share.expert_total, layers),
        ("word embedding weights", share.embedding, "V'·h/t"),
        ("position embedding weights", share.position, "max_seq_len·h"),
        ("final norm weights", share.final_norm, "ν·h"),
        (
            "tied word embedding copy" if tied_copy else "LM head weights",
            share.lm_head,
            "V'·h/t",
        ),
    )


def megatron_static_terms(
    job: Plannable, share: RankParameters, state: StateBytes, buffers: tuple[Part, ...]
) -> tuple[Term, ...]:
    """Weights by part, the gradient buffer and the distributed optimizer's state
    (`planc.memory.static`) of each buffer, the weights sourced to the parameter count too.
    With experts, the expert buffer is Megatron-Core's expert_parallel_buffers, reduced and
    sharded by its own DistributedOptimizer over the expert data-parallel group."""
    terms: list[Term] = []
    for part in buffers:
        if part.prefix:
            weights: tuple[tuple[str, int, str], ...] = (
                ("expert weights", part.psi, f"L_e·{expert_formula(job.model)}"),
            )
            counts, every = SOURCE_MOE_PARAMS, f"; {MEGATRON_EXPERTS}"
        else:
            weights = megatron_weight_parts(job, share)
            counts, every = SOURCE_PARAMS, ""
        for t in static_terms(
            part.psi, state, part.group, weights, part.symbol, part.prefix, part.matrices
        ):
            extra = every + (f"; counts: {counts}" if t.component == "weights" else "")
            terms.append(Term(t.name, t.component, t.bytes, t.formula, t.source + extra))
    return tuple(terms)


# Megatron-LM shards gradients and weights (ZeRO-2/3) only through Megatron-FSDP
# (planc.compile: --use-megatron-fsdp with data_parallel_sharding_strategy optim_grads or
# optim_grads_params), whose buffers are laid out per FSDP unit.
MEGATRON_FSDP_UNITS = (
    "Megatron-Core Megatron-FSDP (megatron/core/distributed/fsdp/src/megatron_fsdp, Megatron-LM "
    "2edffadb): the FSDP units are the transformer layers (mcore_fsdp_adapter.py); "
    "param_and_grad_buffer.py gathers a unit's weights and builds its unsharded gradients per "
    "unit, two at a time: with fsdp_double_buffer (Megatron-Bridge's recipes; NCCL user "
    "buffers need it) in pools of two units kept for the run (weight_alloc, main_grad_alloc: "
    "FixedPoolAllocator(size=2); _enforce_double_buffer_limit), without it in temporary "
    "buckets, the unit in use beside the one prefetched or reduce-scattering"
)
MEGATRON_FSDP_NON_UNIT = (
    "Megatron-FSDP param_and_grad_buffer.py ('Non-unit modules should remain persistently "
    "allocated'): the embedding, final norm and LM head, outside every unit, stay gathered "
    "from their first forward until finish_grad_sync (megatron_fsdp.py)"
)


def megatron_bucket(share: RankParameters, state: StateBytes) -> Term:
    """γ·2·Ψ_ℓ: the unsharded gradients of two FSDP units, the one reduce-scattering and the
    next being computed (ZeRO ≥ 2, Megatron-FSDP; up to ZeRO-1 the distributed optimizer's
    buckets are views of the gradient buffer)."""
    return _term(
        f"unsharded gradients of two units ({state.grad_label})",
        "buffers",
        state.gradients * 2 * largest_layer(share),
        f"{state.gradients}·2·Ψ_ℓ",
        MEGATRON_FSDP_UNITS,
    )


def zero3_gather_bytes(share: RankParameters, state: StateBytes) -> int:
    """w × 2 × Ψ_u: the unit in use and the one prefetched, gathered under ZeRO-3."""
    return 2 * state.weights * largest_unit(share)


def megatron_gather(share: RankParameters, state: StateBytes) -> tuple[Term, ...]:
    """Megatron-FSDP's gathered weights under ZeRO-3: w·2·Ψ_ℓ for the layer in use and the one
    prefetched (ZeRO §5.3 and §7.2.2: each unit gathered just before its forward and backward),
    and the modules outside every unit (the embedding slice and learned positions, the final
    norm, the head slice), gathered for the whole step."""
    outside = share.embedding + share.position + share.final_norm + share.lm_head
    units = _term(
        f"ZeRO-3 gathered units ({state.label})",
        "buffers",
        2 * state.weights * largest_layer(share),
        f"{state.weights}·2·Ψ_ℓ",
        "Rajbhandari et al. 2020, ZeRO §5.3, §7.2.2 (one layer gathered at a time); "
        + MEGATRON_FSDP_UNITS,
    )
    if not outside:
        return (units,)
    kept = _term(
        f"ZeRO-3 gathered embedding, final norm and head ({state.label})",
        "buffers",
        state.weights * outside,
        f"{state.weights}·(embedding + final norm + head)",
        MEGATRON_FSDP_NON_UNIT,
    )
    return (units, kept)


def megatron_terms(
    job: Plannable, share: RankParameters, state: StateBytes, buffers: tuple[Part, ...]
) -> Placed:
    """Megatron-Core: the distributed optimizer and its contiguous gradient buffer.

    Up to ZeRO-1 the gradient buckets are views of the full gradient buffer (Megatron's
    param_and_grad_buffer: main_grad is a view, reduced in place), so they cost nothing extra.
    From ZeRO-2 each bucket's full gradients exist before its reduce-scatter. Optimizer offload
    (Megatron-Core's optimizer_cpu_offload) moves the fp32 master and moments to the host;
    Megatron has no parameter offload, so `offload.parameters` moves nothing.
    """
    zero = buffers[0].group.zero
    static = megatron_static_terms(job, share, state, buffers)
    extra: list[Term] = []
    if zero >= 2:
        extra.append(megatron_bucket(share, state))
    if zero >= 3:
        extra += megatron_gather(share, state)
    hbm = [*static, *extra]
    host: list[Term] = []
    if job.training.offload_optimizer:
        host = [_offloaded(t, MEGATRON_OFFLOAD) for t in hbm if t.component == "optimizer"]
        hbm = [t for t in hbm if t.component != "optimizer"]
    return Placed(tuple(hbm), tuple(host))


def _offloaded(term: Term, source: str) -> Term:
    return Term(
        f"{term.name}, offloaded",
        term.component,
        term.bytes,
        term.formula,
        f"{term.source}; {source}",
    )


# --- DeepSpeed ZeRO ----------------------------------------------------------------------------


def _ds_source(zero: int) -> str:
    return (
        (DS_STAGE3 if zero >= 3 else DS_STAGE12)
        + "; "
        + (DS_ESTIMATOR3 if zero >= 3 else DS_ESTIMATOR2)
    )


def _expert_source(part: Part, source: str, experts: str) -> str:
    """`source`, and for the expert buffer where the engine keeps it apart."""
    return f"{source}; {experts}" if part.prefix else source


def ds_weights(part: Part, state: StateBytes) -> Term:
    """w·Ψ_r, or w·Ψ_r/N at ZeRO-3: the 16-bit flat parameter groups (stage 1/2:
    bit16_groups_flat, whole) or each parameter's partition (stage 3: ds_tensor)."""
    group = part.group
    sharded = group.zero >= SHARD_WEIGHTS
    return _term(
        f"{part.prefix}{'parameter partition' if sharded else 'parameters'} ({state.label})",
        "weights",
        state.weights * group.elements(part.psi, SHARD_WEIGHTS),
        f"{state.weights}·{part.symbol}{group.suffix(SHARD_WEIGHTS)}",
        _expert_source(part, _ds_source(group.zero), DS_EXPERTS),
    )


def ds_gradients(part: Part, state: StateBytes) -> Term:
    """γ·Ψ_r, or γ·Ψ_r/N from ZeRO-2: the 16-bit gradients (stage 1: param.grad, whole until the
    step; stage 2: the contiguous grads_in_partition; stage 3: the flat gradient partitions)."""
    group = part.group
    g = 2 if state.master else state.gradients
    kind = "partition" if group.zero >= SHARD_GRADIENTS else "buffer"
    return _term(
        f"{part.prefix}gradient {kind} ({state.label})",
        "gradients",
        g * group.elements(part.psi, SHARD_GRADIENTS),
        f"{g}·{part.symbol}{group.suffix(SHARD_GRADIENTS)}",
        _expert_source(part, _ds_source(group.zero), DS_EXPERTS),
    )


def ds_fp32_gradients(part: Part, state: StateBytes) -> Term:
    """4·Ψ_r/N: the fp32 copy of this rank's gradient partition the optimizer steps on (stage
    1/2: single_partition_grad = flat partition .to(fp32), stage 3:
    fp32_partitioned_groups_flat[i].grad). 0 in fp32 training (the gradients are fp32)."""
    group = part.group
    elements = group.elements(part.psi, 1) if group.zero else part.psi
    return _term(
        f"{part.prefix}fp32 gradient partition (optimizer step)",
        "gradients",
        4 * elements if state.master else 0,
        f"4·{part.symbol}" + (f"/{group.symbol}" if group.zero else ""),
        _expert_source(part, _ds_source(group.zero), DS_EXPERTS),
    )


def ds_optimizer(part: Part, state: StateBytes) -> tuple[Term, ...]:
    """4·Ψ_r/N each: the fp32 master partition (single_partition_of_fp32_groups /
    fp32_partitioned_groups_flat) and the optimizer's moments on it."""
    group = part.group
    elements = group.elements(part.psi, 1) if group.zero else part.psi
    suffix = f"/{group.symbol}" if group.zero else ""
    lines = [("fp32 master partition", state.master)] if state.master else []
    lines += [(f"{name} (fp32)", size) for name, size in state.moments]
    source = _expert_source(part, _ds_source(group.zero), DS_EXPERTS)
    return tuple(
        _term(
            f"{part.prefix}{name}",
            "optimizer",
            size * elements,
            f"{size}·{part.symbol}{suffix}",
            source,
        )
        for name, size in lines
    )


def ds_reduce_bucket(psi: int, state: StateBytes) -> Term:
    """2·min(reduce_bucket_size, Ψ_r): the IPG bucket that gathers gradients before each
    reduce(-scatter) (stage 1/2 ipg_buffer, stage 3 IPGBucketZ3.buffer); 5·10⁸ elements."""
    g = 2 if state.master else state.gradients
    return _term(
        f"reduce bucket ({state.label})",
        "buffers",
        g * min(DS_REDUCE_BUCKET_ELEMENTS, psi),
        f"{g}·min(reduce_bucket_size = 5·10⁸, Ψ_r)",
        f"{DS_CONFIG} (reduce_bucket_size); {DS_STAGE12} ipg_buffer",
    )


def ds_module_in_use(module: int, state: StateBytes) -> tuple[Term, ...]:
    """2·Ψ_M + 2·Ψ_M: the largest module's gathered 16-bit parameters and its full 16-bit
    gradient before the reduce-scatter, DeepSpeed's 4·largest_layer_params (ZeRO-3)."""
    return (
        _term(
            f"ZeRO-3 gathered module ({state.label})",
            "buffers",
            state.weights * module,
            f"{state.weights}·Ψ_M",
            f"{DS_STAGE3} (partitioned_param_coordinator fetch_sub_module); {DS_ESTIMATOR3}",
        ),
        _term(
            f"ZeRO-3 module gradient ({state.label})",
            "buffers",
            (2 if state.master else state.gradients) * module,
            f"{2 if state.master else state.gradients}·Ψ_M",
            f"{DS_STAGE3} (reduce_ready_partitions_and_remove_grads); {DS_ESTIMATOR3}",
        ),
    )


def ds_prefetch(psi: int, module: int, state: StateBytes) -> Term:
    """w·(min(Ψ_M + min(prefetch_bucket_size, Ψ_r), max(max_live_parameters, Ψ_M)) − Ψ_M): the
    parameters gathered ahead of use (stage3_prefetch_bucket_size 5·10⁷), capped by
    stage3_max_live_parameters (10⁹) together with the module in use."""
    live = min(module + min(DS_PREFETCH_BUCKET_ELEMENTS, psi), max(DS_MAX_LIVE_PARAMETERS, module))
    return _term(
        f"ZeRO-3 prefetched parameters ({state.label})",
        "buffers",
        state.weights * (live - module),
        f"{state.weights}·min(5·10⁷, Ψ_r) (stage3_prefetch_bucket_size; ≤ 10⁹ live)",
        f"{DS_CONFIG} (stage3_prefetch_bucket_size, stage3_max_live_parameters)",
    )


DS_OFFLOAD = "DeepSpeed ZeRO-Offload (offload_optimizer: DeepSpeedCPUAdam on the host partition)"
DS_OFFLOAD_PARAM = "DeepSpeed ZeRO-3 offload_param (partitioned parameters on the host)"


def deepspeed_terms(
    job: Plannable, share: RankParameters, state: StateBytes, buffers: tuple[Part, ...]
) -> Placed:
    """DeepSpeed ZeRO 0–3 over the shard group (stage 0 keeps whole buffers: N = 1 in effect),
    the experts' param groups over the expert data-parallel group (`parts`).

    The all-gather of updated parameters after a stage 1/2 step writes into the flat 16-bit
    groups (all_gather_into_tensor), so allgather_bucket_size (5·10⁸) costs no extra memory.
    Optimizer offload moves the fp32 master, the moments and the fp32 gradient partition to the
    host, and from stage 2 the gradients go there as they are reduced, so the 16-bit gradient
    partition is not kept; parameter offload
    (stage 3 only) moves the 16-bit parameter partition. DeepSpeed's own MoE refuses ZeRO-3
    (engine.py _validate_zero3_moe_compatibility, AutoEP only); planc shards the experts over
    N_e at every stage.
    """
    zero = buffers[0].group.zero
    whole = tuple(
        part
        if zero
        else Part(part.psi, Group(0, 1, 0, part.group.symbol), part.symbol, part.prefix)
        for part in buffers
    )
    weights = [ds_weights(part, state) for part in whole]
    grads = [ds_gradients(part, state) for part in whole]
    fp32_grads = [ds_fp32_gradients(part, state) for part in whole]
    optimizer = [term for part in whole for term in ds_optimizer(part, state)]
    psi = share.total
    extra = [ds_reduce_bucket(psi, state)]
    if zero >= 3:
        module = largest_module(job, share)
        extra += [*ds_module_in_use(module, state), ds_prefetch(psi, module, state)]
    hbm: list[Term] = [*weights, *grads, *fp32_grads, *optimizer, *extra]
    host: list[Term] = []
    tr = job.training
    if tr.offload_optimizer:
        moved = [*fp32_grads, *optimizer]
        host += [_offloaded(t, DS_OFFLOAD) for t in moved]
        # From stage 2 the reduced gradients are copied straight into the fp32 host partition
        # (stage_1_and_2.py async_inplace_copy_grad_to_fp32_buffer_from_gpu; stage3.py
        # partition_grads to the offloaded fp32 grad buffer): no 16-bit partition is kept.
        gone = grads if zero >= SHARD_GRADIENTS else []
        hbm = [t for t in hbm if t not in moved and t not in gone]
    if tr.offload_parameters and zero >= 3:
        host += [_offloaded(t, DS_OFFLOAD_PARAM) for t in weights]
        hbm = [t for t in hbm if t not in weights]
    return Placed(tuple(t for t in hbm if t.bytes), tuple(t for t in host if t.bytes))


# --- PyTorch FSDP2 -----------------------------------------------------------------------------


def fsdp_sharded_parameters(part: Part, width: int) -> Term:
    """p·Ψ_r/N: the sharded parameters, kept in the model's dtype (FSDPParam._sharded_param_data;
    `training.model_dtype`, p = 4 bytes for fp32, 2 for bf16); MixedPrecisionPolicy
    (param_dtype=bf16) casts only the all-gathered copy. They are the optimizer's parameters:
    there is no separate master copy."""
    return _term(
        f"{part.prefix}sharded parameters ({_dtype(width)})",
        "weights",
        width * part.group.elements(part.psi, 1),
        f"{width}·{part.symbol}/{part.group.symbol}",
        _expert_source(
            part, FSDP2 + " (sharded DTensor parameters in the model's dtype)", TORCHTITAN_EXPERTS
        ),
    )


def fsdp_sharded_gradients(part: Part, width: int) -> Term:
    """p·Ψ_r/N: the sharded gradients, in the sharded parameters' dtype (foreach_reduce casts
    the reduce-scatter output to it and accumulates into sharded_param.grad)."""
    return _term(
        f"{part.prefix}sharded gradients ({_dtype(width)})",
        "gradients",
        width * part.group.elements(part.psi, 1),
        f"{width}·{part.symbol}/{part.group.symbol}",
        _expert_source(part, FSDP2_COLLECTIVES + " foreach_reduce", TORCHTITAN_EXPERTS),
    )


def fsdp_optimizer(part: Part, state: StateBytes, width: int) -> tuple[Term, ...]:
    """p·Ψ_r/N per moment: the optimizer's state on the sharded parameters, in their dtype
    (torch.optim's Adam and SGD make it with zeros_like of each parameter)."""
    return tuple(
        _term(
            f"{part.prefix}{name} ({_dtype(width)})",
            "optimizer",
            width * part.group.elements(part.psi, 1),
            f"{width}·{part.symbol}/{part.group.symbol}",
            _expert_source(
                part, "torch.optim on FSDP2's sharded DTensor parameters", TORCHTITAN_EXPERTS
            ),
        )
        for name, _ in state.moments
    )


def _dtype(width: int) -> str:
    return "fp32" if width == 4 else "bf16"


def pipelined_fsdp(job: Plannable) -> bool:
    """Whether torch.distributed.pipelining runs the FSDP2 stage over several micro-batches:
    its backward_maybe_with_nosync sets the module's requires_gradient_sync and
    reshard_after_backward off for every backward and reduces only after the last
    (torch/distributed/pipelining/stage.py), so the unsharded parameters and gradients stay."""
    return job.layout.p > 1 and job.m > 1


def fsdp_gathered_parameters(job: Plannable, share: RankParameters, state: StateBytes) -> Term:
    """w·2·Ψ_u with reshard_after_forward (the unit in use and the one prefetched), or w·Ψ_r
    without, or under pipelining (`pipelined_fsdp`: no resharding after backward either, so
    every unit is gathered by the last micro-batch's backward): every unit's all-gathered
    parameters stay from its forward to its backward."""
    w = state.weights
    if job.training.reshard_after_forward and not pipelined_fsdp(job):
        return _term(
            f"gathered parameters, unit in use and prefetched ({state.label})",
            "buffers",
            w * FSDP2_GATHERED_UNITS * largest_unit(share),
            f"{w}·2·max(Ψ_ℓ, embedding, head)",
            FSDP2 + " (reshard_after_forward=True; all-gather output in param_dtype)",
        )
    return _term(
        f"gathered parameters, all units forward to backward ({state.label})",
        "buffers",
        w * share.total,
        f"{w}·Ψ_r",
        FSDP2 + " (reshard_after_forward=False keeps the unsharded parameters after forward)",
    )


def fsdp_accumulated_gradients(share: RankParameters, reduce: int, reduce_label: str) -> Term:
    """r·Ψ_r under pipelining (`pipelined_fsdp`): with gradient sync off, FSDP2 keeps every
    parameter's unsharded gradient across the micro-batches in reduce_dtype (upcast where it
    differs from param_dtype: FSDPParam.to_accumulated_grad_if_needed, then
    accumulate_unsharded_grad_if_needed adds each micro-batch's)."""
    return _term(
        f"unsharded gradients accumulated over the micro-batches ({reduce_label})",
        "gradients",
        reduce * share.total,
        f"{reduce}·Ψ_r",
        FSDP2_COLLECTIVES + " FSDPParam.unsharded_accumulated_grad; torch pipelining "
        "backward_maybe_with_nosync (set_requires_gradient_sync(False) until the last backward)",
    )


def fsdp_unit_gradients(
    share: RankParameters, state: StateBytes, reduce: int, reduce_label: str
) -> tuple[Term, ...]:
    """w·Ψ_u + r·Ψ_u: the unit's unsharded gradients in param_dtype, and the reduce-scatter
    input in reduce_dtype (r = 4 bytes for fp32, torchtitan's mixed_precision_reduce; 2 for
    bf16, `training.reduce_dtype`) that foreach_reduce builds from them."""
    unit = largest_unit(share)
    return (
        _term(
            f"unsharded unit gradients ({state.label})",
            "buffers",
            state.weights * unit,
            f"{state.weights}·Ψ_u",
            FSDP2_COLLECTIVES + " foreach_reduce (unsharded_grad)",
        ),
        _term(
            f"reduce-scatter input ({reduce_label} reduce_dtype)",
            "buffers",
            reduce * unit,
            f"{reduce}·Ψ_u",
            FSDP2_COLLECTIVES + " foreach_reduce (reduce_scatter_input in reduce_dtype)",
        ),
    )


def fsdp2_terms(
    job: Plannable, share: RankParameters, state: StateBytes, buffers: tuple[Part, ...]
) -> Placed:
    """PyTorch FSDP2 (fully_shard per layer and on the root, as torchtitan applies it): the
    parameters, gradients and optimizer state are always sharded over N (zero_stage is not
    read), the routed experts over N_e (torchtitan's efsdp mesh). CPUOffloadPolicy
    (`offload.parameters`) moves the sharded parameters, gradients and the optimizer state to
    the host, where the optimizer steps; `offload.optimizer` alone moves the optimizer state."""
    # fully_shard: every buffer sharded, whatever zero_stage says
    sharded = tuple(
        Part(
            p.psi,
            Group(SHARD_WEIGHTS, p.group.N, p.group.index, p.group.symbol),
            p.symbol,
            p.prefix,
        )
        for p in buffers
    )
    width = DType(job.training.model_dtype).bits // 8
    params = [fsdp_sharded_parameters(part, width) for part in sharded]
    grads = [fsdp_sharded_gradients(part, width) for part in sharded]
    optimizer = [term for part in sharded for term in fsdp_optimizer(part, state, width)]
    hbm: list[Term] = [
        *params,
        *grads,
        *optimizer,
        fsdp_gathered_parameters(job, share, state),
        *fsdp_unit_gradients(share, state, job.numerics.reduce, job.training.reduce_dtype),
    ]
    if pipelined_fsdp(job):
        hbm.append(
            fsdp_accumulated_gradients(share, job.numerics.reduce, job.training.reduce_dtype)
        )
    moved: list[Term] = []
    if job.training.offload_parameters:
        moved = [*params, *grads, *optimizer]
    elif job.training.offload_optimizer:
        moved = list(optimizer)
    host = [_offloaded(t, FSDP2_OFFLOAD) for t in moved]
    return Placed(tuple(t for t in hbm if t not in moved), tuple(host))


def engine_terms(
    job: Plannable,
    share: RankParameters,
    state: StateBytes,
    group: Group,
    expert_group: Group | None = None,
) -> Placed:
    """The static terms of one rank under `training.framework`: its dense buffer sharded over
    `group`, its routed experts (if any) over `expert_group` (default: `group`)."""
    buffers = parts(share, group, group if expert_group is None else expert_group)
    framework = job.training.framework
    if framework == "deepspeed":
        return deepspeed_terms(job, share, state, buffers)
    if framework == "fsdp2":
        return fsdp2_terms(job, share, state, buffers)
    return megatron_terms(job, share, state, buffers)
