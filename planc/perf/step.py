"""The step: per-stage times composed through the pipeline schedule, plus what stays exposed.

:func:`pipeline_step` is a pure function of a frozen :class:`StepInputs` of plain numbers
(seconds, counts, FLOPs); :mod:`planc.perf.inputs` builds one from a job.

Composition, per optimizer step:

1. **Pipeline.** Each virtual stage (stage r, chunk j) takes t_f = forward + exposed TP forward
   (+ the MoE layers' expert exchanges) and t_b = backward (+ recompute) + exposed TP backward
   (+ the exchanges of the gradients) per micro-batch; the discrete-event
   simulation of the named schedule (`StepInputs.schedule`; Megatron's 1F1B or interleaved 1F1B
   by default, `planc.pipeline.registry`) runs them with the p2p time per message and gives
   each stage's finishing time. A schedule that splits the backward runs its weight-gradient
   part t_w as separate W ops and t_b − t_w as B. The bubble is whatever
   the simulation leaves idle, so uneven stages (embedding first, LM head last) are priced.
2. **Bounded simulation.** `planc.pipeline.bounded`: the whole schedule up to 20,000 ops; beyond,
   two runs in the steady state (m₁ ≡ m mod p and m₁ + K·p) and each stage's finishing time
   extrapolated linearly (the steady state of a max-plus system repeats; Baccelli et al. 1992);
   the closed form when even those would be too long.
3. **Data-parallel reduction.** Each stage reduces its gradient buckets while the backward of
   its last micro-batch runs (Megatron DDP `overlap_grad_reduce`): buckets beyond that window
   and always the last bucket are exposed; overlapped buckets slow the compute they overlap by
   `processor_usage` (the SMs NCCL's kernels occupy; Calculon `processor_usage`).
4. **Step end.** The gradient-norm all-reduce synchronises all stages before the optimizer
   (Megatron `clip_grad_norm`), so step = max_r(pipeline end_r + DP exposed_r) +
   max_r(optimizer_r + after-step communication_r) (ZeRO-1/2 parameter all-gather, tied
   embedding all-reduce).

MFU counts model FLOPs only (no recompute; Chowdhery et al. 2022, PaLM, Appendix B), passed in
as `model_flops` (e.g. 72·B·s·L·h²·(1 + s/(6h) + V/(12hL)) for a GPT, Narayanan et al. 2021).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from planc.record import record
from planc.vocab import ScheduleKind

if TYPE_CHECKING:
    from planc.pipeline.bounded import PipelineTime


@record
class StageInputs:
    """One pipeline stage (one rank of it), per micro-batch unless said otherwise, in seconds.

    Tuples are per model chunk (length v). `tp_*` is the TP communication left exposed (zero
    when it overlaps); `dp_buckets_s` are the gradient-reduction buckets in the order they run,
    `after_step_s` communication after the optimizer step (ZeRO-1/2 parameter all-gather, tied
    embedding all-reduce), `optimizer_s` the optimizer update.
    """

    forward_s: tuple[float, ...]
    backward_s: tuple[float, ...]
    tp_forward_s: tuple[float, ...]
    tp_backward_s: tuple[float, ...]
    dp_buckets_s: tuple[float, ...] = ()
    after_step_s: float = 0.0
    optimizer_s: float = 0.0
    tp_overlapped_s: float = 0.0  # TP communication hidden behind compute, per micro-batch
    # TP communication hidden on the copy engines (TE's ring exchange): no SMs taken
    tp_copy_engine_s: float = 0.0
    cp_exposed_s: float = 0.0  # ring-attention K/V exchange not hidden, per micro-batch
    cp_overlapped_s: float = 0.0  # CP exchange hidden behind attention, per micro-batch
    dp_overlapped_s: float = 0.0  # other DP communication hidden behind compute, per micro-batch
    # Expert exchanges (EP all-to-all, ETP gathers) of the chunk's MoE layers, exposed: forward
    # and backward per chunk (empty: none).
    ep_forward_s: tuple[float, ...] = ()
    ep_backward_s: tuple[float, ...] = ()
    # What of them stays exposed where the schedule pairs each forward with another micro-batch's
    # backward (`planc.perf.paired`), per chunk (empty: all of them, nothing hides).
    ep_paired_forward_s: tuple[float, ...] = ()
    ep_paired_backward_s: tuple[float, ...] = ()
    # The release's time per local expert beyond the GPU's work (`planc.perf.expert_host`) of
    # the chunk's MoE layers, forward and backward per chunk (empty: none).
    host_forward_s: tuple[float, ...] = ()
    host_backward_s: tuple[float, ...] = ()
    # The forward recompute runs again inside backward_s, per chunk (empty: none).
    recompute_s: tuple[float, ...] = ()
    # The weight-gradient part of backward_s per chunk, run as W ops by a schedule that splits
    # the backward (empty: half of backward_s, the zero-bubble paper's B = W).
    backward_weight_s: tuple[float, ...] = ()
    # Blocking pipeline transfers on the stage's own stream, per micro-batch (DeepSpeed's
    # pipeline engine, planc.perf.pipe_engine.blocking_p2p): beside the forward's and the
    # backward's compute, spread evenly over the chunks.
    p2p_forward_s: float = 0.0
    p2p_backward_s: float = 0.0
    # Gradient accumulation outside the GEMMs, per micro-batch (planc.perf.grad_accum): a
    # memory-bound pass after the backward, spread over the chunks as their backward.
    accumulate_s: float = 0.0
    # What the forward and backward wait on the activation copies of offload.activations, per
    # micro-batch (planc.perf.offload.activation_offload_s): inside forward_s and backward_s.
    offload_wait_s: float = 0.0
    # What the stage runs after its last backward, before the gradients are synchronised:
    # Megatron's deferred LM-head weight gradients (planc.deferral), per step.
    flush_s: float = 0.0


@record
class StepInputs:
    """Everything the step composition needs, as plain numbers."""

    stages: tuple[StageInputs, ...]
    m: int
    v: int
    p2p_s: float  # one pipeline message
    tp_processor_usage: float = 0.0  # compute lost while TP communication overlaps it
    dp_processor_usage: float = 0.0  # compute lost while DP communication overlaps it
    cp_processor_usage: float = 0.0  # compute lost while the CP exchange overlaps attention
    ep_processor_usage: float = 0.0  # compute lost while a hidden expert exchange runs
    model_flops: float = 0.0  # per step, for MFU
    tokens: int = 0  # per step
    peak_flops: float = 0.0  # all GPUs together, FLOP/s
    schedule: ScheduleKind | None = None  # the pipeline schedule; None: the default for v

    @property
    def pipeline_schedule(self) -> ScheduleKind:
        """The schedule the pipeline runs: `schedule`, else the default for v."""
        return self.schedule or ScheduleKind.default(self.v)

    @property
    def p(self) -> int:
        return len(self.stages)


@record
class PipelineStep:
    step_time_s: float
    pipeline_s: float  # the simulated makespan of all forward and backward passes
    compute_s: float  # the busiest stage's own compute (incl. exposed TP and slowdowns)
    bubble_s: float  # pipeline_s − compute_s
    tp_exposed_s: float  # on the busiest stage, per step
    cp_exposed_s: float  # on the busiest stage, per step
    ep_exposed_s: float  # the expert exchanges of the busiest stage, per step
    pp_exposed_s: float  # p2p time on the critical path: pipeline_s − compute_s − idle
    dp_exposed_s: float  # DP tail + after-step communication
    optimizer_s: float
    tokens_per_s: float
    mfu: float
    stage_end_s: tuple[float, ...]
    simulated_m: tuple[int, ...]  # the micro-batch counts simulated; () for the closed form
    pipeline: PipelineTime  # how the pipeline part was found, and its idle share
    ep_hidden_s: float = 0.0  # the busiest stage's expert exchanges its schedule hides, per step
    # The busiest stage's release time per local expert (`StageInputs.host_forward_s`), per step.
    expert_host_s: float = 0.0
    # The busiest stage's recomputed forward (`StageInputs.recompute_s`), per step.
    recompute_s: float = 0.0
    # What the deferred LM-head weight gradients add to the synchronised pipeline's end beyond
    # the flush they fill (`StageInputs.flush_s`).
    flush_exposed_s: float = 0.0
    # The busiest stage's wait on its activation copies (`StageInputs.offload_wait_s`), per step.
    offload_wait_s: float = 0.0


def virtual_times(inputs: StepInputs) -> tuple[list[float], list[float]]:
    """t_f and t_b per virtual stage (index chunk·p + stage), TP exposure and slowdown included."""
    p, v = inputs.p, inputs.v
    t_f, t_b = [0.0] * (p * v), [0.0] * (p * v)
    for r, st in enumerate(inputs.stages):
        # Overlapped DP communication (ZeRO-3 gathers, ZeRO-2 per-micro-batch reductions) hides
        # behind this stage's compute only as far as the compute, slowed beside it, lasts; the
        # rest is exposed (`dp_hidden_s`).
        window = sum(st.forward_s) + sum(st.backward_s)
        hidden = dp_hidden_s(st.dp_overlapped_s, window, inputs.dp_processor_usage)
        slow = (
            inputs.tp_processor_usage * st.tp_overlapped_s
            + inputs.cp_processor_usage * st.cp_overlapped_s
            + inputs.dp_processor_usage * hidden
            + (st.dp_overlapped_s - hidden)
        )
        total_b = sum(st.backward_s) or 1.0
        ep_fs, ep_bs = _expert_exposed(inputs, st)
        for j in range(v):
            share = st.backward_s[j] / total_b
            # The CP exchange is a third forward, two thirds backward (K, V; then dK, dV too).
            ep_f, ep_b = ep_fs[j], ep_bs[j]
            # A hidden exchange's kernels take SMs from the compute beside it.
            if st.ep_forward_s:
                ep_f += inputs.ep_processor_usage * (st.ep_forward_s[j] - ep_f)
                ep_b += inputs.ep_processor_usage * (st.ep_backward_s[j] - ep_b)
            host_f = st.host_forward_s[j] if st.host_forward_s else 0.0
            host_b = st.host_backward_s[j] if st.host_backward_s else 0.0
            t_f[j * p + r] = (
                st.forward_s[j]
                + host_f
                + st.tp_forward_s[j]
                + ep_f
                + st.cp_exposed_s / (3 * v)
                + st.p2p_forward_s / v
            )
            t_b[j * p + r] = (
                st.backward_s[j]
                + host_b
                + st.tp_backward_s[j]
                + ep_b
                + (slow + st.accumulate_s) * share
                + 2 * st.cp_exposed_s / (3 * v)
                + st.p2p_backward_s / v
            )
    return t_f, t_b


def _expert_exposed(
    inputs: StepInputs, st: StageInputs
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The expert exchanges of each chunk left on its forward and backward. A schedule that runs
    one micro-batch's forward with another's backward (Megatron's combined 1F1B, DualPipe's F&B
    chunk pair) hides each MoE layer's exchanges behind the other pass's compute of the same
    layer as far as the two streams' order allows (`planc.perf.paired`: the stage's
    `ep_paired_*`); other schedules serialise them (Megatron-Core's default)."""
    v = inputs.v
    ep_f = st.ep_forward_s or (0.0,) * v
    ep_b = st.ep_backward_s or (0.0,) * v
    from planc.pipeline import registry  # start-up: as in pipeline_step

    if not st.ep_paired_forward_s or not registry.definition(
        inputs.pipeline_schedule
    ).overlaps_experts:
        return tuple(ep_f), tuple(ep_b)
    return st.ep_paired_forward_s, st.ep_paired_backward_s


