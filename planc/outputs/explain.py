"""Explain: a readable summary of a job for a person reviewing a change.

Memory per stage, traffic per step on each tier of the fabric, the bubble, the estimated step time and where
it goes, tokens per second and MFU. The same numbers as plain data for `--format json`.
"""

from __future__ import annotations

import math
from typing import Any

from planc.analysis import Analysis, StepEstimate, estimate_step
from planc.comm.schedule import WireBudget, op_record, sharding_stage
from planc.comm.tiers import ring_bandwidth_gbs
from planc.deferral import deferred_calls
from planc.memory.activations import module_words, offloaded_layers
from planc.outputs import escape
from planc.outputs.memory import to_json as memory_json
from planc.outputs.ops import op_json, op_lines
from planc.perf.expert_host import tau_e
from planc.perf.grad_accum import accumulation
from planc.perf.inputs import build_inputs, efficiency_of, muon_times
from planc.perf.offload import offloaded_layer_bytes
from planc.perf.op_table import OpTable, op_table
from planc.perf.step import Overlap, StepInputs, busiest_stage, overlaps
from planc.perf.unpriced import said, unpriced_of
from planc.perf.validation import category_of
from planc.pipeline.registry import definition
from planc.plannable import Plannable
from planc.presets.accuracy import (
    bar_json,
    bar_words,
    category_json,
    category_words,
    model_json,
    model_words,
    priced_json,
    priced_words,
)
from planc.record import record
from planc.run import RunEstimate, estimate_run
from planc.sends import boundary_names
from planc.spec.job import GB, GIB, matching_preset
from planc.vocab import DEFAULT_RECOMPUTE_MODULES

DAY = 86_400.0
TB = 10**12


@record
class Explanation:
    """An analysed job, its step estimate, and the whole run when the spec asks for it
    (training.tokens or steps, checkpoint, reliability or cost)."""

    analysis: Analysis
    step: StepEstimate
    run: RunEstimate | None = None
    ops: OpTable | None = None  # the step model's ops per kind of layer (explain --ops)


def explain(analysis: Analysis, ops: bool = False) -> Explanation:
    step = estimate_step(analysis)
    run = estimate_run(analysis, step) if analysis.plan.run.asked else None
    return Explanation(analysis, step, run, op_table(analysis.plan) if ops else None)


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
    lines += _fabric_lines(an)
    lines += ["", "traffic per step per rank (GB = 10^9 bytes; sent, received):"]
    fabric = job.cluster.fabric
    for wire in an.wires:
        tiers = "   ".join(
            f"{escape.line(tier.shown)} {_gb(wire.on(tier.name).sent)} / {_gb(wire.on(tier.name).received)}"
            for tier in fabric
        )
        lines.append(f"  stage {wire.stage:>3}: {tiers}")
    lines += _boundary_lines(an)
    lines += [
        "",
        "communication ops (stage 0; time per step on the link, latency and efficiency included):",
    ]
    for op in (o for o in an.ops if o.stage == 0):
        lines.append(
            f"  {op.group.value:<9} {op.op.value:<14} n={op.group_size:<5} {op.calls:>7} × {op.buffer_bytes / 2**20:10.2f} MiB "
            f"on {op.link:<7} {an.op_seconds[op]:8.3f} s  {op.phase}"
        )
    total = step.step_time_s
    lines += [
        "",
        _bubble_words(ex) + _simulated_line(ex),
        f"estimated step time: {_step_seconds(total)} s ({escape.line(step.model)}; {job.cluster.gpu.bf16_tflops:g} "
        "TFLOPS peak)",
        *_error_bar_line(job),
        *[f"  {c}" for c in caveats(job)],
        f"  compute:            {step.compute_s:8.2f} s ({step.compute_s / total:5.1%})  "
        f"incl. exposed TP {step.tp_comm_s:.3f} s",
        *_expert_line(ex),
        *_recompute_line(ex),
        *_accumulation_line(ex),
        *_offload_line(ex),
        f"  pipeline bubble:    {step.bubble_s:8.2f} s ({step.bubble_s / total:5.1%})  "
        f"of the step, incl. p2p on the path {step.pp_comm_s:.3f} s",
        *_flush_line(ex),
        f"  exposed DP comm:    {step.exposed_comm_s:8.2f} s ({step.exposed_comm_s / total:5.1%})  "
        "after backward and after the optimizer step",
        f"  optimizer step:     {step.optimizer_s:8.2f} s ({step.optimizer_s / total:5.1%})"
        + _muon_words(ex),
        f"tokens per second: {step.tokens_per_s:,.0f}   MFU: {step.mfu:.1%} "
        "(model FLOPs, no causal discount, no recompute)",
        *_overlap_lines(ex),
    ]
    if ex.run is not None:
        lines += ["", *run_lines(ex)]
    if ex.ops is not None:
        lines += ["", *op_lines(ex.ops)]
    return "\n".join(lines) + "\n"


