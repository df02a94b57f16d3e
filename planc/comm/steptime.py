"""Step-time estimate: compute from FLOPs, exposed communication, and the pipeline bubble.

FLOPs follow Narayanan et al. 2021 (Megatron-LM at scale, §5.1 and Appendix): a matrix multiply of
an (m×k) by a (k×n) matrix costs 2·m·k·n; the backward pass costs twice the forward; attention
scores and the weighted sum cost 2·2·s²·n·k per sequence per layer (no causal discount, as in
the papers we compare against: 72·B·s·L·h²·(1 + s/(6h) + V/(12hL)) for a GPT without recompute).
Recompute adds the recomputed forward: the whole layer forward for full recompute, the attention
core for selective recompute (Korthikanti et al. 2022, §5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planc.comm.schedule import CommOp, op_time_s
from planc.pipeline.bubble import bubble_fraction
from planc.plannable import Plannable
from planc.vocab import Collective, GroupKind

if TYPE_CHECKING:
    from planc.pipeline.bounded import PipelineTime

DEFAULT_EFFICIENCY = 0.5


def layer_matmul_flops(job: Plannable, tokens: int) -> int:
    """Forward FLOPs of one layer's weight matmuls for `tokens` tokens: 2·tokens·(2hk(n+g) + γ·h·f)."""
    mod = job.model
    attention = 2 * mod.h * mod.k * (mod.n + mod.g)
    mlp = (3 if mod.mlp == "swiglu" else 2) * mod.h * mod.f
    return 2 * tokens * (attention + mlp)


def attention_core_flops(job: Plannable, sequences: int) -> int:
    """Forward FLOPs of QKᵀ and attention-over-V for `sequences` sequences: 2·2·s²·n·k each."""
    mod, s = job.model, job.training.s
    return 4 * sequences * s * s * mod.n * mod.k


def head_flops(job: Plannable, tokens: int) -> int:
    """Forward FLOPs of the LM head: 2·tokens·h·V."""
    return 2 * tokens * job.model.h * job.model.V


def model_flops_per_step(job: Plannable) -> int:
    """Model FLOPs of one optimizer step (forward + backward, no recompute): 3 × forward."""
    tokens = job.training.B * job.training.s
    layers = job.model.L * (
        layer_matmul_flops(job, tokens) + attention_core_flops(job, job.training.B)
    )
    return 3 * (layers + head_flops(job, tokens))


@dataclass(frozen=True)
class StageTimes:
    """Per micro-batch compute times of one rank of a stage, in seconds (all its chunks)."""

    forward_s: float
    backward_s: float


def stage_times(job: Plannable, efficiency: float) -> tuple[StageTimes, ...]:
    """Forward and backward (+recompute) time per micro-batch per stage, FLOPs split over t·c."""
    lay, tr = job.layout, job.training
    tokens = tr.b * tr.s
    rate = job.cluster.gpu.bf16_tflops * 1e12 * efficiency * lay.t * lay.c
    out = []
    for stage, layers in enumerate(job.layout.stage_layers):
        matmul = layers * layer_matmul_flops(job, tokens)
        core = layers * attention_core_flops(job, tr.b)
        head = head_flops(job, tokens) if stage == lay.p - 1 else 0
        forward = matmul + core + head
        recompute = {"none": 0, "selective": core, "full": matmul + core}[tr.recompute]
        out.append(StageTimes(forward / rate, (2 * forward + recompute) / rate))
    return tuple(out)


@dataclass(frozen=True)
class StepEstimate:
    step_time_s: float
    compute_s: float  # the slowest stage's m·(t_f + t_b), including exposed TP communication
    bubble_s: float  # the pipeline's makespan beyond the slowest stage's compute
    exposed_comm_s: float  # DP/ZeRO tail and the embedding all-reduce after the pipeline drains
    tp_comm_s: float
    tokens_per_s: float
    mfu: float
    efficiency: float
    model_flops: int
    pipeline: PipelineTime  # the pipeline run with each stage's own times (p2p included)
    bubble_fraction: float  # closed form (p − 1)/(v·m + p − 1), for comparison


def _per_stage(ops: Sequence[CommOp], job: Plannable, group: GroupKind) -> list[float]:
    totals = [0.0] * job.layout.p
    for op in ops:
        if op.group is group:
            totals[op.stage] += op_time_s(job, op)
    return totals