def expert_hidden_s(
    inputs: StepInputs, stage: int, alone: Sequence[tuple[int, int]] = ()
) -> float:
    """The expert exchange of `stage` that its schedule hides, per step (0 when it serialises
    them): on every pass but those it runs alone (`alone`, per virtual stage:
    `PipelineTime.alone`), which hide nothing."""
    st, p = inputs.stages[stage], inputs.p
    ep_f, ep_b = _expert_exposed(inputs, st)
    # Chunk by chunk, each part hidden is its exchange less what stays exposed, never below
    # zero (a difference of the sums can round to -0.0 when nothing hides).
    run = zip(st.ep_forward_s, ep_f, st.ep_backward_s, ep_b, strict=False)
    hidden = 0.0
    for j, (f, xf, b, xb) in enumerate(run):
        n_f, n_b = alone[j * p + stage] if alone else (0, 0)
        hidden += (inputs.m - n_f) * max(0.0, f - xf) + (inputs.m - n_b) * max(0.0, b - xb)
    return hidden


def alone_extra(inputs: StepInputs) -> list[tuple[float, float]] | None:
    """Per virtual stage, what a forward and a backward its schedule runs alone take beyond a
    paired one: the exchange the pair hid, less the slow-down it caused, (1 − u)·(e − x) with
    e the whole exchange, x the paired part exposed and u the link's processor usage. None
    when the schedule pairs no passes or the model has no expert exchange."""
    from planc.pipeline import registry  # start-up: as in pipeline_step

    if not registry.definition(inputs.pipeline_schedule).overlaps_experts:
        return None
    p, v, keep = inputs.p, inputs.v, 1.0 - inputs.ep_processor_usage
    out = [(0.0, 0.0)] * (p * v)
    for r, st in enumerate(inputs.stages):
        if not st.ep_paired_forward_s:
            continue
        ep_f, ep_b = _expert_exposed(inputs, st)
        for j in range(v):
            out[j * p + r] = (
                keep * max(0.0, st.ep_forward_s[j] - ep_f[j]),
                keep * max(0.0, st.ep_backward_s[j] - ep_b[j]),
            )
    return out if any(f or b for f, b in out) else None


