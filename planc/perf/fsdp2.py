"""What FSDP2 (fully_shard) leaves exposed at the ends of a micro-batch's forward and backward.

torchtitan shards each transformer block as one FSDP2 unit and the model's root as another: the
root holds what no block does, the token embedding, the final norm and the output projection
(torchtitan parallelisms/parallelize_llama.py `apply_fsdp` at 9dec370: `fully_shard(block)`
for each block, then `fully_shard(model)`). FSDP2 hides a unit's all-gather behind the previous
unit's compute and its reduce-scatter behind the next unit's backward, but not at the ends:

* forward start: the root's pre-forward makes the all-gather streams wait for the compute stream
  (torch FSDPState._root_pre_forward), then all-gathers the root and, after the embedding
  lookup (negligible), the first block: nothing runs beside either, on every micro-batch;
* backward end: the first block's reduce-scatter is issued when its backward ends, and the
  root's (the embedding's gradient is the last one produced) when the backward ends, in the
  final callback, which waits for both before the optimizer: the step's last reduction.

Priced as the all-gather of Ψ_root + Ψ_1 parameter elements (16-bit) per micro-batch and one
reduce-scatter of Ψ_root + Ψ_1 gradient elements per step (at the wire's gradient bytes,
`planc.comm.schedule.grad_bytes`: the spec's training.reduce_dtype, torchtitan's fp32 by
default), Ψ_root = V'/t·h per
untied vocabulary matrix (embedding and output; one when tied) + the final norm's ν·h, Ψ_1 one
block's parameters. Stated for one pipeline stage and a dense model (the torchtitan and NeMo
AutoModel runs); with a pipeline the stages' ends differ, and a MoE block's experts shard over
their own mesh: neither is priced here (0).
"""

from __future__ import annotations

from planc.plannable import Plannable
from planc.record import record


@record
class EndUnits:
    """Parameter elements FSDP2 gathers before a micro-batch's first compute (`first`) and
    reduces after its last (`last`), on one rank (both Ψ_root + Ψ_1)."""

    first: int
    last: int


def root_elements(job: Plannable) -> int:
    """Ψ_root = (2 − tied)·V'/t·h + ν·h: the embedding and output matrices on this rank (one
    when tied) and the final norm's weights (ν = 2 for LayerNorm's weight and bias, else 1)."""
    model = job.model
    matrices = 1 if model.tied else 2
    norm = (2 if model.norm == "layernorm" else 1) * model.h
    return matrices * job.dims.vocab * model.h + norm


def end_units(job: Plannable, stage_params: int) -> EndUnits:
    """The elements of the root unit and the first block, Ψ_root + (Ψ_r − Ψ_root)/L for the
    rank's Ψ_r = `stage_params`; zero without FSDP2, with a pipeline, HSDP or experts."""
    lay = job.layout
    unpriced = (
        job.training.framework != "fsdp2"
        or lay.p > 1
        or lay.replicas > 1
        or job.model.moe is not None
        or lay.d * lay.c == 1
    )
    if unpriced:
        return EndUnits(0, 0)
    root = root_elements(job)
    block = (stage_params - root) // job.model.L
    return EndUnits(root + block, root + block)


# Bytes a copy-out moves per gathered element: it reads the all-gather output and writes the
# unit's unsharded parameters, both in the 16-bit parameter dtype.
COPY_OUT_PASSES = 2


def copy_out_units(job: Plannable, stage_params: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The units (their elements) FSDP2 copies out per micro-batch: every unit in forward (the
    root and the L blocks); in backward again the blocks resharded after forward, all but the
    last one (torchtitan keeps the last block and FSDP2 the root unsharded, parallelize_llama.py
    apply_fsdp at 9dec370); none with reshard_after_forward false. Empty where `end_units` does
    not price FSDP2."""
    units = end_units(job, stage_params)
    if not units.first:
        return (), ()
    root = root_elements(job)
    block = units.first - root
    blocks = job.model.L
    forward = (root, *([block] * blocks))
    again = blocks - 1 if job.training.reshard_after_forward else 0
    return forward, tuple([block] * again)


def reduce_copy_in_bytes(job: Plannable, unit_elements: int) -> int:
    """B = (w + r)·Ψ_u bytes of one unit's reduce-scatter copy-in: it reads the unit's unsharded
    gradients in the 16-bit param_dtype (w bytes) and writes the reduce-scatter input in
    reduce_dtype (r bytes, `Numerics.reduce`: 4 for torchtitan's fp32)."""
    return (job.numerics.weight + job.numerics.reduce) * unit_elements


def reduce_copy_in_s(job: Plannable, unit_elements: int, hbm_bytes: float, hbm_at: float) -> float:
    """Seconds of one unit's reduce-scatter copy-in, B/(HBM·e(B)) with B of
    `reduce_copy_in_bytes`, once per micro-batch for every unit (FSDP2 reduces each
    micro-batch's gradients): foreach_reduce allocates the input in reduce_dtype and runs
    foreach_reduce_scatter_copy_in, one cat (torch.ops.fsdp.chunk_cat in torch 2.14) of the
    gradients into it, before the reduce-scatter stream starts; the compute stream does not go
    on until it is done (torch 2.14 distributed/fsdp/_fully_shard/_fsdp_collectives.py
    foreach_reduce: the copy-in runs on the current stream; torch 2.4's
    _composable/fsdp/_fsdp_collectives.py foreach_reduce_scatter ran it on the reduce-scatter
    stream and made the current stream wait for its event). Memory bound; `hbm_at` is the HBM
    efficiency at B."""
    return reduce_copy_in_bytes(job, unit_elements) / (hbm_bytes * hbm_at)


def copy_out_s(job: Plannable, unit_elements: int, hbm_bytes: float, hbm_at: float) -> float:
    """Seconds of one unit's all-gather copy-out, B/(HBM·e(B)), B = 2·w·Ψ_u (w bytes per 16-bit
    parameter): after its all-gather, FSDP2's wait_for_unshard runs foreach_all_gather_copy_out
    on the compute stream, one split_with_sizes_copy from the all-gather output into the unit's
    parameters (torch distributed/fsdp/_fully_shard/_fsdp_param_group.py and
    _fsdp_collectives.py, as in torch 2.5's _composable/fsdp), memory bound. `hbm_at` is the
    HBM efficiency at B."""
    moved = COPY_OUT_PASSES * job.numerics.weight * unit_elements
    return moved / (hbm_bytes * hbm_at)
