"""Render a memory budget: a table per pipeline stage (text) or the same numbers as JSON.

Units are labelled wherever a number is: GiB = 2^30 bytes, GB = 10^9 bytes; JSON bytes are ints.
"""

from __future__ import annotations

from typing import Any

from planc.dims import ceil_div, padded_vocab
from planc.memory.activations import offloaded_layers
from planc.memory.budget import MemoryBudget, StageBudget, node_host_bytes
from planc.memory.terms import COMPONENTS
from planc.plannable import Plannable
from planc.spec.job import GB, GIB

BAR_WIDTH = 40


def _gib(n: int) -> str:
    return f"{n / GIB:,.2f}"


def _bar(total: int, hbm: int, usable: int) -> str:
    """`[█████·····|···]` the total against HBM; `|` marks the usable limit (HBM − headroom)."""
    filled = min(BAR_WIDTH, round(BAR_WIDTH * total / hbm)) if hbm else BAR_WIDTH
    limit = min(BAR_WIDTH - 1, int(BAR_WIDTH * usable / hbm)) if hbm else BAR_WIDTH - 1
    cells = ["█" if i < filled else "·" for i in range(BAR_WIDTH)]
    if limit >= filled:
        cells[limit] = "|"
    overflow = " OVER" if total > hbm else ""
    return "[" + "".join(cells) + "]" + overflow


def _symbols(job: Plannable) -> str:
    mod, lay, tr = job.model, job.layout, job.training
    pairs = (
        ("L", mod.L),
        ("h", mod.h),
        ("n=a", mod.n),
        ("g", mod.g),
        ("k", mod.k),
        ("f", mod.f),
        ("ν", 2 if mod.norm == "layernorm" else 1),
        ("V'", padded_vocab(mod.V, lay.t)),
        ("s", tr.s),
        ("b", tr.b),
        ("m", job.m),
        ("t", lay.t),
        ("p", lay.p),
        ("v", lay.v),
        ("c", lay.c),
        ("d", lay.d),
        ("N=d·c" if lay.replicas == 1 else "N=data_shard", lay.shard_group),
        *((("R", lay.replicas),) if lay.replicas > 1 else ()),
        ("ZeRO", "3 (fully_shard)" if job.training.framework == "fsdp2" else lay.zero),
        *_expert_symbols(job),
    )
    return "  ".join(f"{name}={value}" for name, value in pairs)


def _expert_symbols(job: Plannable) -> tuple[tuple[str, object], ...]:
    """The mixture-of-experts symbols of the formulas (none for a dense model)."""
    moe, lay = job.model.moe, job.layout
    if moe is None:
        return ()
    pairs: tuple[tuple[str, object], ...] = (
        ("E", moe.E),
        ("topk", moe.k),
        ("f_e", moe.f_e),
        ("EP", lay.ep),
        ("ETP", lay.et),
        ("EDP", lay.edp),
        ("N_e=EDP/R", lay.expert_shard_group),
        ("T", job.tokens_per_sp_rank * job.training.b),
    )
    if moe.E_s:
        pairs += (("E_s", moe.E_s), ("f_s", moe.f_s))
    if moe.capacity_factor is not None:
        pairs += (("CF", moe.capacity_factor),)
    return pairs


FRAMEWORKS = {
    "megatron": "Megatron-Core (distributed optimizer, contiguous gradient buffer)",
    "deepspeed": "DeepSpeed ZeRO",
    "fsdp2": "PyTorch FSDP2 (fully_shard)",
    "megatron-fsdp": "Megatron-Core's FSDP (--use-megatron-fsdp; ZeRO stage = its sharding strategy)",
}
KERNELS = {
    "fused": "fused (Megatron-Core with Transformer Engine/Apex)",
    "unfused": "unfused (plain PyTorch modules on CUDA)",
    "compiled": "compiled (torch.compile'd blocks; activations counted as fused)",
}


def offloaded(job: Plannable) -> list[str]:
    """What `training.offload` moves to host memory, by name."""
    tr = job.training
    names = [
        name
        for name, on in (("optimizer", tr.offload_optimizer), ("parameters", tr.offload_parameters))
        if on
    ]
    layers = offloaded_layers(job)
    if layers:
        names.append(f"activations ({layers} layers)")
    return names


def stack_line(job: Plannable) -> str:
    """The engine and kernels the budget models, and what is offloaded."""
    tr = job.training
    reshard = (
        f", reshard_after_forward={str(tr.reshard_after_forward).lower()}, "
        f"reduce_dtype={tr.reduce_dtype}"
        if tr.framework == "fsdp2"
        else ""
    )
    return (
        f"Modelled stack: framework {tr.framework_written}: {FRAMEWORKS[tr.framework_written]}{reshard}; kernels "
        f"{KERNELS[tr.kernels]}; offload: {', '.join(offloaded(job)) or 'none'}."
    )


