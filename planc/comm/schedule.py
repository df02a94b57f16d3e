"""The communication schedule of one optimizer step: every collective and p2p op, per pipeline stage.

Sizes in the papers' symbols: s sequence, b micro-batch, h hidden, t/p/d/c degrees, m
micro-batches per step, L_r layers on the rank, Ψ_r parameters on the rank, β_a bytes per
activation element (2 for bf16/fp16, 4 for fp32).

Sources: Megatron-LM tensor parallelism (Shoeybi et al. 2019, §3: two all-reduces in forward and
two in backward per layer); sequence parallelism (Korthikanti et al. 2022, §4.2.2: each
all-reduce becomes an all-gather plus a reduce-scatter); pipeline p2p of [s/c (/t with SP), b, h]
(Narayanan et al. 2021; Megatron `schedules.py`); ZeRO traffic (Rajbhandari et al. 2020, §7:
2Ψ for stages 0–2, 3Ψ for stage 3); ring attention K/V exchange for context parallelism (Liu et
al. 2023, Ring Attention).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planc.comm.cost import call_time_s, ring_steps, wire_bytes
from planc.job import Job, Link

# Megatron DDP's default gradient bucket: max(40,000,000, 1,000,000 · dp) elements
# (megatron/core/distributed/distributed_data_parallel.py, bucket_size).
BUCKET_ELEMENTS = 40_000_000
BUCKET_ELEMENTS_PER_DP = 1_000_000


@dataclass(frozen=True)
class CommOp:
    """One kind of communication a rank of stage `stage` performs, `calls` times per step."""

    stage: int
    group: str  # tp, cp, dp_cp, pp, embedding
    op: str  # all_reduce, reduce_scatter, all_gather, send_recv
    phase: str  # what it is for, e.g. "TP forward all-reduce (attention, MLP)"
    group_size: int
    calls: int  # per optimizer step
    buffer_bytes: int  # per call: the full (gathered) buffer
    link: str  # nvlink or network
    formula: str

    @property
    def bytes_sent(self) -> int:
        """Bytes this rank sends per call (NCCL bus factor × buffer; the whole message for p2p)."""
        return wire_bytes(self.op, self.group_size, self.buffer_bytes)

    @property
    def steps(self) -> int:
        return ring_steps(self.op, self.group_size)


def activation_bytes(job: Job) -> int:
    """β_a: 2 for bf16/fp16, 4 for fp32."""
    return 4 if job.training.precision == "fp32" else 2


def grad_bytes(job: Job) -> int:
    """Bytes per gradient element on the wire: fp32 when gradients accumulate in fp32."""
    return 4 if job.training.grad_accum_fp32 or job.training.precision == "fp32" else 2


def _sizes(job: Job) -> dict[str, int]:
    lay = job.layout
    return {"tp": lay.t, "cp": lay.c, "dp": lay.d or 1, "pp": lay.p}


def strides(job: Job) -> dict[str, int]:
    """Stride of each axis in the rank order (fastest first): rank = Σ coord_axis · stride_axis."""
    sizes, out, stride = _sizes(job), {}, 1
    for axis in job.layout.order:
        out[axis] = stride
        stride *= sizes[axis]
    return out


def within_domain(job: Job, axes: tuple[str, ...]) -> bool:
    """Every group over `axes` stays inside one NVLink domain (D consecutive ranks).

    The groups over `axes` tile "super-blocks" of σ·n ranks, σ and n the stride and size of the
    slowest axis among them; each super-block holds whole groups. A domain boundary strictly
    inside a super-block splits at least one group (one with members on both sides), so the
    groups stay inside iff the world fits one domain or D is a multiple of σ·n.
    """
    sizes, stride = _sizes(job), strides(job)
    present = [a for a in axes if sizes[a] > 1]
    if not present:
        return True
    slowest = max(present, key=lambda a: stride[a])
    block = stride[slowest] * sizes[slowest]
    domain = job.cluster.nvlink_domain
    return job.world <= domain or domain % block == 0


def link_class(job: Job, axes: tuple[str, ...]) -> str:
    """nvlink when every group over `axes` stays inside one NVLink domain, else network."""
    return "nvlink" if within_domain(job, axes) else "network"


def link_of(job: Job, link: str) -> Link:
    return job.cluster.intra if link == "nvlink" else job.cluster.inter


def stage_layers(job: Job) -> tuple[int, ...]:
    """L_r per stage: the given uneven split, or L/p each."""
    lay = job.layout
    return lay.stage_layers or tuple(job.model.L // lay.p for _ in range(lay.p))


def _tp_ops(job: Job, stage: int, layers: int) -> list[CommOp]:
    lay, tr, m = job.layout, job.training, job.m or 1
    if lay.t == 1:
        return []
    size = tr.b * (tr.s // lay.c) * job.model.h * activation_bytes(job)
    link = link_class(job, ("tp",))
    recompute = 2 * layers * m if tr.recompute == "full" else 0
    if not lay.sp:
        return [
            CommOp(
                stage,
                "tp",
                "all_reduce",
                "TP forward all-reduce (attention and MLP outputs)",
                lay.t,
                2 * layers * m,
                size,
                link,
                "2 per layer per micro-batch, b·(s/c)·h·β_a",
            ),
            CommOp(
                stage,
                "tp",
                "all_reduce",
                "TP backward all-reduce (attention and MLP input grads)",
                lay.t,
                2 * layers * m + recompute,
                size,
                link,
                "2 per layer per micro-batch (+2 forward again under full recompute), b·(s/c)·h·β_a",
            ),
        ]
    return [
        CommOp(
            stage,
            "tp",
            "all_gather",
            "SP all-gather before attention and MLP (forward; again in backward)",
            lay.t,
            4 * layers * m + recompute,
            size,
            link,
            "2 forward + 2 backward per layer per micro-batch, gathered b·(s/c)·h·β_a",
        ),
        CommOp(
            stage,
            "tp",
            "reduce_scatter",
            "SP reduce-scatter after attention and MLP (forward; again in backward)",
            lay.t,
            4 * layers * m + recompute,
            size,
            link,
            "2 forward + 2 backward per layer per micro-batch, b·(s/c)·h·β_a before scattering",
        ),
    ]


def _pp_ops(job: Job, stage: int) -> list[CommOp]:
    lay, tr, m = job.layout, job.training, job.m or 1
    if lay.p == 1:
        return []
    size = tr.b * (tr.s // lay.c) * job.model.h * activation_bytes(job)
    if lay.sp:
        size //= lay.t
    sends_fwd = m * (lay.v - (stage == lay.p - 1))
    sends_bwd = m * (lay.v - (stage == 0))
    link = link_class(job, ("pp",))
    shape = "[s/c" + ("/t" if lay.sp else "") + ", b, h]·β_a"
    ops = []
    if sends_fwd:
        ops.append(
            CommOp(
                stage,
                "pp",
                "send_recv",
                "PP send of the activation to the next stage",
                2,
                sends_fwd,
                size,
                link,
                f"m·(v − [last stage]) sends of {shape}",
            )
        )
    if sends_bwd:
        ops.append(
            CommOp(
                stage,
                "pp",
                "send_recv",
                "PP send of the activation gradient to the previous stage",
                2,
                sends_bwd,
                size,
                link,
                f"m·(v − [first stage]) sends of {shape}",
            )
        )
    return ops


def _buckets(params: int, bucket: int) -> list[tuple[int, int]]:
    """(calls, elements) pairs: Ψ_r // bucket full buckets and one remainder bucket, exactly."""
    full, rest = divmod(params, bucket)
    return [(calls, size) for calls, size in ((full, bucket), (1, rest)) if calls and size]


