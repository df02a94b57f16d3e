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

from planc.comm.cost import ring_steps, wire_bytes
from planc.plannable import Plannable, padded_vocab
from planc.record import record
from planc.vocab import Axis, Collective, Direction, GroupKind, LinkClass


@record(kw_only=True)
class CommOp:
    """One kind of communication a rank of stage `stage` performs, `calls` times per step.

    `direction` is set for pipeline sends only: forward (activations to the next stage) or
    backward (activation gradients to the previous one).
    """

    stage: int
    group: GroupKind
    op: Collective
    phase: str  # what it is for, for people: e.g. "TP forward all-reduce (attention, MLP)"
    group_size: int
    calls: int  # per optimizer step
    buffer_bytes: int  # per call: the full (gathered) buffer
    link: LinkClass
    formula: str
    direction: Direction | None = None

    @property
    def bytes_sent(self) -> int:
        """Bytes this rank sends per call (NCCL bus factor × buffer; the whole message for p2p)."""
        return wire_bytes(self.op, self.group_size, self.buffer_bytes)

    @property
    def steps(self) -> int:
        return ring_steps(self.op, self.group_size)


def activation_bytes(job: Plannable) -> int:
    """β_a: 2 for bf16/fp16, 4 for fp32."""
    return 4 if job.training.precision == "fp32" else 2


def grad_bytes(job: Plannable) -> int:
    """Bytes per gradient element on the wire: fp32 when gradients accumulate in fp32."""
    return 4 if job.training.grad_accum_fp32 or job.training.precision == "fp32" else 2


def within_domain(job: Plannable, axes: tuple[Axis, ...]) -> bool:
    """Every group over `axes` stays inside one NVLink domain (D consecutive ranks).

    The groups over `axes` tile "super-blocks" of σ·n ranks, σ and n the stride and size of the
    slowest axis among them; each super-block holds whole groups. A domain boundary strictly
    inside a super-block splits at least one group (one with members on both sides), so the
    groups stay inside iff the world fits one domain or D is a multiple of σ·n.
    """
    sizes, stride = job.layout.degrees, job.layout.strides
    present = [a for a in axes if sizes[a] > 1]
    if not present:
        return True
    slowest = max(present, key=lambda a: stride[a])
    block = stride[slowest] * sizes[slowest]
    domain = job.cluster.nvlink_domain
    return job.world <= domain or domain % block == 0


def link_class(job: Plannable, axes: tuple[Axis, ...]) -> LinkClass:
    """nvlink when every group over `axes` stays inside one NVLink domain, else network."""
    return LinkClass.NVLINK if within_domain(job, axes) else LinkClass.NETWORK


def activation_message_bytes(job: Plannable) -> int:
    """b·(s/c)·h·β_a: one micro-batch's hidden states on a context-parallel rank (the TP
    collectives' gathered buffer)."""
    return job.training.b * job.tokens_per_cp_rank * job.model.h * activation_bytes(job)


def _tp_ops(job: Plannable, stage: int, layers: int) -> list[CommOp]:
    lay, tr, m = job.layout, job.training, job.m
    if lay.t == 1:
        return []
    size = activation_message_bytes(job)
    link = link_class(job, (Axis.TP,))
    recompute = 2 * layers * m if tr.recompute == "full" else 0

    def op(collective: Collective, phase: str, calls: int, formula: str) -> CommOp:
        return CommOp(
            stage=stage,
            group=GroupKind.TP,
            op=collective,
            phase=phase,
            group_size=lay.t,
            calls=calls,
            buffer_bytes=size,
            link=link,
            formula=formula,
        )

    if not lay.sp:
        return [
            op(
                Collective.ALL_REDUCE,
                "TP forward all-reduce (attention and MLP outputs)",
                2 * layers * m,
                "2 per layer per micro-batch, b·(s/c)·h·β_a",
            ),
            op(
                Collective.ALL_REDUCE,
                "TP backward all-reduce (attention and MLP input grads)",
                2 * layers * m + recompute,
                "2 per layer per micro-batch (+2 forward again under full recompute), b·(s/c)·h·β_a",
            ),
        ]
    return [
        op(
            Collective.ALL_GATHER,
            "SP all-gather before attention and MLP (forward; again in backward)",
            4 * layers * m + recompute,
            "2 forward + 2 backward per layer per micro-batch, gathered b·(s/c)·h·β_a",
        ),
        op(
            Collective.REDUCE_SCATTER,
            "SP reduce-scatter after attention and MLP (forward; again in backward)",
            4 * layers * m + recompute,
            "2 forward + 2 backward per layer per micro-batch, b·(s/c)·h·β_a before scattering",
        ),
    ]


