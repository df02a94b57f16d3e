"""Rules on the batch: micro-batching and the pipeline bubble."""

from __future__ import annotations

from collections.abc import Iterator

from planc.pipeline.registry import bubble_fraction, definition, microbatches_for, unmet
from planc.rules.base import Context, Option, Violation, rule

MAX_BUBBLE = Option(
    "max_bubble", 0.10, "Largest pipeline bubble fraction allowed", ge=0.0, lt=1.0
)


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


@rule("PLC006", options=(MAX_BUBBLE,))
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
    limit = ctx.option(MAX_BUBBLE)
    kind = lay.schedule
    if definition(kind).bubble is None and unmet(kind, lay.p, m, lay.v) is not None:
        return  # no closed form, and PLC010 refuses the layout the simulation would need
    bubble = bubble_fraction(kind, lay.p, m, lay.v)
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
    need = microbatches_for(kind, lay.p, lay.v, limit)
    batch = need * job.training.b * lay.d
    entry = definition(kind)
    if entry.bubble_formula is not None and entry.bubble_numbers is not None:
        shown = f"{entry.bubble_formula} = {entry.bubble_numbers(lay.p, m, lay.v)}"
    else:
        shown = f"of the {entry.title} schedule (simulated)"
    yield Violation(
        "training.global_batch",
        f"pipeline bubble {shown} = "
        f"{bubble:.1%} is above max_bubble {limit:.0%} (m = {m} micro-batches, p = {lay.p} stages)",
        f"use at least m = {need} micro-batches: global_batch ≥ {batch} at micro_batch "
        f"{job.training.b} and data {lay.d}, or fewer pipeline stages",
        ("parallelism.pipeline",),
    )

