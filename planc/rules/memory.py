"""The memory rule: the heaviest rank fits in HBM with the configured headroom."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

from planc.analysis import analyse
from planc.job import GIB, Job, NodeNames
from planc.plannable import plannable
from planc.rules.base import Context, Needs, Violation, rule

# More nodes at the same layout are tried up to this factor (ZeRO shards over a larger group).
MAX_NODE_FACTOR = 64
GENERIC_FIX = (
    "lower micro_batch, turn on recompute or sequence_parallel, raise zero_stage, or add "
    "tensor/pipeline parallelism"
)


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def _peak(job: Job) -> int | None:
    """The heaviest rank's bytes of a variant of the job, or None when it has no plan."""
    plan = plannable(job)
    return None if isinstance(plan, tuple) else analyse(plan).memory.peak.memory.total


def _divisors_below(n: int, limit: int) -> list[int]:
    """Divisors of n below limit, largest first; trial division stops at 2^20 so a huge batch
    costs at most a million steps (its larger divisors past that are not offered)."""
    found: set[int] = set()
    for q in range(1, min(math.isqrt(n), 1 << 20) + 1):
        if n % q == 0:
            found.update((q, n // q))
    return sorted((x for x in found if x < limit), reverse=True)


def _micro_batch(job: Job) -> list[tuple[str, Job]]:
    """Smaller micro-batches that still divide the global batch over the data ranks, largest
    first (the fewest extra micro-batches)."""
    tr, d = job.training, job.layout.d or 1
    return [
        (f"micro_batch: {b}", dataclasses.replace(job, training=dataclasses.replace(tr, b=b)))
        for b in _divisors_below(tr.B // d, tr.b)
    ]


def _recompute(job: Job) -> list[tuple[str, Job]]:
    order = ("none", "selective", "full")
    return [
        (
            f"recompute: {mode}",
            dataclasses.replace(job, training=dataclasses.replace(job.training, recompute=mode)),
        )
        for mode in order[order.index(job.training.recompute) + 1 :]
    ]


def _sequence_parallel(job: Job) -> list[tuple[str, Job]]:
    lay = job.layout
    if lay.t == 1 or lay.sp:
        return []
    return [
        (
            "sequence_parallel: true",
            dataclasses.replace(job, layout=dataclasses.replace(lay, sp=True)),
        )
    ]


def _zero(job: Job) -> list[tuple[str, Job]]:
    lay = job.layout
    if (lay.d or 1) * lay.c == 1:
        return []
    return [
        (
            f"zero_stage: {stage}",
            dataclasses.replace(job, layout=dataclasses.replace(lay, zero=stage)),
        )
        for stage in range(lay.zero + 1, 4)
    ]


def _nodes(job: Job) -> list[tuple[str, Job]]:
    """More nodes at this layout: the data degree grows, and ZeRO shards over more ranks."""
    cl, lay, tr = job.cluster, job.layout, job.training
    if lay.d is None or lay.zero == 0:
        return []
    found = []
    for factor in (2**k for k in range(1, MAX_NODE_FACTOR.bit_length())):
        d = lay.d * factor
        if tr.B % (tr.b * d) == 0:
            nodes = cl.nodes * factor
            cluster = dataclasses.replace(cl, nodes=nodes, hosts=NodeNames(nodes))
            variant = dataclasses.replace(
                job, cluster=cluster, layout=dataclasses.replace(lay, d=d)
            )
            found.append((f"nodes: {nodes} (data {d}; list {nodes} hosts)", variant))
    return found


FIXES = (_micro_batch, _recompute, _sequence_parallel, _zero, _nodes)


def verified_fixes(job: Job, usable: int) -> list[str]:
    """Single changes that make the heaviest rank fit, each checked with planc's own memory
    model: the first that fits from each kind (micro-batch, recompute, sequence parallelism,
    ZeRO stage, more nodes), smallest change first."""
    found = []
    for kind in FIXES:
        hit = _first_fit(kind(job), usable)
        if hit is not None:
            found.append(hit)
    return found


def _first_fit(candidates: list[tuple[str, Job]], usable: int) -> str | None:
    """The first candidate that fits, by bisection: each list runs from the smallest change to
    the largest, and every step along it needs no more memory than the one before, so a few
    analyses settle it however long the list is."""
    lo, hi, best = 0, len(candidates) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        words, variant = candidates[mid]
        peak = _peak(variant)
        if peak is not None and peak <= usable:
            best, hi = f"{words} ({_gib(peak)})", mid - 1
        else:
            lo = mid + 1
    return best


def _fix(ctx: Context, usable: int) -> str:
    if not ctx.suggest:
        return GENERIC_FIX
    fixes = verified_fixes(ctx.job, usable)
    if fixes:
        return "each of these alone fits (peak after it): " + "; ".join(fixes)
    return (
        "no single change of micro_batch, recompute, sequence_parallel, zero_stage or up to "
        f"{MAX_NODE_FACTOR}× the nodes fits: add tensor or pipeline parallelism"
    )


@rule("PLC007", needs=Needs.ANALYSIS)
def memory_fits(ctx: Context) -> Iterator[Violation]:
    """Memory: the heaviest rank's bytes stay under HBM × (1 − memory_headroom).

    planc budgets every pipeline stage term by term (`planc memory SPEC` shows the table):
    16-bit weights and gradients, fp32 master weights and optimizer moments sharded by ZeRO
    stage, activations of the micro-batches in flight (Korthikanti et al. 2022), the embedding
    on the first stage and the LM head with fp32 logits on the last, ZeRO-3 gather and
    gradient-bucket buffers, and the CUDA context reserve.

    The fix lists only changes that apply and that planc's own memory model shows to fit, each
    alone, with the peak after it: the next smaller micro-batch that divides the batch, more
    recompute, sequence parallelism, a higher ZeRO stage, or more nodes at the same layout.

    Passes:
        training: {seq_len: 8192, micro_batch: 1}

    Fails:
        training: {seq_len: 8192, micro_batch: 8, recompute: none}
    """
    if ctx.analysis is None:
        return
    job = ctx.analysis.plan
    peak = ctx.analysis.memory.peak
    hbm = job.cluster.gpu.memory_bytes
    usable = int(hbm * (1 - job.rules.memory_headroom))
    mem = peak.memory
    if mem.total <= usable:
        return
    largest = sorted(mem.terms, key=lambda term: term.bytes, reverse=True)[:3]
    parts = ", ".join(f"{term.name} {_gib(term.bytes)}" for term in largest)
    yield Violation(
        "training.micro_batch",
        f"pipeline stage {peak.stage} (rank {peak.rank} and its peers) needs {_gib(mem.total)}, above "
        f"{_gib(usable)} usable ({_gib(hbm)} HBM × (1 − {job.rules.memory_headroom:g})); "
        f"largest terms: {parts}",
        _fix(ctx, usable),
        ("hardware.gpu", "parallelism"),
    )
