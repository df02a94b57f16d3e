"""Byte sizes of the messages tensor and sequence parallelism move, shared by the schedule
(`planc.comm.schedule`) and the collectives at the model's ends (`planc.comm.ends`).

Symbols: b micro-batch, s/c the tokens of a context-parallel rank, w a tensor's width, h the
hidden size, β_a bytes per activation element.
"""

from __future__ import annotations

from planc.plannable import Plannable
from planc.vocab import SELECTIVE_OP


def activation_bytes(job: Plannable) -> int:
    """β_a: bytes per activation element on the wire (`Numerics.activation`)."""
    return job.numerics.activation


def activation_message_bytes(job: Plannable) -> int:
    """b·(s/c)·h·β_a: one micro-batch's hidden states on a context-parallel rank (the TP
    collectives' gathered buffer)."""
    return latent_message_bytes(job, job.model.h)


def tp_gather_bytes(job: Plannable, bf16: bool = False) -> int:
    """What a sequence-parallel all-gather of the hidden state moves, a block's input in
    forward (again in backward for its weight gradient) or its output's gradient in backward:
    `sp_gather_bytes` of h."""
    return sp_gather_bytes(job, job.model.h, bf16)


def sp_gather_bytes(job: Plannable, width: int, bf16: bool = False) -> int:
    """b·(s/c)·w·β_a, or where the recipe gathers quantized (`Quantized.tp_gather_fp8`)
    ⌈b·(s/c)·w·d/8⌉ + ⌈b·(s/c)·w/β_s⌉·σ: d data bits per element, one scale of σ bytes per β_s
    elements for a block-scaled recipe (none for a per-tensor scale, the same on every rank).
    Bytes of one SP all-gather of a width-w tensor that the receiving linear quantizes:

    - Transformer Engine (megatron): LayerNormLinear and Linear quantize a column-parallel
      input before gathering it (`gather_along_first_dim(..., quantizer=input_quantizer)`, the
      userbuffers' `fill_userbuffers_buffer_for_all_gather` alike), gather it again so in
      backward for the weight gradient (`ln_out_needs_gather`), and a row-parallel linear's
      backward gathers its output's gradient quantized (`grad_output_preprocess`); the block
      recipes' scales travel with the data (`_all_gather_mxfp8`, `_all_gather_nvfp4`,
      `_start_all_gather_fp8_blockwise`; transformer_engine/pytorch/distributed.py, TE 2.14.1).
    - torchao's Float8 TP under torchtitan's tensorwise recipe: Float8ColwiseParallel,
      Float8RowwiseParallel and PrepareFloat8ModuleInput cast to float8 before the gather
      (torchao/float8/float8_tensor_parallel.py).

    The reduce-scatters stay 16-bit, as do the gathers of a layer the recipe keeps in BF16
    (`bf16`: Megatron's --first-last-layers-bf16 runs its linears outside fp8_autocast, no
    quantizer). A block recipe's scale tensors are counted unpadded."""
    q = job.numerics.quantized
    if q is None or not q.tp_gather_fp8 or bf16:
        return latent_message_bytes(job, width)
    elements = job.dims.tokens * width
    scales = -(-elements // q.scale_block) * q.scale_bytes if q.scale_block else 0
    return -(-elements * q.data_bits // 8) + scales


AMAX_BYTES = 4  # one fp32 amax


def sp_amax_reduced(job: Plannable) -> bool:
    """Whether each quantized SP all-gather first all-reduces its tensor's amax over the TP
    group: a per-tensor scale computed from the tensor itself (two reads, `Quantized.reads`:
    current scaling, NVFP4's second-level scale, torchao's tensorwise) of a tensor sharded over
    the TP ranks needs the amax of every shard. Transformer Engine sets `with_amax_reduction`
    over the TP group on a sequence-parallel column linear's input quantizer and a row linear's
    output-gradient quantizer (base.py / layernorm_linear.py `_customize_quantizers_float8_
    current_scaling`, `_customize_quantizers_nvfp4`, TE 2.14.1); torchao's Float8 TP computes
    the amax of the sharded DTensor, an all-reduce. Delayed scaling takes the scale from its
    history, block recipes scale locally: neither reduces."""
    q = job.numerics.quantized
    return q is not None and q.tp_gather_fp8 and q.reads == 2 and job.layout.sp


def latent_message_bytes(job: Plannable, width: int) -> int:
    """b·(s/c)·w·β_a: one micro-batch's tokens of width w on a context-parallel rank."""
    return job.dims.tokens * width * activation_bytes(job)


def sp_input_regathered(job: Plannable) -> bool:
    """Whether a column-parallel linear gathers its sequence-parallel input again in backward
    for its weight gradient. Megatron's and DeepSpeed's Megatron layers keep only the rank's
    shard of the gathered input (LinearWithGradAccumulationAndAsyncCommunication: an async
    all-gather beside the dgrad GEMM; Transformer Engine's LayerNormLinear and Linear alike,
    `ln_out_needs_gather`, or its userbuffers' bulk overlap with dgrad). torchtitan's DTensor
    TP saves the gathered input itself, so it gathers once (unless its per-op activation
    checkpointing recomputes the gather: `sp_gather_recomputed`)."""
    return job.layout.sp and job.layout.t > 1 and job.training.framework != "fsdp2"


def torch_checkpoint(job: Plannable) -> bool:
    """Whether the run checkpoints its blocks with torch's non-reentrant checkpoint, which
    recomputes in backward only what the backward reads: torchtitan's `ptd_checkpoint_wrapper`
    (torch.distributed's checkpoint_wrapper, CheckpointImpl.NO_REENTRANT; parallelize_llama.py
    `_apply_ac_to_transformer_block` at 820504e) and the FSDP2 trainers built the same way,
    `framework: fsdp2`. torch/utils/checkpoint.py: non-reentrant checkpointing 'stops
    recomputation as soon as all needed intermediate activations have been recomputed'; under
    torch.compile the partitioner extracts the backward from what it reads alike
    (torch/_functorch/partitioners.py; `planc.perf.sac.unread_tail`). Megatron's and
    DeepSpeed's checkpoint functions re-run the whole checkpointed forward (Megatron-Core
    tensor_parallel/random.py CheckpointFunction, deepspeed/runtime/activation_checkpointing/
    checkpointing.py)."""
    return job.training.framework == "fsdp2"


def sp_gather_recomputed(job: Plannable) -> bool:
    """Whether torchtitan's per-op activation checkpointing (`recompute: selective-op`) runs
    each TP block's input all-gather again in backward. Its policy saves only the ops of
    `_save_list` (aten.mm but every second one, SDPA, the c10d reduce-scatter, aten.max;
    torchtitan/models/llama3/parallelize_llama.py lines 217-227 at 820504e) and marks every
    other op PREFER_RECOMPUTE, which the compiled block's partitioner recomputes
    (torch/_functorch/partitioners.py `must_recompute`). The sequence-parallel all-gather
    (_c10d_functional.all_gather_into_tensor) is not in the list, so the gathered input the
    linears' backward needs is gathered again (with a per-tensor-scaled recipe's amax
    all-reduce before it); the reduce-scatters' outputs are saved. Under full recompute the
    whole forward runs again (`planc.comm.schedule.redone_blocks`), the gather with it."""
    tr = job.training
    return (
        job.layout.sp
        and job.layout.t > 1
        and tr.framework == "fsdp2"
        and tr.recompute == SELECTIVE_OP
    )
