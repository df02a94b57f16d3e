"""The memory rule: the heaviest rank fits in HBM with the configured headroom."""

from __future__ import annotations

from collections.abc import Iterator

from planc.job import GIB
from planc.rules.base import Context, Needs, Violation, rule


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


@rule("PLC007", needs=Needs.ANALYSIS)
def memory_fits(ctx: Context) -> Iterator[Violation]:
    """Memory: the heaviest rank's bytes stay under HBM × (1 − memory_headroom).

    planc budgets every pipeline stage term by term (`planc memory SPEC` shows the table):
    16-bit weights and gradients, fp32 master weights and optimizer moments sharded by ZeRO
    stage, activations of the micro-batches in flight (Korthikanti et al. 2022), the embedding
    on the first stage and the LM head with fp32 logits on the last, ZeRO-3 gather and
    gradient-bucket buffers, and the CUDA context reserve.

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
        "lower micro_batch, turn on recompute or sequence_parallel, raise zero_stage, or add "
        "tensor/pipeline parallelism",
        ("hardware.gpu", "parallelism"),
    )