def weight_times(inputs: StepInputs) -> list[float]:
    """t_w per virtual stage: each chunk's weight-gradient backward (half its backward when the
    inputs do not say)."""
    p, v = inputs.p, inputs.v
    t_w = [0.0] * (p * v)
    for r, st in enumerate(inputs.stages):
        weights = st.backward_weight_s or tuple(b / 2 for b in st.backward_s)
        for j in range(v):
            t_w[j * p + r] = weights[j]
    return t_w


def dp_exposed_s(buckets: Sequence[float], window_s: float) -> tuple[float, float]:
    """(exposed, overlapped) seconds of the gradient buckets against a backward window.

    Buckets run back to back as the backward produces them; what does not fit in the window is
    exposed, and the last bucket always is (its gradients are ready only when backward ends).
    """
    if not buckets:
        return 0.0, 0.0
    total = sum(buckets)
    exposed = max(buckets[-1], total - window_s)
    return exposed, total - exposed


def _dp_tails(inputs: StepInputs) -> list[float]:
    """Per stage, the DP reduction left after its pipeline end (step 3 of the module's list)."""
    tails = []
    for st in inputs.stages:
        # The link is already busy for dp_overlapped_s of each micro-batch's compute.
        free = sum(st.forward_s) + sum(st.backward_s) - st.dp_overlapped_s
        window = min(sum(st.backward_s), max(0.0, free))
        exposed, overlapped = dp_exposed_s(st.dp_buckets_s, window)
        tails.append(exposed + inputs.dp_processor_usage * overlapped)
    return tails


