"""Pipeline-parallel schedules as data: per stage, the ordered ops of one step.

An op is a forward (``F``), a backward (``B``) or a weight-gradient backward (``W``) of one
micro-batch on one model chunk. A schedule that splits the backward (the zero-bubble family,
Qi et al. 2024) runs ``B`` as the input-gradient part and ``W`` as the weight-gradient part;
the two schedules built here keep the fused backward: their ``B`` is the whole backward and
they emit no ``W``. Both are "flush" schedules (every optimizer step drains the pipeline):

* 1F1B (PipeDream-Flush; Narayanan et al. 2021 §2.2; Megatron
  ``forward_backward_pipelining_without_interleaving``): stage ``r`` runs
  ``min(p − r − 1, m)`` warm-up forwards, then ``m − warmup`` (forward, backward) pairs,
  then the remaining backwards.
* Interleaved 1F1B (Narayanan et al. 2021 §2.2.1; Megatron
  ``forward_backward_pipelining_with_interleaving``): every stage holds ``v`` model chunks;
  stage ``r`` chunk ``j`` is virtual stage ``j·p + r``. The same warm-up / 1F1B / cool-down
  structure runs over ``m·v`` *virtual* micro-batches, mapped to (chunk, micro-batch) in
  groups of ``p`` micro-batches.

Communication is explicit: an op that needs a tensor from another virtual stage carries a
``recv`` :class:`Link`, an op whose output goes on carries a ``send`` :class:`Link`. A link is
the identity of one point-to-point message, so a send and its receive carry *equal* links;
:func:`validate_schedule` checks that they pair up one to one.

Schedules are chosen by name in :mod:`planc.pipeline.registry`; :func:`build_schedule` is the
default schedule for ``v`` (:meth:`planc.vocab.ScheduleKind.default`). Pure and stdlib-only so
that the plan compiler can import it cheaply.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal, NamedTuple, TypeAlias

from planc.pipeline.counts import check_sizes as _check_sizes
from planc.pipeline.counts import num_warmup
from planc.pipeline.placement import path_length, stage_of, virtual_stage
from planc.record import record
from planc.vocab import ChunkPlacement, ScheduleKind

#: F forward, B backward (input gradient, or the whole backward when the schedule emits no W),
#: W weight-gradient backward.
Kind: TypeAlias = Literal["F", "B", "W"]
Phase: TypeAlias = Literal["warmup", "steady", "cooldown"]
Direction: TypeAlias = Literal["fwd", "bwd"]

#: Identity of a compute op inside one schedule: (kind, micro-batch, stage, chunk).
OpKey: TypeAlias = tuple[str, int, int, int]


class Link(NamedTuple):
    """One point-to-point message: a micro-batch's boundary tensor between two virtual stages.

    ``direction`` is ``"fwd"`` for activations (virtual stage s → s+1) and ``"bwd"`` for
    activation gradients (s+1 → s). The sending op and the receiving op carry equal links,
    which is what lets a simulator pair every send with exactly one receive. A named tuple
    rather than a dataclass because links are hashed and compared in bulk (tens of thousands
    per schedule) and tuples do that in C.
    """

    direction: Direction
    microbatch: int
    src_stage: int
    src_chunk: int
    dst_stage: int
    dst_chunk: int


@dataclass(frozen=True, slots=True)
class Op:
    """Forward (``"F"``), backward (``"B"``) or weight-gradient (``"W"``) compute of one
    micro-batch on one model chunk.

    ``recv`` is the message this op waits for before it can start (``None`` for the very
    first virtual stage's forward and the very last virtual stage's backward, whose inputs
    are local); ``send`` is the message it emits when it ends (``None`` at the other end). A
    ``W`` op has neither: it needs only its own ``B`` on the same stage.
    """

    kind: Kind
    microbatch: int
    chunk: int
    phase: Phase
    recv: Link | None = None
    send: Link | None = None
    # Runs overlapped with the next op on its stage (DualPipe's forward-and-backward chunk
    # pair): the two start together, once the inputs of both are there.
    paired: bool = False
    # A backward that runs its weight gradient as well (B + W in one op, its send after both),
    # in a schedule that splits other backwards (DualPipeV's backwards outside zero-bubble).
    whole: bool = False

    @property
    def label(self) -> str:
        """Short human name, e.g. ``F3c1`` = forward of micro-batch 3 on chunk 1."""
        return f"{self.kind}{self.microbatch}c{self.chunk}"


@record
class Schedule:
    """The ops each of the ``p`` stages runs, in order, for ``m`` micro-batches and ``v`` chunks.

    ``kind`` names the schedule the ops were built from (``None`` for a hand-made op list).
    """

    p: int
    m: int
    v: int
    stages: tuple[tuple[Op, ...], ...]
    kind: ScheduleKind | None = None
    placement: ChunkPlacement = ChunkPlacement.LOOP  # which virtual stage each chunk holds

    def __post_init__(self) -> None:
        _check_sizes(self.p, self.m, self.v)
        if len(self.stages) != self.p:
            raise ValueError(
                f"a schedule for p={self.p} stages needs {self.p} op lists, got {len(self.stages)}"
            )
        if self.placement is not ChunkPlacement.LOOP and self.v != 2:
            raise ValueError(f"the {self.placement} placement holds two chunks, got v={self.v}")

    @property
    def interleaved(self) -> bool:
        return self.v > 1

    @property
    def splits_backward(self) -> bool:
        """Whether the backward runs as two ops, B (input gradient) and W (weight gradient)."""
        return any(op.kind == "W" for ops in self.stages for op in ops)


# --------------------------------------------------------------------------- sizes


def _check_interleaved(p: int, m: int, v: int) -> None:
    """Megatron-LM's preconditions for the interleaved schedule: a pipeline (`megatron/training/
    arguments.py` validate_args: "pipeline-model-parallel size should be greater than 1" with
    overlap_p2p_comm, its default; greater than 2 without, Megatron's own p2p limit that PLC010
    checks on the spec) and whole groups of p micro-batches
    (`megatron/core/pipeline_parallel/schedules.py`,
    forward_backward_pipelining_with_interleaving: microbatch_group_size_per_vp_stage, default
    p)."""
    if p < 2:
        raise ValueError(
            f"the interleaved schedule (v={v}) needs at least 2 pipeline stages, got p={p}"
        )
    if m % p != 0:
        # Megatron forms micro-batch groups of size p per virtual stage; a short last group
        # leaves dependency bubbles and Megatron rejects it (default group size p).
        raise ValueError(
            f"the interleaved schedule needs the micro-batch count to be a multiple of the "
            f"pipeline size: m={m} is not a multiple of p={p}"
        )


# --------------------------------------------------------------------------- construction


def build_schedule(p: int, m: int, v: int = 1) -> Schedule:
    """The default schedule for ``v`` (:meth:`ScheduleKind.default`): Megatron's 1F1B
    (``v == 1``) or interleaved 1F1B (``v > 1``). By name: :func:`planc.pipeline.registry.build`.

    Raises ``ValueError`` for non-positive sizes and, when ``v > 1``, for ``p < 2`` or
    ``m % p != 0`` (Megatron's own preconditions).
    """
    _check_sizes(p, m, v)
    return one_f_one_b(p, m, v) if v == 1 else interleaved_1f1b(p, m, v)


def one_f_one_b(p: int, m: int, v: int = 1) -> Schedule:
    """1F1B (PipeDream-Flush; Narayanan et al. 2021 §2.2; Megatron-LM
    `megatron/core/pipeline_parallel/schedules.py` forward_backward_pipelining_without_interleaving):
    ``min(p − r − 1, m)`` warm-up forwards, (forward, backward) pairs, the remaining backwards.
    One model chunk per stage: ``v`` must be 1."""
    _check_sizes(p, m, v)
    if v != 1:
        raise ValueError(f"the 1F1B schedule runs one model chunk per stage, got v={v}")
    return _flush(p, m, v, ScheduleKind.ONE_F_ONE_B)


def interleaved_1f1b(p: int, m: int, v: int) -> Schedule:
    """Interleaved 1F1B (Narayanan et al. 2021 §2.2.1; Megatron-LM
    forward_backward_pipelining_with_interleaving) over ``v > 1`` model chunks per stage."""
    _check_sizes(p, m, v)
    if v == 1:
        raise ValueError("the interleaved schedule needs v > 1 model chunks per stage, got v=1")
    _check_interleaved(p, m, v)
    return _flush(p, m, v, ScheduleKind.INTERLEAVED_1F1B)


def gpipe(p: int, m: int, v: int = 1) -> Schedule:
    """GPipe (Huang et al. 2019; PyTorch torch.distributed.pipelining ScheduleGPipe): every
    stage runs all m forwards, then all m backwards in micro-batch order: the flush pattern with
    a warm-up of m. One model chunk per stage: ``v`` must be 1."""
    _check_sizes(p, m, v)
    if v != 1:
        raise ValueError(f"the GPipe schedule runs one model chunk per stage, got v={v}")
    stages = tuple(_stage_ops(p, m, v, rank, m * v) for rank in range(p))
    return Schedule(p=p, m=m, v=v, stages=stages, kind=ScheduleKind.GPIPE)


def combined_1f1b(p: int, m: int, v: int) -> Schedule:
    """Megatron-Core's combined 1F1B (`--overlap-moe-expert-parallel-comm`; Megatron-LM
    docs/user-guide/features/moe_a2a_overlap.md, `combined_1f1b_schedule_for_interleaved_
    pipelining`): interleaved 1F1B whose steady state runs micro-batch i + 1's forward together
    with micro-batch i's backward, so that one's expert all-to-all hides behind the other's
    compute. It runs one more warm-up forward than interleaved 1F1B (`get_pp_rank_microbatches`:
    num_warmup_microbatches + 1 with overlap_moe_expert_parallel_comm), capped at m·v, and needs
    the interleaved schedule's layout (v > 1, p > 1, m a multiple of p), or no pipeline at all
    (p = 1, v = 1: `combined_1f1b_schedule_for_no_pipelining`, the first forward alone, each
    next forward with the backward before it, the last backward alone)."""
    _check_sizes(p, m, v)
    if p == 1 and v == 1:
        return Schedule(
            p=1,
            m=m,
            v=1,
            stages=(_stage_ops(1, m, 1, 0, 1, pair_steady=True),),
            kind=ScheduleKind.COMBINED_1F1B,
        )
    if v == 1:
        raise ValueError(
            "the combined 1F1B schedule needs v > 1 model chunks per stage, or no pipeline"
        )
    _check_interleaved(p, m, v)
    stages = tuple(
        _stage_ops(p, m, v, rank, min(num_warmup(p, m, v, rank) + 1, m * v), pair_steady=True)
        for rank in range(p)
    )
    return Schedule(p=p, m=m, v=v, stages=stages, kind=ScheduleKind.COMBINED_1F1B)


def zb_h1(p: int, m: int, v: int = 1) -> Schedule:
    """ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", ICLR, arXiv 2401.10241 §2.1):
    1F1B with the backward split into B (input gradient) and W (weight gradient). Stage r runs
    1F1B's min(p − r − 1, m) warm-up forwards and its (F, B) pairs, and each micro-batch's W
    r backwards after its B; the W left over run at the end. Stage r so holds at most
    (p − r) + r = p micro-batches (1F1B's stage-0 peak: memory no higher than 1F1B's), and the W
    fill the cool-down's idle time: the bubble is (p − 1)(F + B − W) against 1F1B's
    (p − 1)(F + B + W). One model chunk per stage: ``v`` must be 1."""
    _check_sizes(p, m, v)
    if v != 1:
        raise ValueError(f"the ZB-H1 schedule runs one model chunk per stage, got v={v}")
    return Schedule(
        p=p, m=m, v=v, stages=tuple(_zb_h1_ops(p, m, r) for r in range(p)), kind=ScheduleKind.ZB_H1
    )


def _zb_h1_ops(p: int, m: int, rank: int) -> tuple[Op, ...]:
    warmup, lag = min(p - rank - 1, m), rank
    ops = [_make_op(p, 1, rank, "F", k, "warmup") for k in range(warmup)]
    done = 0  # W ops emitted, in micro-batch order
    for k in range(m):
        phase: Phase = "steady" if k < m - warmup else "cooldown"
        if phase == "steady":
            ops.append(_make_op(p, 1, rank, "F", warmup + k, "steady"))
        ops.append(_make_op(p, 1, rank, "B", k, phase))
        if k >= lag:
            ops.append(_make_op(p, 1, rank, "W", done, phase))
            done += 1
    ops.extend(_make_op(p, 1, rank, "W", k, "cooldown") for k in range(done, m))
    return tuple(ops)


def dualpipe_v(p: int, m: int, v: int = 2) -> Schedule:
    """DualPipeV (DeepSeek, deepseek-ai/DualPipe `dualpipe/dualpipev.py`, DualPipeV.step; the
    "cut-in-half" DualPipe of DualPipe #8; PyTorch `ScheduleDualPipeV`): p ranks, two chunks each
    in the V placement (rank r holds virtual stages r and 2p − 1 − r), m ≥ 2p micro-batches.
    Rank r runs the reference's eight steps: F0 × 2(p−r−1); (F0 F1) × (r+1); (B1 W1 F1) ×
    (p−r−1) with zero-bubble backwards; (F0 B1 F1 B0) × (m − 2p + r + 1); (B1 F1 B0) ×
    (p−r−1); (B1 B0) × (r+1), the second half with the W deferred (from B1 on odd ranks, from
    B0 on even ones); (W B0) × (p−r−1) with B0 deferring its W; W × (r+1). Deferred W run in
    the order their B ran (WeightGradStore's queue); a backward that is not zero-bubble is one
    `whole` op (B + W, its gradient sent when both are done). A forward and backward the reference runs
    overlapped (_forward_backward_chunk) are a `paired` F: both start when the inputs of both
    are there, and take F + B (the simulator gives the overlap no credit; F&B = F + B)."""
    _check_sizes(p, m, v)
    if v != 2:
        raise ValueError(f"DualPipeV runs two model chunks per stage, got v={v}")
    if m < 2 * p:
        raise ValueError(f"DualPipeV needs m ≥ 2p micro-batches (m={m}, p={p})")
    stages = tuple(_DualPipeV(p, m, r).ops() for r in range(p))
    return Schedule(
        p=p, m=m, v=2, stages=stages, kind=ScheduleKind.DUALPIPE_V, placement=ChunkPlacement.V
    )


def dualpipe(p: int, m: int, v: int = 2) -> Schedule:
    """DualPipe (DeepSeek-V3 technical report §3.2.1; deepseek-ai/DualPipe `dualpipe/dualpipe.py`,
    DualPipe.step): two pipelines run at once in opposite directions, m/2 micro-batches each.
    Rank r holds stage r of the one that runs from rank 0 (chunk 0) and stage p − 1 − r of the
    one that runs back from rank p − 1 (chunk 1): two copies of the parameters. Every rank runs
    DualPipeV's eight steps with p/2 ranks, m/2 micro-batches and the half rank
    h = min(r, p − 1 − r) (the reference's num_half_ranks, half_num_chunks, half_rank), its two
    phases swapped on the second half of the ranks (phase ^= is_in_second_half); micro-batches
    0 … m/2 − 1 run in direction 0, m/2 … m − 1 in direction 1. Needs p and m even, m ≥ 2p (the
    reference's asserts). Not a spec schedule: planc's memory, FLOPs and traffic do not model
    the second copy, nor the embedding and the head on both end ranks."""
    _check_sizes(p, m, v)
    if v != 2:
        raise ValueError(f"DualPipe runs two model chunks per stage, got v={v}")
    if p % 2 or m % 2 or m < 2 * p:
        raise ValueError(f"DualPipe needs p and m even and m ≥ 2p (p={p}, m={m})")
    stages = tuple(
        _DualPipeV(p // 2, m // 2, min(r, p - 1 - r), (p, r, int(r >= p // 2))).ops()
        for r in range(p)
    )
    return Schedule(p=p, m=m, v=2, stages=stages, placement=ChunkPlacement.DUAL)


def zb_v(p: int, m: int, v: int = 2) -> Schedule:
    """ZB-V (Qi et al. 2024 §6; PyTorch torch.distributed.pipelining ScheduleZBVZeroBubble,
    _calculate_single_rank_operations): two chunks a rank in the V placement (rank r holds
    virtual stages r and 2p − 1 − r), the backward split into B (input) and W (weight). Rank r
    runs F0 × (2(p − r) − 1); (F1 F0) × r; (F1 B1 W1) × (p − r); then rounds of (F0 B0 W0 F1 B1
    W1) until every forward ran (F0 left out once all m ran); then (B0 B1) × r; (B0 W0) × (p − r),
    the W of chunk 0 in order; the W of chunk 1 left, then of chunk 0. Needs m ≥ 2p − 1 (PyTorch
    pads fewer micro-batches with empty slots, which planc does not expand)."""
    _check_sizes(p, m, v)
    if v != 2:
        raise ValueError(f"ZB-V runs two model chunks per stage, got v={v}")
    if m < 2 * p - 1:
        raise ValueError(f"ZB-V needs m ≥ 2p − 1 micro-batches (m={m}, p={p})")
    stages = tuple(_zb_v_ops(p, m, r) for r in range(p))
    return Schedule(p=p, m=m, v=2, stages=stages, kind=ScheduleKind.ZB_V, placement=ChunkPlacement.V)


def _zb_v_ops(p: int, m: int, rank: int) -> tuple[Op, ...]:
    ops: list[Op] = []
    count = {("F", 0): 0, ("F", 1): 0, ("B", 0): 0, ("B", 1): 0, ("W", 0): 0, ("W", 1): 0}

    def emit(kind: Kind, chunk: int, phase: Phase) -> None:
        microbatch = count[(kind, chunk)]
        count[(kind, chunk)] += 1
        recv, send = _links(p, 2, rank, chunk, microbatch, kind, ChunkPlacement.V)
        ops.append(Op(kind, microbatch, chunk, phase, recv, send))

    def run(steps: str, times: int, phase: Phase) -> None:
        for _ in range(times):
            for step in steps.split():
                emit(step[0], int(step[1]), phase)  # type: ignore[arg-type]

    run("F0", 2 * (p - rank) - 1, "warmup")
    run("F1 F0", rank, "warmup")
    run("F1 B1 W1", p - rank, "warmup")
    while count[("F", 1)] < count[("F", 0)] or count[("F", 0)] < m:
        run("F0" if count[("F", 0)] < m else "", 1, "steady")
        run("B0 W0 F1 B1 W1", 1, "steady")
    run("B0 B1", rank, "cooldown")
    for _ in range(p - rank):
        emit("B", 0, "cooldown")
        emit("W", 0, "cooldown")
    run("W1", m - count[("W", 1)], "cooldown")
    run("W0", m - count[("W", 0)], "cooldown")
    return tuple(ops)


class _DualPipeV:
    """One rank's DualPipeV op list, built step by step as dualpipev.py runs it.

    The steps count in (p, m, rank); DualPipe runs the same steps with p/2, m/2 and
    min(r, p − 1 − r) (`dualpipe`): `ranks` and `stage` are then the real pipeline and rank,
    `flip` swaps the two phases (ranks in the second half), and direction 1's micro-batches are
    numbered after direction 0's (`offset`)."""

    def __init__(
        self,
        p: int,
        m: int,
        rank: int,
        dual: tuple[int, int, int] | None = None,  # (ranks, stage, flip) of DualPipe
    ) -> None:
        self.p, self.m, self.rank = p, m, rank
        self.ranks, self.stage, self.flip = dual or (p, rank, 0)
        self.placement = ChunkPlacement.V if dual is None else ChunkPlacement.DUAL
        self.offset = 0 if dual is None else m
        self.next_f, self.next_b = [0, 0], [0, 0]
        self.deferred: list[tuple[int, int]] = []  # (micro-batch, chunk) of pending W, in order
        self.out: list[Op] = []

    def _op(
        self,
        kind: Kind,
        local: int,
        phase_chunk: int,
        phase: Phase,
        paired: bool = False,
        whole: bool = False,
    ) -> tuple[int, int]:
        chunk = phase_chunk ^ self.flip
        microbatch = local + (self.offset if chunk == 1 else 0)
        recv, send = _links(self.ranks, 2, self.stage, chunk, microbatch, kind, self.placement)
        self.out.append(Op(kind, microbatch, chunk, phase, recv, send, paired, whole))
        return microbatch, chunk

    def f(self, chunk: int, phase: Phase, paired: bool = False) -> None:
        """A forward; `paired`: overlapped with the backward that follows it (the reference's
        _forward_backward_chunk)."""
        self._op("F", self.next_f[chunk], chunk, phase, paired)
        self.next_f[chunk] += 1

    def b(self, chunk: int, phase: Phase, zero_bubble: bool = False) -> None:
        done = self._op("B", self.next_b[chunk], chunk, phase, whole=not zero_bubble)
        self.next_b[chunk] += 1
        if zero_bubble:
            self.deferred.append(done)

    def w(self, phase: Phase) -> None:
        microbatch, chunk = self.deferred.pop(0)
        recv, send = _links(self.ranks, 2, self.stage, chunk, microbatch, "W", self.placement)
        self.out.append(Op("W", microbatch, chunk, phase, recv, send))

    def ops(self) -> tuple[Op, ...]:
        p, m, r = self.p, self.m, self.rank
        for _ in range(2 * (p - r - 1)):  # step 1
            self.f(0, "warmup")
        for _ in range(r + 1):  # step 2
            self.f(0, "warmup")
            self.f(1, "warmup")
        for _ in range(p - r - 1):  # step 3
            self.b(1, "warmup", zero_bubble=True)
            self.w("warmup")
            self.f(1, "warmup")
        for i in range(m - 2 * p + r + 1):  # step 4, the steady state
            # The last rank's first F0 and B1 run apart ("to further reduce bubble size").
            self.f(0, "steady", paired=not (i == 0 and r == p - 1))
            self.b(1, "steady")
            self.f(1, "steady", paired=True)
            self.b(0, "steady")
        for _ in range(p - r - 1):  # step 5
            self.b(1, "cooldown")
            self.f(1, "cooldown", paired=True)
            self.b(0, "cooldown")
        self._step_6()
        for _ in range(p - r - 1):  # step 7
            self.w("cooldown")
            self.b(0, "cooldown", zero_bubble=True)
        while self.deferred:  # step 8: the r + 1 left
            self.w("cooldown")
        return tuple(self.out)

    def _step_6(self) -> None:
        """(B1 B0) × (r + 1); from the pair r+1 // 2 on, zero-bubble: at its B1 on odd ranks, at
        its B0 on even ones."""
        steps, odd = self.rank + 1, self.rank % 2 == 1
        zero_bubble = False
        for i in range(steps):
            if i == steps // 2 and odd:
                zero_bubble = True
            self.b(1, "cooldown", zero_bubble)
            if i == steps // 2 and not odd:
                zero_bubble = True
            self.b(0, "cooldown", zero_bubble)


def _flush(p: int, m: int, v: int, kind: ScheduleKind) -> Schedule:
    """Warm-up, steady and cool-down of every stage, Megatron's warm-up count."""
    stages = tuple(_stage_ops(p, m, v, rank, num_warmup(p, m, v, rank)) for rank in range(p))
    return Schedule(p=p, m=m, v=v, stages=stages, kind=kind)


def _virtual_microbatch(p: int, v: int, k: int, forward: bool) -> tuple[int, int]:
    """(chunk, micro-batch) of the ``k``-th forward or backward on a stage.

    Megatron's table with group size ``p``: micro-batches go in groups of ``p``; a group runs
    through chunk 0, then chunk 1, … (forwards) or chunk v−1, v−2, … (backwards), which keeps
    every chunk busy with a full group while the next group is still in the pipe.
    """
    group_chunk = (k // p) % v
    chunk = group_chunk if forward else v - 1 - group_chunk
    microbatch = (k // (p * v)) * p + k % p
    return chunk, microbatch


def _stage_ops(
    p: int, m: int, v: int, rank: int, warmup: int, pair_steady: bool = False
) -> tuple[Op, ...]:
    """``warmup`` forwards, steady (forward, backward) pairs, cool-down backwards for one stage;
    `pair_steady`: each steady forward is `paired` with the backward after it (combined 1F1B's
    one call for both, which starts once the inputs of both are there)."""
    total = m * v
    steady = total - warmup
    ops: list[Op] = [_make_op(p, v, rank, "F", k, "warmup") for k in range(warmup)]
    for k in range(steady):
        # In the steady state the forward runs first: its output can travel downstream while
        # this stage computes the backward (Megatron's order within a 1F1B step).
        ops.append(_make_op(p, v, rank, "F", warmup + k, "steady", paired=pair_steady))
        ops.append(_make_op(p, v, rank, "B", k, "steady"))
    ops.extend(_make_op(p, v, rank, "B", k, "cooldown") for k in range(steady, total))
    return tuple(ops)


def _make_op(
    p: int, v: int, rank: int, kind: Kind, k: int, phase: Phase, paired: bool = False
) -> Op:
    chunk, microbatch = _virtual_microbatch(p, v, k, forward=kind == "F")
    recv, send = _links(p, v, rank, chunk, microbatch, kind)
    return Op(
        kind=kind,
        microbatch=microbatch,
        chunk=chunk,
        phase=phase,
        recv=recv,
        send=send,
        paired=paired,
    )


def _links(
    p: int,
    v: int,
    rank: int,
    chunk: int,
    microbatch: int,
    kind: Kind,
    placement: ChunkPlacement = ChunkPlacement.LOOP,
) -> tuple[Link | None, Link | None]:
    """(recv, send) links of one op between neighbouring virtual stages (`virtual_stage`). A
    weight-gradient op has none."""
    here = virtual_stage(p, rank, chunk, placement)
    first, last = here == 0, here == path_length(p, v, placement) - 1
    if kind == "W":
        return None, None
    ends = (placement, chunk)
    if kind == "F":
        recv = None if first else _link("fwd", microbatch, p, here - 1, here, *ends)
        send = None if last else _link("fwd", microbatch, p, here, here + 1, *ends)
    else:
        # Backward runs the chain the other way: gradient in from s+1, out to s−1.
        recv = None if last else _link("bwd", microbatch, p, here + 1, here, *ends)
        send = None if first else _link("bwd", microbatch, p, here, here - 1, *ends)
    return recv, send


def _link(
    direction: Direction,
    microbatch: int,
    p: int,
    src: int,
    dst: int,
    placement: ChunkPlacement = ChunkPlacement.LOOP,
    chunk: int = 0,
) -> Link:
    src_stage, src_chunk = stage_of(p, src, placement, chunk)
    dst_stage, dst_chunk = stage_of(p, dst, placement, chunk)
    return Link(
        direction=direction,
        microbatch=microbatch,
        src_stage=src_stage,
        src_chunk=src_chunk,
        dst_stage=dst_stage,
        dst_chunk=dst_chunk,
    )


# --------------------------------------------------------------------------- queries


def in_flight(schedule: Schedule, rank: int) -> int:
    """Peak number of forward activations stage ``rank`` holds at once.

    Counted from the op list: a forward adds one (micro-batch, chunk) activation set, its
    last backward op frees it (``W`` when the schedule splits the backward, which still needs
    the layer inputs, else ``B``). For 1F1B this is ``min(p − r, m)``; interleaved, Megatron's
    warm-up + 1 capped at ``m·v`` (each unit then being one chunk's ``L/(p·v)`` layers).
    """
    if not 0 <= rank < schedule.p:
        raise ValueError(f"stage rank must be in 0..{schedule.p - 1}, got {rank}")
    frees = _freeing_kind(schedule)
    held = peak = 0
    for op in schedule.stages[rank]:
        held += _held_change(op, frees)
        peak = max(peak, held)
    return peak


def _freeing_kind(schedule: Schedule) -> Kind:
    """The op that releases a micro-batch's activations: its W (or a `whole` B), or its B
    without W ops."""
    return "W" if schedule.splits_backward else "B"


def _held_change(op: Op, frees: Kind) -> int:
    return 1 if op.kind == "F" else -1 if op.kind == frees or op.whole else 0


def held_at_peak(
    schedule: Schedule, rank: int, weights: tuple[int, ...] | None = None
) -> tuple[int, ...]:
    """Activations of each chunk stage ``rank`` holds when ``Σ weights[c]·held[c]`` peaks.

    ``weights[c]`` is what one micro-batch of chunk ``c`` keeps (e.g. bytes; chunks can
    differ when layers are uneven); the default weighs every chunk 1, and then the counts sum
    to :func:`in_flight`. Ties go to the earliest moment in the schedule.
    """
    if not 0 <= rank < schedule.p:
        raise ValueError(f"stage rank must be in 0..{schedule.p - 1}, got {rank}")
    weight = (1,) * schedule.v if weights is None else weights
    if len(weight) != schedule.v:
        raise ValueError(f"need one weight per chunk (v={schedule.v}), got {len(weight)}")
    frees = _freeing_kind(schedule)
    held = [0] * schedule.v
    best, best_total = tuple(held), 0
    for op in schedule.stages[rank]:
        held[op.chunk] += _held_change(op, frees)
        total = sum(w * h for w, h in zip(weight, held, strict=True))
        if total > best_total:
            best, best_total = tuple(held), total
    return best


def op_key(stage: int, op: Op) -> OpKey:
    """Identity of ``op`` when run on ``stage``: unique within a valid schedule."""
    return (op.kind, op.microbatch, stage, op.chunk)


def producer_key(link: Link) -> OpKey:
    """The op that emits ``link``: a forward for activations, a backward for gradients."""
    kind = "F" if link.direction == "fwd" else "B"
    return (kind, link.microbatch, link.src_stage, link.src_chunk)


def validate_schedule(schedule: Schedule) -> tuple[Link, ...]:
    """Check that ``schedule`` is complete and its messages pair up; return the links.

    Every stage must run each (kind, micro-batch, chunk) exactly once (F and B, and W when
    the schedule emits any W); every op's links must be the ones its virtual stage implies;
    and each sent link must be received exactly once, by an op on the link's destination
    stage. Raises ``ValueError`` naming the first problem. Ordering (deadlock) is not checked
    here: see :func:`planc.pipeline.simulate`.
    """
    kinds = ("F", "B", "W") if schedule.splits_backward else ("F", "B")
    expected: Counter[tuple[str, int, int]] = Counter(
        (kind, mb, chunk)
        for kind in kinds
        for mb in range(schedule.m)
        for chunk in range(schedule.v)
        if schedule.placement is not ChunkPlacement.DUAL or chunk == _direction(schedule, mb)
    )
    for rank, ops in enumerate(schedule.stages):
        _check_stage_ops(schedule, rank, ops, expected)
    return _match_links(schedule)


def _direction(schedule: Schedule, microbatch: int) -> int:
    """DualPipe's direction (chunk) of a micro-batch: the first m/2 run rank 0 → p − 1."""
    return 0 if microbatch < schedule.m // 2 else 1


def _check_stage_ops(
    schedule: Schedule, rank: int, ops: tuple[Op, ...], expected: Counter[tuple[str, int, int]]
) -> None:
    got: Counter[tuple[str, int, int]] = Counter((op.kind, op.microbatch, op.chunk) for op in ops)
    got.update(("W", op.microbatch, op.chunk) for op in ops if op.whole)  # B + W in one op
    if got != expected:
        extra = sorted((got - expected).elements())
        missing = sorted((expected - got).elements())
        raise ValueError(
            f"stage {rank} must run each forward and backward once per micro-batch and chunk; "
            f"duplicate or unknown ops: {extra[:5]}, missing ops: {missing[:5]}"
        )
    for op in ops:
        want = _links(
            schedule.p, schedule.v, rank, op.chunk, op.microbatch, op.kind, schedule.placement
        )
        if (op.recv, op.send) != want:
            here = virtual_stage(schedule.p, rank, op.chunk, schedule.placement)
            raise ValueError(
                f"stage {rank} op {op.label}: links (recv={op.recv}, send={op.send}) do not "
                f"match its virtual stage {here} (expected {want})"
            )


def _match_links(schedule: Schedule) -> tuple[Link, ...]:
    sends: Counter[Link] = Counter()
    recvs: Counter[Link] = Counter()
    for rank, ops in enumerate(schedule.stages):
        for op in ops:
            if op.send is not None:
                _check_peer(rank, op, op.send, op.send.src_stage, "sends")
                sends[op.send] += 1
            if op.recv is not None:
                _check_peer(rank, op, op.recv, op.recv.dst_stage, "receives")
                recvs[op.recv] += 1
    if sends != recvs:
        unmatched = sorted((sends - recvs).elements())
        orphans = sorted((recvs - sends).elements())
        raise ValueError(
            f"unmatched point-to-point messages: sent but never received {unmatched[:5]}, "
            f"received but never sent {orphans[:5]}"
        )
    doubled = sorted(link for link, n in sends.items() if n > 1)
    if doubled:
        raise ValueError(f"messages sent more than once: {doubled[:5]}")
    return tuple(sends)  # in schedule order: stage by stage, op by op


def _check_peer(rank: int, op: Op, link: Link, own_end: int, verb: str) -> None:
    if own_end != rank:
        raise ValueError(f"stage {rank} op {op.label} {verb} {link}, whose end is stage {own_end}")