def _dp_ops(job: Job, stage: int, params: int) -> list[CommOp]:
    lay, m = job.layout, job.m or 1
    n = (lay.d or 1) * lay.c
    if n == 1:
        return []
    link = link_class(job, ("dp", "cp"))
    g, w = grad_bytes(job), activation_bytes(job)
    bucket = max(BUCKET_ELEMENTS, BUCKET_ELEMENTS_PER_DP * (lay.d or 1))
    ops: list[CommOp] = []
    for calls, elements in _buckets(params, bucket):
        if lay.zero == 0:
            ops.append(
                CommOp(
                    stage,
                    "dp_cp",
                    "all_reduce",
                    "DP gradient all-reduce (bucketed, overlapped with backward)",
                    n,
                    calls,
                    elements * g,
                    link,
                    "Ψ_r gradients once per step: 2Ψ on the wire",
                )
            )
            continue
        per_step = m if lay.zero >= 2 else 1
        ops.append(
            CommOp(
                stage,
                "dp_cp",
                "reduce_scatter",
                "ZeRO gradient reduce-scatter",
                n,
                calls * per_step,
                elements * g,
                link,
                "Ψ_r gradients "
                + (
                    "per micro-batch (ZeRO-2/3 shard gradients)"
                    if lay.zero >= 2
                    else "once per step"
                ),
            )
        )
        if lay.zero <= 2:
            ops.append(
                CommOp(
                    stage,
                    "dp_cp",
                    "all_gather",
                    "ZeRO parameter all-gather after the optimizer step",
                    n,
                    calls,
                    elements * w,
                    link,
                    "Ψ_r updated 16-bit parameters once per step",
                )
            )
        else:
            ops.append(
                CommOp(
                    stage,
                    "dp_cp",
                    "all_gather",
                    "ZeRO-3 parameter all-gather, forward and backward",
                    n,
                    2 * m * calls,
                    elements * w,
                    link,
                    "Ψ_r 16-bit parameters gathered before forward and again before backward, per micro-batch",
                )
            )
    return ops