def _after_pipeline_s(inputs: StepInputs) -> float:
    """max_r(optimizer_r + after-step communication_r): the step after the synchronisation."""
    return max(st.optimizer_s + st.after_step_s for st in inputs.stages)


def step_lower_bound_s(inputs: StepInputs) -> float:
    """A lower bound on `pipeline_step(inputs).step_time_s` without running the pipeline.

    Stage r runs its m micro-batches one op at a time, busy_r = m·Σ_j (t_f + t_b)[j·p + r] (the
    times the simulation runs: TP, CP and expert exposure and slowdowns included). It cannot
    start before micro-batch 0's chunk-0 forward passed the stages before it, fill_r =
    Σ_{r'<r} t_f[r']; on a schedule whose backward is one op, its last op is chunk 0's backward
    of the last micro-batch, which then passes the stages before it, drain_r = Σ_{r'<r} t_b[r'],
    before stage 0 ends. So the synchronised pipeline ends no earlier than
    max_r(fill_r + busy_r + max(drain_r, flush_r + tail_r)) (tail_r the stage's DP tail, flush_r
    what it runs before it: `StageInputs.flush_s`), and the step
    adds max_r(optimizer_r + after-step_r) (step 4). Messages are left out: a lower bound still.
    A step estimated below it (an extrapolated pipeline, `planc.pipeline.bounded`) is possible
    only by the extrapolation's error; `planc.search.run` then stops trusting the bound.
    """
    p, m, v = inputs.p, inputs.m, inputs.v
    t_f, t_b = virtual_times(inputs)
    from planc.pipeline import registry  # start-up: as in pipeline_step

    whole_backward = not registry.definition(inputs.pipeline_schedule).splits_backward
    tails = _dp_tails(inputs)
    bounds = []
    for r in range(p):
        busy = m * sum(t_f[j * p + r] + t_b[j * p + r] for j in range(v))
        fill = sum(t_f[:r])
        drain = sum(t_b[:r]) if whole_backward else 0.0
        bounds.append(fill + busy + max(drain, inputs.stages[r].flush_s + tails[r]))
    return max(bounds) + _after_pipeline_s(inputs)


