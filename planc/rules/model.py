"""Rules on the model's shape against the parallel degrees."""

from __future__ import annotations

from collections.abc import Iterator

from planc.job import Job
from planc.rules.base import Violation, rule


@rule("PLC003")
def head_and_width_divisibility(job: Job) -> Iterator[Violation]:
    """Heads and widths divide over tensor.

    Column-parallel QKV gives each TP rank heads / tensor whole query heads; key/value heads
    either split (kv_heads % tensor == 0) or are replicated when tensor is a multiple of
    kv_heads (Megatron `TransformerConfig`; torchtitan accepts only the first form). The MLP's
    ffn_hidden splits over tensor too.

    Passes:
        parallelism: {tensor: 8, data: 1, zero_stage: 0}

    Fails:
        model: {heads: 36, kv_heads: 12, hidden: 4608, ffn_hidden: 14336}
        parallelism: {tensor: 8, data: 1, zero_stage: 0}
    """
    mod, t = job.model, job.layout.t
    if mod.n % t:
        yield Violation(
            "model.heads",
            f"heads = {mod.n} is not divisible by tensor = {t}",
            f"use a tensor degree that divides {mod.n}",
            ("parallelism.tensor", "model.preset"),
        )
    if mod.g % t and t % mod.g:
        yield Violation(
            "model.kv_heads",
            f"kv_heads = {mod.g} neither divides nor is a multiple of tensor = {t}",
            f"use a tensor degree that divides {mod.g} or is a multiple of it",
            ("parallelism.tensor", "model.preset"),
        )
    if mod.f % t:
        yield Violation(
            "model.ffn_hidden",
            f"ffn_hidden = {mod.f} is not divisible by tensor = {t}",
            f"use a tensor degree that divides {mod.f}",
            ("parallelism.tensor", "model.preset"),
        )


def _expected_stages(job: Job) -> Iterator[Violation]:
    lay, L = job.layout, job.model.L
    chunks = lay.p * lay.v
    if L % chunks:
        lower = L // chunks
        yield Violation(
            "model.layers",
            f"layers = {L} do not split evenly over pipeline × virtual_stages = {lay.p} × {lay.v} "
            f"= {chunks} chunks ({L / chunks:.2f} each)",
            f"give parallelism.stage_layers explicitly, or use {lower * chunks} or "
            f"{(lower + 1) * chunks} layers",
            ("parallelism.pipeline", "model.preset"),
        )


def _given_stages(job: Job) -> Iterator[Violation]:
    lay, L, stages = job.layout, job.model.L, job.layout.stage_layers
    if len(stages) != lay.p:
        yield Violation(
            "parallelism.stage_layers",
            f"stage_layers has {len(stages)} entries for pipeline = {lay.p} stages",
            f"give one layer count per stage ({lay.p} entries)",
        )
    if sum(stages) != L:
        yield Violation(
            "parallelism.stage_layers",
            f"stage_layers sums to {sum(stages)}, but the model has {L} layers",
            f"make the entries add up to {L}",
        )
    for index, count in enumerate(stages):
        if count == 0:
            yield Violation(
                f"parallelism.stage_layers[{index}]",
                f"stage {index} holds no layers",
                "give every stage at least one layer, or lower pipeline",
                ("parallelism.stage_layers",),
            )
        elif count % lay.v:
            yield Violation(
                f"parallelism.stage_layers[{index}]",
                f"stage {index} holds {count} layers, which do not split into "
                f"virtual_stages = {lay.v} equal chunks",
                f"give stage {index} a multiple of {lay.v} layers",
                ("parallelism.stage_layers",),
            )


@rule("PLC004")
def layers_over_pipeline(job: Job) -> Iterator[Violation]:
    """Layers split over the pipeline stages (and virtual chunks).

    Without `stage_layers`, layers must be divisible by pipeline × virtual_stages. With it, the
    list has one entry per stage, sums to the model's layers, leaves no stage empty, and with
    virtual stages gives every stage a multiple of virtual_stages layers (Megatron
    `TransformerConfig` uneven-pipeline checks).

    Base: llama3-70b-8x8.yaml

    Passes:
        parallelism: {stage_layers: [19, 21, 21, 19]}

    Fails:
        parallelism: {stage_layers: [20, 20, 20, 19]}
    """
    if job.layout.stage_layers:
        yield from _given_stages(job)
    else:
        yield from _expected_stages(job)


@rule("PLC012")
def attention_heads(job: Job) -> Iterator[Violation]:
    """Attention heads are consistent: hidden splits into heads, heads into key/value groups.

    Without an explicit head_dim, hidden must be divisible by heads (Megatron kv_channels =
    hidden / heads). Grouped-query attention shares each key/value head among heads / kv_heads
    query heads, so kv_heads must divide heads.

    Passes:
        model: {kv_heads: 8}

    Fails:
        model: {kv_heads: 12}
    """
    mod = job.model
    if mod.k == 0:
        yield Violation(
            "model.hidden",
            f"hidden = {mod.h} is not divisible by heads = {mod.n}",
            "set model.head_dim, or make hidden a multiple of heads",
            ("model.heads", "model.preset"),
        )
    if mod.n % mod.g:
        yield Violation(
            "model.kv_heads",
            f"kv_heads = {mod.g} does not divide heads = {mod.n}",
            "choose kv_heads among the divisors of heads",
            ("model.preset",),
        )


@rule("PLC016")
def sequence_fits_positions(job: Job) -> Iterator[Violation]:
    """A learned position table must cover the sequence.

    A model with learned position embeddings has max_seq_len rows; a longer sequence indexes
    past the table (Megatron: max_position_embeddings ≥ seq_length). Rotary embeddings have no
    table and are not limited.

    Base: gpt3-175b-1024xa100.yaml

    Passes:
        training: {seq_len: 2048}

    Fails:
        training: {seq_len: 4096}
    """
    mod, s = job.model, job.training.s
    if mod.position == "learned" and s > mod.max_seq_len:
        yield Violation(
            "training.seq_len",
            f"seq_len {s} is longer than the learned position table ({mod.max_seq_len} positions)",
            f"use seq_len ≤ {mod.max_seq_len}, or raise model.max_seq_len",
            ("model.max_seq_len",),
        )
