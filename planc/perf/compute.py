"""Time per op, per pass, per model chunk: FLOPs and bytes through the efficiency curves.

One op's pass takes

    T = max(F / (peak · eff_gemm(F, d)),  B / (HBM · eff_hbm(B)))      (matrix ops)
    T = max(F / (vector peak · e_vec),   B / (HBM · eff_hbm(B)))      (vector ops)
    T = max(F / (vector peak · e_vec),   B / (HBM · eff_cast(B)))     (Transformer Engine's
                                                                       casts: eff_hbm's form at
                                                                       their measured rate)
    T = max(F / (peak · e_flash),        B / (HBM · eff_hbm(B)))      (fused attention: the
                                                                       kernel's own e_flash)

the roofline of Williams, Waterman & Patterson 2009 (CACM 52(4)): inside one kernel the loads
overlap the math, so the slower of the two bounds the kernel. Calculon's default adds the two
("no_overlap"); with the fixed-cost terms already inside both curves (F½, B½), adding them would
charge the per-kernel cost twice and charge the weight reads of every large GEMM on top of its
math (+9 % on the 1T model's MLP), which a tiled GEMM hides. Kernels run one after another on a
rank: a pass of a chunk is the sum over its ops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from itertools import pairwise

from planc.dims import ExpertDims, Quantized
from planc.perf.ops import (
    D64_BELOW,
    GemmShape,
    OpCost,
    OpShape,
    Work,
    first_stage_ops,
    last_stage_ops,
    layer_ops,
    moe_layer_ops,
    mtp_head_ops,
    mtp_projection_ops,
    optimizer_step,
    with_quantized_gemms,
)
from planc.perf.sac import recomputed_shares, unread_tail
from planc.presets.efficiency import Efficiency
from planc.record import record
from planc.vocab import DEFAULT_RECOMPUTE_MODULES, DType

RECOMPUTE = ("none", "selective", "selective-op", "full")


@record
class Device:
    """The GPU's peaks: dense matrix FLOP/s in the GEMMs' data type and HBM bytes/s."""

    matrix_flops: float
    hbm_bytes: float
    gemm: DType = DType.BF16  # the data type the matrix peak is of; picks the GEMM curve

    @classmethod
    def of(cls, tflops: float, memory_bandwidth_gbs: float, gemm: DType = DType.BF16) -> Device:
        return cls(tflops * 1e12, memory_bandwidth_gbs * 1e9, gemm)


def work_time_s(
    op: OpCost,
    work: Work,
    device: Device,
    eff: Efficiency,
    backward: bool = False,
    gemm: GemmShape | None = None,
) -> float:
    """Seconds of one pass of `op`: the roofline max of its math time and its HBM time. `gemm`
    is the pass's matmul (its output decides the wave quantization), `op.shape` when None."""
    if work.flops <= 0 and work.bytes <= 0:
        return 0.0
    if op.engine == "attention":
        rate = device.matrix_flops * (eff.flash_backward if backward else eff.flash_forward)
    elif op.engine == "cudnn":
        rate = device.matrix_flops * cudnn_fraction(eff, backward, op.shape)
    elif op.engine in FP8_ATTENTION:
        speedup = by_seq(fp8_speedups(op.engine, eff, op.shape), backward, op.shape, 1.0)
        rate = device.matrix_flops * cudnn_fraction(eff, backward, op.shape) * speedup
    elif op.engine == "sdpa":
        rate = device.matrix_flops * (eff.sdpa_backward if backward else eff.sdpa_forward)
    elif op.engine == "matrix":
        rate = device.matrix_flops * gemm_efficiency(eff, device, gemm or op.shape)
    else:
        rate = eff.vector_tflops * 1e12 * eff.vector_efficiency
    math = work.flops / rate if work.flops > 0 else 0.0
    hbm = eff.te_cast_hbm if op.engine == "te-cast" else eff.hbm
    memory = work.bytes / (device.hbm_bytes * hbm.at(work.bytes)) if work.bytes > 0 else 0.0
    return max(math, memory)