def pipeline_message_bytes(job: Plannable) -> int:
    """[s/c (/t with SP), b, h]·β_a: one pipeline send (Megatron's p2p tensor shape)."""
    return job.training.b * job.tokens_per_sp_rank * job.model.h * activation_bytes(job)


def pipeline_sends(job: Plannable, stage: int, direction: Direction) -> int:
    """Sends of stage `stage` per step in `direction`: m per model chunk, except that the last
    virtual stage sends nothing forward and the first nothing backward: m·(v − [end stage])."""
    lay, m = job.layout, job.m
    end = lay.p - 1 if direction is Direction.FORWARD else 0
    return m * (lay.v - (stage == end)) if lay.p > 1 else 0


def _pp_ops(job: Plannable, stage: int) -> list[CommOp]:
    lay = job.layout
    if lay.p == 1:
        return []
    size = pipeline_message_bytes(job)
    link = link_class(job, (Axis.PP,))
    shape = "[s/c" + ("/t" if lay.sp else "") + ", b, h]·β_a"
    ops = []
    for direction, what, end in (
        (Direction.FORWARD, "the activation to the next stage", "last"),
        (Direction.BACKWARD, "the activation gradient to the previous stage", "first"),
    ):
        sends = pipeline_sends(job, stage, direction)
        if sends:
            ops.append(
                CommOp(
                    stage=stage,
                    group=GroupKind.PP,
                    op=Collective.SEND_RECV,
                    phase=f"PP send of {what}",
                    group_size=2,
                    calls=sends,
                    buffer_bytes=size,
                    link=link,
                    formula=f"m·(v − [{end} stage]) sends of {shape}",
                    direction=direction,
                )
            )
    return ops


def _buckets(params: int, bucket: int) -> list[tuple[int, int]]:
    """(calls, elements) pairs: Ψ_r // bucket full buckets and one remainder bucket, exactly."""
    full, rest = divmod(params, bucket)
    return [(calls, size) for calls, size in ((full, bucket), (1, rest)) if calls and size]


def sharding_stage(job: Plannable) -> int:
    """The ZeRO stage whose traffic the engine runs: FSDP2's fully_shard always shards the
    parameters (stage 3 traffic); the others follow parallelism.zero_stage."""
    return 3 if job.training.framework == "fsdp2" else job.layout.zero


