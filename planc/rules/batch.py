"""Rules on the batch: micro-batching and the pipeline bubble."""

from __future__ import annotations

import math
from collections.abc import Iterator

from planc.pipeline.bubble import bubble_fraction, microbatches_for
from planc.rules.base import Context, Violation, rule


@rule("PLC005")
def batch_divisibility(ctx: Context) -> Iterator[Violation]:
    """Global batch splits into whole micro-batches on every data-parallel rank.

    global_batch = micro_batch × data × m for a whole number m of micro-batches per step
    (Megatron's micro-batch calculator; DeepSpeed's train_batch = micro × grad_acc × DP). The
    data degree here excludes context parallelism: CP ranks share their sequences.

    Passes:
        training: {global_batch: 64}

    Fails:
        training: {global_batch: 66}
    """
    yield from ctx.refused("PLC005")


@rule("PLC006")
def pipeline_bubble(ctx: Context) -> Iterator[Violation]:
    """Pipeline bubble: (p − 1)/(v·m + p − 1) stays under rules.max_bubble.

    Warm-up and cool-down of a 1F1B pipeline leave p − 1 micro-batch slots idle per stage.
    With m micro-batches per data-parallel rank (m = global_batch / (micro_batch × data)) and v
    virtual stages, the idle fraction is (p − 1)/(v·m + p − 1) (Narayanan et al. 2021 §2.2: the
    bubble is (p − 1)/(v·m) of the ideal time); it is at most 10% exactly when v·m ≥ 9(p − 1),
    so m ≥ 9 × p is always enough for plain 1F1B.

    Base: llama3-70b-8x8.yaml

    Passes:
        training: {global_batch: 64}

    Fails:
        training: {global_batch: 16}
    """
    job = ctx.job
    lay, m = job.layout, job.m
    if lay.p == 1 or m is None or lay.d is None:
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
    batch = need * job.training.b * lay.d
    yield Violation(
        "training.global_batch",
        f"pipeline bubble (p − 1)/(v·m + p − 1) = ({lay.p} − 1)/({lay.v}·{m} + {lay.p} − 1) = "
        f"{bubble:.1%} is above max_bubble {limit:.0%} (m = {m} micro-batches, p = {lay.p} stages)",
        f"use at least m = {need} micro-batches: global_batch ≥ {batch} at micro_batch "
        f"{job.training.b} and data {lay.d}, or fewer pipeline stages",
        ("parallelism.pipeline",),
    )

