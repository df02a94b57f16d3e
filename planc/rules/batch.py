"""Rules on the batch: micro-batching and the pipeline bubble."""

from __future__ import annotations

import math
from collections.abc import Iterator

from planc.job import Job
from planc.rules.base import Violation, rule


@rule("PLC005")
def batch_divisibility(job: Job) -> Iterator[Violation]:
    """Global batch splits into whole micro-batches on every data-parallel rank.

    global_batch = micro_batch × data × m for a whole number m of micro-batches per step
    (Megatron's micro-batch calculator; DeepSpeed's train_batch = micro × grad_acc × DP). The
    data degree here excludes context parallelism: CP ranks share their sequences.

    Passes:
        training: {global_batch: 64}

    Fails:
        training: {global_batch: 66}
    """
    lay, tr = job.layout, job.training
    if lay.d is None:
        return
    unit = tr.b * lay.d
    if tr.B % unit:
        lower = tr.B - tr.B % unit
        choices = f"{lower} or {lower + unit}" if lower else str(unit)
        yield Violation(
            "training.global_batch",
            f"global_batch {tr.B} is not divisible by micro_batch × data = {tr.b} × {lay.d} = {unit}",
            f"use global_batch {choices}",
            ("training.micro_batch",),
        )


def bubble_fraction(p: int, m: int, v: int = 1) -> float:
    """Idle fraction of a 1F1B pipeline step: (p − 1) / (v·m + p − 1).

    Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
    Megatron-LM", §2.2: bubble time (p − 1)·(t_f + t_b)/v against ideal time m·(t_f + t_b), so
    the fraction of the whole step is (p − 1)/(v·m + p − 1).
    """
    return (p - 1) / (v * m + p - 1)


def microbatches_for(p: int, v: int, limit: float) -> int:
    """Smallest m with (p − 1)/(v·m + p − 1) ≤ limit: m ≥ (p − 1)(1 − limit)/(v·limit)."""
    if p == 1:
        return 1
    if limit <= 0:
        raise ValueError("a bubble limit of 0 cannot be met with p > 1")
    m = math.ceil((p - 1) * (1 - limit) / (v * limit) - 1e-9)
    while bubble_fraction(p, m, v) > limit:
        m += 1
    return max(m, 1)


@rule("PLC006")
def pipeline_bubble(job: Job) -> Iterator[Violation]:
    """Pipeline bubble: (p − 1)/(v·m + p − 1) stays under rules.max_bubble.

    Warm-up and cool-down of a 1F1B pipeline leave p − 1 micro-batch slots idle per stage.
    With m micro-batches per data-parallel rank (m = global_batch / (micro_batch × data)) and v
    virtual stages, the idle fraction is (p − 1)/(v·m + p − 1); m ≥ 9 × p keeps it under 10%
    for plain 1F1B (the seed lesson's rule of thumb).

    Base: llama3-70b-8x8.yaml

    Passes:
        training: {global_batch: 64}

    Fails:
        training: {global_batch: 16}
    """
    lay, m = job.layout, job.m
    if lay.p == 1 or m is None:
        return
    limit = job.rules.max_bubble
    bubble = bubble_fraction(lay.p, m, lay.v)
    if bubble <= limit:
        return
    if limit == 0:
        yield Violation(
            "training.global_batch",
            f"pipeline bubble {bubble:.1%} with p = {lay.p}, m = {m}; rules.max_bubble is 0, "
            "which only pipeline = 1 meets",
            "raise rules.max_bubble or set pipeline: 1",
            ("rules.max_bubble",),
        )
        return
    need = microbatches_for(lay.p, lay.v, limit)
    if lay.v > 1:
        need = math.ceil(need / lay.p) * lay.p
    batch = need * job.training.b * (lay.d or 1)
    yield Violation(
        "training.global_batch",
        f"pipeline bubble (p − 1)/(v·m + p − 1) = ({lay.p} − 1)/({lay.v}·{m} + {lay.p} − 1) = "
        f"{bubble:.1%} is above max_bubble {limit:.0%} (m = {m} micro-batches, p = {lay.p} stages)",
        f"use at least m = {need} micro-batches: global_batch ≥ {batch} at micro_batch "
        f"{job.training.b} and data {lay.d}, or fewer pipeline stages",
        ("parallelism.pipeline",),
    )
