"""From a job to :class:`StepInputs`: per-op compute times and the communication schedule's ops.

The builder prices every op of :mod:`planc.perf.ops` on the job's GPU with the efficiency
curves, and every communication op of `planc.comm.schedule.schedule` with the link's bandwidth
(from the spec), bus factor and ring steps (:mod:`planc.comm.cost`) and the per-collective
efficiency and latency of :mod:`planc.presets.efficiency`.

Which TP collectives hide behind compute (Megatron-LM `tensor_parallel/layers.py`,
`LinearWithGradAccumulationAndAsyncCommunication`):

* forward and recomputed forward: none; every collective is on the critical path;
* backward without SP: the all-reduce of the column-parallel input gradient (QKV, fc1) is
  launched asynchronously and runs while the same layer's weight gradient is computed;
* backward with SP: the reduce-scatter of the column-parallel input gradient overlaps the
  weight gradient the same way; the all-gather of the row-parallel output gradient does not;
* with SP the column-parallel input, of which Megatron keeps only the rank's shard, is
  all-gathered again for the weight gradient while the dgrad GEMM runs
  (`sp_input_regathered`; torchtitan saves the gathered input, but its per-op activation
  checkpointing gathers it again in the recomputed forward, on the critical path or, under
  async TP, pipelined as in the forward: `sp_gather_recomputed`);
* with `training.async_tp_allreduce` off (Megatron-LM before 2021-09), and under torchtitan
  with or without async TP, neither reduction of the input gradient overlaps: it is exposed
  (`input_gradient_exposed_s`, `tp_reduction_async`).

What overlaps is charged `processor_usage` of its time as slowed compute; what does not fit is
exposed. `training.overlap_tp` pipelines the TP collectives with their GEMMs (`tp_per_layer`).

The expert exchanges of a MoE layer (all-to-all dispatch and combine over EP, the ETP gathers
and scatters) run on the critical path, between the router and the experts and after them,
unless the schedule pairs one micro-batch's forward with another's backward
(`pipeline_schedule: combined-1f1b`, Megatron's --overlap-moe-expert-parallel-comm;
`planc.perf.paired`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from types import MappingProxyType

from planc.comm.context import (
    exposed_per_layer,
    torch_ring_exposed_per_layer,
    torch_ring_traced_per_layer,
)
from planc.comm.cost import ring_steps, wire_bytes
from planc.comm.ends import EndCollective, Linear, end_collectives, head_gather_bytes
from planc.comm.schedule import (
    ROUTING_MAP_BYTES,
    CommOp,
    allgather_probs_bytes,
    allgather_rows_bytes,
    bf16_share,
    counts_gathered,
    cp_core_redone,
    dispatch_bytes,
    dispatch_group,
    exchange_ops,
    expert_link,
    flex_parts,
    flex_rows,
    fp8_ring,
    grad_bytes,
    kept_in,
    latent_parts,
    latents_regathered,
    link_class,
    mlp_block_redone,
    moe_block_redone,
    moe_tokens,
    param_bytes,
    pipeline_message_bytes,
    probs_bytes,
    ring_rails,
    routing_map_gather,
    sharding_stage,
    token_count_bytes,
)
from planc.comm.sizes import (
    AMAX_BYTES,
    activation_message_bytes,
    latent_message_bytes,
    sp_amax_reduced,
    sp_gather_bytes,
    sp_gather_recomputed,
    sp_input_regathered,
    torch_checkpoint,
    tp_gather_bytes,
)
from planc.comm.tiers import railed_ring_gbs, ring_bandwidth_gbs
from planc.deferral import deferred_calls, deferred_share, flush_s
from planc.dims import ExpertDims, rank_dims
from planc.perf.compute import (
    ChunkTimes,
    Device,
    QuantizedCompute,
    StageTimes,
    chunk_times,
    layer_passes,
    op_times,
    optimizer_time_s,
    pass_times,
    quantized_passes,
    recompute_time_s,
    work_time_s,
)
from planc.perf.ends import EndsTimes, GemmTimes, ends_times
from planc.perf.expert_host import expert_host_per_layer
from planc.perf.fsdp2 import (
    COPY_OUT_PASSES,
    copy_out_s,
    copy_out_units,
    end_units,
    reduce_copy_in_bytes,
    reduce_copy_in_s,
)
from planc.perf.grad_accum import accumulation_s
from planc.perf.muon import MuonStep, muon_step
from planc.perf.offload import activation_offload_s, offload_transfer_s
from planc.perf.ops import (
    NOTHING,
    OpCost,
    OpShape,
    Work,
    attention_core,
    attention_matrix_elements,
    layer_ops,
    lm_head,
    mla_up_projections,
    mlp_down,
    mlp_up_projections,
    moe_layer_ops,
    mtp_projection_ops,
    op_shape,
    optimizer_bytes_per_parameter,
    output_projection,
    qkv_projections,
    routed_experts,
    window_keys,
    with_quantized_gemms,
)
from planc.perf.paired import MoeLayerParts, paired_exposed
from planc.perf.pipe_engine import (
    Transfer,
    blocking_p2p,
    hop_s,
    overlaps_grad_reduce,
    overlaps_param_gather,
    runs_pipe_engine,
)
from planc.perf.sac import recomputed_shares
from planc.perf.step import StageInputs, StepInputs
from planc.plannable import Plannable
from planc.presets.accuracy import GENERATION_OF
from planc.presets.efficiency import (
    REFERENCE_HBM_GBS,
    REFERENCE_TFLOPS,
    Efficiency,
    LinkEfficiency,
    for_gpu,
    from_json,
)
from planc.record import record
from planc.sends import boundary_tiers, slowest_crossed
from planc.spec.job import Job
from planc.stages import stage_classes
from planc.vocab import ROWWISE_RECIPES, Axis, Collective, DType, GroupKind, gated

# Data-parallel traffic: the shard group (dp_cp, or dp_shard under HSDP), HSDP's replicas, and
# the tied embedding's all-reduce.
DP_GROUPS = ("dp_cp", "dp_shard", "dp_replicate", "embedding", "edp")


def layer_shape(job: Plannable) -> OpShape:
    """One rank's share of a layer (`Plannable.dims`) for :mod:`planc.perf.ops`, with the
    activations' bytes of the run's number formats and the kernels it runs (Megatron-Core's
    fused kernels hand the split QKV to Transformer Engine's attention: `te_split`)."""
    tr = job.training
    return op_shape(
        job.model,
        job.dims,
        job.numerics.activation,
        tr.attention == "flash",
        tr.kernels == "unfused",
        tr.kernels == "compiled",
        tr.loss_fusion,
        runs_cudnn_attention(job),
        te_split=tr.framework in ("megatron", "megatron-fsdp")
        and tr.attention == "flash"
        and tr.kernels == "fused",
        separate=separate_projections(job),
        early_stop=torch_checkpoint(job),
    )


def separate_projections(job: Plannable) -> bool:
    """Whether the attention's Q, K and V and a GLU's gate and up run as separate linears,
    each its own matmul on the same input, their input gradients summed in backward:
    torchtitan's Llama (nn.Linear wq, wk, wv and w1, w3, `xq, xk, xv = self.wq(x), self.wk(x),
    self.wv(x)` and `self.w2(F.silu(self.w1(x)) * self.w3(x))`: torchtitan/models/llama3/
    model.py lines 205-209, 238, 297-302 at 820504e) and the Hugging Face models FSDP2
    trainers wrap (q_proj, k_proj, v_proj, gate_proj, up_proj): `framework: fsdp2`. Megatron
    (and DeepSpeed's Megatron layers) fuse them: linear_qkv, linear_fc1 (`planc.perf.ops.
    qkv_projection`, `mlp_up`)."""
    return job.training.framework == "fsdp2"


# The GPU generations on which Transformer Engine prefers cuDNN's FusedAttention to flash-attn
# when both can run (compute capability 9.0 and newer: get_attention_backend, "Disabling
# FlashAttention to give FusedAttention preference on Hopper+ for performance reasons", TE v1.9
# to v2.3, transformer_engine/pytorch/attention/dot_product_attention/utils.py).
CUDNN_FIRST = frozenset({"hopper", "blackwell"})


def runs_cudnn_attention(job: Plannable) -> bool:
    """Whether flash attention runs cuDNN's fused kernel: with the fused kernels (Transformer
    Engine's, `training.kernels` fused), training.attention_backend fused, or auto (Megatron-Core's
    default, TransformerConfig.attention_backend: Transformer Engine chooses) on a GPU of a
    generation in `CUDNN_FIRST`; flash-attn's kernel otherwise. Eager and compiled kernels run
    PyTorch's SDPA (`planc.perf.ops.attention_engine`)."""
    tr = job.training
    if tr.attention != "flash" or tr.kernels != "fused":
        return False
    if tr.attention_backend == "auto":
        return GENERATION_OF.get(job.cluster.gpu.name) in CUDNN_FIRST
    return tr.attention_backend == "fused"


def expert_shape(job: Plannable) -> ExpertDims | None:
    """One rank's share of a MoE layer (None: a dense model)."""
    return job.dims.experts


def device_of(job: Plannable) -> Device:
    """The GPU's peaks: the dense matrix peak of the GEMMs' data type (`Numerics.gemm`) and its
    HBM bandwidth; a custom GPU that gives no HBM bandwidth gets the A100's bytes per FLOP
    (2,039 GB/s per 312 TFLOPS at bf16)."""
    gpu = job.cluster.gpu
    hbm = gpu.memory_bandwidth_gbs or gpu.bf16_tflops * REFERENCE_HBM_GBS / REFERENCE_TFLOPS
    return Device.of(gemm_peak_tflops(job), hbm, job.numerics.gemm)


def quantized_device(job: Plannable) -> Device | None:
    """The device at the dense peak of an FP8/FP4 recipe's GEMMs (`Quantized.gemm`: the
    16-bit curve's fractions apply to it, `Efficiency.gemm_for`) times the recipe's kernel rate
    (`Quantized.gemm_rate`), with the GPU's HBM; None for a 16/32-bit run."""
    q = job.numerics.quantized
    if q is None:
        return None
    peak = job.cluster.gpu.peak_tflops(q.gemm)
    if peak is None:
        raise ValueError(f"{job.cluster.gpu.name} gives no {q.gemm} peak")
    # A block-scaled recipe's kernels run below a per-tensor-scaled GEMM's rate (q.gemm_rate).
    return Device(peak * q.gemm_rate * 1e12, device_of(job).hbm_bytes, q.gemm)


def quantized_layers(job: Plannable, eff: Efficiency) -> QuantizedCompute | None:
    """An FP8/FP4 recipe's layer pass times (`planc.perf.compute.quantized_passes`) on the
    job's quantized device, the weight cast 1/m per micro-batch where Transformer Engine caches
    FP8 weights across the m micro-batches (`is_first_microbatch`), 1 for torchao, which casts
    every time; None for a 16/32-bit run."""
    q, low = job.numerics.quantized, quantized_device(job)
    if q is None or low is None:
        return None
    return quantized_passes(
        layer_shape(job),
        expert_shape(job),
        device_of(job),
        eff,
        low,
        q,
        weight_cast_share(job),
        job.model.window,
    )


def weight_cast_share(job: Plannable) -> float:
    """The share of a weight's FP8/FP4 cast one micro-batch pays: 1/m where Transformer Engine
    caches the cast weights across the m micro-batches (`Quantized.cached_weights`), 1 where
    torchao casts every time (and for a 16/32-bit run, which casts nothing)."""
    q = job.numerics.quantized
    return 1.0 / job.m if q is not None and q.cached_weights else 1.0


def tp_layer_mix(
    job: Plannable, stage: int, split: Sequence[int], routed: Sequence[int]
) -> tuple[tuple[int, int, int, int], ...]:
    """Per chunk of `stage` (`split` layers, `routed` of them MoE layers): its dense and MoE
    layers whose SP all-gathers move what the recipe gathers, then its dense and MoE layers kept
    in BF16 whose gathers stay 16-bit (`planc.comm.schedule.kept_in`; none unless the recipe
    gathers quantized and keeps layers in BF16)."""
    mixes = []
    for (a, b), n, e in zip(job.layout.chunks[stage], split, routed, strict=True):
        kept = kept_in(job, a, b)
        kd, ke = kept.layers - kept.routed, kept.routed
        mixes.append((n - e - kd, e - ke, kd, ke))
    return tuple(mixes)


def quantized_compute(
    job: Plannable, stage: int, layers: QuantizedCompute | None
) -> QuantizedCompute | None:
    """`layers` (`quantized_layers`) with each chunk of `stage`'s (dense, MoE) layers kept in
    BF16."""
    if job.numerics.quantized is None or layers is None:
        return None
    shares = [bf16_share(job, a, b) for a, b in job.layout.chunks[stage]]
    kept = tuple((k.layers - k.routed, k.routed) for k in shares)
    return replace(layers, bf16_layers=kept)


def gemm_peak_tflops(job: Plannable) -> float:
    """The GPU's dense peak in the GEMMs' data type (the spec's loader refuses a precision whose
    peak the GPU does not give)."""
    peak = job.cluster.gpu.peak_tflops(job.numerics.gemm)
    if peak is None:
        raise ValueError(f"{job.cluster.gpu.name} gives no {job.numerics.gemm} peak")
    return peak


def efficiency_of(job: Plannable) -> Efficiency:
    """The efficiency tables of `job`: hardware.calibration's when given, else the GPU preset's
    entry (a custom GPU: the A100 entry scaled by its peaks); `training.efficiency`, when set,
    replaces the GEMM curve by that flat fraction of peak."""
    gpu = job.cluster.gpu
    calibration = job.cluster.calibration
    if calibration is not None:
        eff = from_json(calibration, "hardware.calibration")
    else:
        eff = for_gpu(gpu.name, device_of(job).hbm_bytes / 1e9)
    flat = job.training.efficiency
    if flat is not None:
        # Every matrix multiply at that fraction of its own data type's peak: FP8/FP4 GEMMs
        # too, so no measured per-type curve stays.
        flat_only = replace(eff, gemm_by_dtype=MappingProxyType({}))
        eff = flat_only.with_gemm(peak_fraction=flat, half_dim=0.0, sms=1)
    return eff


def comm_time_s(
    job: Plannable,
    eff: Efficiency,
    op: str,
    n: int,
    buffer_bytes: int,
    link: str,
    rails: int = 1,
    steps: int | None = None,
    kernel: str | None = None,
) -> float:
    """One call on the fabric tier named `link`: steps·α + wire_bytes/b, b = β·e the bus
    bandwidth of a flat ring whose outermost tier is `link` (β the min over the tiers it crosses
    of B/k, `planc.comm.tiers.ring_bandwidth_gbs`), α (per ring step) and e (per collective) of
    the efficiency entry the tier names (nccl-tests PERFORMANCE.md bus bandwidth;
    `planc.presets.efficiency`). The entry's measured α wins over the tier's latency_us. A
    ring collective of a group with `rails` = g members per NVLink domain, on a tier beyond it,
    runs at min(g·b, b_0) (`railed_ring_gbs`; b_0 the domain's own ring bandwidth). `steps`
    replaces the collective's own latency-bound steps when given (`CommOp.rounds`). A flex
    dispatcher's `kernel` with a measured throughput R(n) on the tier (`LinkEfficiency.kernels`,
    GB/s of rows counting the own destination's, at the group's size n: `KernelRate.at`) runs
    at no more than R(n)·(n − 1)/n on the wire, the (n − 1)/n of its rows that leave (n the
    domains, or the ranks of one domain, it exchanges between)."""
    fabric = job.cluster.fabric
    tier = fabric.tier(link)
    measured = eff.link(tier.efficiency)
    alpha = measured.latency_us * 1e-6
    gbs = ring_bandwidth_gbs(fabric, link) * measured.of(op)
    if rails > 1 and op in RING_COLLECTIVES and tier != fabric.innermost:
        inner = fabric.innermost
        domain = ring_bandwidth_gbs(fabric, inner.name) * eff.link(inner.efficiency).of(op)
        gbs = railed_ring_gbs(gbs, rails, domain)
    rate = measured.kernels.get(kernel) if kernel is not None else None
    if rate is not None and n > 1:
        gbs = min(gbs, rate.at(n) * (n - 1) / n)
    rounds = ring_steps(op, n) if steps is None else steps
    return rounds * alpha + wire_bytes(op, n, buffer_bytes) / (gbs * 1e9)


# The collectives NCCL runs as rings over every member (an all-to-all and a p2p send do not
# spread over the members' NICs).
RING_COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")


#: op → seconds of one call of it (`call_time_s` of the job and tables at hand).
CallSeconds = Callable[[CommOp], float]
#: What one call's seconds read of an op (`call_key`).
CallKey = tuple[str, str, int, int, str, int | None, str | None]


def call_key(op: CommOp) -> CallKey:
    """The fields of `op` that `call_time_s` reads: ops that agree on them cost the same a call
    (on one job and tables)."""
    return (
        str(op.op), str(op.group), op.group_size, op.buffer_bytes, op.link, op.rounds, op.kernel
    )


def call_time_s(job: Plannable, eff: Efficiency, op: CommOp) -> float:
    """Seconds of one call of `op` on its tier over its group's rails (`comm_time_s`), with its
    own latency-bound rounds and flex kernel: what every caller pricing an op's call uses."""
    rails = ring_rails(job, op.group)
    return comm_time_s(
        job, eff, str(op.op), op.group_size, op.buffer_bytes, op.link, rails=rails,
        steps=op.rounds, kernel=op.kernel,
    )


def model_flops(job: Job | Plannable) -> float:
    """Model FLOPs per step, no recompute: 3 × forward of the weight matmuls, the attention
    matmuls (no causal discount) and the LM head (Narayanan et al. 2021 Appendix; for a GPT
    this is 72·B·s·L·h²·(1 + s/(6h) + V/(12hL))). The attention matmuls are QKᵀ over k and PV
    over the value head width, 2·s²·n·(k + v) per sequence (v = k but under latent attention);
    in MoE layers the k routed experts, the shared experts and the router in place of the dense
    MLP (the active parameters). Each of the D multi-token prediction modules adds a layer
    shaped like the last, its eh_proj 2·s·2h·h and a pass of the LM head (Megatron-LM
    num_floating_point_operations counts them so). A layer attending through a sliding window of
    w tokens counts twice its band, 2·s·(2w − w²/s)·n·(k + v) (`planc.perf.ops.window_keys`,
    no causal discount as above). The layout does not enter: the whole layer's dims
    (t = c = 1)."""
    mod, tr = job.model, job.training
    whole = op_shape(mod, rank_dims(mod, s=tr.s, b=tr.b), 2, flash=False)
    gamma = 3 if gated(mod.mlp) else 2
    weights = attention_matrix_elements(whole) + gamma * mod.h * mod.f
    core = 2.0 * tr.s * tr.s * mod.n * (whole.k + whole.value_channels)
    head = 2.0 * tr.s * mod.h * mod.V
    total = (mod.L + mod.mtp) * (2.0 * tr.s * weights + core)
    total += mod.mtp * (2.0 * tr.s * 2 * mod.h * mod.h + head)
    if mod.window:
        band = 2.0 * tr.s * 2 * window_keys(tr.s, mod.window) * mod.n * (whole.k + whole.value_channels)
        total -= mod.window_layers_between(0, mod.L) * (core - band)
    moe = mod.moe
    if moe is not None:
        # A MoE layer's tokens pass through k routed experts and the shared ones instead of the
        # dense MLP, plus the h·E router (Megatron-LM num_floating_point_operations counts
        # the experts the same way; it leaves out the router, 2·h·E per token).
        routed = gamma * mod.h * (moe.k * moe.f_e + moe.E_s * moe.f_s) + mod.h * moe.E
        layers = moe.moe_layers(mod.L) + (mod.mtp if moe.is_moe_layer(mod.L - 1) else 0)
        total += layers * 2.0 * tr.s * (routed - gamma * mod.h * mod.f)
    return 3.0 * tr.B * (total + head)


@record
class TpPerLayer:
    """TP communication of one layer per micro-batch on one rank, in seconds."""

    forward_s: float  # exposed
    backward_exposed_s: float
    backward_overlapped_s: float
    recompute_s: float  # exposed again in backward by recompute (full, or torchtitan per-op)
    # hidden on the copy engines (Transformer Engine's ring-exchange all-gathers): no SMs taken
    copy_engine_s: float = 0.0


@record
class ExchangePerLayer:
    """A MoE layer's expert exchanges per micro-batch on one rank, in seconds (all exposed)."""

    forward_s: float
    backward_s: float  # the gradients' exchanges, and the forward's again under full recompute


def exchange_s(job: Plannable, eff: Efficiency, parts: Sequence[CommOp]) -> float:
    """One expert exchange: the longest of its parts, which run at once (a flat all-to-all's
    NVLink and network chunks, `exchange_ops`; a flex kernel's network and NVLink warps,
    `flex_parts`). Seconds."""
    return max((call_time_s(job, eff, op) for op in parts), default=0.0)


def _flat(job: Plannable, size: int) -> list[CommOp]:
    """One flat all-to-all of `size` bytes over the alltoall dispatcher's group, as parts."""
    return exchange_ops(job, 0, dispatch_group(job), "", 1, size, "")


def _gathered(job: Plannable, eff: Efficiency, op: str, size: int) -> float:
    """One collective of the allgather dispatcher (or HybridEP's metadata) over its group."""
    group = dispatch_group(job)
    return comm_time_s(job, eff, op, group.size, size, group.link)


def dispatch_combine_s(job: Plannable, eff: Efficiency) -> float:
    """One MoE layer's dispatch and combine, forward, per micro-batch, as
    `parallelism.expert_dispatcher` runs them: two flat all-to-alls of the T·k·h·β_a rows
    (alltoall; each ⌈(n−1)/8⌉·α + its longest part, `exchange_s`), the all-gather of the
    n·T hidden states and the reduce-scatter of the outputs (allgather), or the flex kernels'
    dispatch and combine rows (deepep, hybridep; `flex_parts`). Seconds."""
    lay = job.layout
    if job.model.moe is None or lay.ep * lay.et == 1:
        return 0.0
    if lay.dispatcher == "alltoall":
        return 0.0 if lay.ep == 1 else 2 * exchange_s(job, eff, _flat(job, dispatch_bytes(job)))
    if lay.dispatcher == "allgather":
        rows = allgather_rows_bytes(job)
        return _gathered(job, eff, "all_gather", rows) + _gathered(
            job, eff, "reduce_scatter", rows
        )
    dispatch_row, combine_row = flex_rows(job)
    backend = lay.dispatcher
    return exchange_s(
        job, eff, flex_parts(job, 0, "", 1, dispatch_row, f"{backend}_dispatch")
    ) + exchange_s(job, eff, flex_parts(job, 0, "", 1, combine_row, f"{backend}_combine"))


def combine_s(job: Plannable, eff: Efficiency) -> float:
    """One MoE layer's combine, forward, per micro-batch: the exchange after the experts of those
    `dispatch_combine_s` prices (the second all-to-all, the reduce-scatter of the outputs, or
    the flex kernel's combine). Its gradient is an exchange of the same rows. Seconds."""
    lay = job.layout
    if job.model.moe is None or lay.ep * lay.et == 1:
        return 0.0
    if lay.dispatcher == "alltoall":
        return 0.0 if lay.ep == 1 else exchange_s(job, eff, _flat(job, dispatch_bytes(job)))
    if lay.dispatcher == "allgather":
        return _gathered(job, eff, "reduce_scatter", allgather_rows_bytes(job))
    _, combine_row = flex_rows(job)
    backend = lay.dispatcher
    return exchange_s(job, eff, flex_parts(job, 0, "", 1, combine_row, f"{backend}_combine"))


def moe_layer_parts(
    job: Plannable, eff: Efficiency, exchange: ExchangePerLayer
) -> MoeLayerParts | None:
    """One MoE layer split as a paired schedule runs it (`planc.perf.paired`): the routed
    experts' passes (quantized as the recipe quantizes them), the rest of the layer's, the
    combine (`combine_s`) and every other exchange of `exchange` (`ep_per_layer`) as the
    dispatch; None for a dense model."""
    experts = expert_shape(job)
    if experts is None:
        return None
    shape, device = layer_shape(job), device_of(job)
    routed = routed_experts(shape, experts)
    q, low = job.numerics.quantized, quantized_device(job)
    low_layers = quantized_layers(job, eff)
    if q is not None and low is not None and low_layers is not None and low_layers.moe:
        share = weight_cast_share(job)
        own = pass_times(with_quantized_gemms(routed, q, shape.beta, share), device, eff, low)
        layer = low_layers.moe
    else:
        own = pass_times(routed, device, eff)
        layer = layer_passes(moe_layer_ops(shape, experts), shape, device, eff)
    tr = job.training
    redo = recompute_time_s(layer, tr.recompute, tr.recompute_modules)
    # the experts' own recomputed part (moe_act) runs in their backward
    redo_own = recompute_time_s(own, tr.recompute, tr.recompute_modules)
    combine = combine_s(job, eff)
    return MoeLayerParts(
        pre_forward_s=layer.forward_s - own.forward_s,
        pre_backward_s=layer.backward_s + redo - redo_own - own.backward_s,
        experts_forward_s=own.forward_s,
        experts_backward_s=own.backward_data_s + redo_own,
        experts_weight_s=own.backward_weight_s,
        dispatch_forward_s=exchange.forward_s - combine,
        combine_forward_s=combine,
        dispatch_backward_s=exchange.backward_s - combine,
        combine_backward_s=combine,
    )


def paired_per_layer(
    job: Plannable, eff: Efficiency, exchange: ExchangePerLayer
) -> tuple[float, float]:
    """(forward, backward) seconds of one MoE layer's exchanges (`exchange`, `ep_per_layer`)
    left exposed where the schedule runs each forward with another micro-batch's backward
    (`planc.perf.paired`); the whole exchanges where it does not pair them."""
    parts = moe_layer_parts(job, eff, exchange) if pairs_experts(job) else None
    if parts is None:
        return exchange.forward_s, exchange.backward_s
    return paired_exposed(parts)


def expert_compute_s(job: Plannable, eff: Efficiency) -> float:
    """One MoE layer's routed-expert forward per micro-batch on a rank: the E/EP local experts'
    fc1, activation and fc2 on their ETP·T·k·EP/E rows each (what the dispatch feeds)."""
    experts = expert_shape(job)
    if experts is None:
        return 0.0
    return pass_times(routed_experts(layer_shape(job), experts), device_of(job), eff).forward_s


def pairs_experts(job: Plannable) -> bool:
    """Whether the job's pipeline schedule runs each forward with another micro-batch's
    backward, hiding their expert exchanges behind each other (`ScheduleDef.overlaps_experts`)."""
    from planc.pipeline import registry  # start-up: as in planc.perf.step

    return registry.definition(job.layout.schedule).overlaps_experts


def ep_per_layer(job: Plannable, eff: Efficiency) -> ExchangePerLayer:
    """The exchanges of one MoE layer per micro-batch as `parallelism.expert_dispatcher` runs
    them, priced on their links (sizes are the schedule's, `planc.comm.schedule`):

    alltoall (MoEAlltoAllTokenDispatcher):
      forward  = a2a(T·k·h·β) dispatch + a2a(T·k·β) probabilities + AG(token counts)
                 + [ETP > 1] AG(ETP·T·k·h·β) + AG(ETP·T·k·β) + RS(ETP·T·k·h·β)
                 + a2a(T·k·h·β) combine
      backward = the gradient of each: a2a × 3, [ETP > 1] RS(tokens) + RS(probabilities) +
                 AG(outputs); each a2a the longest of its parts (`exchange_s`), the token-count
                 gather counted when the schedule lists it (ETP = 1, not padded:
                 `counts_gathered`). Padded to capacity, E·C rows for T·k throughout.
    allgather (MoEAllGatherTokenDispatcher), over tp_ep of n = ETP·EP:
      forward  = AG(n·T·h·β) + AG(n·T·E·β) probabilities + AG(n·T·E) routing map + RS(n·T·h·β)
      backward = RS(n·T·h·β) + AG(n·T·h·β) + RS(n·T·E·β)
    deepep, hybridep (MoEFlexTokenDispatcher):
      forward  = dispatch + combine (`flex_parts`, each the longer of its network and NVLink
                 parts) + [HybridEP across domains] AG(n·T·ETP·E) routing maps
      backward = dispatch + combine the other way.
    Under full recompute backward runs the forward once more.
    """
    lay = job.layout
    if job.model.moe is None or lay.ep * lay.et == 1:
        return ExchangePerLayer(0.0, 0.0)
    if lay.dispatcher == "alltoall":
        forward, backward = _alltoall_per_layer(job, eff)
    elif lay.dispatcher == "allgather":
        forward, backward = _allgather_per_layer(job, eff)
    else:
        exchange = dispatch_combine_s(job, eff)
        metadata = routing_map_gather(job, 0, 1)
        forward = exchange + sum(call_time_s(job, eff, op) for op in metadata)
        backward = exchange
    if moe_block_redone(job):
        backward += forward
    return ExchangePerLayer(forward, backward)


def _alltoall_per_layer(job: Plannable, eff: Efficiency) -> tuple[float, float]:
    """(forward, backward) seconds of the alltoall dispatcher's exchanges (`ep_per_layer`)."""
    lay = job.layout
    tokens, probs = dispatch_bytes(job), probs_bytes(job)
    forward = backward = 0.0
    if lay.ep > 1:
        exchange = dispatch_combine_s(job, eff) + exchange_s(job, eff, _flat(job, probs))
        forward += exchange
        backward += exchange
        if counts_gathered(job):
            link = str(expert_link(job, Axis.EP))
            forward += comm_time_s(job, eff, "all_gather", lay.ep, token_count_bytes(job), link)
    if lay.et > 1:
        link = str(expert_link(job, Axis.TP))
        rows, small = lay.et * tokens, lay.et * probs
        gather = comm_time_s(job, eff, "all_gather", lay.et, rows, link)
        scatter = comm_time_s(job, eff, "reduce_scatter", lay.et, rows, link)
        forward += gather + scatter + comm_time_s(job, eff, "all_gather", lay.et, small, link)
        backward += gather + scatter
        backward += comm_time_s(job, eff, "reduce_scatter", lay.et, small, link)
    return forward, backward


def _allgather_per_layer(job: Plannable, eff: Efficiency) -> tuple[float, float]:
    """(forward, backward) seconds of the allgather dispatcher's collectives (`ep_per_layer`)."""
    rows, probs, routing = allgather_rows_bytes(job), allgather_probs_bytes(job), 0
    moe = job.model.moe
    if moe is not None:
        routing = dispatch_group(job).size * moe_tokens(job) * moe.E * ROUTING_MAP_BYTES
    gather, scatter = _gathered(job, eff, "all_gather", rows), _gathered(
        job, eff, "reduce_scatter", rows
    )
    forward = gather + scatter + _gathered(job, eff, "all_gather", probs)
    forward += _gathered(job, eff, "all_gather", routing)
    backward = gather + scatter + _gathered(job, eff, "reduce_scatter", probs)
    return forward, backward


def _tp_mlp(job: Plannable, moe_layer: bool) -> OpShape | None:
    """The TP-split MLP of a layer whose column-parallel weight gradient hides a backward
    collective: the dense MLP, a MoE layer's shared experts, or none (a MoE layer without
    shared experts runs no TP collective around its experts)."""
    shape, experts = layer_shape(job), job.dims.experts
    if not moe_layer or experts is None:
        return shape
    return replace(shape, f=experts.f_s) if experts.f_s else None


def _tp_redone_s(
    job: Plannable,
    moe_layer: bool,
    by_block: Sequence[float],
    latent_gathers: Sequence[float],
    mlp_output_s: float = 0.0,
) -> float:
    """The TP collectives one layer's recompute runs again (`planc.comm.schedule.redone_blocks`
    per layer): every block's forward ones under full recompute, but for the MLP block's output
    reduction (`mlp_output_s`) under torch's non-reentrant checkpoint, whose result no backward
    reads (`torch_checkpoint`, `planc.perf.sac.unread_tail`); under selective the MLP
    block's when its module is recomputed (mlp in a dense layer, shared_experts or moe for a
    MoE layer's shared experts), and with mla_up_proj and SP the query and key/value latents'
    all-gathers (not the RoPE key's, gathered before the up projections)."""
    if job.training.recompute == "full":
        return sum(by_block) - (mlp_output_s if torch_checkpoint(job) else 0.0)
    redo = sum(by_block[1:]) if mlp_block_redone(job, moe_layer) else 0.0
    if latents_regathered(job):
        redo += sum(latent_gathers[:2])  # the query and key/value latents (`latent_parts`)
    return redo


def sp_layout_copies(job: Plannable) -> bool:
    """Whether each sequence-parallel collective also copies its whole tensor on the rank:
    torch's DTensor tensor parallelism (`framework: fsdp2`, torchtitan's SequenceParallel and
    PrepareModuleInput) shards the residual stream [b, s, h] on the sequence, dim 1, and the
    functional collectives run NCCL on dim 0 with a permutation around it
    (torch/distributed/_functional_collectives.py: all_gather_tensor `torch.cat(torch.chunk(res,
    group_size, dim=0), dim=gather_dim)` after the gather, reduce_scatter_tensor `torch.cat(
    torch.chunk(self, group_size, dim=scatter_dim))` before the reduction). With b > 1 the
    permutation moves every element; torchtitan counts it against its own SP
    (parallelize_llama.py at 820504e, lines 175-177; pytorch/torchtitan #437: 'these two cats
    take about 0.18 ms out of 3 ms of FFN compute (6%)' for Llama 3 70B at TP 8 on H100). At
    b = 1 the permutation leaves the memory order as it is; planc prices no copy there."""
    tr = job.training
    return tr.framework == "fsdp2" and job.layout.sp and job.layout.t > 1 and tr.b > 1


def layout_copy_s(
    job: Plannable, eff: Efficiency, gathered: int, hidden: int, mlp_block: bool
) -> tuple[float, float, float]:
    """(forward, backward, recomputed) seconds per micro-batch of one block's layout copies
    (`sp_layout_copies`), each a read and a write of the whole tensor on the HBM curve: the
    gathered input (`gathered` bytes, quantized where the recipe gathers so) and the output
    before its reduce-scatter (`hidden` bytes, 16-bit), as Inductor leaves them in a compiled
    block (pytorch/torchtitan June 2025 async-TP benchmark's runs; torch/_inductor/fx_passes/
    micro_pipeline_tp.py matches exactly these split-and-cat forms):

    - the input gather's copy, forward and where recompute gathers again, and the output
      gradient's gather's in backward: none where the gathered tensor feeds torchao's rowwise
      casts (`gathers_feed_casts`), which absorb the permutation;
    - the output's copy before its reduce-scatter, forward and where recompute redoes it (full
      recompute, but the MLP's output under torch's checkpoint: `unread_outputs`);
    - the input gradient's copy before its reduce-scatter only eager: compiled, it fuses into
      the kernel that sums the separate projections' input gradients;
    - under async TP (`training.overlap_tp`, compiled) the forward gathers feed the fused all-gather
      matmul, which needs no copy (its outputs are `movedim` views); the fused matmul
      reduce-scatter instead sums the t partials in a kernel of its own, reading the whole
      output and writing 1/t of it, forward and where recomputed; and in a 16-bit run each
      gathered tensor that a weight gradient reads (the input, and the output's gradient) is
      copied for that matmul from its non-contiguous view.
    """
    tr, t = job.training, job.layout.t
    device = device_of(job)

    def stream_s(moved: float) -> float:
        work = Work(0.0, moved)
        return work_time_s(OpCost("SP layout copy", "vector", work, NOTHING), work, device, eff)

    regather = tr.recompute == "full" or sp_gather_recomputed(job)
    rescatter = tr.recompute == "full" and not (mlp_block and torch_checkpoint(job))
    if tr.tp_overlap_runs:
        reduce = stream_s(hidden + hidden / t)
        wgrad_views = 2 if job.numerics.quantized is None else 0
        return reduce, wgrad_views * stream_s(2.0 * gathered), reduce if rescatter else 0.0
    gather = 0.0 if gathers_feed_casts(job) else stream_s(2.0 * gathered)
    scatter = stream_s(2.0 * hidden)
    input_gradient = 0.0 if tr.kernels == "compiled" else scatter
    redo = (gather if regather else 0.0) + (scatter if rescatter else 0.0)
    return gather + scatter, gather + input_gradient, redo


def tp_per_layer(
    job: Plannable, eff: Efficiency, ops: Sequence[CommOp], stage: int, moe_layer: bool = False
) -> TpPerLayer:
    """Forward, backward (exposed and hidden) and recomputed TP time of one layer (a dense
    layer, or with `moe_layer` a MoE layer: attention plus the shared experts, if any).

    Each block (attention, MLP or shared experts) gathers its input and reduce-scatters its
    output with SP (all-reduces the output without); in backward the output's gradient is
    gathered before the block (exposed), the input gathered again beside the column dgrad GEMM
    (`sp_input_regathered`; exposed beyond it) and the input's gradient reduced while the
    block's column-parallel weight gradient runs (hidden behind it, as Megatron overlaps them;
    `tp_reduction_async`). Latent attention moves its latents at the input instead of h
    (`latent_parts`). A per-tensor-scaled recipe's quantized gathers each first all-reduce one
    amax over the TP group (`sp_amax_reduced`), exposed: the quantization waits on it.

    With `training.overlap_tp` and SP (Megatron `--tp-comm-overlap`, Transformer Engine's
    userbuffers): the input all-gather is split into t chunks pipelined with the column GEMM
    (QKV, fc1) and the output reduce-scatter with the row GEMM (projection, fc2); in backward the
    output gradient's all-gather with the row GEMM's data gradient. A pipelined pair hides at
    most (t − 1)/t of the collective behind the GEMM (the first chunk's gather, or the last
    chunk's reduction, has nothing to run beside): `pipelined_exposed_s`. What hides slows the
    GEMM by the link's processor_usage (the step's tp_processor_usage). Megatron's all-gathers
    (the input's in forward, the output gradient's in backward) run as Transformer Engine's ring
    exchange on the copy engines, its first GEMM chunk on the rank's own shard: they hide
    whole where the GEMM is long enough and take no SMs (`ring_exchange_exposed_s`,
    `copy_engine_gathers`)."""
    return tp_per_layer_on(job, eff, tp_link(ops, stage), moe_layer)


def tp_link(ops: Sequence[CommOp], stage: int) -> str | None:
    """The tier (its name) of the stage's first TP op that runs, None when it runs none: all
    of the stage that `tp_per_layer` reads."""
    first = next((op for op in ops if op.stage == stage and op.group == "tp" and op.calls), None)
    return None if first is None else str(first.link)


def matrices(ops: Sequence[OpCost]) -> tuple[OpCost, ...]:
    """The matmuls of `ops` (a projection's, without separate linears' gradient sum)."""
    return tuple(op for op in ops if op.engine == "matrix")


def recomputed_columns(shape: OpShape) -> dict[str, float]:
    """The share of each matrix op of a dense layer that torchtitan's per-op checkpointing
    recomputes (`planc.perf.sac.recomputed_shares`), by op name: what a recomputed input
    gather can pipeline with under async TP."""
    ops = layer_ops(shape)
    return {
        op.name: share
        for op, share in zip(ops, recomputed_shares(ops, shape), strict=True)
        if op.engine == "matrix"
    }


def tp_per_layer_on(
    job: Plannable, eff: Efficiency, link: str | None, moe_layer: bool = False, bf16: bool = False
) -> TpPerLayer:
    """`tp_per_layer` of a stage whose TP ops run on `link` (None: it runs none); with `bf16`,
    of a layer the recipe keeps in BF16, whose SP all-gathers stay 16-bit (`sp_gather_bytes`)."""
    if link is None:
        return TpPerLayer(0.0, 0.0, 0.0, 0.0)
    t = job.layout.t

    def call(collective: str, size: int) -> float:
        return comm_time_s(job, eff, collective, t, size, link)

    shape, device = layer_shape(job), device_of(job)
    hidden = activation_message_bytes(job)
    gathered = tp_gather_bytes(job, bf16)  # an SP gather of h as the recipe moves it
    latents = [latent_message_bytes(job, width) for _, _, width in latent_parts(job)]
    # the latents as gathered: the query and key/value latents as the up projections' inputs
    # (quantized where the recipe gathers so), the RoPE key 16-bit (`sp_gather_bytes`)
    latent_gathers = [
        size if symbol == "d_h^R" else sp_gather_bytes(job, width, bf16)
        for (_, symbol, width), size in zip(latent_parts(job), latents, strict=True)
    ]
    mlp = _tp_mlp(job, moe_layer)
    attention_columns = mla_up_projections(shape) if latents else matrices(qkv_projections(shape))
    # Each block: what it gathers at its input, what its input gradient reduces (the same
    # tensors, 16-bit), what its column GEMMs gather again for their weight gradients (not the
    # RoPE key, gathered outside them; `sp_input_regathered`), its column GEMMs and its row GEMM.
    regather = sp_input_regathered(job)
    # a quantized gather of a per-tensor-scaled input or output gradient first all-reduces its
    # amax (`sp_amax_reduced`): the block's inputs' (not the RoPE key's) and its gradient's
    amax = call("all_reduce", AMAX_BYTES) if sp_amax_reduced(job) and not bf16 else 0.0
    blocks: list[tuple[list[int], list[int], list[int], tuple[OpCost, ...], OpCost, int]] = [
        (
            latent_gathers or [gathered],
            latents or [hidden],
            (latent_gathers[:2] or [gathered]) if regather else [],
            attention_columns,
            output_projection(shape),
            2 if latents else 1,
        )
    ]
    if mlp is not None:
        again = [gathered] if regather else []
        columns = matrices(mlp_up_projections(mlp))
        blocks.append(([gathered], [hidden], again, columns, mlp_down(mlp), 1))
    pipelined = job.training.tp_overlap_runs and job.layout.sp
    # gathers that feed the recipe's casts, not a matmul, are not pipelined
    cast_fed = gathers_feed_casts(job)
    ring = copy_engine_gathers(job)

    def gather_exposed(collective_s: float, gemm_s: float) -> float:
        if cast_fed:
            return collective_s
        if ring:
            return ring_exchange_exposed_s(collective_s, gemm_s, t)
        return pipelined_exposed_s(collective_s, gemm_s, t)

    forward = exposed = overlapped = on_copy_engines = 0.0
    copies_forward = copies_backward = copies_redo = 0.0  # `layout_copy_s`, outside by_block
    by_block: list[float] = []  # each block's forward collectives
    output_s = 0.0  # the last block's output reduction, as the forward runs it
    copies = sp_layout_copies(job)
    # each block's input gathers (amaxes included) as its recomputed forward runs them again
    # under torchtitan's per-op checkpointing, pipelined under async TP with the share of its
    # column GEMMs the policy recomputes (`planc.perf.sac`)
    gathered_s: list[float] = []
    recomputed = recomputed_columns(shape) if sp_gather_recomputed(job) else {}
    for inputs, sizes, again_sizes, columns, row, amaxes in blocks:
        before = forward
        wgrad = sum(
            work_time_s(cost, cost.backward_weight, device, eff, True, cost.weight_gemm)
            for cost in columns
        )
        if again_sizes:
            # the input gathered again for the weight gradient, beside the column dgrad GEMMs
            dgrad = sum(
                work_time_s(c, c.backward_data, device, eff, True, c.data_gemm) for c in columns
            )
            refetch = sum(call("all_gather", size) for size in again_sizes)
            exposed += max(0.0, refetch - dgrad)
            overlapped += min(refetch, dgrad)
        if job.layout.sp:
            gather = sum(call("all_gather", size) for size in inputs)
            scatter = call("reduce_scatter", hidden)
            grad_gather = call("all_gather", gathered)
            hide = sum(call("reduce_scatter", size) for size in sizes)
            if pipelined:
                column_f = sum(work_time_s(c, c.forward, device, eff) for c in columns)
                row_f = work_time_s(row, row.forward, device, eff)
                row_d = work_time_s(row, row.backward_data, device, eff, True, row.data_gemm)
                shown = (
                    gather_exposed(gather, column_f),
                    pipelined_exposed_s(scatter, row_f, t),
                    gather_exposed(grad_gather, row_d),
                )
                forward += shown[0] + shown[1]
                output_s = shown[1]
                exposed += shown[2]
                gathers_hidden = gather + grad_gather - shown[0] - shown[2]
                if ring:
                    on_copy_engines += gathers_hidden
                else:
                    overlapped += gathers_hidden
                overlapped += scatter - shown[1]
                redone_f = sum(
                    recomputed.get(c.name, 1.0) * work_time_s(c, c.forward, device, eff)
                    for c in columns
                )
                again_s = gather_exposed(gather, redone_f)
                gathered_s.append(again_s + amaxes * amax)
            else:
                forward += gather + scatter
                output_s = scatter
                exposed += grad_gather
                gathered_s.append(gather + amaxes * amax)
            # before the quantization, so before any gather or its pipelining
            forward += amaxes * amax
            exposed += amax
            if copies:
                mlp_block = len(by_block) == len(blocks) - 1 and mlp is not None
                copy_f, copy_b, copy_r = layout_copy_s(job, eff, sum(inputs), hidden, mlp_block)
                copies_forward += copy_f
                copies_backward += copy_b
                copies_redo += copy_r
        else:
            output_s = call("all_reduce", hidden)
            forward += output_s
            hide = sum(call("all_reduce", size) for size in sizes)
        dx_exposed, dx_hidden = input_gradient_exposed_s(
            hide, wgrad, tp_reduction_async(job)
        )
        exposed += dx_exposed
        overlapped += dx_hidden
        by_block.append(forward - before)
    latent_s = [call("all_gather", size) for size in latent_gathers]
    latent_s[:2] = [seconds + amax for seconds in latent_s[:2]]  # the up projections' inputs
    redo = _tp_redone_s(job, moe_layer, by_block, latent_s, output_s if mlp is not None else 0.0)
    if sp_gather_recomputed(job):
        redo += sum(gathered_s)  # torchtitan's per-op checkpointing gathers each input again
    forward += copies_forward
    exposed += copies_backward
    redo += copies_redo
    if job.training.tp_overlap_runs and not job.layout.sp:
        # Without SP Megatron has no userbuffers overlap (validate_args requires SP for
        # --tp-comm-overlap); planc keeps its older reading of overlap_tp: all hidden.
        return TpPerLayer(0.0, 0.0, forward + exposed + overlapped + redo, 0.0)
    return TpPerLayer(forward, exposed, overlapped, redo, on_copy_engines)


def ends_tp_times(job: Plannable, eff: Efficiency, stage: int, link: str | None) -> EndsTimes:
    """The TP collectives at the model's ends on `stage` (`planc.comm.ends`), timed on `link`
    (`planc.perf.ends.ends_times`): each call `comm_time_s`, the LM head's and eh_proj's
    gradient GEMMs in 16 bits as a layer's column GEMMs are (`tp_per_layer_on`)."""
    ends = end_collectives(job, stage)
    if link is None or not ends.every:
        return EndsTimes()
    shape, device, t = layer_shape(job), device_of(job), job.layout.t

    def gemm(cost: OpCost) -> GemmTimes:
        return GemmTimes(
            work_time_s(cost, cost.backward_data, device, eff, True, cost.data_gemm),
            work_time_s(cost, cost.backward_weight, device, eff, True, cost.weight_gemm),
        )

    (projection,) = [op for op in mtp_projection_ops(shape) if op.name == Linear.PROJECTION.value]
    gemms = {Linear.HEAD: gemm(lm_head(shape)), Linear.PROJECTION: gemm(projection)}

    def call_s(one: EndCollective) -> float:
        return comm_time_s(job, eff, one.op.value, t, one.size, link)

    return ends_times(ends, call_s, gemms, tp_reduction_async(job), deferred_share(job, stage))


def with_deferred_head(
    job: Plannable, eff: Efficiency, stage: int, times: Sequence[ChunkTimes], link: str | None
) -> tuple[tuple[ChunkTimes, ...], float]:
    """The chunks' times of pipeline rank `stage` with Megatron's deferred LM-head weight
    gradients (`planc.deferral`) taken out of its last chunk's backward, f·h_p·W per
    micro-batch on average, and the seconds they take in the flush; unchanged and 0 where
    nothing is deferred. W is the head's weight-gradient GEMM as the chunk prices it (16 bits:
    Megatron refuses the deferral with the recipe's head, PLC048); G its input's all-gather on
    the stage's TP link under sequence parallelism."""
    k, _ = deferred_calls(job, stage)
    if k == 0:
        return tuple(times), 0.0
    (head,) = op_times((lm_head(layer_shape(job)),), device_of(job), eff)
    weight = head.backward_weight_s
    last = times[-1]
    # f·h_p·W per micro-batch: f·h_p = k/m
    lighter = replace(last, backward_s=last.backward_s - k / job.m * weight)
    gather = 0.0
    if job.layout.sp and job.layout.t > 1 and link is not None:
        gather = comm_time_s(job, eff, "all_gather", job.layout.t, head_gather_bytes(job), link)
    return (*times[:-1], lighter), flush_s(k, weight, gather)


def gathers_feed_casts(job: Plannable) -> bool:
    """Whether the SP all-gathers feed the recipe's casts rather than a matmul under torchtitan's
    async TP, which then cannot pipeline them. torch's micro-pipeline pass decomposes an
    all-gather only into the matmuls that consume it directly (mm or _scaled_mm, through a
    reshape at most: torch/_inductor/fx_passes/micro_pipeline_tp.py, _find_consumer_matmuls);
    torchao's rowwise recipes gather the 16-bit input and output gradient (torchtitan:
    'rowwise: all-gather happens in high precision') and cast them along each axis before the
    GEMM. The forward reduce-scatter, which the row GEMM's output feeds, keeps its pipeline."""
    q = job.numerics.quantized
    return job.training.framework == "fsdp2" and q is not None and q.recipe in ROWWISE_RECIPES


def tp_reduction_async(job: Plannable) -> bool:
    """Whether a column-parallel block's input-gradient reduction runs beside its weight
    gradient. Megatron and DeepSpeed's Megatron layers: `training.async_tp_allreduce`.
    torchtitan (DTensor TP): never. The reduce-scatter is the backward of the block's input
    redistribution (PrepareModuleInput, Shard → Replicate), issued once the block's linears
    have run their backward, each its dX and dW in one autograd node, and waited on by the
    norm's backward that follows. Async TP does not take it either: torch's micro-pipeline pass
    fuses a reduce-scatter whose input one matmul produces (torch/_inductor/fx_passes/
    micro_pipeline_tp.py, fuse_matmul_reduce_scatter, _find_producer_matmul), and torchtitan's
    separate wq, wk, wv (w1, w3) sum their input gradients before it."""
    tr = job.training
    if tr.framework == "fsdp2":
        return False
    return tr.async_tp_allreduce


def input_gradient_exposed_s(
    reduction_s: float, wgrad_s: float, asynchronous: bool
) -> tuple[float, float]:
    """(exposed, hidden) seconds of a column-parallel block's input-gradient reduction (the
    all-reduce, or with SP the reduce-scatter, of dX) against its weight gradient dW.

    Asynchronous (Megatron-LM since 2021-09, `LinearWithGradAccumulationAndAsyncCommunication`
    in megatron/core/tensor_parallel/layers.py; `training.async_tp_allreduce`): the reduction is
    launched before dW and runs beside it, exposed = max(0, r − w), hidden = min(r, w).
    Synchronous (Megatron-LM before it, e.g. cdde43385e of 2021-04, where the backward of
    `copy_to_tensor_model_parallel_region` all-reduces dX inside autograd before dW starts; or
    --no-async-tensor-model-parallel-allreduce): exposed = r, hidden = 0. Seconds per block and
    micro-batch."""
    if not asynchronous:
        return reduction_s, 0.0
    return max(0.0, reduction_s - wgrad_s), min(reduction_s, wgrad_s)


def copy_engine_gathers(job: Plannable) -> bool:
    """Whether the pipelined SP all-gathers run as Transformer Engine's ring exchange on the
    copy engines: Megatron's userbuffers (`--tp-comm-overlap`), whose default method for the
    forward input gathers (qkv_fprop, fc1_fprop) and the backward output-gradient gathers
    (proj_dgrad, fc2_dgrad) is ring_exchange with use_ce (transformer_engine/pytorch/module/
    base.py initialize_ub, get_default_config, TE 2.14; CommOverlapP2PBase::split_overlap_ag).
    torchtitan's async TP and DeepSpeed keep `pipelined_exposed_s` and the SMs' share."""
    return job.training.framework == "megatron"


def ring_exchange_exposed_s(collective_s: float, gemm_s: float, t: int) -> float:
    """Seconds of an all-gather left exposed by Transformer Engine's ring exchange beside a GEMM
    of `gemm_s` seconds in t chunks: the first chunk multiplies the rank's own shard while the
    next arrives, and each of the t − 1 exchanges (c/(t − 1) each) hides behind one chunk's
    GEMM (g/t): max(0, c − g·(t − 1)/t) (TE comm_gemm_overlap.cpp split_overlap_ag, the local
    chunk first)."""
    if t <= 1:
        return 0.0
    return max(0.0, collective_s - gemm_s * (t - 1) / t)


def pipelined_exposed_s(collective_s: float, gemm_s: float, t: int) -> float:
    """Seconds of a collective left exposed when it is split into t chunks pipelined with a GEMM
    of `gemm_s` seconds (TE userbuffers' reduce-scatters, torchtitan's async TP): at least one
    chunk, c/t, has no GEMM chunk beside it, and the rest hides behind (t − 1)/t of the GEMM:
    max(c/t, c − g·(t − 1)/t)."""
    if t <= 1:
        return 0.0
    return max(collective_s / t, collective_s - gemm_s * (t - 1) / t)


def core_ops(job: Plannable, shape: OpShape) -> tuple[OpCost, ...]:
    """The attention core's ops as the run executes them: in FP8 where the recipe runs the
    core there (`training.fp8.attention`), which shortens what hides the ring's exchange."""
    q = job.numerics.quantized
    ops = attention_core(shape)
    if q is None or q.attention is None:
        return ops
    return with_quantized_gemms(ops, q, shape.beta, 1.0, shape)


def cp_exposed_per_microbatch(
    job: Plannable, eff: Efficiency, ops: Sequence[CommOp], stage: int, layers: int
) -> float:
    """The context-parallel exchange left exposed per micro-batch on `stage`.

    Each of the c − 1 ring steps of a layer overlaps the attention core of one K/V block
    (Liu et al. 2023, Ring Attention; Megatron-Core/TE context parallelism), so per layer and
    pass only what exceeds the core's time is exposed: forward one exchange of K and V per step,
    backward two (K, V, and their gradients). The all-to-alls (cp_comm_type a2a, a2a+p2p) and
    the K/V all-gather (allgather) are exposed whole (`planc.comm.context.exposed_per_layer`).
    Where the attention core is recomputed (`cp_core_redone`) its forward exchanges again, the
    ring's steps beside the recomputed core. torch's ring attention (torchtitan) hides its K/V
    gather or permutes and its fp32 dK/dV permutes behind the blocks' attention as torch issues
    them eagerly (`planc.comm.context.torch_ring_exposed_per_layer`); inside torchtitan's
    compiled blocks (`kernels: compiled`) it waits on each where it is issued, so all of it
    shows (`planc.comm.context.torch_ring_traced_per_layer`).
    """
    cp = [op for op in ops if op.stage == stage and op.group == "cp" and op.calls]
    if not cp or layers == 0:
        return 0.0
    shape, device = layer_shape(job), device_of(job)
    core = pass_times(core_ops(job, shape), device, eff)
    if job.training.framework == "fsdp2":
        # torch's ring attention: one K/V op and the fp32 dK/dV permutes (`_torch_ring_ops`)
        (dkv,) = [op for op in cp if "dK/dV" in op.phase]
        (kv,) = [op for op in cp if op is not dkv]
        kv_s, dkv_s = call_time_s(job, eff, kv), call_time_s(job, eff, dkv)
        gathered, redone = kv.op is Collective.ALL_GATHER, cp_core_redone(job)
        if job.training.kernels == "compiled":
            # the compiled block traces the ring: every exchange waited on where it is issued
            traced = torch_ring_traced_per_layer(kv_s, dkv_s, job.layout.c, gathered, redone)
            return layers * traced
        one = torch_ring_exposed_per_layer(
            kv_s, dkv_s, job.layout.c, gathered, core.forward_s, core.backward_s, redone
        )
        return layers * one
    per_layer = layers * job.m
    ring = sum(op.calls * call_time_s(job, eff, op) for op in cp if op.op is Collective.SEND_RECV)
    blocking = sum(
        op.calls * call_time_s(job, eff, op) for op in cp if op.op is not Collective.SEND_RECV
    )
    exposed = exposed_per_layer(
        ring / per_layer,
        blocking / per_layer,
        core.forward_s,
        core.backward_s,
        cp_core_redone(job),
        fp8_ring(job),
    )
    return layers * exposed


def cp_hidden_per_microbatch(
    job: Plannable, eff: Efficiency, ops: Sequence[CommOp], stage: int, exposed_s: float
) -> float:
    """The context-parallel exchange hidden behind attention per micro-batch on `stage`: its
    ops' time (calls × `call_time_s`, over the m micro-batches) less what is left exposed
    (`cp_exposed_per_microbatch`). Its kernels run beside the attention and slow it by the
    link's processor_usage, as TP's and DP's hidden collectives do (`StepInputs`)."""
    total = sum(
        op.calls * call_time_s(job, eff, op)
        for op in ops
        if op.stage == stage and op.group == "cp"
    )
    return max(0.0, total / job.m - exposed_s)


@record
class DataParallelTimes:
    """A stage's data-parallel communication in one step, in seconds, as the step composes it."""

    buckets: tuple[float, ...]  # gradient buckets overlapping the last backward, in order
    after_step: float  # exposed after the optimizer step
    overlapped: float  # hidden behind compute (slowing it by processor_usage)


def _dp(
    job: Plannable,
    eff: Efficiency,
    ops: Sequence[CommOp],
    stage: int,
    forward_s: float,
    params: int = 0,
    call_s: CallSeconds | None = None,
) -> DataParallelTimes:
    """The stage's data-parallel communication, placed as the framework issues it; `call_s`
    gives one call's seconds of an op (`call_time_s` unless the caller has them priced already).

    * Gradient reduce-scatters (all-reduces without ZeRO) run in buckets as the last
      micro-batch's backward produces them (Megatron DDP `--overlap-grad-reduce`, DeepSpeed
      `overlap_comm`); with `training.overlap_grad_reduce` off they run as one block after the
      backward, all exposed. ZeRO-2/3 and FSDP2 reduce every micro-batch's gradients: all but
      the last micro-batch's hide behind the next micro-batch's compute.
    * ZeRO-1/2's parameter all-gather follows the optimizer step. With
      `training.overlap_param_gather` (Megatron `--overlap-param-gather`) bucket i + 1 is
      gathered while the next step's first forward runs on bucket i: the first bucket is
      exposed, the rest hide behind one micro-batch's forward (`forward_s`) and what does not
      fit is exposed. ZeRO-3/FSDP2 gather before every forward and backward (hidden, prefetched).
    * The tied embedding's all-reduce follows the optimizer step, exposed.
    * Under DeepSpeed's pipeline engine neither overlap exists (`planc.perf.pipe_engine`:
      ReduceGrads after the schedule, the ZeRO step's own all-gather).
    * FSDP2's ends (`planc.perf.fsdp2`): each micro-batch's first all-gather (the root unit and
      the first block of the stage's Ψ_r = `params`) waits for the compute stream, exposed, and
      the step's last reduce-scatter is theirs (`fsdp2_ends`).
    """
    m = job.m
    zero = sharding_stage(job)
    buckets: list[float] = []
    gathers: list[float] = []
    after = overlapped = 0.0
    for op in ops:
        if op.stage != stage or op.group not in DP_GROUPS or not op.calls:
            continue
        one = call_time_s(job, eff, op) if call_s is None else call_s(op)
        if op.group == "embedding":
            after += one * op.calls
        elif op.op == "all_gather" and zero <= 2:
            gathers += [one] * op.calls
        elif op.op == "all_gather":  # ZeRO-3/FSDP2: gathered before every forward and backward
            overlapped += one * op.calls
        elif zero >= 2:  # reduce-scatter (and HSDP's replica all-reduce) after every micro-batch
            per_mb = op.calls // m
            buckets += [one] * per_mb
            overlapped += one * (op.calls - per_mb)
        else:
            buckets += [one] * op.calls
    if gathers and overlaps_param_gather(job) and overlaps_grad_reduce(job):
        hidden = min(sum(gathers[1:]), forward_s)
        after += sum(gathers) - hidden
        overlapped += hidden
    else:
        after += sum(gathers)
    if buckets and not overlaps_grad_reduce(job):
        buckets = [sum(buckets)]  # one block after the backward: the last bucket is exposed
    gather_s, reduce_s = fsdp2_ends(job, eff, ops, stage, params)
    moved = min(gather_s, overlapped)
    after, overlapped = after + moved, overlapped - moved
    if reduce_s > 0 and buckets:
        total = sum(buckets)
        last = min(reduce_s, total)
        buckets = [total - last, last] if total > last else [total]
    return DataParallelTimes(tuple(buckets), after, overlapped)


def with_copy_out(
    job: Plannable, times: Sequence[ChunkTimes], params: int, device: Device, eff: Efficiency
) -> tuple[ChunkTimes, ...]:
    """The chunks' times with FSDP2's copies on the compute stream added per micro-batch: the
    all-gather copy-outs to the forward (every unit) and the backward (the units gathered
    again), and every unit's reduce-scatter copy-in to the backward (`planc.perf.fsdp2`
    `copy_out_units`, `copy_out_s`, `reduce_copy_in_s`). Unchanged where they are not priced
    (one chunk only: FSDP2 with one pipeline stage)."""
    forward, backward = copy_out_units(job, params)
    if not forward or len(times) != 1:
        return tuple(times)

    def seconds(units: Sequence[int]) -> float:
        out = 0.0
        for u in units:
            moved = COPY_OUT_PASSES * job.numerics.weight * u
            out += copy_out_s(job, u, device.hbm_bytes, eff.hbm.at(moved))
        return out

    def copy_in(units: Sequence[int]) -> float:
        return sum(
            reduce_copy_in_s(job, u, device.hbm_bytes, eff.hbm.at(reduce_copy_in_bytes(job, u)))
            for u in units
        )

    (chunk,) = times
    f, b = seconds(forward), seconds(backward) + copy_in(forward)
    return (replace(chunk, forward_s=chunk.forward_s + f, backward_s=chunk.backward_s + b),)


def with_activation_offload(
    job: Plannable, times: Sequence[ChunkTimes]
) -> tuple[tuple[ChunkTimes, ...], float]:
    """The chunk's times with what its passes wait on the activation copies of
    `training.offload.activations` added per micro-batch (`planc.perf.offload`
    `activation_offload_s`), and that wait; unchanged and 0 without them (one chunk only:
    Megatron offloads activations without a pipeline)."""
    if len(times) != 1:
        return tuple(times), 0.0
    (chunk,) = times
    f, b = activation_offload_s(job, chunk.forward_s, chunk.backward_s)
    if not (f or b):
        return (chunk,), 0.0
    waited = replace(chunk, forward_s=chunk.forward_s + f, backward_s=chunk.backward_s + b)
    return (waited,), f + b


def fsdp2_ends(
    job: Plannable, eff: Efficiency, ops: Sequence[CommOp], stage: int, params: int
) -> tuple[float, float]:
    """(exposed all-gather seconds per step, last reduce-scatter seconds) of FSDP2's ends:
    m all-gathers of `EndUnits.first` 16-bit parameters and one reduce-scatter of
    `EndUnits.last` gradients (`grad_bytes`), on the stage's ZeRO-3 groups and links
    (`planc.perf.fsdp2`); (0, 0) where it does not price them."""
    units = end_units(job, params)
    if not units.first:
        return 0.0, 0.0
    mine = [op for op in ops if op.stage == stage and op.group in DP_GROUPS and op.calls]
    gather = next((op for op in mine if op.op == "all_gather"), None)
    reduce = next((op for op in mine if op.op == "reduce_scatter"), None)
    if gather is None or reduce is None:
        return 0.0, 0.0
    first = replace(gather, buffer_bytes=units.first * param_bytes(job), calls=1)
    last = replace(reduce, buffer_bytes=units.last * grad_bytes(job), calls=1)
    return job.m * call_time_s(job, eff, first), call_time_s(job, eff, last)


def muon_seconds(job: Plannable, eff: Efficiency, stage: int) -> float:
    """`muon_times`' total, 0 under other optimizers."""
    times = muon_times(job, eff, stage)
    return 0.0 if times is None else times.total_s


@record
class MuonTimes:
    """Muon's part of a rank's optimizer step: the Newton-Schulz iterations (`step`) and the
    seconds of the TP exchanges its mode needs (`exchange_s`)."""

    step: MuonStep
    exchange_s: float

    @property
    def total_s(self) -> float:
        return self.step.ns_s + self.exchange_s


def muon_times(job: Plannable, eff: Efficiency, stage: int) -> MuonTimes | None:
    """What Muon adds to the optimizer step of a rank of `stage` (None under other
    optimizers): its Newton-Schulz iterations on its share (`planc.perf.muon.muon_step`: 1/N of
    the dense matrices and 1/N_e of the experts' under the layer-wise distributed optimizer)
    and, by its TP mode, the fp32 momentum all-gathers (duplicated) or the Gram all-reduces
    (distributed) over the tensor (dense) and expert-tensor (experts) groups, each blocking the
    iteration that needs it."""
    if job.training.optimizer != "muon":
        return None
    lay = job.layout
    shard, expert_shard = (lay.shard_group, lay.edp) if sharding_stage(job) >= 1 else (1, 1)
    step = muon_step(job, stage, device_of(job), eff, shard, expert_shard)
    comm = 0.0
    for each in step.exchanges:
        link = expert_link(job, Axis.TP) if each.expert else link_class(job, (Axis.TP,))
        op = CommOp(
            stage=stage,
            group=GroupKind.ETP if each.expert else GroupKind.TP,
            op=each.collective,
            phase="Muon momentum exchange",
            group_size=each.degree,
            calls=1,
            buffer_bytes=each.bytes,
            link=link,
            formula="",
        )
        comm += each.calls * call_time_s(job, eff, op)
    return MuonTimes(step, comm)


def optimizer_bytes(job: Plannable) -> int:
    """HBM bytes per parameter of the job's optimizer step (its framework's Adam and clipping,
    `planc.perf.ops.optimizer_bytes_per_parameter`)."""
    tr, num = job.training, job.numerics
    # fp32 training has no master copy: the step updates the fp32 weights in place, as the
    # master (4 bytes) would be.
    return optimizer_bytes_per_parameter(
        tr.framework,
        tr.optimizer_implementation,
        num.loss_scaling,
        num.master or 4,
        num.moment,
        DType(tr.model_dtype).bits // 8,
    )


def ops_by_stage(ops: Sequence[CommOp], p: int) -> tuple[tuple[CommOp, ...], ...]:
    """The schedule's ops of each stage, in schedule order: the per-stage terms read only their
    own stage's ops, and scanning the whole schedule once per stage is p² at 4,096 stages."""
    staged: list[list[CommOp]] = [[] for _ in range(p)]
    for op in ops:
        staged[op.stage].append(op)
    return tuple(tuple(each) for each in staged)


def build_inputs(
    job: Plannable,
    params_by_stage: Sequence[int],
    experts_by_stage: Sequence[int],
    eff: Efficiency,
    ops: Sequence[CommOp],
    chunks_of: ChunksOf | None = None,
) -> StepInputs:
    """The :class:`StepInputs` of `job`: `params_by_stage[r]` is Ψ_r, the parameters one rank of
    stage r holds, and `experts_by_stage[r]` its Ψ_expert (sharded over the expert data-parallel
    group instead of the data-parallel one), both from planc's memory analysis
    (`Analysis.parameters`); `ops` the communication schedule (`Analysis.ops`, or only the ops of
    each stage class's first stage, `StagedSchedule.first_ops`) and `eff` the efficiency
    tables. `planc.analysis.estimate_step` is the one caller.

    A stage's inputs read it only as its class (`planc.stages`): each class's are computed once,
    on its first stage. `chunks_of`: each stage's chunk times (`stage_chunk_times` by default: a
    search passes the ones it has computed).
    """
    lay, m = job.layout, job.m
    device = device_of(job)
    chunks_of = stage_chunk_times if chunks_of is None else chunks_of
    classes = stage_classes(job)
    zero = sharding_stage(job) >= 1
    shard, expert_shard = (lay.shard_group, lay.edp) if zero else (1, 1)
    exchange = ep_per_layer(job, eff)
    paired = paired_per_layer(job, eff, exchange)
    host = expert_host_per_layer(job, eff)
    transfers = boundary_transfers(job, eff, ops) if runs_pipe_engine(job) else ()
    staged = ops_by_stage(ops, lay.p)
    # One layer's TP times read a stage only as the tier of its TP ops (`tp_link`), and a MoE
    # layer's differ from a dense one's only in a MoE model (`_tp_mlp`): each distinct one is
    # priced once.
    tp_times: dict[tuple[str | None, bool, bool], TpPerLayer] = {}

    def tp_of(link: str | None, moe_layer: bool, bf16: bool = False) -> TpPerLayer:
        at = (link, moe_layer and job.dims.experts is not None, bf16)
        found = tp_times.get(at)
        if found is None:
            found = tp_times[at] = tp_per_layer_on(job, eff, *at)
        return found

    stages = []
    for r in classes.first:
        layers, _ = job.run_layers(r)
        params, experts = params_by_stage[r], experts_by_stage[r]
        split, routed = job.chunk_run_layers(r)
        mine = staged[r]
        blocking = blocking_p2p(job, transfers, r)
        times = chunks_of(job, eff, r)
        link = tp_link(mine, r)
        cp_exposed = cp_exposed_per_microbatch(job, eff, mine, r, layers)
        # per chunk: its (dense, MoE) layers whose SP gathers move the recipe's data, and those
        # it keeps in BF16 (`tp_layer_mix`), each with its layer's TP times
        mixes = tp_layer_mix(job, r, split, routed)
        kept = any(mix[2] or mix[3] for mix in mixes)
        tp = (
            tp_of(link, False),
            tp_of(link, True),
            tp_of(link, False, kept),
            tp_of(link, True, kept),
        )
        times = with_copy_out(job, times, params, device, eff)
        times, offload_wait = with_activation_offload(job, times)
        times, flush = with_deferred_head(job, eff, r, times, link)
        dp = _dp(job, eff, mine, r, sum(t.forward_s for t in times), params)
        ends = ends_tp_times(job, eff, r, link)
        tp_forward = [
            sum(k * one.forward_s for k, one in zip(mix, tp, strict=True)) for mix in mixes
        ]
        tp_backward = [
            sum(k * (one.backward_exposed_s + one.recompute_s) for k, one in zip(mix, tp, strict=True))
            for mix in mixes
        ]
        tp_forward[0] += ends.first_forward_s
        tp_backward[0] += ends.first_backward_s
        tp_forward[-1] += ends.last_forward_s
        tp_backward[-1] += ends.last_backward_s
        stages.append(
            StageInputs(
                forward_s=tuple(t.forward_s for t in times),
                backward_s=tuple(t.backward_s for t in times),
                tp_forward_s=tuple(tp_forward),
                tp_backward_s=tuple(tp_backward),
                dp_buckets_s=dp.buckets,
                after_step_s=dp.after_step + offload_transfer_s(job, params),
                optimizer_s=optimizer_time_s(
                    (params - experts) / shard + experts / expert_shard,
                    device,
                    eff,
                    optimizer_bytes(job),
                )
                + muon_seconds(job, eff, r),
                tp_overlapped_s=ends.hidden_s
                + sum(
                    k * one.backward_overlapped_s
                    for mix in mixes
                    for k, one in zip(mix, tp, strict=True)
                ),
                tp_copy_engine_s=sum(
                    k * one.copy_engine_s for mix in mixes for k, one in zip(mix, tp, strict=True)
                ),
                cp_exposed_s=cp_exposed,
                cp_overlapped_s=cp_hidden_per_microbatch(job, eff, mine, r, cp_exposed),
                dp_overlapped_s=dp.overlapped / m,
                ep_forward_s=tuple(e * exchange.forward_s for e in routed),
                ep_backward_s=tuple(e * exchange.backward_s for e in routed),
                ep_paired_forward_s=tuple(e * paired[0] for e in routed),
                ep_paired_backward_s=tuple(e * paired[1] for e in routed),
                host_forward_s=tuple(e * host[0] for e in routed),
                host_backward_s=tuple(e * host[1] for e in routed),
                recompute_s=tuple(t.recompute_s for t in times),
                p2p_forward_s=blocking.forward_s,
                p2p_backward_s=blocking.backward_s,
                accumulate_s=accumulation_s(job, r, params, device, eff),
                flush_s=flush,
                offload_wait_s=offload_wait,
            )
        )
    hop = hop_s(job, p2p_message_s(job, eff, ops))
    return StepInputs(
        stages=classes.expand(stages),
        m=m,
        v=lay.v,
        p2p_s=hop,
        tp_processor_usage=_entry(job, eff, _group_link(job, ops, "tp")).processor_usage,
        dp_processor_usage=_entry(job, eff, _dp_link(job, ops)).processor_usage,
        cp_processor_usage=_entry(job, eff, _group_link(job, ops, "cp")).processor_usage,
        ep_processor_usage=ep_processor_usage(job, eff),
        model_flops=model_flops(job),
        tokens=job.training.B * job.training.s,
        peak_flops=job.world * gemm_peak_tflops(job) * 1e12,
        schedule=lay.schedule,
    )


def p2p_message_s(job: Plannable, eff: Efficiency, ops: Sequence[CommOp]) -> float:
    """Seconds of one pipeline message on the critical path: the boundary tensor's send and its
    all-gather on arrival (`boundary_transfers`), across the slowest boundary the messages cross
    (`planc.sends.slowest_crossed` says why)."""
    seconds = [one.send_s + one.gather_s for one in boundary_transfers(job, eff, ops)]
    return slowest_crossed(job, seconds)


def boundary_transfers(job: Plannable, eff: Efficiency, ops: Sequence[CommOp]) -> tuple[Transfer, ...]:
    """`boundary_transfer` across each pipeline boundary, on its own tier
    (`planc.sends.boundary_tiers`), each tier priced once; none for p = 1."""
    priced: dict[str, Transfer] = {}
    out = []
    for tier in boundary_tiers(job):
        one = priced.get(tier.name)
        if one is None:
            one = priced[tier.name] = boundary_transfer(job, eff, ops, tier.name)
        out.append(one)
    return tuple(out)


def boundary_transfer(job: Plannable, eff: Efficiency, ops: Sequence[CommOp], link: str) -> Transfer:
    """One activation (or its gradient) of [s/c, b, h] elements of β_a bytes across a pipeline
    boundary on tier `link`: the sender's ⌈bytes/t⌉ share on it, send = α + ⌈bytes/t⌉/(β·e),
    and on arrival the all-gather over the t TP ranks, gather = (t − 1)·α + (t − 1)/t ·
    bytes/(β·e) (`comm_time_s`). Seconds.

    Without sequence parallelism every TP rank holds the whole boundary tensor, and both
    frameworks send a 1/t slice per rank: Megatron's scatter/gather optimisation (Narayanan et
    al. 2021 §4.1, `--scatter-gather-tensors-in-pipeline`, on by default) and DeepSpeed's
    pipeline engine (`planc.perf.pipe_engine`: deepspeed/runtime/pipe/engine.py
    `_exec_send_activations`, `_exec_recv_activations`, `_exec_forward_pass`
    (PartitionedTensor), v0.5.10 and v0.19.5). With sequence parallelism or t = 1 the tensor
    is already one rank's own: the whole of it is sent and nothing gathered."""
    size = pipeline_message_bytes(job)
    t = job.layout.t
    if job.layout.sp or t == 1:
        return Transfer(comm_time_s(job, eff, "send_recv", 2, size, link), 0.0)
    send = comm_time_s(job, eff, "send_recv", 2, -(-size // t), link)
    gather = comm_time_s(job, eff, "all_gather", t, size, _group_link(job, ops, "tp"))
    return Transfer(send, gather)


# The flex dispatchers' kernels hold their SMs on whatever link they drive, while an exchange
# hides behind compute. By default DeepEP's normal kernels run on Buffer.num_sms, 20 (deep_ep/
# buffer.py at 567632d; Megatron-Core's historical moe_deepep_num_sms, cd4afffa
# transformer_config.py), HybridEP's on its own default of 24 in one domain (deepseek-ai/DeepEP
# branch hybrid-ep, csrc/hybrid_ep config; efficiency.json's HybridEP rates say where it is read).
FLEX_SMS = {"deepep": 20, "hybridep": 24}


def ep_processor_usage(job: Plannable, eff: Efficiency) -> float:
    """The share of compute a hidden expert exchange takes: the flex kernels' SMs over the GPU's
    (σ/SMs): parallelism.dispatcher_sms where the spec states it, else the SMs the expert-parallel
    group's tier measured them on (`KernelRate.sms`, the larger of dispatch and combine), else the
    library's default (`FLEX_SMS`); the tier's processor_usage (NCCL's share) for the alltoall
    and allgather dispatchers; 0 where nothing pairs the exchanges with compute."""
    if job.model.moe is None or job.layout.ep == 1 or not pairs_experts(job):
        return 0.0
    entry = _entry(job, eff, expert_link(job, Axis.EP))
    backend = job.layout.dispatcher
    if backend not in FLEX_SMS:
        return entry.processor_usage
    measured = [
        rate.sms
        for name, rate in entry.kernels.items()
        if name.startswith(f"{backend}_") and rate.sms is not None
    ]
    sms = job.layout.dispatcher_sms or max(measured, default=FLEX_SMS[backend])
    return min(1.0, sms / eff.gemm.sms)


def _group_link(job: Plannable, ops: Sequence[CommOp], group: str) -> str:
    """The tier of `group`'s ops, tp or cp (the innermost tier when there are none)."""
    default = job.cluster.fabric.innermost.name
    return next((op.link for op in ops if op.group == group), default)


def _dp_link(job: Plannable, ops: Sequence[CommOp]) -> str:
    """The tier of the data-parallel gradient ops (the outermost tier when there are none)."""
    default = job.cluster.fabric.outermost.name
    return next((op.link for op in ops if op.group in ("dp_cp", "dp_shard")), default)


def _entry(job: Plannable, eff: Efficiency, link: str) -> LinkEfficiency:
    """The efficiency entry that prices the fabric tier named `link`."""
    return eff.link(job.cluster.fabric.tier(link).efficiency)


# One stage's chunk times per micro-batch (`stage_chunk_times`, or the same shared).
ChunksOf = Callable[[Plannable, Efficiency, int], tuple[ChunkTimes, ...]]


def stage_chunk_times(job: Plannable, eff: Efficiency, r: int) -> tuple[ChunkTimes, ...]:
    """Forward, backward and recompute seconds per micro-batch of each chunk of one rank of
    stage `r` (`chunk_times` on the stage's layers, MoE layers and quantized compute)."""
    lay = job.layout
    return chunk_times(
        layer_shape(job),
        lay.chunk_layers(r),
        r == 0,
        r == lay.last_stage,
        job.training.recompute,
        device_of(job),
        eff,
        job.chunk_moe_layers(r),
        expert_shape(job),
        quantized_compute(job, r, quantized_layers(job, eff)),
        job.training.recompute_modules,
        job.mtp_modules(r),
        job.chunk_window_layers(r),
        job.model.window,
    )


# What `chunk_times` reads of one stage beyond the job's layer shape: its chunks' layers, whether
# it is the first and the last stage, its chunks' MoE layers, its quantized compute and its
# multi-token prediction modules and its chunks' windowed layers.
_StageShape = tuple[
    tuple[int, ...],
    bool,
    bool,
    tuple[int, ...],
    QuantizedCompute | None,
    tuple[int, int],
    tuple[tuple[int, int], ...],
]


def stage_times(job: Plannable, eff: Efficiency) -> tuple[StageTimes, ...]:
    """Forward, backward (recompute included) and recompute compute seconds per micro-batch of
    one rank of each stage, all its chunks together."""
    lay = job.layout
    low = quantized_layers(job, eff)
    # Stages with the same chunks (the interior ones of an even split) have the same times:
    # each distinct stage shape is priced once (`chunk_times` is a function of these).
    priced: dict[_StageShape, StageTimes] = {}
    out = []
    for r in range(lay.p):
        layers, first, last = lay.chunk_layers(r), r == 0, r == lay.last_stage
        moe, quantized = job.chunk_moe_layers(r), quantized_compute(job, r, low)
        key = (layers, first, last, moe, quantized, job.mtp_modules(r), job.chunk_window_layers(r))
        if key not in priced:
            chunks = stage_chunk_times(job, eff, r)
            priced[key] = StageTimes(
                forward_s=sum(c.forward_s for c in chunks),
                backward_s=sum(c.backward_s for c in chunks),
                recompute_s=sum(c.recompute_s for c in chunks),
            )
        out.append(priced[key])
    return tuple(out)


def after_step_s(
    job: Plannable,
    eff: Efficiency,
    ops: Sequence[CommOp],
    params_by_stage: Sequence[int],
    times: Sequence[StageTimes],
    call_s: CallSeconds | None = None,
) -> tuple[float, ...]:
    """Per stage, the communication that always follows the optimizer step (what of the ZeRO-1/2
    parameter all-gather its overlap leaves exposed, the tied-embedding all-reduce) and the
    offload copies: exposed whatever else overlaps, so a lower bound on what the step adds after
    the pipeline. `times` are the stages' compute times (`Analysis.times`); `ops` the schedule
    (every stage's, or each stage class's first stage's, as `build_inputs` takes them), each
    class priced once; `call_s` one call's seconds of an op (`call_time_s` by default: a search
    passes the calls it has priced)."""
    classes = stage_classes(job)
    staged = ops_by_stage(ops, job.layout.p)
    return classes.expand(
        [
            _dp(job, eff, staged[r], r, times[r].forward_s, call_s=call_s).after_step
            + offload_transfer_s(job, params_by_stage[r])
            for r in classes.first
        ]
    )


def op_seconds(job: Plannable, eff: Efficiency, ops: Sequence[CommOp]) -> tuple[float, ...]:
    """Seconds of all calls of each op in one step, on its link with its collective's
    efficiency and latency."""
    # A call's time reads only these fields (the group kind decides its rails; the rounds and
    # the kernel are the cross-domain all-to-all's and the flex dispatcher's): the ops the
    # stages share are priced once.
    priced: dict[CallKey, float] = {}
    out = []
    for op in ops:
        key = call_key(op)
        if key not in priced:
            priced[key] = call_time_s(job, eff, op)
        out.append(op.calls * priced[key])
    return tuple(out)