def cudnn_fraction(eff: Efficiency, backward: bool, scores: GemmShape | None) -> float:
    """The fraction of the matrix peak cuDNN's fused attention reaches on `scores`, the
    attention's score matrix per head ([s/c queries × s keys], `ops.flash_attention`):
    `Efficiency.cudnn_by_seq` interpolated linearly in log₂ s at the equivalent square causal
    problem, s = √(queries · keys) (the same executed score tiles per head), clamped to the
    table's ends (`Efficiency.cudnn_d64_by_seq`, measured at head dimension 64, for a
    query/key width below 96; `cudnn_d64_w128_by_seq`, measured at 64 under a 128-token window,
    for a window of at most `W128_UP_TO` keys); the constant cudnn_forward/backward where the
    tables measure no lengths."""
    constant = eff.cudnn_backward if backward else eff.cudnn_forward
    if scores is not None and scores.k < D64_BELOW and eff.cudnn_d64_by_seq:
        if eff.cudnn_d64_w128_by_seq and short_window(scores):
            return by_seq(eff.cudnn_d64_w128_by_seq, backward, scores, constant)
        return by_seq(eff.cudnn_d64_by_seq, backward, scores, constant)
    return by_seq(eff.cudnn_by_seq, backward, scores, constant)


# The FP8 attention kernels (`planc.perf.ops.fp8_attention`): per-tensor scaling, MXFP8.
FP8_ATTENTION = ("cudnn-fp8", "cudnn-mxfp8")


# The query/key head dimensions the attention tables are measured at (efficiency.json:
# GPT-OSS's 64, `planc.perf.ops.D64_BELOW`; Llama 3.1's 128; DeepSeek-V3's latent 192); an op
# takes the nearest.
D192_FROM = (128 + 192) // 2


def fp8_speedups(
    engine: str, eff: Efficiency, scores: GemmShape | None
) -> tuple[tuple[int, float, float], ...]:
    """The FP8 attention kernel `engine`'s speed-ups over cuDNN's 16-bit kernel by sequence
    length (efficiency.json flash_attention.cudnn_fp8_by_seq, cudnn_mxfp8_by_seq), from the
    table measured at the head dimension nearest the op's (`scores.k`, the query/key width:
    the *_d192_by_seq tables above 160, where the entry has them; the 128 tables below, where
    the 16-bit rate they multiply is the head-dimension-64 kernel's)."""
    mx = engine == "cudnn-mxfp8"
    if scores is not None and scores.k > D192_FROM:
        wide = eff.cudnn_mxfp8_d192_by_seq if mx else eff.cudnn_fp8_d192_by_seq
        if wide:
            return wide
    return eff.cudnn_mxfp8_by_seq if mx else eff.cudnn_fp8_by_seq


# The longest window the 128-token window's rates price: the geometric mean of the two windows
# cuDNN's head-dimension-64 rows are measured at, √(128 · 1,024).
W128_UP_TO = 362


def short_window(scores: GemmShape) -> bool:
    """A sliding window of at most `W128_UP_TO` keys: fewer keys per query than queries (a
    full causal op's scores have as many keys as queries, or more under context parallelism)."""
    return scores.n < scores.m and scores.n <= W128_UP_TO


def by_seq(
    table: Sequence[tuple[int, float, float]],
    backward: bool,
    scores: GemmShape | None,
    constant: float,
) -> float:
    """A by-sequence-length attention table's forward or backward value for the score matrix
    `scores`, interpolated as `cudnn_fraction` says; `constant` where the table is empty or
    the op has no shape."""
    if not table or scores is None:
        return constant
    column = 2 if backward else 1
    at = math.log2(max(1.0, math.sqrt(scores.m * scores.n)))
    points = [(math.log2(row[0]), row[column]) for row in table]
    if at <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in pairwise(points):
        if at <= x1:
            return y0 + (y1 - y0) * (at - x0) / (x1 - x0)
    return points[-1][1]


def gemm_efficiency(eff: Efficiency, device: Device, gemm: GemmShape | None) -> float:
    """The achieved fraction of the matrix peak of matmul `gemm` (the e_max and shape term
    without a shape)."""
    curve = eff.gemm_for(device.gemm)
    if gemm is None:
        return curve.efficiency(0)
    return curve.efficiency(gemm.smallest, gemm.m, gemm.n, gemm.batch)


@record
class PassTimes:
    """Seconds of a group of ops per micro-batch: forward, data and weight gradients."""

    forward_s: float
    backward_data_s: float
    backward_weight_s: float
    core_forward_s: float  # the attention core's forward: what selective recompute repeats
    # what torchtitan's per-op policy repeats (selective-op, planc.perf.sac)
    sac_forward_s: float = 0.0
    # forward seconds by the recompute modules that re-run them (`OpCost.modules`, core_attn
    # for the attention core), one entry per set of modules
    module_forward_s: tuple[tuple[frozenset[str], float], ...] = ()
    # what full recompute leaves out under torch's non-reentrant checkpoint: the forward of
    # the ops no backward reads (`planc.perf.sac.unread_tail`)
    unread_forward_s: float = 0.0

    def redone_s(self, modules: Sequence[str]) -> float:
        """Forward seconds selective recompute of `modules` runs again: each op once, when
        any module that re-runs it is recomputed."""
        return sum(s for tags, s in self.module_forward_s if not tags.isdisjoint(modules))

    @property
    def backward_s(self) -> float:
        return self.backward_data_s + self.backward_weight_s


