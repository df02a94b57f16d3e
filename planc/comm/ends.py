"""The tensor-parallel collectives at the model's ends: the word embedding on the rank holding
the first virtual stage, and on the rank holding the last the LM head, the vocabulary-parallel
loss and the multi-token prediction modules' embedding and projection. None with t = 1.

Symbols: b micro-batch, s/c the tokens of a context-parallel rank, h hidden size, t the
tensor-parallel degree, β_a bytes per activation element. Per micro-batch, Megatron-Core
(d98e8a64) and torchtitan (DTensor TP) as they run them:

- The word embedding (VocabParallelEmbedding; torchtitan's RowwiseParallel tok_embeddings): each
  rank looks up its vocabulary slice and the partial sums are reduced, with sequence
  parallelism reduce-scattered to the sequence shards (`reduce_scatter_to_sequence_parallel_
  region`, torchtitan's output Shard(1)) and their gradient all-gathered in backward; without it
  all-reduced (`reduce_from_tensor_model_parallel_region`), whose backward moves nothing.
  b·(s/c)·h·β_a each.
- The LM head (ColumnParallelLinear; TELMHeadColumnParallelLinear under fp8_output_proj;
  torchtitan's ColwiseParallel output): with sequence parallelism its input is all-gathered
  (quantized where the head is a Transformer Engine linear under a recipe that gathers so),
  gathered again for the weight gradient beside the data gradient (Megatron's linears keep
  their shard; torchtitan saves the gathered input), and the input gradient reduce-scattered
  beside the weight gradient; without it the input gradient is all-reduced beside the weight
  gradient. The logits stay vocabulary-parallel (parallel_output), so nothing gathers them.
- The loss over vocabulary-parallel logits, b·(s/c) rows: Megatron's _VocabParallelCrossEntropy
  (cross_entropy_fusion none; torchtitan's loss_parallel, whose log_softmax and nll reduce the
  same three) all-reduces the rows' max, the target logits and the sums of exponentials, three
  fp32 all-reduces of b·(s/c)·4 bytes; the fused kernel (native, fused_cross_entropy.py) the max
  and then target logits and sums in one, of 2·b·(s/c)·4; Transformer Engine's
  (te, triton/cross_entropy.py) all-gathers each rank's (max, sum, target logit) rows, t·3·
  b·(s/c)·4 bytes gathered. Nothing in backward.
- A multi-token prediction module (MultiTokenPredictionLayer) embeds the shifted tokens as the
  first stage does, then eh_proj, a column-parallel linear of the [rows, 2h] concatenation: its
  input all-gathered with sequence parallelism (2h wide, quantized where the recipe gathers so:
  the module runs in the FP8 context), gathered again for its weight gradient, and the input
  gradient reduce-scattered (all-reduced without sequence parallelism); its h/t-wide output
  all-gathered along the hidden dimension (gather_from_tensor_model_parallel_region), and with
  sequence parallelism scattered back to the sequence shards, whose gradient is all-gathered in
  backward. Full recompute runs the projection's forward gathers again. Then its head and loss
  as the model's.

The first stage's embedding and the last stage's head pass sit on the critical path: each
collective is exposed, except the input gradients' reductions, which run beside the linear's
weight gradient (`Hides.WGRAD`), and the weight gradients' re-gathers, beside the data gradient
(`Hides.DGRAD`), as the layers' do.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from planc.comm.sizes import (
    AMAX_BYTES,
    activation_message_bytes,
    latent_message_bytes,
    sp_amax_reduced,
    sp_gather_bytes,
    sp_input_regathered,
)
from planc.plannable import Plannable
from planc.record import record
from planc.vocab import Collective, DType

FP32_BYTES = 4


class Hides(str, Enum):
    """What a collective at the ends can run beside: nothing, the weight gradient of the linear
    whose input gradient it reduces, or the data gradient of the linear whose input it gathers
    again."""

    EXPOSED = "exposed"
    WGRAD = "wgrad"
    DGRAD = "dgrad"


class Linear(str, Enum):
    """The linear a hidden collective runs beside: the LM head or a module's eh_proj."""

    HEAD = "lm head"
    PROJECTION = "mtp eh proj"


@record
class EndCollective:
    """One TP collective at the model's ends, per pass (one embedding, head and loss, or
    projection) and micro-batch."""

    op: Collective
    phase: str
    size: int  # bytes per call: the whole (gathered) buffer
    backward: bool  # in the backward pass (else the forward)
    formula: str
    hides: Hides = Hides.EXPOSED
    linear: Linear = Linear.HEAD  # the linear it runs beside (WGRAD, DGRAD)


