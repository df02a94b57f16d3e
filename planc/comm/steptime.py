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

from planc.comm.schedule import CommOp, op_time_s, stage_layers
from planc.job import Job
from planc.rules.batch import bubble_fraction

DEFAULT_EFFICIENCY = 0.5


def layer_matmul_flops(job: Job, tokens: int) -> int:
    """Forward FLOPs of one layer's weight matmuls for `tokens` tokens: 2·tokens·(2hk(n+g) + γ·h·f)."""
    mod = job.model
    attention = 2 * mod.h * mod.k * (mod.n + mod.g)
    mlp = (3 if mod.mlp == "swiglu" else 2) * mod.h * mod.f
    return 2 * tokens * (attention + mlp)


def attention_core_flops(job: Job, sequences: int) -> int:
    """Forward FLOPs of QKᵀ and attention-over-V for `sequences` sequences: 2·2·s²·n·k each."""
    mod, s = job.model, job.training.s
    return 4 * sequences * s * s * mod.n * mod.k


def head_flops(job: Job, tokens: int) -> int:
    """Forward FLOPs of the LM head: 2·tokens·h·V."""
    return 2 * tokens * job.model.h * job.model.V


def model_flops_per_step(job: Job) -> int:
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


def stage_times(job: Job, efficiency: float) -> tuple[StageTimes, ...]:
    """Forward and backward (+recompute) time per micro-batch per stage, FLOPs split over t·c."""
    lay, tr = job.layout, job.training
    tokens = tr.b * tr.s
    rate = job.cluster.gpu.bf16_tflops * 1e12 * efficiency * lay.t * lay.c
    out = []
    for stage, layers in enumerate(stage_layers(job)):
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
    bubble_s: float
    exposed_comm_s: float  # DP/ZeRO tail and p2p latency not hidden behind compute
    tp_comm_s: float
    tokens_per_s: float
    mfu: float
    efficiency: float
    model_flops: int


def _per_stage(ops: Sequence[CommOp], job: Job, group: str) -> list[float]:
    totals = [0.0] * job.layout.p
    for op in ops:
        if op.group == group:
            totals[op.stage] += op_time_s(job, op)
    return totals


def _dp_exposed(job: Job, ops: Sequence[CommOp]) -> float:
    """The DP reduction overlaps backward except its last bucket; the ZeRO all-gather after the
    optimizer step is exposed (Megatron without --overlap-param-gather)."""
    worst = 0.0
    for stage in range(job.layout.p):
        exposed = 0.0
        for op in ops:
            if op.group not in ("dp_cp", "embedding") or op.stage != stage:
                continue
            whole = op_time_s(job, op)
            last_bucket = whole / op.calls if op.calls else 0.0
            after_step = op.op == "all_gather" and job.layout.zero <= 2
            exposed += whole if after_step or op.group == "embedding" else last_bucket
        worst = max(worst, exposed)
    return worst


def estimate(
    job: Job,
    ops: Sequence[CommOp],
    efficiency: float = DEFAULT_EFFICIENCY,
    overlap_tp: bool = False,
) -> StepEstimate:
    """Step time = pipeline time (compute + exposed TP per micro-batch, bubble) + exposed DP tail."""
    lay, m = job.layout, job.m or 1
    times = stage_times(job, efficiency)
    tp = _per_stage(ops, job, "tp")
    p2p = _per_stage(ops, job, "pp")
    per_mb = [
        t.forward_s + t.backward_s + (0.0 if overlap_tp else tp[r] / m) for r, t in enumerate(times)
    ]
    slowest = max(per_mb)
    compute = m * slowest
    bubble_frac = bubble_fraction(lay.p, m, lay.v)
    bubble = compute * bubble_frac / (1 - bubble_frac) if lay.p > 1 else 0.0
    # p2p transfers on the critical path: one per boundary during warm-up and cool-down.
    p2p_exposed = 2 * (lay.p - 1) * (max(p2p) / max(2 * m * lay.v, 1)) if lay.p > 1 else 0.0
    exposed = _dp_exposed(job, ops) + p2p_exposed
    step = compute + bubble + exposed
    flops = model_flops_per_step(job)
    peak = job.cluster.gpu.bf16_tflops * 1e12 * job.world
    return StepEstimate(
        step_time_s=step,
        compute_s=compute,
        bubble_s=bubble,
        exposed_comm_s=exposed,
        tp_comm_s=0.0 if overlap_tp or not tp else max(tp),
        tokens_per_s=job.training.B * job.training.s / step,
        mfu=flops / (step * peak),
        efficiency=efficiency,
        model_flops=flops,
    )


# Above this many compute ops the exact event simulation takes seconds; explain then keeps the
# closed-form bubble.
MAX_SIMULATED_OPS = 100_000


@dataclass(frozen=True)
class SimulatedPipeline:
    """The step's pipeline part from the discrete-event simulation with real per-stage times."""

    makespan_s: float
    bubble_fraction: float
    ops: int


def simulate_pipeline(
    job: Job,
    ops: Sequence[CommOp],
    efficiency: float = DEFAULT_EFFICIENCY,
    overlap_tp: bool = False,
) -> SimulatedPipeline | None:
    """Run the 1F1B (or interleaved) schedule with each stage's own t_f, t_b and the p2p time.

    Stages differ: the first holds the embedding, the last the LM head and loss, uneven
    `stage_layers` differ by layers; the closed form (p − 1)/(v·m + p − 1) assumes equal stages.
    Exposed TP time per micro-batch is split evenly between forward and backward (two of the
    four per-layer collectives are in each). None when p = 1 or the schedule is too large.
    """
    from planc.pipeline import build_schedule, simulate

    lay, m = job.layout, job.m
    if lay.p == 1 or m is None or 2 * lay.p * m * lay.v > MAX_SIMULATED_OPS:
        return None
    times = stage_times(job, efficiency)
    tp = _per_stage(ops, job, "tp")
    exposed = [0.0 if overlap_tp else tp[r] / m / 2 for r in range(lay.p)]
    t_f = [(t.forward_s + exposed[r]) / lay.v for r, t in enumerate(times)]
    t_b = [(t.backward_s + exposed[r]) / lay.v for r, t in enumerate(times)]
    sends = [op for op in ops if op.group == "pp" and op.calls]
    hop = max((op_time_s(job, op) / op.calls for op in sends), default=0.0)
    timeline = simulate(build_schedule(lay.p, m, lay.v), t_f, t_b, hop)
    return SimulatedPipeline(
        float(timeline.makespan), float(timeline.bubble_fraction), 2 * lay.p * m * lay.v
    )
