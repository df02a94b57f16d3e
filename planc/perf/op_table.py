"""The step model's ops, one table per kind of layer: what `planc explain --ops` shows.

Each kind of layer the model has (dense or MoE, full or sliding-window attention, in the FP8/FP4
recipe's GEMMs where the run has one) is listed op by op with the seconds the step model gives
it per micro-batch on one rank, forward, data gradient and weight gradient; then the model's
two ends (the embedding, and the final norm, LM head and loss). The ops and their prices are
the step model's own (`planc.perf.compute.op_times`, which `pass_times` sums): a kind's total is
the pass time `chunk_times` adds per layer of that kind, before recompute.

Not listed: recompute (the forward of what `training.recompute` repeats), the multi-token
prediction modules, and the layers an FP8 recipe keeps in BF16 (Megatron
--first-last-layers-bf16), which run as the 16-bit kind does.
"""

from __future__ import annotations

from dataclasses import replace

from planc.perf.compute import OpTime, end_shape, op_times
from planc.perf.inputs import (
    device_of,
    efficiency_of,
    expert_shape,
    layer_shape,
    quantized_device,
    weight_cast_share,
)
from planc.perf.ops import (
    OpCost,
    OpShape,
    first_stage_ops,
    last_stage_ops,
    layer_ops,
    moe_layer_ops,
    with_quantized_gemms,
)
from planc.plannable import Plannable
from planc.record import record


@record
class LayerKind:
    """One kind of layer: its label, how many of the model's layers are of it, and its ops."""

    label: str
    layers: int
    ops: tuple[OpTime, ...]

    @property
    def forward_s(self) -> float:
        return sum(t.forward_s for t in self.ops)

    @property
    def backward_s(self) -> float:
        return sum(t.backward_data_s + t.backward_weight_s for t in self.ops)


@record
class OpTable:
    """The layer kinds of a job and its two ends, priced as the step model prices them."""

    kinds: tuple[LayerKind, ...]
    embedding: tuple[OpTime, ...]
    head: tuple[OpTime, ...]


def layer_counts(job: Plannable) -> dict[tuple[bool, bool], int]:
    """How many of the model's layers are (MoE, windowed), over all of them."""
    model = job.model
    counts: dict[tuple[bool, bool], int] = {}
    for i in range(model.L):
        moe = model.moe is not None and model.moe.is_moe_layer(i)
        key = (moe, model.is_window_layer(i))
        counts[key] = counts.get(key, 0) + 1
    return counts


def op_table(job: Plannable) -> OpTable:
    """`job`'s layer kinds and ends, op by op (the module docstring)."""
    shape, experts = layer_shape(job), expert_shape(job)
    device, eff, low = device_of(job), efficiency_of(job), quantized_device(job)
    q, share = job.numerics.quantized, weight_cast_share(job)

    def priced(ops: tuple[OpCost, ...], at: OpShape) -> tuple[OpTime, ...]:
        if q is None:
            return op_times(ops, device, eff)
        return op_times(with_quantized_gemms(ops, q, at.beta, share, at), device, eff, low)

    kinds = []
    for (moe, windowed), count in sorted(layer_counts(job).items()):
        at = replace(shape, window=job.model.window) if windowed else shape
        ops = moe_layer_ops(at, experts) if moe and experts is not None else layer_ops(at)
        label = ("MoE" if moe else "dense") + (" sliding-window" if windowed else "") + " layer"
        kinds.append(LayerKind(label, count, priced(ops, at)))
    ends = end_shape(shape)
    head = last_stage_ops(ends)
    if q is not None and q.output_proj:
        timed_head = op_times(with_quantized_gemms(head, q, ends.beta, share, ends), device, eff, low)
    else:
        timed_head = op_times(head, device, eff)
    return OpTable(tuple(kinds), op_times(first_stage_ops(ends), device, eff), timed_head)