def embedding_collectives(job: Plannable) -> tuple[EndCollective, ...]:
    """The word embedding's reduction of its vocabulary slices' partial sums."""
    size = activation_message_bytes(job)
    if not job.layout.sp:
        return (
            EndCollective(
                Collective.ALL_REDUCE,
                "TP all-reduce of the word embedding's output (forward)",
                size,
                False,
                "1 per embedding pass per micro-batch, b·(s/c)·h·β_a",
            ),
        )
    return (
        EndCollective(
            Collective.REDUCE_SCATTER,
            "SP reduce-scatter of the word embedding's output (forward)",
            size,
            False,
            "1 per embedding pass per micro-batch, b·(s/c)·h·β_a before scattering",
        ),
        EndCollective(
            Collective.ALL_GATHER,
            "SP all-gather of the word embedding's output gradient (backward)",
            size,
            True,
            "1 per embedding pass per micro-batch, b·(s/c)·h·β_a gathered",
        ),
    )


def head_gather_bytes(job: Plannable) -> int:
    """The LM head's SP input all-gather: b·(s/c)·h·β_a, or the recipe's quantized bytes where
    the head is Transformer Engine's linear (`Quantized.output_proj`), which quantizes before it
    gathers (`planc.comm.sizes.sp_gather_bytes`)."""
    q = job.numerics.quantized
    return sp_gather_bytes(job, job.model.h, bf16=q is None or not q.output_proj)


def head_collectives(job: Plannable) -> tuple[EndCollective, ...]:
    """The LM head's input gathers and input-gradient reduction (column parallel)."""
    hidden = activation_message_bytes(job)
    if not job.layout.sp:
        return (
            EndCollective(
                Collective.ALL_REDUCE,
                "TP all-reduce of the LM head's input gradient (backward)",
                hidden,
                True,
                "1 per head pass per micro-batch, b·(s/c)·h·β_a, beside the head's weight gradient",
                Hides.WGRAD,
            ),
        )
    gathered = head_gather_bytes(job)
    out = [
        EndCollective(
            Collective.ALL_GATHER,
            "SP all-gather of the LM head's input (forward)",
            gathered,
            False,
            "1 per head pass per micro-batch, b·(s/c)·h gathered",
        ),
        EndCollective(
            Collective.REDUCE_SCATTER,
            "SP reduce-scatter of the LM head's input gradient (backward)",
            hidden,
            True,
            "1 per head pass per micro-batch, b·(s/c)·h·β_a, beside the head's weight gradient",
            Hides.WGRAD,
        ),
    ]
    if sp_input_regathered(job):
        out.append(
            EndCollective(
                Collective.ALL_GATHER,
                "SP all-gather of the LM head's input again for its weight gradient (backward)",
                gathered,
                True,
                "1 per head pass per micro-batch, b·(s/c)·h gathered, beside the head's data "
                "gradient",
                Hides.DGRAD,
            )
        )
    return tuple(out)


def loss_collectives(job: Plannable) -> tuple[EndCollective, ...]:
    """The vocabulary-parallel loss's reductions over the b·(s/c) rows, by its kernels."""
    rows = job.dims.tokens
    fusion = job.training.loss_fusion
    if fusion == "te":
        return (
            EndCollective(
                Collective.ALL_GATHER,
                "TP all-gather of the loss's per-row max, sum and target logit (forward; "
                "Transformer Engine's parallel cross-entropy)",
                job.layout.t * 3 * rows * FP32_BYTES,
                False,
                "1 per loss per micro-batch, t·3·b·(s/c)·4 gathered",
            ),
        )
    if fusion == "native":
        return (
            EndCollective(
                Collective.ALL_REDUCE,
                "TP all-reduce of the loss's per-row max (forward; Megatron's fused loss)",
                rows * FP32_BYTES,
                False,
                "1 per loss per micro-batch, b·(s/c)·4",
            ),
            EndCollective(
                Collective.ALL_REDUCE,
                "TP all-reduce of the loss's target logits and sums of exponentials together "
                "(forward; Megatron's fused loss)",
                2 * rows * FP32_BYTES,
                False,
                "1 per loss per micro-batch, 2·b·(s/c)·4",
            ),
        )
    return (
        EndCollective(
            Collective.ALL_REDUCE,
            "TP all-reduces of the loss's per-row max, target logits and sums of exponentials "
            "(forward; vocabulary-parallel cross-entropy)",
            rows * FP32_BYTES,
            False,
            "3 per loss per micro-batch, b·(s/c)·4 each",
        ),
    ) * 3


