"""Rules on the model's shape against the parallel degrees."""

from __future__ import annotations

from collections.abc import Iterator

from planc.rules.base import Context, Violation, rule


@rule("PLC003")
def head_and_width_divisibility(ctx: Context) -> Iterator[Violation]:
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
    yield from ctx.refused("PLC003")


@rule("PLC004")
def layers_over_pipeline(ctx: Context) -> Iterator[Violation]:
    """Layers split over the pipeline stages (and virtual chunks).

    Without `stage_layers`, layers must be divisible by pipeline × virtual_stages. With it, the
    list has one entry per stage, sums to the model's layers, leaves no stage empty, and with
    virtual stages gives every stage a multiple of virtual_stages layers (Megatron
    `TransformerConfig` uneven-pipeline checks). With `embedding_in_pipeline_split` /
    `loss_in_pipeline_split`, layers + embedding + loss split evenly over the chunks (Megatron's
    --account-for-embedding/loss-in-pipeline-split). A `pipeline_layout` (Megatron's
    --pipeline-model-parallel-layout) gives every chunk its own layers; it is refused for what
    Megatron-Core's PipelineParallelLayerLayout refuses (pipeline × virtual_stages stages, the
    embedding first and the loss last once each, every decoder and MTP layer once, MTP after
    the decoder layers), and for an MTP layer away from the last chunk, which planc does not
    model.

    Base: llama3-70b-8x8.yaml

    Passes:
        parallelism: {stage_layers: [19, 21, 21, 19]}

    Fails:
        parallelism: {stage_layers: [20, 20, 20, 19]}
    """
    yield from ctx.refused("PLC004")


@rule("PLC012")
def attention_heads(ctx: Context) -> Iterator[Violation]:
    """Attention heads are consistent: hidden splits into heads, heads into key/value groups.

    Without an explicit head_dim, hidden must be divisible by heads (Megatron kv_channels =
    hidden / heads). Grouped-query attention shares each key/value head among heads / kv_heads
    query heads, so kv_heads must divide heads. Multi-head latent attention (model.mla) up-projects
    a key and a value for every head, so kv_heads must equal heads (Megatron's validate_args:
    group query attention is mutually exclusive with multi latent attention).

    Passes:
        model: {kv_heads: 8}

    Fails:
        model: {kv_heads: 12}
    """
    yield from ctx.refused("PLC012")


@rule("PLC016")
def sequence_fits_positions(ctx: Context) -> Iterator[Violation]:
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
    job = ctx.job
    mod, s = job.model, job.training.s
    if mod.position == "learned" and s > mod.max_seq_len:
        yield Violation(
            "training.seq_len",
            f"seq_len {s} is longer than the learned position table ({mod.max_seq_len} positions)",
            f"use seq_len ≤ {mod.max_seq_len}, or raise model.max_seq_len",
            ("model.max_seq_len",),
        )