@record
class Overlap:
    """One class of communication on one stage, per step, as the step composes it: seconds run
    hidden behind compute (`behind` says which) and seconds left exposed on the step's path."""

    kind: str  # tp, cp, ep, dp, pp: the process groups it runs on
    behind: str
    hidden_s: float
    exposed_s: float
    slowdown_s: float = 0.0  # compute lost to NCCL's SMs while the hidden part ran


def busiest_stage(inputs: StepInputs) -> int:
    """The stage whose own compute (exposure and slowdowns included) is longest: the one the
    step's compute, TP, CP and expert figures describe."""
    p, v = inputs.p, inputs.v
    t_f, t_b = virtual_times(inputs)
    return max(range(p), key=lambda r: sum(t_f[j * p + r] + t_b[j * p + r] for j in range(v)))


def dp_hidden_s(overlapped_s: float, window_s: float, usage: float) -> float:
    """Seconds of `overlapped_s` DP communication hidden behind a compute window of `window_s`
    that it slows by `usage` while it runs: the compute progresses at 1 − usage beside it, so it
    lasts window/(1 − usage) under communication that outlasts it, all of which hides, and no
    longer. The step's share is then window + usage·hidden + (overlapped − hidden): window +
    usage·overlapped where the communication hides whole, the communication's own length where
    it outlasts the slowed compute (the compute then finishes under it, slowed or not). With
    usage 1 the compute waits the communication out: all of it hides, the window follows."""
    if usage >= 1.0:
        return overlapped_s
    return min(overlapped_s, window_s / (1.0 - usage))


def dp_overlap(inputs: StepInputs, stage: int) -> tuple[float, float]:
    """(hidden, exposed) DP seconds of `stage` per step: per micro-batch the gathers and
    reductions that overlap compute hide as far as the compute, slowed beside them, lasts
    (`dp_hidden_s`), the rest is exposed (`virtual_times`); the last backward's gradient
    buckets hide as `dp_exposed_s`
    places them (`_dp_tails`); what follows the optimizer step is exposed."""
    st, m = inputs.stages[stage], inputs.m
    window = sum(st.forward_s) + sum(st.backward_s)
    hidden = dp_hidden_s(st.dp_overlapped_s, window, inputs.dp_processor_usage)
    free = window - st.dp_overlapped_s
    tail, overlapped = dp_exposed_s(st.dp_buckets_s, min(sum(st.backward_s), max(0.0, free)))
    exposed = m * (st.dp_overlapped_s - hidden) + tail + st.after_step_s
    return m * hidden + overlapped, exposed