def _cp_ops(job: Job, stage: int, layers: int) -> list[CommOp]:
    lay, tr, mod, m = job.layout, job.training, job.model, job.m or 1
    if lay.c == 1:
        return []
    kv_heads = max(mod.g // lay.t, 1)
    size = 2 * tr.b * (tr.s // lay.c) * kv_heads * mod.k * activation_bytes(job)
    link = link_class(job, ("cp",))
    return [
        CommOp(
            stage,
            "cp",
            "send_recv",
            "CP ring-attention K/V exchange (forward, and K/V + dK/dV backward)",
            lay.c,
            3 * (lay.c - 1) * layers * m,
            size,
            link,
            "(c−1) ring steps per layer per micro-batch forward, 2× backward; K and V of b·(s/c)·(g/t)·k",
        )
    ]


def _embedding_ops(job: Job, stage: int) -> list[CommOp]:
    lay = job.layout
    if not job.model.tied or lay.p == 1 or stage not in (0, lay.p - 1):
        return []
    padded = -(-job.model.V // (128 * lay.t)) * 128 * lay.t
    size = padded // lay.t * job.model.h * grad_bytes(job)
    ranks = (0, lay.p - 1)
    return [
        CommOp(
            stage,
            "embedding",
            "all_reduce",
            "tied embedding gradient all-reduce (first and last stage)",
            len(ranks),
            1,
            size,
            link_class(job, ("pp",)),
            "V'/t·h gradients once per step",
        )
    ]


def schedule(job: Job, params_by_stage: Sequence[int]) -> tuple[CommOp, ...]:
    """Every communication op of one step, for a rank of each pipeline stage.

    `params_by_stage[r]` is Ψ_r, the parameters one rank of stage r holds (after TP sharding).
    """
    ops: list[CommOp] = []
    for stage, layers in enumerate(stage_layers(job)):
        ops += _tp_ops(job, stage, layers)
        ops += _cp_ops(job, stage, layers)
        ops += _pp_ops(job, stage)
        ops += _dp_ops(job, stage, params_by_stage[stage])
        ops += _embedding_ops(job, stage)
    return tuple(ops)


def op_time_s(job: Job, op: CommOp) -> float:
    """Time of all calls of `op` in one step (α-β model on its link class)."""
    return op.calls * call_time_s(op.op, op.group_size, op.buffer_bytes, link_of(job, op.link))


def op_record(job: Job, op: CommOp) -> dict[str, object]:
    """One op as plain data (plan.json and `planc explain --format json`)."""
    return {
        "stage": op.stage,
        "group": op.group,
        "op": op.op,
        "phase": op.phase,
        "group_size": op.group_size,
        "calls": op.calls,
        "buffer_bytes": op.buffer_bytes,
        "bytes_sent_per_call": op.bytes_sent,
        "link": op.link,
        # Rounded so the plan's bytes do not depend on the last bits of a float division.
        "time_s": round(op_time_s(job, op), 9),
    }


@dataclass(frozen=True)
class WireBudget:
    """Bytes one rank of a stage sends and receives per step on each link class."""

    stage: int
    nvlink_sent: int
    nvlink_received: int
    network_sent: int
    network_received: int


def wire_budget(job: Job, ops: Sequence[CommOp]) -> tuple[WireBudget, ...]:
    """Per-stage wire bytes. Ring collectives receive what they send; p2p receives mirror the
    neighbour's sends (forward activations from the previous stage, gradients from the next)."""
    p = job.layout.p
    out = []
    for stage in range(p):
        sent = {"nvlink": 0, "network": 0}
        received = {"nvlink": 0, "network": 0}
        for op in ops:
            total = op.calls * op.bytes_sent
            if op.stage == stage:
                sent[op.link] += total
                if op.group != "pp":
                    received[op.link] += total
            elif op.group == "pp" and _receives_from(op, stage, p):
                received[op.link] += total
        out.append(
            WireBudget(
                stage, sent["nvlink"], received["nvlink"], sent["network"], received["network"]
            )
        )
    return tuple(out)


def _receives_from(op: CommOp, stage: int, p: int) -> bool:
    forward = "next stage" in op.phase
    return op.stage == (stage - 1) % p if forward else op.stage == (stage + 1) % p