def projection_collectives(job: Plannable) -> tuple[EndCollective, ...]:
    """A multi-token prediction module's eh_proj: its 2h-wide input in, its output gathered
    along the hidden dimension (and scattered to the sequence shards with SP)."""
    hidden = activation_message_bytes(job)
    wide = latent_message_bytes(job, 2 * job.model.h)
    redone = job.training.recompute == "full"
    output = EndCollective(
        Collective.ALL_GATHER,
        "TP all-gather of the MTP eh_proj output along the hidden dimension (forward)",
        hidden,
        False,
        "1 per module per micro-batch, b·(s/c)·h·β_a gathered",
    )
    if not job.layout.sp:
        out = [
            output,
            EndCollective(
                Collective.ALL_REDUCE,
                "TP all-reduce of the MTP eh_proj input gradient (backward)",
                wide,
                True,
                "1 per module per micro-batch, b·(s/c)·2h·β_a, beside its weight gradient",
                Hides.WGRAD,
                Linear.PROJECTION,
            ),
        ]
        if redone:
            out.append(_again(output))
        return tuple(out)
    q = job.numerics.quantized
    # the module runs in the FP8 context, not FP4's (MultiTokenPredictionLayer)
    kept = q is None or q.gemm is not DType.FP8
    gathered = sp_gather_bytes(job, 2 * job.model.h, bf16=kept)
    gather = EndCollective(
        Collective.ALL_GATHER,
        "SP all-gather of the MTP eh_proj input (forward)",
        gathered,
        False,
        "1 per module per micro-batch, b·(s/c)·2h gathered",
    )
    out = [
        gather,
        output,
        EndCollective(
            Collective.REDUCE_SCATTER,
            "SP reduce-scatter of the MTP eh_proj input gradient (backward)",
            wide,
            True,
            "1 per module per micro-batch, b·(s/c)·2h·β_a, beside its weight gradient",
            Hides.WGRAD,
            Linear.PROJECTION,
        ),
        EndCollective(
            Collective.ALL_GATHER,
            "SP all-gather of the MTP eh_proj output's gradient, scattered to the sequence "
            "shards in forward (backward)",
            hidden,
            True,
            "1 per module per micro-batch, b·(s/c)·h·β_a gathered",
        ),
    ]
    if sp_input_regathered(job):
        out.append(
            EndCollective(
                Collective.ALL_GATHER,
                "SP all-gather of the MTP eh_proj input again for its weight gradient (backward)",
                gathered,
                True,
                "1 per module per micro-batch, b·(s/c)·2h gathered, beside its data gradient",
                Hides.DGRAD,
                Linear.PROJECTION,
            )
        )
    quantized = not kept and sp_amax_reduced(job)
    if quantized:
        out.append(_amax(gather))
    if redone:
        out += [_again(gather), _again(output)] + ([_again(_amax(gather))] if quantized else [])
    return tuple(out)


def _amax(gather: EndCollective) -> EndCollective:
    return EndCollective(
        Collective.ALL_REDUCE,
        "TP amax all-reduce before the quantized SP all-gather of the MTP eh_proj input",
        AMAX_BYTES,
        gather.backward,
        "1 per quantized gather of a per-tensor-scaled input, one fp32",
    )


def _again(forward: EndCollective) -> EndCollective:
    """`forward` run again in backward by full recompute."""
    return EndCollective(
        forward.op,
        forward.phase.replace("(forward)", "(again in backward: full recompute)"),
        forward.size,
        True,
        forward.formula,
    )


@record
class EndPasses:
    """How many of each pass a rank runs at the ends per micro-batch."""

    embedding: int  # 1 on the rank holding the first virtual stage (its chunk 0)
    heads: int  # head and loss: the model's and each MTP module's (the last stage's last chunk)
    modules: int  # MTP modules: an embedding and a projection each (the same chunk)


def end_passes(job: Plannable, stage: int) -> EndPasses:
    """The ends pipeline rank `stage` runs: the embedding on the rank holding the first
    virtual stage (rank 0), the head and loss and the MTP modules on the rank holding the last
    (`PlanLayout.last_stage`); none with t = 1, where nothing is reduced."""
    if job.layout.t == 1:
        return EndPasses(0, 0, 0)
    modules, _ = job.mtp_modules(stage)
    last = stage == job.layout.last_stage
    return EndPasses(int(stage == 0), int(last) + modules, modules)


Counted = tuple[tuple[EndCollective, int], ...]


@record
class Ends:
    """Each TP collective at the ends of one rank with the passes per micro-batch that run it:
    those of the first virtual stage's chunk (the word embedding) and those of the last's."""

    first: Counted
    last: Counted

    @property
    def every(self) -> Counted:
        return self.first + self.last


def end_collectives(job: Plannable, stage: int) -> Ends:
    """The TP collectives at the ends of pipeline rank `stage` (`end_passes`)."""
    passes = end_passes(job, stage)

    def counted(*kinds: tuple[Callable[[Plannable], tuple[EndCollective, ...]], int]) -> Counted:
        return tuple((one, n) for kind, n in kinds if n for one in kind(job))

    return Ends(
        counted((embedding_collectives, passes.embedding)),
        counted(
            (embedding_collectives, passes.modules),
            (head_collectives, passes.heads),
            (loss_collectives, passes.heads),
            (projection_collectives, passes.modules),
        ),
    )