@record
class OpTime:
    """One op's seconds per micro-batch on one rank: forward, data and weight gradients."""

    op: OpCost
    forward_s: float
    backward_data_s: float
    backward_weight_s: float


def op_times(
    ops: Sequence[OpCost], device: Device, eff: Efficiency, quantized: Device | None = None
) -> tuple[OpTime, ...]:
    """Each op's pass times: a quantized GEMM (an FP8/FP4 recipe's) runs on the `quantized`
    device's peak, its weight gradient too unless the recipe keeps that 16-bit."""
    out = []
    for op in ops:
        low = quantized if quantized is not None and op.quantized else device
        wgrad = device if op.high_precision_wgrad else low
        # a measured speed-up over the op's 16-bit kernels divides each pass (`measured_linear`);
        # an op run less than once per micro-batch (`OpCost.calls`) pays that share of each
        scale = op.calls / op.speedup
        out.append(
            OpTime(
                op,
                work_time_s(op, op.forward, low, eff) * scale,
                work_time_s(op, op.backward_data, low, eff, True, op.data_gemm) * scale,
                work_time_s(op, op.backward_weight, wgrad, eff, True, op.weight_gemm) * scale,
            )
        )
    return tuple(out)


def pass_times(
    ops: Sequence[OpCost],
    device: Device,
    eff: Efficiency,
    quantized: Device | None = None,
    sac: Sequence[float] = (),
    unread: Sequence[float] = (),
) -> PassTimes:
    """Sum of the ops' pass times (`op_times`; kernels on one rank run one after another).
    `sac`: the share of each op's forward torchtitan's per-op checkpointing recomputes
    (`planc.perf.sac.recomputed_shares`; none: 0); `unread`: 1 for each op full recompute
    leaves out under torch's non-reentrant checkpoint (`planc.perf.sac.unread_tail`; none: 0)."""
    fwd = bwd_d = bwd_w = core = redo = skipped = 0.0
    by_modules: dict[frozenset[str], float] = {}
    for i, timed in enumerate(op_times(ops, device, eff, quantized)):
        op, f = timed.op, timed.forward_s
        fwd += f
        bwd_d += timed.backward_data_s
        bwd_w += timed.backward_weight_s
        core += f if op.attention_core else 0.0
        redo += f * sac[i] if sac else 0.0
        skipped += f * unread[i] if unread else 0.0
        tags = (op.modules | CORE) if op.attention_core else op.modules
        if tags:
            by_modules[tags] = by_modules.get(tags, 0.0) + f
    return PassTimes(fwd, bwd_d, bwd_w, core, redo, tuple(by_modules.items()), skipped)


CORE = frozenset({"core_attn"})


@record
class QuantizedCompute:
    """What an FP8/FP4 recipe changes in a stage's compute: the pass times of one dense and one
    MoE layer with the recipe's GEMMs quantized (`quantized_passes`, computed once per job),
    and per model chunk the (dense, MoE) layers kept in BF16 (Megatron
    --first-last-layers-bf16), which run as in 16 bits."""

    layer: PassTimes
    moe: PassTimes | None  # None: a dense model
    bf16_layers: tuple[tuple[int, int], ...] = ()  # per chunk: (dense, MoE) layers in BF16
    # A multi-token prediction module's projection (eh_proj quantized) where its layer and
    # projection run in the recipe, None where they stay BF16: Megatron-Core wraps them in the
    # FP8 context whatever the first/last BF16 layers, and leaves them out of FP4
    # (MultiTokenPredictionLayer._proj_and_transformer_layer, d98e8a64).
    mtp_projection: PassTimes | None = None
    # The last stage's final norm, LM head and loss, and a multi-token prediction module's
    # embedding, norm, head and loss, with the head quantized (Megatron-Core fp8_output_proj:
    # both passes through the shared output layer), None where the head stays 16-bit.
    head: PassTimes | None = None
    mtp_head: PassTimes | None = None
    # a dense and a MoE layer through the sliding window (`OpShape.window`), the recipe's
    # GEMMs quantized; None without a window
    window_layer: PassTimes | None = None
    window_moe: PassTimes | None = None