def _step_seconds(total: float) -> str:
    """The step time to at least three significant figures: a 0.416 s step of a small model is
    not shown as 0.42, which is 1 % off before the model's own error."""
    places = 2 if total >= 1.0 or total <= 0.0 else 2 - math.floor(math.log10(total))
    return f"{total:.{places}f}"


def _groups_by_tier(an: Analysis) -> dict[str, list[str]]:
    """The group kinds whose ops run on each tier, in the order the schedule lists them."""
    out: dict[str, list[str]] = {tier.name: [] for tier in an.plan.cluster.fabric}
    for op in an.ops:
        if op.group.value not in out[op.link]:
            out[op.link].append(op.group.value)
    return out


def _tier_json(an: Analysis) -> list[dict[str, Any]]:
    """Each tier with its span, bandwidth, oversubscription, rails, the per-GPU bandwidth of a
    flat ring whose outermost tier it is, and the group kinds that run on it."""
    fabric = an.plan.cluster.fabric
    groups = _groups_by_tier(an)
    return [
        {
            "name": tier.name,
            "span": tier.span,
            "bandwidth_gbs": tier.bandwidth_gbs,
            "oversubscription": tier.oversubscription,
            "rail_aligned": tier.rail_aligned,
            "ring_bandwidth_gbs": ring_bandwidth_gbs(fabric, tier.name),
            "groups": groups[tier.name],
        }
        for tier in fabric
    ]


def _fabric_lines(an: Analysis) -> list[str]:
    """The fabric's tiers and the groups on each, for a fabric other than the plain two tiers."""
    fabric = an.plan.cluster.fabric
    if fabric.plain:
        return []
    lines = [
        "",
        "fabric (innermost first; each group kind runs on the first tier whose blocks hold it, "
        "a pipeline send on its pair of ranks'"
        + ("; PXN routes cross-rail over NVLink" if fabric.pxn else "")
        + "):",
    ]
    for tier in _tier_json(an):
        extra = []
        if tier["oversubscription"] != 1.0:
            extra.append(f"1:{tier['oversubscription']:g}")
        if tier["rail_aligned"]:
            extra.append("rail-aligned")
        groups = ", ".join(tier["groups"]) or "-"
        lines.append(
            f"  {escape.line(fabric.tier(tier['name']).shown):<12} {tier['span']:>9,} GPUs  "
            f"{tier['bandwidth_gbs']:8.2f} GB/s per GPU, a ring on it {tier['ring_bandwidth_gbs']:8.2f}  "
            f"{' '.join(extra):<16} {groups}"
        )
    return lines


