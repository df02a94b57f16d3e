"""One MoE layer run as a forward-backward pair: what of its expert exchanges stays exposed.

A schedule that runs one micro-batch's forward together with another's backward (Megatron-Core's
combined 1F1B, `--overlap-moe-expert-parallel-comm`; DeepSeek's DualPipe) splits each MoE layer
into four parts, the computation before the dispatch (attention, the pre-MLP norm, the router,
the permutation and the shared experts), the dispatch, the routed experts and the combine, and
runs the forward layer's and the backward layer's parts on two streams, communication beside
computation (Megatron-LM megatron/core/models/common/model_chunk_schedule_plan.py,
`TransformerLayerSchedulePlan.run`; DeepSeek-V3 Technical Report, arXiv 2412.19437, §3.2.1 and
Figure 4):

    comm stream:     combine_bwd       | dispatch_fwd → dispatch_bwd         | combine_fwd
    compute stream:  pre_dispatch_fwd  | mlp_bwd → mlp_bwd_dw → mlp_fwd       | pre_dispatch_bwd

Each part waits for its stream's previous one and for the data it reads: the experts' backward
for the combine's gradient, the dispatch for the pre-dispatch output, the dispatch's gradient
for the experts' backward, the experts' forward for the dispatch, the combine for the experts'
output, the pre-dispatch backward for the dispatch's gradient. `pair_s` runs that graph; what it
takes beyond the compute alone is the exchange left exposed. The SMs a hidden exchange's kernels
take from the compute beside it are priced by the step (`planc.perf.step.virtual_times`, the
expert link's processor_usage), not here.
"""

from __future__ import annotations

from planc.record import record


@record
class MoeLayerParts:
    """One MoE layer on one rank per micro-batch, in seconds, split where a paired schedule
    splits it (the module's docstring)."""

    pre_forward_s: float  # attention … shared experts: all but the routed experts
    pre_backward_s: float  # their gradients, recompute included
    experts_forward_s: float  # the routed experts (fc1, activation, fc2)
    experts_backward_s: float  # their data gradients
    experts_weight_s: float  # their weight gradients (mlp_bwd_dw)
    dispatch_forward_s: float  # every exchange before the experts, forward
    combine_forward_s: float  # the exchange after them
    dispatch_backward_s: float  # the gradients of the dispatch's exchanges
    combine_backward_s: float  # the combine's gradient, the first of the backward


def pair_s(layer: MoeLayerParts) -> float:
    """Seconds of the layer's forward and backward run as a pair (the graph of the module's
    docstring, each part as soon as its stream and its inputs allow)."""
    x = layer
    pre_f, comb_b = x.pre_forward_s, x.combine_backward_s
    experts_b = max(pre_f, comb_b) + x.experts_backward_s
    dispatch_f = max(pre_f, comb_b) + x.dispatch_forward_s
    weight = experts_b + x.experts_weight_s
    dispatch_b = max(dispatch_f, experts_b) + x.dispatch_backward_s
    experts_f = max(weight, dispatch_f) + x.experts_forward_s
    combine_f = max(dispatch_b, experts_f) + x.combine_forward_s
    pre_b = max(experts_f, dispatch_b) + x.pre_backward_s
    return max(combine_f, pre_b)


def compute_s(layer: MoeLayerParts) -> float:
    """The layer's forward and backward compute alone."""
    x = layer
    return (
        x.pre_forward_s
        + x.pre_backward_s
        + x.experts_forward_s
        + x.experts_backward_s
        + x.experts_weight_s
    )


def paired_exposed(layer: MoeLayerParts) -> tuple[float, float]:
    """(forward, backward) exchange seconds the pair leaves exposed: pair_s − compute_s, shared
    between the two passes as their exchanges are (the pipeline times each pass on its own)."""
    x = layer
    exposed = max(0.0, pair_s(layer) - compute_s(layer))
    forward = x.dispatch_forward_s + x.combine_forward_s
    total = forward + x.dispatch_backward_s + x.combine_backward_s
    if total <= 0.0:
        return 0.0, 0.0
    return exposed * forward / total, exposed * (total - forward) / total