@record
class ChunkTimes:
    """Compute seconds of one model chunk per micro-batch on one rank."""

    forward_s: float
    backward_s: float  # data + weight gradients + recompute
    recompute_s: float  # included in backward_s
    layers: int


@record
class StageTimes:
    """Compute seconds of one rank of a pipeline stage per micro-batch, all its chunks."""

    forward_s: float
    backward_s: float  # data + weight gradients + recompute
    recompute_s: float  # included in backward_s


def recompute_time_s(
    layer: PassTimes, recompute: str, modules: Sequence[str] = DEFAULT_RECOMPUTE_MODULES
) -> float:
    """Recomputed forward per layer: all of it (full), the ops of its recomputed `modules`
    (selective; Megatron's default the attention core), all but the saved matmuls and SDPA
    (selective-op), nothing.

    Korthikanti et al. 2022 §5: full recompute repeats the layer's forward in backward (but
    for what no backward reads, under torch's non-reentrant checkpoint: `unread_forward_s`);
    selective repeats only the attention core (QKᵀ, softmax, dropout, attention over V), and
    Megatron-Core's --recompute-modules the forward of each module listed (`OpCost.modules`);
    torchtitan's per-op policy repeats what `planc.perf.sac` lists.
    """
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {RECOMPUTE}, got {recompute!r}")
    if recompute == "selective":
        return layer.redone_s(modules)
    full = layer.forward_s - layer.unread_forward_s
    return {"none": 0.0, "selective-op": layer.sac_forward_s, "full": full}[recompute]


def layer_passes(
    ops: Sequence[OpCost],
    shape: OpShape,
    device: Device,
    eff: Efficiency,
    quantized: Device | None = None,
) -> PassTimes:
    """`pass_times` of one transformer block's ops, with what torchtitan's per-op
    checkpointing would recompute of them and what full checkpointing would not."""
    return pass_times(
        ops, device, eff, quantized, recomputed_shares(ops, shape), unread_tail(ops, shape)
    )


def end_shape(shape: OpShape) -> OpShape:
    """The shape the model's ends (embedding, final norm, LM head, loss) run at: torchtitan
    compiles the blocks only, so under compiled kernels the ends run eager."""
    return replace(shape, unfused=True, compiled=False) if shape.compiled else shape


def chunk_times(
    shape: OpShape,
    chunk_layers: Sequence[int],
    first_stage: bool,
    last_stage: bool,
    recompute: str,
    device: Device,
    eff: Efficiency,
    moe_layers: Sequence[int] = (),
    experts: ExpertDims | None = None,
    low: QuantizedCompute | None = None,
    modules: Sequence[str] = DEFAULT_RECOMPUTE_MODULES,
    mtp: tuple[int, int] = (0, 0),
    window_layers: Sequence[tuple[int, int]] = (),
    window: int = 0,
) -> tuple[ChunkTimes, ...]:
    """Forward and backward (+ recompute) seconds per micro-batch of each chunk of one stage.

    `chunk_layers[j]` is the layer count of the stage's chunk j (one entry without
    interleaving), `moe_layers[j]` how many of them have `experts` (priced with
    `moe_layer_ops`; none when empty). The first stage's chunk 0 also runs the embedding; the
    last stage's last chunk also runs the final norm, the LM head and the fp32 loss. With an
    FP8/FP4 recipe (`low`) a chunk's layers run their linear GEMMs quantized, but for those
    it keeps in BF16. The last stage's last chunk then runs its `mtp` = (D, with experts)
    multi-token prediction modules (`mtp_passes`). `window_layers[j]` = (dense, MoE) layers of
    chunk j that attend through the sliding window of `window` tokens: each runs a windowed
    layer's passes in place of a full one's (`window_deltas`).
    """
    layer = layer_passes(layer_ops(shape), shape, device, eff)
    redo = recompute_time_s(layer, recompute, modules)
    moe = layer_passes(moe_layer_ops(shape, experts), shape, device, eff) if experts else layer
    moe_redo = recompute_time_s(moe, recompute, modules)
    fp8_layer, fp8_moe = layer, moe
    if low is not None:
        fp8_layer = low.layer
        fp8_moe = low.moe if low.moe is not None else low.layer
    ends = end_shape(shape)
    head = pass_times(last_stage_ops(ends), device, eff)
    if low is not None and low.head is not None:
        head = low.head
    embed = pass_times(first_stage_ops(ends), device, eff)
    deltas = window_deltas(shape, window, (layer, moe), device, eff, recompute, modules, experts, low)
    out = []
    for j, layers in enumerate(chunk_layers):
        routed = moe_layers[j] if moe_layers else 0
        dense = layers - routed
        forward = dense * layer.forward_s + routed * moe.forward_s
        backward = dense * (layer.backward_s + redo) + routed * (moe.backward_s + moe_redo)
        if low is not None:
            kept, kept_moe = low.bf16_layers[j] if low.bf16_layers else (0, 0)
            q_dense, q_moe = dense - kept, routed - kept_moe
            forward += q_dense * (fp8_layer.forward_s - layer.forward_s)
            forward += q_moe * (fp8_moe.forward_s - moe.forward_s)
            backward += q_dense * (fp8_layer.backward_s + recompute_time_s(fp8_layer, recompute, modules) - layer.backward_s - redo)
            backward += q_moe * (fp8_moe.backward_s + recompute_time_s(fp8_moe, recompute, modules) - moe.backward_s - moe_redo)
        if first_stage and j == 0:
            forward += embed.forward_s
            backward += embed.backward_s
        redone = dense * redo + routed * moe_redo
        if window_layers and deltas is not None:
            for count, delta in zip(window_layers[j], deltas, strict=True):
                forward += count * delta.forward_s
                backward += count * delta.backward_s
                redone += count * delta.recompute_s
        if last_stage and j == len(chunk_layers) - 1:
            forward += head.forward_s
            backward += head.backward_s
            if mtp[0]:
                module = mtp_passes(shape, mtp, (layer, moe), device, eff, recompute, modules, low)
                forward += module.forward_s
                backward += module.backward_s
                redone += module.recompute_s
        out.append(ChunkTimes(forward, backward, redone, layers))
    return tuple(out)


