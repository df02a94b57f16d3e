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

from planc.memory.params import SOURCE_PARAMS, RankParameters, layer_formula
from planc.memory.static import (
    SHARD_GRADIENTS,
    SHARD_WEIGHTS,
    Group,
    StateBytes,
    static_terms,
)
from planc.memory.terms import Component, Term, ceil_div
from planc.plannable import DS_REDUCE_BUCKET_ELEMENTS, Plannable
from planc.record import record

# --- sources -------------------------------------------------------------------------------------

MEGATRON_DDP = "Megatron-LM distributed_data_parallel.py default bucket_size"
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
# FSDP2's reduce-scatter runs in the MixedPrecisionPolicy's reduce_dtype; torchtitan's default
# (mixed_precision_reduce = "float32") is fp32.
FSDP2_REDUCE_BYTES = 4


@record
class Placed:
    """Static terms of one rank: those in HBM and those offloaded to host memory."""

    hbm: tuple[Term, ...]
    host: tuple[Term, ...] = ()


def _term(name: str, component: Component, size: int, formula: str, source: str) -> Term:
    return Term(name, component, size, formula, source)


# --- units the engines gather ------------------------------------------------------------------


def largest_unit(share: RankParameters) -> int:
    """Ψ_u: the largest unit gathered at once on this rank: a layer on this TP rank, or the
    embedding (with learned positions), or the final norm and the LM head."""
    first_unit = share.embedding + share.position
    last_unit = share.lm_head + share.final_norm
    return max(share.per_layer if share.layers else 0, first_unit, last_unit)


def largest_module(job: Plannable, share: RankParameters) -> int:
    """Ψ_M: the largest single module's own parameters on this TP rank, DeepSpeed's
    `largest_layer_params` (stage3.py model_to_params: Σ numel of m.parameters(recurse=False)).

    With fused kernels the projections are Megatron's fused QKV and fc1; unfused they are
    separate q, k, v, o and gate, up, down linears (Hugging Face and torchtitan models).
    """
    mod, t = job.model, job.layout.t
    n, g, f = ceil_div(mod.n, t), ceil_div(mod.g, t), ceil_div(mod.f, t)
    bias = 1 if mod.bias else 0
    gated = 2 if mod.mlp == "swiglu" else 1
    layer: tuple[int, ...]
    if job.training.kernels == "fused":
        layer = (
            mod.h * mod.k * (n + 2 * g) + bias * (n + 2 * g) * mod.k,  # QKV
            mod.h * mod.k * n + bias * mod.h,  # out-projection
            mod.h * f * gated + bias * f * gated,  # fc1
            f * mod.h + bias * mod.h,  # fc2
        )
    else:
        layer = (
            mod.h * mod.k * n + bias * n * mod.k,  # q (and o)
            mod.h * f + bias * f,  # gate, up, down
        )
    ends = (share.embedding, share.position, share.lm_head)
    return max(*(layer if share.layers else ()), *ends)


# --- Megatron-Core -----------------------------------------------------------------------------


def megatron_weight_parts(
    job: Plannable, share: RankParameters
) -> tuple[tuple[str, int, str], ...]:
    model = job.model
    tied_copy = model.tied and job.layout.p > 1
    return (
        ("layer weights", share.layer_total, f"L_r·[{layer_formula(model)}]"),
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
    job: Plannable, share: RankParameters, state: StateBytes, group: Group
) -> tuple[Term, ...]:
    """Weights by part, the gradient buffer and the distributed optimizer's state
    (`planc.memory.static`), the weights sourced to the parameter count too."""
    terms = static_terms(share.total, state, group, megatron_weight_parts(job, share))
    return tuple(
        Term(t.name, t.component, t.bytes, t.formula, f"{t.source}; counts: {SOURCE_PARAMS}")
        if t.component == "weights"
        else t
        for t in terms
    )