def _duration(seconds: float) -> str:
    """Seconds as s, min, h or days, whichever reads best."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * DAY:
        return f"{seconds / 3600:.2f} h"
    return f"{seconds / DAY:,.1f} days"


def run_lines(ex: Explanation) -> list[str]:
    """The whole run: phases and steps, the checkpoint and its cost, failures and goodput,
    wall clock, GPU-hours, energy and cost."""
    run = ex.run
    if run is None:
        return []
    if not run.phases:
        return [
            "the run: no length given (training.tokens or training.steps); per checkpoint:",
            *_checkpoint_lines(ex),
        ]
    lines = [
        f"the run: {run.tokens:,} tokens in {run.steps:,} steps; 6·N·D = {run.six_nd_flops:.3g} "
        f"FLOPs (N all parameters), planc's model FLOPs {run.model_flops:.3g}",
    ]
    for i, phase in enumerate(run.phases, 1):
        note = f" (B rounded up to {phase.m} micro-batches per rank)" if phase.rounded else ""
        lines.append(
            f"  phase {i}: global batch {phase.B:,} for {phase.tokens:,} tokens: "
            f"{phase.steps:,} steps × {phase.step_time_s:.3f} s = {_duration(phase.compute_s)}{note}"
        )
    lines.append(f"  compute without interruptions: {_duration(run.compute_s)}")
    lines += _checkpoint_lines(ex)
    lines.append(
        f"wall clock: {_duration(run.wall_s)}   GPU-hours: {run.gpu_hours:,.0f}" + _priced(ex)
    )
    return lines


def _priced(ex: Explanation) -> str:
    run, cost = ex.run, ex.analysis.plan.run.cost
    if run is None or cost is None:
        return ""
    out = ""
    if run.energy_kwh is not None:
        out += f"   energy: {run.energy_kwh:,.0f} kWh ({cost.gpu_power_w:g} W per GPU, PUE {cost.pue:g})"
    if run.cost is not None:
        out += f"   cost: {run.cost:,.0f} ({cost.price_per_gpu_hour:g} per GPU-hour)"
    return out


def _checkpoint_lines(ex: Explanation) -> list[str]:
    run, given = ex.run, ex.analysis.plan.run
    ckpt = None if run is None else run.checkpoint
    if ckpt is None or given.checkpoint is None or given.storage is None:
        return ["  failures not priced: add checkpoint: and hardware.storage for goodput"]
    spec, storage, size = given.checkpoint, given.storage, ckpt.size
    how = "asynchronous" if spec.async_save else "synchronous"
    fully = (
        ", fully parallel save" if spec.fully_parallel and spec.format == "megatron-dist" else ""
    )
    node_bw = (
        "" if storage.node_write_gbs is None else f", {storage.node_write_gbs:g} GB/s per node"
    )
    blocking = (
        f"blocks {_duration(ckpt.blocking_s)} (copy to pinned host memory, "
        f"{ckpt.host_bytes_per_node / GIB:,.1f} GiB per node), writes {_duration(ckpt.background_s)} "
        "in the background"
        if spec.async_save
        else f"blocks {_duration(ckpt.blocking_s)}"
    )
    lines = [
        f"checkpoint ({spec.format}{fully}): {size.total_bytes / TB:,.3f} TB "
        f"({size.total_bytes / ex.analysis.memory.parameters:.1f} bytes per parameter), "
        f"{size.rank_bytes / GB:,.2f} GB from the busiest rank, {size.node_bytes / GB:,.2f} GB per node",
        f"  save ({how}; {storage.write_gbs:g} GB/s aggregate{node_bw}): {blocking}; "
        f"load at a restart {_duration(ckpt.load_s)}",
        f"failures: job MTBF {_duration(ckpt.mtbf_s)} ({ex.analysis.plan.world:,} GPUs at "
        f"{given.reliability.gpu_mtbf_hours:,.0f} h each); restart {_duration(ckpt.restart_s)} "
        "with the load",
        f"  interval: {ckpt.interval_steps:,} steps = {_duration(ckpt.interval_s)} "
        f"(Daly's optimum {_duration(ckpt.optimal_s)}, Young's {_duration(ckpt.young_s)})"
        + (f"; {ckpt.saves:,} saves" if run is not None and run.steps else ""),
        f"  goodput: {ckpt.goodput:.1%} (at the optimal interval {ckpt.optimal_goodput:.1%})",
    ]
    if spec.model_only_exports:
        lines.append(
            f"  model-only exports: {spec.model_only_exports:,} × {size.model_only_bytes / GB:,.1f} GB, "
            f"{_duration(ckpt.export_s)} each"
        )
    return lines


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
        f"{job.cluster.gpu.peak_tflops(q.gemm) or 0:,g} TFLOPS dense on {q.architecture}"
        + _rate_words(q.gemm_rate)
        + f"); weights, activations and gradients {job.numerics.precision.value}; "
        f"per GEMM weight {kept}"
    )
    if q.gather_fp8:
        words += f", gathered in {q.label}"
    if q.bf16_layers:
        words += f"; the first and last {q.bf16_layers} layer(s) in BF16"
    if q.attention is not None:
        words += f"; the attention core in fp8 (recipe {q.attention.recipe.value}, cuDNN)"
    return [words]


def _rate_words(rate: float) -> str:
    """The recipe's GEMM kernel rate where it is not a per-tensor-scaled GEMM's."""
    if rate == 1.0:
        return ""
    return f", its block-scaled GEMMs at {rate:g} of a per-tensor-scaled GEMM's rate"


def _expert_line(ex: Explanation) -> list[str]:
    """The MoE layers' expert exchanges, part of compute (Megatron-Core runs them between the
    router and the experts, serialised); nothing for a dense model."""
    step = ex.step
    if ex.analysis.plan.model.moe is None:
        return []
    share = step.ep_comm_s / step.step_time_s if step.step_time_s else 0.0
    dispatcher = ex.analysis.plan.layout.dispatcher
    if step.ep_hidden_s > 0:
        return [
            f"  expert all-to-all:  {step.ep_comm_s:8.2f} s ({share:5.1%})  "
            f"inside compute: EP dispatch and combine ({dispatcher} dispatcher) left exposed; "
            f"{step.ep_hidden_s:.2f} s more hidden behind the paired forward or backward",
            *_expert_host_line(ex),
        ]
    gathers = "; and ETP gathers" if dispatcher == "alltoall" else ""
    return [
        f"  expert all-to-all:  {step.ep_comm_s:8.2f} s ({share:5.1%})  "
        f"inside compute: EP dispatch and combine ({dispatcher} dispatcher{gathers}), "
        "not overlapped",
        *_expert_host_line(ex),
    ]


def _recompute_line(ex: Explanation) -> list[str]:
    """The forward recompute runs again inside the backward, when it runs any."""
    step, tr = ex.step, ex.analysis.plan.training
    if step.recompute_s <= 0:
        return []
    share = step.recompute_s / step.step_time_s if step.step_time_s else 0.0
    if tr.recompute == "full":
        what = "every layer's forward"
    elif tr.recompute == "selective-op":
        what = "the ops torchtitan's per-op policy does not save"
    else:
        what = f"the forward of each layer's {module_words(tr.recompute_modules)}"
    modules = f", recompute_modules: [{', '.join(tr.recompute_modules)}]" if (
        tr.recompute == "selective" and tr.recompute_modules != DEFAULT_RECOMPUTE_MODULES
    ) else ""
    return [
        f"  recompute:          {step.recompute_s:8.2f} s ({share:5.1%})  "
        f"inside compute: {what} again in backward (recompute: {tr.recompute}{modules})"
    ]


def _expert_host_line(ex: Explanation) -> list[str]:
    """The release's time per local expert (`planc.perf.expert_host`), when it has one."""
    step, plan = ex.step, ex.analysis.plan
    experts = plan.dims.experts
    if step.expert_host_s <= 0 or experts is None:
        return []
    share = step.expert_host_s / step.step_time_s if step.step_time_s else 0.0
    tau = tau_e(plan, ex.analysis.efficiency)
    recipe = plan.training.fp8_recipe
    return [
        f"  expert host time:   {step.expert_host_s:8.2f} s ({share:5.1%})  "
        f"inside compute: {tau * 1e3:.3g} ms per local expert × {experts.E // experts.ep} "
        f"experts per MoE layer and micro-batch ({plan.training.framework_release}, "
        f"{recipe.value if recipe is not None else 'bf16'} experts; "
        "planc/presets/releases.json)"
    ]