def _stage_table(
    job: Plannable, stage: StageBudget, notes: dict[str, int], peak: bool
) -> list[str]:
    mem = stage.memory
    hbm, usable = job.cluster.gpu.memory_bytes, job.usable_hbm_bytes
    layers = job.layout.stage_layers[stage.stage]
    head = (
        f"Stage {stage.stage} (rank {stage.rank}, L_r={layers} layers){'  ← peak' if peak else ''}: "
        f"{_gib(mem.total)} GiB of {_gib(hbm)} GiB HBM ({100 * mem.total / hbm:.1f} %)"
    )
    lines = [head, "  " + _bar(mem.total, hbm, usable)]
    name_width = max([len(t.name) for t in mem.terms] + [24])
    lines.append(
        f"  {'term':<{name_width}}  {'component':<11} {'GiB':>9} {'share':>7}  formula [source]"
    )
    for term in mem.terms:
        note = notes.setdefault(term.source, len(notes) + 1)
        share = 100 * term.bytes / mem.total if mem.total else 0.0
        lines.append(
            f"  {term.name:<{name_width}}  {term.component:<11} {_gib(term.bytes):>9} {share:6.1f} %"
            f"  {term.formula} [{note}]"
        )
    sums = "  ".join(f"{name} {_gib(getattr(mem, name))}" for name in COMPONENTS)
    lines.append(f"  {'total':<{name_width}}  {'':<11} {_gib(mem.total):>9} {100.0:6.1f} %")
    lines.append(f"  by component (GiB): {sums}")
    if mem.host_terms:
        lines.append(f"  offloaded to host memory: {_gib(mem.host)} GiB")
        for term in mem.host_terms:
            note = notes.setdefault(term.source, len(notes) + 1)
            lines.append(
                f"  {term.name:<{name_width}}  {'host':<11} {_gib(term.bytes):>9}  "
                f"{term.formula} [{note}]"
            )
    return lines


def render_text(job: Plannable, b: MemoryBudget) -> str:
    """A table per pipeline stage: every term in GiB with its share and formula, and a bar of
    the stage's total against HBM (`|` marks HBM × (1 − memory_headroom))."""
    hbm, usable = job.cluster.gpu.memory_bytes, job.usable_hbm_bytes
    lines = [
        f"Memory budget for {job.name!r}: the heaviest rank of each pipeline stage",
        f"Units: GiB = 2^30 bytes, GB = 10^9 bytes. HBM {job.cluster.gpu.name}: {_gib(hbm)} GiB "
        f"({hbm / GB:,.2f} GB); usable with {job.rules.options['memory_headroom']:.0%} headroom: "
        f"{_gib(usable)} GiB.",
        f"Parameters: {b.parameters:,}; with the vocabulary padded to a multiple of 128·t: "
        f"{b.parameters_padded:,}.",
        f"Symbols: {_symbols(job)}",
        stack_line(job),
        "",
    ]
    notes: dict[str, int] = {}
    for stage in b.stages:
        lines += _stage_table(job, stage, notes, stage is b.peak)
        lines.append("")
    verdict = "fits" if b.peak.memory.total <= usable else "does NOT fit"
    lines.append(
        f"Peak: stage {b.peak.stage} (rank {b.peak.rank}) needs {_gib(b.peak.memory.total)} GiB "
        f"({b.peak.memory.total / GB:,.2f} GB): {verdict} in {_gib(usable)} GiB usable."
    )
    moe = job.model.moe
    if moe is not None:
        lay = job.layout
        rows = (
            f"at most E·⌈T·topk/E·CF⌉·ETP (capacity factor CF = {moe.capacity_factor:g})"
            if moe.capacity_factor is not None
            else f"T·topk·ETP·α (dropless, α = training.expert_imbalance = "
            f"{job.training.expert_imbalance:g})"
        )
        lines.append(
            f"Experts: each rank holds E/EP = {moe.E // lay.ep} routed expert(s) of every MoE "
            f"layer (f_e/ETP = {ceil_div(moe.f_e, lay.et):,} wide), their gradients and optimizer "
            f"state sharded over N_e = EDP/R = {lay.expert_shard_group}; a MoE layer's experts "
            f"receive R = {rows} rows of the T = ⌈s/c⌉·b tokens entering it on each rank (/t "
            "with sequence parallelism)."
        )
    if any(stage.memory.host_terms for stage in b.stages):
        host = node_host_bytes(job, b)
        have = job.cluster.host_memory_bytes
        lines.append(
            f"Host memory per node: {host / GB:,.2f} GB offloaded ({job.cluster.gpus_per_node} GPUs × "
            f"the heaviest rank's {max(s.memory.host for s in b.stages) / GB:,.2f} GB) of "
            f"{have / GB:,.2f} GB (hardware.host_memory_gb; PLC021)."
        )
    lines.append("")
    lines.append("Sources:")
    lines += [f"  [{number}] {source}" for source, number in notes.items()]
    return "\n".join(lines) + "\n"


def to_json(job: Plannable, b: MemoryBudget) -> dict[str, Any]:
    """The same numbers as `render_text`, bytes as ints."""
    return {
        "name": job.name,
        "units": "bytes",
        "hbm_bytes": job.cluster.gpu.memory_bytes,
        "usable_bytes": job.usable_hbm_bytes,
        "parameters": b.parameters,
        "parameters_padded": b.parameters_padded,
        "peak": {"stage": b.peak.stage, "rank": b.peak.rank, "total": b.peak.memory.total},
        "stack": {
            "framework": job.training.framework_written,
            "kernels": job.training.kernels,
            "offload": offloaded(job),
        },
        "host_memory_bytes": job.cluster.host_memory_bytes,
        "host_bytes_per_node": node_host_bytes(job, b),
        "stages": [
            {
                "stage": stage.stage,
                "rank": stage.rank,
                "layers": job.layout.stage_layers[stage.stage],
                **{name: getattr(stage.memory, name) for name in COMPONENTS},
                "total": stage.memory.total,
                "host": stage.memory.host,
                "host_terms": [
                    {
                        "name": term.name,
                        "bytes": term.bytes,
                        "formula": term.formula,
                        "source": term.source,
                    }
                    for term in stage.memory.host_terms
                ],
                "terms": [
                    {
                        "name": term.name,
                        "component": term.component,
                        "bytes": term.bytes,
                        "formula": term.formula,
                        "source": term.source,
                    }
                    for term in stage.memory.terms
                ],
            }
            for stage in b.stages
        ],
    }
