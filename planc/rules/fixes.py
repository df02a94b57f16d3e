"""Computed fixes for the resource rules: single changes to a spec, each verified with planc's
own model before a rule prints it.

Each kind lists its variants from the smallest change to the largest, and along every list the
resource the rule checks never grows (a smaller micro-batch, more recompute, a higher ZeRO stage,
a larger shard group or more nodes needs no more memory per rank), so `first_fit` bisects it:
a few analyses settle a list however long it is.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from planc.analysis import Analysis, analyse
from planc.plannable import plannable
from planc.rules.layout import sequence_splits
from planc.spec.job import Job, NodeNames
from planc.vocab import (
    DEFAULT_RECOMPUTE_MODULES,
    RECOMPUTE_MODES,
    SELECTIVE_OP,
    RecomputeModule,
)

# More nodes at the same layout are tried up to this factor (ZeRO shards over a larger group).
MAX_NODE_FACTOR = 64

Variant = tuple[str, Job]  # the change in the spec's words, and the job after it
Verdict = Callable[[Analysis], str | None]  # what the variant shows when it passes, else None


def analysis_of(job: Job) -> Analysis | None:
    """The analysis of a variant of the job, or None when the variant has no plan."""
    plan = plannable(job)
    return None if isinstance(plan, tuple) else analyse(plan)


def first_fit(candidates: list[Variant], verdict: Verdict) -> str | None:
    """The first candidate that passes, with what it shows, by bisection (see the module)."""
    lo, hi, best = 0, len(candidates) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        words, variant = candidates[mid]
        analysis = analysis_of(variant)
        shown = None if analysis is None else verdict(analysis)
        if shown is not None:
            best, hi = f"{words} ({shown})", mid - 1
        else:
            lo = mid + 1
    return best


def verified(
    job: Job, kinds: tuple[Callable[[Job], list[Variant]], ...], verdict: Verdict
) -> list[str]:
    """The first passing change of each kind, smallest change first."""
    return [hit for kind in kinds if (hit := first_fit(kind(job), verdict)) is not None]


def _divisors_below(n: int, limit: int) -> list[int]:
    """Divisors of n below limit, largest first; trial division stops at 2^20 so a huge batch
    costs at most a million steps (its larger divisors past that are not offered)."""
    found: set[int] = set()
    for q in range(1, min(math.isqrt(n), 1 << 20) + 1):
        if n % q == 0:
            found.update((q, n // q))
    return sorted((x for x in found if x < limit), reverse=True)


def micro_batch(job: Job) -> list[Variant]:
    """Smaller micro-batches that still divide the global batch over the data ranks, largest
    first (the fewest extra micro-batches)."""
    tr, d = job.training, job.layout.d or 1
    return [
        (f"micro_batch: {b}", dataclasses.replace(job, training=dataclasses.replace(tr, b=b)))
        for b in _divisors_below(tr.B // d, tr.b)
    ]


# The modules a fix adds to Megatron's selective recompute, one at a time, in this order: what
# costs least to run again first (the attention core, the latent up projections, the experts'
# activation, the separate norms), the MLPs last; never the whole MoE block, whose recompute
# runs the expert exchange again.
FIX_MODULES: tuple[RecomputeModule, ...] = (
    "core_attn", "mla_up_proj", "moe_act", "layernorm", "shared_experts", "mlp"
)


def _applies(job: Job, module: RecomputeModule) -> bool:
    """Whether recomputing `module` drops anything of the job's model."""
    model = job.model
    moe = model.moe
    return {
        "core_attn": True,
        "mla_up_proj": model.mla is not None,
        "moe_act": moe is not None,
        "layernorm": model.mla is not None or moe is not None,
        "shared_experts": moe is not None and moe.E_s > 0,
        "mlp": moe is None or moe.moe_layers_between(0, model.L) < model.L,
    }.get(module, False)


def _module_variants(job: Job) -> list[Variant]:
    """Megatron's selective recompute with one more module at a time (`FIX_MODULES`), from what
    the spec recomputes."""
    tr = job.training
    chosen = list(tr.recompute_modules) if tr.recompute == "selective" else []
    out: list[Variant] = []
    for module in FIX_MODULES:
        if module in chosen or not _applies(job, module):
            continue
        chosen.append(module)
        modules = tuple(chosen)
        training = dataclasses.replace(
            tr, recompute="selective", recompute_modules=modules, recompute_modules_given=modules
        )
        words = "recompute: selective"
        if modules != DEFAULT_RECOMPUTE_MODULES:
            words += f", recompute_modules: [{', '.join(modules)}]"
        out.append((words, dataclasses.replace(job, training=training)))
    return out


def recompute(job: Job) -> list[Variant]:
    """More recompute: under Megatron-LM selective recompute of one more module at a time, then
    full; elsewhere the next modes."""
    order = RECOMPUTE_MODES
    current = job.training.recompute
    # torchtitan's per-op policy keeps less than selective: only full recomputes more.
    start = order.index("full") if current == SELECTIVE_OP else order.index(current) + 1
    megatron = job.training.framework == "megatron" and current in ("none", "selective")
    modes = ("full",) if megatron else order[start:]
    return (_module_variants(job) if megatron else []) + [
        (
            f"recompute: {mode}",
            dataclasses.replace(job, training=job.training.with_recompute(mode)),
        )
        for mode in modes
    ]