def _muon_words(ex: Explanation) -> str:
    """Muon's part of the optimizer step (`planc.perf.inputs.muon_times`), stage 0's rank."""
    plan = ex.analysis.plan
    times = muon_times(plan, efficiency_of(plan), 0)
    if times is None:
        return ""
    tr = plan.training
    return (
        f"  incl. Muon's {tr.muon_ns_steps} Newton-Schulz steps {times.step.ns_s:.3f} s "
        f"({times.step.ns_flops / 1e12:,.1f} TFLOP on this rank's share of the matrices, TP mode "
        f"{tr.muon_tp_mode}) and their TP exchanges {times.exchange_s:.3f} s"
    )


def _offload_line(ex: Explanation) -> list[str]:
    """The activation copies of offload.activations (`planc.perf.offload`): what each copy
    takes on the host link, and what the passes wait on them."""
    plan = ex.analysis.plan
    layers = offloaded_layers(plan)
    if not layers:
        return []
    moved = offloaded_layer_bytes(plan)
    link = plan.cluster.host_bandwidth_gbs
    wait = ex.step.offload_wait_s
    share = wait / ex.step.step_time_s if ex.step.step_time_s else 0.0
    return [
        f"  activation offload: {wait:8.2f} s ({share:5.1%})  inside compute: {layers} layers' "
        f"activations, {moved / 1e9:.2f} GB a layer and micro-batch each way at {link:g} GB/s "
        f"({moved / (link * 1e9) * 1e3:.1f} ms a copy), beside the next layers' compute; what "
        "the passes wait on them"
    ]