def overlaps(
    inputs: StepInputs,
    stage: int,
    pp_total_s: float,
    pp_exposed_s: float,
    alone: Sequence[tuple[int, int]] = (),
) -> tuple[Overlap, ...]:
    """What each class of `stage`'s communication hid and exposed in one step, from the numbers
    the step composes: TP m·(hidden, exposed) per micro-batch (`planc.perf.inputs.tp_per_layer`:
    TE userbuffers' pipelined GEMMs and the weight gradients); CP m·(hidden, exposed) per
    micro-batch (`cp_hidden_per_microbatch`, `cp_exposed_per_microbatch`: behind attention);
    expert exchanges as the schedule hides them (`expert_hidden_s`); DP as `dp_overlap`; TP,
    CP and DP slow the compute they hide behind by the link's processor_usage
    (`virtual_times`, `_dp_tails`), hidden expert exchanges by their link's; pipeline sends
    their op time less what lies on the critical path (`PipelineStep.pp_exposed_s`,
    `_p2p_on_path`), or the stage's blocking transfers, all exposed (DeepSpeed's pipeline
    engine, `StageInputs.p2p_forward_s`). Classes a stage does not run are left out."""
    st, m = inputs.stages[stage], inputs.m
    tp_exposed = m * (sum(st.tp_forward_s) + sum(st.tp_backward_s))
    ep_hidden = expert_hidden_s(inputs, stage, alone)
    ep_exposed = m * (sum(st.ep_forward_s) + sum(st.ep_backward_s)) - ep_hidden
    dp_hidden, dp_exposed = dp_overlap(inputs, stage)
    pp_exposed = min(pp_total_s, pp_exposed_s)
    # Blocking transfers (DeepSpeed's pipeline engine) hide behind nothing: all exposed.
    blocking = m * (st.p2p_forward_s + st.p2p_backward_s)
    found = (
        Overlap(
            "tp",
            "the layer's GEMMs",
            m * (st.tp_overlapped_s + st.tp_copy_engine_s),
            tp_exposed,
            inputs.tp_processor_usage * m * st.tp_overlapped_s,
        ),
        Overlap(
            "cp",
            "attention",
            m * st.cp_overlapped_s,
            m * st.cp_exposed_s,
            inputs.cp_processor_usage * m * st.cp_overlapped_s,
        ),
        Overlap(
            "ep",
            "the other micro-batch's compute",
            ep_hidden,
            ep_exposed,
            inputs.ep_processor_usage * ep_hidden,
        ),
        Overlap(
            "dp",
            "forward and backward",
            dp_hidden,
            dp_exposed,
            inputs.dp_processor_usage * dp_hidden,
        ),
        Overlap("pp", "the other stages' compute", max(0.0, pp_total_s - pp_exposed), pp_exposed)
        if not blocking
        else Overlap("pp", "nothing (blocking sends)", 0.0, blocking),
    )
    return tuple(o for o in found if o.hidden_s + o.exposed_s > 0)