def _dp_exposed(job: Plannable, ops: Sequence[CommOp]) -> float:
    """The DP reduction overlaps backward except its last bucket; the ZeRO all-gather after the
    optimizer step is exposed (Megatron without --overlap-param-gather), and so is the tied
    embedding's all-reduce."""
    exposed = [0.0] * job.layout.p
    for op in ops:
        if op.group not in (
            GroupKind.DP_CP,
            GroupKind.DP_SHARD,
            GroupKind.DP_REPLICATE,
            GroupKind.EMBEDDING,
        ):
            continue
        whole = op_time_s(job, op)
        after_step = op.op is Collective.ALL_GATHER and job.layout.zero <= 2
        whole_exposed = after_step or op.group is GroupKind.EMBEDDING
        exposed[op.stage] += whole if whole_exposed else (whole / op.calls if op.calls else 0.0)
    return max(exposed, default=0.0)


def offload_transfer_s(job: Plannable) -> float:
    """Host↔device copies of one step under `training.offload`, all exposed, on the busiest
    stage: max(bytes to the host, bytes to the device) / hardware host bandwidth per GPU.

    Optimizer offload: each rank copies its gradient shard down (γ·Ψ_r/N) and its updated
    weights shard back (w·Ψ_r/N) once per step (DeepSpeed ZeRO-Offload, Megatron-Core's
    optimizer CPU offload). Parameter offload (DeepSpeed ZeRO-3 offload_param, FSDP2
    CPUOffloadPolicy) copies the weights shard up before each forward and each backward of every
    micro-batch (2·m·w·Ψ_r/N) and the gradient shard down per micro-batch (m·γ·Ψ_r/N). The CPU
    optimizer step itself is not timed.
    """
    from planc.memory.params import rank_parameters  # planc.memory stays off the check path

    tr, lay, m = job.training, job.layout, job.m
    if not (tr.offload_optimizer or tr.offload_parameters):
        return 0.0
    params_moved = tr.offload_parameters and (
        tr.framework == "fsdp2" or (tr.framework == "deepspeed" and lay.zero == 3)
    )
    w = 4 if tr.precision == "fp32" else 2
    g = 4 if tr.precision == "fp32" or tr.grad_accum_fp32 else 2
    psi = max(rank_parameters(job, r).total for r in range(lay.p))
    shard = -(-psi // lay.shard_group)
    down = g * shard * (m if params_moved else 1)
    up = w * shard * (2 * m if params_moved else 1)
    return max(up, down) / (job.cluster.host_bandwidth_gbs * 1e9)


def estimate(
    job: Plannable,
    ops: Sequence[CommOp],
    efficiency: float = DEFAULT_EFFICIENCY,
    overlap_tp: bool = False,
) -> StepEstimate:
    """Step time = the pipeline's makespan with each stage's own compute, exposed TP and p2p
    times (`planc.pipeline.bounded`) + the exposed DP tail.

    Exposed TP time per micro-batch is split evenly between forward and backward (two of the
    four per-layer collectives are in each); chunks of a stage share its time evenly.
    """
    from planc.pipeline.bounded import makespan  # start-up: exact simulation, not needed by check

    lay, m = job.layout, job.m
    times = stage_times(job, efficiency)
    tp = [0.0 if overlap_tp else t / m for t in _per_stage(ops, job, GroupKind.TP)]
    sends = [op for op in ops if op.group is GroupKind.PP and op.calls]
    hop = max((op_time_s(job, op) / op.calls for op in sends), default=0.0)
    t_f = [(t.forward_s + tp[r] / 2) / lay.v for r, t in enumerate(times)]
    t_b = [(t.backward_s + tp[r] / 2) / lay.v for r, t in enumerate(times)]
    pipe = makespan(lay.p, m, lay.v, t_f, t_b, hop)
    compute = m * max(t.forward_s + t.backward_s + tp[r] for r, t in enumerate(times))
    exposed = _dp_exposed(job, ops) + offload_transfer_s(job)
    step = pipe.makespan_s + exposed
    flops = model_flops_per_step(job)
    peak = job.cluster.gpu.bf16_tflops * 1e12 * job.world
    return StepEstimate(
        step_time_s=step,
        compute_s=compute,
        bubble_s=max(pipe.makespan_s - compute, 0.0),
        exposed_comm_s=exposed,
        tp_comm_s=0.0 if overlap_tp else max(tp) * m,
        tokens_per_s=job.training.B * job.training.s / step,
        mfu=flops / (step * peak),
        efficiency=efficiency,
        model_flops=flops,
        pipeline=pipe,
        bubble_fraction=bubble_fraction(lay.p, m, lay.v),
    )