def accumulation_s(ex: Explanation) -> tuple[int, float]:
    """The busiest stage and its seconds per step of gradient accumulation outside the GEMMs
    (`planc.perf.grad_accum`), part of its compute."""
    inputs = _step_inputs(ex)
    stage = busiest_stage(inputs)
    return stage, ex.analysis.plan.m * inputs.stages[stage].accumulate_s


def _accumulation_line(ex: Explanation) -> list[str]:
    """The gradient accumulation inside compute, where the engine adds every gradient outside
    the GEMMs (Megatron's fusion leaves only the input embedding's, not shown)."""
    job = ex.analysis.plan
    path = accumulation(job)
    if path is None or not path.whole:
        return []
    _, seconds = accumulation_s(ex)
    total = ex.step.step_time_s
    share = seconds / total if total else 0.0
    return [
        f"  grad accumulation:  {seconds:8.2f} s ({share:5.1%})  inside compute: "
        f"{path.bytes_per_parameter} bytes per parameter on {path.passes} of {job.m} "
        "micro-batches, outside the GEMMs"
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
        f"; stages idle, with each stage's own times and the p2p time ({how}): "
        f"{pipe.bubble_fraction:.2%} of the pipeline's {pipe.makespan_s:.2f} s"
    )


def _flush_line(ex: Explanation) -> list[str]:
    """The deferred LM-head weight gradients (training.defer_embedding_wgrad_compute): what of
    them the pipeline's flush does not hide, with what they take in all."""
    job = ex.analysis.plan
    holder = job.layout.last_stage
    k, n = deferred_calls(job, holder)
    if k == 0:
        return []
    step = ex.step
    total = step.step_time_s
    return [
        f"  deferred LM-head wgrad: {step.flush_s:5.2f} s ({step.flush_s / total:5.1%})  "
        f"beyond the pipeline's flush: {k:,} of the {n:,} weight gradients of stage {holder} "
        "run after its last backward (defer_embedding_wgrad_compute)"
    ]


def _mixed_boundaries(an: Analysis) -> tuple[str, ...]:
    """Each pipeline boundary's tier (`planc.sends.boundary_names`) where they are not all one;
    else none: then every send is on the pipeline groups' own tier, as the ops list shows."""
    names = boundary_names(an.plan)
    return names if len(set(names)) > 1 else ()


def _boundary_lines(an: Analysis) -> list[str]:
    """Which tier each pipeline boundary's sends cross, when they differ."""
    names = _mixed_boundaries(an)
    if not names:
        return []
    shown = ", ".join(f"{i} → {(i + 1) % len(names)} {name}" for i, name in enumerate(names))
    return [f"  pipeline sends cross, by boundary (stage → stage): {shown}"]