def megatron_bucket(job: Plannable, share: RankParameters, state: StateBytes) -> Term:
    """γ·min(max(4·10⁷, 10⁶·d), Ψ_r): one gradient bucket's full gradients before its
    reduce-scatter (ZeRO ≥ 2; up to ZeRO-1 buckets are views of the gradient buffer)."""
    elements = min(job.layout.bucket_elements, share.total)
    return _term(
        f"gradient reduce-scatter bucket ({state.grad_label})",
        "buffers",
        state.gradients * elements,
        f"{state.gradients}·min(max(4·10⁷, 10⁶·d), Ψ_r)",
        MEGATRON_DDP,
    )


def zero3_gather_bytes(share: RankParameters, state: StateBytes) -> int:
    """w × 2 × Ψ_u: the unit in use and the one prefetched, gathered under ZeRO-3."""
    return 2 * state.weights * largest_unit(share)


def megatron_gather(share: RankParameters, state: StateBytes) -> Term:
    """w·2·Ψ_u: ZeRO-3's gathered unit and its prefetched successor (seed lesson §7)."""
    return _term(
        f"ZeRO-3 gathered weights ({state.label})",
        "buffers",
        zero3_gather_bytes(share, state),
        f"{state.weights}·2·max(Ψ_ℓ, embedding, head)",
        "seed lesson §7 (ZeRO-3 materialises one layer, double-buffered prefetch)",
    )


def megatron_terms(
    job: Plannable, share: RankParameters, state: StateBytes, group: Group
) -> Placed:
    """Megatron-Core: the distributed optimizer and its contiguous gradient buffer.

    Up to ZeRO-1 the gradient buckets are views of the full gradient buffer (Megatron's
    param_and_grad_buffer: main_grad is a view, reduced in place), so they cost nothing extra.
    From ZeRO-2 each bucket's full gradients exist before its reduce-scatter. Optimizer offload
    (Megatron-Core's optimizer_cpu_offload) moves the fp32 master and moments to the host;
    Megatron has no parameter offload, so `offload.parameters` moves nothing.
    """
    static = megatron_static_terms(job, share, state, group)
    buffers: list[Term] = []
    if group.zero >= 2:
        buffers.append(megatron_bucket(job, share, state))
    if group.zero >= 3:
        buffers.append(megatron_gather(share, state))
    hbm = [*static, *buffers]
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


def ds_weights(psi: int, state: StateBytes, group: Group) -> Term:
    """w·Ψ_r, or w·Ψ_r/N at ZeRO-3: the 16-bit flat parameter groups (stage 1/2:
    bit16_groups_flat, whole) or each parameter's partition (stage 3: ds_tensor)."""
    sharded = group.zero >= SHARD_WEIGHTS
    return _term(
        f"{'parameter partition' if sharded else 'parameters'} ({state.label})",
        "weights",
        state.weights * group.elements(psi, SHARD_WEIGHTS),
        f"{state.weights}·Ψ_r{group.suffix(SHARD_WEIGHTS)}",
        (DS_STAGE3 if sharded else DS_STAGE12)
        + "; "
        + (DS_ESTIMATOR3 if sharded else DS_ESTIMATOR2),
    )


def ds_gradients(psi: int, state: StateBytes, group: Group) -> Term:
    """γ·Ψ_r, or γ·Ψ_r/N from ZeRO-2: the 16-bit gradients (stage 1: param.grad, whole until the
    step; stage 2: the contiguous grads_in_partition; stage 3: the flat gradient partitions)."""
    g = 2 if state.master else state.gradients
    return _term(
        f"gradient {'partition' if group.zero >= SHARD_GRADIENTS else 'buffer'} ({state.label})",
        "gradients",
        g * group.elements(psi, SHARD_GRADIENTS),
        f"{g}·Ψ_r{group.suffix(SHARD_GRADIENTS)}",
        (DS_STAGE3 if group.zero >= 3 else DS_STAGE12)
        + "; "
        + (DS_ESTIMATOR3 if group.zero >= 3 else DS_ESTIMATOR2),
    )