def shard_link(job: Plannable) -> LinkClass:
    """The link of the dp_shard groups: data_shard contiguous members of a dp_cp group.

    The dp_cp listing runs its faster axis (of cp and dp, in rank order) first. A slice of S
    members lies inside an aligned block of stride·S ranks on that axis when S divides its
    degree, or of slow stride·S/n_fast on the slower axis when n_fast divides S; the slices then
    stay inside one NVLink domain iff the domain is a multiple of that block (`within_domain`).
    Any other cut is taken as crossing the network.
    """
    lay = job.layout
    if lay.replicas == 1:
        return link_class(job, (Axis.DP, Axis.CP))
    sizes, strides_ = lay.degrees, lay.strides
    fast, slow = sorted((Axis.CP, Axis.DP), key=lambda a: strides_[a])
    shard = lay.shard_group
    if sizes[fast] % shard == 0:
        block = strides_[fast] * shard
    elif shard % sizes[fast] == 0:
        block = strides_[slow] * (shard // sizes[fast])
    else:
        block = 0
    domain = job.cluster.nvlink_domain
    inside = job.world <= domain or (block > 0 and domain % block == 0)
    return LinkClass.NVLINK if inside else LinkClass.NETWORK


def _replicate_op(job: Plannable, stage: int, calls: int, elements: int) -> CommOp:
    """The all-reduce of the sharded gradients across the replicas of a shard (HSDP: FSDP2
    all-reduces over the replicate mesh dimension after its reduce-scatter; Megatron's partial
    distributed optimizer over inter_distributed_optimizer_instance_group)."""
    lay = job.layout
    shard = -(-elements // lay.shard_group)
    inside = link_class(job, (Axis.DP, Axis.CP)) is LinkClass.NVLINK
    return CommOp(
        stage=stage,
        group=GroupKind.DP_REPLICATE,
        op=Collective.ALL_REDUCE,
        phase="HSDP all-reduce of the gradient shards across replicas",
        group_size=lay.replicas,
        calls=calls,
        buffer_bytes=shard * grad_bytes(job),
        link=LinkClass.NVLINK if inside else LinkClass.NETWORK,
        formula="Ψ_r/N gradients per reduce-scatter, over R = d·c/N replicas",
    )


def _dp_ops(job: Plannable, stage: int, params: int) -> list[CommOp]:
    lay, m = job.layout, job.m
    zero = sharding_stage(job)
    hsdp = zero > 0 and lay.replicas > 1
    n = lay.shard_group if hsdp else lay.d * lay.c
    if lay.d * lay.c == 1:
        return []
    g, w = grad_bytes(job), activation_bytes(job)
    link = shard_link(job)
    kind = GroupKind.DP_SHARD if hsdp else GroupKind.DP_CP

    def op(collective: Collective, phase: str, calls: int, size: int, formula: str) -> CommOp:
        return CommOp(
            stage=stage,
            group=kind,
            op=collective,
            phase=phase,
            group_size=n,
            calls=calls,
            buffer_bytes=size,
            link=link,
            formula=formula,
        )

    ops: list[CommOp] = []
    for calls, elements in _buckets(params, job.gradient_bucket_elements):
        if hsdp:
            sharded = zero >= 2
            ops.append(_replicate_op(job, stage, calls * (m if sharded else 1), elements))
            if n == 1:
                continue
        if zero == 0:
            ops.append(
                op(
                    Collective.ALL_REDUCE,
                    "DP gradient all-reduce (bucketed, overlapped with backward)",
                    calls,
                    elements * g,
                    "Ψ_r gradients once per step: 2Ψ on the wire",
                )
            )
            continue
        sharded = zero >= 2
        ops.append(
            op(
                Collective.REDUCE_SCATTER,
                "ZeRO gradient reduce-scatter",
                calls * (m if sharded else 1),
                elements * g,
                "Ψ_r gradients "
                + ("per micro-batch (ZeRO-2/3 shard gradients)" if sharded else "once per step"),
            )
        )
        if zero == 3:
            ops.append(
                op(
                    Collective.ALL_GATHER,
                    "ZeRO-3 parameter all-gather, forward and backward",
                    2 * m * calls,
                    elements * w,
                    "Ψ_r 16-bit parameters gathered before forward and again before backward, "
                    "per micro-batch",
                )
            )
        else:
            ops.append(
                op(
                    Collective.ALL_GATHER,
                    "ZeRO parameter all-gather after the optimizer step",
                    calls,
                    elements * w,
                    "Ψ_r updated 16-bit parameters once per step",
                )
            )
    return ops


def _cp_ops(job: Plannable, stage: int, layers: int) -> list[CommOp]:
    lay, tr, mod, m = job.layout, job.training, job.model, job.m
    if lay.c == 1:
        return []
    kv_heads = max(mod.g // lay.t, 1)
    size = 2 * tr.b * job.tokens_per_cp_rank * kv_heads * mod.k * activation_bytes(job)
    return [
        CommOp(
            stage=stage,
            group=GroupKind.CP,
            op=Collective.SEND_RECV,
            phase="CP ring-attention K/V exchange (forward, and K/V + dK/dV backward)",
            group_size=lay.c,
            calls=3 * (lay.c - 1) * layers * m,
            buffer_bytes=size,
            link=link_class(job, (Axis.CP,)),
            formula="(c−1) ring steps per layer per micro-batch forward, 2× backward; K and V of b·(s/c)·(g/t)·k",
        )
    ]


def _embedding_ops(job: Plannable, stage: int) -> list[CommOp]:
    lay = job.layout
    if not job.model.tied or lay.p == 1 or stage not in (0, lay.p - 1):
        return []
    size = padded_vocab(job.model.V, lay.t) // lay.t * job.model.h * grad_bytes(job)
    return [
        CommOp(
            stage=stage,
            group=GroupKind.EMBEDDING,
            op=Collective.ALL_REDUCE,
            phase="tied embedding gradient all-reduce (first and last stage)",
            group_size=2,
            calls=1,
            buffer_bytes=size,
            link=link_class(job, (Axis.PP,)),
            formula="V'/t·h gradients once per step",
        )
    ]


def schedule(job: Plannable, params_by_stage: Sequence[int]) -> tuple[CommOp, ...]:
    """Every communication op of one step, for a rank of each pipeline stage.

    `params_by_stage[r]` is Ψ_r, the parameters one rank of stage r holds (after TP sharding).
    """
    ops: list[CommOp] = []
    for stage, layers in enumerate(job.layout.stage_layers):
        ops += _tp_ops(job, stage, layers)
        ops += _cp_ops(job, stage, layers)
        ops += _pp_ops(job, stage)
        ops += _dp_ops(job, stage, params_by_stage[stage])
        ops += _embedding_ops(job, stage)
    return tuple(ops)


def op_record(op: CommOp, seconds: float) -> dict[str, object]:
    """One op as plain data (plan.json and `planc explain --format json`); `seconds` is its
    time per step from the analysis (`planc.analysis.Analysis.op_seconds`)."""
    record: dict[str, object] = {
        "stage": op.stage,
        "group": op.group.value,
        "op": op.op.value,
        "phase": op.phase,
        "group_size": op.group_size,
        "calls": op.calls,
        "buffer_bytes": op.buffer_bytes,
        "bytes_sent_per_call": op.bytes_sent,
        "link": op.link.value,
        # Rounded so the plan's bytes do not depend on the last bits of a float division.
        "time_s": round(seconds, 9),
    }
    if op.direction is not None:
        record["direction"] = op.direction.value
    return record


@record
class WireBudget:
    """Bytes one rank of a stage sends and receives per step on each link class."""

    stage: int
    nvlink_sent: int
    nvlink_received: int
    network_sent: int
    network_received: int


def wire_budget(job: Plannable, ops: Sequence[CommOp]) -> tuple[WireBudget, ...]:
    """Per-stage wire bytes. Ring collectives receive what they send; p2p receives mirror the
    neighbour's sends (forward activations from the previous stage, gradients from the next)."""
    p = job.layout.p
    sent = [dict.fromkeys(LinkClass, 0) for _ in range(p)]
    received = [dict.fromkeys(LinkClass, 0) for _ in range(p)]
    for op in ops:
        total = op.calls * op.bytes_sent
        sent[op.stage][op.link] += total
        to = op.stage if op.direction is None else _receiver_of(op.stage, op.direction, p)
        received[to][op.link] += total
    return tuple(
        WireBudget(
            stage,
            sent[stage][LinkClass.NVLINK],
            received[stage][LinkClass.NVLINK],
            sent[stage][LinkClass.NETWORK],
            received[stage][LinkClass.NETWORK],
        )
        for stage in range(p)
    )


def _receiver_of(stage: int, direction: Direction, p: int) -> int:
    """The stage a send of `stage` in `direction` arrives at (interleaved chunks wrap around)."""
    return (stage + 1) % p if direction is Direction.FORWARD else (stage - 1) % p
