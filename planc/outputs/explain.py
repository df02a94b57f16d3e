"""Explain: a readable summary of a job for a person reviewing a change.

Memory per stage, traffic per step on each tier of the fabric, the bubble, the estimated step time and where
it goes, tokens per second and MFU. The same numbers as plain data for `--format json`.
"""

from __future__ import annotations

from typing import Any

from planc.analysis import Analysis, StepEstimate, estimate_step
from planc.comm.schedule import WireBudget, op_record
from planc.outputs import escape
from planc.outputs.memory import to_json as memory_json
from planc.pipeline.registry import definition
from planc.record import record
from planc.spec.job import GB, GIB


@record
class Explanation:
    """An analysed job and its step estimate."""

    analysis: Analysis
    step: StepEstimate


def explain(analysis: Analysis) -> Explanation:
    return Explanation(analysis, estimate_step(analysis))


def _gib(n: int) -> str:
    return f"{n / GIB:8.2f} GiB"


def _gb(n: int) -> str:
    return f"{n / GB:10.2f} GB"


def _wire_json(wire: WireBudget) -> dict[str, int]:
    """One stage's wire bytes: <tier>_sent and <tier>_received for each tier, innermost first."""
    out = {"stage": wire.stage}
    for name, w in wire.tiers.items():
        out[f"{name}_sent"] = w.sent
        out[f"{name}_received"] = w.received
    return out


def render_text(ex: Explanation) -> str:
    an, step = ex.analysis, ex.step
    job, lay = an.plan, an.plan.layout
    hbm = job.cluster.gpu.memory_bytes
    lines = [
        f"{escape.line(job.name)}: {job.world} × {escape.line(job.cluster.gpu.name)} ({job.cluster.nodes} nodes × "
        f"{job.cluster.gpus_per_node}), t={lay.t} p={lay.p} d={lay.d} c={lay.c} v={lay.v}, "
        f"ZeRO-{lay.zero}, m={job.m} micro-batches of {job.training.b} × {job.training.s} tokens",
        f"parameters: {an.memory.parameters:,} ({an.memory.parameters_padded:,} with the vocab padded)",
        *_format_lines(ex),
        "",
        "memory per rank (heaviest rank of each stage; GiB = 2^30 bytes):",
    ]
    for stage in an.memory.stages:
        mem = stage.memory
        share = mem.total / hbm
        lines.append(
            f"  stage {stage.stage:>3}: {_gib(mem.total)} of {hbm / GIB:.1f} GiB ({share:5.1%})  "
            f"weights {mem.weights / GIB:.2f}, grads {mem.gradients / GIB:.2f}, "
            f"optimizer {mem.optimizer / GIB:.2f}, activations {mem.activations / GIB:.2f}, "
            f"buffers {mem.buffers / GIB:.2f}, reserve {mem.reserve / GIB:.2f}"
        )
    lines += ["", "traffic per step per rank (GB = 10^9 bytes; sent, received):"]
    fabric = job.cluster.fabric
    for wire in an.wires:
        tiers = "   ".join(
            f"{escape.line(tier.shown)} {_gb(wire.on(tier.name).sent)} / {_gb(wire.on(tier.name).received)}"
            for tier in fabric
        )
        lines.append(f"  stage {wire.stage:>3}: {tiers}")
    lines += ["", "communication ops (stage 0; time per step on the link, latency and efficiency included):"]
    for op in (o for o in an.ops if o.stage == 0):
        lines.append(
            f"  {op.group.value:<9} {op.op.value:<14} n={op.group_size:<5} {op.calls:>7} × {op.buffer_bytes / 2**20:10.2f} MiB "
            f"on {op.link:<7} {an.op_seconds[op]:8.3f} s  {op.phase}"
        )
    total = step.step_time_s
    lines += [
        "",
        _bubble_words(ex) + _simulated_line(ex),
        f"estimated step time: {total:.2f} s ({escape.line(step.model)}; {job.cluster.gpu.bf16_tflops:g} "
        "TFLOPS peak)",
        f"  compute:            {step.compute_s:8.2f} s ({step.compute_s / total:5.1%})  "
        f"incl. exposed TP {step.tp_comm_s:.3f} s",
        *_expert_line(ex),
        f"  pipeline bubble:    {step.bubble_s:8.2f} s ({step.bubble_s / total:5.1%})  "
        f"incl. p2p on the path {step.pp_comm_s:.3f} s",
        f"  exposed DP comm:    {step.exposed_comm_s:8.2f} s ({step.exposed_comm_s / total:5.1%})  "
        "after backward and after the optimizer step",
        f"  optimizer step:     {step.optimizer_s:8.2f} s ({step.optimizer_s / total:5.1%})",
        f"tokens per second: {step.tokens_per_s:,.0f}   MFU: {step.mfu:.1%} "
        "(model FLOPs, no causal discount, no recompute)",
    ]
    return "\n".join(lines) + "\n"