def ds_fp32_gradients(psi: int, state: StateBytes, group: Group) -> Term:
    """4·Ψ_r/N: the fp32 copy of this rank's gradient partition the optimizer steps on (stage
    1/2: single_partition_grad = flat partition .to(fp32), stage 3:
    fp32_partitioned_groups_flat[i].grad). 0 in fp32 training (the gradients are fp32)."""
    elements = group.elements(psi, 1) if group.zero else psi
    return _term(
        "fp32 gradient partition (optimizer step)",
        "gradients",
        4 * elements if state.master else 0,
        "4·Ψ_r/N" if group.zero else "4·Ψ_r",
        (DS_STAGE3 if group.zero >= 3 else DS_STAGE12)
        + "; "
        + (DS_ESTIMATOR3 if group.zero >= 3 else DS_ESTIMATOR2),
    )


def ds_optimizer(psi: int, state: StateBytes, group: Group) -> tuple[Term, ...]:
    """4·Ψ_r/N each: the fp32 master partition (single_partition_of_fp32_groups /
    fp32_partitioned_groups_flat) and the optimizer's moments on it."""
    elements = group.elements(psi, 1) if group.zero else psi
    suffix = "/N" if group.zero else ""
    lines = [("fp32 master partition", state.master)] if state.master else []
    lines += [(f"{name} (fp32)", size) for name, size in state.moments]
    source = (
        (DS_STAGE3 if group.zero >= 3 else DS_STAGE12)
        + "; "
        + (DS_ESTIMATOR3 if group.zero >= 3 else DS_ESTIMATOR2)
    )
    return tuple(
        _term(name, "optimizer", size * elements, f"{size}·Ψ_r{suffix}", source)
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
    job: Plannable, share: RankParameters, state: StateBytes, group: Group
) -> Placed:
    """DeepSpeed ZeRO 0–3 over the shard group (stage 0 keeps whole buffers: N = 1 in effect).

    The all-gather of updated parameters after a stage 1/2 step writes into the flat 16-bit
    groups (all_gather_into_tensor), so allgather_bucket_size (5·10⁸) costs no extra memory.
    Optimizer offload moves the fp32 master, the moments and the fp32 gradient partition to the
    host, and from stage 2 the gradients go there as they are reduced, so the 16-bit gradient
    partition is not kept; parameter offload
    (stage 3 only) moves the 16-bit parameter partition.
    """
    psi = share.total
    shard = group if group.zero else Group(0, 1, 0)
    weights = ds_weights(psi, state, shard)
    grads = ds_gradients(psi, state, shard)
    fp32_grads = ds_fp32_gradients(psi, state, shard)
    optimizer = ds_optimizer(psi, state, shard)
    buffers = [ds_reduce_bucket(psi, state)]
    if group.zero >= 3:
        module = largest_module(job, share)
        buffers += [*ds_module_in_use(module, state), ds_prefetch(psi, module, state)]
    hbm: list[Term] = [weights, grads, fp32_grads, *optimizer, *buffers]
    host: list[Term] = []
    tr = job.training
    if tr.offload_optimizer:
        moved = [fp32_grads, *optimizer]
        host += [_offloaded(t, DS_OFFLOAD) for t in moved]
        # From stage 2 the reduced gradients are copied straight into the fp32 host partition
        # (stage_1_and_2.py async_inplace_copy_grad_to_fp32_buffer_from_gpu; stage3.py
        # partition_grads to the offloaded fp32 grad buffer): no 16-bit partition is kept.
        gone = [grads] if group.zero >= SHARD_GRADIENTS else []
        hbm = [t for t in hbm if t not in moved and t not in gone]
    if tr.offload_parameters and group.zero >= 3:
        host.append(_offloaded(weights, DS_OFFLOAD_PARAM))
        hbm.remove(weights)
    return Placed(tuple(t for t in hbm if t.bytes), tuple(t for t in host if t.bytes))


# --- PyTorch FSDP2 -----------------------------------------------------------------------------


