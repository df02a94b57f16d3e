"""The memory rule: the heaviest rank fits in HBM with the configured headroom."""

from __future__ import annotations

from collections.abc import Iterator

from planc.analysis import Analysis
from planc.rules import fixes
from planc.rules.base import Context, Needs, Option, Violation, rule
from planc.spec.job import GIB, Job

# Plannable.usable_hbm_bytes reads it (as rules.options["memory_headroom"]): the budget PLC007,
# the memory report and the search's fixes share.
MEMORY_HEADROOM = Option(
    "memory_headroom", 0.10, "Fraction of HBM kept free on every rank", ge=0.0, lt=1.0
)

GENERIC_FIX = (
    "lower micro_batch, turn on recompute or sequence_parallel, raise zero_stage, or add "
    "tensor/pipeline parallelism"
)
KINDS = (fixes.micro_batch, fixes.recompute, fixes.sequence_parallel, fixes.zero_stage, fixes.nodes)


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def verified_fixes(job: Job, usable: int) -> list[str]:
    """Single changes that make the heaviest rank fit, each checked with planc's own memory
    model, with the peak after it: the first that fits of each kind (micro-batch, recompute,
    sequence parallelism, ZeRO stage, more nodes), smallest change first."""

    def fits(analysis: Analysis) -> str | None:
        peak = analysis.memory.peak.memory.total
        return _gib(peak) if peak <= usable else None

    return fixes.verified(job, KINDS, fits)


def _fix(ctx: Context, usable: int) -> str:
    if not ctx.suggest:
        return GENERIC_FIX
    found = verified_fixes(ctx.job, usable)
    if found:
        return "each of these alone fits (peak after it): " + "; ".join(found)
    none = (
        "no single change of micro_batch, recompute, sequence_parallel, zero_stage or up to "
        f"{fixes.MAX_NODE_FACTOR}× the nodes fits"
    )

    def fits(analysis: Analysis) -> str | None:
        peak = analysis.memory.peak.memory.total
        return f"peak {_gib(peak)}" if peak <= usable else None

    layout = fixes.first_layout(ctx.job, fits)
    if layout is not None:
        return f"{none}; this layout on the same GPUs does: {layout}"
    return (
        f"{none}, nor does any of {fixes.MAX_LAYOUTS} layouts of more tensor and pipeline "
        "parallelism on these GPUs: add GPUs, or GPUs with more memory"
    )


@rule("PLC007", needs=Needs.ANALYSIS, options=(MEMORY_HEADROOM,))
def memory_fits(ctx: Context) -> Iterator[Violation]:
    """Memory: the heaviest rank's bytes stay under HBM × (1 − memory_headroom).

    planc budgets every pipeline stage term by term (`planc memory SPEC` shows the table):
    16-bit weights and gradients, fp32 master weights and optimizer moments sharded by ZeRO
    stage, activations of the micro-batches in flight (Korthikanti et al. 2022), the embedding
    on the first stage and the LM head with fp32 logits on the last, ZeRO-3 gather and
    gradient-bucket buffers, and the CUDA context reserve.

    The fix lists only changes that apply and that planc's own memory model shows to fit, each
    alone, with the peak after it: the next smaller micro-batch that divides the batch, more
    recompute (under Megatron-LM selective recompute of one more module at a time, the cheapest
    to run again first: core_attn, mla_up_proj, moe_act, layernorm, shared_experts, mlp; then
    full), sequence parallelism, a higher ZeRO stage, or more nodes at the same layout.
    When none fits alone, it offers the first whole layout on the same GPUs that does (more
    tensor and pipeline parallelism with every saving on, the least model parallelism first,
    from a bounded list), or says that none of them fits.

    Passes:
        training: {seq_len: 8192, micro_batch: 1}

    Fails:
        training: {seq_len: 8192, micro_batch: 8, recompute: none}
    """
    if ctx.analysis is None:
        return
    job = ctx.analysis.plan
    usable = job.usable_hbm_bytes
    if ctx.analysis.memory.peak_bytes <= usable:
        return
    if ctx.brief:  # the heaviest rank's terms are assembled for the message only
        yield Violation("training.micro_batch", "the heaviest rank does not fit", GENERIC_FIX)
        return
    peak = ctx.analysis.memory.peak
    hbm = job.cluster.gpu.memory_bytes
    mem = peak.memory
    largest = sorted(mem.terms, key=lambda term: term.bytes, reverse=True)[:3]
    parts = ", ".join(f"{term.name} {_gib(term.bytes)}" for term in largest)
    yield Violation(
        "training.micro_batch",
        f"pipeline stage {peak.stage} (rank {peak.rank} and its peers) needs {_gib(mem.total)}, above "
        f"{_gib(usable)} usable ({_gib(hbm)} HBM × (1 − {ctx.option(MEMORY_HEADROOM):g})); "
        f"largest terms: {parts}",
        _fix(ctx, usable),
        ("hardware.gpu", "parallelism"),
    )