def _format_lines(ex: Explanation) -> list[str]:
    """Under an FP8/FP4 recipe, what runs in which format (none for a 16/32-bit run)."""
    job = ex.analysis.plan
    q = job.numerics.quantized
    if q is None:
        return []
    if not q.cached_weights:
        kept = "cast per GEMM, no quantized copy kept"
    elif q.param_gather:
        kept = f"{q.usages} quantized {'copy' if q.usages == 1 else 'copies'}, the first the parameter itself"
    else:
        kept = f"the 16-bit weight and {q.usages} quantized {'copy' if q.usages == 1 else 'copies'}"
    words = (
        f"number formats: the linear layers' GEMMs in {q.label} (recipe {q.recipe.value}, "
        f"{job.cluster.gpu.peak_tflops(q.gemm) or 0:,g} TFLOPS dense on {q.architecture}); "
        f"weights, activations and gradients {job.numerics.precision.value}; per GEMM weight {kept}"
    )
    if q.gather_fp8:
        words += f", gathered in {q.label}"
    if q.bf16_layers:
        words += f"; the first and last {q.bf16_layers} layer(s) in BF16"
    return [words]


def _expert_line(ex: Explanation) -> list[str]:
    """The MoE layers' expert exchanges, part of compute (Megatron-Core runs them between the
    router and the experts, serialised); nothing for a dense model."""
    step = ex.step
    if ex.analysis.plan.model.moe is None:
        return []
    share = step.ep_comm_s / step.step_time_s if step.step_time_s else 0.0
    return [
        f"  expert all-to-all:  {step.ep_comm_s:8.2f} s ({share:5.1%})  "
        "inside compute: EP dispatch and combine (and ETP gathers), not overlapped"
    ]


def _simulated_line(ex: Explanation) -> str:
    pipe = ex.step.pipeline
    if ex.analysis.plan.layout.p == 1:
        return ""
    how = {
        "simulated": f"simulated, {pipe.simulated_ops:,} ops",
        "extrapolated": f"{pipe.simulated_ops:,} ops simulated, the steady state extrapolated",
        "closed-form": "closed form over the slowest stage",
    }[pipe.method]
    return (
        f"; with each stage's own times and the p2p time ({how}): "
        f"{pipe.bubble_fraction:.2%}, pipeline {pipe.makespan_s:.2f} s"
    )


def _bubble_words(ex: Explanation) -> str:
    """The schedule's closed-form bubble, in its formula (the simulated one with equal stages for
    a schedule without a closed form)."""
    formula = definition(ex.analysis.plan.layout.schedule).bubble_formula
    shown = f"{formula} = " if formula is not None else "with equal stages (simulated) "
    return f"pipeline bubble: {shown}{ex.step.bubble_fraction:.2%}"


def to_json(ex: Explanation) -> dict[str, Any]:
    an, step = ex.analysis, ex.step
    job = an.plan
    formats = _format_lines(ex)
    return {
        "name": job.name,
        "world_size": job.world,
        **({"number_formats": formats[0].removeprefix("number formats: ")} if formats else {}),
        "memory": memory_json(job, an.memory),
        "communication": [
            {**op_record(op, an.op_seconds[op]), "formula": op.formula} for op in an.ops
        ],
        "wire_bytes": [_wire_json(w) for w in an.wires],
        "bubble_fraction": step.bubble_fraction,
        "pipeline": {
            "makespan_s": step.pipeline.makespan_s,
            "bubble_fraction": step.pipeline.bubble_fraction,
            "method": step.pipeline.method,
            "simulated_ops": step.pipeline.simulated_ops,
        },
        "step": {
            "step_time_s": step.step_time_s,
            "compute_s": step.compute_s,
            "bubble_s": step.bubble_s,
            "exposed_comm_s": step.exposed_comm_s,
            "optimizer_s": step.optimizer_s,
            "tp_comm_s": step.tp_comm_s,
            "cp_comm_s": step.cp_comm_s,
            "ep_comm_s": step.ep_comm_s,
            "pp_comm_s": step.pp_comm_s,
            "tokens_per_s": step.tokens_per_s,
            "mfu": step.mfu,
            "model": step.model,
            "model_flops": step.model_flops,
        },
    }
