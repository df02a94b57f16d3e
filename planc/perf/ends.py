"""Seconds of the tensor-parallel collectives at the model's ends (`planc.comm.ends`) per
micro-batch: what the rank holding the first virtual stage adds to its first chunk, and the
rank holding the last to its last chunk.

Each collective is on the critical path of its pass, except an input gradient's reduction,
which runs beside the weight gradient of the linear it belongs to when the framework issues it
asynchronously (Megatron's LinearWithGradAccumulationAndAsyncCommunication, TE's linears:
exposed max(0, r − w), hidden min(r, w)), and a weight gradient's re-gather of the input, which
runs beside the data gradient (max(0, g − d), min(g, d)), as a layer's column-parallel linears
do (`planc.perf.inputs.tp_per_layer`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from planc.comm.ends import Counted, EndCollective, Ends, Hides, Linear
from planc.record import record


@record
class GemmTimes:
    """The data- and weight-gradient GEMM seconds of a linear a collective can hide behind."""

    data_s: float
    weight_s: float


@record
class EndsTimes:
    """Seconds per micro-batch of the ends' TP collectives on one rank: exposed in the forward
    and backward of its first and last chunk, and hidden beside GEMMs."""

    first_forward_s: float = 0.0
    first_backward_s: float = 0.0
    last_forward_s: float = 0.0
    last_backward_s: float = 0.0
    hidden_s: float = 0.0


def _seconds(
    counted: Counted,
    call_s: Callable[[EndCollective], float],
    gemms: Mapping[Linear, GemmTimes],
    asynchronous: bool,
    deferred: float = 0.0,
) -> tuple[float, float, float]:
    """(forward, backward, hidden) seconds of `counted` per micro-batch. `deferred`: the share f
    of the LM head's calls whose weight gradient waits for the pipeline flush
    (`planc.deferral`): their input-gradient reduction has no GEMM beside it, and their
    input is not gathered again in backward (the flush gathers it)."""
    forward = backward = hidden = 0.0
    for one, passes in counted:
        seconds = call_s(one)
        shown, kept = seconds, 0.0
        gemm = gemms[one.linear]
        waits = deferred if one.linear is Linear.HEAD else 0.0
        if one.hides is Hides.WGRAD and asynchronous:
            beside = max(0.0, seconds - gemm.weight_s), min(seconds, gemm.weight_s)
            shown = waits * seconds + (1 - waits) * beside[0]
            kept = (1 - waits) * beside[1]
        elif one.hides is Hides.DGRAD:
            shown = (1 - waits) * max(0.0, seconds - gemm.data_s)
            kept = (1 - waits) * min(seconds, gemm.data_s)
        if one.backward:
            backward += passes * shown
        else:
            forward += passes * shown
        hidden += passes * kept
    return forward, backward, hidden


def ends_times(
    ends: Ends,
    call_s: Callable[[EndCollective], float],
    gemms: Mapping[Linear, GemmTimes],
    asynchronous: bool,
    deferred: float = 0.0,
) -> EndsTimes:
    """`EndsTimes` of `ends`: `call_s` the seconds of one call of a collective, `gemms` the
    GEMM times of the LM head and a module's eh_proj, `asynchronous` whether an input
    gradient's reduction runs beside the weight gradient (`planc.perf.inputs.tp_reduction_async`),
    `deferred` the share of the LM head's weight gradients deferred to the flush (`_seconds`)."""
    f_first, b_first, h_first = _seconds(ends.first, call_s, gemms, asynchronous)
    f_last, b_last, h_last = _seconds(ends.last, call_s, gemms, asynchronous, deferred)
    return EndsTimes(f_first, b_first, f_last, b_last, h_first + h_last)