def window_deltas(
    shape: OpShape,
    window: int,
    layers: tuple[PassTimes, PassTimes],
    device: Device,
    eff: Efficiency,
    recompute: str,
    modules: Sequence[str],
    experts: ExpertDims | None,
    low: QuantizedCompute | None,
) -> tuple[StageTimes, StageTimes] | None:
    """What a dense and a MoE layer's passes change when the layer attends through the sliding
    window of `window` tokens (`OpShape.window`; None without one): the windowed layer's forward, backward
    with recompute, and recompute seconds less the full layer's (`layers`, 16-bit), or, under a
    recipe (`low`), less the recipe's layers, from its windowed passes
    (`QuantizedCompute.window_layer`; a windowed layer that --first-last-layers-bf16 keeps in
    BF16 takes the recipe's difference too)."""
    if not window:
        return None
    windowed = replace(shape, window=window)
    full_dense, full_moe = layers
    win_dense = layer_passes(layer_ops(windowed), windowed, device, eff)
    win_moe = (
        layer_passes(moe_layer_ops(windowed, experts), windowed, device, eff) if experts else win_dense
    )
    if low is not None and low.window_layer is not None:
        full_dense, win_dense = low.layer, low.window_layer
        full_moe = low.moe if low.moe is not None else low.layer
        win_moe = low.window_moe if low.window_moe is not None else low.window_layer

    def delta(win: PassTimes, full: PassTimes) -> StageTimes:
        redo = recompute_time_s(win, recompute, modules) - recompute_time_s(full, recompute, modules)
        return StageTimes(
            win.forward_s - full.forward_s, win.backward_s - full.backward_s + redo, redo
        )

    return delta(win_dense, full_dense), delta(win_moe, full_moe)