def _bubble_words(ex: Explanation) -> str:
    """The schedule's closed-form bubble fraction, in its formula (the simulated one with equal
    stages for a schedule without a closed form). Named apart from the step's bubble seconds below
    it and the stages' simulated idle share, as the report names the three."""
    formula = definition(ex.analysis.plan.layout.schedule).bubble_formula
    shown = f"{formula} = " if formula is not None else "with equal stages (simulated) "
    return f"bubble fraction by the schedule: {shown}{ex.step.bubble_fraction:.2%}"


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
        **({} if job.cluster.fabric.plain else {"fabric": _tier_json(an)}),
        "bubble_fraction": step.bubble_fraction,
        "pipeline": {
            "makespan_s": step.pipeline.makespan_s,
            "bubble_fraction": step.pipeline.bubble_fraction,
            "method": step.pipeline.method,
            "simulated_ops": step.pipeline.simulated_ops,
            **(
                {"boundary_tiers": list(_mixed_boundaries(an))}
                if _mixed_boundaries(an)
                else {}
            ),
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
            **({"ep_hidden_s": step.ep_hidden_s} if step.ep_hidden_s > 0 else {}),
            **({"expert_host_s": step.expert_host_s} if step.expert_host_s > 0 else {}),
            **({"recompute_s": step.recompute_s} if step.recompute_s > 0 else {}),
            **({"flush_s": step.flush_s} if step.flush_s > 0 else {}),
            **_accumulation_json(ex),
            "pp_comm_s": step.pp_comm_s,
            "tokens_per_s": step.tokens_per_s,
            "mfu": step.mfu,
            "model": step.model,
            "model_flops": step.model_flops,
            "model_error": bar_json(job.cluster.gpu.name, job.cluster.calibration),
            "model_error_category": category_json(
                _category(job), job.cluster.calibration, job.cluster.gpu.name
            ),
            "model_error_preset": model_json(
                matching_preset(job.model, job.training.s), job.cluster.calibration
            ),
            "model_error_priced": None
            if unpriced_of(job)
            else priced_json(job.cluster.calibration),
            "caveats": list(caveats(job)),
            "communication_overlap": _overlap_json(ex),
        },
        **({} if ex.run is None else {"run": run_json(ex.run)}),
        **({} if ex.ops is None else {"ops": op_json(ex.ops)}),
    }


def _accumulation_json(ex: Explanation) -> dict[str, Any]:
    """grad_accum_s: the busiest stage's gradient accumulation per step, when it has any."""
    _, seconds = accumulation_s(ex)
    return {"grad_accum_s": seconds} if seconds > 0 else {}


def run_json(run: RunEstimate) -> dict[str, Any]:
    """The whole run as plain data (seconds, bytes as integers, kWh, the spec's currency)."""
    ckpt = run.checkpoint
    return {
        "tokens": run.tokens,
        "steps": run.steps,
        "phases": [
            {
                "global_batch": p.B,
                "tokens": p.tokens,
                "steps": p.steps,
                "step_time_s": p.step_time_s,
                "micro_batches": p.m,
            }
            for p in run.phases
        ],
        "compute_s": run.compute_s,
        "wall_s": run.wall_s,
        "gpu_hours": run.gpu_hours,
        "energy_kwh": run.energy_kwh,
        "cost": run.cost,
        "six_nd_flops": run.six_nd_flops,
        "model_flops": run.model_flops,
        "goodput": run.goodput,
        "checkpoint": None
        if ckpt is None
        else {
            "total_bytes": ckpt.size.total_bytes,
            "rank_bytes": ckpt.size.rank_bytes,
            "node_bytes": ckpt.size.node_bytes,
            "model_only_bytes": ckpt.size.model_only_bytes,
            "save_s": ckpt.save_s,
            "blocking_s": ckpt.blocking_s,
            "background_s": ckpt.background_s,
            "load_s": ckpt.load_s,
            "restart_s": ckpt.restart_s,
            "mtbf_s": ckpt.mtbf_s,
            "optimal_interval_s": ckpt.optimal_s,
            "young_interval_s": ckpt.young_s,
            "interval_steps": ckpt.interval_steps,
            "interval_s": ckpt.interval_s,
            "optimal_goodput": ckpt.optimal_goodput,
            "saves": ckpt.saves,
            "export_s": ckpt.export_s,
            "host_bytes_per_node": ckpt.host_bytes_per_node,
        },
    }


