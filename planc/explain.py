"""Explain: a readable summary of a job for a person reviewing a change.

Memory per stage, traffic per step per link class, the bubble, the estimated step time and where
it goes, tokens per second and MFU. The same numbers as plain data for `--format json`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planc.comm.schedule import CommOp, WireBudget, op_record, op_time_s, schedule, wire_budget
from planc.comm.steptime import SimulatedPipeline, StepEstimate, estimate, simulate_pipeline
from planc.job import GB, GIB, Job
from planc.memory import MemoryBudget, budget
from planc.memory.params import rank_parameters
from planc.rules.batch import bubble_fraction


@dataclass(frozen=True)
class Explanation:
    job: Job
    memory: MemoryBudget
    ops: tuple[CommOp, ...]
    wires: tuple[WireBudget, ...]
    step: StepEstimate
    bubble: float
    simulated: SimulatedPipeline | None


def comm_ops(job: Job) -> tuple[CommOp, ...]:
    """The communication schedule with each stage's real parameter share Ψ_r."""
    params = [rank_parameters(job, r).total for r in range(job.layout.p)]
    return schedule(job, params)


def explain(job: Job) -> Explanation:
    ops = comm_ops(job)
    return Explanation(
        job=job,
        memory=budget(job),
        ops=ops,
        wires=wire_budget(job, ops),
        step=estimate(job, ops, job.training.efficiency, job.training.overlap_tp),
        bubble=bubble_fraction(job.layout.p, job.m or 1, job.layout.v),
        simulated=simulate_pipeline(job, ops, job.training.efficiency, job.training.overlap_tp),
    )


def _gib(n: int) -> str:
    return f"{n / GIB:8.2f} GiB"


def _gb(n: int) -> str:
    return f"{n / GB:10.2f} GB"


def render_text(ex: Explanation) -> str:
    job, lay, step = ex.job, ex.job.layout, ex.step
    hbm = job.cluster.gpu.memory_bytes
    lines = [
        f"{job.name}: {job.world} × {job.cluster.gpu.name} ({job.cluster.nodes} nodes × "
        f"{job.cluster.gpus_per_node}), t={lay.t} p={lay.p} d={lay.d} c={lay.c} v={lay.v}, "
        f"ZeRO-{lay.zero}, m={job.m} micro-batches of {job.training.b} × {job.training.s} tokens",
        f"parameters: {ex.memory.parameters:,} ({ex.memory.parameters_padded:,} with the vocab padded)",
        "",
        "memory per rank (heaviest rank of each stage; GiB = 2^30 bytes):",
    ]
    for stage in ex.memory.stages:
        mem = stage.memory
        share = mem.total / hbm
        lines.append(
            f"  stage {stage.stage:>3}: {_gib(mem.total)} of {hbm / GIB:.1f} GiB ({share:5.1%})  "
            f"weights {mem.weights / GIB:.2f}, grads {mem.gradients / GIB:.2f}, "
            f"optimizer {mem.optimizer / GIB:.2f}, activations {mem.activations / GIB:.2f}, "
            f"buffers {mem.buffers / GIB:.2f}, reserve {mem.reserve / GIB:.2f}"
        )
    lines += ["", "traffic per step per rank (GB = 10^9 bytes; sent, received):"]
    for wire in ex.wires:
        lines.append(
            f"  stage {wire.stage:>3}: NVLink {_gb(wire.nvlink_sent)} / {_gb(wire.nvlink_received)}   "
            f"network {_gb(wire.network_sent)} / {_gb(wire.network_received)}"
        )
    lines += ["", "communication ops (stage 0; α-β time per step):"]
    for op in (o for o in ex.ops if o.stage == 0):
        lines.append(
            f"  {op.group:<9} {op.op:<14} n={op.group_size:<5} {op.calls:>7} × {op.buffer_bytes / 2**20:10.2f} MiB "
            f"on {op.link:<7} {op_time_s(job, op):8.3f} s  {op.phase}"
        )
    total = step.step_time_s
    lines += [
        "",
        f"pipeline bubble: (p − 1)/(v·m + p − 1) = {ex.bubble:.2%}" + _simulated_line(ex),
        f"estimated step time: {total:.2f} s at {job.training.efficiency:.0%} of peak "
        f"({job.cluster.gpu.bf16_tflops:g} TFLOPS)",
        f"  compute (incl. exposed TP): {step.compute_s:8.2f} s ({step.compute_s / total:5.1%})",
        f"  pipeline bubble:            {step.bubble_s:8.2f} s ({step.bubble_s / total:5.1%})",
        f"  exposed DP/PP comm:         {step.exposed_comm_s:8.2f} s ({step.exposed_comm_s / total:5.1%})",
        f"tokens per second: {step.tokens_per_s:,.0f}   MFU: {step.mfu:.1%} "
        "(model FLOPs, no causal discount, no recompute)",
    ]
    return "\n".join(lines) + "\n"


def _simulated_line(ex: Explanation) -> str:
    sim = ex.simulated
    if sim is None:
        return ""
    return (
        f"; simulated with each stage's own times ({sim.ops:,} ops, p2p included): "
        f"{sim.bubble_fraction:.2%}, pipeline {sim.makespan_s:.2f} s"
    )


def to_json(ex: Explanation) -> dict[str, Any]:
    from planc.memory.report import to_json as memory_json

    step = ex.step
    return {
        "name": ex.job.name,
        "world_size": ex.job.world,
        "memory": memory_json(ex.job, ex.memory),
        "communication": [{**op_record(ex.job, op), "formula": op.formula} for op in ex.ops],
        "wire_bytes": [
            {
                "stage": w.stage,
                "nvlink_sent": w.nvlink_sent,
                "nvlink_received": w.nvlink_received,
                "network_sent": w.network_sent,
                "network_received": w.network_received,
            }
            for w in ex.wires
        ],
        "bubble_fraction": ex.bubble,
        "simulated_pipeline": None
        if ex.simulated is None
        else {
            "makespan_s": ex.simulated.makespan_s,
            "bubble_fraction": ex.simulated.bubble_fraction,
            "ops": ex.simulated.ops,
        },
        "step": {
            "step_time_s": step.step_time_s,
            "compute_s": step.compute_s,
            "bubble_s": step.bubble_s,
            "exposed_comm_s": step.exposed_comm_s,
            "tokens_per_s": step.tokens_per_s,
            "mfu": step.mfu,
            "efficiency": step.efficiency,
            "model_flops": step.model_flops,
        },
    }