def fsdp_sharded_parameters(psi: int, group: Group) -> Term:
    """4·Ψ_r/N: the sharded parameters, kept in the model's fp32 (FSDPParam._sharded_param_data);
    MixedPrecisionPolicy(param_dtype=bf16) casts only the all-gathered copy. They are the
    optimizer's parameters: there is no separate master copy."""
    return _term(
        "sharded parameters (fp32)",
        "weights",
        4 * group.elements(psi, 1),
        "4·Ψ_r/N",
        FSDP2 + " (sharded DTensor parameters in the model's dtype)",
    )


def fsdp_sharded_gradients(psi: int, group: Group) -> Term:
    """4·Ψ_r/N: the sharded gradients, in the sharded parameters' dtype (foreach_reduce casts
    the reduce-scatter output to it and accumulates into sharded_param.grad)."""
    return _term(
        "sharded gradients (fp32)",
        "gradients",
        4 * group.elements(psi, 1),
        "4·Ψ_r/N",
        FSDP2_COLLECTIVES + " foreach_reduce",
    )


def fsdp_optimizer(psi: int, state: StateBytes, group: Group) -> tuple[Term, ...]:
    """4·Ψ_r/N per moment: the optimizer's state on the sharded fp32 parameters."""
    return tuple(
        _term(
            f"{name} (fp32)",
            "optimizer",
            size * group.elements(psi, 1),
            f"{size}·Ψ_r/N",
            "torch.optim on FSDP2's sharded DTensor parameters",
        )
        for name, size in state.moments
    )


def fsdp_gathered_parameters(job: Plannable, share: RankParameters, state: StateBytes) -> Term:
    """w·2·Ψ_u with reshard_after_forward (the unit in use and the one prefetched), or w·Ψ_r
    without: every unit's all-gathered parameters stay from its forward to its backward."""
    w = state.weights
    if job.training.reshard_after_forward:
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


def fsdp_unit_gradients(share: RankParameters, state: StateBytes) -> tuple[Term, ...]:
    """w·Ψ_u + 4·Ψ_u: the unit's unsharded gradients in param_dtype, and the reduce-scatter input
    in reduce_dtype (fp32) that foreach_reduce builds from them."""
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
            "reduce-scatter input (fp32 reduce_dtype)",
            "buffers",
            FSDP2_REDUCE_BYTES * unit,
            "4·Ψ_u",
            FSDP2_COLLECTIVES + " foreach_reduce (reduce_scatter_input in reduce_dtype)",
        ),
    )


def fsdp2_terms(job: Plannable, share: RankParameters, state: StateBytes, group: Group) -> Placed:
    """PyTorch FSDP2 (fully_shard per layer and on the root, as torchtitan applies it): the
    parameters, gradients and optimizer state are always sharded over N (zero_stage is not
    read). CPUOffloadPolicy (`offload.parameters`) moves the sharded parameters, gradients and
    the optimizer state to the host, where the optimizer steps; `offload.optimizer` alone moves
    the optimizer state."""
    psi = share.total
    sharded = Group(SHARD_WEIGHTS, group.N, group.index)  # fully_shard: every buffer sharded
    params = fsdp_sharded_parameters(psi, sharded)
    grads = fsdp_sharded_gradients(psi, sharded)
    optimizer = fsdp_optimizer(psi, state, sharded)
    hbm: list[Term] = [
        params,
        grads,
        *optimizer,
        fsdp_gathered_parameters(job, share, state),
        *fsdp_unit_gradients(share, state),
    ]
    moved: list[Term] = []
    if job.training.offload_parameters:
        moved = [params, grads, *optimizer]
    elif job.training.offload_optimizer:
        moved = list(optimizer)
    host = [_offloaded(t, FSDP2_OFFLOAD) for t in moved]
    return Placed(tuple(t for t in hbm if t not in moved), tuple(host))


def engine_terms(job: Plannable, share: RankParameters, state: StateBytes, group: Group) -> Placed:
    """The static terms of one rank under `training.framework`."""
    framework = job.training.framework
    if framework == "deepspeed":
        return deepspeed_terms(job, share, state, group)
    if framework == "fsdp2":
        return fsdp2_terms(job, share, state, group)
    return megatron_terms(job, share, state, group)