def _step_inputs(ex: Explanation) -> StepInputs:
    """The inputs the step model composed for the explained job (`build_inputs`)."""
    an = ex.analysis
    params = [share.total for share in an.parameters]
    experts = [share.expert_total for share in an.parameters]
    return build_inputs(an.plan, params, experts, an.efficiency, an.ops)


def communication_overlap(ex: Explanation) -> tuple[int, tuple[Overlap, ...]]:
    """The busiest stage and what each class of its communication hid behind compute and left
    exposed in one step, from the inputs the step model composes (`planc.perf.step.overlaps`)."""
    an = ex.analysis
    inputs = _step_inputs(ex)
    stage = busiest_stage(inputs)

    def total(group: str) -> float:
        return sum(an.op_seconds[op] for op in an.ops if op.stage == stage and op.group == group)

    found = overlaps(inputs, stage, total("pp"), ex.step.pp_comm_s, ex.step.pipeline.alone)
    return stage, found


def _overlap_lines(ex: Explanation) -> list[str]:
    stage, found = communication_overlap(ex)
    if not found:
        return []
    lines = [f"communication hidden and exposed (stage {stage}, seconds per step):"]
    for o in found:
        lines.append(
            f"  {o.kind:<3} hidden {o.hidden_s:8.3f} s behind {o.behind:<32} "
            f"exposed {o.exposed_s:8.3f} s"
            + (f"  (slows that compute {o.slowdown_s:.3f} s)" if o.slowdown_s > 0 else "")
        )
    return lines


def _overlap_json(ex: Explanation) -> dict[str, Any]:
    stage, found = communication_overlap(ex)
    return {
        "stage": stage,
        "classes": [
            {
                "kind": o.kind,
                "behind": o.behind,
                "hidden_s": o.hidden_s,
                "exposed_s": o.exposed_s,
                "slowdown_s": o.slowdown_s,
            }
            for o in found
        ],
    }


def _category(job: Plannable) -> str:
    """The corpus category of the spec's layout (`planc.perf.validation.category_of`)."""
    sharded = sharding_stage(job) == 3
    return str(category_of(job.model.moe is not None, sharded, job.layout.p, job.layout.c))


def error_bar_words(job: Plannable) -> tuple[str, ...]:
    """The model's error on runs it was not fitted to, for this GPU, for runs of this
    layout's category on this GPU's generation (on every generation where it has few) and for
    runs of this model preset where enough are validated, and, where the run has none of the
    costs planc knows it leaves out (`caveats`), for the runs that have none; the user's own
    with a calibration."""
    cal = job.cluster.calibration
    words = bar_words(job.cluster.gpu.name, cal)
    category = category_words(_category(job), cal, job.cluster.gpu.name)
    preset = model_words(matching_preset(job.model, job.training.s), cal)
    priced = "" if unpriced_of(job) else priced_words(cal)
    return tuple(w for w in (words, category, preset, priced) if w)


def caveats(job: Plannable) -> tuple[str, ...]:
    """What the estimate leaves out that this run is likely to spend (`planc.perf.unpriced`),
    each with planc's error on the validated runs that have it where there are enough: host
    time where no CUDA graph of a Megatron MoE run holds its routed experts (each MoE layer waits
    on the host for its tokens per expert, so the kernels after it start only as fast as Python
    launches them), torchao's rowwise GEMMs, torch's ring attention at CP 4 and more."""
    return tuple(f"not priced: {said(mechanism)}" for mechanism in unpriced_of(job))


def _error_bar_line(job: Plannable) -> list[str]:
    return [f"  {w} (docs/validation.md)" for w in error_bar_words(job)]