def sequence_parallel(job: Job) -> list[Variant]:
    lay = job.layout
    if lay.t == 1 or lay.sp or not sequence_splits(job):
        return []
    return [
        (
            "sequence_parallel: true",
            dataclasses.replace(job, layout=dataclasses.replace(lay, sp=True)),
        )
    ]


def zero_stage(job: Job) -> list[Variant]:
    """Higher ZeRO stages; with a pipeline only up to 1, since ZeRO-2/3 there is what PLC011
    warns of (DeepSpeed's pipeline engine refuses it), and a fix must not trade one finding for
    another."""
    lay = job.layout
    if (lay.d or 1) * lay.c == 1:
        return []
    top = 3 if lay.p == 1 else 1
    return [
        (
            f"zero_stage: {stage}",
            dataclasses.replace(job, layout=dataclasses.replace(lay, zero=stage)),
        )
        for stage in range(lay.zero + 1, top + 1)
    ]


def nodes(job: Job) -> list[Variant]:
    """More nodes at this layout: the data degree grows, and ZeRO shards over more ranks."""
    cl, lay, tr = job.cluster, job.layout, job.training
    if lay.d is None or lay.zero == 0:
        return []
    found = []
    for factor in (2**k for k in range(1, MAX_NODE_FACTOR.bit_length())):
        d = lay.d * factor
        if tr.B % (tr.b * d) == 0:
            count = cl.nodes * factor
            cluster = dataclasses.replace(cl, nodes=count, hosts=NodeNames(count))
            variant = dataclasses.replace(
                job, cluster=cluster, layout=dataclasses.replace(lay, d=d)
            )
            found.append((f"nodes: {count} (data {d}; list {count} hosts)", variant))
    return found


def data_shard(job: Job) -> list[Variant]:
    """Larger ZeRO/FSDP shard groups (HSDP's shard degree), up to all of data × context."""
    lay = job.layout
    if lay.data_shard is None or lay.d is None:
        return []
    group = lay.d * lay.c
    return [
        (
            f"data_shard: {n}",
            dataclasses.replace(job, layout=dataclasses.replace(lay, data_shard=n)),
        )
        for n in sorted(_divisors_below(group, group + 1))
        if n > lay.data_shard and n % lay.data_shard == 0
    ]


# A whole layout is looked for among at most this many (tensor, pipeline) pairs.
MAX_LAYOUTS = 48


def _powers_of_two(limit: int) -> list[int]:
    return [2**k for k in range(limit.bit_length()) if 2**k <= limit]


def layouts(job: Job) -> list[Variant]:
    """Whole layouts on the same GPUs for when no single change fits: tensor (a power of two
    within the NVLink domain, at least the spec's) × pipeline (at least the spec's, splitting
    the layers evenly), the data degree what the world leaves, with every memory saving on
    (sequence parallelism where tensor > 1, full recompute, micro_batch 1, ZeRO-1, or ZeRO-3
    without a pipeline), the least model parallelism first; at most MAX_LAYOUTS of them."""
    lay, tr, cl, L = job.layout, job.training, job.cluster, job.model.L
    found: list[tuple[int, int, Variant]] = []
    for t in _powers_of_two(cl.nvlink_domain):
        for p in range(lay.p, L + 1):
            if t < lay.t or L % p or cl.world % (t * lay.c * p):
                continue
            d = cl.world // (t * lay.c * p)
            if tr.B % d or (t, p) == (lay.t, lay.p):
                continue
            zero = 3 if p == 1 else 1
            layout = dataclasses.replace(
                lay,
                t=t,
                p=p,
                d=d,
                v=1,
                stage_layers=(),
                sp=t > 1,
                zero=zero,
                data_shard=None,
                d_given=False,
                named_schedule=None,
            )
            training = tr.with_recompute("full", b=1)
            words = (
                f"parallelism {{tensor: {t}, pipeline: {p}, data: {d}, virtual_stages: 1, "
                f"sequence_parallel: {str(t > 1).lower()}, zero_stage: {zero}}} with "
                "training {micro_batch: 1, recompute: full}"
            )
            found.append(
                (t * p, t, (words, dataclasses.replace(job, layout=layout, training=training)))
            )
    found.sort(key=lambda item: (item[0], item[1]))
    return [variant for _, _, variant in found[:MAX_LAYOUTS]]


def first_layout(job: Job, verdict: Verdict) -> str | None:
    """The first of `layouts` that passes (a linear scan: memory per rank is not monotone over
    the list), with what it shows; None when none does."""
    for words, variant in layouts(job):
        analysis = analysis_of(variant)
        shown = None if analysis is None else verdict(analysis)
        if shown is not None:
            return f"{words} ({shown})"
    return None