def mtp_passes(
    shape: OpShape,
    mtp: tuple[int, int],
    layers: tuple[PassTimes, PassTimes],
    device: Device,
    eff: Efficiency,
    recompute: str,
    modules: Sequence[str],
    low: QuantizedCompute | None,
) -> StageTimes:
    """Seconds per micro-batch of the `mtp` = (D, with experts) multi-token prediction modules
    (`planc.perf.ops.mtp_projection_ops`, `mtp_head_ops`): each its projection, a layer as the
    model's last (`layers` = the 16-bit dense and MoE layer's passes, the recipe's where `low`
    runs the module quantized), its embedding, final norm, head and loss. Recompute repeats
    the layer as any layer's, and under full recompute the projection too (Megatron's MTP
    checkpoint wraps both)."""
    count, routed = mtp
    dense, moe = layers
    projection = pass_times(mtp_projection_ops(shape), device, eff)
    if low is not None and low.mtp_projection is not None:
        dense, moe = low.layer, low.moe if low.moe is not None else low.layer
        projection = low.mtp_projection
    head = pass_times(mtp_head_ops(shape), device, eff)
    if low is not None and low.mtp_head is not None:
        head = low.mtp_head
    redo_dense = recompute_time_s(dense, recompute, modules)
    redo_moe = recompute_time_s(moe, recompute, modules)
    redo_projection = projection.forward_s if recompute == "full" else 0.0
    redone = (count - routed) * redo_dense + routed * redo_moe + count * redo_projection
    forward = (count - routed) * dense.forward_s + routed * moe.forward_s
    forward += count * (projection.forward_s + head.forward_s)
    backward = (count - routed) * dense.backward_s + routed * moe.backward_s
    backward += count * (projection.backward_s + head.backward_s) + redone
    return StageTimes(forward, backward, redone)


def quantized_passes(
    shape: OpShape,
    experts: ExpertDims | None,
    device: Device,
    eff: Efficiency,
    low_device: Device,
    q: Quantized,
    weight_share: float,
    window: int = 0,
) -> QuantizedCompute:
    """The pass times of one dense and one MoE layer with the recipe's GEMMs quantized on
    `low_device` (the FP8/FP4 peak, and its data type's GEMM curve: the measured one of
    `gemm_by_dtype`, else the 16-bit fractions of that peak) and its quantization kernels, the
    weight cast `weight_share` of a micro-batch's (1/m where Transformer Engine caches FP8
    weights, 1 for torchao). A small quantized GEMM gains little: its HBM time and the fixed
    time per kernel do not speed up with the math (torchao float8 README, H100: FP8 pays only
    on large shapes). With a sliding `window`, also a dense and a MoE layer through it."""
    low_eff = eff

    def passes(ops: tuple[OpCost, ...], at: OpShape = shape) -> PassTimes:
        """`ops` of a layer of shape `at`, quantized."""
        quantized = with_quantized_gemms(ops, q, at.beta, weight_share, at)
        return layer_passes(quantized, at, device, low_eff, low_device)

    moe = passes(moe_layer_ops(shape, experts)) if experts else None
    # Megatron-Core runs the MTP modules under the FP8 context only (FP4 stays out of them).
    projection = None
    if q.gemm is DType.FP8:
        ops = with_quantized_gemms(mtp_projection_ops(shape), q, shape.beta, weight_share, shape)
        projection = pass_times(ops, device, low_eff, low_device)
    head = mtp_head = None
    if q.output_proj:
        head = head_passes(last_stage_ops(shape), q, shape, weight_share, device, low_eff, low_device)
        mtp_head = head_passes(mtp_head_ops(shape), q, shape, weight_share, device, low_eff, low_device)
    windowed = replace(shape, window=window)
    window_layer = passes(layer_ops(windowed), windowed) if window else None
    window_moe = passes(moe_layer_ops(windowed, experts), windowed) if window and experts else None
    return QuantizedCompute(
        passes(layer_ops(shape)),
        moe,
        mtp_projection=projection,
        head=head,
        mtp_head=mtp_head,
        window_layer=window_layer,
        window_moe=window_moe,
    )


def head_passes(
    ops: tuple[OpCost, ...],
    q: Quantized,
    shape: OpShape,
    weight_share: float,
    device: Device,
    eff: Efficiency,
    low_device: Device,
) -> PassTimes:
    """The pass times of the ops around the LM head with the head quantized
    (`Quantized.output_proj`): its input cast after the final norm, its weight cast
    `weight_share` of a micro-batch's (Transformer Engine caches it across micro-batches as any
    TE linear's), its output gradient cast in backward, the GEMMs at the recipe's rate; the norm,
    the embedding and the loss as in 16 bits."""
    quantized = with_quantized_gemms(ops, q, shape.beta, weight_share, shape)
    return pass_times(quantized, device, eff, low_device)


def optimizer_time_s(
    parameters: float, device: Device, eff: Efficiency, bytes_per_parameter: int
) -> float:
    """Seconds of the optimizer step over `parameters` parameters of `bytes_per_parameter`
    each (`planc.perf.ops.optimizer_bytes_per_parameter`; memory bound)."""
    work = optimizer_step(parameters, bytes_per_parameter)
    return work_time_s(OpCost("adam", "vector", work, Work(0, 0)), work, device, eff)