def pipeline_step(inputs: StepInputs) -> PipelineStep:
    """Step time, its parts, tokens/s and MFU for `inputs` (see the module docstring)."""
    p, m, v = inputs.p, inputs.m, inputs.v
    if p < 1 or m < 1 or v < 1:
        raise ValueError(f"need p, m, v ≥ 1, got p={p}, m={m}, v={v}")
    for st in inputs.stages:
        if not len(st.forward_s) == len(st.backward_s) == len(st.tp_forward_s) == v:
            raise ValueError("every stage needs one forward, backward and TP time per chunk")
    t_f, t_b = virtual_times(inputs)
    from planc.pipeline import registry  # start-up: the simulation, not needed by check

    kind = inputs.pipeline_schedule
    extra = alone_extra(inputs)
    t_alone = None
    if extra is not None:
        t_alone = (
            [t + e for t, (e, _) in zip(t_f, extra, strict=True)],
            [t + e for t, (_, e) in zip(t_b, extra, strict=True)],
        )
    if registry.definition(kind).splits_backward:
        t_w = weight_times(inputs)
        t_in = [whole - weight for whole, weight in zip(t_b, t_w, strict=True)]
        if t_alone is not None:
            t_alone = (t_alone[0], [t - w for t, w in zip(t_alone[1], t_w, strict=True)])
        pipe = registry.run(kind, p, m, v, t_f, t_in, inputs.p2p_s, t_w, t_alone)
    else:
        pipe = registry.run(kind, p, m, v, t_f, t_b, inputs.p2p_s, t_alone=t_alone)
    busy = stage_busy(inputs, t_f, t_b, extra, pipe.alone)
    ends, simulated = pipe.stage_end_s, pipe.simulated_m
    tails = _dp_tails(inputs)
    pipeline = max(ends)
    unflushed = max(end + tail for end, tail in zip(ends, tails, strict=True))
    synced = max(
        end + st.flush_s + tail for end, st, tail in zip(ends, inputs.stages, tails, strict=True)
    )
    after = _after_pipeline_s(inputs)
    step = synced + after
    worst = max(range(p), key=lambda r: busy[r])
    compute = busy[worst]
    tp = m * (sum(inputs.stages[worst].tp_forward_s) + sum(inputs.stages[worst].tp_backward_s))
    pp = _p2p_on_path(inputs, pipeline, compute)
    return PipelineStep(
        step_time_s=step,
        pipeline_s=pipeline,
        compute_s=compute,
        # the makespan holds the busiest stage's compute; a difference below 0 is rounding
        bubble_s=max(0.0, pipeline - compute),
        tp_exposed_s=tp,
        cp_exposed_s=m * inputs.stages[worst].cp_exposed_s,
        ep_exposed_s=m
        * (sum(inputs.stages[worst].ep_forward_s) + sum(inputs.stages[worst].ep_backward_s))
        - expert_hidden_s(inputs, worst, pipe.alone),
        ep_hidden_s=expert_hidden_s(inputs, worst, pipe.alone),
        expert_host_s=m
        * (sum(inputs.stages[worst].host_forward_s) + sum(inputs.stages[worst].host_backward_s)),
        recompute_s=m * sum(inputs.stages[worst].recompute_s),
        offload_wait_s=m * inputs.stages[worst].offload_wait_s,
        pp_exposed_s=pp,
        dp_exposed_s=unflushed - pipeline + max(st.after_step_s for st in inputs.stages),
        flush_exposed_s=synced - unflushed,
        optimizer_s=max(st.optimizer_s for st in inputs.stages),
        tokens_per_s=inputs.tokens / step if step > 0 else 0.0,
        mfu=inputs.model_flops / (step * inputs.peak_flops) if inputs.peak_flops > 0 else 0.0,
        stage_end_s=ends,
        simulated_m=simulated,
        pipeline=pipe,
    )


def stage_busy(
    inputs: StepInputs,
    t_f: Sequence[float],
    t_b: Sequence[float],
    extra: Sequence[tuple[float, float]] | None,
    alone: Sequence[tuple[int, int]],
) -> list[float]:
    """Each stage's own compute per step: m passes of each chunk each way, those run alone
    (`alone`, `PipelineTime.alone`) longer by `extra` (`alone_extra`)."""
    p, v, m = inputs.p, inputs.v, inputs.m
    busy = [m * sum(t_f[j * p + r] + t_b[j * p + r] for j in range(v)) for r in range(p)]
    if extra is not None and alone:
        for i, ((n_f, n_b), (e_f, e_b)) in enumerate(zip(alone, extra, strict=True)):
            busy[i % p] += n_f * e_f + n_b * e_b
    return busy


def _p2p_on_path(inputs: StepInputs, pipeline: float, compute: float) -> float:
    """The p2p share of the bubble: 2·(p·v − 1) messages on the fill-and-drain path at most."""
    if inputs.p == 1:
        return 0.0
    return min(pipeline - compute, 2 * (inputs.p * inputs.v - 1) * inputs.p2p_s)
