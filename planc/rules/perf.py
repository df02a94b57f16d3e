"""Rules for configurations that are legal but slow: traffic that cannot hide behind compute."""

from __future__ import annotations

from collections.abc import Iterator

from planc.comm.schedule import CommOp, sharding_stage
from planc.findings import Severity
from planc.job import GB
from planc.rules.base import Context, Needs, Violation, rule
from planc.vocab import Collective, GroupKind, LinkClass

# The gradient reduction's groups: the shard group (dp_cp, or dp_shard under HSDP) and HSDP's
# replicate all-reduce.
DATA_PARALLEL = (GroupKind.DP_CP, GroupKind.DP_SHARD, GroupKind.DP_REPLICATE)


@rule("PLC019", Severity.WARNING, Needs.ANALYSIS)
def dp_traffic_hides(ctx: Context) -> Iterator[Violation]:
    """Data-parallel gradient traffic hides behind backward compute.

    The DP (ZeRO) gradient reduction runs on its own stream while backward computes, bucket by
    bucket; when its α-β time on its link is longer than the step's backward compute on that
    rank, the difference lands on the critical path every step. Slow networks, small m and
    large Ψ_r per rank cause it. Both times come from the per-operation model (`planc explain`
    shows the ops and their times): the collectives with their link's efficiency and latency,
    backward from each op's FLOPs and bytes on the GPU.

    Passes:
        hardware: {nodes: 8, hosts: "n{1..8}"}
        parallelism: {tensor: 8, data: 8, zero_stage: 1}

    Fails:
        hardware: {nodes: 8, hosts: "n{1..8}", inter_node: {bandwidth_gbs: 1}}
        parallelism: {tensor: 8, data: 8, zero_stage: 1}
    """
    if ctx.analysis is None:
        return
    job = ctx.analysis.plan
    zero = sharding_stage(job)
    # The post-step parameter all-gather of ZeRO-1/2 does not overlap backward; count the rest.
    by_stage: list[list[CommOp]] = [[] for _ in ctx.analysis.times]
    for op in ctx.analysis.ops:
        if op.group in DATA_PARALLEL and (op.op is not Collective.ALL_GATHER or zero == 3):
            by_stage[op.stage].append(op)
    for stage, t in enumerate(ctx.analysis.times):
        dp = by_stage[stage]
        reduce_s = sum(ctx.analysis.op_seconds[op] for op in dp)
        backward_s = job.m * t.backward_s
        if reduce_s > backward_s:
            sent = sum(op.calls * op.bytes_sent for op in dp)
            yield Violation(
                "parallelism.data",
                f"stage {stage}: the DP gradient reduction ({sent / GB:.2f} GB per rank on "
                f"{dp[0].link}) takes {reduce_s:.2f} s, longer than the {backward_s:.2f} s of backward "
                "compute it overlaps with",
                "raise global_batch (more micro-batches), keep DP inside NVLink, or use more "
                "tensor/pipeline parallelism to shrink Ψ per rank",
                ("hardware.inter_node", "training.global_batch"),
            )
            return


@rule("PLC020", Severity.WARNING, Needs.ANALYSIS)
def pp_traffic_hides(ctx: Context) -> Iterator[Violation]:
    """Pipeline sends take less time than the compute of one micro-batch.

    Each pipeline boundary sends one activation of [s/c, b, h] forward (and its gradient back)
    per micro-batch. When one send takes longer than a stage's forward of one micro-batch,
    the pipeline waits on the wire rather than on compute.

    Base: llama3-70b-8x8.yaml

    Passes:
        hardware: {inter_node: {bandwidth_gbs: 50}}

    Fails:
        hardware: {inter_node: {bandwidth_gbs: 0.1}}
    """
    if ctx.analysis is None or ctx.analysis.plan.layout.p == 1:
        return
    job, times = ctx.analysis.plan, ctx.analysis.times
    for op in ctx.analysis.ops:
        if op.group is not GroupKind.PP or not op.calls:
            continue
        per_send = ctx.analysis.op_seconds[op] / op.calls
        forward = times[op.stage].forward_s / job.layout.v
        if per_send > forward:
            yield Violation(
                "hardware.inter_node" if op.link is LinkClass.NETWORK else "hardware.intra_node",
                f"stage {op.stage}: one pipeline send of {op.buffer_bytes / 2**20:.1f} MiB on "
                f"{op.link} takes {per_send * 1e3:.1f} ms, longer than the {forward * 1e3:.1f} ms "
                "forward of a micro-batch",
                "turn on sequence parallelism (sends shrink by t), raise micro_batch, or place "
                "pipeline stages on a faster link",
                ("parallelism.pipeline",),
            )
            return
